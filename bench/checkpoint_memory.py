"""Peak memory of a compiled gradient with and without `checkpoint`, each in a fresh process.

    python bench/checkpoint_memory.py [--layers 32] [--batch 256] [--width 128] [--hidden 512]

The model: `layers` residual blocks x + tanh(x @ w1) @ w2 (w1: width x hidden), the loss
mean(x * x), `mr.compile(mr.grad(loss))`; "checkpoint" wraps each block in
`mr.checkpoint`. Without it the backward pass keeps every block's tanh (batch x hidden);
with it only each block's input (batch x width), and re-runs the block.

Compiled kernels allocate their temporaries with malloc inside the JIT code, which
`mr.get_peak_memory()` (the runtime's buffers) does not see, so the peak is counted at
malloc: the child runs with a small LD_PRELOAD library (built here with `cc`; Linux,
glibc) that tracks the bytes live; "peak" is the most live at once during one call,
minus what was live before it (the call's results, the gradients, included: "results").
"""
import argparse
import os
import textwrap

from _host import child_json, describe, malloc_counter


CHILD = textwrap.dedent(r"""
    import ctypes, json, sys, time
    import numpy as np
    import mirax as mr

    lib = ctypes.CDLL(None)
    lib.mirax_malloc_peak.restype = lib.mirax_malloc_current.restype = ctypes.c_longlong
    which, L, B, D, H = sys.argv[1], *(int(a) for a in sys.argv[2:6])
    mr.set_cache_limit(0)  # the results are fresh allocations, counted
    rng = np.random.default_rng(0)
    params = [(mr.array(rng.standard_normal((D, H)).astype(np.float32) / np.sqrt(D)),
               mr.array(rng.standard_normal((H, D)).astype(np.float32) / np.sqrt(H))) for _ in range(L)]
    x = mr.array(rng.standard_normal((B, D)).astype(np.float32))

    def block(x, w1, w2):
        return x + mr.tanh(x @ w1) @ w2

    blk = mr.checkpoint(block) if which == "checkpoint" else block

    def loss(params, x):
        for w1, w2 in params:
            x = blk(x, w1, w2)
        return mr.mean(x * x)

    g = mr.compile(mr.grad(loss))
    t = time.perf_counter()
    out = g(params, x)
    mr.eval(out)
    first = time.perf_counter() - t
    del out
    times = []
    for _ in range(5):
        t = time.perf_counter()
        mr.eval(g(params, x))
        times.append(time.perf_counter() - t)
    before = lib.mirax_malloc_current()
    lib.mirax_malloc_reset_peak()
    out = g(params, x)
    mr.eval(out)
    peak = lib.mirax_malloc_peak() - before
    grad_sum = float(sum(np.abs(np.asarray(w, np.float64)).sum() for pair in out for w in pair))
    print(json.dumps({"peak": peak, "first": first, "call": sorted(times)[len(times) // 2],
                      "grad_sum": grad_sum}))
""")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--hidden", type=int, default=512)
    a = ap.parse_args()
    print(describe())
    L, B, D, H = a.layers, a.batch, a.width, a.hidden
    print(f"model: {L} blocks x + tanh(x @ w1) @ w2, batch {B}, width {D}, hidden {H}; "
          f"mr.compile(mr.grad(loss)), f32")
    results = 2 * L * D * H * 4
    with malloc_counter() as lib:
        rows = {which: child_json(CHILD, [which, L, B, D, H], dict(os.environ, LD_PRELOAD=lib))
                for which in ("plain", "checkpoint")}
    mb = 2 ** 20
    print(f"results (the gradients): {results / mb:.1f} MB; activations kept without checkpoint "
          f"(each block's tanh): {L * B * H * 4 / mb:.1f} MB, with (each block's input): {L * B * D * 4 / mb:.1f} MB")
    print(f"{'':12} {'peak MB':>9} {'temporaries MB':>15} {'call ms':>9} {'first call s':>13}")
    for which, r in rows.items():
        print(f"{which:12} {r['peak'] / mb:9.1f} {(r['peak'] - results) / mb:15.1f} {r['call'] * 1e3:9.1f} "
              f"{r['first']:13.1f}")
    p, c = rows["plain"], rows["checkpoint"]
    same = abs(p["grad_sum"] - c["grad_sum"]) <= 1e-5 * abs(p["grad_sum"])
    print(f"checkpoint: peak {c['peak'] / p['peak']:.2f}x, temporaries "
          f"{(c['peak'] - results) / max(p['peak'] - results, 1):.2f}x of plain; gradients "
          + ("equal" if same else f"DIFFER ({p['grad_sum']} vs {c['grad_sum']})"))


if __name__ == "__main__":
    main()
