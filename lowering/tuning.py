"""The CPU code generator's tuning table, derived from the host and refined by measurement.

    from mirax.lowering import tuning
    tuning.table()["elementwise"]["parallel_min_elements"]   # below this a kernel stays serial
    tuning.matmul_config("linalg.matmul", "f32", None, 1024, 1024, 1024)  # tiles for one op
    tuning.derive(host_cpu.PRESETS["avx2"])                  # the table another host would get

Two layers, both keyed by the host (lowering/host_cpu.py: LLVM's CPU name and features,
cores, caches):
1. `derive(host)`: every tile size, vector width and threshold computed from the host's
   facts, no constant chosen for one machine:
   - matmul register tile mr x nr: nr a multiple (1, 2 or 4) of the f32 vector lanes,
     mr x (nr/lanes) accumulators + nr/lanes B vectors + 1 broadcast of A within the
     vector registers, the pair with the best flops per load (mr*v / (mr + v)) first;
   - cache tiles: B's kc x nr micro panel in half of L1d, the kc x nc block in half of L2,
     A's rows per parallel task (forall_m) so their kc-wide strip fits a quarter of L2;
   - threads: an op goes parallel once its f32 data outgrows one core's L2 (below that,
     moving it to another core costs more than the compute; the old constant 2^20, found
     by measurement on 1 MiB-L2 Zen 4/5, is this rule there);
   - row reductions: 4 vectors of partial sums (LLVM keeps them in registers).
2. the tuner's measurements (`python -m mirax.tune`, mirax/tune.py), stored per host in
   `$MIRAX_CACHE_DIR/tuning/<host key>.json`: the fastest measured candidate per op and
   shape class; a compile uses the entry of the nearest tuned shape class of its op.

`MIRAX_NUM_THREADS` caps the threads (1 turns OpenMP off); the OpenMP runtime is the
first LLVM-compatible one found (`openmp_library`); without one, kernels stay serial.
`MIRAX_TUNING=off` ignores stored measurements (the derived table only);
`MIRAX_TUNE_ON_FIRST_USE=seconds` searches an unmeasured matmul shape class when a compile
first meets it (once per process and class, within that many seconds) and stores it.
"""
from __future__ import annotations

import ctypes.util
import contextlib
import functools
import glob
import hashlib
import json
import math
import os
import platform
import sys

from . import host_cpu
from ..runtime.environment import number

FORMAT = 1
# (`linalg.matmul_transpose_b`: a linalg.matmul reading B stored N x K, `x @ W.T`, as
# MLIR's former named op of that name; its B is always repacked, so it is tuned apart.
# `linalg.matmul_transpose_a`: one reading A stored K x M, a weight's gradient `g.T @ x`,
# whose A read in place touches a new cache line at each k step: tuned apart too)
MATMUL_OPS = ("linalg.matmul", "linalg.batch_matmul", "linalg.matmul_transpose_b", "linalg.matmul_transpose_a")
TRANSPOSED_FORMS = ("linalg.matmul_transpose_a", "linalg.matmul_transpose_b")
# what a measured matmul entry chooses (matmul_codegen.plan reads each)
MATMUL_KEYS = ("mr", "nr", "kc", "nc", "forall_m", "pack_b", "pack_a", "rows_outer", "split")


# ---- layer 1: derived from the host -------------------------------------------------------

def register_tiles(h: host_cpu.HostCPU, every: bool = False) -> list[tuple[int, int]]:
    """(mr, nr) register tiles that fit the host's vector registers, best first.

    A tile keeps mr x v accumulators (v = nr / lanes vectors per row of C), v vectors of
    B and one broadcast of A in registers. Best first: the most accumulators (independent
    FMA chains hide the latency of B's loads), among tiles loading at most 0.7 vectors
    per FMA (two load ports feed two FMA pipes), then the fewest loads per FMA. Measured
    on Zen 5 (AVX-512, one thread, CPU time, 1024^3): 14x32 204, 12x32 214, 6x64 211,
    8x32 180, 4x64 144 GFLOP/s. `every`: the tiles over the load bound follow (for
    shapes the best ones would pad too much), then half-register tiles (nr = lanes / 2,
    on hosts of 8 lanes or more): a split product's last 8 columns on AVX-512 in 8-wide
    vectors instead of 16-wide ones half zeros (1000^3, 10x32 tiles, one process: 1-3%
    faster, the remainder's FMAs halved)."""
    lanes, regs = h.f32_lanes, h.vector_registers
    tiles = []
    # nr = 3 lanes (v12f32, v48f32) is left out: LLVM legalizes those vectors badly
    # (8x48 on AVX-512 ran at 3% of 8x32, measured).
    for v in (1, 2, 4):
        for mr in range(2, 17, 2):
            if mr * v + v + 1 <= regs:
                tiles.append((mr, v * lanes, mr * v, (mr + v) / (mr * v)))
    good = [t for t in tiles if t[3] <= 0.7] or tiles
    good.sort(key=lambda t: (-t[2], t[3]))
    if every:
        good += sorted((t for t in tiles if t not in good), key=lambda t: (t[3], -t[2]))
        if lanes >= 8:  # (one accumulator, one B vector and A's broadcast a row of the tile)
            good += [(mr, lanes // 2, mr, 0) for mr in range(16, 1, -2) if mr + 2 <= regs]
    return [(mr, nr) for mr, nr, _, _ in good]


def _round_down(x: int, step: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, (x // step) * step))


def matmul_tiles(h: host_cpu.HostCPU, mr: int, nr: int, kc: int | None = None) -> dict:
    """Cache tiles around an mr x nr register tile on host `h`."""
    if kc is None:  # B's kc x nr micro panel in half of L1d
        kc = _round_down(h.l1d // 2 // (nr * 4), 32, 32, 512)
    nc = _round_down(h.l2 // 2 // (kc * 4), nr, nr, 4096)     # B's kc x nc block in half of L2
    forall_m = _round_down(h.l2 // 4 // (kc * 4), mr, mr, 8 * mr)  # A's strip per task
    return dict(mr=mr, nr=nr, kc=kc, nc=nc, forall_m=forall_m)


def pack_b_default(m: int, n: int, k: int, mr: int, h: host_cpu.HostCPU | None = None) -> bool:
    """Whether an unmeasured matmul repacks B into nr-wide panels (matmul_codegen.pack_b).

    The copy of B (K x N) is repaid by a contiguous micro panel when B's rows would read
    with a stride of whole pages (every row in the same L1 sets: 1024^3 on Zen 5, one
    thread: 179 -> 222 GFLOP/s) or B outgrows L2 twice over (a new page each k step:
    4096x4096x1024 137 -> 185, 1000^3 184 -> 198), and there are enough rows (16 register
    tiles) to amortize it (256x512x784 ran 232 plain, 218 packed)."""
    h = h or host_cpu.host()
    if m < 16 * mr:
        return False
    return (n * 4) % 4096 == 0 or k * n * 4 > 2 * h.l2


def split_default(m: int, n: int, k: int, mr: int, nr: int) -> bool:
    """Whether an unmeasured matmul that the mr x nr tile does not divide is split
    (matmul_codegen.split_remainders: the divisible part in place, the remainders
    padded) rather than padded whole: when the tile fits in both M and N (else the
    divisible part would still be padded) and that part holds 7/8 of M x N at least (else
    the remainders, padded to their own tiles, cost more than the copies they spare)."""
    return m >= mr and n >= nr and (m - m % mr) * (n - n % nr) >= 7 * m * n / 8


def derive(h: host_cpu.HostCPU | None = None) -> dict:
    """The whole table for host `h` (default: this one) from its features alone."""
    h = h or host_cpu.host()
    lanes = h.f32_lanes
    mr, nr = register_tiles(h)[0]
    mm = matmul_tiles(h, mr, nr)
    # smaller products go to the generic lowering: fewer than 8 micro tiles of depth 64
    mm.update(min_flops=2 * 8 * mr * nr * 64, max_pad=1.5, max_pad_skinny=4.0)
    # tasks of fewer multiply-adds (~20 us of one core at 2 vector FMAs a cycle, 3 GHz)
    # are scheduled statically: a dynamic dispatch call a task costs more than it balances
    mm.update(dynamic_min_task_macs=lanes << 17)
    # a product whose slice of B a task reads (its one n-block's kc x N, or all of B with
    # the rows outermost) fits half of L2 is cut into this many row tasks a thread
    # (matmul_codegen._balanced_rows): threads of unequal speed end together
    mm.update(tasks_per_thread=8, l2_bytes=h.l2)
    # elements from which a kernel runs on the threads: its f32 input and output (8 bytes
    # an element) outgrow one core's L2 (131072 with 1 MiB; the tuner measured 49152-98304
    # on Zen 4, where the L2 itself had been used as an element count: 1M, 16x too many)
    parallel = max(1 << 14, h.l2 // 8)
    few_registers = h.isa in ("avx2", "sse")  # x86 without AVX-512: 16 vector registers
    reg_bytes = h.vector_bits // 8
    return {
        "host": h.key(),
        # all-parallel linalg.generic (after fusion): split the outermost splittable dim
        # ...and outputs larger than the last-level cache written with streaming stores of
        # one cache line each (mirax-streaming-stores; the host's line: Apple's cores 128 bytes)
        # ...and, on x86 without AVX-512 (16 vector registers, no embedded broadcast), their
        # constants kept in vectors LLVM spills and reloads as operands, `pin_bytes` a
        # register (else it re-broadcasts them every iteration), and smaller ops with at
        # least half the registers' worth of constants get the same loops, normal stores;
        # there an iteration is one register, not a line (`loop_vector_bytes`: a line's two
        # registers doubled the live values, and the constants no longer fit beside them)
        # Those streamed ops are split into `stream_tasks_per_thread` tasks a thread on their
        # outermost dim, scheduled dynamically (mirax-parallelize): when another process
        # holds a core, the other thread takes over its tasks (gelu 32x1000x4096, two
        # threads, a process spinning on one core: 40.4 -> 27.4 ms); a task is at least
        # 1/16 of the last-level cache, so a dispatch call a task (~1 us) is lost in it.
        # Their inputs are prefetched into L1 `stream_prefetch_bytes` ahead (an eighth of
        # the L1d): a compute-heavy body fills the core's window with arithmetic, so its
        # loads of the next lines start late and the loop waits on memory between bursts
        # of compute (gelu over 32x1000x4096 on Emerald Rapids, two threads: 54 ms, the
        # copy 30; in C, 4-16 KiB ahead: 42 -> 27 ms, prefetches into L2 34)
        "elementwise": dict(parallel_min_elements=parallel,
                            streaming_store_bytes=h.l3 or h.l2 * max(1, h.cores),
                            stream_prefetch_bytes=h.l1d // 8,
                            stream_tasks_per_thread=8,
                            line_bytes=h.line,
                            loop_vector_bytes=reg_bytes if few_registers else h.line,
                            pin_bytes=reg_bytes if few_registers else 0,
                            vector_min_constants=h.vector_registers // 2 if few_registers else 0,
                            # every kernel's loops vectorized at the registers' full width
                            # (runtime/llvm_codegen.py `loop_attributes`): LLVM prefers
                            # 256-bit vectors on Intel's AVX-512 server cores. The vector
                            # math library's 16-lane functions took pow on 4M f32 from 0.65x
                            # to 1.05x numpy's speed; gelu, exp and tanh over 4M f32 (in
                            # cache, two threads) ran 20-36% faster (Emerald Rapids, in
                            # separate runs)
                            loop_vector_bits=h.vector_bits),
        # linalg.generic with reduction iterators (sum, max, mean...): split a parallel dim
        "reduction": dict(parallel_min_elements=parallel),
        # fills, copies, transposes, broadcasts that survived fusion: memory-bound; a
        # transpose that keeps the innermost dim copies its runs in blocks of as many source
        # rows as the L1d's ways (rows 4 KiB apart share one set: mirax-vectorize-transposes)
        "other": dict(parallel_min_elements=2 * parallel, transpose_run_block=max(2, h.l1d_ways)),
        # mirax-fuse-reductions: reductions + their elementwise producers/consumers over the
        # same rows in one row loop. min_elements is a compile-time bound, not a hardware
        # one (smaller groups cost no transform-interpreter time); blocks are single rows
        # (several rows a block made LLVM unroll the row loop: 3-20x the JIT time). Rows of
        # at least split_min columns keep partial_sums independent accumulators (4 vectors);
        # shorter rows' short constant trip counts get fully unrolled by LLVM.
        # The next rows are prefetched into L2 (locality 2: prefetcht1, PLDL2KEEP), not L1:
        # a 16 KiB row of prefetcht0s held L1's few fill buffers while the exp loop ran
        # (logsumexp 4096^2 from memory 5.0 -> 4.3 ms on an Intel AVX-512 host; softmax
        # and layer norm unchanged); the L1 streamer brings the row in from L2.
        "row_fusion": dict(min_elements=1 << 16, block_elements=1, partial_sums=4 * lanes,
                           split_min=128 * lanes, prefetch_locality=2),
        "matmul": {(op, "f32"): dict(mm) for op in MATMUL_OPS},
        # LLVM's optimization level in the JIT. O3 costs ~3x O2 on big functions (a
        # transformer training step, 143 KB of mirax IR: 10 s vs 3.3 s) for no measured
        # speed-up there; small kernels keep O3. (Compile time, not the host.)
        "jit": dict(opt_level=3, large_module_chars=20_000, large_opt_level=2),
        # f32 pow as mirax-math-approx's table-free polynomial (in f64) or the vector math
        # library's call: the library reads its tables with gathers, whose cost moves
        # with the core and its state (an Intel rocketlake host, 4M f32: in bench pairs
        # libmvec 0.59-0.88x numpy's SVML, the polynomial 0.76-1.19x; back to back the
        # library 2.98 ms, the polynomial 3.15; under the AVX2 cap the library won too).
        # Derived: the polynomial where there is no library (one libm call a lane, 2.9x
        # slower); the tuner measures both (`python -m mirax.tune`, math powf).
        "math": dict(pow_polynomial=vector_math_library() is None),
        # convolutions on the CPU (dialect/conv.py): a chunk's window copy (im2col) of
        # at most half of L2, so the product reads it from cache (16x64x64x64 3x3 on
        # rocketlake, a quarter to twice that: within 10%), but at least 1 MiB: each
        # chunk runs two parallel regions and packs the weights again, and on a small L2
        # that cost more than the cache saved (Zen 3, L2 512 KiB, 256 KiB -> 1 MiB in
        # interleaved runs: 3x3 43.9 -> 36.7 ms, 7x7 stem 25.7 -> 17.0, 1-d 46.8 -> 41.4,
        # 3x3 stride 2 42.5 -> 42.0; 2-8 MiB no better); a kernel is cut along its
        # first dim only when min_rows rows of its whole window (8 register tiles a
        # thread) would not fit. Grouped convolutions run a product a group when a group
        # has a vector of output channels at least (fewer pad the tile's columns), and at
        # most max_groups groups (each is code of its own: a compile-time bound)
        "conv": dict(im2col_bytes=max(h.l2 // 2, 1 << 20), min_rows=max(1, h.cores) * 8 * mr,
                     group_min_out=lanes, max_groups=16),
        # sort (dialect/sort.py): a row's bitonic blocks, then vector merges of them. A
        # level of the network costs an element fewer instructions than a merge pass
        # (whose vectors wait on each other), so blocks stay large while they fit L2 with
        # room: L2 / 16 (znver5, 1 MiB L2: blocks of 16 KiB to 128 KiB within 10% on
        # 1024 x 4096, 2^20, 64 x 50000, 256 x 16384 f32; L1d-sized ones 3-40% slower)
        # Rows of at least radix_bytes of 32-bit keys sort by the LSD radix sort instead
        # (dialect/sort.py `_radix_keys_row`: four passes over the keys, where the
        # merges' passes grow with log2 of the row's blocks): from L2 / 4 (Zen 3, 512 KiB
        # L2, f32 rows: 16384 15.5 ms bitonic against 16.4 radix, 24576 9.7 / 9.6, 32768
        # 17.0 / 16.5, 50000 15.1 / 12.7, 2^20 in one row 9.1 / 6.9). Rows of 64-bit keys
        # (f64, int64, and argsort's (key, index) pairs), whose bitonic blocks hold half
        # the lanes, from radix_wide keys: four a counter of a pass (f64 4096 x 1024 51 ms
        # against 33, argsort f32 4096 x 1024 45.8 / 19.3, 4096 x 256 7.3 / 6.9).
        # Rows of 64-bit keys that carry their indices beside them (argsort of f64,
        # int64, uint64: no room in the word for the index) sort by the radix sort
        # from radix_payload keys, else by the scalar merge sort (Zen 4, f64 argsort of
        # 2^20 in rows of n, radix / merge: 64 28.9 / 10.1 ms, 128 18.7 / 12.3, 256
        # 12.0 / 12.5, 1024 7.8 / 18.0, 65536 7.9 / 25.0: the counters' set-up is paid a
        # row, the merge's passes grow with log2 n).
        # One long row of those sorts in chunks whose keys and indices fit L2
        # (long_chunk_bytes), merged afterwards: the radix passes of a larger chunk
        # scatter beyond L2 (Zen 4, 1 MiB L2: rows of 65536 f64 7.9 ms for 2^20, of
        # 262144 28.7).
        # `python -m mirax.tune` measures the three radix thresholds (`tune_sort`).
        "sort": dict(block_bytes=h.l2 // 16, radix_bytes=h.l2 // 4, radix_wide=1024, radix_payload=256,
                     long_chunk_bytes=h.l2),
    }


# ---- layer 2: the tuner's measurements ---------------------------------------------------

def store_path(h: host_cpu.HostCPU | None = None):
    """Where the tuner keeps this host's measurements (None: no cache directory)."""
    try:
        from ..runtime.disk_cache import location
    except ImportError:
        return None
    root = location()
    h = h or host_cpu.host()
    return None if root is None else root / "tuning" / f"{h.key()}.json"


@functools.lru_cache(maxsize=4)
def _read(path: str, mtime: float) -> dict:
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if data.get("format") == FORMAT else {}


_override: dict = {}


@contextlib.contextmanager
def override(**sections):
    """Use these entries instead of the stored measurements (the tuner trying candidates):
    `with tuning.override(row_fusion={"4096": {"partial_sums": 32}}): ...`."""
    old = dict(_override)
    _override.update(sections)
    try:
        yield
    finally:
        _override.clear()
        _override.update(old)


def measured() -> dict:
    """This host's stored measurements ({} when untuned or `MIRAX_TUNING=off`), with any
    `override` in force on top."""
    if _override:
        return {**_stored(), **_override}
    return _stored()


_NOTHING: dict = {}  # (no measurements: one object, so `table`'s memo holds for it too)
_path_memo: list = [None, None]  # [what the path was computed from, the path]


def _stored() -> dict:
    """The store's entries, read again when its file changes (a stat a call: ~1 us; the
    path is computed again only when the environment or host that decides it changes —
    building it took ~30 us, ten times in a small kernel's compile)."""
    env = os.environ
    if env.get("MIRAX_TUNING", "").lower() in ("off", "0", "no"):
        return _NOTHING
    basis = (env.get("MIRAX_CACHE_DIR"), env.get("XDG_CACHE_HOME"), env.get("HOME"), host_cpu.host())
    if _path_memo[0] != basis:
        path = store_path()
        _path_memo[:] = [basis, None if path is None else str(path)]
    path = _path_memo[1]
    if path is None:
        return _NOTHING
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return _NOTHING
    return _read(path, mtime)


def save(section: str, key: str, entry) -> None:
    """Record one measured choice, a JSON value (atomically; other processes may read the
    file)."""
    path = store_path()
    if path is None:
        raise RuntimeError("mirax tuning: no cache directory (MIRAX_CACHE_DIR is empty or the disk cache is off)")
    data = json.loads(json.dumps(_stored())) or {"format": FORMAT, "host": host_cpu.host().to_json()}
    data.setdefault(section, {})[key] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)
    _read.cache_clear()


def _bucket(x: int) -> int:
    return max(0, math.ceil(math.log2(max(x, 1))))


def _align(x: int) -> int:
    """log2 of the largest power of two (up to 64) dividing x: 1024 -> 6, 1000 -> 3."""
    a = 0
    while a < 6 and x % (2 << a) == 0:
        a += 1
    return a


def shape_class(op: str, batch, m: int, n: int, k: int) -> str:
    """Shapes whose sizes round to the same powers of two, and whose M and N are multiples
    of the same powers of two (up to 64), share a tuning entry: 1000^3 and 1024^3 do
    not (a tile of 10 rows, best for 1000, pads 1024)."""
    b = f"b{_bucket(batch)}:" if batch else ""
    return f"{op.split('.')[-1]}:{b}{_bucket(m)}x{_bucket(n)}x{_bucket(k)}/{_align(m)}x{_align(n)}"


def parse_shape(s: str):
    """'MxNxK', 'batch:MxNxK', 'MxNxKT' (B stored N x K: `x @ W.T`, see `transposed_b`)
    or 'TMxNxK' (A stored K x M: `g.T @ x`, see `transposed_a`) -> (batch or None, M, N,
    K): `python -m mirax.tune`'s shapes, as an entry's "shape" keeps them."""
    batch, _, mnk = s.strip().rpartition(":")
    m, n, k = (int(x) for x in mnk.lower().strip("t").split("x"))
    return (int(batch) if batch else None), m, n, k


def transposed_b(s: str) -> bool:
    """Whether shape `s` names the product with B stored N x K (a trailing T: 256x512x784T
    is x @ W.T with W 512 x 784, as nn.Linear computes it)."""
    return s.strip().lower().endswith("t")


def transposed_a(s: str) -> bool:
    """Whether shape `s` names the product with A stored K x M (a leading T: T512x784x256
    is g.T @ x with g 256 x 512, a Linear weight's gradient)."""
    return s.strip().rpartition(":")[2].lower().startswith("t")


def form_of(op: str, transpose_a: bool = False, transpose_b: bool = False) -> str:
    """The tuning form of product `op` (linalg.matmul or batch_matmul) with A stored K x M
    or B stored N x K: each has entries of its own (MATMUL_OPS)."""
    return "linalg.matmul_transpose_b" if transpose_b else "linalg.matmul_transpose_a" if transpose_a else op


def shape_spec(op: str, batch, m: int, n: int, k: int) -> str:
    """The shape text of a product (`parse_shape`'s inverse): 'T' before it for A read
    transposed, after it for B."""
    return ((f"{batch}:" if batch else "") + ("T" if op == "linalg.matmul_transpose_a" else "")
            + f"{m}x{n}x{k}" + ("T" if op == "linalg.matmul_transpose_b" else ""))


def _class_dims(key: str):
    """(op, batch bucket or None, [m, n, k buckets], [m, n alignments] or None) of a class."""
    op, _, rest = key.partition(":")
    rest, _, align = rest.partition("/")
    parts = rest.split(":")
    b = int(parts[0][1:]) if len(parts) == 2 else None
    return op, b, [int(x) for x in parts[-1].split("x")], ([int(x) for x in align.split("x")] if align else None)


def nearest_measured(op: str, dtype: str, batch, m: int, n: int, k: int):
    """The stored entry of the nearest measured shape class of `op` (within a factor of 4
    per dimension), or None. An entry whose register tile pads a dimension of this shape
    that it did not pad in the shape it was measured on is passed over (padding copies A
    or slices C: its speed says little here)."""
    entries = measured().get("matmul", {})
    want_op, want_b, want, want_align = _class_dims(shape_class(op, batch, m, n, k))
    best, dist = None, None
    for key, e in entries.items():
        if e.get("dtype", "f32") != dtype:
            continue
        o, b, dims, align = _class_dims(key)
        if o != want_op or (b is None) != (want_b is None):
            continue
        d = [abs(x - y) for x, y in zip(dims, want)] + ([abs(b - want_b)] if b is not None else [])
        if max(d) > 2:
            continue
        # of equally near classes, the one of the same divisibility (1024^3: 1024's entry, not 1000's)
        d.append(0.5 * sum(x != y for x, y in zip(align or [-1, -1], want_align)))
        if "mr" in e and "shape" in e:
            own = parse_shape(e["shape"])[1:]
            if (m % e["mr"] and not own[0] % e["mr"]) or (n % e["nr"] and not own[1] % e["nr"]):
                continue
            # nor one that left B as it is where B's rows were not a page-multiple stride
            # apart and here they are (every row in the same L1 sets: 1000^3's 14x16 plain
            # tiles ran 1024^3 at 87 GFLOP/s, its derived tiles with B repacked at ~190)
            if not e.get("pack_b", 1) and (n * 4) % 4096 == 0 and (own[1] * 4) % 4096:
                continue
        if dist is None or sum(d) < dist:
            best, dist = e, sum(d)
    return best


def matmul_config(op: str, dtype: str, batch, m: int, n: int, k: int) -> dict | None:
    """Tiles for one matmul: the measured entry of its shape class (or the nearest), else
    the derived default; None for an op/dtype the code generator does not handle."""
    base = table()["matmul"].get((op, dtype))
    if base is None:
        return None
    cfg = dict(base)
    tuned = nearest_measured(op, dtype, batch, m, n, k)
    if tuned is None and os.environ.get("MIRAX_TUNE_ON_FIRST_USE") and not _override:
        tuned = _tune_now(op, batch, m, n, k, number("MIRAX_TUNE_ON_FIRST_USE", 0.0, minimum=0))
    if tuned is None and op in TRANSPOSED_FORMS:
        tuned = transposed_fallback(op, dtype, batch, m, n, k)
    if tuned:
        cfg.update({x: tuned[x] for x in MATMUL_KEYS if x in tuned})
        if "shape" in tuned and shape_class(op, batch, m, n, k) != shape_class(op, *parse_shape(tuned["shape"])):
            # a neighbour's padding choice was measured for its own remainders: here the
            # host's rule decides (a 1-d convolution's 256 x 128 x 640 window products, 6x16
            # tiles from 256x512x784's entry: padded whole as there, 0.66x jax.jit; split,
            # 0.83-0.85x)
            cfg.pop("split", None)
        return cfg
    # unmeasured: of the host's best register tiles, the first that needs no padding
    # (padding copies A and slices C; per batch in a batched product: 64x256^3 ran at a
    # third of the speed of an unpadded tile)
    h = host_cpu.host()
    for mr, nr in register_tiles(h)[:6]:
        if m % mr == 0 and n % nr == 0:
            cfg.update(matmul_tiles(h, mr, nr))
            break
    return cfg


def transposed_fallback(op: str, dtype: str, batch, m: int, n: int, k: int):
    """What a product of a transposed form (TRANSPOSED_FORMS) takes while that form is
    unmeasured, and what the tuner races as its incumbent: the plain product's nearest
    measured entry (or None), for `g.T @ x` with both operands repacked — read in place,
    each k step's mr values of A sit on a cache line of their own, a kc-deep panel on kc
    lines of L1 (T512x784x256 on Zen 3: the plain entry's unpacked 6x16 tiles 108 GFLOP/s,
    both operands repacked 139). (`x @ W.T`'s B is repacked by matmul_codegen.plan.)"""
    plain = nearest_measured("linalg.matmul", dtype, batch, m, n, k)
    if plain and op == "linalg.matmul_transpose_a":
        plain = dict(plain, pack_b=1, pack_a=1)
    return plain


_tried: set = set()


def _tune_now(op, batch, m, n, k, budget):
    """`MIRAX_TUNE_ON_FIRST_USE=seconds`: search this shape class now, within the budget,
    once per process (the tuner compiles its candidates with explicit tiles, so it does not
    come back here)."""
    cls = shape_class(op, batch, m, n, k)
    if cls in _tried or store_path() is None:
        return None
    _tried.add(cls)
    from mirax.tune import tune_matmul
    spec = shape_spec(op, batch, m, n, k)
    try:
        return tune_matmul(spec, budget=budget, log=lambda *_: None)
    except Exception:  # noqa: BLE001 - tuning is an optimisation: the derived tiles remain
        return None


def row_fusion_config(row_elems: int) -> dict:
    cfg = dict(table()["row_fusion"])
    tuned = measured().get("row_fusion", {})
    if tuned:  # the nearest measured row length
        key = min(tuned, key=lambda r: abs(_bucket(int(r)) - _bucket(row_elems)))
        if abs(_bucket(int(key)) - _bucket(row_elems)) <= 2:
            cfg["partial_sums"] = tuned[key]["partial_sums"]
    return cfg


@functools.lru_cache(maxsize=1)
def _derived() -> dict:
    return derive(host_cpu.host())


def _remembered(memo: list, make):
    """make(measured, derived table), made again only when either changes (never kept
    under `override`): `memo` is [measured, derived, value]. A compile asks for the table
    ~ten times and for the fingerprint twice (a hash of both tables, ~160 us)."""
    m, d = measured(), _derived()
    if not _override and memo[0] is m and memo[1] is d:
        return memo[2]
    out = make(m, d)
    if not _override:
        memo[:] = [m, d, out]
    return out


_table_memo: list = [None, None, None]
_fingerprint_memo: list = [None, None, None]


def table() -> dict:
    """This host's derived table with the measured thresholds applied. Not to be modified."""
    return _remembered(_table_memo, _with_measured)


def _with_measured(m: dict, t: dict) -> dict:
    thresholds = m.get("parallel", {})
    if thresholds:
        t = dict(t)
        for fam, v in thresholds.items():
            t[fam] = dict(t[fam], parallel_min_elements=v["parallel_min_elements"])
    for section in ("conv", "sort"):  # (the tests' overrides: chunks and blocks that cut every dim)
        if section in m:
            t = dict(t, **{section: dict(t[section], **m[section])})
    if "powf" in m.get("math", {}):
        t = dict(t, math=dict(t["math"], pow_polynomial=bool(m["math"]["powf"]["polynomial"])))
    return t


def fingerprint() -> str:
    """What the generated code depends on here (for the kernel cache's key)."""
    return _remembered(_fingerprint_memo, _hash_tables)


def _hash_tables(m: dict, d: dict) -> str:
    h = hashlib.sha256(repr(sorted(d.items(), key=str)).encode())
    h.update(json.dumps(m, sort_keys=True).encode())
    return h.hexdigest()[:16]


def jit_opt_level(module_text: str) -> int:
    t = table()["jit"]
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
        return _checked_openmp_library(env) if env else None
    return _find_openmp_library()


@functools.lru_cache(maxsize=None)
def _checked_openmp_library(path: str):
    """`path` if it loads and defines the LLVM OpenMP entry points, else None with a
    warning: a kernel linked against a missing library aborted the process in the JIT
    (MLIR's ExecutionEngine: "Symbols not found: __kmpc_fork_call"), so the kernels run
    on one thread instead."""
    import warnings
    try:
        ctypes.CDLL(path).__kmpc_fork_call  # noqa: B018 - the lookup is the check
    except (OSError, AttributeError) as err:
        warnings.warn(f"mirax: MIRAX_OPENMP_LIB={path!r} is not an LLVM OpenMP runtime ({err}); "
                      "kernels run on one thread", RuntimeWarning, stacklevel=2)
        return None
    return path


@functools.lru_cache(maxsize=1)
def _find_openmp_library():
    """(Searched once per process: `find_library` runs ldconfig, ~90 ms, and every matmul
    plan asks.)"""
    candidates = [os.path.join(sys.prefix, "lib", n) for n in ("libomp.so", "libomp.so.5", "libiomp5.so")]
    # (this machine's multiarch directory only: another architecture's copy exists where
    # Debian's multiarch installed one, and under qemu-user, which falls back to the host's
    # files, but cannot be loaded)
    multiarch = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}
    if platform.machine().lower() in multiarch:
        candidates.append(f"/usr/lib/{multiarch[platform.machine().lower()]}-linux-gnu/libomp.so.5")
    candidates += ["/opt/homebrew/opt/libomp/lib/libomp.dylib", "/usr/local/opt/libomp/lib/libomp.dylib"]
    for c in candidates:
        if os.path.exists(c):
            return c
    # (a glob only when those are missing: it is a warm process's first compiled call's time)
    versioned = sorted(glob.glob("/usr/lib/llvm-*/lib/libomp.so*"), reverse=True)
    if versioned:
        return versioned[0]
    for name in ("omp", "iomp5"):
        found = ctypes.util.find_library(name)
        if found:
            return found
    return None


# glibc's libmvec (vector sin, cos, tan, pow, atan2...): from these versions it defines
# every function LLVM's LIBMVEC table maps (x86_64: glibc 2.35 added tan, atan2, sinh and
# the rest to 2.22's sin, cos, pow, exp, log; aarch64: 2.40), so no kernel can be left
# with a vector call the loader cannot resolve
LIBMVEC_GLIBC = {"x86_64": (2, 35), "aarch64": (2, 40)}


def vector_math_library():
    """(name, path) of the vector math library kernels call, or None. With it, a loop
    calling sin, cos, tan, pow, atan2... calls the library's 4-, 8- or 16-lane versions
    (runtime/llvm_codegen.py `vector_library_calls`); without, each lane calls libm (4M
    floats: sin 18.7 ms against numpy's own SIMD sin, 3.6 ms).
    The functions mirax-math-approx writes out (f32 exp, log, erf, tanh...) never reach
    it. Linux: glibc's libmvec (at most 4 ulp). `MIRAX_VECTOR_LIBRARY=none` turns it off."""
    if os.environ.get("MIRAX_VECTOR_LIBRARY", "").lower() in ("none", "off", "0"):
        return None
    return _find_vector_math_library()


@functools.lru_cache(maxsize=1)
def _find_vector_math_library():
    machine = platform.machine().lower()
    need = LIBMVEC_GLIBC.get(machine)
    if not sys.platform.startswith("linux") or need is None:
        return None
    try:
        name, version = os.confstr("CS_GNU_LIBC_VERSION").split()
        have = tuple(int(v) for v in version.split(".")[:2])
    except (AttributeError, ValueError, OSError):
        return None
    if name != "glibc" or have < need:
        return None
    for d in (f"/lib/{machine}-linux-gnu", f"/usr/lib/{machine}-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"):
        path = os.path.join(d, "libmvec.so.1")
        if os.path.exists(path):
            return "libmvec", path
    return None


def threads() -> int:
    """How many threads kernels may use: the CPUs this process may run on, capped by
    `MIRAX_NUM_THREADS`; 1 when no OpenMP runtime is available."""
    n = host_cpu.usable_cpus("MIRAX_NUM_THREADS")
    if n > 1 and openmp_library() is None:
        return 1
    return n
