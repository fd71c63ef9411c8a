"""An MLP training step (forward, backward, SGD update) side by side: mirax compiled
(`mr.compile` capturing model and optimizer state) vs mirax uncompiled (op by op) vs
jax.jit (if jax imports; a bench-only extra).

    .venv/bin/python bench/train_step.py [--batch 256] [--hidden 512] [--rounds 15]

Prints medians of interleaved rounds (ms per step) and the ratios. A pause (`--pause`,
default BENCH_PAUSE or 0.3 s) before each contender's steps lets the thread pools of the
one before it (OpenMP's, XLA's) stop spinning: on 2 cores they slowed the next one.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from functools import partial

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _host  # noqa: E402,F401  (the peers' environment, before numpy and jax load: _host.cap_peers)

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import mirax as mr  # noqa: E402
import mirax.nn as nn  # noqa: E402
import mirax.optimizers as optim  # noqa: E402
sys.path.insert(0, os.path.dirname(__file__))
from _host import describe  # noqa: E402


def make_mirax(din, hidden, dout, lr):
    model = nn.Sequential(nn.Linear(din, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                          nn.Linear(hidden, dout))
    optimizer = optim.SGD(learning_rate=lr)

    def loss_fn(model, x, y):
        return nn.losses.cross_entropy(model(x), y, reduction="mean")

    grad_fn = nn.value_and_grad(model, loss_fn)

    def step(x, y):
        loss, grads = grad_fn(model, x, y)
        optimizer.update(model, grads)
        return loss
    optimizer.init(model.trainable_parameters())
    state = [model.state, optimizer.state]
    compiled = mr.compile(step, inputs=state, outputs=state)

    def run_eager(x, y):
        loss = step(x, y)
        mr.eval(loss, model.parameters())

    def run_compiled(x, y):
        loss = compiled(x, y)
        mr.eval(loss, state)
    return model, run_eager, run_compiled


def make_jax(params_np, lr):
    import jax
    import jax.numpy as jnp

    def forward(p, x):
        h = jax.nn.relu(x @ p[0] + p[1])
        h = jax.nn.relu(h @ p[2] + p[3])
        return h @ p[4] + p[5]

    def loss(p, x, y):
        logits = forward(p, x)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))

    @jax.jit
    def step(p, x, y):
        value, g = jax.value_and_grad(loss)(p, x, y)
        return value, [a - lr * b for a, b in zip(p, g)]

    state = [jnp.asarray(a) for a in params_np]

    def run(x, y):
        nonlocal state
        value, state = step(state, x, y)
        value.block_until_ready()
    return run


def per_step(fn, x, y, n):
    t = time.perf_counter()
    for _ in range(n):
        fn(x, y)
    return (time.perf_counter() - t) / n


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--din", type=int, default=784)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=15)  # (7 rounds: medians moved 1.03-1.22x between runs)
    ap.add_argument("--steps", type=int, default=10, help="steps per contender per round")
    ap.add_argument("--pause", type=float, default=float(os.environ.get("BENCH_PAUSE", "0.3")),
                    help="seconds before each contender's steps")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    xn = rng.standard_normal((args.batch, args.din)).astype(np.float32)
    yn = rng.integers(0, args.classes, args.batch).astype(np.int32)
    mr.random.seed(0)
    model, run_eager, run_compiled = make_mirax(args.din, args.hidden, args.classes, 0.01)
    x, y = mr.array(xn), mr.array(yn)
    cands = {"mirax compiled": (run_compiled, x, y), "mirax uncompiled": (run_eager, x, y)}
    try:
        import jax  # noqa: F401
        p = model.parameters()["layers"]
        params = [np.asarray(p[i][k]).T if k == "weight" else np.asarray(p[i][k]) for i in (0, 2, 4)
                  for k in ("weight", "bias")]
        cands["jax.jit"] = (make_jax(params, 0.01), xn, yn)
    except ImportError:
        pass
    t0 = time.perf_counter()
    for fn, a, b in cands.values():  # warm up: trace, compile, caches
        fn(a, b)
    print(describe())
    print(f"warm-up (includes compiling the step): {time.perf_counter() - t0:.2f} s")
    times = {k: [] for k in cands}
    for _ in range(args.rounds):
        for k, (fn, a, b) in cands.items():
            time.sleep(args.pause)
            times[k].append(per_step(fn, a, b, args.steps if k != "mirax uncompiled" else max(1, args.steps // 5)))
    ref = statistics.median(times["mirax compiled"])
    print(f"MLP {args.din}-{args.hidden}-{args.hidden}-{args.classes}, batch {args.batch}, SGD step "
          f"(median of {args.rounds} interleaved rounds)")
    for k, ts in times.items():
        m = statistics.median(ts)
        print(f"  {k:<18} {m * 1e3:9.2f} ms/step   {m / ref:6.2f}x the compiled step's time")


if __name__ == "__main__":
    main()
