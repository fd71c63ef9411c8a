"""The transformer LM training step of examples/transformer_lm.py, mirax vs jax.jit.

    .venv/bin/python bench/transformer_step.py [--layers 2] [--rounds 15] [--steps-per-round 10]

mirax: the example's own `TransformerLM` (same dims, heads, layers, context, batch and
vocabulary as its defaults) trained by the example's compiled step: forward, backward and
AdamW (warm-up + cosine schedule, weight decay 0.01) in one `mr.compile` capturing
`[model.state, optimizer.state]`. jax: the same architecture in plain jax.numpy/jax.nn
(token + position embedding, pre-norm blocks of causal multi-head attention and an exact
GELU MLP, final LayerNorm, linear read-out, mean cross entropy) with AdamW written out as
mirax.optimizers.AdamW computes it (no bias correction), `jax.jit` over the whole step.
The jax parameters start from the mirax model's values, so the first losses agree (both
printed, and the losses after the warm-up steps too).

Timing: rounds alternate mirax and jax (`--steps-per-round` steps each, every step
evaluated: mr.eval of the state / block_until_ready); the medians over rounds of the
per-step times are printed, with the ratio (mirax steps/s over jax steps/s: >= 1.0 means
mirax is at least as fast). The header names the host (bench/_host.py).
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _host  # noqa: E402,F401  (the peers' environment, before numpy and jax load: _host.cap_peers)

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
from _host import describe  # noqa: E402

import mirax as mr  # noqa: E402
import mirax.optimizers as optim  # noqa: E402
from mirax.utils import tree_flatten  # noqa: E402
from transformer_lm import TransformerLM, make_step, make_text  # noqa: E402

WARMUP, LR, WEIGHT_DECAY, STEPS = 30, 3e-3, 0.01, 300  # the example's defaults
EPS_LN = 1e-5


def schedule_args(steps=STEPS, warmup=WARMUP, lr=LR):
    return dict(init=lr / 100, peak=lr, warmup=warmup, decay_steps=steps - warmup, end=lr / 10)


def make_mirax(vocab, args):
    mr.random.seed(args.seed)
    model = TransformerLM(vocab, args.context, args.dims, args.heads, args.layers)
    s = schedule_args()
    schedule = optim.join_schedules(
        [optim.linear_schedule(s["init"], s["peak"], s["warmup"]),
         optim.cosine_decay(s["peak"], s["decay_steps"], s["end"])], [s["warmup"]])
    optimizer = optim.AdamW(learning_rate=schedule, weight_decay=WEIGHT_DECAY)

    step = make_step(model, optimizer)
    state = [model.state, optimizer.state]

    params = {k: np.array(v) for k, v in tree_flatten(model.parameters())}

    def run(x, y):
        loss = step(x, y)
        mr.eval(state, loss)
        return loss
    return run, params


def make_jax(params, args):
    import jax
    import jax.numpy as jnp

    H = args.heads
    s = schedule_args()
    neg = float(np.finfo(np.float32).min)

    def layer_norm(x, w, b):
        mu = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x - mu), axis=-1, keepdims=True)
        return (x - mu) * jax.lax.rsqrt(var + EPS_LN) * w + b

    def linear(p, name, x):
        y = x @ p[name + ".weight"].T
        return y + p[name + ".bias"] if name + ".bias" in p else y

    def attention(p, pre, x, mask):
        B, T, D = x.shape

        def heads(t):  # (B, T, D) -> (B, H, T, D/H)
            return t.reshape(B, T, H, D // H).transpose(0, 2, 1, 3)
        q, k, v = (heads(linear(p, f"{pre}.{n}_proj", x)) for n in ("query", "key", "value"))
        q = q * math.sqrt(1 / (D // H))
        scores = q @ k.transpose(0, 1, 3, 2) + mask
        o = jax.nn.softmax(scores, axis=-1) @ v
        return linear(p, f"{pre}.out_proj", o.transpose(0, 2, 1, 3).reshape(B, T, D))

    def forward(p, x):
        T = x.shape[1]
        h = p["token_embedding.weight"][x] + p["position_embedding.weight"][jnp.arange(T)]
        i = jnp.arange(T)
        mask = (i[:, None] < i[None, :]).astype(jnp.float32) * neg
        for b in range(args.layers):
            pre = f"blocks.{b}"
            y = layer_norm(h, p[f"{pre}.ln1.weight"], p[f"{pre}.ln1.bias"])
            h = h + attention(p, f"{pre}.attention", y, mask)
            y = layer_norm(h, p[f"{pre}.ln2.weight"], p[f"{pre}.ln2.bias"])
            y = jax.nn.gelu(linear(p, f"{pre}.mlp.layers.0", y), approximate=False)
            h = h + linear(p, f"{pre}.mlp.layers.2", y)
        return linear(p, "out", layer_norm(h, p["ln.weight"], p["ln.bias"]))

    def loss_fn(p, x, y):
        logits = forward(p, x)
        lse = jax.nn.logsumexp(logits, axis=-1)
        score = jnp.take_along_axis(logits, y[..., None], axis=-1)[..., 0]
        return jnp.mean(lse - score)

    def learning_rate(step):
        step = step.astype(jnp.float32)
        warm = jnp.minimum(step, s["warmup"]) * ((s["peak"] - s["init"]) / s["warmup"]) + s["init"]
        c = jnp.minimum(step - s["warmup"], s["decay_steps"])
        cos = s["end"] + 0.5 * (1.0 + jnp.cos((math.pi / s["decay_steps"]) * c)) * (s["peak"] - s["end"])
        return jnp.where(step < s["warmup"], warm, cos)

    @jax.jit
    def step(state, x, y):
        p, m, v, t = state
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        lr = learning_rate(t)
        b1, b2, eps = 0.9, 0.999, 1e-8
        m = {k: b1 * m[k] + (1 - b1) * g[k] for k in p}
        v = {k: b2 * v[k] + (1 - b2) * jnp.square(g[k]) for k in p}
        p = {k: p[k] * (1 - lr * WEIGHT_DECAY) - lr * m[k] / (jnp.sqrt(v[k]) + eps) for k in p}
        return loss, (p, m, v, t + 1)

    p0 = {k: jnp.asarray(a) for k, a in params.items()}
    state = [(p0, {k: jnp.zeros_like(a) for k, a in p0.items()}, {k: jnp.zeros_like(a) for k, a in p0.items()},
              jnp.asarray(0, jnp.int32))]

    def run(x, y):
        loss, state[0] = step(state[0], x, y)
        loss.block_until_ready()
        return loss
    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--context", type=int, default=48)
    ap.add_argument("--dims", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=15)  # (7: one AVX2 run gave 0.92x, reruns 1.33x, 1.12x)
    ap.add_argument("--steps-per-round", type=int, default=10)
    ap.add_argument("--pause", type=float, default=float(os.environ.get("BENCH_PAUSE", "0.3")),
                    help="seconds before each contender's steps (spinning thread pools go idle)")
    ap.add_argument("--no-jax", action="store_true", help="time mirax alone")
    args = ap.parse_args()
    print(describe())

    text = make_text(100_000, seed=args.seed)
    vocab = sorted(set(text) | set(make_text(4 * args.batch * (args.context + 1), seed=args.seed + 1000)))
    stoi = {c: i for i, c in enumerate(vocab)}
    data = np.array([stoi[c] for c in text], np.int32)
    rng = np.random.default_rng(args.seed + 1)
    batches = []
    for _ in range(16):
        starts = rng.integers(0, len(data) - args.context - 1, size=args.batch)
        seqs = data[starts[:, None] + np.arange(args.context + 1)]
        batches.append((seqs[:, :-1].copy(), seqs[:, 1:].copy()))

    run_mr, params = make_mirax(len(vocab), args)
    mr_batches = [(mr.array(x), mr.array(y)) for x, y in batches]
    n_params = sum(a.size for a in params.values())
    print(f"model: {args.layers} blocks, dims {args.dims}, {args.heads} heads, context {args.context}, "
          f"batch {args.batch}, vocabulary {len(vocab)}, {n_params} parameters")

    t = time.perf_counter()
    first_mr = run_mr(*mr_batches[0]).item()
    compile_mr = time.perf_counter() - t
    runners = {"mirax": (run_mr, mr_batches)}
    if not args.no_jax:
        try:
            import jax.numpy as jnp
        except ImportError:
            print("jax is not installed: timing mirax alone")
        else:
            run_jax = make_jax(params, args)
            jax_batches = [(jnp.asarray(x), jnp.asarray(y)) for x, y in batches]
            t = time.perf_counter()
            first_jax = float(run_jax(*jax_batches[0]))
            compile_jax = time.perf_counter() - t
            runners["jax.jit"] = (run_jax, jax_batches)
            print(f"first step loss: mirax {first_mr:.6f}, jax {first_jax:.6f} "
                  f"(|diff| {abs(first_mr - first_jax):.2e}); first call (trace + compile + run): "
                  f"mirax {compile_mr:.2f} s, jax {compile_jax:.2f} s")
            # a few more identical steps on both: the updates agree too
            for i in range(1, 5):
                a = run_mr(*mr_batches[i]).item()
                b = float(run_jax(*jax_batches[i]))
            print(f"loss after 5 steps: mirax {a:.6f}, jax {b:.6f}")
    if len(runners) == 1:
        print(f"first step loss: mirax {first_mr:.6f}; first call {compile_mr:.2f} s")

    times = {k: [] for k in runners}
    k = 0
    for _ in range(args.rounds):
        for name, (run, bs) in runners.items():
            time.sleep(args.pause)
            t = time.perf_counter()
            for i in range(args.steps_per_round):
                run(*bs[(k + i) % len(bs)])
            times[name].append((time.perf_counter() - t) / args.steps_per_round)
        k += args.steps_per_round
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"step time, median of {args.rounds} interleaved rounds of {args.steps_per_round} steps:")
    for name, m in med.items():
        lo, hi = min(times[name]), max(times[name])
        print(f"  {name:8} {m * 1e3:8.2f} ms  ({1 / m:6.1f} steps/s; rounds {lo * 1e3:.2f}-{hi * 1e3:.2f} ms)")
    if "jax.jit" in med:
        print(f"mirax / jax.jit speed: {med['jax.jit'] / med['mirax']:.2f}x (>= 1.0: mirax as fast or faster)")


if __name__ == "__main__":
    main()
