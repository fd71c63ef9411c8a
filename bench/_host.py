"""The host a benchmark ran on and the code generator's choices there, for its header.

    from _host import describe; print(describe())

host: LLVM's CPU name and the OS's model, vector ISA, cores, caches
(mirax.lowering.host_cpu); speed now: two probes of the machine's state at the start of
the run (shared machines run the same code up to 2x slower or faster within minutes:
compare runs by their ratios, and read their absolute figures beside these); tuning: the matmul and row-reduction tiles and the threads
threshold in force (mirax.lowering.tuning), each marked measured (by `python -m
mirax.tune`) or derived (from the host's features).

Benchmarks of peak memory run their cases in children under `malloc_counter()`'s
LD_PRELOAD library (test/python/malloc_counter.c) and read each child's last line with
`child_json`.
"""
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))

# the peers' settings for each MIRAX_CPU_MAX_ISA: OpenBLAS's kernels of that ISA, XLA capped
# alike, and numpy's own loops (sin, add, ...) kept off the wider ISAs' dispatch targets
# (NPY_DISABLE_CPU_FEATURES; the names of numpy 1.x and 2.x: those a version does not
# dispatch on draw an ImportWarning, which Python ignores unless -W error). Without
# the last, numpy's ufuncs ran AVX-512 in "AVX2" runs (f32 sin 2.4 ms, 6.2 capped).
_NPY_AVX512 = "X86_V4 AVX512F AVX512CD AVX512_KNL AVX512_KNM AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL AVX512_SPR AVX512_FP16"
PEER_CAPS = {"avx2": ("Haswell", "AVX2", _NPY_AVX512),
             "sse": ("Nehalem", "SSE4_2", _NPY_AVX512 + " X86_V3 AVX AVX2 FMA3 F16C")}


def cap_peers(env) -> None:
    """Set the peers' environment (a mapping, in place) for a fair run: the machine's own
    OpenBLAS settings removed (some of these machines set OPENBLAS_CORETYPE and
    OPENBLAS_L2_SIZE, which slow it: DESIGN.md), and under `MIRAX_CPU_MAX_ISA` the peers
    capped to the same ISA as our code (OpenBLAS and numpy's ufunc dispatch read their
    variables when numpy loads, XLA when jax starts: call this before either, or for a
    worker's environment)."""
    for v in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        env.pop(v, None)
    cap = PEER_CAPS.get(env.get("MIRAX_CPU_MAX_ISA", "").strip().lower())
    if cap:
        env["OPENBLAS_CORETYPE"] = cap[0]
        flags = [f for f in env.get("XLA_FLAGS", "").split() if "xla_cpu_max_isa" not in f]
        env["XLA_FLAGS"] = " ".join(flags + [f"--xla_cpu_max_isa={cap[1]}"])
        env["NPY_DISABLE_CPU_FEATURES"] = cap[2]


cap_peers(os.environ)  # (the benchmarks import this module before numpy and jax)


def choices() -> str:
    from mirax.lowering import tuning
    t, m = tuning.table(), tuning.measured()
    mm = t["matmul"][("linalg.matmul", "f32")]
    tuned = m.get("matmul", {})
    lines = [f"matmul (derived): {mm['mr']}x{mm['nr']} register tile, kc {mm['kc']}, nc {mm['nc']}"]
    for cls, e in sorted(tuned.items()):
        lines.append(f"matmul {cls} (measured, {e.get('shape', '')}): {e['mr']}x{e['nr']}, kc {e['kc']}, nc {e['nc']}")
    rows = m.get("row_fusion", {})
    ps = ", ".join(f"{k} columns: {v['partial_sums']}" for k, v in sorted(rows.items()))
    lines.append(f"row reductions: partial sums {t['row_fusion']['partial_sums']} (derived)"
                 + (f"; measured {ps}" if ps else ""))
    par = "measured" if m.get("parallel") else "derived"
    lines.append(f"threads {tuning.threads()} from {t['elementwise']['parallel_min_elements']} elements ({par})")
    ew = t["elementwise"]
    lines.append(f"elementwise (derived): streamed from {ew['streaming_store_bytes'] >> 20} MiB in up to "
                 f"{ew['stream_tasks_per_thread']} dynamic tasks a thread, {ew['loop_vector_bytes']}-byte loop "
                 f"iterations" + (f", constants pinned ({ew['pin_bytes']} bytes)" if ew["pin_bytes"] else "")
                 + f"; loops {ew['loop_vector_bits']}-bit, vector math {(tuning.vector_math_library() or ['libm a lane'])[0]}")
    lines.append(f"f32 pow: {'polynomial' if t['math']['pow_polynomial'] else 'vector math library'} "
                 f"({'measured' if 'powf' in m.get('math', {}) else 'derived'})")
    cv = t["conv"]
    lines.append(f"conv (derived): window copies of at most {cv['im2col_bytes'] >> 10} KiB, kernels cut below "
                 f"{cv['min_rows']} rows; groups as products from {cv['group_min_out']} output channels, "
                 f"up to {cv['max_groups']} groups")
    st, ms = t["sort"], m.get("sort", {})

    def radix(key, amount):
        return f"{'never' if st[key] >= 1 << 40 else amount} ({'measured' if key in ms else 'derived'})"
    keys32 = radix("radix_bytes", f"{st['radix_bytes'] >> 10} KiB of 32-bit keys")
    keys64 = radix("radix_wide", f"{st['radix_wide']} 64-bit keys")
    payload = radix("radix_payload", f"{st['radix_payload']}")
    lines.append(f"sort: bitonic blocks of {st['block_bytes'] >> 10} KiB, then vector merges (derived); "
                 f"the radix sort from {keys32} a row, from {keys64}; 64-bit argsort from {payload} "
                 f"(else the merge sort), one long row of it in chunks of {st['long_chunk_bytes'] >> 10} KiB "
                 f"(derived)")
    return "\n".join("  " + x for x in lines)


def peers() -> str:
    """The ISA the peers run: numpy's OpenBLAS kernels (its core name) and XLA's cap."""
    import ctypes
    import glob
    core = "?"
    try:
        import numpy as np
        lib = glob.glob(os.path.join(os.path.dirname(np.__file__), "..", "numpy.libs", "libscipy_openblas*"))
        if lib:
            f = ctypes.CDLL(lib[0]).scipy_openblas_get_corename64_
            f.restype = ctypes.c_char_p
            core = f().decode()
    except (OSError, AttributeError, ImportError):
        pass
    xla = [f for f in os.environ.get("XLA_FLAGS", "").split() if "max_isa" in f]
    loops = "numpy's loops capped alike" if os.environ.get("NPY_DISABLE_CPU_FEATURES") else "numpy's loops for the host"
    return f"peers: numpy's OpenBLAS {core} kernels, {loops}; XLA {xla[0] if xla else 'for the host'}"


def speed_now() -> str:
    """The machine's state now, in ~0.1 s: one core's speed (a pure Python loop, ns an
    iteration: what eager dispatch and compile times move with) and one thread's memory
    bandwidth (numpy copying 64 MiB, GB/s read + written: what streaming kernels move
    with). The best of 3 of each."""
    import time
    import numpy as np
    loop = []
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(200_000):
            pass
        loop.append((time.perf_counter() - t) / 200_000)
    src = np.ones(16 << 20, np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # (page faults out of the timing)
    copy = []
    for _ in range(3):
        t = time.perf_counter()
        np.copyto(dst, src)
        copy.append(time.perf_counter() - t)
    return (f"speed now: python loop {min(loop) * 1e9:.1f} ns/iteration, one-thread copy "
            f"{2 * src.nbytes / min(copy) / 1e9:.1f} GB/s")


def describe() -> str:
    from mirax.lowering import host_cpu
    h, detected = host_cpu.host(), host_cpu.detected()
    isa = lambda c: c.isa.upper().replace("AVX512", "AVX-512")  # noqa: E731
    cap = (f"\ncode capped at {isa(h)} by MIRAX_CPU_MAX_ISA on this {isa(detected)} host"
           if h.isa != detected.isa else "")
    return f"host: {h.describe()}{cap}\n{speed_now()}\n{peers()}\ntuning:\n{choices()}"


COUNTER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "python", "malloc_counter.c")


@contextlib.contextmanager
def malloc_counter():
    """The path of the malloc-counting LD_PRELOAD library, built with `cc` in a temporary
    directory for the block (Linux, glibc; exits where it cannot be built)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not sys.platform.startswith("linux") or cc is None:
        sys.exit("counting malloc needs Linux (glibc, LD_PRELOAD) and a C compiler")
    with tempfile.TemporaryDirectory() as tmp:
        lib = os.path.join(tmp, "malloc_count.so")
        subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", lib, COUNTER], text=True, check=True)
        yield lib


def child_json(code: str, args, env) -> dict:
    """`python -c code *args` in `env`; its last line of output as JSON (exits with the
    child's stderr where it failed)."""
    r = subprocess.run([sys.executable, "-c", code, *map(str, args)], env=env, capture_output=True, text=True)
    if r.returncode:
        sys.exit(r.stderr)
    return json.loads(r.stdout.strip().splitlines()[-1])
