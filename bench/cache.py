"""Cold compile vs warm on-disk kernel cache, each in a fresh process.

    python bench/cache.py [--runs 5]

For a compiled gelu-like function and for one eager op, a fresh subprocess times the
first call (trace + lower + compile, or a disk-cache load) against an empty cache dir
("cold") and against the dir an earlier process filled ("warm"); also "jit only" with the
disk cache off (a miss links and writes its .so on a background thread, so cold ~ jit
only; the process waits for the writes at exit). Prints the host, medians of interleaved
runs with their ranges, the ratio (target: warm >= 10x faster than cold), the first
compile of gelu in a fresh process (target <= 100 ms: the first call after `import
mirax`, cold cache), the import of mirax and the two together, and the per-call time of
a cached compiled call (target <= 20 us). Last, a model's first eager steps on a cold
cache with each eval's missing kernels built together and one by one.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _host import describe  # noqa: E402

CHILD = r"""
import time
t_import = time.perf_counter()
import mirax as mr
t_import = time.perf_counter() - t_import
import json, math
import numpy as np
from mirax.runtime import cpu, disk_cache
which = {which!r}
x = mr.array(np.linspace(-3, 3, 32 * 4096, dtype=np.float32).reshape(32, 4096))
mr.eval(x)
if which == "gelu":
    def gelu(x):
        return x * (1 + mr.erf(x / math.sqrt(2))) / 2
    f = mr.compile(gelu)
    t = time.perf_counter(); mr.eval(f(x)); first = time.perf_counter() - t
    small = mr.array(np.ones(16, np.float32)); mr.eval(small)
    mr.eval(f(small))
    n = 5000
    t = time.perf_counter()
    for _ in range(n):
        f(small)
    per_call = (time.perf_counter() - t) / n
    kern = list(cpu._loaded.values())[-1]  # the raw kernel call: CpuKernel on numpy buffers
    a = np.ones(16, np.float32); o = np.empty(16, np.float32)
    t = time.perf_counter()
    for _ in range(n):
        kern([a], [o])
    raw = (time.perf_counter() - t) / n
elif which == "mlp":  # a model's first eager evals: many kernels missing in each graph
    import mirax.nn as nn
    t = time.perf_counter()
    mr.random.seed(0)
    layers = [nn.Linear(784, 512), nn.Linear(512, 512), nn.Linear(512, 10)]
    def loss(params, x, y):
        for i, (w, b) in enumerate(params):
            x = x @ w.T + b
            x = mr.maximum(x, 0.0) if i < 2 else x
        return nn.losses.cross_entropy(x, y).mean()
    params = [(l.weight, l.bias) for l in layers]
    mr.eval(params)
    xb = mr.array(np.random.default_rng(0).standard_normal((256, 784)).astype(np.float32))
    yb = mr.array(np.random.default_rng(1).integers(0, 10, 256).astype(np.int32))
    l, g = mr.value_and_grad(loss)(params, xb, yb)
    params = [(w - 0.1 * gw, b - 0.1 * gb) for (w, b), (gw, gb) in zip(params, g)]
    mr.eval(l, params)
    first = time.perf_counter() - t
    per_call = raw = None
else:
    t = time.perf_counter(); mr.eval(mr.tanh(x)); first = time.perf_counter() - t
    per_call = raw = None
disk_cache.flush()  # count the entries the writer thread is still linking
print(json.dumps(dict(first=first, imp=t_import, per_call=per_call, raw=raw, stats=cpu.stats.as_dict())))
"""


def child(which, cache_dir, batch=True):
    env = dict(os.environ, MIRAX_EAGER_BATCH="1" if batch else "0")
    if cache_dir is None:
        env["MIRAX_DISABLE_DISK_CACHE"] = "1"
    else:
        env.pop("MIRAX_DISABLE_DISK_CACHE", None)
        env["MIRAX_CACHE_DIR"] = cache_dir
    r = subprocess.run([sys.executable, "-c", CHILD.format(which=which)], env=env,
                       capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    print(describe())
    print(f"{'case':<22}{'jit only ms':>12}{'cold ms':>10}{'warm ms':>10}{'cold/warm':>11}   per-call")
    for which, label in (("gelu", "compiled gelu 32x4096"), ("tanh", "eager tanh 32x4096")):
        jit, cold, warm, per_call, raw, cm_cold, cm_warm, imp = [], [], [], [], [], [], [], []
        for _ in range(args.runs):  # interleave the three kinds of run
            with tempfile.TemporaryDirectory() as d:
                jit.append(child(which, None)["first"])
                c = child(which, d)
                assert c["stats"]["compiles"] >= 1 and c["stats"]["disk_writes"] >= 1, c
                cold.append(c["first"])
                imp.append(c["imp"])
                cm_cold.append(c["stats"]["compile_seconds"])
                w = child(which, d)
                assert w["stats"]["compiles"] == 0, w  # a warm process compiles nothing
                warm.append(w["first"])
                cm_warm.append(w["stats"]["load_seconds"])
                if w["per_call"] is not None:
                    per_call.append(w["per_call"])
                    raw.append(w["raw"])
        j, c, w = (statistics.median(v) * 1e3 for v in (jit, cold, warm))
        pc = (f"compiled call {statistics.median(per_call) * 1e6:.1f} us, kernel call "
              f"{statistics.median(raw) * 1e6:.1f} us" if per_call else "")
        print(f"{label:<22}{j:>12.1f}{c:>10.1f}{w:>10.2f}{c / w:>10.1f}x   {pc}")
        mc, mw = statistics.median(cm_cold) * 1e3, statistics.median(cm_warm) * 1e3
        print(f"{'':<22}compile_module calls: compile {mc:.1f} ms, disk load {mw:.2f} ms ({mc / mw:.0f}x)")
        print(f"{'':<22}target warm >= 10x faster than cold: {'ok' if c / w >= 10 else 'MISSED'}")
        if which == "gelu":
            i = statistics.median(imp) * 1e3
            whole = [a + b for a, b in zip(imp, cold)]
            print(f"{'':<22}first compile in a fresh process (cold cache): {c:.1f} ms ({_range(cold)})   "
                  f"target <= 100 ms: {'ok' if c <= 100 else 'MISSED'}")
            print(f"{'':<22}import mirax {i:.1f} ms ({_range(imp)}); import + first call "
                  f"{statistics.median(whole) * 1e3:.1f} ms ({_range(whole)})")
    eager_graphs(max(3, args.runs // 2 + 1))


def eager_graphs(runs):
    """A model's first eager steps on a cold cache (MLP 784-512-512-10: its init, then
    one value_and_grad and SGD step), with each eval's missing kernels built together
    (`CpuDevice._build`: MLIR here, LLVM on other threads) and one by one as the ops
    reach them (`MIRAX_EAGER_BATCH=0`), fresh processes, alternating."""
    together, alone = [], []
    for _ in range(runs):
        for batch, out in ((True, together), (False, alone)):
            with tempfile.TemporaryDirectory() as d:
                out.append(child("mlp", d, batch)["first"])
    t, a = statistics.median(together) * 1e3, statistics.median(alone) * 1e3
    print(f"eager MLP init + first step, cold cache: kernels built together {t:.0f} ms ({_range(together)}), "
          f"one by one {a:.0f} ms ({_range(alone)}): {a / t:.2f}x")


def _range(xs):
    return f"{min(xs) * 1e3:.1f}-{max(xs) * 1e3:.1f}"


if __name__ == "__main__":
    main()
