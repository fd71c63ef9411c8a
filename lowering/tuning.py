"""The CPU code generator's tuning table: one row per op family, nothing hard-coded in passes.

    from mirax.lowering.tuning import TUNING, threads
    TUNING["elementwise"]["parallel_min_elements"]   # below this a kernel stays on one thread

Measured on the 2-core AVX-512 development machine (medians, interleaved runs):
- threads lose below ~1M elements (OpenMP fork/join ~5-20 us against ~1 ns an element);
- fused elementwise kernels are vectorized by LLVM's loop vectorizer (16 f32 lanes,
  zmm) once their bodies are plain arithmetic (lowering/approx.py), and then run at the
  memory's speed: a gelu reads and writes as fast as a copy of the same bytes.

`MIRAX_NUM_THREADS` caps the threads (1 turns OpenMP off); the OpenMP runtime is the
first LLVM-compatible one found (`openmp_library`); without one, kernels stay serial.
"""
from __future__ import annotations

import ctypes.util
import glob
import os
import sys

TUNING = {
    # all-parallel linalg.generic (after fusion): split the outermost splittable dim
    # across the threads when the op has at least this many iterations
    "elementwise": dict(parallel_min_elements=1 << 20),
    # linalg.generic with reduction iterators (sum, max, mean...): split a parallel dim
    "reduction": dict(parallel_min_elements=1 << 20),
    # fills, copies, transposes, broadcasts that survived fusion: memory-bound, threads
    # help only on large ones
    "other": dict(parallel_min_elements=1 << 21),
    # mirax-fuse-reductions: reductions + their elementwise producers/consumers over the
    # same rows in one row-block loop. Groups smaller than min_elements stay as they are
    # (and cost no transform-interpreter time). A block holds at most block_elements (at
    # least one row): several rows a block made LLVM unroll the row loop, 3-20x the JIT
    # time (softmax 1024x256: 0.7-3 s) for no measured gain, so blocks are single rows.
    # Reductions over at least split_min columns keep partial_sums independent
    # accumulators (vector lanes); below that the accumulator loop's short constant trip
    # count gets fully unrolled by LLVM, again at a large JIT cost.
    "row_fusion": dict(min_elements=1 << 16, block_elements=1, partial_sums=64, split_min=2048),
    # LLVM's optimization level in the JIT. O3 costs ~3x O2 on big functions (a
    # transformer training step, 143 KB of mirax IR: 10 s vs 3.3 s) for no measured
    # speed-up there; small kernels keep O3.
    "jit": dict(opt_level=3, large_module_chars=20_000, large_opt_level=2),
}


def jit_opt_level(module_text: str) -> int:
    t = TUNING["jit"]
    return t["large_opt_level"] if len(module_text) > t["large_module_chars"] else t["opt_level"]

# op families by linalg op name; linalg.generic is classified by its iterators
FAMILY_OF = {"linalg.fill": "other", "linalg.copy": "other", "linalg.transpose": "other",
             "linalg.broadcast": "other", "linalg.map": "elementwise", "linalg.reduce": "reduction"}


def openmp_library():
    """Path of an LLVM-compatible OpenMP runtime (with `__kmpc_*`), or None.

    Debian's `libomp5` (installed by the Makefile) or PyPI's `intel-openmp`; GNU libgomp
    lacks the symbols. `MIRAX_OPENMP_LIB` names one explicitly ("" disables OpenMP)."""
    env = os.environ.get("MIRAX_OPENMP_LIB")
    if env is not None:
        return env or None
    candidates = [os.path.join(sys.prefix, "lib", n) for n in ("libomp.so", "libomp.so.5", "libiomp5.so")]
    candidates += ["/usr/lib/x86_64-linux-gnu/libomp.so.5", "/usr/lib/aarch64-linux-gnu/libomp.so.5"]
    candidates += sorted(glob.glob("/usr/lib/llvm-*/lib/libomp.so*"), reverse=True)
    candidates += ["/opt/homebrew/opt/libomp/lib/libomp.dylib", "/usr/local/opt/libomp/lib/libomp.dylib"]
    for c in candidates:
        if os.path.exists(c):
            return c
    for name in ("omp", "iomp5"):
        found = ctypes.util.find_library(name)
        if found:
            return found
    return None


def threads() -> int:
    """How many threads kernels may use: the CPUs this process may run on, capped by
    `MIRAX_NUM_THREADS`; 1 when no OpenMP runtime is available."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    cap = os.environ.get("MIRAX_NUM_THREADS")
    if cap:
        n = min(n, max(1, int(cap)))
    if n > 1 and openmp_library() is None:
        return 1
    return n
