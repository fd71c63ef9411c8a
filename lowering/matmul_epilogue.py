"""Elementwise epilogues in the tiled products' register tiles.

A product read only by an elementwise `linalg.generic` (SGD's `W - lr * (g.T @ x)`, a
layer's `relu(x @ W.T + b)`, the relu mask `(g @ W) * (h > 0)`) wrote C to memory, and
the generic read it back in a parallel loop of its own: a pass over C, a fork and a join
more. After lowering/matmul_codegen.py tiles the product, `fuse_epilogue` evaluates the
generic's body on each register tile just before its store (in the last kc-deep slice
where K is sliced), reading the generic's other operands at the same place, and the
generic goes. The same ops on the same values: results equal bit for bit.

    %c = call @kernel(%a, %b)                     %e = call @kernel(%a, %b, %w, %lr)
    %e = linalg.generic ins(%w, %lr, %c) ...  ->  (in the kernel, each tile's last store:
                                                   w tile, lr broadcast, the body on vectors)

The generic may read, besides C (identity map): tensors of C's shape (identity), a vector
broadcast along rows or columns ((d1) or (d0): a bias) and 0-d tensors (a learning
rate); its body: ops without regions, reading its arguments and scalar constants (from
outside or defined in the body: broadcast at their use). C's way from the kernel's
outermost loop to each store may pass scf.for iter_args, scf.forall shared outs,
rank-keeping extract_slices and inserts, and end in collapse_shapes (the packed
[M][N/nr][nr] view of C); another use of C in the kernel (a fill left, a padded tile)
leaves the generic where it is. Split products
(`split_remainders`) get the generic per piece (`piece_epilogue`): the divisible piece
fuses it, a padded remainder keeps its small one.
"""
from __future__ import annotations

from mlir import ir

from .pass_base import (body_ops, defining_op, indexing_maps, isa, iterator_kinds, reassociation, reassociation_attr,
                        user_op)


def consumer(value):
    """The elementwise linalg.generic that is the only reader of 2-d tensor `value` and
    that `fuse_epilogue` can evaluate on its tiles; else None."""
    uses = list(value.uses)
    if len(uses) != 1:
        return None
    e, ci = user_op(uses[0]), uses[0].operand_number
    if e.name != "linalg.generic" or len(e.results) != 1 or any(k != "parallel" for k in iterator_kinds(e)):
        return None
    n_in = len(e.operands) - 1
    c_t, r_t = ir.RankedTensorType(value.type), ir.RankedTensorType(e.results[0].type)
    if ci >= n_in or c_t.rank != 2 or list(r_t.shape) != list(c_t.shape) or r_t.element_type != c_t.element_type:
        return None
    if any(x == value for i, x in enumerate(e.operands) if i != ci):
        return None
    for u in e.results[0].uses:  # an update of a donated argument (W' = W - lr*dW into W):
        m = user_op(u)          # alone it is written in place, in the product's tiles it is not
        if m.name == "bufferization.materialize_in_destination" and m.operands[1] in list(e.operands):
            return None
    maps = indexing_maps(e)
    if _kept(maps[-1]) != (0, 1) or _kept(maps[ci]) != (0, 1):
        return None
    if any(operand_dims(e, i) is None for i in range(n_in) if i != ci):
        return None
    block = e.regions[0].blocks[0]
    if list(block.arguments[n_in].uses):
        return None  # (the body reads its output)
    known = set(block.arguments)
    for op in body_ops(e):
        if len(op.regions) or op.name == "linalg.index":
            return None
        if op.name != "linalg.yield" and any(isa(ir.ShapedType, r.type) for r in op.results):
            return None
        for v in op.operands:
            if v not in known and _scalar_constant(v) is None:
                return None
        known.update(op.results)
    return e


def operand_dims(e, i):
    """The dims of C that generic `e`'s input `i` has: (0, 1) (C's shape, identity), (1,)
    (a vector along the columns, each row the same), (0,) (along the rows), () (0-d);
    None for any other read."""
    x = e.operands[i]
    if not isa(ir.RankedTensorType, x.type):
        return None
    t, shape = ir.RankedTensorType(x.type), ir.RankedTensorType(e.results[0].type).shape
    kept = _kept(indexing_maps(e)[i])
    if kept not in ((0, 1), (1,), (0,), ()) or not t.has_static_shape or list(t.shape) != [shape[d] for d in kept]:
        return None
    return kept


def _kept(amap):
    """The dims a map's results are, in order (None: not plain dims)."""
    if amap.n_dims != 2:
        return None
    out = []
    for x in amap.results:
        if not isa(ir.AffineDimExpr, x):
            return None
        out.append(ir.AffineDimExpr(x).position)
    return tuple(out)


def _scalar_constant(v):
    op = defining_op(v)
    if op is not None and op.name == "arith.constant" and not isa(ir.ShapedType, v.type):
        return op
    return None


def available_at(value, op) -> bool:
    """Whether `value` is defined before `op` (an argument of a block around it, or an op
    before it or before an op around it in that op's block)."""
    d = defining_op(value)
    blk = value.owner if d is None else d.block
    p = op
    while p is not None:
        if p.block == blk:
            return d is None or d.is_before_in_block(p)
        p = p.parent
    return False


def piece_epilogue(e, ci, r, offsets):
    """Generic `e` (C its input `ci`) on one piece of a split product: result `r` at
    `offsets` of C, the other operands sliced to it. Inserted at the current point."""
    from mlir.dialects import tensor
    shape = list(ir.RankedTensorType(r.type).shape)
    operands = {}
    for i in range(len(e.operands) - 1):
        dims = None if i == ci else operand_dims(e, i)
        if i == ci:
            operands[i] = r
        elif dims:  # (a 0-d operand stays as it is)
            x = e.operands[i]
            t = ir.RankedTensorType.get([shape[d] for d in dims], ir.RankedTensorType(x.type).element_type)
            operands[i] = tensor.ExtractSliceOp(t, x, [], [], [], [offsets[d] for d in dims],
                                                [shape[d] for d in dims], [1] * len(dims)).result
    out_t = ir.RankedTensorType.get(shape, ir.RankedTensorType(e.results[0].type).element_type)
    operands[len(e.operands) - 1] = tensor.EmptyOp(shape, out_t.element_type).result
    ne = e.clone()  # (after the slices: at the insertion point)
    for i, x in operands.items():
        ne.operands[i] = x
    ne.results[0].set_type(out_t)
    return ne.results[0]


def reader(call):
    """(the generic `fuse_epilogue` can fuse into kernel call `call`, the collapse_shapes
    between them: a packed product's [M][N/nr][nr] C back to 2-d) or (None, [])."""
    v, collapses = call.results[0], []
    while len(uses := list(v.uses)) == 1 and user_op(uses[0]).name == "tensor.collapse_shape":
        collapses.append(user_op(uses[0]))
        v = collapses[-1].results[0]
    e = consumer(v) if isa(ir.RankedTensorType, v.type) and ir.RankedTensorType(v.type).rank == 2 else None
    return (e, collapses) if e is not None else (None, [])


def fuse_epilogue(call, f, e, outer, is_k_slice):
    """Fuse generic `e`, the only reader of kernel call `call`'s result (through the
    collapse_shapes `outer`: `reader`), into the tiled kernel function `f`: each store of
    C's tiles stores e's body of it instead (in the last K slice: the scf.for
    `is_k_slice` accepts). e's tensor operands become f's arguments. Returns the new
    call, or None (nothing changed) where C's way to its stores is not one this reads."""
    entry = f.regions[0].blocks[0]
    ret = body_ops(f)[-1]
    c_value = outer[-1].results[0] if outer else call.results[0]
    # back from the returned tensor, through collapse_shapes, to the outermost loop
    v, collapses = ret.operands[0], list(reversed(outer))
    while (d := defining_op(v)) is not None and d.name == "tensor.collapse_shape":
        collapses.append(d)
        v = d.operands[0]
    if d is None or d.name not in ("scf.for", "scf.forall"):
        return None
    rank = sum(len(g) for g in reassociation(collapses[-1])) if collapses else 2
    if ir.RankedTensorType(v.type).rank != rank:
        return None
    root = _init_of(d, ir.OpResult(v).result_number)
    dims = [0, 1]  # each dim of C's tiled tensor: the dim of C it is part of
    for c in collapses:
        dims = [dims[g] for g, grp in enumerate(reassociation(c)) for _ in grp]
    writes = _stores(root, dims)
    if not writes:
        return None
    paths = [_path(w.operands[1], root) for w in writes]
    if any(p is None for p in paths):
        return None
    for x in e.operands[:-1]:
        if x == c_value or available_at(x, call):
            continue
        d = defining_op(x)  # (a split product's piece of W, sliced after the piece: moved up)
        if d is None or d.name != "tensor.extract_slice" or not all(available_at(y, call) for y in d.operands):
            return None
        d.move_before(call)

    from mlir.dialects import arith, func, scf, tensor, vector
    n_in = len(e.operands) - 1
    ci = next(i for i in range(n_in) if e.operands[i] == c_value)
    extra = [i for i in range(n_in) if i != ci]
    loc = call.location
    args = {i: entry.add_argument(e.operands[i].type, loc) for i in extra}
    ftype = ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value)
    f.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
        list(ftype.inputs) + [e.operands[i].type for i in extra], list(ftype.results)))

    first = body_ops(f)[0]
    kept = {i: operand_dims(e, i) for i in extra}
    roots, scalars, consts = {}, {}, {}
    with ir.InsertionPoint(first), loc:
        for i in extra:
            if kept[i]:
                roots[i] = _expanded(args[i], collapses, kept[i])
            else:  # (0-d: read once, broadcast at each store)
                scalars[i] = tensor.ExtractOp(args[i], []).result
        for op in body_ops(e):
            if op.name == "arith.constant":  # (in the body: broadcast where used, as one outside)
                consts[op.results[0]] = op.clone().results[0]
            for x in op.operands:
                c = _scalar_constant(x)
                if c is not None and x not in consts:
                    consts[x] = c.clone().results[0]
    mirrors = {i: {} for i in roots}  # operand -> {C's tensor: the operand's tensor in its place}
    block = e.regions[0].blocks[0]
    for w, path in zip(writes, paths):
        vt = ir.VectorType(w.operands[0].type)
        kloop = w.parent
        while kloop is not None and kloop != f and not (kloop.name == "scf.for" and is_k_slice(kloop)):
            kloop = kloop.parent
        kloop = kloop if kloop is not None and kloop != f else None
        views = {i: _mirror(roots[i], path, mirrors[i], dims, kept[i]) for i in roots}
        with ir.InsertionPoint(w), w.location:
            if kloop is not None:  # the last slice: iv + step >= ub
                iv = kloop.regions[0].blocks[0].arguments[0]
                nxt = arith.AddIOp(iv, kloop.operands[2]).result
                last = arith.CmpIOp(arith.CmpIPredicate.sge, nxt, kloop.operands[1]).result
                branch = scf.IfOp(last, [vt], has_else=True)
                with ir.InsertionPoint(branch.else_block):
                    scf.YieldOp([w.operands[0]])
                ip = ir.InsertionPoint(branch.then_block)
            else:
                ip = ir.InsertionPoint(w)
            with ip:
                local = {}
                for i in range(n_in):
                    a = block.arguments[i]
                    et = ir.RankedTensorType(e.operands[i].type).element_type
                    if i == ci:
                        local[a] = w.operands[0]
                    elif i in scalars:
                        local[a] = vector.BroadcastOp(ir.VectorType.get(vt.shape, et), scalars[i]).result
                    else:
                        local[a] = _read(views[i], w, dims, kept[i], et)
                for op in body_ops(e):
                    if op.name == "arith.constant":
                        continue
                    for x in op.operands:  # (a constant: broadcast at its first use)
                        if x not in local:
                            local[x] = vector.BroadcastOp(ir.VectorType.get(vt.shape, x.type), consts[x]).result
                    if op.name == "linalg.yield":
                        out = local[op.operands[0]]
                        break
                    operands = [local[x] for x in op.operands]
                    new = ir.Operation.create(op.name, results=[ir.VectorType.get(vt.shape, r.type) for r in op.results],
                                              operands=operands, attributes={k: op.attributes[k] for k in op.attributes})
                    for r, nr in zip(op.results, new.results):
                        local[r] = nr
            if kloop is not None:
                with ir.InsertionPoint(branch.then_block):
                    scf.YieldOp([out])
                out = branch.results[0]
        w.operands[0] = out
    with ir.InsertionPoint(call), loc:
        new_call = func.CallOp([r.type for r in call.results], ir.FlatSymbolRefAttr(call.attributes["callee"]),
                               list(call.operands) + [e.operands[i] for i in extra])
    call.results[0].replace_all_uses_with(new_call.results[0])
    e.results[0].replace_all_uses_with(outer[-1].results[0] if outer else new_call.results[0])
    e.erase()
    call.erase()
    return new_call.operation


def _init_of(loop, k):
    """The init (scf.for) or shared out (scf.forall) of `loop`'s result `k`."""
    if loop.name == "scf.for":
        return loop.operands[3 + k]
    return loop.operands[len(loop.operands) - len(loop.results) + k]


def _stores(root, dims):
    """The vector.transfer_writes into C's tiles reached from `root` (its tensor before
    the kernel's loops), or None where C goes anywhere this does not follow."""
    seen, todo, writes = {root}, [root], []

    def add(x):
        if x not in seen:
            seen.add(x)
            todo.append(x)
    while todo:
        t = todo.pop()
        for use in t.uses:
            u, n = user_op(use), use.operand_number
            if u.name == "scf.for" and n >= 3:
                add(u.regions[0].blocks[0].arguments[n - 2])
                add(u.results[n - 3])
            elif u.name == "scf.forall" and n >= len(u.operands) - len(u.results):
                k = n - (len(u.operands) - len(u.results))
                args = u.regions[0].blocks[0].arguments
                add(args[len(args) - len(u.results) + k])
                add(u.results[k])
            elif u.name == "tensor.extract_slice" and n == 0:
                if ir.RankedTensorType(u.results[0].type).rank != len(dims):
                    return None  # (rank-reducing: dims would no longer line up)
                add(u.results[0])
            elif u.name == "tensor.insert_slice" and n in (0, 1):
                add(u.results[0])
            elif u.name == "vector.transfer_write" and n == 1:
                if len(u.operands) != 2 + len(dims):
                    return None  # (a masked store)
                writes.append(u)
                add(u.results[0])
            elif u.name == "scf.yield" and u.parent.name == "scf.for":
                continue
            elif u.name in ("vector.transfer_read", "tensor.parallel_insert_slice", "tensor.collapse_shape",
                            "func.return"):
                continue
            else:
                return None
    return writes


def _path(t, root):
    """The extract_slices from `root` down to C's tensor `t` (outermost first), following
    loop arguments and results back to their inits; None where `t` comes otherwise."""
    path = []
    while t != root:
        d = defining_op(t)
        if d is None:
            loop = t.owner.owner
            loop = getattr(loop, "operation", loop)
            k = ir.BlockArgument(t).arg_number
            if loop.name not in ("scf.for", "scf.forall"):
                return None
            n_ivs = len(loop.regions[0].blocks[0].arguments) - len(loop.results)  # (scf.for: 1)
            t = _init_of(loop, k - n_ivs)
        elif d.name == "tensor.extract_slice":
            path.append(d)
            t = d.operands[0]
        elif d.name in ("scf.for", "scf.forall"):
            t = _init_of(d, ir.OpResult(t).result_number)
        elif d.name == "vector.transfer_write":
            t = d.operands[1]
        elif d.name == "tensor.insert_slice":
            t = d.operands[1]
        else:
            return None
    return path[::-1]


def _expanded(x, collapses, kept):
    """Operand `x` (C's dims `kept` of it) shaped as C's tensor before the kernel's
    collapse_shapes, those dims only."""
    from mlir.dialects import tensor
    dims = [0, 1]
    for c in collapses:
        src_t = ir.RankedTensorType(c.operands[0].type)
        groups = reassociation(c)
        src_dims = [dims[g] for g, grp in enumerate(groups) for _ in grp]
        keep = [grp for g, grp in enumerate(groups) if dims[g] in kept]
        if any(len(grp) > 1 for grp in keep):
            n, assoc, shape = 0, [], []
            for grp in keep:
                assoc.append(list(range(n, n + len(grp))))
                shape += [src_t.shape[j] for j in grp]
                n += len(grp)
            t = ir.RankedTensorType.get(shape, ir.RankedTensorType(x.type).element_type)
            x = tensor.ExpandShapeOp(t, x, reassociation_attr(assoc), [], shape).result
        dims = src_dims
    return x


def _mirror(x, path, memo, dims, kept):
    """Operand `x` (as `_expanded`) sliced as C is along `path`: each extract_slice
    repeated on it (its kept dims), right after the original."""
    from mlir.dialects import tensor
    keep = [j for j, d in enumerate(dims) if d in kept]
    for s in path:
        r = s.results[0]
        if r not in memo:
            dyn = ir.ShapedType.get_dynamic_size()
            parts = []
            operands = iter(s.operands[1:])
            for name in ("static_offsets", "static_sizes", "static_strides"):
                static = list(ir.DenseI64ArrayAttr(s.attributes[name]))
                values = [next(operands) if v == dyn else None for v in static]
                parts.append(([static[j] for j in keep], [values[j] for j in keep if values[j] is not None]))
            (so, do), (ss, ds), (st, dt) = parts
            t = ir.RankedTensorType.get([ir.RankedTensorType(r.type).shape[j] for j in keep],
                                        ir.RankedTensorType(x.type).element_type)
            with ir.InsertionPoint.after(s), s.location:
                memo[r] = tensor.ExtractSliceOp(t, x, do, ds, dt, so, ss, st).result
        x = memo[r]
    return x


def _read(view, w, dims, kept, et):
    """A transfer_read of operand tensor `view` where store `w` writes C's tile: the
    vector `w` stores, the dims the operand lacks broadcast."""
    from mlir.dialects import arith, vector
    vt = ir.VectorType(w.operands[0].type)
    keep = [j for j, d in enumerate(dims) if d in kept]
    pmap = ir.AffineMapAttr(w.attributes["permutation_map"]).value
    in_bounds = [ir.BoolAttr(b).value for b in ir.ArrayAttr(w.attributes["in_bounds"])]
    exprs, bounds = [], []
    for x, b in zip(pmap.results, in_bounds):
        j = ir.AffineDimExpr(x).position
        if j in keep:
            exprs.append(ir.AffineDimExpr.get(keep.index(j)))
            bounds.append(b)
        else:
            exprs.append(ir.AffineConstantExpr.get(0))
            bounds.append(True)
    amap = ir.AffineMap.get(len(keep), 0, exprs)
    indices = list(w.operands)[2:]
    zero = arith.ConstantOp(et, ir.FloatAttr.get(et, 0.0) if isa(ir.FloatType, et) else ir.IntegerAttr.get(et, 0)).result
    return vector.TransferReadOp(ir.VectorType.get(vt.shape, et), view, [indices[j] for j in keep],
                                 ir.AffineMapAttr.get(amap), zero, ir.ArrayAttr.get([ir.BoolAttr.get(b) for b in bounds])).result

