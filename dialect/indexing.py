"""Indexing primitives: `take`, `take_along_axis` and `scatter_add` (the adjoint of take).

Indices may have any integer dtype. Negative indices wrap once (numpy). Indices still out
of range follow JAX's rule: gathers (`take`, `take_along_axis`) *clamp* them to [0, n-1],
scatters (`scatter_add`) *drop* their updates. No index a user computes can read or write
outside a buffer (numpy would raise, but index values are only known when the kernel
runs; constant Python indices out of range raise IndexError in `mirax.ops.indexing`).

    %0 = "mirax.take"(%x, %i) {axis = 0 : i64} : (tensor<5x3xf32>, tensor<2xi32>) -> tensor<2x3xf32>
    %1 = "mirax.take_along_axis"(%x, %j) {axis = 1 : i64} : (tensor<5x3xf32>, tensor<5x1xi32>) -> tensor<5x1xf32>
    %2 = "mirax.scatter_add"(%x, %i, %u) {axis = 0 : i64}
         : (tensor<5x3xf32>, tensor<2xi32>, tensor<2x3xf32>) -> tensor<5x3xf32>
"""
from __future__ import annotations

import numpy as np

from . import dtypes as dt
from .core import I64, Aval, MiraxError, primitive, register_lowering
from ..lowering.emit import _affine, identity_map, ttype

INDEX_TEST = [dt.float32, dt.int32, dt.bool_]


def _check_indices(op, x, idx):
    if idx.dtype.kind not in "iu":
        raise MiraxError(f"mirax.{op}: indices must have an integer dtype, got {idx.dtype.name} "
                         f"(x {x.shape}, indices {idx.shape})")


def _check_axis(op, axis, x, *others):
    if x.ndim == 0 or not 0 <= axis < x.ndim:
        raise MiraxError(f"mirax.{op}: axis {axis} is out of bounds for x of shape {x.shape} "
                         + " ".join(f"and {o.shape}" for o in others))


def _clamped_index(b, raw, idx_dtype, n):
    """An `index` in [0, n-1] from an integer scalar: negative values wrap once, the rest clamp."""
    t = idx_dtype.signless
    cast = "arith.index_castui" if idx_dtype.kind == "u" else "arith.index_cast"
    i = b.op(f"{cast} {raw} : {t} to index")
    if idx_dtype.kind != "u":
        zero = b.index(0)
        nn = b.index(n)
        neg = b.op(f"arith.cmpi slt, {i}, {zero} : index")
        wrapped = b.op(f"arith.addi {i}, {nn} : index")
        i = b.op(f"arith.select {neg}, {wrapped}, {i} : index")
        i = b.op(f"arith.maxsi {i}, {zero} : index")
    hi = b.index(max(n - 1, 0))
    return b.op(f"arith.minui {i}, {hi} : index") if idx_dtype.kind == "u" else b.op(
        f"arith.minsi {i}, {hi} : index")


def _wrapped_index(b, raw, idx_dtype, n):
    """(index, in_range): negative values wrap once; `index` is clamped to [0, n-1] so it
    can always address the buffer, `in_range` (i1) says whether it was in range unclamped."""
    t = idx_dtype.signless
    cast = "arith.index_castui" if idx_dtype.kind == "u" else "arith.index_cast"
    i = b.op(f"{cast} {raw} : {t} to index")
    zero, nn = b.index(0), b.index(n)
    if idx_dtype.kind != "u":
        neg = b.op(f"arith.cmpi slt, {i}, {zero} : index")
        wrapped = b.op(f"arith.addi {i}, {nn} : index")
        i = b.op(f"arith.select {neg}, {wrapped}, {i} : index")
    # unsigned compare: still-negative values are huge, so one test covers both ends
    ok = b.op(f"arith.cmpi ult, {i}, {nn} : index")
    return _clamped_index(b, raw, idx_dtype, n), ok


def _extract(b, src, src_aval, coords, out_dtype):
    v = b.op(f"tensor.extract {src}[{', '.join(coords)}] : {ttype(src_aval)}")
    if out_dtype.memory != out_dtype.signless:  # bool: the generic body works on i1
        v = b.op(f"arith.trunci {v} : {out_dtype.memory} to {out_dtype.signless}")
    return v


# ---- take --------------------------------------------------------------------------------

def _take_shape(avals, axis):
    x, idx = avals
    _check_indices("take", x, idx)
    _check_axis("take", axis, x, idx)
    if x.shape[axis] == 0 and idx.size:
        raise MiraxError(f"mirax.take: cannot take from axis {axis} of size 0 (x {x.shape}, indices {idx.shape})")
    return Aval(x.shape[:axis] + idx.shape + x.shape[axis + 1:], x.dtype)


def _take_lower(e, ins, in_avals, out, axis):
    """A generic over the result: d[axis : axis+k] index `indices`, the rest index x directly."""
    x, idx = in_avals
    k, n = idx.ndim, out.ndim
    src = ins[0]

    def body(b, raw, o):
        i = _clamped_index(b, raw, idx.dtype, x.shape[axis])
        coords = [b.op(f"linalg.index {d} : index") for d in range(axis)] + [i] + [
            b.op(f"linalg.index {d} : index") for d in range(axis + k, n)]
        return _extract(b, src, x, coords, out.dtype)
    maps = [_affine(n, [f"d{d}" for d in range(axis, axis + k)]), identity_map(n)]
    return e.generic([ins[1]], [idx], out, body, maps, ["parallel"] * n)


def _np_index(indices, n):
    """The reference's index rule: negative indices wrap once, the rest clamp."""
    i = np.asarray(indices).astype(np.int64)
    return np.clip(np.where(i < 0, i + n, i), 0, max(n - 1, 0))


def _take_ref(x, indices, axis):
    return np.take(x, _np_index(indices, x.shape[axis]), axis=axis)


primitive("take", ["x", "indices"], _take_shape, _take_lower, _take_ref, attrs={"axis": I64()},
          summary="numpy take along `axis` (negative indices wrap, out-of-range ones clamp)",
          dtypes=INDEX_TEST)


# ---- take_along_axis ---------------------------------------------------------------------

def _tala_shape(avals, axis):
    x, idx = avals
    _check_indices("take_along_axis", x, idx)
    _check_axis("take_along_axis", axis, x, idx)
    if idx.ndim != x.ndim or any(a != b for d, (a, b) in enumerate(zip(x.shape, idx.shape)) if d != axis):
        raise MiraxError(f"mirax.take_along_axis: x {x.shape} and indices {idx.shape} must have the same "
                         f"shape except along axis {axis} (broadcast first)")
    if x.shape[axis] == 0 and idx.size:
        raise MiraxError(f"mirax.take_along_axis: cannot take from axis {axis} of size 0 "
                         f"(x {x.shape}, indices {idx.shape})")
    return Aval(idx.shape, x.dtype)


def _tala_lower(e, ins, in_avals, out, axis):
    x, idx = in_avals
    n = out.ndim
    src = ins[0]

    def body(b, raw, o):
        i = _clamped_index(b, raw, idx.dtype, x.shape[axis])
        coords = [i if d == axis else b.op(f"linalg.index {d} : index") for d in range(n)]
        return _extract(b, src, x, coords, out.dtype)
    return e.generic([ins[1]], [idx], out, body, [identity_map(n)] * 2, ["parallel"] * n)


def _tala_ref(x, indices, axis):
    return np.take_along_axis(x, _np_index(indices, x.shape[axis]), axis=axis)


primitive("take_along_axis", ["x", "indices"], _tala_shape, _tala_lower, _tala_ref, attrs={"axis": I64()},
          summary="numpy take_along_axis (same-shaped indices; negative wrap, out-of-range clamp)",
          dtypes=INDEX_TEST)


# ---- scatter_add -------------------------------------------------------------------------

def _scatter_shape(avals, axis, op="scatter_add"):
    x, idx, upd = avals
    _check_indices(op, x, idx)
    _check_axis(op, axis, x, idx, upd)
    want = x.shape[:axis] + idx.shape + x.shape[axis + 1:]
    if upd.shape != want or upd.dtype is not x.dtype:
        raise MiraxError(f"mirax.{op}: updates must be {x.dtype.name}{list(want)} for x {x.shape}, "
                         f"indices {idx.shape} and axis {axis}; got {upd}")
    if x.shape[axis] == 0 and idx.size:
        raise MiraxError(f"mirax.{op}: cannot scatter into axis {axis} of size 0 "
                         f"(x {x.shape}, indices {idx.shape})")
    return x


# how each scatter combines an update with what is there: {mode: {dtype kind: op}}; bool
# add/max is logical or, prod/min logical and (numpy); "c" complex, "u" unsigned
_COMBINERS = {
    "add": {"f": "arith.addf", "c": "complex.add", "b": "arith.ori", "i": "arith.addi", "u": "arith.addi"},
    "prod": {"f": "arith.mulf", "c": "complex.mul", "b": "arith.andi", "i": "arith.muli", "u": "arith.muli"},
    "max": {"f": "arith.maximumf", "b": "arith.ori", "i": "arith.maxsi", "u": "arith.maxui"},
    "min": {"f": "arith.minimumf", "b": "arith.andi", "i": "arith.minsi", "u": "arith.minui"},
}


def _combine(b, mode, d, old, u):
    return b.op(f"{_COMBINERS[mode][d.kind]} {old}, {u} : {d.memory}")


def _identity(mode, d):
    """The update that leaves a place unchanged under `mode` (GPU masked reduction)."""
    if mode == "add":
        return 0
    if mode == "prod":
        return 1
    if d.kind == "f":
        return float("-inf") if mode == "max" else float("inf")
    lo, hi = (0, 2 ** d.bits - 1) if d.kind == "u" else (-2 ** (d.bits - 1), 2 ** (d.bits - 1) - 1)
    if d.kind == "u" and hi >= 2 ** (d.bits - 1):  # signless constants: the bit pattern of hi
        hi -= 2 ** d.bits
    return lo if mode == "max" else hi


def _scatter_lower(e, ins, in_avals, out, axis, mode="add"):
    """out = copy(x); then one scf.for nest over `updates`, each step combines u[..] into
    out[..] (modes add, prod, max, min) or writes it (mode "set": in index order, so the
    last one wins)."""
    x, idx, upd = in_avals
    d = x.dtype
    t = d.memory
    # copy x explicitly: a function argument counts as writable, so an in-place loop on it
    # would overwrite the caller's input buffer. As a linalg.copy into a new tensor, a copy
    # of zeros (every gradient of a gather) folds into filling the new tensor with zeros
    # (an embedding's gradient, 50000 x 512: the zeros were written, then copied)
    acc = e.op(f"linalg.copy ins({ins[0]} : {ttype(x)}) outs({e.empty(x)} : {ttype(x)}) -> {ttype(x)}", "acc")
    if upd.size == 0:
        return acc
    zero, one = e.index(0), e.index(1)
    ivs, loops, ems = [], [], [e]
    carried = acc
    for ext in upd.shape:
        em = ems[-1]
        iv, arg = em.fresh("i"), em.fresh("t")
        ub = em.index(ext)
        r = em.fresh("loop")
        em.line(f"{r} = scf.for {iv} = {zero} to {ub} step {one} iter_args({arg} = {carried}) -> ({ttype(x)}) {{")
        loops.append(r)
        ivs.append(iv)
        carried = arg
        ems.append(em.sub("  "))
    body = ems[-1]
    k = idx.ndim
    raw = body.op(f"tensor.extract {ins[1]}[{', '.join(ivs[axis:axis + k])}] : {ttype(idx)}")
    i, ok = _wrapped_index(body, raw, idx.dtype, x.shape[axis])  # out of range: dropped
    coords = ivs[:axis] + [i] + ivs[axis + k:]
    u = body.op(f"tensor.extract {ins[2]}[{', '.join(ivs)}] : {ttype(upd)}")
    old = body.op(f"tensor.extract {carried}[{', '.join(coords)}] : {ttype(x)}")
    new = u if mode == "set" else _combine(body, mode, d, old, u)
    new = body.op(f"arith.select {ok}, {new}, {old} : {t}")
    yielded = body.op(f"tensor.insert {new} into {carried}[{', '.join(coords)}] : {ttype(x)}")
    for lvl in range(len(loops) - 1, -1, -1):
        ems[lvl + 1].line(f"scf.yield {yielded} : {ttype(x)}")
        ems[lvl].lines.extend(ems[lvl + 1].lines)
        ems[lvl].line("}")
        yielded = loops[lvl]
    return loops[0]


def _scatter_ref(x, indices, updates, axis, mode="add"):
    n = x.shape[axis]
    i = np.asarray(indices).astype(np.int64).reshape(-1)
    i = np.where(i < 0, i + n, i)
    keep = (0 <= i) & (i < n)  # out-of-range updates are dropped
    out = np.moveaxis(x.copy(), axis, 0)
    u = np.moveaxis(updates.reshape(x.shape[:axis] + (-1,) + x.shape[axis + 1:]), axis, 0)
    i, u = i[keep], u[keep]
    if mode == "set":
        for j, v in zip(i, u):  # in index order: the last update of a place wins
            out[j] = v
    elif x.dtype == np.bool_:
        ufunc = np.logical_or if mode in ("add", "max") else np.logical_and
        ufunc.at(out, i, u)
    else:
        {"add": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}[mode].at(out, i, u)
    return np.moveaxis(out, 0, axis)


def _reshape(e, value, src: Aval, dst: Aval):
    if src.shape == dst.shape:
        return value
    shp = e.op(f"arith.constant dense<[{', '.join(str(n) for n in dst.shape)}]> : tensor<{dst.ndim}xi64>")
    return e.op(f"tensor.reshape {value}({shp}) : ({ttype(src)}, tensor<{dst.ndim}xi64>) -> {ttype(dst)}")


def _scatter_lower_gpu(e, ins, in_avals, out, axis, mode="add"):
    """On the GPU: each output element adds the updates whose index hits it, a reduction
    over the index positions that runs parallel over the output: no atomics, no host
    loop, and the same sum order on every run (work: x.size * indices.size). Mode "set"
    keeps the last update that hits (a combiner the mapping leaves sequential)."""
    x, idx, upd = in_avals
    acc = e.op(f"bufferization.alloc_tensor() copy({ins[0]}) : {ttype(x)}", "acc")
    if upd.size == 0 or x.size == 0:
        return acc
    d = x.dtype
    if d.kind == "b":  # bool is i8 in memory: or the bytes (an i1 body hides the combiner from tiling)
        d = dt.uint8
        x, upd = Aval(x.shape, d), Aval(upd.shape, d)
    # one reduction dim over all the index positions (a row the GPU mapping can split)
    m = idx.size
    idx_flat = Aval((m,), idx.dtype)
    upd_flat = Aval(x.shape[:axis] + (m,) + x.shape[axis + 1:], d)
    ins = [ins[0], _reshape(e, ins[1], idx, idx_flat), _reshape(e, ins[2], upd, upd_flat)]
    idx, upd = idx_flat, upd_flat
    n, k = x.ndim, 1
    pos = [f"d{n}"]  # the index position, after the output's dims
    maps = [_affine(n + k, pos),
            _affine(n + k, [f"d{j}" for j in range(axis)] + pos + [f"d{j}" for j in range(axis + 1, n)]),
            _affine(n + k, [f"d{j}" for j in range(n)])]

    def body(b, i, u, o):
        j, ok = _wrapped_index(b, i, idx.dtype, x.shape[axis])
        hit = b.op(f"arith.cmpi eq, {j}, {b.op(f'linalg.index {axis} : index')} : index")
        hit = b.op(f"arith.andi {hit}, {ok} : i1")  # out-of-range updates are dropped
        t = d.signless
        if mode == "set":
            return b.op(f"arith.select {hit}, {u}, {o} : {t}")
        v = b.op(f"arith.select {hit}, {u}, {b.const(_identity(mode, d), t)} : {t}")
        if in_avals[0].dtype.kind == "b":  # bool add/max is logical or, prod/min and (numpy)
            return b.op(f"arith.{'ori' if mode in ('add', 'max') else 'andi'} {o}, {v} : {t}")
        return b.op(f"{_COMBINERS[mode][d.kind]} {o}, {v} : {t}")
    return e.generic([ins[1], ins[2]], [idx, upd], x, body, maps, ["parallel"] * n + ["reduction"] * k, init=acc)


primitive("scatter_add", ["x", "indices", "updates"], _scatter_shape, _scatter_lower, _scatter_ref,
          attrs={"axis": I64()},
          summary="x with updates added at `indices` along `axis` (out-of-range updates are dropped)",
          dtypes=INDEX_TEST)
register_lowering("scatter_add", _scatter_lower_gpu, target="gpu")

# ---- scatter (set) -------------------------------------------------------------------------

primitive("scatter", ["x", "indices", "updates"], lambda avals, axis: _scatter_shape(avals, axis, "scatter"),
          lambda e, ins, in_avals, out, axis: _scatter_lower(e, ins, in_avals, out, axis, mode="set"),
          lambda x, indices, updates, axis: _scatter_ref(x, indices, updates, axis, mode="set"),
          attrs={"axis": I64()},
          summary="x with `updates` written at `indices` along `axis` (the last of repeats wins; "
                  "out-of-range updates are dropped)",
          dtypes=INDEX_TEST)
register_lowering("scatter", lambda e, ins, in_avals, out, axis: _scatter_lower_gpu(
    e, ins, in_avals, out, axis, mode="set"), target="gpu")


# ---- scatter_prod, scatter_max, scatter_min ------------------------------------------------

for _mode, _what in (("prod", "multiplied by"), ("max", "the maximum with"), ("min", "the minimum with")):
    _name = f"scatter_{_mode}"
    primitive(_name, ["x", "indices", "updates"],
              lambda avals, axis, _name=_name: _scatter_shape(avals, axis, _name),
              lambda e, ins, in_avals, out, axis, _mode=_mode: _scatter_lower(e, ins, in_avals, out, axis, _mode),
              lambda x, indices, updates, axis, _mode=_mode: _scatter_ref(x, indices, updates, axis, _mode),
              attrs={"axis": I64()},
              summary=f"x {_what} the updates at `indices` along `axis` (repeats combine; "
                      "out-of-range updates are dropped)",
              dtypes=INDEX_TEST)
    register_lowering(_name, lambda e, ins, in_avals, out, axis, _mode=_mode: _scatter_lower_gpu(
        e, ins, in_avals, out, axis, _mode), target="gpu")


# ---- transform rules --------------------------------------------------------------------

def _rules():
    import mirax as mr
    from .core import PRIMITIVES
    from .rules import batch_size, defbatch, defjvp, defvjp, move_to_front

    def _apply(name, args, **params):
        from mirax.array import apply
        return apply(name, args, **params)

    def front(a, d, n):
        """a with its batch dim first, broadcast over the batch when unbatched."""
        if d is None:
            return mr.broadcast_to(mr.expand_dims(a, 0), (n,) + a.shape)
        return move_to_front(a, d)

    def norm_index(idx, n, total):
        """Indices as the ops read them (negative wrap once, the rest clamp to [0, n-1]),
        in an integer dtype wide enough for offsets up to `total`."""
        if idx.dtype.kind == "u":
            i = mr.astype(mr.minimum(idx, max(n - 1, 0)), mr.int64)
        else:
            i = mr.astype(idx, mr.int64)
            i = mr.clip(mr.where(i < 0, i + n, i), 0, max(n - 1, 0))
        return mr.astype(i, mr.int32) if total < 2 ** 31 else i

    def in_range(idx, n):
        """Where indices address [0, n) once negative ones wrap (the updates scatter keeps)."""
        if idx.dtype.kind == "u":
            return idx < n
        i = mr.astype(idx, mr.int64)
        return (i >= -n) & (i < n)

    def offsets(n, stride, ndim, dtype):
        """(n, 1, ..., 1) array b * stride of `ndim` dims."""
        return mr.reshape(mr.arange(n, dtype=dtype) * stride, (n,) + (1,) * (ndim - 1))

    # ---- take
    defjvp("take", lambda g, x, idx, out, axis: _apply("take", [g, idx], axis=axis), None)
    # the cotangent goes where the gather read: to the clamped positions
    defvjp("take", lambda ct, x, idx, out, axis: _apply(
        "scatter_add", [mr.zeros_like(x), norm_index(idx, x.shape[axis], x.shape[axis]), ct], axis=axis), None)

    def take_batch(args, dims, axis):
        x, idx = args
        dx, di = dims
        if di is None:
            return _apply("take", [move_to_front(x, dx), idx], axis=axis + 1), 0
        if dx is None:  # numpy take: the indices' dims (batch dim included) replace `axis`
            return _apply("take", [x, idx], axis=axis), axis + di
        # a gather per example: fold the batch into the gathered axis, offset the indices
        x, idx = move_to_front(x, dx), move_to_front(idx, di)
        n, size = x.shape[0], x.shape[axis + 1]
        xm = mr.moveaxis(x, axis + 1, 1)  # (n, size, A.., B..)
        xf = mr.reshape(xm, (n * size,) + xm.shape[2:])
        i = norm_index(idx, size, n * size)
        i = i + offsets(n, size, i.ndim, i.dtype)
        g = _apply("take", [xf, i], axis=0)  # (n, I.., A.., B..)
        k = idx.ndim - 1
        perm = [0] + list(range(1 + k, 1 + k + axis)) + list(range(1, 1 + k)) + list(range(1 + k + axis, g.ndim))
        return mr.transpose(g, perm), 0
    defbatch("take", take_batch)

    # ---- take_along_axis
    defjvp("take_along_axis", lambda g, x, idx, out, axis: _apply("take_along_axis", [g, idx], axis=axis), None)

    def tala_vjp(ct, x, idx, out, axis):
        """Scatter the cotangent back along `axis`: flatten the other axes into one linear
        index per element and scatter_add into zeros (repeats accumulate)."""
        size = x.shape[axis]
        im, cm = mr.moveaxis(idx, axis, -1), mr.moveaxis(ct, axis, -1)
        others = im.shape[:-1]
        m, k = int(np.prod(others, dtype=np.int64)), im.shape[-1]
        if m * size == 0 or k == 0:
            return mr.zeros_like(x)
        i = norm_index(mr.reshape(im, (m, k)), size, m * size)
        i = i + offsets(m, size, 2, i.dtype)
        flat = _apply("scatter_add", [mr.zeros((m * size,), x.dtype), mr.reshape(i, (m * k,)),
                                      mr.reshape(cm, (m * k,))], axis=0)
        return mr.moveaxis(mr.reshape(flat, others + (size,)), -1, axis)
    defvjp("take_along_axis", tala_vjp, None)

    def tala_batch(args, dims, axis):
        n = batch_size(args, dims)
        x, idx = [front(a, d, n) for a, d in zip(args, dims)]
        return _apply("take_along_axis", [x, idx], axis=axis + 1), 0
    defbatch("take_along_axis", tala_batch)

    # ---- scatter_add: linear in x and updates
    def scatter_jvp(primals, tangents, out, axis):
        x, idx, u = primals
        tx, _, tu = tangents
        if tu is None:
            return tx
        return _apply("scatter_add", [tx if tx is not None else mr.zeros_like(x), idx, tu], axis=axis)
    PRIMITIVES["scatter_add"].jvp = scatter_jvp
    def scatter_vjp_updates(ct, x, idx, u, out, axis):
        """The updates' cotangent: ct read at their indices, zero where they were dropped."""
        g = _apply("take", [ct, idx], axis=axis)
        ok = in_range(idx, x.shape[axis])
        ok = mr.reshape(ok, (1,) * axis + idx.shape + (1,) * (x.ndim - axis - 1))
        return mr.where(ok, g, mr.zeros_like(g))
    defvjp("scatter_add", lambda ct, x, idx, u, out, axis: ct, None, scatter_vjp_updates)

    def scatter_batch(args, dims, axis, name="scatter_add"):
        x, idx, u = args
        dx, di, du = dims
        n = batch_size(args, dims)
        x, u = front(x, dx, n), front(u, du, n)
        if di is None:
            return _apply(name, [x, idx, u], axis=axis + 1), 0
        # a scatter per example: fold the batch into the scattered axis, offset the indices
        idx = move_to_front(idx, di)
        size, k = x.shape[axis + 1], idx.ndim - 1
        xm = mr.moveaxis(x, axis + 1, 1)  # (n, size, A.., B..)
        xf = mr.reshape(xm, (n * size,) + xm.shape[2:])
        # out-of-range indices must stay dropped, not land in a neighbour's block
        i = norm_index(idx, size, n * size + 1)
        i = mr.where(in_range(idx, size), i + offsets(n, size, i.ndim, i.dtype), n * size)
        # updates (n, A.., I.., B..) -> (n, I.., A.., B..)
        perm = [0] + list(range(1 + axis, 1 + axis + k)) + list(range(1, 1 + axis)) + list(
            range(1 + axis + k, u.ndim))
        r = _apply(name, [xf, i, mr.transpose(u, perm)], axis=0)
        return mr.moveaxis(mr.reshape(r, xm.shape), 1, axis + 1), 0
    defbatch("scatter_add", scatter_batch)

    # ---- scatter (set): linear in x and updates together
    def set_jvp(primals, tangents, out, axis):
        x, idx, u = primals
        tx, _, tu = tangents
        return _apply("scatter", [tx if tx is not None else mr.zeros_like(x), idx,
                                  tu if tu is not None else mr.zeros_like(u)], axis=axis)
    PRIMITIVES["scatter"].jvp = set_jvp

    def winners(idx, n):
        """Where an update is the one its place keeps: in range, and the last with its index."""
        flat = mr.reshape(idx, (-1,))
        m = flat.shape[0]
        pos = mr.arange(m, dtype=mr.int32)
        ok = in_range(flat, n)
        i = norm_index(flat, n, n + 1)
        last = _apply("scatter", [mr.full((n,), -1, mr.int32), mr.where(ok, i, n), pos], axis=0)
        won = mr.logical_and(ok, mr.equal(_apply("take", [last, i], axis=0), pos))
        return mr.reshape(won, idx.shape)

    def set_vjp_updates(ct, x, idx, u, out, axis):
        g = _apply("take", [ct, idx], axis=axis)
        won = mr.reshape(winners(idx, x.shape[axis]), (1,) * axis + idx.shape + (1,) * (x.ndim - axis - 1))
        return mr.where(won, g, mr.zeros_like(g))
    defvjp("scatter", lambda ct, x, idx, u, out, axis: _apply("scatter", [ct, idx, mr.zeros_like(u)], axis=axis),
           None, set_vjp_updates)
    defbatch("scatter", lambda args, dims, axis: scatter_batch(args, dims, axis, "scatter"))

    # ---- scatter_prod: out = x * prod(updates hitting); ∂/∂u_j = ct * out / u_j (as MLX)
    def expand_idx(t, x, idx, axis):
        """t shaped like x's indexed positions (x.shape[:axis] + idx.shape + rest)."""
        return _apply("take", [t, idx], axis=axis)

    def prod_jvp(primals, tangents, out, axis):
        x, idx, u = primals
        tx, _, tu = tangents
        terms = []
        if tx is not None:
            terms.append(_apply("scatter_prod", [tx, idx, u], axis=axis))
        if tu is not None:
            terms.append(_apply("scatter_add", [mr.zeros_like(x), idx, tu * expand_idx(out, x, idx, axis) / u],
                                axis=axis))
        return terms[0] if len(terms) == 1 else terms[0] + terms[1]
    PRIMITIVES["scatter_prod"].jvp = prod_jvp
    defvjp("scatter_prod",
           lambda ct, x, idx, u, out, axis: _apply("scatter_prod", [ct, idx, u], axis=axis),
           None,
           lambda ct, x, idx, u, out, axis: expand_idx(ct * out, x, idx, axis) / u)
    defbatch("scatter_prod", lambda args, dims, axis: scatter_batch(args, dims, axis, "scatter_prod"))

    # ---- scatter_max / scatter_min: the derivative goes to whichever value won (ties: each)
    for name in ("scatter_max", "scatter_min"):
        def ext_jvp(primals, tangents, out, axis):
            x, idx, u = primals
            tx, _, tu = tangents
            r = mr.zeros_like(x) if tx is None else mr.where(mr.equal(out, x), tx, mr.zeros_like(tx))
            if tu is not None:
                won = mr.equal(expand_idx(out, x, idx, axis), u)
                r = _apply("scatter_add", [r, idx, mr.where(won, tu, mr.zeros_like(tu))], axis=axis)
            return r
        PRIMITIVES[name].jvp = ext_jvp
        defvjp(name,
               lambda ct, x, idx, u, out, axis: mr.where(mr.equal(out, x), ct, mr.zeros_like(ct)),
               None,
               lambda ct, x, idx, u, out, axis: mr.where(mr.equal(expand_idx(out, x, idx, axis), u),
                                                         expand_idx(ct, x, idx, axis), mr.zeros_like(u)))
        defbatch(name, lambda args, dims, axis, name=name: scatter_batch(args, dims, axis, name))


_rules()
