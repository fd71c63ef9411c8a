"""matmul GFLOP/s: mirax (optimize_matmuls, two OpenMP threads) vs numpy (BLAS) vs jax.jit.

    .venv/bin/python bench/matmul.py                 # the targets: 1024^3, 4096x4096x1024,
                                                     # 1000^3, batched 64x256x256 (f32)
    .venv/bin/python bench/matmul.py --shape 1000,1030,999 --rounds 15
    .venv/bin/python bench/matmul.py --shape 64:256,256,256          # batch:M,N,K

The header names the host and the tiles in force (measured by `python -m mirax.tune` or
derived from the host's features).

Each contender runs in its own worker process, all three alive at once; rounds
interleave them (mirax, numpy, jax, mirax, ...) and each round times `--calls` calls, so
load from elsewhere on the machine hits all of them alike. Reported: the median over
rounds of each round's median call. The workers' environment comes from
`_host.cap_peers`: without the machine's OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE (they slow
OpenBLAS), and capped to our ISA under MIRAX_CPU_MAX_ISA. A pause between contenders
lets spinning thread pools (OpenMP's, OpenBLAS's) go idle. jax is optional (bench only).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _host import cap_peers  # noqa: E402  (before numpy: the peers' environment)

import numpy as np  # noqa: E402


def _inputs(shape, seed=0):
    batch, m, n, k = shape
    lead = (batch,) if batch else ()
    rng = np.random.default_rng(seed)
    return rng.standard_normal(lead + (m, k), dtype=np.float32), rng.standard_normal(lead + (k, n), dtype=np.float32)


def parse(text):
    """'M,N,K' or 'B:M,N,K' -> (B or None, M, N, K)."""
    batch, _, mnk = text.rpartition(":")
    m, n, k = (int(x) for x in mnk.replace("x", ",").split(","))
    return (int(batch) if batch else None), m, n, k


def show(shape):
    batch, m, n, k = shape
    return (f"{batch}x" if batch else "") + f"{m}x{k} @ " + (f"{batch}x" if batch else "") + f"{k}x{n}"


def _mirax_fn(shape):
    """The user's path: `mr.compile(lambda a, b: a @ b)` (trace, mirax-cpu-pipeline with
    lowering/matmul_codegen.py, JIT), called on mirax arrays."""
    import mirax as mr
    a, b = _inputs(shape)
    am, bm = mr.array(a), mr.array(b)
    mm = mr.compile(lambda x, y: x @ y)
    t0 = time.perf_counter()
    c = np.asarray(mm(am, bm))
    sys.stderr.write(f"mirax: compiled in {time.perf_counter() - t0:.2f} s\n")
    ref = a.astype(np.float64) @ b
    err = float(np.abs(c - ref).max() / np.abs(ref).max())
    if err > 1e-4:
        raise SystemExit(f"mirax: wrong result (relative error {err:.2e})")
    return lambda: mr.eval(mm(am, bm))


def _numpy_fn(shape):
    a, b = _inputs(shape)
    c = np.matmul(a, b)
    return lambda: np.matmul(a, b, out=c)


def _jax_fn(shape):
    import jax
    import jax.numpy as jnp
    a, b = (jnp.asarray(x) for x in _inputs(shape))
    f = jax.jit(lambda x, y: x @ y)
    f(a, b).block_until_ready()
    return lambda: f(a, b).block_until_ready()


FNS = {"mirax": _mirax_fn, "numpy": _numpy_fn, "jax": _jax_fn}


def worker(name, shape):
    """Serve `calls` requests on stdin: answer each with the per-call times (JSON)."""
    try:
        fn = FNS[name](shape)
        fn()
    except ImportError as err:
        print(json.dumps({"unavailable": str(err)}), flush=True)
        return
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        times = []
        for _ in range(int(line)):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        print(json.dumps(times), flush=True)


def start(name, shape):
    env = dict(os.environ)
    cap_peers(env)  # OpenBLAS and XLA as fair peers (bench/_host.py)
    spec = (f"{shape[0]}:" if shape[0] else "") + ",".join(map(str, shape[1:]))
    p = subprocess.Popen([sys.executable, __file__, "--worker", name, "--shape", spec],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    msg = json.loads(p.stdout.readline() or '{"unavailable": "worker died"}')
    if "unavailable" in msg:
        sys.stderr.write(f"{name}: skipped ({msg['unavailable']})\n")
        p.stdin.close()
        p.wait()
        return None
    return p


TARGET_SHAPES = ["1024,1024,1024", "4096,4096,1024", "1000,1000,1000", "64:256,256,256"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", action="append", help="M,N,K or B:M,N,K (repeatable; default: the targets)")
    ap.add_argument("--rounds", type=int, default=21)  # (11: the AVX2 ratios moved 0.96-1.05x between runs)
    ap.add_argument("--calls", type=int, default=10, help="calls per contender per round (fewer for big shapes)")
    ap.add_argument("--pause", type=float, default=0.3, help="seconds between contenders")
    ap.add_argument("--only", default="mirax,numpy,jax")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args.worker, parse(args.shape[0]))
    sys.path.insert(0, os.path.dirname(__file__))
    from _host import describe
    print(describe())
    summary = []
    for spec in args.shape or TARGET_SHAPES:
        shape = parse(spec)
        summary.append((shape, run_shape(shape, args)))
    print("\nsummary (target: mirax >= 1.0x numpy on every shape)")
    for shape, med in summary:
        r = {ref: med["mirax"] / med[ref] for ref in ("numpy", "jax") if "mirax" in med and ref in med}
        print(f"  {show(shape):>28}: " + ", ".join(f"{k} {v:.2f}x" for k, v in r.items())
              + ("" if "numpy" not in r else "   " + ("met" if r["numpy"] >= 1.0 else "MISSED")))


def run_shape(shape, args):
    flop = 2.0 * (shape[0] or 1) * shape[1] * shape[2] * shape[3]
    calls = max(1, min(args.calls, int(0.2 / (flop / 300e9))))  # ~0.2 s a round at 300 GFLOP/s
    load0 = os.getloadavg()[0]
    procs = {n: start(n, shape) for n in args.only.split(",")}
    procs = {n: p for n, p in procs.items() if p is not None}
    rounds = {n: [] for n in procs}
    for _ in range(args.rounds):
        for name, p in procs.items():
            time.sleep(args.pause)
            p.stdin.write(f"{calls}\n")
            p.stdin.flush()
            rounds[name].append(float(np.median(json.loads(p.stdout.readline()))))
    for p in procs.values():
        p.stdin.close()
        p.wait()

    gf = {n: flop / np.array(ts) / 1e9 for n, ts in rounds.items()}
    med = {n: float(np.median(g)) for n, g in gf.items()}
    print(f"\nmatmul {show(shape)} f32, {args.rounds} interleaved rounds x {calls} calls, "
          f"{os.cpu_count()} cpus, load average {load0:.1f} -> {os.getloadavg()[0]:.1f} "
          "(other work on the machine lowers every figure)")
    print(f"{'':8}{'GFLOP/s median':>16}{'min':>9}{'max':>9}{'ms':>9}")
    for n, g in gf.items():
        print(f"{n:8}{med[n]:16.1f}{g.min():9.1f}{g.max():9.1f}{flop / med[n] / 1e6:9.2f}")
    for ref in ("numpy", "jax"):
        if "mirax" in med and ref in med:
            print(f"mirax / {ref}: {med['mirax'] / med[ref]:.2f}x")
    return med


if __name__ == "__main__":
    main()
