"""argsort: the indices that sort an array along one axis (uint32, as MLX), stable, NaN
last (numpy's order: for complex, by real part, then imaginary part, with
`R + nanj < nan + Rj < nan + nanj` after every number).

    %i = "mirax.argsort"(%x) {axis = 1 : i64} : (tensor<4x1000xf32>) -> tensor<4x1000xui32>

sort: the values themselves along one axis, NaN last (as the quiet NaN), -0.0 before 0.0.

    %s = "mirax.sort"(%x) {axis = 1 : i64} : (tensor<4x1000xf32>) -> tensor<4x1000xf32>

`topk` and `unique` (python/mirax/ops/sorting.py) gather by argsort's indices
(`mirax.argtopk`'s for topk); `sort`, `partition` and `median` are `mirax.sort`, whose
gradient gathers and scatters by argsort's indices.

CPU lowering of sort, a row at a time (`_sort_by_keys`): integer keys one-to-one with the
values (`_to_key`), padded into blocks of a sixteenth of L2 sorted by a bitonic network
on vectors, then vector merges of the blocks (`_Bitonic`, `_sort_keys_row`), back to
values (`_from_key`); one long row as two halves on two threads and a merge. Long rows
(tuning.py "sort": radix_bytes of 32-bit keys, radix_wide 64-bit ones) take an LSD radix
sort of the keys instead (`_radix_keys_row`: a counting loop, then a pass a byte).

CPU lowering of argsort of values of 32 bits or fewer: each value's integer key (in the
values' order) in the high half of an int64 and its index in the low half, sorted by
`sort`'s code (`_argsort_by_vectors`; the radix sort by the key half alone): equal keys
come out in index order (stable), and the low halves are the indices. Wider values (64 bits, complex): a bottom-up merge sort
of each row (the dims before and after the axis
are the rows, an `scf.forall` over the threads when the array is large; along an inner
axis the array is transposed to rows and the result back), on a copy of the row's keys
and their indices: ceil(log2 n) passes, each merging runs of width w
into runs of 2w, ping-ponging between two buffers (two passes an iteration of the pass
loop, so each buffer stays the loop's own: no copies at bufferization). A merge is
branchless (both runs' heads read, the one to take chosen with `arith.select`) and runs
from both ends at once (two independent chains a step); the left run's element wins
ties at the front and the right one's at the back, which keeps the order stable.

    scf.forall (%r) in (rows) {              keys, idx = x[r, :], 0..n-1 (and B: scratch)
      scf.for %q = 0 to passes / 2 {         A -> B (width 4^q), B -> A (width 2 * 4^q)
        scf.for %blk { scf.for %k = lo to hi { i, j: heads of the two runs } } }
      [A -> B when the number of passes is odd]; out[r, :] = idx }

One long row (65536 elements or more, not complex) is padded with keys that sort last
to two power-of-two chunks sorted on two threads, then merged (`_one_long_row`).

O(n log n) comparisons: the op it replaced compared every pair (O(n^2): 11 ms for 1024
rows of 256 against numpy's 0.23, and rows over 16384 elements refused).

GPU lowering: each element's rank (the elements ordered before it), then the element of
rank p at position p: two reductions over the row, parallel over every element, which
the GPU mapping spreads over workgroups (O(n^2) work, for up to `GPU_MAX_PAIRS` pairs in
all); longer rows run a bitonic sorting network (O(n log^2 n) work, a kernel a stage).
"""
from __future__ import annotations

import math

import numpy as np

from . import dtypes as dt
from .core import I64, PRIMITIVES, Aval, MiraxError, primitive, register_lowering
from ..lowering.emit import _affine, identity_map, memory_type, ttype
from .reduction import SCAN_PARALLEL_MIN, over_rows as _over_rows, _reshape as _reshape_to
from .shape import _transpose_lower

SORT_PARALLEL_MIN = SCAN_PARALLEL_MIN  # arrays this large sort their rows on all threads (cumsum's rule)
# the positive quiet NaN of each float type: the key that sorts last, and every NaN's key
_QNAN = {"f16": "0x7E00", "bf16": "0x7FC0", "f32": "0x7FC00000", "f64": "0x7FF8000000000000"}
GPU_MAX_PAIRS = 2**31        # the GPU compares every pair of rows up to this many pairs in all


def _shape(avals, axis, op="argsort"):
    (a,) = avals
    if a.dtype.kind not in "biufc":
        raise MiraxError(f"mirax.{op} does not support dtype {a.dtype.name} (shape {a.shape})")
    if not 0 <= int(axis) < a.ndim:
        raise MiraxError(f"mirax.{op}: axis {axis} is out of bounds for an array of shape {a.shape}")
    return Aval(a.shape, dt.uint32 if op == "argsort" else a.dtype)


def _on_threads(a: Aval, rows: int) -> bool:
    """Whether the rows of `a` sort on all threads (an scf.forall): two rows or more of an
    array of SORT_PARALLEL_MIN elements or more (cumsum's rule)."""
    return rows >= 2 and a.size >= SORT_PARALLEL_MIN


def _reference(x, axis):
    return np.argsort(x, axis=int(axis), kind="stable").astype(np.uint32)


def _before(b, d, u, v, t):
    """i1: key `u` is ordered strictly before key `v` (scalars of dtype `d` and MLIR type
    `t`: bool is i8 read from a tensor, i1 in a generic's block): NaN after every number."""
    if d.kind in "iub":
        return b.op(f"arith.cmpi {'slt' if d.kind == 'i' else 'ult'}, {u}, {v} : {t}")
    if d.kind == "f":
        lt = b.op(f"arith.cmpf olt, {u}, {v} : {t}")
        nan_v = b.op(f"arith.cmpf uno, {v}, {v} : {t}")
        num_u = b.op(f"arith.cmpf ord, {u}, {u} : {t}")
        return b.op(f"arith.ori {lt}, {b.op(f'arith.andi {nan_v}, {num_u} : i1')} : i1")
    # complex: (real is NaN, imaginary is NaN, then the parts) in lexicographic order
    f = t[len("complex<"):-1]
    ru, iu = b.op(f"complex.re {u} : {t}"), b.op(f"complex.im {u} : {t}")
    rv, iv = b.op(f"complex.re {v} : {t}"), b.op(f"complex.im {v} : {t}")

    def nan(x):
        return b.op(f"arith.cmpf uno, {x}, {x} : {f}")

    def first(p, q, rest):
        """p = false < q = true, or p == q and `rest`."""
        lt = b.op(f"arith.cmpi ult, {p}, {q} : i1")
        eq = b.op(f"arith.cmpi eq, {p}, {q} : i1")
        return b.op(f"arith.ori {lt}, {b.op(f'arith.andi {eq}, {rest} : i1')} : i1")
    nru, nrv, niu, niv = nan(ru), nan(rv), nan(iu), nan(iv)
    both_nan = b.op(f"arith.andi {nru}, {nrv} : i1")
    same_re = b.op(f"arith.ori {b.op(f'arith.cmpf oeq, {ru}, {rv} : {f}')}, {both_nan} : i1")
    im_lt = b.op(f"arith.cmpf olt, {iu}, {iv} : {f}")
    then_im = b.op(f"arith.andi {same_re}, {im_lt} : i1")
    lex = b.op(f"arith.ori {b.op(f'arith.cmpf olt, {ru}, {rv} : {f}')}, {then_im} : i1")
    return first(nru, nrv, first(niu, niv, lex))


def _before_pair(b, d, ku, iu, kv, iv):
    """i1, in a generic's block: (key ku, index iu) is ordered before (kv, iv): its key is
    before, or the keys are equivalent (neither before the other) and its index smaller.
    Indices are distinct, so this is a total order: the stable one."""
    t = d.signless
    true = b.const(1, "i1")
    not_after = b.op(f"arith.xori {_before(b, d, kv, ku, t)}, {true} : i1")
    tie = b.op(f"arith.andi {not_after}, {b.op(f'arith.cmpi slt, {iu}, {iv} : i32')} : i1")
    return b.op(f"arith.ori {_before(b, d, ku, kv, t)}, {tie} : i1")


def _reshape(e, x, src: Aval, shape) -> str:
    """`x` (of `src`) as `shape`: the reshape of reductions' keepdims (dialect/reduction.py)."""
    return _reshape_to(e, x, src, Aval(tuple(shape), src.dtype))


def _to_rows(e, x, a: Aval, ax: int):
    """`x` (of `a`) as (rows, n) rows along `ax`, in memory order: along an inner axis the
    array is transposed first (the `transpose` primitive's lowering, vectorized by
    mirax-vectorize-transposes): rows read in place read a cache line an element (1024 x
    4096 along axis 0 sorted in 248 ms against 70 along the last axis)."""
    n = a.shape[ax]
    outer, inner = math.prod(a.shape[:ax]), math.prod(a.shape[ax + 1:])
    if inner > 1:
        cube, swapped = Aval((outer, n, inner), a.dtype), Aval((outer, inner, n), a.dtype)
        x, a = _transpose_lower(e, [_reshape(e, x, a, cube.shape)], [cube], swapped, (0, 2, 1)), swapped
    return _reshape(e, x, a, (outer * inner, n))


def _from_rows(e, res, a: Aval, ax: int, out: Aval):
    """The (rows, n) results of `_to_rows`'s rows back in `out`'s shape (n: `out`'s size
    along the axis: argtopk's k)."""
    n = out.shape[ax]
    outer, inner = math.prod(a.shape[:ax]), math.prod(a.shape[ax + 1:])
    grid = Aval((outer * inner, n), out.dtype)
    if inner > 1:
        swapped, cube = Aval((outer, inner, n), out.dtype), Aval((outer, n, inner), out.dtype)
        res, grid = _transpose_lower(e, [_reshape(e, res, grid, swapped.shape)], [swapped], cube, (0, 2, 1)), cube
    return _reshape(e, res, grid, out.shape)


def _merge_block(bb, d, src_k, src_i, k1, i1, lo, mid, hi, kt, it):
    """Emit the merge of runs [lo, mid) and [mid, hi) of (src_k, src_i) into the same
    places of (k1, i1) (tensors of types kt, it); returns the new (k1, i1)."""
    return _merge_runs(bb, d, src_k, src_i, k1, i1, (lo, mid), (mid, hi), lo, (kt, it), (kt, it))


def _merge_runs(bb, d, src_k, src_i, k1, i1, left, right, out, src_t, dst_t):
    """Emit the merge of the sorted runs `left` = [a0, a1) and `right` = [b0, b1) of
    (src_k, src_i) (types `src_t`: keys, indices) into (k1, i1) (types `dst_t`) from place
    `out` on; returns the new (k1, i1). Ties take the left run's element first (stable).
    A run may be empty; the left run comes first in `src`."""
    et = memory_type(d)
    (a0, a1), (b0, b1) = left, right
    (kt, it), (dkt, dit) = src_t, dst_t
    c0, c1 = bb.index(0), bb.index(1)
    a1m = bb.op(f"arith.subi {a1}, {c1} : index")
    b1m = bb.op(f"arith.subi {b1}, {c1} : index")
    count = bb.op(f"arith.addi {bb.op(f'arith.subi {a1}, {a0} : index')}, {bb.op(f'arith.subi {b1}, {b0} : index')} : index")
    last = bb.op(f"arith.subi {bb.op(f'arith.addi {out}, {count} : index')}, {c1} : index")
    steps = bb.op(f"arith.ceildivui {count}, {bb.index(2)} : index")
    # each run's last place, its first where it is empty (the clamps below stay in `src`)
    a_last = bb.op(f"arith.maxsi {a1m}, {a0} : index")
    b_last = bb.op(f"arith.maxsi {b1m}, {b0} : index")
    k, i, j, ib, jb = (bb.fresh(h) for h in ("k", "i", "j", "ib", "jb"))
    k2, i2, merge = bb.fresh("dk"), bb.fresh("di"), bb.fresh("merge")
    bb.line(f"{merge}:6 = scf.for {k} = {c0} to {steps} step {c1} iter_args({i} = {a0}, {j} = {b0}, "
            f"{ib} = {a1m}, {jb} = {b1m}, {k2} = {k1}, {i2} = {i1}) "
            f"-> (index, index, index, index, {dkt}, {dit}) {{")
    m = bb.sub("  ")

    def heads(x, y):
        """Keys and indices at positions x (left run) and y (right run)."""
        return (m.op(f"tensor.extract {src_k}[{x}] : {kt}"), m.op(f"tensor.extract {src_k}[{y}] : {kt}"),
                m.op(f"tensor.extract {src_i}[{x}] : {it}"), m.op(f"tensor.extract {src_i}[{y}] : {it}"))

    def pick(first, ka, kb, ia, ib_):
        return m.op(f"arith.select {first}, {ka}, {kb} : {et}"), m.op(f"arith.select {first}, {ia}, {ib_} : i32")
    # front: the heads, clamped into their runs (a run that is done is never taken)
    ic = m.op(f"arith.minui {i}, {a_last} : index")
    jc = m.op(f"arith.minui {j}, {b_last} : index")
    ka, kb, ia, ib_ = heads(ic, jc)
    left_done = m.op(f"arith.cmpi uge, {i}, {a1} : index")
    right_on = m.op(f"arith.cmpi ult, {j}, {b1} : index")
    take_b = m.op(f"arith.ori {left_done}, {m.op(f'arith.andi {right_on}, {_before(m, d, kb, ka, et)} : i1')} : i1")
    kv, iv = pick(take_b, kb, ka, ib_, ia)
    at = m.op(f"arith.addi {out}, {k} : index")
    k3 = m.op(f"tensor.insert {kv} into {k2}[{at}] : {dkt}")
    i3 = m.op(f"tensor.insert {iv} into {i2}[{at}] : {dit}")
    i_next = m.op(f"arith.select {take_b}, {i}, {m.op(f'arith.addi {i}, {c1} : index')} : index")
    j_next = m.op(f"arith.select {take_b}, {m.op(f'arith.addi {j}, {c1} : index')}, {j} : index")
    # back: the tails (ib may pass below a0, jb below b0: signed), the larger to the end
    ibc = m.op(f"arith.maxsi {ib}, {a0} : index")
    jbc = m.op(f"arith.minui {m.op(f'arith.maxsi {jb}, {b0} : index')}, {b_last} : index")
    ka, kb, ia, ib_ = heads(ibc, jbc)
    left_on = m.op(f"arith.cmpi sge, {ib}, {a0} : index")
    right_done = m.op(f"arith.cmpi slt, {jb}, {b0} : index")
    take_a = m.op(f"arith.ori {right_done}, {m.op(f'arith.andi {left_on}, {_before(m, d, kb, ka, et)} : i1')} : i1")
    kv, iv = pick(take_a, ka, kb, ia, ib_)
    at = m.op(f"arith.subi {last}, {k} : index")
    k3 = m.op(f"tensor.insert {kv} into {k3}[{at}] : {dkt}")
    i3 = m.op(f"tensor.insert {iv} into {i3}[{at}] : {dit}")
    ib_next = m.op(f"arith.select {take_a}, {m.op(f'arith.subi {ib}, {c1} : index')}, {ib} : index")
    jb_next = m.op(f"arith.select {take_a}, {jb}, {m.op(f'arith.subi {jb}, {c1} : index')} : index")
    m.line(f"scf.yield {i_next}, {j_next}, {ib_next}, {jb_next}, {k3}, {i3} "
           f": index, index, index, index, {dkt}, {dit}")
    bb.lines.extend(m.lines)
    bb.line("}")
    return f"{merge}#4", f"{merge}#5"


def _co_rank(b, d, keys, h, k):
    """How many of the first `k` (index) elements of the merge of the sorted runs
    keys[0:h] (A) and keys[h:2h] (B) come from A (ties: A first): the smallest i in
    [max(0, k - h), min(k, h)] where not A[i] <= B[k - i - 1], by bisection."""
    et, kt = memory_type(d), ttype(Aval((2 * h,), d))
    c0, c1, ch = b.index(0), b.index(1), b.index(h)
    lo0 = b.op(f"arith.maxsi {b.op(f'arith.subi {k}, {ch} : index')}, {c0} : index")
    hi0 = b.op(f"arith.minui {k}, {ch} : index")
    t, lo, hi, res = b.fresh("t"), b.fresh("lo"), b.fresh("hi"), b.fresh("rank")
    b.line(f"{res}:2 = scf.for {t} = {c0} to {b.index(max(1, h.bit_length() + 1))} step {c1} "
           f"iter_args({lo} = {lo0}, {hi} = {hi0}) -> (index, index) {{")
    m = b.sub("  ")
    go = m.op(f"arith.cmpi ult, {lo}, {hi} : index")
    mid = m.op(f"arith.divui {m.op(f'arith.addi {lo}, {hi} : index')}, {m.index(2)} : index")
    # mid < hi <= min(k, h): A[mid] and B[k - mid - 1] exist while lo < hi; clamped otherwise
    a = m.op(f"tensor.extract {keys}[{m.op(f'arith.minui {mid}, {m.index(h - 1)} : index')}] : {kt}")
    jm = m.op(f"arith.subi {m.op(f'arith.subi {k}, {mid} : index')}, {c1} : index")
    jm = m.op(f"arith.minui {m.op(f'arith.maxsi {jm}, {c0} : index')}, {m.index(h - 1)} : index")
    bv = m.op(f"tensor.extract {keys}[{m.op(f'arith.addi {jm}, {ch} : index')}] : {kt}")
    true = m.const(1, "i1")
    a_first = m.op(f"arith.xori {_before(m, d, bv, a, et)}, {true} : i1")  # A[mid] <= B[...]
    up = m.op(f"arith.andi {go}, {a_first} : i1")
    down = m.op(f"arith.andi {go}, {m.op(f'arith.xori {a_first}, {true} : i1')} : i1")
    lo2 = m.op(f"arith.select {up}, {m.op(f'arith.addi {mid}, {c1} : index')}, {lo} : index")
    hi2 = m.op(f"arith.select {down}, {mid}, {hi} : index")
    m.line(f"scf.yield {lo2}, {hi2} : index, index")
    b.lines.extend(m.lines)
    b.line("}")
    return f"{res}#0"


def _last_merge_on_threads(e, d, keys, idx, h: int, segments: int):
    """The merge of the sorted halves [0, h) and [h, 2h) of (keys, idx) in `segments`
    equal parts of the output, each on a thread (`_over_rows`): part t's first element is
    the merge's element t * 2h / segments, where the halves' split points are their
    co-ranks (`_co_rank`: a bisection). Returns the merged indices."""
    P, size = 2 * h, 2 * h // segments
    kt, it = ttype(Aval((P,), d)), ttype(Aval((P,), dt.int32))
    grid = _reshape(e, keys, Aval((P,), d), (segments, size))

    def body(b, _row, r, dest):
        k0 = b.op(f"arith.muli {r}, {b.index(size)} : index")
        k1 = b.op(f"arith.addi {k0}, {b.index(size)} : index")
        i0, i1 = _co_rank(b, d, keys, h, k0), _co_rank(b, d, keys, h, k1)
        j0 = b.op(f"arith.addi {b.op(f'arith.subi {k0}, {i0} : index')}, {b.index(h)} : index")
        j1 = b.op(f"arith.addi {b.op(f'arith.subi {k1}, {i1} : index')}, {b.index(h)} : index")
        row_t = (ttype(Aval((size,), d)), ttype(Aval((size,), dt.int32)))
        return list(_merge_runs(b, d, keys, idx, dest(0), dest(1), (i0, i1), (j0, j1), b.index(0), (kt, it), row_t))
    _, mi = _over_rows(e, grid, segments, size, d, True, [(size, d), (size, dt.int32)], body)
    return _reshape(e, mi, Aval((segments, size), dt.int32), (P,))


def _merge_pass(b, d, src_k, src_i, dst_k, dst_i, w, n_val, n):
    """One pass: the runs of width `w` (index) of (src_k, src_i) merged pairwise into
    (dst_k, dst_i); returns the new (dst_k, dst_i).

    Each merge runs from both ends at once: a step takes the smaller head of the two runs
    to the front (the left one on ties) and the larger tail to the back (the right one on
    ties), so its two chains of load, compare and select are independent (a one-ended
    merge waits on each step's choice before the next load). ceil(m / 2) steps for m
    elements; with m odd the last step's two choices are the same middle element."""
    kt = ttype(Aval((n,), d))
    it = ttype(Aval((n,), dt.int32))
    c0, c1 = b.index(0), b.index(1)
    w2 = b.op(f"arith.addi {w}, {w} : index")
    blocks = b.op(f"arith.ceildivui {n_val}, {w2} : index")
    blk, k1, i1, loop = b.fresh("blk"), b.fresh("dk"), b.fresh("di"), b.fresh("pass")
    b.line(f"{loop}:2 = scf.for {blk} = {c0} to {blocks} step {c1} iter_args({k1} = {dst_k}, {i1} = {dst_i}) "
           f"-> ({kt}, {it}) {{")
    bb = b.sub("  ")
    lo = bb.op(f"arith.muli {blk}, {w2} : index")
    mid = bb.op(f"arith.minui {bb.op(f'arith.addi {lo}, {w} : index')}, {n_val} : index")
    hi = bb.op(f"arith.minui {bb.op(f'arith.addi {lo}, {w2} : index')}, {n_val} : index")
    mk, mi = _merge_block(bb, d, src_k, src_i, k1, i1, lo, mid, hi, kt, it)
    bb.line(f"scf.yield {mk}, {mi} : {kt}, {it}")
    b.lines.extend(bb.lines)
    b.line("}")
    return f"{loop}#0", f"{loop}#1"


def _merge_blocks_on_threads(e, d, keys, idx, w: int, n: int):
    """`_merge_pass` with its blocks on the threads, for n a multiple of 2w (two blocks or
    more): the blocks as the rows of an (n / 2w, 2w) array (`_over_rows`), each block's
    two runs merged into its row of the result."""
    blocks, m = n // (2 * w), 2 * w
    grid_k = _reshape(e, keys, Aval((n,), d), (blocks, m))
    grid_i = _reshape(e, idx, Aval((n,), dt.int32), (blocks, m))
    kt, it = ttype(Aval((m,), d)), ttype(Aval((m,), dt.int32))

    def body(b, row, r, dest):
        irow = b.op(f"tensor.extract_slice {grid_i}[{r}, 0] [1, {m}] [1, 1] : "
                    f"{ttype(Aval((blocks, m), dt.int32))} to {it}")
        return list(_merge_block(b, d, row, irow, dest(0), dest(1), b.index(0), b.index(w), b.index(m), kt, it))
    mk, mi = _over_rows(e, grid_k, blocks, m, d, True, [(m, d), (m, dt.int32)], body)
    return _reshape(e, mk, Aval((blocks, m), d), (n,)), _reshape(e, mi, Aval((blocks, m), dt.int32), (n,))


def _sort_row(b, d, row, n, first=None):
    """Emit the merge sort of one row (`row`: a tensor<n x key>) into `b` (the radix sort
    for long rows of 64-bit integer keys, `_radix_payload`); returns its sorted (keys,
    indices). The indices count from `first` (an index value; 0 if None)."""
    kt, it = ttype(Aval((n,), d)), ttype(Aval((n,), dt.int32))
    radix = _radix_payload(d, n)
    # the four row buffers are allocations of their own (`bufferization.alloc_tensor`, which
    # neither CSE nor canonicalize merges or folds away): as `tensor.empty`s of one type
    # CSE made the scratch buffers one value, and the passes then overwrote each other
    keys = row if radix else b.op(f"bufferization.alloc_tensor() copy({row}) : {kt}")

    def position(bb, _):
        k = bb.op("linalg.index 0 : index")
        if first is not None:
            k = bb.op(f"arith.addi {k}, {first} : index")
        return bb.op(f"arith.index_cast {k} : index to i32")
    ident = identity_map(1)
    idx = b.generic([], [], Aval((n,), dt.int32), position, [ident], ["parallel"],
                    init=b.op(f"bufferization.alloc_tensor() : {it}"))
    if radix:  # 64-bit integer keys: the radix sort, the indices moving with them
        if d.kind == "u":  # (as signed keys in the same order, and back)
            keys = b.map([keys], [Aval((n,), d)], Aval((n,), dt.int64), lambda bb, v: _to_key(bb, v, d))
        keys, idx = _radix_keys_row(b, dt.int64, keys, n, payload=idx)
        if d.kind == "u":
            keys = b.map([keys], [Aval((n,), dt.int64)], Aval((n,), d), lambda bb, k: _from_key(bb, k, d))
        return keys, idx
    keys_b, idx_b = b.op(f"bufferization.alloc_tensor() : {kt}"), b.op(f"bufferization.alloc_tensor() : {it}")
    n_val = b.index(n)
    passes = max(1, math.ceil(math.log2(n)))
    if passes >= 2:  # two passes an iteration: A -> B (width w), B -> A (width 2w)
        q, ak, ai, bk, bi, pair = b.fresh("q"), b.fresh("ak"), b.fresh("ai"), b.fresh("bk"), b.fresh("bi"), b.fresh("pairs")
        b.line(f"{pair}:4 = scf.for {q} = {b.index(0)} to {b.index(passes // 2)} step {b.index(1)} "
               f"iter_args({ak} = {keys}, {ai} = {idx}, {bk} = {keys_b}, {bi} = {idx_b}) "
               f"-> ({kt}, {it}, {kt}, {it}) {{")
        p = b.sub("  ")
        w = p.op(f"arith.shli {p.index(1)}, {p.op(f'arith.addi {q}, {q} : index')} : index")
        bk2, bi2 = _merge_pass(p, d, ak, ai, bk, bi, w, n_val, n)
        ak2, ai2 = _merge_pass(p, d, bk2, bi2, ak, ai, p.op(f"arith.addi {w}, {w} : index"), n_val, n)
        p.line(f"scf.yield {ak2}, {ai2}, {bk2}, {bi2} : {kt}, {it}, {kt}, {it}")
        b.lines.extend(p.lines)
        b.line("}")
        keys, idx, keys_b, idx_b = f"{pair}#0", f"{pair}#1", f"{pair}#2", f"{pair}#3"
    if passes % 2:  # the last pass A -> B
        keys, idx = _merge_pass(b, d, keys, idx, keys_b, idx_b, b.index(1 << (passes - 1)), n_val, n)
    return keys, idx


def _radix_payload(d, n) -> bool:
    """Whether `_sort_row` sorts a row of n keys of dtype `d` by the radix sort, their
    indices moving with them: 64-bit integer keys (argsort of f64, int64, uint64 values)
    in rows from tuning.py's "sort" radix_payload keys on (and under 2^31: i32 counters)."""
    from ..lowering import tuning
    return d.kind in "iu" and d.bits == 64 and tuning.table()["sort"]["radix_payload"] <= n < 2**31


def _each_row(e, x2, rows, n, d, parallel, keys_too=False, chunk_first=False):
    """The rows of `x2` (rows x n) sorted (`_over_rows`): the (rows x n) indices, and with
    `keys_too` the sorted keys before them; with `chunk_first` row r's indices count from
    r * n (chunks of one long row)."""
    def body(b, row, r, _dest):
        first = b.op(f"arith.muli {r}, {b.index(n)} : index") if chunk_first else None
        keys, idx = _sort_row(b, d, row, n, first)
        return ([keys] if keys_too else []) + [idx]
    return _over_rows(e, x2, rows, n, d, parallel, ([(n, d)] if keys_too else []) + [(n, dt.int32)], body)


def _sentinel(e, d) -> str | None:
    """A key that sorts after every key of dtype `d` (NaN, the largest integer, true), or
    None (complex)."""
    t = d.memory
    if d.kind == "f":
        return e.op(f"arith.constant {_QNAN[t]} : {t}")
    if d.kind == "i":
        return e.const((1 << (d.bits - 1)) - 1, t)
    if d.kind in "ub":
        return e.const(-1 if d.kind == "u" else 1, t)
    return None


def _one_long_row(e, x, d, n):
    """One row of n >= SORT_PARALLEL_MIN elements on the threads: padded with keys that
    sort last to P = 2^ceil(log2 n), cut in chunks of h (two; for the radix sort of
    64-bit keys, chunks whose keys and indices fit L2: tuning.py "sort" long_chunk_bytes),
    each chunk sorted on a thread, then the chunks merged pairwise (the merge sort's last
    passes, each block of a pass on a thread while there are two or more; the last pass,
    one block, in equal parts of its output on the threads: `_last_merge_on_threads`),
    the first n indices kept (the padding's indices are n and above, after every
    element: the order stays stable). The radix sort of one half of 2^20 f64 keys ran
    beyond L2, each pass scattering 4 MB to 256 places (2^20 f64 argsort 39.6 ms, the
    same keys in rows of 1024 15.4; chunks of 65536 and serial merges 27.6, the merges'
    blocks on the threads, each written in place in its row of the result, 15.8-17.1;
    the last merge in two parts 14.8-16.9 against 15.7-20.1, Zen 4, alternating)."""
    from ..lowering import tuning
    P = 1 << math.ceil(math.log2(n))
    h = P // 2
    if _radix_payload(d, h):  # (12 bytes a key: the key and its index)
        per = tuning.table()["sort"]["long_chunk_bytes"] // 12
        h = max(min(h, 1 << max(0, per.bit_length() - 1)), 2)
    chunks = P // h
    row, full = Aval((n,), d), Aval((P,), d)
    pad = e.op(f"tensor.splat {_sentinel(e, d)} : {ttype(full)}")
    padded = e.op(f"tensor.insert_slice {x} into {pad}[0] [{n}] [1] : {ttype(row)} into {ttype(full)}")
    keys, idx = _each_row(e, _reshape(e, padded, full, (chunks, h)), chunks, h, d, True, keys_too=True,
                          chunk_first=True)
    keys = _reshape(e, keys, Aval((chunks, h), d), (P,))
    idx = _reshape(e, idx, Aval((chunks, h), dt.int32), (P,))
    w = h
    while 4 * w <= P:  # (passes of two blocks or more)
        keys, idx = _merge_blocks_on_threads(e, d, keys, idx, w, P)
        w *= 2
    kt, it = ttype(full), ttype(Aval((P,), dt.int32))
    segments = _last_merge_segments(P)
    if segments > 1:
        idx = _last_merge_on_threads(e, d, keys, idx, w, segments)
    else:
        _, idx = _merge_pass(e, d, keys, idx, e.op(f"bufferization.alloc_tensor() : {kt}"),
                             e.op(f"bufferization.alloc_tensor() : {it}"), e.index(w), e.index(P), P)
    return e.op(f"tensor.extract_slice {idx}[0] [{n}] [1] : {it} to {ttype(Aval((n,), dt.int32))}")


def _last_merge_segments(P: int) -> int:
    """The parts of a long row's last merge, one a thread: the threads (tuning.threads())
    rounded up to a power of two (parts divide the row), at most P / 2; 1: merged whole."""
    from ..lowering import tuning
    threads = tuning.threads()
    return 1 if threads < 2 else min(1 << (threads - 1).bit_length(), P // 2)


_INT_KEY = {"f16": (dt.int16, 15), "bf16": (dt.int16, 15), "f32": (dt.int32, 31), "f64": (dt.int64, 63)}


def _int_keys(e, x, a: Aval):
    """Float keys as signed integers of the same width in the same order (the bits, with
    the magnitude bits flipped for negative numbers), -0.0 as 0.0 and every NaN as the
    positive quiet NaN (after +inf): the merge then compares and selects integers. With
    float keys LLVM's x86 code selected floats by branches where AVX-512's masks were
    missing: 4096 x 1024 f32 under the AVX2 cap 154 ms, int32 keys 58 (native 73 / 54)."""
    di, _ = _INT_KEY[a.dtype.signless]
    return e.map([x], [a], Aval(a.shape, di), lambda b, v: _float_key(b, v, a.dtype.signless)), Aval(a.shape, di)


def _float_key(b, v, t, lanes=0):
    """`_int_keys`'s integer of float `v` of type `t` (a scalar, or a vector of `lanes`)."""
    di, top = _INT_KEY[t]
    it = di.signless
    vec = (lambda ty: f"vector<{lanes}x{ty}>") if lanes else (lambda ty: ty)

    def const(text, ty):
        return b.op(f"arith.constant {f'dense<{text}>' if lanes else text} : {vec(ty)}")
    zero = const("0.000000e+00", t)
    v = b.op(f"arith.select {b.op(f'arith.cmpf oeq, {v}, {zero} : {vec(t)}')}, {zero}, {v} : "
             f"{vec('i1') + ', ' if lanes else ''}{vec(t)}")
    v = b.op(f"arith.select {b.op(f'arith.cmpf uno, {v}, {v} : {vec(t)}')}, {const(_QNAN[t], t)}, {v} : "
             f"{vec('i1') + ', ' if lanes else ''}{vec(t)}")
    return _flip(b, b.op(f"arith.bitcast {v} : {vec(t)} to {vec(it)}"), it, top + 1, lanes)


def _argsort_by_vectors(e, x, a: Aval, ax: int, out: Aval) -> str:
    """Stable argsort of values of 32 bits or fewer by `sort`'s vector code: each value's
    key (`_float_key`'s for floats: -0.0 ties 0.0, NaNs tie last) in the high half of an
    int64, its index along `ax` in the low half; sorted, equal keys are in index order
    (stable), and the low halves are the indices."""
    t = a.dtype.signless

    def key_row(b, row, m, first):
        def pack(bb, v, _o):
            if a.dtype.kind == "f":
                k = bb.op(f"arith.extsi {_float_key(bb, v, t)} : i{a.dtype.bits} to i64")
            else:
                k = bb.op(f"arith.extsi {_to_key(bb, v, a.dtype)} : i32 to i64")
            i = bb.op("linalg.index 0 : index")
            i = bb.op(f"arith.addi {i}, {first} : index") if first is not None else i
            high = bb.op(f"arith.shli {k}, {bb.const(32, 'i64')} : i64")
            return bb.op(f"arith.ori {high}, {bb.op(f'arith.index_cast {i} : index to i64')} : i64")
        ident = identity_map(1)
        return b.generic([row], [Aval((m,), a.dtype)], Aval((m,), dt.int64), pack, [ident, ident], ["parallel"])

    def out_row(b, keys, m):
        return b.map([keys], [Aval((m,), dt.int64)], Aval((m,), dt.int32),
                     lambda bb, k: bb.op(f"arith.trunci {k} : i64 to i32"))
    return _sort_by_keys(e, x, a, ax, dt.int64, key_row, Aval(out.shape, dt.int32), out_row, low=32,
                         bits=_key_bits(a.dtype))


def _lower_cpu(e, ins, in_avals, out, axis):
    a = in_avals[0]
    ax = int(axis)
    n = a.shape[ax]
    if out.size == 0:
        return e.empty(out)
    if n == 1:
        return e.fill(0, out)
    x = ins[0]
    if a.dtype.kind != "c" and a.dtype.bits <= 32:
        return _argsort_by_vectors(e, x, a, ax, out)
    if a.dtype.kind == "f":
        x, a = _int_keys(e, x, a)
    d = a.dtype
    rows = a.size // n
    if rows == 1 and n >= SORT_PARALLEL_MIN and d.kind != "c":
        return _reshape(e, _one_long_row(e, _reshape(e, x, a, (n,)), d, n), Aval((n,), dt.int32), out.shape)
    (res,) = _each_row(e, _to_rows(e, x, a, ax), rows, n, d, _on_threads(a, rows))
    return _from_rows(e, res, a, ax, out)


def _bitonic_gpu(e, x, a: Aval, ax: int, out: Aval):
    """A bitonic sorting network over each row, for rows too long to compare every pair:
    the rows (`_to_rows`) padded with keys that sort last to
    N = 2^P elements beside their indices, then P(P+1)/2 stages of compare-exchange, each
    two elementwise generics (keys, indices) over the row viewed as (rows, N/2j, 2, j):
    element (a, 0, t) meets its partner (a, 1, t). Pairs compare by (key, index), so the
    network's result is the stable order. O(N log^2 N) work in as many kernels as stages."""
    d = a.dtype
    n = a.shape[ax]
    rows = a.size // n
    sentinel = _sentinel(e, d)
    if sentinel is None:
        raise MiraxError(f"mirax.argsort on the GPU: {d.name} rows of {n} elements are too long to compare "
                         f"every pair (sort on the CPU)")
    x2 = _to_rows(e, x, a, ax)
    big = 1 << math.ceil(math.log2(n))
    grid, igrid = Aval((rows, big), d), Aval((rows, big), dt.int32)
    keys = e.op(f"tensor.splat {sentinel} : {ttype(grid)}")
    keys = e.op(f"tensor.insert_slice {x2} into {keys}[0, 0] [{rows}, {n}] [1, 1] : "
                f"{ttype(Aval((rows, n), d))} into {ttype(grid)}")
    idx = e.generic([], [], igrid, lambda b, _: b.op(f"arith.index_cast {b.op('linalg.index 1 : index')} : "
                                                      f"index to i32"),
                    [identity_map(2)], ["parallel"] * 2)
    size = 2
    while size <= big:
        j = size // 2
        while j >= 1:
            keys, idx = _bitonic_stage(e, d, keys, idx, rows, big, size, j)
            j //= 2
        size *= 2
    res = e.op(f"tensor.extract_slice {idx}[0, 0] [{rows}, {n}] [1, 1] : {ttype(igrid)} to "
               f"{ttype(Aval((rows, n), dt.int32))}")
    return _from_rows(e, res, a, ax, out)


def _bitonic_stage(e, d, keys, idx, rows, big, size, j):
    """One compare-exchange stage (block `size`, distance `j`) on (keys, idx): (rows, big)."""
    quad = (rows, big // (2 * j), 2, j)
    k4, i4 = Aval(quad, d), Aval(quad, dt.int32)
    grid, igrid = Aval((rows, big), d), Aval((rows, big), dt.int32)
    shp = ", ".join(map(str, quad))
    kq = e.op(f"tensor.expand_shape {keys} [[0], [1, 2, 3]] output_shape [{shp}] : {ttype(grid)} into {ttype(k4)}")
    iq = e.op(f"tensor.expand_shape {idx} [[0], [1, 2, 3]] output_shape [{shp}] : {ttype(igrid)} into {ttype(i4)}")
    first = _affine(4, ["d0", "d1", "0", "d3"])
    second = _affine(4, ["d0", "d1", "1", "d3"])
    here = identity_map(4)
    t = d.signless

    def take_first(b, k0, k1, i0, i1):
        """i1: this place (s of the iteration) takes element 0 of the pair."""
        true = b.const(1, "i1")
        lo_first = _before_pair(b, d, k0, i0, k1, i1)       # element 0 is the smaller
        blk = b.op(f"arith.muli {b.op('linalg.index 1 : index')}, {b.index(2 * j)} : index")
        up = b.op(f"arith.cmpi eq, {b.op(f'arith.andi {blk}, {b.index(size)} : index')}, {b.index(0)} : index")
        low_place = b.op(f"arith.cmpi eq, {b.op('linalg.index 2 : index')}, {b.index(0)} : index")
        small_here = b.op(f"arith.xori {b.op(f'arith.xori {low_place}, {up} : i1')}, {true} : i1")
        return b.op(f"arith.xori {b.op(f'arith.xori {small_here}, {lo_first} : i1')}, {true} : i1")

    def pick_key(b, k0, k1, i0, i1, _):
        return b.op(f"arith.select {take_first(b, k0, k1, i0, i1)}, {k0}, {k1} : {t}")

    def pick_idx(b, k0, k1, i0, i1, _):
        return b.op(f"arith.select {take_first(b, k0, k1, i0, i1)}, {i0}, {i1} : i32")
    ins, avals, maps = [kq, kq, iq, iq], [k4, k4, i4, i4], [first, second, first, second, here]
    nk = e.generic(ins, avals, k4, pick_key, maps, ["parallel"] * 4)
    ni = e.generic(ins, avals, i4, pick_idx, maps, ["parallel"] * 4)
    nk = e.op(f"tensor.collapse_shape {nk} [[0], [1, 2, 3]] : {ttype(k4)} into {ttype(grid)}")
    ni = e.op(f"tensor.collapse_shape {ni} [[0], [1, 2, 3]] : {ttype(i4)} into {ttype(igrid)}")
    return nk, ni


def _lower_gpu(e, ins, in_avals, out, axis):
    """rank[.., i, ..] = #{j: x_j before x_i, or equal with j < i}; then out[.., p, ..] =
    the i whose rank is p (one per p: a sum of selects). The reduced index comes in as a
    constant operand, as in cumsum's GPU lowering (a split reduction's tiling does not
    offset a `linalg.index` of the reduced dim). Rows of more than GPU_MAX_PAIRS pairs in
    all: a bitonic network (`_bitonic_gpu`)."""
    a = in_avals[0]
    ax = int(axis)
    n, nd = a.shape[ax], a.ndim
    if out.size == 0:
        return e.empty(out)
    if n == 1:
        return e.fill(0, out)
    rows = a.size // n
    if rows * n * n > GPU_MAX_PAIRS:
        return _bitonic_gpu(e, ins[0], a, ax, out)
    d = a.dtype
    iota_aval = Aval((n,), dt.int32)
    iota = e.op(f"arith.constant dense<[{', '.join(map(str, range(n)))}]> : {ttype(iota_aval)}")
    dims = [f"d{k}" for k in range(nd)]
    along = _affine(nd + 1, [f"d{nd}" if k == ax else dims[k] for k in range(nd)])  # element j (or i)
    here = _affine(nd + 1, dims)                                                     # element i (or p)
    red = _affine(nd + 1, [f"d{nd}"])
    it = ["parallel"] * nd + ["reduction"]
    ranks = Aval(a.shape, dt.int32)

    def count(b, xj, xi, j, acc):
        i = b.op(f"arith.index_cast {b.op(f'linalg.index {ax} : index')} : index to i32")
        one = b.op(f"arith.extui {_before_pair(b, d, xj, j, xi, i)} : i1 to i32")
        return b.op(f"arith.addi {acc}, {one} : i32")
    rank = e.generic([ins[0], ins[0], iota], [a, a, iota_aval], ranks, count, [along, here, red, here], it,
                     init=e.fill(0, ranks))

    def place(b, rk, i, acc):
        p = b.op(f"arith.index_cast {b.op(f'linalg.index {ax} : index')} : index to i32")
        hit = b.op(f"arith.cmpi eq, {rk}, {p} : i32")
        zero = b.const(0, "i32")
        return b.op(f"arith.addi {acc}, {b.op(f'arith.select {hit}, {i}, {zero} : i32')} : i32")
    return e.generic([rank, iota], [ranks, iota_aval], out, place, [along, red, here], it, init=e.fill(0, out))


primitive("argsort", ["x"], _shape, _lower_cpu, _reference, attrs={"axis": I64()},
          summary="indices (uint32) that sort `x` along `axis`: stable, NaN last",
          dtypes=[dt.float32, dt.int32, dt.float64])
register_lowering("argsort", _lower_gpu, target="gpu")


# ---- argtopk --------------------------------------------------------------------------

def _topk_shape(avals, axis, k):
    (a,) = avals
    if a.dtype.kind not in "biuf":
        raise MiraxError(f"mirax.argtopk does not support dtype {a.dtype.name} (shape {a.shape})")
    ax, k = int(axis), int(k)
    if not 0 <= ax < a.ndim:
        raise MiraxError(f"mirax.argtopk: axis {axis} is out of bounds for an array of shape {a.shape}")
    if not 0 <= k <= a.shape[ax]:
        raise MiraxError(f"mirax.argtopk: k {k} must be in [0, {a.shape[ax]}] for axis {ax} of shape {a.shape}")
    return Aval(a.shape[:ax] + (k,) + a.shape[ax + 1:], dt.uint32)


def _topk_reference(x, axis, k):
    ax, k = int(axis), int(k)
    n = x.shape[ax]
    return np.take(_reference(x, ax), np.arange(n - k, n), axis=ax)


def select_by_insertion(n: int, k: int, bits: int = 32) -> bool:
    """Whether argtopk's rows of `bits`-bit values select their k largest by insertion
    (about k^2 log(n / k) steps a row on random data, each insertion shifting up to k
    slots; n k when every element enters, an ascending row) rather than take argsort's
    last k (n log2 n). Values of 32 bits or fewer sort by vectors, ~16x cheaper a step
    than an insertion's (znver5, 4096 rows of 1024: insertion 5.4 / 11.4 / 30.6 ms for
    k = 8 / 16 / 32, argsort's last k 5.4 / 8.3 / 6.4; 64 rows of 50000: k = 40 1.6 vs
    16.2, k = 200 17.7 vs 16.6); wider values take the merge sort (4096 x 4096 f32,
    k = 8, against that sort: insertion ~2 ms, the sort 200)."""
    steps = k * k * max(1.0, math.log(n / k))
    return steps <= n * math.log2(n) / (16 if bits <= 32 else 1)


def _lowest(b, d) -> str:
    """The smallest key of integer dtype `d` (the float keys' integers included)."""
    return b.const(-(1 << (d.bits - 1)) if d.kind == "i" else 0, d.memory)


def _select_row(b, d, row, n, k, lanes, src=None):
    """The indices (i32) of row `row`'s k largest keys (integers of dtype `d`), ascending
    in (key, index): the last k of its stable ascending order.

        best = k slots of (lowest key, index -1), ascending; t = best[0]'s key
        for i in 0..n-1: if row[i] >= t:       (an index after every slot's: ties enter)
            the slots up to the last with key <= row[i] move down one (best[0] leaves),
            (row[i], i) fills the slot after them; t = best[0]'s key

    `lanes` keys at a time are compared with t as one vector first, and only a vector
    with a key >= t is walked element by element (on random rows, after the first few
    vectors, almost none: the scalar walk took ~8 cycles an element). With `src` (a float
    type) the row holds floats, turned into keys (`_float_key`) as they are read: the row is
    read once, not converted into a copy first."""
    et = d.memory
    kt, it = ttype(Aval((k,), d)), ttype(Aval((k,), dt.int32))
    rt = f"tensor<{n}x{src}>" if src else ttype(Aval((n,), d))
    types = f"{kt}, {it}, {et}"

    def key(b, v, vlanes=0):
        return _float_key(b, v, src, vlanes) if src else v
    lowest = _lowest(b, d)
    keys = b.op(f"linalg.fill ins({lowest} : {et}) outs({b.op(f'bufferization.alloc_tensor() : {kt}')} : {kt}) -> {kt}")
    none = b.const(-1, "i32")
    idx = b.op(f"linalg.fill ins({none} : i32) outs({b.op(f'bufferization.alloc_tensor() : {it}')} : {it}) -> {it}")
    c0, c1 = b.index(0), b.index(1)

    def walk(b, lo, hi, state):
        """The elements lo..hi-1 one by one (`_admit`); returns the new (keys, idx, t)."""
        i, bk, bi, t, loop = b.fresh("i"), b.fresh("bk"), b.fresh("bi"), b.fresh("t"), b.fresh("walk")
        b.line(f"{loop}:3 = scf.for {i} = {lo} to {hi} step {c1} iter_args({bk} = {state[0]}, {bi} = {state[1]}, "
               f"{t} = {state[2]}) -> ({types}) {{")
        m = b.sub("  ")
        res = _admit(m, d, key(m, m.op(f"tensor.extract {row}[{i}] : {rt}")), i, bk, bi, t, k)
        m.line(f"scf.yield {res[0]}, {res[1]}, {res[2]} : {types}")
        b.lines.extend(m.lines)
        b.line("}")
        return f"{loop}#0", f"{loop}#1", f"{loop}#2"

    state = (keys, idx, lowest)
    nv = n // lanes if lanes > 1 else 0
    if nv:
        vt = f"vector<{lanes}x{et}>"
        ge = "sge" if d.kind == "i" else "uge"
        c, bk, bi, t, loop = b.fresh("c"), b.fresh("bk"), b.fresh("bi"), b.fresh("t"), b.fresh("vectors")
        b.line(f"{loop}:3 = scf.for {c} = {c0} to {b.index(nv * lanes)} step {b.index(lanes)} "
               f"iter_args({bk} = {keys}, {bi} = {idx}, {t} = {lowest}) -> ({types}) {{")
        m = b.sub("  ")
        pad = m.const(0.0, src) if src else m.const(0, et)
        v = key(m, m.op(f"vector.transfer_read {row}[{c}], {pad} {{in_bounds = [true]}} : {rt}, "
                        f"vector<{lanes}x{src or et}>"), lanes)
        tv = m.op(f"vector.broadcast {t} : {et} to {vt}")
        mask = m.op(f"arith.cmpi {ge}, {v}, {tv} : {vt}")
        anyin = m.op(f"vector.reduction <or>, {mask} : vector<{lanes}xi1> into i1")
        res = m.fresh("vin")
        m.line(f"{res}:3 = scf.if {anyin} -> ({types}) {{")
        s_ = m.sub("  ")
        w = walk(s_, c, s_.op(f"arith.addi {c}, {s_.index(lanes)} : index"), (bk, bi, t))
        s_.line(f"scf.yield {w[0]}, {w[1]}, {w[2]} : {types}")
        m.lines.extend(s_.lines)
        m.line("} else {")
        m.line(f"  scf.yield {bk}, {bi}, {t} : {types}")
        m.line("}")
        m.line(f"scf.yield {res}#0, {res}#1, {res}#2 : {types}")
        b.lines.extend(m.lines)
        b.line("}")
        state = (f"{loop}#0", f"{loop}#1", f"{loop}#2")
    if nv * lanes < n:
        state = walk(b, b.index(nv * lanes), b.index(n), state)
    return state[1]


def _admit(m, d, x, i, bk, bi, t, k):
    """Element x at index i into the k slots (bk, bi) with bar t: an scf.if; returns the new
    (keys, idx, t). A slot's update reads only its own and the next slot (`new[j]`: the
    next slot when its key <= x, else x when this slot's key <= x or j = 0, else
    itself), so the k slots are rewritten in place, without branches."""
    et = d.memory
    kt, it = ttype(Aval((k,), d)), ttype(Aval((k,), dt.int32))
    ge, le = ("sge", "sle") if d.kind == "i" else ("uge", "ule")
    c0, c1 = m.index(0), m.index(1)
    enter = m.op(f"arith.cmpi {ge}, {x}, {t} : {et}")
    res = m.fresh("ins")
    m.line(f"{res}:3 = scf.if {enter} -> ({kt}, {it}, {et}) {{")
    s_ = m.sub("  ")
    xi = s_.op(f"arith.index_cast {i} : index to i32")
    j, ck, ci, shift = s_.fresh("j"), s_.fresh("ck"), s_.fresh("ci"), s_.fresh("shift")
    last = s_.index(k - 1)
    s_.line(f"{shift}:2 = scf.for {j} = {c0} to {s_.index(k)} step {c1} iter_args({ck} = {bk}, {ci} = {bi}) "
            f"-> ({kt}, {it}) {{")
    q = s_.sub("  ")
    jn = q.op(f"arith.minui {q.op(f'arith.addi {j}, {c1} : index')}, {last} : index")
    kn, in_ = q.op(f"tensor.extract {ck}[{jn}] : {kt}"), q.op(f"tensor.extract {ci}[{jn}] : {it}")
    kh, ih = q.op(f"tensor.extract {ck}[{j}] : {kt}"), q.op(f"tensor.extract {ci}[{j}] : {it}")
    le_next = q.op(f"arith.andi {q.op(f'arith.cmpi ult, {j}, {last} : index')}, "
                   f"{q.op(f'arith.cmpi {le}, {kn}, {x} : {et}')} : i1")
    le_here = q.op(f"arith.ori {q.op(f'arith.cmpi eq, {j}, {c0} : index')}, "
                   f"{q.op(f'arith.cmpi {le}, {kh}, {x} : {et}')} : i1")
    nk = q.op(f"arith.select {le_next}, {kn}, {q.op(f'arith.select {le_here}, {x}, {kh} : {et}')} : {et}")
    ni = q.op(f"arith.select {le_next}, {in_}, {q.op(f'arith.select {le_here}, {xi}, {ih} : i32')} : i32")
    q.line(f"scf.yield {q.op(f'tensor.insert {nk} into {ck}[{j}] : {kt}')}, "
           f"{q.op(f'tensor.insert {ni} into {ci}[{j}] : {it}')} : {kt}, {it}")
    s_.lines.extend(q.lines)
    s_.line("}")
    t2 = s_.op(f"tensor.extract {shift}#0[{c0}] : {kt}")
    s_.line(f"scf.yield {shift}#0, {shift}#1, {t2} : {kt}, {it}, {et}")
    m.lines.extend(s_.lines)
    m.line("} else {")
    m.line(f"  scf.yield {bk}, {bi}, {t} : {kt}, {it}, {et}")
    m.line("}")
    return f"{res}#0", f"{res}#1", f"{res}#2"


def _topk_cpu(e, ins, in_avals, out, axis, k):
    """The rows' k largest by insertion (`_select_row`) where `select_by_insertion`,
    else argsort's last k; float keys as integers in the same order first."""
    a = in_avals[0]
    ax, k = int(axis), int(k)
    n = a.shape[ax]
    if out.size == 0:
        return e.empty(out)
    if not select_by_insertion(n, k, a.dtype.bits):
        full = Aval(a.shape, dt.uint32)
        return _last_k(e, _lower_cpu(e, ins, in_avals, full, axis), full, ax, k, out)
    from ..lowering.host_cpu import host
    src = a.dtype.signless if a.dtype.kind == "f" else None  # (float rows: keys as they are read)
    d = _INT_KEY[src][0] if src else a.dtype
    lanes = max(1, host().vector_bits // max(8, d.bits))
    rows = a.size // n
    (res,) = _over_rows(e, _to_rows(e, ins[0], a, ax), rows, n, a.dtype, _on_threads(a, rows),
                        [(k, dt.int32)], lambda b, row, r, _dest: [_select_row(b, d, row, n, k, lanes, src)])
    return _from_rows(e, res, a, ax, out)


def _last_k(e, idx, full: Aval, ax, k, out):
    """The last k of argsort's indices `idx` (of `full`) along `ax`."""
    n = full.shape[ax]
    offs = ", ".join(str(n - k) if i == ax else "0" for i in range(full.ndim))
    ones = ", ".join("1" for _ in range(full.ndim))
    return e.op(f"tensor.extract_slice {idx}[{offs}] [{', '.join(map(str, out.shape))}] [{ones}] "
                f": {ttype(full)} to {ttype(out)}")


def _topk_gpu(e, ins, in_avals, out, axis, k):
    """argsort's GPU lowering (ranks, or the bitonic network), its last k."""
    a = in_avals[0]
    if out.size == 0:
        return e.empty(out)
    full = Aval(a.shape, dt.uint32)
    return _last_k(e, _lower_gpu(e, ins, in_avals, full, axis), full, int(axis), int(k), out)


primitive("argtopk", ["x"], _topk_shape, _topk_cpu, _topk_reference, attrs={"axis": I64(), "k": I64()},
          summary="indices (uint32) of the k largest of `x` along `axis`, ascending: argsort's last k",
          dtypes=[dt.float32, dt.int32, dt.float64])
register_lowering("argtopk", _topk_gpu, target="gpu")


# ---- sort: the values themselves, by vectors -----------------------------------------

def _key_dtype(d):
    """The signed integer type `sort` orders dtype `d`'s values as (None: complex)."""
    return None if d.kind == "c" else (dt.int64 if d.bits == 64 else dt.int32)


def _flip(b, bits, it, w, lanes=0):
    """IEEE bits (`it`, w bits; a vector of `lanes` if given) as signed integers in the
    floats' order (the magnitude bits of negative numbers flipped); its own inverse (the
    sign bit is kept)."""
    ty = f"vector<{lanes}x{it}>" if lanes else it

    def const(v):
        return b.op(f"arith.constant {f'dense<{v}>' if lanes else v} : {ty}")
    sign = b.op(f"arith.shrsi {bits}, {const(w - 1)} : {ty}")
    return b.op(f"arith.xori {bits}, {b.op(f'arith.andi {sign}, {const((1 << (w - 1)) - 1)} : {ty}')} : {ty}")


def _to_key(b, v, d):
    """Value `v` of dtype `d` as `_key_dtype(d)`, in the same order and one-to-one but for
    NaN (every NaN the positive quiet one, after +inf; -0.0 before +0.0)."""
    t, kt = d.signless, _key_dtype(d).signless
    if d.kind == "b":
        return b.op(f"arith.extui {v} : i1 to i32")
    if d.kind == "f":
        it = f"i{d.bits}"
        v = b.op(f"arith.select {b.op(f'arith.cmpf uno, {v}, {v} : {t}')}, "
                 f"{b.op(f'arith.constant {_QNAN[t]} : {t}')}, {v} : {t}")
        k = _flip(b, b.op(f"arith.bitcast {v} : {t} to {it}"), it, d.bits)
        return k if it == kt else b.op(f"arith.extsi {k} : {it} to {kt}")
    if d.bits in (32, 64):  # unsigned: the sign bit flipped orders them as signed integers
        return b.op(f"arith.xori {v}, {b.const(-(1 << (d.bits - 1)), t)} : {t}") if d.kind == "u" else v
    return b.op(f"arith.ext{'s' if d.kind == 'i' else 'u'}i {v} : {t} to {kt}")


def _from_key(b, k, d):
    """`_to_key`'s inverse."""
    t, kt = d.signless, _key_dtype(d).signless
    if d.kind == "b":
        return b.op(f"arith.trunci {k} : i32 to i1")
    if d.kind == "f":
        it = f"i{d.bits}"
        k = k if it == kt else b.op(f"arith.trunci {k} : {kt} to {it}")
        return b.op(f"arith.bitcast {_flip(b, k, it, d.bits)} : {it} to {t}")
    if d.bits in (32, 64):
        return b.op(f"arith.xori {k}, {b.const(-(1 << (d.bits - 1)), t)} : {t}") if d.kind == "u" else k
    return b.op(f"arith.trunci {k} : {kt} to {t}")


def sort_block(kd, lanes) -> int:
    """Elements of dtype `kd` a row's bitonic blocks hold: a power of two of at least two
    vectors, at most tuning.py's "sort" block_bytes (a sixteenth of L2)."""
    from ..lowering import tuning
    per = tuning.table()["sort"]["block_bytes"] // (kd.bits // 8)
    return max(2 * lanes, 1 << max(0, per.bit_length() - 1))


class _Bitonic:
    """Emits the bitonic sort of the blocks of a row of integer keys, with vectors of
    `lanes` keys: `sort(b, t, P, block)` returns tensor t (P keys) with each run of
    `block` sorted ascending. Every compare-exchange is a min and a max of two vectors:
    across vectors (distance >= lanes) of two loaded vectors, within one by a shuffle
    and a select of a constant mask; merges of bitonic runs in the form whose first step
    pairs an element with its mirror in the block (a reversed vector) and the rest pair
    i with i + distance, so every step sorts ascending."""

    def __init__(self, b, kd, lanes):
        self.kd, self.lanes = kd, lanes
        self.et = kd.signless
        self.vt = f"vector<{lanes}x{self.et}>"
        self.pad = b.const(0, self.et)
        # the selects' masks, made before any loop (the steps use them inside loops)
        self.masks = {}
        for d in range(lanes.bit_length() - 1):
            lower = tuple(i & (1 << d) == 0 for i in range(lanes))  # (a mirror's and a cleaner's alike)
            bits = ", ".join("true" if x else "false" for x in lower)
            self.masks[lower] = b.op(f"arith.constant dense<[{bits}]> : vector<{lanes}xi1>")

    def _mirror(self, s):
        """Lane partners of the first step of merging runs of s / 2 lanes: mirrors in s."""
        return [(i // s) * s + s - 1 - i % s for i in range(self.lanes)]

    def _read(self, b, t, tt, i):
        return b.op(f"vector.transfer_read {t}[{i}], {self.pad} {{in_bounds = [true]}} : {tt}, {self.vt}")

    def _write(self, b, v, t, tt, i):
        return b.op(f"vector.transfer_write {v}, {t}[{i}] {{in_bounds = [true]}} : {self.vt}, {tt}")

    def _exchange(self, b, x, partner):
        """One in-register step: lane i and lane partner[i], the lower lane takes the min."""
        perm = ", ".join(map(str, partner))
        p = b.op(f"vector.shuffle {x}, {x} [{perm}] : {self.vt}, {self.vt}")
        lo, hi = b.op(f"arith.minsi {x}, {p} : {self.vt}"), b.op(f"arith.maxsi {x}, {p} : {self.vt}")
        mask = self.masks[tuple(i < q for i, q in enumerate(partner))]
        return b.op(f"arith.select {mask}, {lo}, {hi} : vector<{self.lanes}xi1>, {self.vt}")

    def _cleaners(self, b, x, dist):
        """The in-register half-cleaners at distances dist, dist / 2, ..., 1."""
        while dist >= 1:
            x = self._exchange(b, x, [i ^ dist for i in range(self.lanes)])
            dist //= 2
        return x

    def _loop(self, b, count, t, tt, body):
        return _scalar_loop(b, b.index(count), [t], [tt], lambda bb, i, acc: [body(bb, acc, i)], "bitonic")[0]

    def _each_vector(self, b, t, tt, offset, count, fn):
        def body(bb, acc, v):
            at = bb.op(f"arith.muli {v}, {bb.index(self.lanes)} : index")
            at = bb.op(f"arith.addi {at}, {bb.index(offset)} : index") if offset else at
            return self._write(bb, fn(bb, self._read(bb, acc, tt, at)), acc, tt, at)
        return self._loop(b, count // self.lanes, t, tt, body)

    def _pairs(self, b, t, tt, offset, count, span, mirror, clean):
        """One step across vectors over `count` keys from `offset`, in blocks of `span`:
        each block's vector j (of its first half) against vector j of the second half
        or, with `mirror` (a merge's first step), against the mirror of vector j in the
        block, reversed. With `clean` (the level's last step across vectors) each vector
        is then sorted in registers by the level's half-cleaners before it is stored."""
        L = self.lanes
        group = span // (2 * L)  # vector pairs a block
        rev = ", ".join(map(str, range(L - 1, -1, -1)))

        def body(bb, acc, q):
            blk = bb.op(f"arith.divui {q}, {bb.index(group)} : index")
            j = bb.op(f"arith.muli {bb.op(f'arith.remui {q}, {bb.index(group)} : index')}, {bb.index(L)} : index")
            base = bb.op(f"arith.addi {bb.op(f'arith.muli {blk}, {bb.index(span)} : index')}, {bb.index(offset)} : index")
            a = bb.op(f"arith.addi {base}, {j} : index")
            c = (bb.op(f"arith.subi {bb.op(f'arith.addi {base}, {bb.index(span - L)} : index')}, {j} : index")
                 if mirror else bb.op(f"arith.addi {a}, {bb.index(span // 2)} : index"))
            x, y = self._read(bb, acc, tt, a), self._read(bb, acc, tt, c)
            if mirror:
                y = bb.op(f"vector.shuffle {y}, {y} [{rev}] : {self.vt}, {self.vt}")
            lo, hi = bb.op(f"arith.minsi {x}, {y} : {self.vt}"), bb.op(f"arith.maxsi {x}, {y} : {self.vt}")
            if mirror:
                hi = bb.op(f"vector.shuffle {hi}, {hi} [{rev}] : {self.vt}, {self.vt}")
            if clean:
                lo, hi = self._cleaners(bb, lo, L // 2), self._cleaners(bb, hi, L // 2)
            return self._write(bb, hi, self._write(bb, lo, acc, tt, a), tt, c)
        return self._loop(b, count // (2 * L), t, tt, body)

    def sort(self, b, t, P, block, offset=0, count=None):
        """t (P keys) with each run of `block` keys of its `count` keys from `offset` (all
        by default) sorted: `block` a power of two of two vectors or more."""
        L = self.lanes
        tt = ttype(Aval((P,), self.kd))
        count = P - offset if count is None else count

        def in_register(bb, x):  # each vector sorted: merges of 2, 4, ..., L lanes
            s = 2
            while s <= L:
                x = self._exchange(bb, x, self._mirror(s))
                x = self._cleaners(bb, x, s // 4)
                s *= 2
            return x
        t = self._each_vector(b, t, tt, offset, count, in_register)
        s = 2 * L
        while s <= block:  # runs of s / 2 merged into runs of s
            t = self._pairs(b, t, tt, offset, count, s, True, s == 2 * L)
            dist = s // 4
            while dist >= L:
                t = self._pairs(b, t, tt, offset, count, 2 * dist, False, dist == L)
                dist //= 2
            s *= 2
        return t

    def _merge2(self, b, x, y):
        """Two sorted vectors merged: (the lanes smallest, the lanes largest), each sorted."""
        L = self.lanes
        rev = ", ".join(map(str, range(L - 1, -1, -1)))
        y = b.op(f"vector.shuffle {y}, {y} [{rev}] : {self.vt}, {self.vt}")
        lo, hi = b.op(f"arith.minsi {x}, {y} : {self.vt}"), b.op(f"arith.maxsi {x}, {y} : {self.vt}")
        return self._cleaners(b, lo, L // 2), self._cleaners(b, hi, L // 2)

    def merge(self, b, src, dst, P, w):
        """One merge pass: the sorted runs of `w` keys of `src` (P keys; the last run may
        be shorter, a multiple of the vector) merged pairwise into `dst`, a vector at a
        time: the two vectors in hand merged (`_merge2`), the smaller half stored, the
        larger kept, and the next vector read from the run whose next key is smaller
        (Chhugani et al.'s SIMD merge). A last run with no partner is copied."""
        tt = ttype(Aval((P,), self.kd))
        full = P // (2 * w)
        dst = self._loop(b, full, dst, tt, lambda bb, acc, blk: self._merge_runs(
            bb, src, acc, tt, bb.op(f"arith.muli {blk}, {bb.index(2 * w)} : index"), w, w, P))
        rest = P - full * 2 * w
        if rest > w:
            return self._merge_runs(b, src, dst, tt, b.index(full * 2 * w), w, rest - w, P)
        if rest:
            at, rt = full * 2 * w, ttype(Aval((rest,), self.kd))
            run = b.op(f"tensor.extract_slice {src}[{at}] [{rest}] [1] : {tt} to {rt}")
            return b.op(f"tensor.insert_slice {run} into {dst}[{at}] [{rest}] [1] : {rt} into {tt}")
        return dst

    def _merge_runs(self, bb, src, acc, tt, lo, la, lb, P):
        """The runs of la and lb keys of `src` from `lo` merged into `acc` at `lo`."""
        L, et = self.lanes, self.et
        mid = bb.op(f"arith.addi {lo}, {bb.index(la)} : index")
        na, nb, last = bb.index(la), bb.index(lb), bb.index(P - 1)
        k, ia, ib, va, vb, dd, res = (bb.fresh(h) for h in ("k", "ia", "ib", "va", "vb", "d", "merge"))
        bb.line(f"{res}:5 = scf.for {k} = {bb.index(0)} to {bb.index((la + lb) // L - 2)} step {bb.index(1)} "
                f"iter_args({ia} = {bb.index(L)}, {ib} = {bb.index(L)}, {va} = {self._read(bb, src, tt, lo)}, "
                f"{vb} = {self._read(bb, src, tt, mid)}, {dd} = {acc}) -> (index, index, {self.vt}, {self.vt}, {tt}) {{")
        m = bb.sub("  ")
        small, large = self._merge2(m, va, vb)
        at = m.op(f"arith.addi {lo}, {m.op(f'arith.muli {k}, {m.index(L)} : index')} : index")
        d2 = self._write(m, small, dd, tt, at)
        pa = m.op(f"arith.addi {lo}, {ia} : index")
        pb = m.op(f"arith.addi {mid}, {ib} : index")
        # the runs' next keys (a run that is done reads its neighbour's, never taken)
        ha = m.op(f"tensor.extract {src}[{m.op(f'arith.minui {pa}, {last} : index')}] : {tt}")
        hb = m.op(f"tensor.extract {src}[{m.op(f'arith.minui {pb}, {last} : index')}] : {tt}")
        a_on = m.op(f"arith.cmpi ult, {ia}, {na} : index")
        b_done = m.op(f"arith.cmpi uge, {ib}, {nb} : index")
        first = m.op(f"arith.cmpi sle, {ha}, {hb} : {et}")
        take_a = m.op(f"arith.andi {a_on}, {m.op(f'arith.ori {b_done}, {first} : i1')} : i1")
        nxt = self._read(m, src, tt, m.op(f"arith.select {take_a}, {pa}, {pb} : index"))
        step, zero = m.index(L), m.index(0)
        ia2 = m.op(f"arith.addi {ia}, {m.op(f'arith.select {take_a}, {step}, {zero} : index')} : index")
        ib2 = m.op(f"arith.addi {ib}, {m.op(f'arith.select {take_a}, {zero}, {step} : index')} : index")
        m.line(f"scf.yield {ia2}, {ib2}, {nxt}, {large}, {d2} : index, index, {self.vt}, {self.vt}, {tt}")
        bb.lines.extend(m.lines)
        bb.line("}")
        small, large = self._merge2(bb, f"{res}#2", f"{res}#3")
        end = bb.op(f"arith.addi {lo}, {bb.index(la + lb - 2 * L)} : index")
        d2 = self._write(bb, small, f"{res}#4", tt, end)
        return self._write(bb, large, d2, tt, bb.op(f"arith.addi {end}, {bb.index(L)} : index"))


def _sort_keys_row(b, kd, row, n, lanes, block):
    """Row `row` (tensor<n x kd>, integer keys) sorted ascending: padded with the largest
    key to P keys, whole blocks of `block` then a last block of a power of two (at least
    two vectors); each block sorted by the bitonic network, then the blocks merged
    pairwise by vectors until one run is left (`_Bitonic`); the first n kept."""
    whole = n // block if n > block else 0
    rest = n - whole * block
    last = max(2 * lanes, 1 << (rest - 1).bit_length()) if rest else 0
    P = whole * block + last
    full = Aval((P,), kd)
    buf = b.op(f"bufferization.alloc_tensor() : {ttype(full)}")
    if P > n:  # (padded with the largest key)
        buf = b.op(f"linalg.fill ins({_sentinel(b, kd)} : {kd.signless}) outs({buf} : {ttype(full)}) -> {ttype(full)}")
    buf = b.op(f"tensor.insert_slice {row} into {buf}[0] [{n}] [1] : {ttype(Aval((n,), kd))} into {ttype(full)}")
    net = _Bitonic(b, kd, lanes)
    keys = net.sort(b, buf, P, block, 0, whole * block) if whole else buf
    if last:
        keys = net.sort(b, keys, P, last, whole * block, last)
    other = b.op(f"bufferization.alloc_tensor() : {ttype(full)}")
    w = block
    while w < P:  # (the two buffers swap roles a pass)
        keys, other = net.merge(b, keys, other, P, w), keys
        w *= 2
    return keys if P == n else b.op(f"tensor.extract_slice {keys}[0] [{n}] [1] : {ttype(full)} to "
                                    f"{ttype(Aval((n,), kd))}")


RADIX_BITS = 8  # a digit: 256 counters a pass, a kilobyte each for the counts and the offsets


def _scalar_loop(b, n, inits, types, body, hint="loop"):
    """`scf.for %i = 0 to n` carrying `inits` (of `types`); `body(bb, i, *carried)` emits
    into bb and returns the values to yield. Returns the loop's results."""
    i, res = b.fresh("i"), b.fresh(hint)
    carried = [b.fresh("c") for _ in inits]
    count = f":{len(inits)}" if len(inits) > 1 else ""
    b.line(f"{res}{count} = scf.for {i} = {b.index(0)} to {n} step {b.index(1)} "
           f"iter_args({', '.join(f'{c} = {v}' for c, v in zip(carried, inits))}) -> ({', '.join(types)}) {{")
    bb = b.sub("  ")
    ys = body(bb, i, *carried)
    bb.line(f"scf.yield {', '.join(ys)} : {', '.join(types)}")
    b.lines.extend(bb.lines)
    b.line("}")
    return [f"{res}#{k}" for k in range(len(inits))] if len(inits) > 1 else [res]


COUNT_COPIES = 4  # the counting loop's counter sets, a key each in turn (four chains, not one)


def _key_bits(d) -> int:
    """The bits that tell `_to_key`'s keys of dtype `d` apart (the rest copy the sign):
    narrow unsigned values and bools are zero-extended, one more bit."""
    return d.bits + (1 if d.kind in "ub" and d.bits < 32 else 0)


def _radix_keys_row(b, kd, row, n, low=0, bits=None, payload=None):
    """Row `row` (tensor<n x kd>, signed integer keys) sorted stably by its `bits` bits
    from `low` up (the rest of the word copies their sign; all of it by default), by an
    LSD radix sort of RADIX_BITS-bit digits (the top digit's sign bit flipped: the keys
    are signed; a 16-bit value's key takes two passes, a 64-bit one's eight). One loop
    counts every pass's digit values at once (the counts do not change from pass to
    pass); then a pass a digit, lowest first, moves the keys
    into the other buffer by their digit, in order: the first half's from the front to
    their value's next free place from its start, the second half's from the back to its
    next free place from its end, each half with counters of its own. Both halves keep
    their order (the front one's keys fill each value's places forwards, the back one's
    backwards), and the two chains of counter loads and stores are independent: one chain
    a pass (load a counter, store the key where it says, store the counter + 1) ran at 9
    cycles a key on Zen 3, its stores waiting on the counter loads; two sides 4-5, and
    the counts in COUNT_COPIES counter sets likewise. With `low` = 32 on int64 (argsort's
    (key, index) pairs) the key half alone decides: a row's pairs arrive in index order
    and the passes are stable, so equal keys stay in index order.

    A pass whose digit is the same for every key (the high bytes of small integers)
    copies the keys instead (`linalg.copy`, into the buffer the pass would write).
    Each pass reads and writes the row once, where the bitonic blocks' merges read and
    write it log2(n / block) times and the (key, index) pairs' merges compare 64 bits.

    With `payload` (a tensor<n x i32>: argsort's indices beside 64-bit keys, which leave
    no room in a word for them) each key's payload moves with it, and the result is
    (keys, payload)."""
    et = kd.signless
    passes = -(-(bits or kd.bits - low) // RADIX_BITS)
    size = 1 << RADIX_BITS
    tt = ttype(Aval((n,), kd))
    per = passes * size  # one counter set: a counter a digit value a pass
    ht, ct = f"tensor<{per}xi32>", f"tensor<{COUNT_COPIES * per}xi32>"
    mask, top = b.const(size - 1, et), b.const(size // 2, et)
    zero32, one32 = b.const(0, "i32"), b.const(1, "i32")

    def digit(bb, k, p):
        """Digit p of key k, as an index."""
        shift = low + p * RADIX_BITS
        v = bb.op(f"arith.shrui {k}, {bb.const(shift, et)} : {et}") if shift else k
        v = bb.op(f"arith.andi {v}, {mask} : {et}")
        if p == passes - 1:  # (the sign bit or a copy of it: negative keys first)
            v = bb.op(f"arith.xori {v}, {top} : {et}")
        return bb.op(f"arith.index_cast {v} : {et} to index")

    def bump(bb, h, t, k, base):
        """Every pass's counter of key k's digit in counter set `base` of h, + 1."""
        for p in range(passes):
            at = bb.op(f"arith.addi {digit(bb, k, p)}, {bb.index(base + p * size)} : index")
            c = bb.op(f"arith.addi {bb.op(f'tensor.extract {h}[{at}] : {t}')}, {one32} : i32")
            h = bb.op(f"tensor.insert {c} into {h}[{at}] : {t}")
        return h
    counts = b.op(f"linalg.fill ins({zero32} : i32) outs({b.op(f'bufferization.alloc_tensor() : {ct}')} "
                  f": {ct}) -> {ct}")
    groups = n // COUNT_COPIES

    def count(bb, i, h):
        at = bb.op(f"arith.muli {i}, {bb.index(COUNT_COPIES)} : index")
        for j in range(COUNT_COPIES):
            k = bb.op(f"tensor.extract {row}[{bb.op(f'arith.addi {at}, {bb.index(j)} : index') if j else at}] : {tt}")
            h = bump(bb, h, ct, k, j * per)
        return [h]
    if groups:
        (counts,) = _scalar_loop(b, b.index(groups), [counts], [ct], count, "count")
    for i in range(groups * COUNT_COPIES, n):  # (fewer keys than copies left: in set 0)
        counts = bump(b, counts, ct, b.op(f"tensor.extract {row}[{b.index(i)}] : {tt}"), 0)

    n32 = b.const(n, "i32")

    def bounds(bb, g, starts, ends, *carried):
        """Each pass's running sum: where digit value g's keys start and end; and whether
        one value holds every key (that pass moves nothing: a copy instead)."""
        runs, alls = carried[:passes], carried[passes:]
        outs, flags = [], []
        for p, (run, every) in enumerate(zip(runs, alls)):
            at = bb.op(f"arith.addi {g}, {bb.index(p * size)} : index") if p else g
            starts = bb.op(f"tensor.insert {run} into {starts}[{at}] : {ht}")
            total = None
            for j in range(COUNT_COPIES):
                cj = bb.op(f"arith.addi {at}, {bb.index(j * per)} : index") if j else at
                c = bb.op(f"tensor.extract {counts}[{cj}] : {ct}")
                total = c if total is None else bb.op(f"arith.addi {total}, {c} : i32")
            run = bb.op(f"arith.addi {run}, {total} : i32")
            ends = bb.op(f"tensor.insert {run} into {ends}[{at}] : {ht}")
            outs.append(run)
            flags.append(bb.op(f"arith.ori {every}, {bb.op(f'arith.cmpi eq, {total}, {n32} : i32')} : i1"))
        return [starts, ends] + outs + flags
    false = b.op("arith.constant false")
    starts, ends, *rest = _scalar_loop(
        b, b.index(size), [b.op(f"bufferization.alloc_tensor() : {ht}"), b.op(f"bufferization.alloc_tensor() : {ht}")]
        + [zero32] * passes + [false] * passes, [ht, ht] + ["i32"] * passes + ["i1"] * passes, bounds, "bounds")
    trivial = rest[passes:]
    st = f"tensor<{size}xi32>"
    half = n // 2
    last = b.index(n - 1)
    # the second pass writes into the row's buffer (bufferization copies a row it may not
    # write, an argument's); the other buffer is an allocation of its own (see `_sort_row`)
    keys, other = row, b.op(f"bufferization.alloc_tensor() : {tt}")
    pt = ttype(Aval((n,), dt.int32))
    # the payload's buffer and the other one, swapping roles as the keys' do (None without)
    carry = payload
    spare = b.op(f"bufferization.alloc_tensor() : {pt}") if payload is not None else None
    for p in range(passes):
        front = b.op(f"tensor.extract_slice {starts}[{p * size}] [{size}] [1] : {ht} to {st}")
        back = b.op(f"tensor.extract_slice {ends}[{p * size}] [{size}] [1] : {ht} to {st}")

        def move(bb, i, k, at, dst, dstp, srcp):
            """Key k (and payload i of srcp) to place `at` (i32) of dst (and dstp)."""
            at = bb.op(f"arith.index_cast {at} : i32 to index")
            dst = bb.op(f"tensor.insert {k} into {dst}[{at}] : {tt}")
            if srcp is not None:
                dstp = bb.op(f"tensor.insert {bb.op(f'tensor.extract {srcp}[{i}] : {pt}')} into {dstp}[{at}] : {pt}")
            return dst, dstp

        def scatter(bb, i, dst, fwd, bwd, *dstp, p=p, src=keys, srcp=carry):
            dstp = dstp[0] if dstp else None
            k = bb.op(f"tensor.extract {src}[{i}] : {tt}")
            g = digit(bb, k, p)
            at = bb.op(f"tensor.extract {fwd}[{g}] : {st}")
            dst, dstp = move(bb, i, k, at, dst, dstp, srcp)
            fwd = bb.op(f"tensor.insert {bb.op(f'arith.addi {at}, {one32} : i32')} into {fwd}[{g}] : {st}")
            j = bb.op(f"arith.subi {last}, {i} : index")
            q = bb.op(f"tensor.extract {src}[{j}] : {tt}")
            gq = digit(bb, q, p)
            end = bb.op(f"arith.subi {bb.op(f'tensor.extract {bwd}[{gq}] : {st}')}, {one32} : i32")
            dst, dstp = move(bb, j, q, end, dst, dstp, srcp)
            return [dst, fwd, bb.op(f"tensor.insert {end} into {bwd}[{gq}] : {st}")] + ([dstp] if srcp is not None else [])
        types = f"{tt}, {pt}" if payload is not None else tt
        res = b.fresh("moved")
        b.line(f"{res}{':2' if payload is not None else ''} = scf.if {trivial[p]} -> ({types}) {{")
        bb = b.sub("  ")  # every key has one digit value here: the keys as they are
        ys = [bb.op(f"linalg.copy ins({keys} : {tt}) outs({other} : {tt}) -> {tt}")]
        if payload is not None:
            ys.append(bb.op(f"linalg.copy ins({carry} : {pt}) outs({spare} : {pt}) -> {pt}"))
        bb.line(f"scf.yield {', '.join(ys)} : {types}")
        b.lines.extend(bb.lines)
        b.line("} else {")
        bb = b.sub("  ")
        inits, kinds = [other, front, back], [tt, st, st]
        if payload is not None:
            inits, kinds = inits + [spare], kinds + [pt]
        moved, fwd, _, *movedp = _scalar_loop(bb, bb.index(half), inits, kinds, scatter, "pass")
        movedp = movedp[0] if movedp else None
        if n % 2:  # the middle key: between the halves', at its value's one free place
            mid = bb.index(half)
            k = bb.op(f"tensor.extract {keys}[{mid}] : {tt}")
            at = bb.op(f"tensor.extract {fwd}[{digit(bb, k, p)}] : {st}")
            moved, movedp = move(bb, mid, k, at, moved, movedp, carry)
        bb.line(f"scf.yield {moved}{f', {movedp}' if payload is not None else ''} : {types}")
        b.lines.extend(bb.lines)
        b.line("}")
        if payload is not None:
            keys, other, carry, spare = f"{res}#0", keys, f"{res}#1", carry
        else:
            keys, other = res, keys
    return (keys, carry) if payload is not None else keys


def _keys_row(b, kd, row, n, lanes, block, low, bits):
    """A row of keys sorted (by their `bits` bits from `low` up): by the radix sort from
    tuning.py's "sort" radix_bytes of 32-bit keys, or radix_wide 64-bit ones (argsort's
    (key, index) pairs too), else by the bitonic blocks and their merges."""
    from ..lowering import tuning
    t = tuning.table()["sort"]
    # (the radix sort counts in i32: rows of 2^31 keys or more keep the merges)
    if (t["radix_wide"] if kd.bits == 64 else t["radix_bytes"] // (kd.bits // 8)) <= n < 2**31:
        return _radix_keys_row(b, kd, row, n, low, bits)
    return _sort_keys_row(b, kd, row, n, lanes, block)


def _sort_by_keys(e, x, a: Aval, ax: int, kd, key_row, out: Aval, out_row, low=0, bits=None) -> str:
    """`x` (of `a`) along `ax` in the order of its integer keys (of dtype `kd`), row by
    row: `key_row(b, row, n, first)` gives a row's keys (`first`: the row's first
    element's index in the array's row, an index value), `_sort_keys_row` sorts them and
    `out_row(b, keys, n)` gives the row of `out`. The rows on the threads when the array
    is large; one long row as two halves on two threads (the values padded with ones that
    sort last, `_sentinel`) and one vector merge of them. Keys live a row at a time: a
    whole array of them was a temporary the size of the input or twice it, allocated and
    faulted in on every call."""
    from ..lowering.host_cpu import host
    n = a.shape[ax]
    rows = a.size // n
    lanes = max(2, host().vector_bits // kd.bits)
    block = sort_block(kd, lanes)
    d = a.dtype
    if rows == 1 and n >= SORT_PARALLEL_MIN:
        h = -(-n // (2 * lanes)) * lanes  # (halves of whole vectors)
        full, padded = Aval((2 * h,), d), _reshape(e, x, a, (n,))
        if 2 * h > n:
            pad = e.op(f"tensor.splat {_sentinel(e, d)} : {ttype(full)}")
            padded = e.op(f"tensor.insert_slice {padded} into {pad}[0] [{n}] [1] : "
                          f"{ttype(Aval((n,), d))} into {ttype(full)}")

        def half(b, row, r, _dest):
            first = b.op(f"arith.muli {r}, {b.index(h)} : index")
            return [_keys_row(b, kd, key_row(b, row, h, first), h, lanes, block, low, bits)]
        (halves,) = _over_rows(e, _reshape(e, padded, full, (2, h)), 2, h, d, True, [(h, kd)], half)
        kt = ttype(Aval((2 * h,), kd))
        merged = _Bitonic(e, kd, lanes).merge(e, _reshape(e, halves, Aval((2, h), kd), (2 * h,)),
                                              e.op(f"bufferization.alloc_tensor() : {kt}"), 2 * h, h)
        res = out_row(e, merged, 2 * h)
        if 2 * h > n:
            res = e.op(f"tensor.extract_slice {res}[0] [{n}] [1] : {ttype(Aval((2 * h,), out.dtype))} to "
                       f"{ttype(Aval((n,), out.dtype))}")
        return _reshape(e, res, Aval((n,), out.dtype), out.shape)

    def body(b, row, r, _dest):
        return [out_row(b, _keys_row(b, kd, key_row(b, row, n, None), n, lanes, block, low, bits), n)]
    (res,) = _over_rows(e, _to_rows(e, x, a, ax), rows, n, d, _on_threads(a, rows),
                        [(n, out.dtype)], body)
    return _from_rows(e, res, a, ax, out)


def _sort_cpu(e, ins, in_avals, out, axis):
    """The values along `axis` sorted: as integer keys in their order (`_to_key`), each row
    by `_sort_keys_row` on the threads, back to values; one long row as two halves on
    two threads and a merge (`_sort_by_keys`). Complex values: the merge sort's keys
    (`_sort_row`)."""
    a = in_avals[0]
    ax = int(axis)
    n = a.shape[ax]
    if out.size == 0 or n == 1:
        return ins[0]
    if a.dtype.kind == "c":
        rows = a.size // n
        keys, _ = _each_row(e, _to_rows(e, ins[0], a, ax), rows, n, a.dtype, _on_threads(a, rows), keys_too=True)
        return _from_rows(e, keys, a, ax, out)
    kd = _key_dtype(a.dtype)
    same = a.dtype.kind == "i" and a.dtype.bits in (32, 64)  # (the values are their keys)

    def key_row(b, row, m, _first):
        return row if same else b.map([row], [Aval((m,), a.dtype)], Aval((m,), kd),
                                      lambda bb, v: _to_key(bb, v, a.dtype))

    def out_row(b, keys, m):
        return keys if same else b.map([keys], [Aval((m,), kd)], Aval((m,), a.dtype),
                                       lambda bb, k: _from_key(bb, k, a.dtype))
    return _sort_by_keys(e, ins[0], a, ax, kd, key_row, out, out_row, bits=_key_bits(a.dtype))


def _sort_gpu(e, ins, in_avals, out, axis):
    """argsort's GPU lowering (ranks, or the bitonic network), then the gather."""
    a = in_avals[0]
    if out.size == 0:
        return e.empty(out)
    idx_aval = Aval(a.shape, dt.uint32)
    idx = _lower_gpu(e, ins, in_avals, idx_aval, axis)
    return PRIMITIVES["take_along_axis"].lowering("gpu")(e, [ins[0], idx], [a, idx_aval], out, axis=axis)


primitive("sort", ["x"], lambda avals, axis: _shape(avals, axis, "sort"),
          _sort_cpu, lambda x, axis: np.sort(x, axis=int(axis), kind="stable"), attrs={"axis": I64()},
          summary="`x` sorted along `axis` (NaN last; as numpy's sort)",
          dtypes=[dt.float32, dt.int32, dt.float64])
register_lowering("sort", _sort_gpu, target="gpu")


def _rules():
    from .rules import defbatch, defjvp, defvjp, move_to_front

    def _apply(name, args, **params):
        from mirax.array import apply
        return apply(name, args, **params)

    # integer results: no derivative (sort's flows through take_along_axis)
    for name in ("argsort", "argtopk"):
        defjvp(name, None)
        defvjp(name, None)

    def sort_jvp(t, x, out, axis):
        """The tangent gathered in the values' order (argsort's indices)."""
        return _apply("take_along_axis", [t, _apply("argsort", [x], axis=axis)], axis=axis)

    def sort_vjp(ct, x, out, axis):
        """take_along_axis's transpose: the cotangent scattered back to where each value was."""
        idx = _apply("argsort", [x], axis=axis)
        return PRIMITIVES["take_along_axis"].vjp([x, idx], ct, out, axis=axis)[0]
    defjvp("sort", sort_jvp)
    defvjp("sort", sort_vjp)

    def batch_along(name):
        """vmap: the batch dim moved to the front, the sorted axis one further along."""
        def batch(args, dims, axis, **params):
            ints = {k: int(v) for k, v in params.items()}  # (argtopk's k)
            return _apply(name, [move_to_front(args[0], dims[0])], axis=int(axis) + 1, **ints), 0
        return batch
    for name in ("argsort", "sort", "argtopk"):
        defbatch(name, batch_along(name))


_rules()
