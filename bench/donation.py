"""A compiled training step with its state donated (new parameters and optimizer state
written over the old ones, the default) and kept (`MIRAX_DONATE=0`: new state in new
buffers), each in a fresh process: peak memory of one step and time per step.

    python bench/donation.py [--layers 4] [--width 1024] [--batch 64] [--steps 21]

The model: `layers` Linear(width, width) + ReLU, a Linear to 10 classes, cross-entropy,
AdamW; `mr.compile(step, inputs=state, outputs=state)` as examples/ do. The state is the
parameters and AdamW's two moments: 3 x the parameters' bytes. Kept, a step holds the old
state and the new one at once; donated, the new one is written over the old.

"peak": the most bytes live at once during one step, minus those live before it (the
state), counted at malloc (the LD_PRELOAD counter of bench/checkpoint_memory.py: the
kernels' temporaries are malloc'd inside JIT code), with the buffer pool off for that
step (`mr.set_cache_limit(0)`: it keeps the buffers the model's initialization freed,
and the kept step takes its new state from them), each in a fresh process. "ms/step":
both models in one process, `--steps` interleaved rounds of 5 steps each (a 50 ms pause
before each), the medians and the median of the rounds' ratios.
"""
import argparse
import os
import textwrap

from _host import child_json, describe, malloc_counter


CHILD = textwrap.dedent(r"""
    import ctypes, importlib, json, statistics, sys, time
    import numpy as np
    import mirax as mr
    import mirax.nn as nn
    import mirax.optimizers as optim
    from mirax.utils import tree_flatten
    compile_module = importlib.import_module("mirax.compile")

    which, L, D, B, steps = sys.argv[1], *(int(a) for a in sys.argv[2:6])

    def make():
        mr.random.seed(0)
        layers = []
        for _ in range(L):
            layers += [nn.Linear(D, D), nn.ReLU()]
        model = nn.Sequential(*layers, nn.Linear(D, 10))
        optimizer = optim.AdamW(learning_rate=1e-3)
        optimizer.init(model.trainable_parameters())
        grad_fn = nn.value_and_grad(model, lambda m, x, y: nn.losses.cross_entropy(m(x), y, reduction="mean"))
        state = [model.state, optimizer.state]

        def step(x, y):
            loss, grads = grad_fn(model, x, y)
            optimizer.update(model, grads)
            return loss
        step = mr.compile(step, inputs=state, outputs=state)
        return model, state, lambda: mr.eval(step(x, y), state)

    rng = np.random.default_rng(0)
    x = mr.array(rng.standard_normal((B, D)).astype(np.float32))
    y = mr.array(rng.integers(0, 10, B).astype(np.int32))
    if which == "time":  # both in this process, rounds interleaved (compile._DONATE switched)
        runs = {}
        for name, flag in (("donated", True), ("kept", False)):
            compile_module._DONATE = flag
            model, state, run = make()
            for _ in range(3):
                run()
            runs[name] = (flag, run)
        times = {name: [] for name in runs}
        for _ in range(steps):
            for name, (flag, run) in runs.items():
                compile_module._DONATE = flag
                time.sleep(0.05)
                run()
                t = time.perf_counter()
                for _ in range(5):
                    run()
                times[name].append((time.perf_counter() - t) / 5)
        ratio = statistics.median(d / k for d, k in zip(times["donated"], times["kept"]))
        print(json.dumps({name: statistics.median(v) for name, v in times.items()} | {"ratio": ratio}))
        sys.exit(0)
    lib = ctypes.CDLL(None)
    lib.mirax_malloc_peak.restype = lib.mirax_malloc_current.restype = ctypes.c_longlong
    model, state, run = make()
    for _ in range(3):
        run()
    # without the buffer pool (it keeps the buffers the model's initialization freed, and
    # would hand the kept step's new state buffers from there): one step's malloc'd bytes
    mr.set_cache_limit(0)
    run()
    before = lib.mirax_malloc_current()
    lib.mirax_malloc_reset_peak()
    run()
    peak = lib.mirax_malloc_peak() - before
    state_bytes = sum(v.nbytes for _, v in tree_flatten(state))
    checksum = float(sum(np.abs(np.asarray(v, np.float64)).sum() for _, v in tree_flatten(model.parameters())))
    print(json.dumps({"peak": peak, "state": state_bytes, "checksum": checksum}))
""")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=21)
    a = ap.parse_args()
    print(describe())
    print(f"model: {a.layers} x (Linear({a.width}, {a.width}) + ReLU), Linear to 10, batch {a.batch}, "
          f"AdamW, mr.compile(step, inputs=state, outputs=state), f32")
    rows = {}
    shape = [a.layers, a.width, a.batch, a.steps]
    with malloc_counter() as lib:
        for which, flag in (("donated", "1"), ("kept", "0")):
            rows[which] = child_json(CHILD, [which, *shape], dict(os.environ, LD_PRELOAD=lib, MIRAX_DONATE=flag))
    t = child_json(CHILD, ["time", *shape], dict(os.environ))
    mb = 2 ** 20
    print(f"state (parameters, AdamW's moments, step): {rows['kept']['state'] / mb:.1f} MB")
    print(f"{'':10} {'peak MB':>9} {'ms/step':>9}")
    for which, r in rows.items():
        print(f"{which:10} {r['peak'] / mb:9.1f} {t[which] * 1e3:9.2f}")
    d, k = rows["donated"], rows["kept"]
    same = d["checksum"] == k["checksum"]
    print(f"donated: peak {d['peak'] / k['peak']:.2f}x of kept ({(k['peak'] - d['peak']) / mb:.1f} MB less), "
          f"step {t['ratio']:.2f}x ({a.steps} paired rounds); parameters "
          + ("equal" if same else f"DIFFER ({d['checksum']} vs {k['checksum']})"))


if __name__ == "__main__":
    main()
