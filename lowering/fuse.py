"""`mirax-fuse`: fuse chains of elementwise linalg ops, with their broadcasts, into one kernel.

After `convert-mirax-to-linalg` every mirax op is its own `linalg.generic` (broadcasts
too); upstream `linalg-fuse-elementwise-ops` folds producers into consumers when both
are all-parallel, so a traced gelu `x * (1 + erf(x / sqrt(2))) / 2` becomes one
generic reading `x` once and writing the result once:

    %r = linalg.generic {iterator_types = ["parallel", ...]} ins(%x) outs(%e) {
      ^bb0(%in: f32, %out: f32):  %0 = arith.divf %in, %cst ... linalg.yield %9 : f32 }

Elementwise producers of a reduction (softmax's exp, layer norm's square) fuse into
it the same way, so the intermediate tensor never exists.

Upstream fusion takes a producer with a single user only. Two steps here go further:
a constant or broadcast generic (its body only yields) read by several elementwise
users is copied for each of them, so each absorbs it (a gelu's `2.0`, a bias that CSE
shared between the forward and backward passes); and an elementwise producer whose
value other ops read too (AdamW's new moments: returned as state, then read by the
parameter update) fuses into its first elementwise reader, which yields the value as
one more result for the others (`fuse_multi_use_producers`). A transformer training
step went from 309 to 161 loop nests.

Static `tensor.reshape`s that only add or drop unit dims (keepdims, `squeeze`) become
`tensor.collapse_shape` / `tensor.expand_shape`, and an expand that only adds unit dims
is folded into the indexing maps of the generics reading it: a softmax's `x - max(x, keepdims=True)`
then reads the row maximum as `affine_map<(d0, d1) -> (d0)>` with no reshape between the
reduction and its consumers (what `mirax-fuse-reductions` needs to put them in one loop).
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import tensor

from .approx import MATH_OPS
from .pass_base import (MiraxPass, apply_transform, clone_mapped, defining_op, is_transpose_2d, op_id,
                        transform_script, user_op, walk_ops)

NAME = "mirax-fuse"


class MiraxFuse(MiraxPass):
    name = NAME
    summary = "Fuse elementwise linalg ops (and broadcasts) into their consumers"
    options = {"max-fused-ops": (None, "the most body ops one fused generic may hold (default 256)"),
               "max-buffers": (0, "the most tensors one fused generic may read and write (a GPU's buffer "
                                  "bindings per kernel; 0: no bound)"),
               "multi-use": (True, "fuse a producer read by others too into its first reader, as one more "
                                   "result (the GPU mapping takes single-result generics)")}

    def add_to(self, pm):
        limit = int(self.opts["max-fused-ops"] or MAX_FUSED_OPS)
        buffers = int(self.opts["max-buffers"])

        def unit_dims(op, *_):
            unit_reshapes_to_expand_collapse(op)
            fold_unit_expands_into_generics(op)
        pm.add(unit_dims, name="mirax-fold-unit-expands")
        pm.add("canonicalize")
        pm.add(lambda op, *_: clone_broadcasts_per_use(op), name="mirax-clone-broadcasts")
        pm.add(lambda op, *_: generalize_transposes_for_fusion(op), name="mirax-generalize-transposes")
        pm.add(lambda op, *_: bound_fused_bodies(op, limit, buffers), name="mirax-bound-fusion")
        # the canonicalize after fusion folds the barriers' cast pairs away
        for p in ["linalg-fuse-elementwise-ops", "canonicalize", "cse"]:
            pm.add(p)
        if str(self.opts["multi-use"]).lower() not in ("false", "0"):
            pm.add(lambda op, *_: fuse_multi_use_producers(op, limit), name="mirax-fuse-multi-use")
            # what that fusion made single-use, bounded again (the canonicalize above
            # folded the first round's barriers)
            pm.add(lambda op, *_: bound_fused_bodies(op, limit, buffers), name="mirax-bound-fusion")
            for p in ["linalg-fuse-elementwise-ops", "canonicalize", "cse"]:
                pm.add(p)


# The most body ops one fused generic may collect. Upstream fusion copies the producer's
# body into the consumer's at each step, so a chain of n elementwise ops fused into one
# kernel costs O(n^2) (3,000 ops: 11 s of a 13 s compile); kernels of this many ops are
# already long enough that the loads and stores between them cost nothing measurable.
MAX_FUSED_OPS = 256
# mirax-math-approx runs after fusion and writes each f32 exp/log/erf/tanh out as ~20-45
# ops: they count as this many here, so the bound holds for the bodies LLVM gets
APPROX_OPS = 25


def _body_size(op) -> int:
    n = 0
    for o in op.regions[0].blocks[0].operations:
        nm = o.operation.name
        n += APPROX_OPS if nm.startswith("math.") and nm[5:] in MATH_OPS else 1
    return n


def bound_fused_bodies(root, limit=MAX_FUSED_OPS, max_buffers=0):
    """Keep `linalg-fuse-elementwise-ops` from building bodies of more than `limit` ops,
    or (`max_buffers` > 0) generics reading and writing more than `max_buffers` tensors:
    walking each block in order, the size a generic would reach is its own body plus that
    of the single-use generics feeding it (what fusion pulls in), its tensors its own
    other operands and theirs; where either passes its bound, its inputs from such
    producers go through a cast to a dynamic shape and back, which the fusion pass does
    not look through (canonicalize folds the pair after). The buffer bound is a GPU's:
    each tensor is a buffer binding of the kernel, and a device binds a few dozen per
    kernel at least (Metal 31, lavapipe 32); beyond its limit a Vulkan driver's behaviour
    is undefined (lavapipe crashed the process)."""
    with root.context, ir.Location.unknown():
        size = {}  # generic op (op_id) -> body ops it would hold after fusion
        reads = {}  # generic op (op_id) -> the tensors it would read after fusion (max_buffers only)
        for op in _walk(root, "linalg.generic"):
            op = op.operation
            own = _body_size(op)
            n_in = len(op.operands) - len(op.results)
            feeding, other = [], set()
            for i, v in enumerate(op.operands[:n_in]):
                p = getattr(v.owner, "operation", None)
                if p is not None and p.name == "linalg.generic" and _single_use(v):
                    feeding.append((i, v, size.get(op_id(p), 0)))
                else:
                    other.add(v)
            total = own + sum(n for _, _, n in feeding)
            tensors = set(other)
            if max_buffers:
                for _, v, _ in feeding:
                    tensors |= reads.get(op_id(v.owner.operation), set())
            if total > limit or (max_buffers and len(tensors) + len(op.results) > max_buffers):
                for i, v, _ in feeding:
                    t = ir.RankedTensorType(v.type)
                    if t.rank == 0:
                        continue
                    dyn = ir.RankedTensorType.get([ir.ShapedType.get_dynamic_size()] * t.rank, t.element_type)
                    with ir.InsertionPoint(op):
                        back = tensor.CastOp(t, tensor.CastOp(dyn, v).result).result
                    op.operands[i] = back
                scalars = [v for _, v, _ in feeding if ir.RankedTensorType(v.type).rank == 0]  # (still fused)
                total = own + sum(n for _, v, n in feeding if ir.RankedTensorType(v.type).rank == 0)
                tensors = set(other) | {v for _, v, _ in feeding if v not in scalars}
                for v in scalars:
                    tensors |= reads.get(op_id(v.owner.operation), set())
            size[op_id(op)] = total
            if max_buffers:
                reads[op_id(op)] = tensors


GENERALIZE = "__mirax_generalize"


def generalize_transposes_for_fusion(root) -> int:
    """A `linalg.transpose` whose one user is an elementwise generic becomes the same
    transpose as a `linalg.generic` (its input read through the permutation), which
    upstream fusion folds into that user: `x.T + 1` is one loop nest, which
    mirax-vectorize-transposes runs as register blocks of shuffles with the add on the
    way (not a transpose, then an add over its 64 MiB result at 4096^2). Transposes read
    by matmuls stay (matmul_codegen folds them into the product's indexing). Returns how
    many it rewrote."""
    marked, users = 0, []
    for t in walk_ops(root, lambda n: n == "linalg.transpose"):
        uses = list(t.results[0].uses)
        rank = ir.RankedTensorType(t.results[0].type).rank
        # one a user: two permuted inputs in one generic would leave it to LLVM's gathers
        if (len(uses) == 1 and _fusable_use(uses[0], rank) and user_op(uses[0]) not in users
                and not _folded_by_matmul_codegen(t)):
            users.append(user_op(uses[0]))
            t.attributes[GENERALIZE] = ir.UnitAttr.get()
            marked += 1
    if not marked:
        return 0
    err = apply_transform(root, transform_script([
        f"%t = transform.structured.match attributes{{{GENERALIZE}}} in %root : (!transform.any_op) -> !transform.any_op",
        "%g = transform.structured.generalize %t : (!transform.any_op) -> !transform.any_op"]))
    for op in walk_ops(root, lambda n: n.startswith("linalg.")):
        if GENERALIZE in op.attributes:
            del op.attributes[GENERALIZE]
    return 0 if err is not None else marked


def _folded_by_matmul_codegen(t) -> bool:
    """Whether transpose `t` is of `x.T @ g`, which matmul_codegen computes as `g.T @ x`
    (fold_transposed_products: no transpose at all). Fused into its user instead, a
    weight gradient's transpose became that user's strided reads (the MLP step's SGD
    update of its 512x784 weight: 4% of the step)."""
    if not is_transpose_2d(t):
        return False
    mm = defining_op(t.operands[0])
    return mm is not None and mm.name == "linalg.matmul" and is_transpose_2d(defining_op(mm.operands[0]))


def _is_broadcast_map(m, n_loops):
    """(d0, .., dn) -> (di, dj, ..) with i < j < ..: a broadcast (or a copy), never a transpose."""
    pos = []
    for e in m.results:
        if not isinstance(e, ir.AffineDimExpr):
            return False
        pos.append(e.position)
    return pos == sorted(set(pos)) and m.n_dims == n_loops


def _fusable_use(use, producer_loops):
    """`use` is an input of an all-parallel `linalg.generic` that upstream elementwise
    fusion would fuse its producer into (same loop count, a permutation map)."""
    c = user_op(use)
    if c.name != "linalg.generic":
        return False
    n_in = len(c.operands) - len(c.results)
    if use.operand_number >= n_in:
        return False
    if any("reduction" in str(a) for a in c.attributes["iterator_types"]):
        return False
    m = ir.AffineMapAttr(c.attributes["indexing_maps"][use.operand_number]).value
    return m.is_permutation and len(m.results) == producer_loops


def clone_broadcasts_per_use(root):
    """Give every elementwise consumer of a constant fill or a broadcast its own copy.

    Upstream `linalg-fuse-elementwise-ops` fuses a producer only into its single user, so
    a broadcast constant (`2.0` in gelu, `1/n` in a mean) or a broadcast bias that CSE
    shared between the forward and backward passes stayed a full-size tensor, written
    once and read by each user. A generic whose body only yields (a value from outside
    or an input read through a broadcast map) costs nothing to recompute, so each fusable
    user gets a copy it absorbs; other users (matmuls, returns) share the original, and
    copies that fusion leaves (none expected) are merged again by the CSE after it."""
    with root.context, ir.Location.unknown():
        for op in _walk(root, "linalg.generic"):
            if len(op.results) != 1:
                continue
            body = op.regions[0].blocks[0]
            if len(body.operations) != 1:  # only the yield
                continue
            its = [str(a) for a in op.attributes["iterator_types"]]
            if any("parallel" not in a for a in its):
                continue
            n_in = len(op.operands) - 1
            maps = [ir.AffineMapAttr(a).value for a in op.attributes["indexing_maps"]]
            if maps[-1] != ir.AffineMap.get_identity(len(its)) or not all(_is_broadcast_map(m, len(its)) for m in maps[:n_in]):
                continue
            uses = list(op.results[0].uses)
            fusable = [u for u in uses if _fusable_use(u, len(its))]
            if len(uses) < 2 or not fusable:
                continue
            keep_original = len(fusable) < len(uses)
            for u in (fusable if keep_original else fusable[1:]):
                clone = op.clone(ir.InsertionPoint(op))
                user_op(u).operands[u.operand_number] = clone.results[0]


def _identity(n):
    return ir.AffineMap.get_identity(n)


def _all_parallel(op):
    return all("parallel" in str(a) for a in op.attributes["iterator_types"])


POS = "mirax.fuse_pos"


def _pos(op):
    """The position in the block being fused of the top-level op holding `op` (None if
    it is not in that block): `_fuse_in_block` marks that block's ops with `POS`."""
    while op is not None:
        if POS in op.attributes:
            return ir.IntegerAttr(op.attributes[POS]).value
        op = op.parent
    return None


def fuse_multi_use_producers(root, limit=MAX_FUSED_OPS):
    """Fuse an elementwise producer whose result has other users into an elementwise
    consumer, the fused op yielding the producer's value as one more result for them.

    Upstream fusion takes single-use producers only, so a value that is both returned and
    read again stayed a kernel of its own: AdamW's new moments `m` and `v` (state outputs,
    then read by the parameter update) made three loops over each parameter, and every
    activation the backward pass reads again was written by one kernel and read back by the
    next. Here the producer P and its first all-parallel consumer C over the same loops (C
    reading P through the identity map) become one generic computing P's body, then C's,
    yielding C's results and P's; P's other users read that extra result.

        %m = generic ins(%m0, %g) { b1 * m0 + (1 - b1) * g }          (returned; read below)
        %p = generic ins(%p0, %m, %v) { ... }
      becomes
        %p, %m = generic ins(%p0, %v, %m0, %g) outs(%e0, %e1) { %mm = b1 * m0 + ...; ...; yield %pp, %mm }
    """
    with root.context, ir.Location.unknown():
        for block in _generic_blocks(root):
            _fuse_in_block(block, limit)


def _generic_blocks(root):
    """The blocks (of functions, loops...) that hold linalg.generic ops directly."""
    out = []

    def visit(op):
        for region in op.regions:
            for block in region.blocks:
                has = False
                for child in block.operations:
                    child = child.operation
                    if child.name == "linalg.generic":
                        has = True
                    elif len(child.regions):
                        visit(child)
                if has:
                    out.append(block)
    visit(root)
    return out


def _fuse_in_block(block, limit):
    """One pass over `block` in order (a fused op takes its consumer's place). Ops are
    told apart by their position, kept in an attribute while the pass runs (Python
    objects of one op are not one object, and hashing them proved unreliable)."""
    i64 = ir.IntegerType.get_signless(64)
    ops = [o.operation for o in block.operations]
    for i, o in enumerate(ops):
        o.attributes[POS] = ir.IntegerAttr.get(i64, i)
    for pos in range(len(ops)):
        p = ops[pos]
        if p is None or p.name != "linalg.generic" or len(p.results) != 1 or not _all_parallel(p):
            continue
        n_loops = len(p.attributes["iterator_types"])
        p_maps = [ir.AffineMapAttr(a).value for a in p.attributes["indexing_maps"]]
        if p_maps[-1] != _identity(n_loops):
            continue
        r = p.results[0]
        uses = list(r.uses)
        if len(uses) < 2:
            continue  # single users are upstream fusion's
        users = [_pos(user_op(u)) for u in uses]
        if any(u is None for u in users):
            continue
        for at in sorted(set(users)):
            c = ops[at]
            if c.name != "linalg.generic" or not _all_parallel(c):
                continue
            if len(c.attributes["iterator_types"]) != n_loops:
                continue
            c_maps = [ir.AffineMapAttr(a).value for a in c.attributes["indexing_maps"]]
            n_in = len(c.operands) - len(c.results)
            mine = [i for i in range(len(c.operands)) if c.operands[i] == r]
            if not mine or any(i >= n_in or c_maps[i] != _identity(n_loops) for i in mine):
                continue
            if any(m != _identity(n_loops) for m in c_maps[n_in:]):
                continue
            # the other users of P must come after C (they will read the fused op's result)
            if any(u <= at for u in users if u != at):
                continue
            if _body_size(p) + _body_size(c) > limit:
                continue
            new = _fuse_pair(p, c, mine, p_maps, c_maps, n_in)
            new.attributes[POS] = ir.IntegerAttr.get(i64, at)
            ops[pos], ops[at] = None, new
            break
    for o in ops:
        if o is not None and POS in o.attributes:
            del o.attributes[POS]


def _fuse_pair(p, c, mine, p_maps, c_maps, n_in):
    from mlir.dialects import linalg
    p_in = len(p.operands) - 1
    keep = [i for i in range(n_in) if i not in mine]
    inputs = [c.operands[i] for i in keep] + [p.operands[i] for i in range(p_in)]
    outputs = [c.operands[i] for i in range(n_in, len(c.operands))] + [p.operands[p_in]]
    maps = [c_maps[i] for i in keep] + p_maps[:p_in] + c_maps[n_in:] + [p_maps[-1]]
    result_types = [v.type for v in c.results] + [p.results[0].type]
    with ir.InsertionPoint(c), c.location:
        new = linalg.GenericOp(result_types, inputs, outputs,
                               ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps]),
                               c.attributes["iterator_types"])
    pb, cb = p.regions[0].blocks[0], c.regions[0].blocks[0]
    arg_types = ([cb.arguments[i].type for i in keep] + [pb.arguments[i].type for i in range(p_in)]
                 + [cb.arguments[i].type for i in range(n_in, len(c.operands))] + [pb.arguments[p_in].type])
    nb = new.regions[0].blocks.append(*arg_types)
    args = list(nb.arguments)
    n_keep, n_out = len(keep), len(c.operands) - n_in
    mapping = {}
    for j, i in enumerate(keep):
        mapping[cb.arguments[i]] = args[j]
    for i in range(p_in):
        mapping[pb.arguments[i]] = args[n_keep + i]
    for k in range(n_out):
        mapping[cb.arguments[n_in + k]] = args[n_keep + p_in + k]
    mapping[pb.arguments[p_in]] = args[-1]
    ip = ir.InsertionPoint(nb)

    def clone_body(b):
        for o in b.operations:
            o = o.operation
            if o.name == "linalg.yield":
                return [mapping.get(v, v) for v in o.operands]
            clone_mapped(o, mapping, ip)
        return []
    p_val = clone_body(pb)[0]
    for i in mine:
        mapping[cb.arguments[i]] = p_val
    c_vals = clone_body(cb)
    with ip, c.location:
        linalg.YieldOp(c_vals + [p_val])
    for old, newr in zip(c.results, list(new.results)[:len(c.results)]):
        old.replace_all_uses_with(newr)
    p.results[0].replace_all_uses_with(new.results[len(c.results)])
    c.erase()
    p.erase()
    return new.operation


def _single_use(v):
    uses = iter(v.uses)
    return next(uses, None) is not None and next(uses, None) is None


def _groups(big, small_rank):
    """Reassociation of a shape `big` onto its non-unit dims (`small_rank` of them): each
    non-unit dim with the unit dims after it; leading unit dims join the first group."""
    if small_rank == 0:
        return []
    groups = []
    for i, d in enumerate(big):
        if d != 1 or not groups:
            groups.append([i])
        else:
            groups[-1].append(i)
    if len(groups) > small_rank:
        groups = [groups[0] + groups[1]] + groups[2:]
    return groups


def _reassoc(groups):
    i64 = ir.IntegerType.get_signless(64)
    return ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(i64, i) for i in g]) for g in groups])


def _walk(root, name):
    return walk_ops(root, lambda n: n == name)


def fold_unit_expands_into_generics(root):
    """A `linalg.generic` input that is a `tensor.expand_shape` adding unit dims reads the
    expand's source instead, its indexing map without those dims (an index into a dim of
    size 1 is always 0, so dropping it keeps the meaning):

        %e = tensor.expand_shape %m [[0, 1]] ... : tensor<64xf32> into tensor<64x1xf32>
        linalg.generic {indexing_maps = [(d0, d1) -> (d0, 0), ...]} ins(%e ...)
      becomes
        linalg.generic {indexing_maps = [(d0, d1) -> (d0), ...]} ins(%m ...)
    """
    with root.context, ir.Location.unknown():
        for op in _walk(root, "linalg.generic"):
            n_in = len(op.operands) - len(op.results)
            maps = [ir.AffineMapAttr(a).value for a in op.attributes["indexing_maps"]]
            changed = False
            for i in range(n_in):
                v = op.operands[i]
                owner = v.owner
                if isinstance(owner, ir.Block) or owner.operation.name != "tensor.expand_shape":
                    continue
                owner = owner.operation
                try:
                    src_t, dst_t = ir.RankedTensorType(owner.operands[0].type), ir.RankedTensorType(v.type)
                except ValueError:
                    continue
                if not dst_t.has_static_shape:
                    continue
                dst = list(dst_t.shape)
                keep = []
                for g in owner.attributes["reassociation"]:
                    g = [ir.IntegerAttr(x).value for x in g]
                    big = [k for k in g if dst[k] != 1]
                    if len(big) > 1:
                        keep = None
                        break
                    keep.append(big[0] if big else g[0])
                if keep is None or len(keep) != src_t.rank:
                    continue
                m = maps[i]
                new = ir.AffineMap.get(m.n_dims, m.n_symbols, [m.results[k] for k in keep])
                trial = maps[:i] + [new] + maps[i + 1:]
                used = set()
                for mm in trial:
                    for e in mm.results:
                        if isinstance(e, ir.AffineDimExpr):
                            used.add(e.position)
                if len(used) != m.n_dims:  # a loop known only from this operand's shape
                    continue
                maps = trial
                op.operands[i] = owner.operands[0]
                changed = True
            if changed:
                op.attributes["indexing_maps"] = ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps])


def unit_reshapes_to_expand_collapse(root):
    """Rewrite static `tensor.reshape`s that only add/drop unit dims as collapse + expand."""
    todo = _walk(root, "tensor.reshape")
    with root.context, ir.Location.unknown():
        for op in todo:
            try:
                src_t = ir.RankedTensorType(op.operands[0].type)
                dst_t = ir.RankedTensorType(op.results[0].type)
            except ValueError:
                continue
            if not (src_t.has_static_shape and dst_t.has_static_shape):
                continue
            src, dst = list(src_t.shape), list(dst_t.shape)
            core = [d for d in src if d != 1]
            if core != [d for d in dst if d != 1] or src == dst:
                continue
            with ir.InsertionPoint(op), op.location:
                v = op.operands[0]
                if len(core) != len(src):
                    ct = ir.RankedTensorType.get(core, src_t.element_type)
                    v = tensor.CollapseShapeOp(ct, v, _reassoc(_groups(src, len(core)))).result
                if len(core) != len(dst):
                    v = tensor.ExpandShapeOp(dst_t, v, _reassoc(_groups(dst, len(core))), [], dst).result
            op.results[0].replace_all_uses_with(v)
            op.erase()
