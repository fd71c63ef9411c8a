"""`python -m mirax.tune`: measure the code generator's choices on this host and remember them.

    python -m mirax.tune                       # the default shape classes, ~2-4 minutes
    python -m mirax.tune --budget 60           # stop searching after 60 s
    python -m mirax.tune --matmul 1024x1024x1024 64:256x256x256   # M x N x K, batch:... (only these)
    python -m mirax.tune --matmul 256x512x784T   # x @ W.T (W stored N x K: nn.Linear's form)
    python -m mirax.tune --matmul T512x784x256   # g.T @ x (g stored K x M: a Linear weight's gradient)
    python -m mirax.tune --show                # the host, the derived table, what was measured
    python -m mirax.tune --reset               # forget this host's measurements

For each matmul shape it compiles the candidate tilings the host admits
(`lowering/tuning.py`: register tiles that fit the vector registers x cache tiles from
L1/L2), checks every candidate's product against numpy, times them interleaved (one round
of all, three of the best eight, five of the best three; medians of the rounds' medians)
and stores the fastest with its shape class (a stored choice races too, and a challenger
replaces it only by beating it twice: in the final race and in one of the two alone);
later compiles of any matmul of that class
(or the nearest measured one) use it. Row reductions (softmax, layer norm: the partial
sums of mirax-fuse-reductions), the threads threshold of elementwise kernels, f32 pow
(the polynomial or the vector math library's call) and the row length from which sorts
take the radix sort are measured the same way. Results live in `$MIRAX_CACHE_DIR/tuning/<host>.json`
(`tuning.store_path()`), one file per host, so a cache directory shared by machines keeps
each one's choices. `MIRAX_TUNING=off` ignores them. A product reading B transposed in
place (`x @ W.T`; its B always repacked from that layout) has classes of its own
(`matmul_transpose_b:...`), as has one reading A transposed (`g.T @ x`, a weight's
gradient: `matmul_transpose_a:...`); unmeasured, they take the plain product's measured
tiles (A read transposed then repacked). A
product that compiles make dot products (lowering/matmul_dot.py: a few vectors wide) has
no tiles to tune and is skipped.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from .lowering import host_cpu, tuning
from .lowering.tuning import parse_shape, transposed_a, transposed_b
from .runtime import buffers

# the shapes of bench/ and of the examples' training steps (MLP 784-512-512-10, batch 256;
# transformer LM)
DEFAULT_MATMULS = ["1024x1024x1024", "4096x4096x1024", "1000x1000x1000", "64:256x256x256",
                   "256x512x784", "256x512x512", "512x512x256", "256x256x256",
                   "256x512x784T", "256x512x512T",  # (T after: x @ W.T, nn.Linear's forward)
                   "T512x784x256", "T512x512x256"]  # (T before: g.T @ x, its weights' gradients)
# (T512x784x256: the MLP's first weight gradient g.T @ x, which matmul_codegen reads from
# the vjp's (x.T @ g).T with both operands in place; as a plain product it ran ~20% slower
# than its operands copied to row-major; untuned, 14-row tiles that leave 8 rows over)
DEFAULT_ROWS = [(4096, 4096), (1024, 1024)]


def matmul_text(batch, m, n, k, transpose_b: bool = False, transpose_a: bool = False) -> str:
    lead = f"{batch}x" if batch else ""
    a, b, c = (f"tensor<{lead}{x}x{y}xf32>" for x, y in (((k, m) if transpose_a else (m, k)),
                                                          ((n, k) if transpose_b else (k, n)), (m, n)))
    op = "linalg.batch_matmul" if batch else "linalg.matmul"
    if transpose_a or transpose_b:
        from .lowering.matmul_codegen import TRANSPOSED_A, TRANSPOSED_B
        op += f" indexing_maps = {TRANSPOSED_B if transpose_b else TRANSPOSED_A}"
    return f"""
func.func @mm(%a: {a}, %b: {b}) -> {c} attributes {{llvm.emit_c_interface}} {{
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : {c}
  %f = linalg.fill ins(%z : f32) outs(%e : {c}) -> {c}
  %r = {op} ins(%a, %b : {a}, {b}) outs(%f : {c}) -> {c}
  return %r : {c}
}}"""


def _dot_product(m: int, n: int, k: int, transpose_b: bool, transpose_a: bool = False) -> bool:
    """Whether a compile makes this product dot products (its tiles would never be used)."""
    from mlir import ir
    from .lowering import matmul_codegen, matmul_dot
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(matmul_text(None, m, n, k, transpose_b, transpose_a))
        return matmul_dot.qualifies(matmul_codegen.matmul_ops(module)[0])


def _lean_tiles(h, tiles: list, m: int, n: int, keep: int = 2) -> list:
    """Register tiles beyond `tiles` that pad an m x n product less than all of them (1000
    columns: 1008 with 16 lanes, 1024 with 32 or 64), at least 8 accumulators each (FMA
    latency), the most accumulators first among those within 1% of the least padding."""
    up = lambda x, t: -(-x // t) * t  # noqa: E731
    area = lambda t: up(m, t[0]) * up(n, t[1])  # noqa: E731
    best = min(area(t) for t in tiles)
    lean = [t for t in tuning.register_tiles(h, every=True)
            if t not in tiles and area(t) < best and t[0] * t[1] // h.f32_lanes >= 8]
    if not lean:
        return []
    least = min(area(t) for t in lean)
    lean = [t for t in lean if area(t) <= 1.01 * least]
    return sorted(lean, key=lambda t: -t[0] * t[1])[:keep]


def matmul_candidates(h: host_cpu.HostCPU | None = None, register_tiles: int = 6,
                      m: int | None = None, n: int | None = None) -> list[dict]:
    """The tilings the tuner may pick on host `h`: the best `register_tiles` register
    tiles by the register model (and, for an m x n product they all pad, the two that pad
    it least; a tile that pads it both padded whole and split into the part it divides and
    padded remainders), each with the derived kc and half and twice it, B as it
    is or repacked into nr-wide panels; and both operands repacked (A into mr-row panels)
    with 4x and 8x the derived kc (panels read contiguously afford deep k slices: C read
    and written fewer times), in GotoBLAS's loop order or with the threads' rows outermost
    (each task zero-fills its rows of C in cache)."""
    h = h or host_cpu.host()
    out = []
    tiles = tuning.register_tiles(h, every=True)[:register_tiles]
    if m and n:
        tiles += _lean_tiles(h, tiles, m, n)
    for mr, nr in tiles:
        base = tuning.matmul_tiles(h, mr, nr)["kc"]
        for kc in sorted({max(32, base // 2), base, min(512, base * 2)}):
            for pack in (0, 1):  # B as it is, or repacked into nr-wide panels
                out.append(dict(tuning.matmul_tiles(h, mr, nr, kc), pack_b=pack, pack_a=0, rows_outer=0))
        deep = sorted({min(1024, base * 4), min(1024, base * 8)})
        out.append(dict(tuning.matmul_tiles(h, mr, nr, deep[0]), pack_b=1, pack_a=1, rows_outer=0))
        for kc in deep:  # the threads' rows outermost: tall tasks (32 register tiles)
            out.append(dict(tuning.matmul_tiles(h, mr, nr, kc), pack_b=1, pack_a=1, rows_outer=1, forall_m=32 * mr))
    if m and n:  # a tile that pads the product: padded whole, or split (the divisible part in
        # place); a tile that does not pad it chooses nothing (its neighbours keep the default)
        pads = lambda c: m % c["mr"] or n % c["nr"]  # noqa: E731
        out = [v for c in out for v in ([dict(c, split=0), dict(c, split=1)] if pads(c) else [c])]
    return out


# What a candidate costs: wall time by default (a serial part of a kernel counts fully).
# On a busy machine the command line counts the CPU time of all the process's threads
# instead (OpenMP's idle threads told to sleep at once, KMP_BLOCKTIME=0, so waiting costs
# nothing), which other load barely moves but which cannot see serial parts.
_clock = [time.perf_counter]


def _timed(fn, calls: int) -> float:
    clock = _clock[0]
    ts = []
    for _ in range(calls):
        t = clock()
        fn()
        ts.append(clock() - t)
    return statistics.median(ts)


def _race(fns: dict, rounds: int, calls: int) -> dict:
    """Seconds per call of each contender: the median of the rounds' medians, rounds
    interleaved. Not the best round: a shared host's load does not only add time, it
    ranks tilings differently. On a Zen 3 VM, 512x512x256 in 4x16 tiles ran 137-139
    GFLOP/s in two rounds and 181 in a third, 6x16 tiles 157 and 172: the best of
    three picked 4x16, which then ran 0.86x numpy in bench/matmul.py where 6x16 ran
    1.06-1.10x (1000^3 likewise: 0.84-0.88x against 1.05x)."""
    times = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            times[k].append(_timed(fn, calls))
    return {k: statistics.median(v) for k, v in times.items()}


def tune_matmul(shape: str, *, budget: float = 60.0, log=print, save: bool = True) -> dict | None:
    """Search the candidates for one matmul shape; store and return the winner."""
    from .lowering import matmul_codegen as mc
    batch, m, n, k = parse_shape(shape)
    tb, ta = transposed_b(shape), transposed_a(shape)
    if (tb or ta) and batch:
        raise ValueError(f"tune_matmul: {shape!r}: a transposed operand (T) is tuned for 2-d products only")
    if tb and ta:
        raise ValueError(f"tune_matmul: {shape!r}: A or B transposed (T before or after), not both")
    op = tuning.form_of("linalg.batch_matmul" if batch else "linalg.matmul", ta, tb)
    if not batch and _dot_product(m, n, k, tb, ta):
        log(f"  {shape}: dot products along K (lowering/matmul_dot.py): no tiles to tune")
        return None
    rng = np.random.default_rng(0)
    lead = (batch,) if batch else ()
    # the operands start at a cache line, as mirax's arrays do (runtime/buffers.py): numpy's
    # 16 bytes off one slowed the candidates that read B in place most
    a = buffers.aligned(lead + ((k, m) if ta else (m, k)), np.float32)
    b = buffers.aligned(lead + ((n, k) if tb else (k, n)), np.float32)
    a[...] = rng.standard_normal(a.shape, dtype=np.float32)
    b[...] = rng.standard_normal(b.shape, dtype=np.float32)
    ref = np.matmul((a.T if ta else a).astype(np.float64), (b.T if tb else b).astype(np.float64))
    c = buffers.aligned(lead + (m, n), np.float32)
    text = matmul_text(batch, m, n, k, transpose_b=tb, transpose_a=ta)
    deadline = time.monotonic() + budget
    flop = 2.0 * (batch or 1) * m * n * k
    calls = max(1, min(20, int(0.05 / max(flop / 100e9, 1e-6))))  # ~50 ms a round at 100 GFLOP/s
    fns, cfgs = {}, {}
    # the class's stored choice (if any) races again: a re-tune on a noisy machine keeps
    # it unless a candidate beats it in this run
    key = tuning.shape_class(op, batch, m, n, k)
    incumbent = {x: v for x, v in tuning.measured().get("matmul", {}).get(key, {}).items()
                 if x in tuning.MATMUL_KEYS}
    which = "the stored choice"
    if (tb or ta) and not incumbent:
        # what a compile does without an entry of this form (tuning.transposed_fallback)
        # races as the stored choice: a form entry is kept only if it beats that twice
        plain = tuning.transposed_fallback(op, "f32", None, m, n, k) or {}
        incumbent = {x: v for x, v in plain.items() if x in tuning.MATMUL_KEYS}
        if incumbent:
            if tb:  # (as matmul_codegen.plan compiles x @ W.T: B repacked, never split)
                incumbent.update(pack_b=1, split=0)
            which = "the plain product's choice"
    cands = matmul_candidates(m=m, n=n)
    if tb:  # its B is always repacked, and the product padded, never split (matmul_codegen.plan)
        cands = [dict(c, split=0) for c in cands if c["pack_b"] and not c.get("split")]
    if incumbent:
        cands = [c for c in cands if {x: c.get(x, 0) for x in incumbent} != {x: incumbent.get(x, 0) for x in incumbent}]
        cands.insert(0, incumbent)
        log(f"  {shape}: {which} {incumbent} races again")
    for i, cand in enumerate(cands):
        if time.monotonic() > deadline and fns:
            break
        try:
            # the candidate as the class's stored entry, alone: compiled exactly as a later
            # compile would plan it (its one-task-per-thread rule, the split default for an
            # entry without one), not as an explicit config, which plans differently
            with tuning.override(matmul={key: dict(cand, dtype="f32", shape=shape)}):
                fn = mc.compile_standalone(text, "mm")
        except Exception as err:  # noqa: BLE001 - a candidate that does not compile is skipped
            log(f"  {shape}: candidate {cand} failed to compile: {err}")
            continue
        c.fill(np.nan)
        fn([a, b], [c])
        err = float(np.abs(c - ref).max() / max(np.abs(ref).max(), 1e-30))
        if not err < 1e-4:
            log(f"  {shape}: candidate {cand} is wrong (relative error {err:.1e}); skipped")
            continue
        fns[i] = (lambda fn=fn: fn([a, b], [c]))
        cfgs[i] = cand
    if not fns:
        return None
    # one round each; the best eight three rounds more, interleaved; the best three of those
    # (and the incumbent) five more. One round of 87 candidates takes ~20 s, through the
    # shared host's fast and slow phases: on a Zen 3 VM the best four of one round left
    # out 6x16 tiles that beat its 1000^3 winner in every later race of the two (and in
    # bench/matmul.py: 1.00x numpy against 0.89x)
    first = _race(fns, 1, calls)
    best8 = sorted(first, key=first.get)[:8]
    second = _race({i: fns[i] for i in best8}, 3, calls)
    best = sorted(second, key=second.get)[:3]
    if incumbent and 0 in fns and 0 not in best:
        best.append(0)  # (the incumbent always runs in the final race)
    final = _race({i: fns[i] for i in best}, 5, calls)
    win = min(final, key=final.get)
    if incumbent and 0 in fns and win != 0:
        # a challenger replaces the stored choice only if it wins a second race of the two:
        # one noisy run picked an unpacked AVX2 1000^3 tiling (201 GFLOP/s in its race) that
        # ran 0.88x numpy in the benchmark, where the stored one runs 0.96-0.97x
        again = _race({0: fns[0], win: fns[win]}, 5, calls)
        log(f"  {shape}: the challenger {cfgs[win]} against the stored choice again: "
            f"{flop / again[win] / 1e9:.1f} vs {flop / again[0] / 1e9:.1f} GFLOP/s")
        if again[0] <= again[win]:
            win = 0
        final = {**final, **again}
    clock = "cpu" if _clock[0] is time.process_time else "wall"
    entry = dict(cfgs[win], dtype="f32", gflops=round(flop / final[win] / 1e9, 1), clock=clock,
                 shape=shape, candidates=len(fns))
    if "split" not in entry and (m % entry["mr"] or n % entry["nr"]):
        # (an incumbent stored before splitting was a choice: what plan did)
        entry["split"] = int(tuning.split_default(m, n, k, entry["mr"], entry["nr"]))
    worst = max(final.values())
    log(f"  {shape}: mr={entry['mr']} nr={entry['nr']} kc={entry['kc']} nc={entry['nc']} pack_b={entry['pack_b']} pack_a={entry.get('pack_a', 0)} rows_outer={entry.get('rows_outer', 0)} split={entry.get('split', '-')}: "
        f"{entry['gflops']} GFLOP per {clock} second ({len(fns)} candidates; the slowest of the "
        f"final race {flop / worst / 1e9:.1f})")
    if save:
        tuning.save("matmul", tuning.shape_class(op, batch, m, n, k), entry)
    return entry


def row_candidates(h: host_cpu.HostCPU | None = None) -> list[int]:
    """partial_sums widths the tuner may pick: 1, 2, 4 and 8 vectors of f32 lanes."""
    lanes = (h or host_cpu.host()).f32_lanes
    return [v * lanes for v in (1, 2, 4, 8)]


def _rotation(nbytes: int, h: host_cpu.HostCPU | None = None) -> int:
    """How many copies of an input of `nbytes` a race cycles through so each call reads
    it from memory, as a program's large arrays are, not from the last-level cache: twice
    the L3 (at most 256 MiB of it: a VM reports its host's whole L3; 32 MiB where unknown),
    4 to 64 copies (a call's three kernels each read one the others did not)."""
    h = h or host_cpu.host()
    return max(4, min(64, -(-2 * min(h.l3 or (32 << 20), 256 << 20) // max(nbytes, 1))))


def _cycle(items: list):
    """A function giving the next of `items` at each call, round and round: each call of
    a race takes inputs no kernel has read since the others were (`_rotation` of them)."""
    turn = [0]

    def nxt():
        turn[0] = (turn[0] + 1) % len(items)
        return items[turn[0]]
    return nxt


def tune_rows(rows: int, cols: int, *, log=print, save: bool = True) -> dict | None:
    """partial_sums for row reductions of `cols` columns: softmax, layer norm and
    logsumexp timed, each call on an input read from memory (`_rotation`). From the cache
    the widths rank otherwise: logsumexp 4096^2 under the AVX2 cap on the rocketlake host,
    8-lane vectors, 2 a step 2.13 ms and 4 a step 1.92 hot, but 2.48 and 3.17 ms from
    memory (2.83 and 3.54 after a 0.3 s pause, as the benchmark calls it); softmax and
    layer norm moved 3% at most."""
    import mirax as mr
    rng = np.random.default_rng(0)
    base = rng.standard_normal((rows, cols), dtype=np.float32)
    x = mr.array(base)
    ref = np.asarray(mr.softmax(x, axis=-1))
    fresh = _cycle([x] + [mr.array(base.copy()) for _ in range(_rotation(base.nbytes) - 1)])

    def layer_norm(v):
        mu = v.mean(axis=-1, keepdims=True)
        return (v - mu) * mr.rsqrt(((v - mu) ** 2).mean(axis=-1, keepdims=True) + 1e-5)

    fns = {}
    for width in row_candidates():
        if cols < 2 * width:
            continue
        with tuning.override(row_fusion={str(cols): {"partial_sums": width}}):
            sm = mr.compile(lambda v: mr.softmax(v, axis=-1))
            ln = mr.compile(layer_norm)
            lse = mr.compile(lambda v: mr.logsumexp(v, axis=-1))
            mr.eval(sm(x), ln(x), lse(x))  # compiled with this width
            got = np.asarray(sm(x))
            got_lse = np.asarray(lse(x))
        if not (np.allclose(got, ref, rtol=1e-4, atol=1e-6)
                and np.allclose(got_lse, np.log(np.exp(base.astype(np.float64)).sum(-1)), rtol=1e-5, atol=1e-5)):
            log(f"  rows {rows}x{cols}: partial_sums={width} is wrong; skipped")
            continue
        fns[width] = (lambda sm=sm, ln=ln, lse=lse: mr.eval(sm(fresh()), ln(fresh()), lse(fresh())))
    if not fns:
        return None
    final = _race(fns, 5, 3)
    win = min(final, key=final.get)
    entry = dict(partial_sums=win, ms=round(final[win] * 1e3, 3),
                 others={str(w): round(t * 1e3, 3) for w, t in final.items()})
    log(f"  rows {rows}x{cols}: partial_sums={win} ({entry['ms']} ms softmax + layer norm + logsumexp, "
        f"inputs from memory; {entry['others']})")
    if save:
        tuning.save("row_fusion", str(cols), entry)
    return entry


def thread_sizes() -> list[int]:
    """The sizes `tune_threads` tries: powers of two and the midpoints 3 * 2^k between them
    (a step of 1.5 or 1.33: a training step's 1536 x 64 activations, 98304 elements, fell
    between 65536 and 131072)."""
    return sorted({1 << p for p in range(14, 23)} | {3 << p for p in range(13, 22)})


def tune_threads(*, sizes=None, log=print, save: bool = True) -> dict | None:
    """The size from which an elementwise kernel is faster on all threads than on one:
    the first size where the kernel's own time (a call's time less that of the same call
    on 16 elements: inside a compiled program there is no call around each kernel) is at
    least 10% lower on all threads, at that size and the next one (one noisy round does not
    set it)."""
    import os
    import mirax as mr
    n = tuning.threads()
    if n <= 1:
        log("  threads: one thread (or no OpenMP runtime): nothing to tune")
        return None
    sizes = sizes or thread_sizes()

    def kernels(size, threads=(1, n)):
        x = mr.array(np.random.default_rng(0).standard_normal(size, dtype=np.float32))
        fns = {}
        for t in threads:
            os.environ["MIRAX_NUM_THREADS"] = str(t)
            try:
                with tuning.override(parallel={"elementwise": {"parallel_min_elements": 1}}):
                    f = mr.compile(lambda v: v * 0.5 + 1.0)
                    mr.eval(f(x))
            finally:
                os.environ.pop("MIRAX_NUM_THREADS", None)
            fns[t] = (lambda f=f: mr.eval(f(x)))
        return fns
    clock, _clock[0] = _clock[0], time.perf_counter  # threads only ever save wall time
    try:
        call = _race(kernels(16, threads=(1,)), 5, 200)[1]
        winner = None  # the size before, if it won
        for size in sizes:
            r = _race(kernels(size), 5, max(3, min(200, (1 << 22) // size)))
            wins = r[n] - call < 0.9 * (r[1] - call)
            if wins and winner is not None:
                found = winner
                break
            winner = size if wins else None
        else:
            found = sizes[-1] * 2
    finally:
        _clock[0] = clock
    log(f"  threads: elementwise kernels gain from {n} threads from {found} elements on")
    entry = {"elementwise": {"parallel_min_elements": found},
             "reduction": {"parallel_min_elements": found},
             "other": {"parallel_min_elements": 2 * found}}
    if save:
        for fam, e in entry.items():
            tuning.save("parallel", fam, e)
    return entry


def tune_pow(*, size: int = 1 << 22, log=print, save: bool = True) -> dict | None:
    """f32 pow by mirax-math-approx's polynomial or the vector math library's call: both
    compiled (a kernel over `size` elements, 2 threads where there are), checked against
    numpy's float64 pow, raced interleaved on inputs read from memory (`_rotation`); the
    faster one is stored (`math`, `powf`). From memory the ranking can turn over: on the
    rocketlake host (AVX-512, libmvec) 4M pows took 4.3 ms by the polynomial and 5.7-6.2
    by the library, but 3.2 and 3.1 ms on inputs hot in the cache."""
    import mirax as mr
    if tuning.vector_math_library() is None:
        log("  pow: no vector math library: the polynomial (derived)")
        return None
    rng = np.random.default_rng(0)
    x = rng.uniform(0.1, 3.0, size).astype(np.float32)
    y = rng.uniform(-5.0, 5.0, size).astype(np.float32)
    xa, ya = mr.array(x), mr.array(y)
    want = np.power(x.astype(np.float64), y.astype(np.float64))
    fresh = _cycle([(xa, ya)] + [(mr.array(x.copy()), mr.array(y.copy()))
                                 for _ in range(_rotation(x.nbytes + y.nbytes) - 1)])
    fns = {}
    for poly in (1, 0):
        with tuning.override(math={"powf": {"polynomial": poly}}):
            f = mr.compile(lambda a, b: mr.power(a, b))
            got = np.asarray(f(xa, ya))
        err = float(np.max(np.abs(got - want) / want))
        if not err < 1e-6:  # (libmvec: at most 4 ulp; the polynomial 1)
            log(f"  pow: the {'polynomial' if poly else 'library'} is off by {err:.2e}: left out")
            continue
        fns[poly] = lambda f=f: mr.eval(f(*fresh()))
    if not fns:
        return None
    r = _race(fns, 7, 3)
    best = min(r, key=r.get)
    log(f"  pow: {'the polynomial' if best else 'the vector math library'} (inputs from memory; "
        f"{', '.join(f'{k}: {v * 1e3:.2f} ms' for k, v in (('polynomial', r.get(1)), ('library', r.get(0))) if v)})")
    entry = {"polynomial": best}
    if save:
        tuning.save("math", "powf", entry)
    return entry


SORT_LENGTHS = {"radix_bytes": [4096, 8192, 16384, 32768, 65536, 262144], "radix_wide": [256, 1024, 4096, 16384],
                "radix_payload": [64, 128, 256, 1024, 4096]}
# what each threshold sorts: (op, dtype, the other lowering's name)
SORT_CASES = {"radix_bytes": ("sort", np.float32, "bitonic"), "radix_wide": ("argsort", np.float32, "bitonic"),
              "radix_payload": ("argsort", np.float64, "merge")}
NEVER = 1 << 40  # (a threshold no row reaches)


def tune_sort(*, total: int = 1 << 20, log=print, save: bool = True) -> dict | None:
    """From which row length the radix sort beats the bitonic blocks and their merges
    (tuning.py "sort"): f32 `sort` (32-bit keys: radix_bytes) and f32 `argsort` ((key,
    index) pairs of 64 bits, as f64's keys: radix_wide), and the merge sort: f64
    `argsort` (64-bit keys, the indices beside them: radix_payload), over `total`
    elements in rows of SORT_LENGTHS, both lowerings compiled, checked against numpy's
    (stable) sort and raced interleaved. The threshold kept is the shortest row from
    which the radix sort wins at every longer length measured (none: never)."""
    import mirax as mr
    rng = np.random.default_rng(0)
    found = {}
    for key, lengths in SORT_LENGTHS.items():
        op, dtype, other = SORT_CASES[key]
        wins = {}
        for n in lengths:
            x = rng.standard_normal((total // n, n)).astype(dtype)
            xa = mr.array(x, dtype=getattr(mr, np.dtype(dtype).name))
            want = np.sort(x, -1) if op == "sort" else np.argsort(x, -1, kind="stable")
            fns = {}
            for radix in (True, False):
                with tuning.override(sort={key: 1 if radix else NEVER}):
                    f = mr.compile(lambda v: getattr(mr, op)(v, axis=-1))
                    got = np.asarray(f(xa))
                if not np.array_equal(got, want):
                    log(f"  {op} rows of {n}: the {'radix' if radix else other} sort is wrong; skipped")
                    break
                fns[radix] = lambda f=f: mr.eval(f(xa))
            if len(fns) < 2:
                continue
            r = _race(fns, 5, 3)
            wins[n] = r[True] < r[False]
            log(f"  {op} {np.dtype(dtype).name} rows of {n}: radix {r[True] * 1e3:.2f} ms, {other} {r[False] * 1e3:.2f} ms")
        start = None
        for n in sorted(wins, reverse=True):
            if not wins[n]:
                break
            start = n
        found[key] = NEVER if start is None else start * 4 if key == "radix_bytes" else start
        log(f"  {op} {np.dtype(dtype).name}: the radix sort from {'never' if start is None else f'rows of {start}'}")
    if save:
        for key, v in found.items():
            tuning.save("sort", key, v)
    return found


def show() -> None:
    h = host_cpu.host()
    print(f"host: {h.describe()}\nkey: {h.key()}\nstore: {tuning.store_path()}")
    t = tuning.derive(h)
    print("derived:")
    for k, v in t.items():
        print(f"  {k}: {v}")
    m = tuning.measured()
    print("measured:" + ("" if m else " nothing yet (python -m mirax.tune)"))
    for section in ("matmul", "row_fusion", "parallel", "math", "sort"):
        for key, e in sorted(m.get(section, {}).items()):
            print(f"  {section} {key}: {e}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mirax.tune", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--matmul", nargs="*", default=None,
                    help="shapes MxNxK, B:MxNxK, MxNxKT for x @ W.T (W stored N x K) or TMxNxK for g.T @ x "
                         "(g stored K x M) (default: bench's)")
    ap.add_argument("--rows", nargs="*", default=None, help="row reductions RxC (default: 4096x4096 1024x1024)")
    ap.add_argument("--no-threads", action="store_true", help="do not measure the threads threshold")
    ap.add_argument("--budget", type=float, default=300.0, help="seconds for the whole search")
    ap.add_argument("--show", action="store_true")
    ap.add_argument("--reset", action="store_true")
    ap.add_argument("--clock", choices=("auto", "wall", "cpu"), default="auto",
                    help="wall: what a call costs (serial parts count fully); cpu: the process's CPU "
                         "time, robust to other load; auto: wall on an idle machine, else cpu")
    args = ap.parse_args(argv)
    import os
    clock = args.clock
    if clock == "auto":
        clock = "wall" if os.getloadavg()[0] < 0.5 else "cpu"
    if clock == "cpu":
        os.environ.setdefault("KMP_BLOCKTIME", "0")  # read when the OpenMP runtime loads
        _clock[0] = time.process_time
    if args.show:
        show()
        return 0
    path = tuning.store_path()
    if path is None:
        print("mirax.tune: no cache directory (MIRAX_CACHE_DIR is empty or the disk cache is off)", file=sys.stderr)
        return 1
    if args.reset:
        path.unlink(missing_ok=True)
        print(f"removed {path}")
        return 0
    h = host_cpu.host()
    print(f"host: {h.describe()}\nstore: {path}\nclock: {clock} (load average {os.getloadavg()[0]:.1f})")
    start = time.monotonic()
    # what was asked for only: `--matmul 1000x1000x1000` alone re-measured the row
    # reductions and the threads threshold too, and replaced their stored choices
    picked = args.matmul is not None or args.rows is not None
    shapes = (args.matmul or []) if picked else DEFAULT_MATMULS
    rows = [tuple(int(x) for x in r.lower().split("x")) for r in args.rows or []] if picked else DEFAULT_ROWS
    if picked:
        args.no_threads = True
    jobs = len(shapes) + len(rows) + (0 if args.no_threads else 1)
    for i, s in enumerate(shapes):
        left = args.budget - (time.monotonic() - start)
        if left <= 0:
            print(f"budget spent: {len(shapes) - i} matmul shapes left untuned")
            break
        tune_matmul(s, budget=left / max(1, jobs - i))
    for r, c in rows:
        if time.monotonic() - start < args.budget:
            tune_rows(r, c)
    if not args.no_threads and time.monotonic() - start < args.budget:
        tune_threads()
    if not picked and time.monotonic() - start < args.budget:
        tune_pow()
    if not picked and time.monotonic() - start < args.budget:
        tune_sort()
    print(f"done in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
