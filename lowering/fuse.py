"""`mirax-fuse`: fuse chains of elementwise linalg ops, with their broadcasts, into one kernel.

After `convert-mirax-to-linalg` every mirax op is its own `linalg.generic` (broadcasts
too); upstream `linalg-fuse-elementwise-ops` folds producers into consumers when both
are all-parallel, so a traced gelu `x * (1 + erf(x / sqrt(2))) / 2` becomes one
generic reading `x` once and writing the result once:

    %r = linalg.generic {iterator_types = ["parallel", ...]} ins(%x) outs(%e) {
      ^bb0(%in: f32, %out: f32):  %0 = arith.divf %in, %cst ... linalg.yield %9 : f32 }

Elementwise producers of a reduction (softmax's exp, layer norm's square) fuse into
it the same way, so the intermediate tensor never exists.

Static `tensor.reshape`s that only add or drop unit dims (keepdims, `squeeze`) become
`tensor.collapse_shape` / `tensor.expand_shape`, and an expand that only adds unit dims
is folded into the indexing maps of the generics reading it: a softmax's `x - max(x, keepdims=True)`
then reads the row maximum as `affine_map<(d0, d1) -> (d0)>` with no reshape between the
reduction and its consumers (what `mirax-fuse-reductions` needs to put them in one loop).
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import tensor

from .pass_base import MiraxPass, walk_ops

NAME = "mirax-fuse"


class MiraxFuse(MiraxPass):
    name = NAME
    summary = "Fuse elementwise linalg ops (and broadcasts) into their consumers"
    options = {"max-fused-ops": (None, "the most body ops one fused generic may hold (default 256)")}

    def add_to(self, pm):
        limit = int(self.opts["max-fused-ops"] or MAX_FUSED_OPS)

        def unit_dims(op, *_):
            unit_reshapes_to_expand_collapse(op)
            fold_unit_expands_into_generics(op)
        pm.add(unit_dims, name="mirax-fold-unit-expands")
        pm.add("canonicalize")
        pm.add(lambda op, *_: bound_fused_bodies(op, limit), name="mirax-bound-fusion")
        # the canonicalize after fusion folds the barriers' cast pairs away
        for p in ["linalg-fuse-elementwise-ops", "canonicalize", "cse"]:
            pm.add(p)


# The most body ops one fused generic may collect. Upstream fusion copies the producer's
# body into the consumer's at each step, so a chain of n elementwise ops fused into one
# kernel costs O(n^2) (3,000 ops: 11 s of a 13 s compile); kernels of this many ops are
# already long enough that the loads and stores between them cost nothing measurable.
MAX_FUSED_OPS = 256


def bound_fused_bodies(root, limit=MAX_FUSED_OPS):
    """Keep `linalg-fuse-elementwise-ops` from building bodies of more than `limit` ops:
    walking each block in order, the size a generic would reach is its own body plus that
    of the single-use generics feeding it (what fusion pulls in); where that passes the
    limit, its inputs from such producers go through a cast to a dynamic shape and back,
    which the fusion pass does not look through (canonicalize folds the pair after)."""
    with root.context, ir.Location.unknown():
        size = {}  # generic op -> body ops it would hold after fusion
        for op in _walk(root, "linalg.generic"):
            op = op.operation
            own = len(op.regions[0].blocks[0].operations)
            feeding = []
            for i, v in enumerate(op.operands[:len(op.operands) - len(op.results)]):
                p = getattr(v.owner, "operation", None)
                if p is not None and p.name == "linalg.generic" and _single_use(v):
                    feeding.append((i, v, size.get(p, 0)))
            total = own + sum(n for _, _, n in feeding)
            if total > limit:
                for i, v, _ in feeding:
                    t = ir.RankedTensorType(v.type)
                    if t.rank == 0:
                        continue
                    dyn = ir.RankedTensorType.get([ir.ShapedType.get_dynamic_size()] * t.rank, t.element_type)
                    with ir.InsertionPoint(op):
                        back = tensor.CastOp(t, tensor.CastOp(dyn, v).result).result
                    op.operands[i] = back
                total = own + sum(n for _, v, n in feeding if ir.RankedTensorType(v.type).rank == 0)
            size[op] = total


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
