"""Reduction primitives: sum, prod, max, min, argmax, argmin and cumsum.

Each reduces over `axes` (sorted, non-negative; the Python API normalizes them) and
keeps the reduced dims as size 1 when `keepdims` is set. The result dtype is the input
dtype (argmax/argmin give uint32, as MLX); the API promotes first (`sum` of bool is int32).

    %0 = "mirax.sum"(%x) {axes = array<i64: 1>, keepdims = false} : (tensor<2x3xf32>) -> tensor<2xf32>
    %1 = "mirax.argmax"(%x) {axes = array<i64: 0>, keepdims = true} : (tensor<2x3xf32>) -> tensor<1x3xui32>
    %2 = "mirax.cumsum"(%x) {axis = 1 : i64, reverse = false, inclusive = true} : (tensor<2x3xf32>) -> tensor<2x3xf32>

Lowering: a `linalg.generic` with parallel iterators on the kept dims and reduction
iterators on `axes`, accumulating into a `linalg.fill` of the op's identity, then a
`tensor.expand_shape` for `keepdims` (elementwise fusion folds it into the consumer, so a
`x - max(x, keepdims=True)` reads the row maximum directly). On the CPU a full reduction of
a large array is rows, then the row results (`_reduce_lower_cpu`), and argmax/argmin are the
rows' max, then the first index equal to it (`_arg_lower_cpu`; a long 1-D array, a flattened
argmax, as rows, then the first best row; other very long axes carry (value, index) in a
two-output generic); cumsum is an `scf.for` over the axis carrying the running sum: along
the last axis each row is scanned in memory order (`_scan_rows`, the rows on the threads),
along another axis the loop steps through slices of the whole array.
"""
from __future__ import annotations

import numpy as np

from . import dtypes as dt
from .core import Aval, Bool, I64, I64Array, MiraxError, primitive, register_lowering
from ..lowering.emit import _affine, identity_map, memory_type, projected_map, ttype

RED_TEST = [dt.float32, dt.int32, dt.float64]
ARG_TEST = [dt.float32, dt.int32, dt.float64]


# ---- shape rules ---------------------------------------------------------------------

def _check_axes(name, a, axes):
    axes = tuple(int(x) for x in axes)
    if any(not 0 <= x < a.ndim for x in axes) or list(axes) != sorted(set(axes)):
        raise MiraxError(f"mirax.{name}: axes {axes} must be sorted, distinct and in [0, {a.ndim}) "
                         f"for an array of shape {a.shape}")
    return axes


def _reduced_shape(shape, axes, keepdims):
    if keepdims:
        return tuple(1 if i in axes else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in axes)


def _reduce_rule(name, kinds, empty_ok):
    def rule(avals, axes, keepdims):
        (a,) = avals
        if a.dtype.kind not in kinds:
            raise MiraxError(f"mirax.{name} does not support dtype {a.dtype.name} (shape {a.shape})")
        axes = _check_axes(name, a, axes)
        if not empty_ok and any(a.shape[x] == 0 for x in axes):
            raise MiraxError(f"mirax.{name}: zero-size array to reduction operation {name} which has no "
                             f"identity (shape {a.shape}, axes {axes})")
        return Aval(_reduced_shape(a.shape, axes, keepdims), a.dtype)
    return rule


def _arg_rule(name):
    def rule(avals, axes, keepdims):
        (a,) = avals
        if a.dtype.kind not in "biuf":
            raise MiraxError(f"mirax.{name} does not support dtype {a.dtype.name} (shape {a.shape})")
        axes = _check_axes(name, a, axes)
        if len(axes) != 1:
            raise MiraxError(f"mirax.{name} reduces exactly one axis, got axes {axes} for shape {a.shape}")
        if a.shape[axes[0]] == 0:
            raise MiraxError(f"mirax.{name}: attempt to get {name} of an empty sequence "
                             f"(shape {a.shape}, axis {axes[0]})")
        return Aval(_reduced_shape(a.shape, axes, keepdims), dt.uint32)
    return rule


# ---- lowering helpers ----------------------------------------------------------------

def _reshape(e, value, src: Aval, dst: Aval):
    """`tensor.reshape` between static shapes of the same size (keepdims, batch collapse)."""
    if src.shape == dst.shape:
        return value
    shp = e.op(f"arith.constant dense<[{', '.join(str(d) for d in dst.shape)}]> : tensor<{dst.ndim}xi64>"
               if dst.ndim else "arith.constant dense<> : tensor<0xi64>", "shape")
    return e.op(f"tensor.reshape {value}({shp}) : ({ttype(src)}, tensor<{dst.ndim}xi64>) -> {ttype(dst)}")


def _keepdims(e, value, src: Aval, dst: Aval):
    """`tensor.expand_shape` adding the unit dims of `keepdims` (`_reshape` otherwise).

    Each kept dim is grouped with the unit dims after it (leading unit dims join the
    first group), which is the form the linalg reshape fusions see through:

        %r = tensor.expand_shape %s [[0, 1]] output_shape [4096, 1] : tensor<4096xf32> into tensor<4096x1xf32>
    """
    if src.shape == dst.shape:
        return value
    kept = [i for i, s in enumerate(dst.shape) if s != 1]
    if [dst.shape[i] for i in kept] != [s for s in src.shape if s != 1] or src.ndim != len(kept) \
            or any(s == 1 for s in src.shape):
        return _reshape(e, value, src, dst)
    groups = []
    for i in range(dst.ndim if src.ndim else 0):
        if i in kept or not groups:
            groups.append([i])
        else:
            groups[-1].append(i)
    if len(groups) > src.ndim:  # leading unit dims: merge into the first kept dim's group
        groups = [groups[0] + groups[1]] + groups[2:]
    reassoc = "[" + ", ".join("[" + ", ".join(map(str, g)) + "]" for g in groups) + "]"
    shape = ", ".join(str(d) for d in dst.shape)
    return e.op(f"tensor.expand_shape {value} {reassoc} output_shape [{shape}] : {ttype(src)} into {ttype(dst)}")


def _identity_value(kind, d: dt.Dtype):
    """The identity of a reduction as a Python value for `Emitter.const` (signless)."""
    if kind == "sum":
        return 0
    if kind == "prod":
        return 1
    if d.kind == "f":
        return float("-inf") if kind == "max" else float("inf")
    if d.kind == "b":
        return 0 if kind == "max" else 1
    if d.kind == "u":
        return 0 if kind == "max" else -1  # all ones: the largest unsigned value
    lo, hi = -(1 << (d.bits - 1)), (1 << (d.bits - 1)) - 1
    return lo if kind == "max" else hi


def _combine(kind, b, x, acc, d: dt.Dtype):
    t = d.signless
    if d.kind == "c" and kind in ("max", "min"):  # numpy's order: real part, then imaginary
        f = d.mlir[len("complex<"):-1]
        xr, xi = b.op(f"complex.re {x} : {d.mlir}"), b.op(f"complex.im {x} : {d.mlir}")
        ar, ai = b.op(f"complex.re {acc} : {d.mlir}"), b.op(f"complex.im {acc} : {d.mlir}")
        cmp = "ogt" if kind == "max" else "olt"
        wins = b.op(f"arith.cmpf {cmp}, {xr}, {ar} : {f}")
        tie = b.op(f"arith.andi {b.op(f'arith.cmpf oeq, {xr}, {ar} : {f}')}, "
                   f"{b.op(f'arith.cmpf {cmp}, {xi}, {ai} : {f}')} : i1")
        take = b.op(f"arith.ori {wins}, {tie} : i1")
        # NaN propagates (as numpy): a NaN in x wins, a NaN already kept stays
        xnan = b.op(f"arith.cmpf uno, {xr}, {xi} : {f}")
        anan = b.op(f"arith.cmpf uno, {ar}, {ai} : {f}")
        true = b.const(1, "i1")
        take = b.op(f"arith.ori {take}, {xnan} : i1")
        take = b.op(f"arith.andi {take}, {b.op(f'arith.xori {anan}, {true} : i1')} : i1")
        return b.op(f"arith.select {take}, {x}, {acc} : {d.mlir}")
    if d.kind == "c":
        op = {"sum": "add", "prod": "mul"}[kind]
        return b.op(f"complex.{op} {x}, {acc} : {d.mlir}")
    if kind == "sum":
        return b.op(f"arith.add{'f' if d.kind == 'f' else 'i'} {x}, {acc} : {t}")
    if kind == "prod":
        return b.op(f"arith.mul{'f' if d.kind == 'f' else 'i'} {x}, {acc} : {t}")
    if d.kind == "f":  # maximumf/minimumf propagate NaN, as numpy
        return b.op(f"arith.{kind}imumf {x}, {acc} : {t}")
    sign = "s" if d.kind == "i" else "u"
    return b.op(f"arith.{kind}{sign}i {x}, {acc} : {t}")


def _reduce_lower(kind):
    def lower(e, ins, in_avals, out, axes, keepdims):
        a = in_avals[0]
        n = a.ndim
        kept = [i for i in range(n) if i not in axes]
        red = Aval(tuple(a.shape[i] for i in kept), a.dtype)
        init = e.fill(_identity_value(kind, a.dtype), red)
        maps = [identity_map(n), projected_map(n, kept)]
        its = ["reduction" if i in axes else "parallel" for i in range(n)]
        r = e.generic(ins, in_avals, red, lambda b, x, acc: _combine(kind, b, x, acc, a.dtype),
                      maps, its, init=init)
        return _keepdims(e, r, red, out)
    return lower


CPU_SPLIT_MIN = 1 << 16  # a full reduction of this many elements or more runs as rows, then one
CPU_ROWS = (4096, 8192, 2048, 16384, 1024, 512)  # row lengths it may use, the preferred first


def _reduce_lower_cpu(kind):
    """On the CPU, a full reduction of a large array is a reduction of rows (`CPU_ROWS`
    columns, a length that divides the size) and then of the row results: the rows run
    in the row kernels (lowering/fuse_reductions.py: split over the threads, vectorized with
    several partial sums), where one reduction to a scalar was one serial chain of scalar
    adds (LLVM keeps a float sum's order): 21 ms for 4096x4096 f32 against 2.7 ms for its
    row sums, on an Intel AVX-512 host. An array whose last axis is long enough is reduced
    over that axis first (no reshape between the rows and the ops fused into them); a
    size no row length divides stays one reduction.

        %s = "mirax.sum"(%x) {axes = array<i64: 0, 1>, keepdims = false} : (tensor<4096x4096xf32>) -> tensor<f32>
      lowers as (tensor<16777216xf32> -> tensor<4096x4096xf32> -> tensor<4096xf32> -> tensor<f32>)
    """
    default = _reduce_lower(kind)

    def lower(e, ins, in_avals, out, axes, keepdims):
        a = in_avals[0]
        size = a.size
        if len(axes) != a.ndim or size < CPU_SPLIT_MIN or a.dtype.kind not in "iuf":
            return default(e, ins, in_avals, out, axes, keepdims)
        red = Aval((), a.dtype)
        if a.ndim >= 2 and a.shape[-1] >= CPU_ROWS[-1]:
            # rows of the array's own last axis: no reshape between the rows and their
            # elementwise producers (mirax-fuse does not fuse through one)
            part_aval = Aval(a.shape[:-1], a.dtype)
            part = default(e, ins, in_avals, part_aval, (a.ndim - 1,), False)
            return _keepdims(e, lower(e, [part], [part_aval], red, tuple(range(a.ndim - 1)), False), red, out)
        cols = next((c for c in CPU_ROWS if size % c == 0 and size // c >= 2), None)
        if cols is None:
            return default(e, ins, in_avals, out, axes, keepdims)
        x, flat = _flatten(e, ins[0], a), Aval((size,), a.dtype)
        return _keepdims(e, _rows_then_one(e, default, x, flat, size // cols), red, out)
    return lower


def _flatten(e, x, a: Aval):
    """`x` of type `a` collapsed to 1-D (itself when it is)."""
    if a.ndim == 1:
        return x
    reassoc = "[[" + ", ".join(str(i) for i in range(a.ndim)) + "]]"
    return e.op(f"tensor.collapse_shape {x} {reassoc} : {ttype(a)} into {ttype(Aval((a.size,), a.dtype))}")


def _rows_then_one(e, default, x, flat, rows):
    """The 0-d reduction (`default`'s) of 1-D `x` (aval `flat`, `rows` dividing its size)
    as `rows` row reductions, then one of their results."""
    d, cols = flat.dtype, flat.shape[0] // rows
    grid = Aval((rows, cols), d)
    x = e.op(f"tensor.expand_shape {x} [[0, 1]] output_shape [{rows}, {cols}] : {ttype(flat)} into {ttype(grid)}")
    part = default(e, [x], [grid], Aval((rows,), d), (1,), False)
    return default(e, [part], [Aval((rows,), d)], Aval((), d), (0,), False)


GPU_SPLIT_MIN = 1 << 16  # a full reduction of this many elements or more runs on GPU_SPLIT_ROWS workgroups
GPU_SPLIT_ROWS = 256


def _reduce_lower_gpu(kind):
    """On the GPU, trailing reduced axes are collapsed into one first: a single reduction
    dim is what one workgroup per row splits over its threads. A full reduction of a long
    array is done in two levels, (256, n/256) rows then the 256 partials, so it spreads
    over 256 workgroups instead of one (padded with the reduction's identity when 256
    does not divide n)."""
    default = _reduce_lower(kind)

    def lower(e, ins, in_avals, out, axes, keepdims):
        a = in_avals[0]
        n, axes = a.ndim, sorted(int(x) for x in axes)
        k = len(axes)
        if not k or axes != list(range(n - k, n)):
            return default(e, ins, in_avals, out, axes, keepdims)
        x, flat = ins[0], a
        if k >= 2:
            flat = Aval(a.shape[:n - k] + (int(np.prod(a.shape[n - k:])),), a.dtype)
            groups = [[i] for i in range(n - k)] + [list(range(n - k, n))]
            reassoc = "[" + ", ".join("[" + ", ".join(map(str, g)) + "]" for g in groups) + "]"
            x = e.op(f"tensor.collapse_shape {x} {reassoc} : {ttype(a)} into {ttype(flat)}")
        red = Aval(a.shape[:n - k], a.dtype)
        if n == k and flat.shape[0] >= GPU_SPLIT_MIN and a.dtype.kind in "iuf":
            return _keepdims(e, _two_level(e, default, kind, x, flat), red, out)
        if k < 2:
            return default(e, ins, in_avals, out, axes, keepdims)
        return _keepdims(e, default(e, [x], [flat], red, (n - k,), False), red, out)
    return lower


def _two_level(e, default, kind, x, flat):
    """The 0-d reduction of 1-D `x` as GPU_SPLIT_ROWS row reductions, then one."""
    size, d = flat.shape[0], flat.dtype
    g = GPU_SPLIT_ROWS
    m = -(-size // g)
    if g * m != size:  # pad with the identity (0 for sum, -inf for max, ...)
        ident = e.const(_identity_value(kind, d), d.signless)
        padded = Aval((g * m,), d)
        r = e.fresh("pad")
        e.line(f"{r} = tensor.pad {x} low[0] high[{g * m - size}] {{")
        e.lines.append(e.indent + f"^bb0(%i_{r[1:]}: index):")
        e.line(f"  tensor.yield {ident} : {d.signless}")
        e.line(f"}} : {ttype(flat)} to {ttype(padded)}")
        x, flat = r, padded
    return _rows_then_one(e, default, x, flat, g)


def _np_reduce(fn):
    def ref(x, axes, keepdims):
        return np.asarray(fn(x, axis=tuple(axes), keepdims=keepdims)).astype(x.dtype)
    return ref


for _k, _fn, _kinds, _empty_ok, _summary in [
        ("sum", np.sum, "iufc", True, "sum over `axes`"),
        ("prod", np.prod, "iufc", True, "product over `axes`"),
        ("max", np.max, "biufc", False, "maximum over `axes` (NaN propagates; complex: by real part, "
                                        "then imaginary part)"),
        ("min", np.min, "biufc", False, "minimum over `axes` (NaN propagates; complex: by real part, "
                                        "then imaginary part)")]:
    primitive(_k, ["x"], _reduce_rule(_k, _kinds, _empty_ok), _reduce_lower_cpu(_k), _np_reduce(_fn),
              attrs={"axes": I64Array(), "keepdims": Bool()}, summary=_summary,
              dtypes=RED_TEST)
    register_lowering(_k, _reduce_lower_gpu(_k), target="gpu")


# ---- argmax / argmin -----------------------------------------------------------------

def _arg_lower(kind):
    """A two-output linalg.generic carrying (best value, its index).

    The combine is order-independent: a candidate wins when it is strictly better, or
    equal with a smaller index (first occurrence), so any reduction order gives numpy's
    answer. For floats a NaN beats every number (numpy returns the first NaN)."""
    def lower(e, ins, in_avals, out, axes, keepdims):
        a = in_avals[0]
        d = a.dtype
        n = a.ndim
        (axis,) = axes
        kept = [i for i in range(n) if i not in axes]
        red_v = Aval(tuple(a.shape[i] for i in kept), d)
        red_i = Aval(red_v.shape, dt.uint32)
        v0 = e.fill(_identity_value("max" if kind == "argmax" else "min", d), red_v)
        i0 = e.fill(0, red_i)
        mt = memory_type(d)  # i8 for bool: 0/1 compare correctly as unsigned
        b = e.sub("  ")
        xa, va, ia = b.fresh("a"), b.fresh("o"), b.fresh("o")
        idx = b.op(f"linalg.index {axis} : index")
        idx = b.op(f"arith.index_cast {idx} : index to i32")
        first = b.op(f"arith.cmpi ult, {idx}, {ia} : i32")
        if d.kind == "f":
            better = b.op(f"arith.cmpf {'ogt' if kind == 'argmax' else 'olt'}, {xa}, {va} : {mt}")
            eq = b.op(f"arith.cmpf oeq, {xa}, {va} : {mt}")
            xnan = b.op(f"arith.cmpf uno, {xa}, {xa} : {mt}")
            vnan = b.op(f"arith.cmpf uno, {va}, {va} : {mt}")
            vnum = b.op(f"arith.xori {vnan}, {b.const(1, 'i1')} : i1")
            # equal values (or both NaN) tie-break on the index
            both_nan = b.op(f"arith.andi {xnan}, {vnan} : i1")
            tie = b.op(f"arith.ori {eq}, {both_nan} : i1")
            tie_first = b.op(f"arith.andi {tie}, {first} : i1")
            nan_wins = b.op(f"arith.andi {xnan}, {vnum} : i1")
            take = b.op(f"arith.ori {better}, {tie_first} : i1")
            take = b.op(f"arith.ori {take}, {nan_wins} : i1")
        else:
            s = "s" if d.kind == "i" else "u"
            pred = ("gt" if kind == "argmax" else "lt")
            better = b.op(f"arith.cmpi {s}{pred}, {xa}, {va} : {mt}")
            eq = b.op(f"arith.cmpi eq, {xa}, {va} : {mt}")
            tie_first = b.op(f"arith.andi {eq}, {first} : i1")
            take = b.op(f"arith.ori {better}, {tie_first} : i1")
        nv = b.op(f"arith.select {take}, {xa}, {va} : {mt}")
        ni = b.op(f"arith.select {take}, {idx}, {ia} : i32")
        maps = ", ".join([identity_map(n), projected_map(n, kept), projected_map(n, kept)])
        its = ", ".join(f'"{"reduction" if i in axes else "parallel"}"' for i in range(n))
        res = e.fresh("g")
        e.line(f"{res}:2 = linalg.generic {{indexing_maps = [{maps}], iterator_types = [{its}]}} "
               f"ins({ins[0]} : {ttype(a)}) outs({v0}, {i0} : {ttype(red_v)}, {ttype(red_i)}) {{")
        e.lines.append(e.indent + f"^bb0({xa}: {mt}, {va}: {mt}, {ia}: i32):")
        e.lines.extend(b.lines)
        e.line(f"  linalg.yield {nv}, {ni} : {mt}, i32")
        e.line(f"}} -> ({ttype(red_v)}, {ttype(red_i)})")
        return _keepdims(e, f"{res}#1", red_i, out)
    return lower


def _arg_lower_two_pass(kind):
    """argmax as two reductions over the same rows, each one upstream tiling can split
    (over a GPU workgroup's threads; the CPU's row kernels vectorize them), which the
    two-output generic's select-based combine it cannot: the best value m (max/min, NaN propagating), then the smallest index k with
    x[k] == m (or both NaN: numpy's first NaN). k comes in as a constant operand, as in
    cumsum; the unsigned min of k over the hits is the first occurrence."""
    best = _reduce_lower("max" if kind == "argmax" else "min")

    def lower(e, ins, in_avals, out, axes, keepdims):
        a = in_avals[0]
        d, n = a.dtype, a.ndim
        (axis,) = axes
        kept = [i for i in range(n) if i != axis]
        red_v = Aval(tuple(a.shape[i] for i in kept), d)
        red_i = Aval(red_v.shape, dt.uint32)
        m = best(e, ins, in_avals, red_v, (axis,), False)
        iota_aval = Aval((a.shape[axis],), dt.int32)
        iota = e.op(f"arith.constant dense<[{', '.join(map(str, range(a.shape[axis])))}]> : {ttype(iota_aval)}")

        def body(b, x, mv, k, acc):
            if d.kind == "f":
                t = d.signless
                hit = b.op(f"arith.cmpf oeq, {x}, {mv} : {t}")
                nan = b.op(f"arith.andi {b.op(f'arith.cmpf uno, {x}, {x} : {t}')}, "
                           f"{b.op(f'arith.cmpf uno, {mv}, {mv} : {t}')} : i1")
                hit = b.op(f"arith.ori {hit}, {nan} : i1")
            else:
                hit = b.op(f"arith.cmpi eq, {x}, {mv} : {d.signless}")
            cand = b.op(f"arith.select {hit}, {k}, {b.const(-1, 'i32')} : i32")
            return b.op(f"arith.minui {cand}, {acc} : i32")
        maps = [identity_map(n), projected_map(n, kept), _affine(n, [f"d{axis}"]), projected_map(n, kept)]
        its = ["reduction" if i == axis else "parallel" for i in range(n)]
        r = e.generic([ins[0], m, iota], [a, red_v, iota_aval], red_i, body, maps, its,
                      init=e.fill(-1, red_i))
        return _keepdims(e, r, red_i, out)
    return lower


CPU_ARG_MAX_AXIS = 1 << 16  # longer axes keep the two-output generic (the index constant's size)


def _arg_lower_cpu(kind):
    """On the CPU argmax is two reductions over the same rows, as on the GPU (the
    two-output generic's select chain stays a scalar loop: 40 ms for a 4096^2 argmax over
    rows against numpy's 7; 11 ms so): the row kernels' vectorized max, then the first
    index where x equals it (`_arg_lower_two_pass`: the indices a constant operand, since a
    split reduction's tiling does not offset `linalg.index`). Axes longer than
    `CPU_ARG_MAX_AXIS` and other dtypes keep the two-output generic."""
    two = _arg_lower_two_pass(kind)
    default = _arg_lower(kind)

    def lower(e, ins, in_avals, out, axes, keepdims):
        a = in_avals[0]
        (axis,) = axes
        if a.dtype.kind not in "iuf":
            return default(e, ins, in_avals, out, axes, keepdims)
        if a.ndim == 1 and a.size >= CPU_SPLIT_MIN:
            cols = next((c for c in CPU_ROWS if a.size % c == 0 and a.size // c >= 2), None)
            if cols is not None:
                red_i = Aval((), dt.uint32)
                return _keepdims(e, _arg_rows_then_one(e, two, ins[0], a, cols), red_i, out)
        if a.shape[axis] > CPU_ARG_MAX_AXIS:
            return default(e, ins, in_avals, out, axes, keepdims)
        return two(e, ins, in_avals, out, axes, keepdims)
    return lower


def _arg_rows_then_one(e, two, x, a: Aval, cols: int):
    """argmax of a long 1-D `x` as rows of `cols`: each row's argmax and best value (row
    kernels, both threads), the first row holding the best of those, and that row's index
    there: `r * cols + i_r`. The first occurrence still wins (the first best row, the first
    hit in it), NaN too. A 4096^2 array's flattened argmax ran as one scalar select chain
    (48 ms on Zen 3, numpy 3.4 ms)."""
    d, rows = a.dtype, a.size // cols
    grid, per_row = Aval((rows, cols), d), Aval((rows,), d)
    x2 = e.op(f"tensor.expand_shape {x} [[0, 1]] output_shape [{rows}, {cols}] : {ttype(a)} into {ttype(grid)}")
    ri_aval = Aval((rows,), dt.uint32)
    ri = two(e, [x2], [grid], ri_aval, (1,), False)

    def pick(b, i, _):  # x2[r, ri[r]]: each row's best value, read back (the row max itself
        # used outside the row kernel would keep mirax-fuse-reductions from fusing it)
        r_ = b.op("linalg.index 0 : index")
        c_ = b.op(f"arith.index_castui {i} : i32 to index")
        return b.op(f"tensor.extract {x2}[{r_}, {c_}] : {ttype(grid)}")
    m = e.generic([ri], [ri_aval], per_row, pick, [identity_map(1)] * 2, ["parallel"])
    r = two(e, [m], [per_row], Aval((), dt.uint32), (0,), False)
    r = e.op(f"tensor.extract {r}[] : {ttype(Aval((), dt.uint32))}")
    k = e.op(f"arith.index_castui {r} : i32 to index")
    i = e.op(f"tensor.extract {ri}[{k}] : {ttype(ri_aval)}")
    c = e.const(cols, "i32")
    base = e.op(f"arith.muli {r}, {c} : i32")
    flat = e.op(f"arith.addi {base}, {i} : i32")
    return e.op(f"tensor.from_elements {flat} : {ttype(Aval((), dt.uint32))}")


def _np_arg(fn):
    def ref(x, axes, keepdims):
        (axis,) = axes
        r = fn(x, axis=axis)
        if keepdims:
            r = np.expand_dims(r, axis)
        return np.asarray(r).astype(np.uint32)
    return ref


primitive("argmax", ["x"], _arg_rule("argmax"), _arg_lower_cpu("argmax"), _np_arg(np.argmax),
          attrs={"axes": I64Array(), "keepdims": Bool()},
          summary="index (uint32) of the first maximum along the one axis in `axes`",
          dtypes=ARG_TEST)
primitive("argmin", ["x"], _arg_rule("argmin"), _arg_lower_cpu("argmin"), _np_arg(np.argmin),
          attrs={"axes": I64Array(), "keepdims": Bool()},
          summary="index (uint32) of the first minimum along the one axis in `axes`",
          dtypes=ARG_TEST)
register_lowering("argmax", _arg_lower_two_pass("argmax"), target="gpu")
register_lowering("argmin", _arg_lower_two_pass("argmin"), target="gpu")


# ---- cumsum --------------------------------------------------------------------------

def _scan_shape(name):
    def rule(avals, axis, reverse, inclusive):
        (a,) = avals
        if a.dtype.kind not in "iufc":
            raise MiraxError(f"mirax.{name} does not support dtype {a.dtype.name} (shape {a.shape})")
        if not 0 <= int(axis) < a.ndim:
            raise MiraxError(f"mirax.{name}: axis {axis} is out of bounds for an array of shape {a.shape}")
        return Aval(a.shape, a.dtype)
    return rule


def over_rows(e, x2, rows, n, d, parallel, widths, body):
    """`body(b, row, r, dest)` for each row r of `x2` (rows x n, of dtype `d`): in an
    scf.forall over the threads or an scf.for. `body` returns one value a result, each a
    row of (width, dtype) in `widths`; `dest(i)` emits result i's row r as a slice of its
    loop-carried tensor (a row written in place there). Returns the (rows x width)
    results. The scans' row loops here, the sorts' (dialect/sort.py)."""
    grid = Aval((rows, n), d)
    outs = [Aval((rows, w), t) for w, t in widths]
    rowt = [ttype(Aval((w,), t)) for w, t in widths]
    inits = [e.empty(v) for v in outs]
    r, res = e.fresh("r"), e.fresh("rows")
    os_ = [e.fresh("o") for _ in outs]
    types = ", ".join(ttype(v) for v in outs)
    args = ", ".join(f"{o} = {i}" for o, i in zip(os_, inits))
    count = f":{len(outs)}" if len(outs) > 1 else ""
    if parallel:
        e.line(f"{res}{count} = scf.forall ({r}) in ({rows}) shared_outs({args}) -> ({types}) {{")
    else:
        e.line(f"{res}{count} = scf.for {r} = {e.index(0)} to {e.index(rows)} step {e.index(1)} "
               f"iter_args({args}) -> ({types}) {{")
    b = e.sub("  ")
    row = b.op(f"tensor.extract_slice {x2}[{r}, 0] [1, {n}] [1, 1] : {ttype(grid)} to {ttype(Aval((n,), d))}")
    sizes = [w for w, _ in widths]

    def dest(i):
        return b.op(f"tensor.extract_slice {os_[i]}[{r}, 0] [1, {sizes[i]}] [1, 1] : {ttype(outs[i])} to {rowt[i]}")
    results = body(b, row, r, dest)
    if parallel:
        b.line("scf.forall.in_parallel {")
        for v, o, t, av, w in zip(results, os_, rowt, outs, sizes):
            b.line(f"  tensor.parallel_insert_slice {v} into {o}[{r}, 0] [1, {w}] [1, 1] : {t} into {ttype(av)}")
        b.line("}")
    else:
        ys = [b.op(f"tensor.insert_slice {v} into {o}[{r}, 0] [1, {w}] [1, 1] : {t} into {ttype(av)}")
              for v, o, t, av, w in zip(results, os_, rowt, outs, sizes)]
        b.line(f"scf.yield {', '.join(ys)} : {types}")
    e.lines.extend(b.lines)
    e.line("}")
    return [f"{res}#{k}" for k in range(len(outs))] if len(outs) > 1 else [res]


def _scan_lower(kind):
    """The running `kind` ("sum", "prod", "max", "min": cumsum, cumprod, cummax, cummin)
    along the axis."""
    def lower(e, ins, in_avals, out, axis, reverse, inclusive):
        return _scan(kind, e, ins, in_avals, out, axis, reverse, inclusive)
    return lower


def _scan(kind, e, ins, in_avals, out, axis, reverse, inclusive):
    """scf.for over the axis: the running value (the array without the axis) and the
    result are loop-carried tensors; each step reads one slice and writes one slice."""
    a = in_avals[0]
    d = a.dtype
    n, ax = a.ndim, int(axis)
    size = a.shape[ax]
    row = Aval(a.shape[:ax] + a.shape[ax + 1:], d)
    # slices keep the axis as a unit dim and drop it by an explicit collapse: a rank-reducing
    # slice is ambiguous when other dims are 1 too (MLIR dropped the wrong one for (1, 2, 1)
    # along axis 2)
    unit = Aval(a.shape[:ax] + (1,) + a.shape[ax + 1:], d)
    groups = [[k] for k in range(n) if k != ax]
    if groups:
        groups[max(ax - 1, 0)] = sorted(groups[max(ax - 1, 0)] + [ax])
    reassoc = "[" + ", ".join("[" + ", ".join(map(str, g)) + "]" for g in groups) + "]"
    if out.size == 0:  # nothing to compute (and zero-size slices fail to verify)
        return e.empty(out)
    if size == 1:
        # one step: the input, or zeros. Not a loop of one trip: canonicalize would unroll
        # it, and upstream elementwise fusion then fused the in-place accumulation (a
        # generic reading its init) into broadcasting consumers, summing once per element
        return ins[0] if inclusive else e.fill(_identity_value(kind, d), out)
    if all(s == 1 for s in a.shape[ax + 1:]) and size >= SCAN_MIN_LENGTH:
        return _scan_rows(kind, e, ins[0], a, ax, bool(reverse), bool(inclusive))
    acc0 = e.fill(_identity_value(kind, d), row)
    out0 = e.empty(out)
    c0, c1, cn = e.index(0), e.index(1), e.index(size)
    last = e.index(size - 1)
    acc, res = e.fresh("acc"), e.fresh("res")
    loop = e.fresh("loop")
    i = e.fresh("i")
    e.line(f"{loop}:2 = scf.for {i} = {c0} to {cn} step {c1} iter_args({acc} = {acc0}, {res} = {out0}) "
           f"-> ({ttype(row)}, {ttype(out)}) {{")
    b = e.sub("  ")
    j = b.op(f"arith.subi {last}, {i} : index") if reverse else i
    offs = ", ".join(j if k == ax else "0" for k in range(n))
    sizes = ", ".join("1" if k == ax else str(s) for k, s in enumerate(a.shape))
    strides = ", ".join("1" for _ in range(n))
    sl = b.op(f"tensor.extract_slice {ins[0]}[{offs}] [{sizes}] [{strides}] : {ttype(a)} to {ttype(unit)}")
    sl = b.op(f"tensor.collapse_shape {sl} {reassoc} : {ttype(unit)} into {ttype(row)}")
    ident = identity_map(row.ndim)

    def insert(v):
        shp = ", ".join(str(x) for x in unit.shape)
        v = b.op(f"tensor.expand_shape {v} {reassoc} output_shape [{shp}] : {ttype(row)} into {ttype(unit)}")
        return b.op(f"tensor.insert_slice {v} into {res}[{offs}] [{sizes}] [{strides}] "
                    f": {ttype(unit)} into {ttype(out)}")
    if not inclusive:
        res2 = insert(acc)
    # accumulate in place (outs = the iter_arg), so the loop bufferizes without copies
    added = b.generic([sl], [row], row, lambda bb, x, y: _combine(kind, bb, x, y, d), [ident, ident],
                      ["parallel"] * row.ndim, init=acc)
    if inclusive:
        res2 = insert(added)
    b.line(f"scf.yield {added}, {res2} : {ttype(row)}, {ttype(out)}")
    e.lines.extend(b.lines)
    e.line("}")
    return f"{loop}#1"


SCAN_MIN_LENGTH = 16  # shorter axes run as slices of the whole array, one step a position
SCAN_PARALLEL_MIN = CPU_SPLIT_MIN  # arrays this large scan their rows on all threads


def _scan_rows(kind, e, x, a: Aval, ax: int, reverse: bool, inclusive: bool):
    """A scan along the last (non-unit) axis as a scan of each row, in memory order: the
    rows (the dims before the axis, collapsed) in an `scf.forall` (OpenMP threads) above
    SCAN_PARALLEL_MIN elements, else an `scf.for`, each row one `scf.for` carrying its
    running sum in a register. A slice a step of the whole array read and wrote 4096
    strided elements each (a page apart): a 4096^2 cumsum over axis 1 took 274 ms on Zen
    3, numpy 70 ms.

        scf.forall (%r) in (rows) { scf.for %j { s += x[r, j]; y[r, j] = s } }
    """
    d, n = a.dtype, a.shape[ax]
    rows = a.size // n
    t = d.signless
    grid = Aval((rows, n), d)
    row_t = ttype(Aval((n,), d))
    # a (rows, n) view: the dims before the axis collapsed into the rows, the unit dims
    # after it into the axis (the axis first: one row)
    every = "[[" + ", ".join(map(str, range(a.ndim))) + "]]"
    groups = "[" + ", ".join("[" + ", ".join(map(str, g)) + "]" for g in (range(ax), range(ax, a.ndim))) + "]"
    if ax == 0:
        x1 = x if a.ndim == 1 else e.op(f"tensor.collapse_shape {x} {every} : {ttype(a)} into {row_t}")
        x2 = e.op(f"tensor.expand_shape {x1} [[0, 1]] output_shape [1, {n}] : {row_t} into {ttype(grid)}")
    elif a.ndim == 2:
        x2 = x
    else:
        x2 = e.op(f"tensor.collapse_shape {x} {groups} : {ttype(a)} into {ttype(grid)}")
    c0, c1, cn, last = e.index(0), e.index(1), e.index(n), e.index(n - 1)
    zero = e.const(_identity_value(kind, d), t)

    def body(b, xr, r, dest):
        j, acc, tr, loop = b.fresh("j"), b.fresh("acc"), b.fresh("t"), b.fresh("loop")
        b.line(f"{loop}:2 = scf.for {j} = {c0} to {cn} step {c1} iter_args({acc} = {zero}, {tr} = {dest(0)}) "
               f"-> ({t}, {row_t}) {{")
        bb = b.sub("  ")
        k = bb.op(f"arith.subi {last}, {j} : index") if reverse else j
        v = bb.op(f"tensor.extract {xr}[{k}] : {row_t}")
        s_ = _combine(kind, bb, v, acc, d)
        w = bb.op(f"tensor.insert {s_ if inclusive else acc} into {tr}[{k}] : {row_t}")
        bb.line(f"scf.yield {s_}, {w} : {t}, {row_t}")
        b.lines.extend(bb.lines)
        b.line("}")
        return [f"{loop}#1"]
    (res,) = over_rows(e, x2, rows, n, d, rows >= 2 and a.size >= SCAN_PARALLEL_MIN, [(n, d)], body)
    shp = ", ".join(map(str, a.shape))
    if ax == 0:
        flat = e.op(f"tensor.collapse_shape {res} [[0, 1]] : {ttype(grid)} into {row_t}")
        return flat if a.ndim == 1 else e.op(
            f"tensor.expand_shape {flat} {every} output_shape [{shp}] : {row_t} into {ttype(a)}")
    if a.ndim == 2:
        return res
    return e.op(f"tensor.expand_shape {res} {groups} output_shape [{shp}] : {ttype(grid)} into {ttype(a)}")


def _scan_lower_gpu(kind):
    def lower(e, ins, in_avals, out, axis, reverse, inclusive):
        return _scan_gpu(kind, e, ins, in_avals, out, axis, reverse, inclusive)
    return lower


GPU_SCAN_BLOCK = 64  # a GPU scan's positions one thread reduces (the blocks of a longer axis)


def _scan_gpu(kind, e, ins, in_avals, out, axis, reverse, inclusive):
    """On the GPU, a blocked scan without host loops: an axis of up to GPU_SCAN_BLOCK
    positions is one masked reduction (`_masked_scan`); a longer one is cut into blocks of
    GPU_SCAN_BLOCK, each scanned so, the blocks' totals scanned (exclusively, the same way
    again while they are many) and each block's prefix combined into it. Work is about
    GPU_SCAN_BLOCK per element at any length (the one masked reduction over a whole axis
    of 70,000 was 4.9e9 steps a column, past lavapipe's loop limit), depth log_64(n)."""
    a = in_avals[0]
    if out.size == 0:
        return e.empty(out)
    return _blocked_scan(kind, e, ins[0], a, int(axis), bool(reverse), bool(inclusive))


def _blocked_scan(kind, e, x, a: Aval, ax: int, reverse: bool, inclusive: bool):
    n, size = a.ndim, a.shape[ax]
    if size <= GPU_SCAN_BLOCK:
        return _masked_scan(kind, e, x, a, ax, reverse, inclusive)
    s = GPU_SCAN_BLOCK
    nb = -(-size // s)
    d = a.dtype
    pre, post = a.shape[:ax], a.shape[ax + 1:]
    padded = Aval(pre + (nb * s,) + post, d)
    if nb * s != size:  # the tail block filled with the identity
        full = e.fill(_identity_value(kind, d), padded)
        zeros, ones = ", ".join("0" * n), ", ".join("1" * n)
        x = e.op(f"tensor.insert_slice {x} into {full}[{zeros}] "
                 f"[{', '.join(map(str, a.shape))}] [{ones}] : {ttype(a)} into {ttype(padded)}")
    blocks = Aval(pre + (nb, s) + post, d)
    groups = [[k] for k in range(ax)] + [[ax, ax + 1]] + [[k + 1] for k in range(ax + 1, n)]
    reassoc = "[" + ", ".join("[" + ", ".join(map(str, g)) + "]" for g in groups) + "]"
    xb = e.op(f"tensor.expand_shape {x} {reassoc} output_shape [{', '.join(map(str, blocks.shape))}] "
              f": {ttype(padded)} into {ttype(blocks)}")
    local = _masked_scan(kind, e, xb, blocks, ax + 1, reverse, inclusive)
    # each block's total: a reduction over its positions (the first loop: see _masked_scan)
    totals = Aval(pre + (nb,) + post, d)
    m = n + 1
    dims = [f"d{j}" for j in range(m)]
    tot = e.generic([xb], [blocks], totals, lambda b, x_, acc: _combine(kind, b, x_, acc, d),
                    [_affine(m, dims[1:ax + 2] + ["d0"] + dims[ax + 2:]), _affine(m, dims[1:])],
                    ["reduction"] + ["parallel"] * n, init=e.fill(_identity_value(kind, d), totals))
    prefix = _blocked_scan(kind, e, tot, totals, ax, reverse, False)
    res = e.generic([prefix, local], [totals, blocks], blocks,
                    lambda b, p, v, _o: _combine(kind, b, v, p, d),
                    [_affine(m, dims[:ax + 1] + dims[ax + 2:]), _affine(m, dims), _affine(m, dims)],
                    ["parallel"] * m)
    flat = e.op(f"tensor.collapse_shape {res} {reassoc} : {ttype(blocks)} into {ttype(padded)}")
    if nb * s == size:
        return flat
    zeros, ones = ", ".join("0" * n), ", ".join("1" * n)
    return e.op(f"tensor.extract_slice {flat}[{zeros}] [{', '.join(map(str, a.shape))}] [{ones}] "
                f": {ttype(padded)} to {ttype(a)}")


def _masked_scan(kind, e, x, a: Aval, ax: int, reverse: bool, inclusive: bool):
    """out[.., i, ..] = the `kind` over k of x[.., k, ..] where k <= i (k < i when
    exclusive, >= / > when reversed): parallel over the output, a reduction over k (work n
    * len(axis)). k is the first loop, so that the GPU mapping runs each output on a thread
    of its own, looping over k (as the last loop it took the row strategy: a workgroup of
    32+ threads and a tree of barriers for each output, a (5000, 300) cumsum 14 s on
    lavapipe)."""
    n = a.ndim
    x_map = _affine(n + 1, ["d0" if j == ax else f"d{j + 1}" for j in range(n)])
    o_map = _affine(n + 1, [f"d{j + 1}" for j in range(n)])
    pred = {(False, True): "ule", (False, False): "ult", (True, True): "uge", (True, False): "ugt"}[
        (reverse, inclusive)]

    # k comes in as a constant operand: tiling a split reduction does not offset a
    # linalg.index of the reduced dim (and a computed iota would be fused back into one)
    iota_aval = Aval((a.shape[ax],), dt.int32)
    iota = e.op(f"arith.constant dense<[{', '.join(map(str, range(a.shape[ax])))}]> : {ttype(iota_aval)}")

    def body(b, kk, x_, acc):
        i = b.op(f"linalg.index {ax + 1} : index")
        keep = b.op(f"arith.cmpi {pred}, {b.op(f'arith.index_cast {kk} : i32 to index')}, {i} : index")
        ident = b.const(_identity_value(kind, a.dtype), a.dtype.signless)
        return _combine(kind, b, b.op(f"arith.select {keep}, {x_}, {ident} : {a.dtype.signless}"), acc, a.dtype)
    return e.generic([iota, x], [iota_aval, a], a, body, [_affine(n + 1, ["d0"]), x_map, o_map],
                     ["reduction"] + ["parallel"] * n, init=e.fill(_identity_value(kind, a.dtype), a))


def _running_ref(ufunc, kind):
    """The numpy reference of a scan: `ufunc.accumulate` in the input's dtype; exclusive,
    shifted by one place behind the identity of `kind`."""
    def ref(x, axis, reverse, inclusive):
        y = np.flip(x, axis) if reverse else x
        c = ufunc.accumulate(y, axis=axis, dtype=x.dtype)
        if not inclusive:
            if kind in ("sum", "prod"):
                ident = 0 if kind == "sum" else 1
            else:
                lim = None if x.dtype.kind in "fc" else np.iinfo(x.dtype)
                ident = (-np.inf if lim is None else lim.min) if kind == "max" else (np.inf if lim is None else lim.max)
            c = np.concatenate([np.full_like(np.take(c, [0], axis=axis), ident), np.delete(c, -1, axis=axis)],
                               axis=axis)
        return np.flip(c, axis) if reverse else c
    return ref


SCAN_ATTRS = {"axis": I64(), "reverse": Bool(), "inclusive": Bool()}
primitive("cumsum", ["x"], _scan_shape("cumsum"), _scan_lower("sum"), _running_ref(np.add, "sum"),
          attrs=SCAN_ATTRS,
          summary="running sum along `axis` (optionally reversed, exclusive)",
          dtypes=RED_TEST)
register_lowering("cumsum", _scan_lower_gpu("sum"), target="gpu")
primitive("cumprod", ["x"], _scan_shape("cumprod"), _scan_lower("prod"), _running_ref(np.multiply, "prod"),
          attrs=SCAN_ATTRS, summary="running product along `axis` (optionally reversed, exclusive)",
          dtypes=RED_TEST)
register_lowering("cumprod", _scan_lower_gpu("prod"), target="gpu")
for _name, _kind, _ufunc in (("cummax", "max", np.maximum), ("cummin", "min", np.minimum)):
    primitive(_name, ["x"], _scan_shape(_name), _scan_lower(_kind), _running_ref(_ufunc, _kind), attrs=SCAN_ATTRS,
              summary=f"running {_kind}imum along `axis` (optionally reversed, exclusive: the first is "
                      f"the {'lowest' if _kind == 'max' else 'highest'} value); NaN propagates",
              dtypes=RED_TEST)
    register_lowering(_name, _scan_lower_gpu(_kind), target="gpu")


# ---- transform rules -----------------------------------------------------------------

def _rules():
    import mirax as mr
    from .rules import defbatch, defjvp, deflinear, defvjp, move_to_front

    def conj(x):
        return mr.conjugate(x) if x.dtype.kind == "c" else x

    def keep(r, x, axes, keepdims):
        """A reduction result `r` of `x` reshaped to the keepdims shape (broadcastable to x)."""
        return r if keepdims else mr.reshape(r, _reduced_shape(x.shape, axes, True))

    def spread(ct, x, axes, keepdims):
        """A cotangent of a reduction broadcast back to the shape of `x`."""
        return mr.broadcast_to(keep(ct, x, axes, keepdims), x.shape)

    def red(name, v, axes, keepdims):
        from mirax.array import apply
        return apply(name, [v], axes=tuple(axes), keepdims=bool(keepdims))

    # sum: linear; the cotangent is broadcast back
    deflinear("sum")
    defvjp("sum", lambda ct, x, out, axes, keepdims: spread(ct, x, axes, keepdims))

    # prod: d out / d x_i = prod_{j != i} x_j, as JAX: the product of an exclusive
    # cumulative product from the left and one from the right over the reduced elements.
    # Only multiplications (no division), so exact with zeros, and to every order.
    def shift(v, k, reverse):
        """v moved k places along its last axis (backwards when `reverse`), filled with 1."""
        n, last = v.shape[-1], v.ndim - 1
        if k >= n:
            return mr.ones_like(v)
        part = mr.slice(v, (k if reverse else 0,), axes=(last,), slice_size=(n - k,))
        return mr.pad(part, [(0, 0)] * last + [(0, k) if reverse else (k, 0)], constant_values=1)

    def exclusive_cumprod(v, reverse):
        """Products of the elements strictly before (after, when `reverse`) each one on the
        last axis: a log-depth (Hillis-Steele) scan of multiplications."""
        y, k = shift(v, 1, reverse), 1
        while k < v.shape[-1]:
            y = y * shift(y, k, reverse)
            k *= 2
        return y

    def prod_deriv(x, axes):
        if x.size == 0:
            return mr.zeros_like(x)
        kept = [i for i in range(x.ndim) if i not in axes]
        perm = kept + list(axes)
        ks, rs = tuple(x.shape[i] for i in kept), tuple(x.shape[i] for i in axes)
        flat = mr.reshape(mr.transpose(x, perm), ks + (int(np.prod(rs, dtype=np.int64)),))
        d = exclusive_cumprod(flat, False) * exclusive_cumprod(flat, True)
        return mr.transpose(mr.reshape(d, ks + rs), [int(i) for i in np.argsort(perm)])

    defjvp("prod", lambda g, x, out, axes, keepdims: red("sum", g * prod_deriv(x, axes), axes, keepdims))
    defvjp("prod", lambda ct, x, out, axes, keepdims:
           spread(ct, x, axes, keepdims) * conj(prod_deriv(x, axes)))

    # max/min: the positions equal to the result share the derivative equally (as JAX)
    def extreme_share(x, out, axes, keepdims):
        mask = mr.equal(x, keep(out, x, axes, keepdims)).astype(x.dtype)
        count = red("sum", mask, axes, True)
        return mask / mr.where(mr.equal(count, 0), mr.ones_like(count), count)

    for name in ["max", "min"]:
        defjvp(name, lambda g, x, out, axes, keepdims:
               red("sum", g * extreme_share(x, out, axes, keepdims), axes, keepdims))
        defvjp(name, lambda ct, x, out, axes, keepdims:
               spread(ct, x, axes, keepdims) * extreme_share(x, out, axes, keepdims))

    # argmax/argmin: integer results, no derivative
    for name in ["argmax", "argmin"]:
        defjvp(name, None)
        defvjp(name, None)

    # cumsum: linear; the transpose runs the other way with the same inclusiveness
    deflinear("cumsum")

    def cumsum_vjp(ct, x, out, axis, reverse, inclusive):
        from mirax.array import apply
        return apply("cumsum", [ct], axis=int(axis), reverse=not reverse, inclusive=bool(inclusive))
    defvjp("cumsum", cumsum_vjp)

    # batching: the batch dim goes first, the reduced axes shift by one
    def reduce_batch(name):
        def batch(args, dims, axes, keepdims):
            from mirax.array import apply
            x = move_to_front(args[0], dims[0])
            return apply(name, [x], axes=tuple(int(a) + 1 for a in axes), keepdims=bool(keepdims)), 0
        return batch

    for name in ["sum", "prod", "max", "min", "argmax", "argmin"]:
        defbatch(name, reduce_batch(name))

    def scan_batch(name):
        def batch(args, dims, axis, reverse, inclusive):
            from mirax.array import apply
            x = move_to_front(args[0], dims[0])
            return apply(name, [x], axis=int(axis) + 1, reverse=bool(reverse), inclusive=bool(inclusive)), 0
        return batch
    for name in ["cumsum", "cumprod", "cummax", "cummin"]:
        defbatch(name, scan_batch(name))

    # cumprod: the derivatives of the log-depth scan of multiplies (ops/composite.py, as
    # JAX differentiates an associative scan): exact with zeros, no division; the loop
    # computes the values
    def logdepth_cumprod(axis, reverse, inclusive):
        from mirax.ops.composite import log_depth_scan
        return lambda v: log_depth_scan(v, int(axis), bool(reverse), bool(inclusive), mr.multiply, 1)

    def cumprod_jvp(g, x, out, axis, reverse, inclusive):
        return mr.jvp(logdepth_cumprod(axis, reverse, inclusive), [x], [g])[1][0]

    def cumprod_vjp(ct, x, out, axis, reverse, inclusive):
        return mr.vjp(logdepth_cumprod(axis, reverse, inclusive), [x], [ct])[1][0]
    defjvp("cumprod", cumprod_jvp)
    defvjp("cumprod", cumprod_vjp)

    # cummax/cummin: each output is one element of x (the latest in the scan's order
    # attaining the running extreme: MLX's rule for ties), and the derivative flows to it.
    # That element's position is the latest "record" so far: x[j] equal to the inclusive
    # scan at j; an exclusive scan's first output (the identity) and a NaN have none.
    def chosen(name, x, out, axis, reverse, inclusive):
        """(positions clamped into the axis, where an output has one)."""
        from mirax.array import apply
        ax, n = int(axis), x.shape[int(axis)]
        inc = out if inclusive else apply(name, [x], axis=ax, reverse=bool(reverse), inclusive=True)
        j = mr.reshape(mr.arange(n, dtype=mr.int32), (n,) + (1,) * (x.ndim - ax - 1))
        rec = mr.where(mr.equal(x, inc), j, n if reverse else -1)
        pos = apply("cummin" if reverse else "cummax", [rec], axis=ax, reverse=bool(reverse), inclusive=bool(inclusive))
        valid = mr.logical_and(mr.greater_equal(pos, 0), mr.less(pos, n))
        if x.dtype.kind in "fc":
            valid = mr.logical_and(valid, mr.logical_not(mr.isnan(out)))
        return mr.clip(pos, 0, max(n - 1, 0)), valid

    def extreme_jvp(name):
        def jvp(g, x, out, axis, reverse, inclusive):
            if x.size == 0:
                return mr.zeros_like(out)
            pos, valid = chosen(name, x, out, axis, reverse, inclusive)
            from mirax.array import apply
            return mr.where(valid, apply("take_along_axis", [g, pos], axis=int(axis)), mr.zeros_like(out))
        return jvp

    def extreme_vjp(name):
        def vjp(ct, x, out, axis, reverse, inclusive):
            if x.size == 0:
                return mr.zeros_like(x)
            pos, valid = chosen(name, x, out, axis, reverse, inclusive)
            from .core import PRIMITIVES
            ct = mr.where(valid, ct, mr.zeros_like(ct))
            return PRIMITIVES["take_along_axis"].vjp([x, pos], ct, out, axis=int(axis))[0]
        return vjp
    for name in ["cummax", "cummin"]:
        defjvp(name, extreme_jvp(name))
        defvjp(name, extreme_vjp(name))


_rules()
