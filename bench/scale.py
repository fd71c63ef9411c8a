"""Time to trace, transform and compile a chain of N elementwise ops, N = 1,000 and 10,000,
each in a fresh process (target: 10,000 ops take at most ~12x the time of 1,000).

    python bench/scale.py [--sizes 1000 10000]

The chain alternates `x + 0.5` and `sin(x) * 1.0001` on an 8-element vector and ends
in a sum. Stages: `trace` (mr.trace), `grad` (mirax-grad pass + eager run), `vmap`
(mirax-vmap pass + eager run), `compile` (first call of mr.compile: trace, lowering,
LLVM, load), with the compile's MLIR and LLVM seconds apart.
"""
import argparse
import json
import os
import subprocess
import sys

from _host import describe

CHILD = r"""
import json, sys, time
import mirax as mr
from mirax.runtime import cpu, disk_cache
n = int(sys.argv[1])
T = {}
def timed(name, f):
    def g(*a, **k):
        t = time.perf_counter(); r = f(*a, **k); T[name] = T.get(name, 0) + time.perf_counter() - t; return r
    return g
cpu.lower_to_llvm = timed("mlir", cpu.lower_to_llvm)
disk_cache.link_and_load = timed("llvm", disk_cache.link_and_load)
def f(x):
    for i in range(n):
        x = mr.sin(x) * 1.0001 if i % 2 else x + 0.5
    return x.sum()
x = mr.ones((8,))
mr.eval(x * 2)
out = {}
t = time.perf_counter(); mr.trace(f, x); out["trace"] = time.perf_counter() - t
t = time.perf_counter(); mr.eval(mr.grad(f)(x)); out["grad"] = time.perf_counter() - t
t = time.perf_counter(); mr.eval(mr.vmap(f)(mr.ones((2, 8)))); out["vmap"] = time.perf_counter() - t
T.clear()
t = time.perf_counter(); mr.eval(mr.compile(f)(x)); out["compile"] = time.perf_counter() - t
out["compile: MLIR"] = T.get("mlir", 0); out["compile: LLVM"] = T.get("llvm", 0)
print(json.dumps(out))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    a = ap.parse_args()
    print(describe())
    env = dict(os.environ, MIRAX_CACHE_DIR="")  # compile cold every time
    res = {}
    for n in a.sizes:
        r = subprocess.run([sys.executable, "-c", CHILD, str(n)], env=env, capture_output=True, text=True)
        if r.returncode:
            sys.exit(r.stderr)
        res[n] = json.loads(r.stdout.strip().splitlines()[-1])
    lo, hi = a.sizes[0], a.sizes[-1]
    print(f"{'stage':16}" + "".join(f"{f'{n} ops':>12}" for n in a.sizes) + f"{'ratio':>10}")
    for stage in res[lo]:
        print(f"{stage:16}" + "".join(f"{res[n][stage]:11.2f}s" for n in a.sizes)
              + f"{res[hi][stage] / max(res[lo][stage], 1e-9):9.1f}x")
    print(f"(linear would be {hi / lo:.0f}x; target: at most ~12x)")


if __name__ == "__main__":
    main()
