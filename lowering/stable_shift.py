"""`mirax-stable-shift`: the row max of logsumexp and softmax computed only for the rows
that need it.

`log(sum(exp(x - m))) + m` and `exp(x - m) / sum(exp(x - m))` do not depend on `m`: the
row max is there only so that no exp overflows (and the largest term is 1, so the sum
does not underflow either). Any shift `c` close enough to the max does as well, and the
max pass costs a read of the row and a `maximumf` an element (Zen 3, 4096^2 kernels
without it: logsumexp 3.7 -> 3.25 ms, softmax 5.3-5.6 -> 4.1-4.7 ms). This pass marks
(attribute `mirax.stable_shift = "log"` or `"ratio"`) each row-max reduction
(`linalg.generic`, `arith.maximumf` over the last dim) whose result is used only as
such a shift, on linalg on tensors before `mirax-math-approx` (while the exp and log are
still `math` ops):

    %m = max over the row of %x                       (the marked op)
    %v = f(%m)                                        (optional: an op of %m alone, as
                                                       logsumexp's `where(isinf(m), 0, m)`)
    "log":   %s = sum over the row of exp(%x - %v)
             ... log(%s) + %v ...                     (the only uses of %s and %v)
    "ratio": %e = exp(%x - %v); %s = sum over the row of %e
             ... %e / %s or %e * (k / %s) ...         (the only uses of %e but the sum's)

`mirax-fuse-reductions` then rewrites each marked row loop (`shift_rows`, on the row's
linalg ops before they are vectorized): the sum is computed first with the shift `c` =
the max of the row's first chunk of columns (`f` applied to it), and only a row whose
sum is not in [1/2, inf) (an exp overflowed: some element is more than ~88 above `c`;
a NaN or an infinity in the row; `f(c)` far above the row) runs the max and the sum
again, as before, on a branch:

    %c = max over %x[0:W]; %s0 = sum over the row of exp(%x - f(%c))
    %v, %s = scf.if (0.5 <= %s0 < inf) { yield f(%c), %s0 } else { the max, f, the sum }

(softmax's exps are written into the output's row by both: the branch's over the first
ones, and the branch yields that row). With `c` an element of the row, the sum has a
term exp(0) = 1 and every term is at most exp(88): the results are as accurate as with
the max (the terms that underflow are below 2^-126 of the sum). A sum or exps with any
other use (a gradient's) keep their max pass.
"""
from __future__ import annotations

import math

from mlir import ir

from .pass_base import MiraxPass, defining_op, indexing_maps, isa, iterator_kinds, user_op, walk_ops, within

NAME = "mirax-stable-shift"
SHIFT = "mirax.stable_shift"
THRESHOLD = 0.5  # a fast sum below this (or not finite) takes the max branch


def _n_inputs(op):
    return len(op.operands) - len(op.results)


def _body(op):
    return [o.operation for o in op.regions[0].blocks[0].operations]


def _users(v):
    return [user_op(u) for u in v.uses]


def _dims(amap):
    """The dim positions of an affine map's results (None for a non-dim result: a 0)."""
    return [ir.AffineDimExpr(e).position if isa(ir.AffineDimExpr, e) else None for e in amap.results]


def _generic(op):
    return op is not None and op.name == "linalg.generic"


def _row_kinds(n):
    return ["parallel"] * (n - 1) + ["reduction"]


def _is_row_max(op) -> bool:
    """A `linalg.generic` computing the max of its one input over its last dim."""
    if not _generic(op) or len(op.results) != 1 or _n_inputs(op) != 1:
        return False
    kinds = iterator_kinds(op)
    n = len(kinds)
    if n < 2 or kinds != _row_kinds(n):
        return False
    maps = indexing_maps(op)
    if _dims(maps[0]) != list(range(n)) or _dims(maps[1]) != list(range(n - 1)):
        return False
    body = _body(op)
    if len(body) != 2 or body[0].name != "arith.maximumf" or body[1].name != "linalg.yield":
        return False
    args = list(op.regions[0].blocks[0].arguments)
    return set(body[0].operands) == set(args) and body[1].operands[0] == body[0].results[0]


def _exp_of_difference(op, x, v, kinds, out_dims):
    """For a `linalg.generic` of iterator kinds `kinds` reading `x` (identity map) and `v`
    (broadcast along the last dim) into an output indexed by the first `out_dims` dims,
    whose body starts `exp(x - v)`: the exp op and the ops after it, else None."""
    if not _generic(op) or iterator_kinds(op) != kinds or len(op.results) != 1 or _n_inputs(op) != 2:
        return None
    if op.operands[0] != x or op.operands[1] != v:
        return None
    n = len(kinds)
    maps = indexing_maps(op)
    vd = _dims(maps[1])
    if _dims(maps[0]) != list(range(n)) or _dims(maps[2]) != list(range(out_dims)) \
            or [d for d in vd if d is not None] != list(range(n - 1)) or len(vd) > n:
        return None
    ax, av, _ = op.regions[0].blocks[0].arguments
    body = _body(op)
    if len(body) < 3 or body[0].name != "arith.subf" or body[1].name != "math.exp":
        return None
    sub, ex = body[:2]
    if list(sub.operands) != [ax, av] or ex.operands[0] != sub.results[0]:
        return None
    return ex, body[2:]


def _is_sum_of_exp(op, x, v) -> bool:
    """`sum over the last dim of exp(x - v)` (v broadcast along the row), with the row
    dims of the max that made `v`."""
    n = len(iterator_kinds(op)) if _generic(op) else 0
    found = _exp_of_difference(op, x, v, _row_kinds(n), n - 1) if n >= 2 else None
    if found is None:
        return False
    ex, rest = found
    aout = op.regions[0].blocks[0].arguments[2]
    if [o.name for o in rest] != ["arith.addf", "linalg.yield"]:
        return False
    add, y = rest
    return set(add.operands) == {ex.results[0], aout} and y.operands[0] == add.results[0]


def _single_uses(op, a, b):
    """For an elementwise `linalg.generic` reading `a` and `b` once each, their block
    arguments and the one op of its body using each: (arg_a, user_a, arg_b, user_b),
    else None."""
    if not _generic(op) or any(k != "parallel" for k in iterator_kinds(op)):
        return None
    ins = list(op.operands[:_n_inputs(op)])
    if ins.count(a) != 1 or ins.count(b) != 1:
        return None
    args = op.regions[0].blocks[0].arguments
    arg_a, arg_b = args[ins.index(a)], args[ins.index(b)]
    ua, ub = [user_op(u) for u in arg_a.uses], [user_op(u) for u in arg_b.uses]
    return (arg_a, ua[0], arg_b, ub[0]) if len(ua) == 1 and len(ub) == 1 else None


def _is_log_plus(op, s, v) -> bool:
    """An elementwise `linalg.generic` reading `s` and `v` once each, whose body uses
    them only as `log(s) + v` (then anything)."""
    found = _single_uses(op, s, v)
    if found is None or found[1].name != "math.log":
        return False
    _, log, _, add = found
    after = [user_op(u) for u in log.results[0].uses]
    return len(after) == 1 and after[0] == add and add.name == "arith.addf"


def _is_exp_of_shift(op, x, v) -> bool:
    """`exp(x - v)` over the row (v broadcast along it): softmax's numerators."""
    n = len(iterator_kinds(op)) if _generic(op) else 0
    found = _exp_of_difference(op, x, v, ["parallel"] * n, n) if n >= 2 else None
    if found is None or op.results[0].type != x.type:
        return False
    ex, rest = found
    return [o.name for o in rest] == ["linalg.yield"] and rest[0].operands[0] == ex.results[0]


def _is_row_sum(op, e) -> bool:
    """The sum of `e` over its last dim."""
    n = len(iterator_kinds(op)) if _generic(op) else 0
    if n < 2 or iterator_kinds(op) != _row_kinds(n) or len(op.results) != 1 or _n_inputs(op) != 1 \
            or op.operands[0] != e:
        return False
    maps = indexing_maps(op)
    if _dims(maps[0]) != list(range(n)) or _dims(maps[1]) != list(range(n - 1)):
        return False
    ain, aout = op.regions[0].blocks[0].arguments
    body = _body(op)
    return ([o.name for o in body] == ["arith.addf", "linalg.yield"] and set(body[0].operands) == {ain, aout}
            and body[1].operands[0] == body[0].results[0])


def _is_ratio(op, e, s) -> bool:
    """An elementwise `linalg.generic` reading `e` and `s` once each, whose body uses them
    only as `e / s` or `e * (k / s)` (then anything): softmax's normalisation."""
    found = _single_uses(op, e, s)
    if found is None:
        return False
    a_e, ue, a_s, inv = found
    if ue == inv:
        return ue.name == "arith.divf" and list(ue.operands) == [a_e, a_s]
    if inv.name != "arith.divf" or inv.operands[1] != a_s or inv.operands[0] in (a_e, a_s):
        return False
    after = [user_op(u) for u in inv.results[0].uses]
    return len(after) == 1 and after[0] == ue and ue.name == "arith.mulf"


LOG, RATIO = "log", "ratio"


def shift_pattern(gmax):
    """How a row max is used only as a shift (see the module docstring), or None:
    (LOG, chain, sum): `log(sum(exp(x - v))) + v`, `chain` the op making `v` from the max
    (or None); (RATIO, chain, exp, sum): `exp(x - v) / sum(exp(x - v))`, softmax."""
    if not _is_row_max(gmax):
        return None
    m, x = gmax.results[0], gmax.operands[0]
    users = _users(m)
    chain = None
    if len(users) == 1 and _generic(users[0]) and all(k == "parallel" for k in iterator_kinds(users[0])) \
            and _n_inputs(users[0]) == 1 and len(users[0].results) == 1:
        chain = users[0]
    v = chain.results[0] if chain is not None else m
    vusers = _users(v)
    sums = [u for u in vusers if _is_sum_of_exp(u, x, v)]
    if len(sums) == 1:
        s = sums[0].results[0]
        if not _users(s) or not all(_is_log_plus(u, s, v) for u in _users(s)):
            return None
        if any(u != sums[0] and not _is_log_plus(u, s, v) for u in vusers):
            return None
        return LOG, chain, sums[0]
    if len(vusers) != 1 or not _is_exp_of_shift(vusers[0], x, v):
        return None
    gexp = vusers[0]
    e = gexp.results[0]
    sums = [u for u in _users(e) if _is_row_sum(u, e)]
    if len(sums) != 1:
        return None
    s = sums[0].results[0]
    rest = [u for u in _users(e) if u != sums[0]]
    if not rest or not all(_is_ratio(u, e, s) for u in rest) or set(_users(s)) != set(rest):
        return None
    return RATIO, chain, gexp, sums[0]


class MiraxStableShift(MiraxPass):
    name = NAME
    summary = ("Mark row maxes used only as logsumexp's shift (mirax-fuse-reductions then computes "
               "them only for rows whose sum with a cheap shift over- or underflows)")

    def run(self, module: ir.Operation):
        with module.context:
            for op in walk_ops(module, lambda n: n == "linalg.generic"):
                found = shift_pattern(op)
                if found is not None:
                    op.attributes[SHIFT] = ir.StringAttr.get(found[0])


# ---- in mirax-fuse-reductions: the row loop's linalg ops, before vectorization -------------

def _row_pattern(forall):
    """The marked max of row loop `forall` and its users, from their shapes (the bodies
    are arithmetic by now): (kind, ops to move onto the branch, fills, gmax, chain, exp,
    sum), or None."""
    body = forall.regions[0].blocks[0]
    marked = [o.operation for o in body.operations
              if o.operation.name == "linalg.generic" and SHIFT in o.operation.attributes]
    if len(marked) != 1:
        return None
    gmax = marked[0]
    kind = ir.StringAttr(gmax.attributes[SHIFT]).value
    m, xr = gmax.results[0], gmax.operands[0]
    users = _users(m)
    chain = users[0] if len(users) == 1 and _generic(users[0]) and _n_inputs(users[0]) == 1 \
        and "reduction" not in iterator_kinds(users[0]) else None
    v = chain.results[0] if chain is not None else m
    gexp = None
    if kind == RATIO:
        exps = [u for u in _users(v)
                if _generic(u) and "reduction" not in iterator_kinds(u) and u.results[0].type == xr.type]
        if len(exps) != 1:
            return None
        gexp = exps[0]
        summed = gexp.results[0]
    else:
        summed = v
    sums = [u for u in _users(summed) if _generic(u) and "reduction" in iterator_kinds(u)]
    if len(sums) != 1:
        return None
    gsum = sums[0]
    fills = [defining_op(gmax.operands[1]), defining_op(gsum.operands[len(gsum.operands) - 1])]
    moved = [fills[0], gmax] + [o for o in (chain, gexp) if o is not None] + [fills[1], gsum]
    if any(o is None or o.parent != forall for o in moved) or any(f.name != "linalg.fill" for f in fills):
        return None
    return kind, moved, fills, gmax, chain, gexp, gsum


def shift_rows(forall, width, mark_sum, mark_small):
    """In the row loop `forall` (its linalg ops on one row, see the module docstring),
    the marked max computed only on the branch of rows whose sum with the shift from the
    first `width` columns is not in [THRESHOLD, inf). `mark_sum(op)` marks the new sum
    as a reduction to split and vectorize, `mark_small(op)` the first chunk's max (one
    value a row) to vectorize whole. Returns whether it rewrote anything."""
    from mlir.dialects import arith, linalg, scf, tensor
    found = _row_pattern(forall)
    if found is None:
        return False
    kind, moved, fills, gmax, chain, gexp, gsum = found
    m, xr = gmax.results[0], gmax.operands[0]
    v = chain.results[0] if chain is not None else m
    s = gsum.results[0]
    # the values the rest of the row reads: the shift and the sum, or the exps and the sum
    out = [v, s] if kind == LOG else [gexp.results[0], s]
    body = forall.regions[0].blocks[0]
    ops = [o.operation for o in body.operations]
    pos = {o: i for i, o in enumerate(ops)}
    if any(u not in moved and (u not in pos or pos[u] < pos[gsum]) for r in out for u in _users(r)):
        return False  # (an outside use before the sum: it could not read the branch's result)
    inner = [r for r in [m, v] + [f.results[0] for f in fills] if r not in out]
    if any(u not in moved for r in inner for u in _users(r)):
        return False
    rt = ir.RankedTensorType(xr.type)
    if not rt.has_static_shape:
        return False
    k = min(width, rt.shape[-1])
    with ir.InsertionPoint(gsum), gsum.location:
        r = rt.rank
        first = tensor.ExtractSliceOp(ir.RankedTensorType.get(list(rt.shape[:-1]) + [k], rt.element_type), xr,
                                      [], [], [], [0] * r, list(rt.shape[:-1]) + [k], [1] * r).result
        fill_c = fills[0].clone()
        c = gmax.clone()
        c.operands[0], c.operands[1] = first, fill_c.results[0]
        del c.attributes[SHIFT]
        mark_small(c)
        v0 = c.results[0]
        if chain is not None:
            ct = ir.RankedTensorType(chain.results[0].type)
            empty = tensor.EmptyOp(list(ct.shape), ct.element_type).result
            ch = chain.clone()
            ch.operands[0], ch.operands[1] = v0, empty
            v0 = ch.results[0]
        fill_s = fills[1].clone()
        if kind == LOG:
            s0 = gsum.clone()
            s0.operands[1], s0.operands[2] = v0, fill_s.results[0]
            keep = v0
        else:  # (the exps go where the branch's would: the output's row, rewritten there)
            e0 = gexp.clone()
            e0.operands[1] = v0
            s0 = gsum.clone()
            s0.operands[0], s0.operands[1] = e0.results[0], fill_s.results[0]
            keep = e0.results[0]
        mark_sum(s0)
        sv = _first(s0.results[0])
        low = arith.CmpFOp(arith.CmpFPredicate.OGE, sv, arith.ConstantOp(sv.type, THRESHOLD).result).result
        high = arith.CmpFOp(arith.CmpFPredicate.OLT, sv, arith.ConstantOp(sv.type, math.inf).result).result
        ok = arith.AndIOp(low, high).result
        # the one-element values through the branch as scalars: yielded buffers of their
        # own would need run-time ownership flags in buffer deallocation, whose i1
        # memrefs LLVM's lowering rejects (the exps' row is the output's: not owned)
        et = sv.type
        first_t = et if kind == LOG else out[0].type
        branch = scf.IfOp(ok, [first_t, et], has_else=True)
    with ir.InsertionPoint(branch.then_block), gsum.location:
        scf.YieldOp([_first(keep) if kind == LOG else keep, sv])
    with ir.InsertionPoint(branch.else_block), gsum.location:
        y = scf.YieldOp([])
    for o in moved:
        o.move_before(y.operation)
    if kind == RATIO:  # the branch's exps overwrite the first ones: one buffer, no copy
        gexp.operands[len(gexp.operands) - 1] = keep
    with ir.InsertionPoint(y), gsum.location:
        scf.YieldOp([_first(out[0]) if kind == LOG else out[0], _first(s)])
    y.operation.erase()
    with ir.InsertionPoint.after(branch), gsum.location:
        new = []
        for old, res in zip(out, branch.results):
            if old.type == res.type:
                new.append(res)
                continue
            ot = ir.RankedTensorType(old.type)
            new.append(linalg.fill(res, outs=[tensor.EmptyOp(list(ot.shape), ot.element_type).result]))
    for old, res in zip(out, new):
        for u in list(old.uses):
            owner = user_op(u)
            if not within(owner, branch.operation):
                owner.operands[u.operand_number] = res
    return True


def _first(t):
    """The element of a one-element tensor `t` (at the insertion point)."""
    from mlir.dialects import arith, tensor
    zero = arith.ConstantOp(ir.IndexType.get(), 0).result
    return tensor.ExtractOp(t, [zero] * ir.RankedTensorType(t.type).rank).result
