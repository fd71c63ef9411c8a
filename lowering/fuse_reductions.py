"""`mirax-fuse-reductions`: row-wise kernels (softmax, layer norm, logsumexp) as one loop.

After `mirax-fuse` a softmax is still four kernels over the whole array (max, exp(x - m),
sum, scale by the sum's reciprocal) because the exp has two consumers. This pass finds
each group of linalg ops connected by def-use edges that all index the same outer
parallel loop (the rows) and hold at least one reduction, tiles the group's last op into
row blocks (`transform.structured.tile_using_forall ... tile_sizes [R, 0]`) and pulls
every other op of the group into that loop, greedily from the consumer up
(`transform.structured.fuse_into_containing_op`), so each block of R rows is read from
memory once and its intermediates stay in cache. A connected set with several roots (a
training step's layer norm, whose centred rows the backward pass reads too) is split
first into parts of one root each (`_single_root_parts`). Blocks are single rows (the tuning
table's `block_elements`): a 4096-column row is 16 KiB, in L1 for every pass after the
first.

The row loop is then vectorized in chunks of W columns (W = the tuning table's
`partial_sums`, 4 vectors of the host's f32 lanes: 64 on AVX-512, 32 on AVX2; halved,
down to one vector, while a row is shorter than two chunks). Each
reduction over the columns is split into W partial results
(`tile_reduction_using_for`), vectorized, and its accumulator hoisted out of the column
loop (`hoist_loop_invariant_subsets`): a vector carried in registers, reduced to one value
by a tree (`vector.reduction`, reassociated) once a row. The elementwise ops over whole
rows become loops over W-column chunks (`tile_using_for`, vectorized); the per-row
scalars (the max, a mean's divisor, rsqrt of a variance) are computed once a row outside
those loops (`apply_licm`). A last partial chunk is peeled off (`loop.peel`) and
vectorized at its own width. softmax then reads (64-wide chunks, abridged):

    scf.forall (%i) in (4096) shared_outs(%o = %e) -> (tensor<4096x4096xf32>) {
      %m = scf.for %k = 0 to 4096 step 64 iter_args(%a = -inf) -> (vector<1x64xf32>) {
        %x = vector.transfer_read %arg0[%i, %k] : vector<64xf32>
        ... arith.maximumf %x, %a : vector<64xf32> ...                            // max
      }
      %mx = vector.reduction <maximumf>, %m
      %row = tensor.extract_slice %o[%i, 0] [1, 4096] [1, 1]
      %ex = scf.for %k = 0 to 4096 step 64 iter_args(%r = %row) -> (tensor<1x4096xf32>) {
        ... exp(x - mx) ... vector.transfer_write %e, %r[0, %k]                    // exp into the output row
      }
      %s = scf.for ... iter_args(%a = 0) -> (vector<1x64xf32>) { ... arith.addf ... }  // sum
      %t = vector.reduction <add>, %s fastmath<reassoc>    (%rt = 1 / %t, once a row)
      %d = scf.for %k = 0 to 4096 step 64 iter_args(%r = %ex) -> (tensor<1x4096xf32>) {
        %v = vector.transfer_read %r[0, %k] ... arith.mulf %v, %rt ... transfer_write %q, %r[0, %k]  // in place
      }
      scf.forall.in_parallel { tensor.parallel_insert_slice %d into %o[%i, 0] [1, 4096] [1, 1] }
    }

An elementwise op that does not read its output and has a same-shaped input dead after
it (softmax's scaling of the exp, layer norm's scaling of x - mean) writes into that input
(`_reuse_inputs`): bufferized, the exp goes into the output's row and the scaling rewrites
it there, with no temporary row. When every op's loops but the last are rows (a softmax
over the last axis of a 3-d or 4-d array: `_row_dims`), the row loop runs over all those
dims, one row an iteration (`scf.forall (%i, %j) in (B, S)`), vectorized the same way.
Groups with another non-row dim (a reduction over a middle axis) or whose vectorization
does not apply keep a row loop over the first dim and split reductions with LLVM's loop
vectorizer (rows of at least the tuning table's `split_min` columns split; shorter rows
keep one accumulator).
The forall becomes OpenMP threads in the CPU pipeline (one row block an iteration,
statically scheduled). After bufferization `mirax-row-memory` (below) prefetches each
row's next rows during its busiest column loop, puts the row loop's small buffers on the
stack and, on AVX-512, scales the vectorized exps by 2^m with one `vscalefps` on the
float m (approx.scale_with_ldexp; `llvm.ldexp` where the vectors are not whole 512-bit
registers) instead of two exponent-field multiplies;
elsewhere (AVX2, NEON) each vectorized exp runs on a branch without its clamp and with
an integer 2^m scaling when all of its lanes have |x| < 86 (approx.split_exp_range). An
exp that is only summed (logsumexp's) is 2^t, t = x log2(e), on AVX-512 by vreduceps and
vscalefps (approx.reduced_exps), elsewhere on that branch by rounding t with 1.5 * 2^23
(2 vector ops fewer); a written one (softmax's) keeps Cody-Waite's exact reduction.

A row max that `mirax-stable-shift` marked (used only as softmax's or logsumexp's shift)
is computed only on a branch of the rows that need it (`stable_shift.shift_rows`, before
the row loop is vectorized): the row is summed with its first chunk's max as the shift.

Each group is scheduled in a scratch function holding a copy of its ops (`scratch.Scratch`)
and moved back, so that the transform scripts' cost follows the group, not the function.

Groups below the tuning table's `min_elements` (`lowering/tuning.py`, "row_fusion") are
left alone, so eager single-op kernels of small arrays never start the transform
interpreter; a schedule that does not apply leaves the module as it was.
"""
from __future__ import annotations

import math
import os
import warnings

from mlir import ir

from . import host_cpu, tuning
from .approx import reduced_exps, scale_with_ldexp, split_exp_range
from .pass_base import (MiraxPass, address_of, block_position, body_ops, constant_int, defining_op, enclosing,
                        function_key, indexing_maps, isa, iterator_kinds, op_id, reassociation, reassociation_attr,
                        run_transform, user_op, walk_ops, within)
from .scratch import Scratch
from .stable_shift import SHIFT, shift_rows

NAME = "mirax-fuse-reductions"
ROOT, PROD, RED = "mirax.fr_root", "mirax.fr_producer", "mirax.fr_reduction"
EW, SMALL, FORALL, REM = "mirax.fr_elementwise", "mirax.fr_small", "mirax.fr_forall", "mirax.fr_rest"
MARKS = (ROOT, PROD, RED, EW, SMALL, FORALL, REM, SHIFT)
KINDS = ("linalg.generic", "linalg.fill")
# combiners tile_reduction_using_for knows the identity of
COMBINERS = {"arith.addf", "arith.mulf", "arith.maximumf", "arith.minimumf", "arith.addi", "arith.muli",
             "arith.maxsi", "arith.minsi", "arith.maxui", "arith.minui", "arith.andi", "arith.ori",
             "arith.xori"}


def _shape(t):
    try:
        rt = ir.RankedTensorType(t)
    except ValueError:
        return None
    return list(rt.shape) if rt.has_static_shape else None


def _extents(op):
    """Loop extents of a generic (static shapes only), or None."""
    ext = {}
    for v, m in zip(op.operands, indexing_maps(op)):
        s = _shape(v.type)
        if s is None:
            return None
        for i, e in enumerate(m.results):
            if isinstance(e, ir.AffineDimExpr):
                ext[e.position] = s[i]
    n = len(op.attributes["iterator_types"])
    return [ext.get(i) for i in range(n)] if len(ext) == n else None


def _unit_groups(rank, kept):
    """A collapse_shape's reassociation that drops the dims of `rank` not in `kept` (each
    goes with the next kept dim, trailing ones with the last; none kept: rank 0)."""
    groups, cur = [], []
    for i in range(rank):
        cur.append(i)
        if i in kept:
            groups.append(cur)
            cur = []
    if cur and groups:
        groups[-1].extend(cur)
    return groups


def _collapsed(v, groups):
    """`v` collapsed by `groups`: the source of an expand_shape that made it by them."""
    from mlir.dialects import tensor
    d = defining_op(v)
    if d is not None and d.name == "tensor.expand_shape" and reassociation(d) == groups:
        return d.operands[0]
    shape = _shape(v.type)
    t = ir.RankedTensorType.get([math.prod(shape[i] for i in g) for g in groups], ir.RankedTensorType(v.type).element_type)
    return tensor.CollapseShapeOp(t, v, reassociation_attr(groups)).result


def drop_unit_dims(root) -> int:
    """Reductions with loops of extent 1 lose them (the operands collapsed, the result
    expanded back), so that the row reduction is one the vectorization below takes:
    `x @ w.T` with w of shape (1, K) became a 4096 x 1 x 4096 x 1 generic with two
    reduction loops, left scalar (6.5 ms at 4096^2; numpy 1.4; `x @ v` with v 1-d 1.4).
    Generics whose maps are not plain dims, or whose bodies read their indices, stay.
    Returns how many changed."""
    from mlir.dialects import tensor
    done = 0
    for op in walk_ops(root, lambda n: n == "linalg.generic"):
        kinds, ext = iterator_kinds(op), _extents(op)
        if "reduction" not in kinds or ext is None or 1 not in ext:
            continue
        keep = [d for d, e in enumerate(ext) if e != 1]
        maps = indexing_maps(op)
        if (not any(kinds[d] == "reduction" for d in keep) or len(op.results) != 1
                or any(not isinstance(e, ir.AffineDimExpr) for m in maps for e in m.results)
                or any(o.name == "linalg.index" for o in body_ops(op))):
            continue
        pos = {d: i for i, d in enumerate(keep)}
        new_maps, operands, dropped = [], [], []
        with ir.InsertionPoint(op), op.location:
            for v, m in zip(op.operands, maps):
                dims = [ir.AffineDimExpr(e).position for e in m.results]
                kept = [i for i, d in enumerate(dims) if d in pos]
                groups = _unit_groups(len(dims), kept) if len(kept) < len(dims) else None
                operands.append(v if groups is None else _collapsed(v, groups))
                new_maps.append(ir.AffineMap.get(len(keep), 0, [ir.AffineDimExpr.get(pos[dims[i]]) for i in kept]))
                dropped.append(groups)
        out_groups = dropped[-1]  # (the output's)
        new = op.clone(ir.InsertionPoint(op))
        for i, v in enumerate(operands):
            new.operands[i] = v
        new.attributes["indexing_maps"] = ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in new_maps])
        new.attributes["iterator_types"] = ir.ArrayAttr.get([op.attributes["iterator_types"][d] for d in keep])
        new.results[0].set_type(operands[-1].type)
        result = new.results[0]
        if out_groups is not None:
            with ir.InsertionPoint(op), op.location:
                shape = _shape(op.results[0].type)
                result = tensor.ExpandShapeOp(op.results[0].type, result, reassociation_attr(out_groups), [], shape).result
        op.results[0].replace_all_uses_with(result)
        op.erase()
        done += 1
    return done


def _is_row_op(op, rows, inside):
    """Does `op` index `rows` rows with its loop 0, on every operand it shares with the
    group (`inside(value)`) and on its outputs?"""
    if op.name == "linalg.fill":
        s = _shape(op.results[0].type)
        return bool(s) and s[0] == rows
    kinds = iterator_kinds(op)
    if not kinds or kinds[0] != "parallel":  # a 0-d op has no loop to share
        return False
    ext = _extents(op)
    if ext is None or ext[0] != rows:
        return False
    n_in = len(op.operands) - len(op.results)
    for k, (v, m) in enumerate(zip(op.operands, indexing_maps(op))):
        if k < n_in and not inside(v):
            continue
        r = m.results
        if not r or not isinstance(r[0], ir.AffineDimExpr) or ir.AffineDimExpr(r[0]).position != 0:
            return False
        if any(isinstance(e, ir.AffineDimExpr) and ir.AffineDimExpr(e).position == 0 for e in r[1:]):
            return False
    return True


def _row_dims(op, ext, inside):
    """How many leading loops of `op` (at most len(ext)) are rows of the group: parallel,
    of the group's extents `ext`, indexing the same position of every operand it shares
    with the group and of its outputs, and only that position."""
    if op.name == "linalg.fill":
        s = _shape(op.results[0].type) or []
        d = 0
        while d < min(len(s), len(ext)) and s[d] == ext[d]:
            d += 1
        return d
    kinds, oext = iterator_kinds(op), _extents(op)
    if oext is None:
        return 0
    n_in = len(op.operands) - len(op.results)
    shared = [m for k, (v, m) in enumerate(zip(op.operands, indexing_maps(op))) if k >= n_in or inside(v)]
    d = 0
    while d < min(len(kinds), len(ext)) and kinds[d] == "parallel" and oext[d] == ext[d]:
        ok = True
        for m in shared:
            r = list(m.results)
            if len(r) <= d or not isinstance(r[d], ir.AffineDimExpr) or ir.AffineDimExpr(r[d]).position != d:
                ok = False
                break
            if any(isinstance(e, ir.AffineDimExpr) and ir.AffineDimExpr(e).position == d
                   for j, e in enumerate(r) if j != d):
                ok = False
                break
        if not ok:
            break
        d += 1
    return d


def _combiner_ok(op):
    """One output whose payload is `out = combiner(f(ins), out)`: what tile_reduction_using_for
    splits into partial results."""
    if len(op.results) != 1:
        return False
    block = op.regions[0].blocks[0]
    out = block.arguments[len(block.arguments) - 1]
    users = [u.owner for u in out.uses]
    if len(users) != 1:
        return False
    comb = users[0]
    comb = comb.operation if not isinstance(comb, ir.Block) else None
    if comb is None or comb.name not in COMBINERS:
        return False
    ops = list(block.operations)
    y = ops[-1].operation
    return y.name == "linalg.yield" and y.operands[0].owner == comb


def _value_owner(v):
    o = v.owner
    return None if isinstance(o, ir.Block) else o.operation


def _gathers(op) -> bool:
    """Whether linalg op `op`'s body reads a tensor with `tensor.extract`."""
    return any(o.operation.name == "tensor.extract" for r in op.regions for b in r.blocks for o in b.operations)


def groups(block):
    """Row groups of a block: (root, producers consumer-first, reductions, rows,
    iterations, lead): the ops' first `lead` loops are all rows (see `_row_dims`), the
    first one in every case."""
    # (a generic that reads a tensor by index, a gather, is no row op: vectorizing the row
    # loop would fail on it and leave the whole loop scalar)
    ops = [op.operation for op in block.operations if op.operation.name in KINDS and not _gathers(op.operation)]
    if not ops:
        return []
    idx = {}
    for i, op in enumerate(ops):
        idx[op] = i
    parent = list(range(len(ops)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i
    for i, op in enumerate(ops):
        for v in op.operands:
            o = _value_owner(v)
            # a one-element value (a variance's mean, a full reduction's result) is a scalar that
            # every row reads, computed before the rows' loop: no edge of the group
            shape = _shape(v.type)
            if o is not None and o in idx and not (shape is not None and all(d == 1 for d in shape)):
                parent[find(i)] = find(idx[o])
    comps = {}
    for i in range(len(ops)):
        comps.setdefault(find(i), []).append(i)
    parts = []
    for members in comps.values():
        parts.extend(_single_root_parts(members, ops, idx, block))

    def group(members):
        reds = [i for i in members if ops[i].name == "linalg.generic" and "reduction" in iterator_kinds(ops[i])]
        if not reds:
            return None
        mset = set(members)

        def inside(v, mset=mset):
            o = _value_owner(v)
            return o is not None and o in idx and idx[o] in mset
        users_in = {i: 0 for i in members}
        for i in members:
            for v in ops[i].operands:
                o = _value_owner(v)
                if o is not None and o in idx and idx[o] in mset:
                    users_in[idx[o]] += 1
        roots = [i for i in members if users_in[i] == 0]
        if len(roots) != 1:
            return None
        root = ops[roots[0]]
        if root.name != "linalg.generic":
            return None
        ext = _extents(root)
        if not ext or "parallel" not in iterator_kinds(root):
            # a 0-d result (a full reduction): no rows to block; of row results (a full
            # reduction as rows, then one: dialect/reduction.py), the rows are the rest (its
            # init, one element, was no edge)
            rest = [i for i in members if i != roots[0]]
            return group(rest) if rest else None
        rows = ext[0]
        if not all(_is_row_op(ops[i], rows, inside) for i in members):
            return None
        iters = max(math.prod(_extents(ops[i]) or [0]) for i in reds)
        iters = max(iters, math.prod(ext))
        lead = min(_row_dims(ops[i], ext, inside) for i in members)
        prods = sorted((i for i in members if i != roots[0]), reverse=True)
        return (root, [ops[i] for i in prods], [ops[i] for i in reds], rows, iters, max(lead, 1))
    return [g for g in (group(m) for m in parts) if g is not None]


def _rank(op):
    s = _shape(op.results[0].type)
    return None if s is None else len(s)


def _single_root_parts(members, ops, idx, block):
    """Split a connected set of row ops (indices into `ops`, in block order) into parts of
    one root each, the only form `group` fuses. One root: the set as it is. Several (a
    training step's layer norm: its centred and its scaled rows go on to the backward
    pass, its output to a matmul): each root, latest first, takes the producers not yet
    taken whose every user is in its part or comes after it in the block. The fused loop
    stands where its root stood and hands those later users the producer's rows as extra
    results (`fuse_into_containing_op` yields the fused result only, inserted where the
    root's rows go: a producer of several results, or of another rank than the root's,
    joins when all its users are in the part), so nothing is computed twice; a
    producer whose value is needed earlier stays out of the part (in a part of its own, or
    left as it was)."""
    mset = set(members)

    def users(i):
        return [u.owner.operation for res in ops[i].results for u in res.uses]

    def inner_producers(i):
        return {idx[o] for v in ops[i].operands
                if (o := _value_owner(v)) is not None and o in idx and idx[o] in mset}
    if sum(1 for i in members if not any(idx.get(u) in mset for u in users(i))) <= 1:
        return [members]
    pos = {op_id(op): k for k, op in enumerate(block.operations)}
    taken, parts = set(), []
    for r in sorted(members, reverse=True):
        if r in taken:
            continue
        part, limit = {r}, pos[op_id(ops[r])]
        taken.add(r)
        todo = inner_producers(r)
        while todo:
            p = max(todo)  # the latest first: its users in the part are all decided
            todo.discard(p)
            if p in taken:
                continue
            # (upstream hands later users the fused result only, not a producer's other
            # results, with offsets of the root's rank: it must match)
            later = len(ops[p].results) == 1 and _rank(ops[p]) == _rank(ops[r])
            if all(idx.get(u) in part or (later and (block_position(u, pos) or -1) > limit) for u in users(p)):
                part.add(p)
                taken.add(p)
                todo |= inner_producers(p) - taken
        parts.append(sorted(part))
    return parts


def _private_fills(block):
    """One `linalg.fill` per user: CSE merges equal fills (the zero init of a variance's
    two row sums), which joined two row groups into one with two roots, fused as neither."""
    for op in list(block.operations):
        op = op.operation
        if op.name != "linalg.fill":
            continue
        for use in list(op.results[0].uses)[1:]:
            twin = op.clone(ir.InsertionPoint(op))
            use.owner.operands[use.operand_number] = twin.results[0]


def row_block(rows, row_elems, threads):
    """Rows per block: the largest divisor of `rows` whose block holds at most the tuning
    table's `block_elements`, leaving at least `threads` blocks."""
    cfg = tuning.table()["row_fusion"]
    cap = max(1, min(cfg["block_elements"] // max(row_elems, 1), rows // max(threads, 1) or 1))
    for r in range(cap, 0, -1):
        if rows % r == 0:
            return r
    return 1


ANY = "!transform.any_op"
FOR = '!transform.op<"scf.for">'


def _wrap(lines) -> str:
    body = "\n".join(lines)
    return ("module attributes {transform.with_named_sequence} {\n"
            "  transform.named_sequence @__transform_main(%arg0: !transform.any_op {transform.readonly}) {\n"
            f"{body}\n    transform.yield\n  }}\n}}\n")


def _fuse_steps(root_id, tiles, producers) -> tuple[list[str], str]:
    """Tile the root into row blocks (`tiles`: the root's tile sizes) and fuse the
    producers in; returns the steps and the handle of the forall."""
    ts = ", ".join(map(str, tiles))
    L = [f"    %root = transform.structured.match attributes {{{ROOT} = {root_id} : i64}} in %arg0 "
         f": ({ANY}) -> {ANY}",
         f"    %tiled, %f0 = transform.structured.tile_using_forall %root tile_sizes [{ts}] "
         f": ({ANY}) -> ({ANY}, {ANY})"]
    for k, pid in enumerate(producers):
        L.append(f"    %p{k} = transform.structured.match attributes {{{PROD} = {pid} : i64}} in %arg0 "
                 f": ({ANY}) -> {ANY}")
        L.append(f"    %q{k}, %f{k + 1} = transform.structured.fuse_into_containing_op %p{k} into %f{k} "
                 f": ({ANY}, {ANY}) -> ({ANY}, {ANY})")
        # (a producer is fused once per use in the loop: without CSE after each, every copy
        # takes its own copies of the next producers, and the loop grows multiplicatively)
        L.append(f"    transform.apply_cse to %f{k + 1} : {ANY}")
    return L, f"%f{len(producers)}"


def _split_steps(forall, split) -> list[str]:
    """Each marked reduction into `sizes` partial results (a loop over column chunks)."""
    L = []
    for k, (rid, sizes) in enumerate(split):
        L.append(f"    %r{k} = transform.structured.match attributes {{{RED} = {rid} : i64}} in {forall} "
                 f": ({ANY}) -> {ANY}")
        L.append(f"    %ri{k}, %rs{k}, %rc{k}, %rf{k} = transform.structured.tile_reduction_using_for %r{k} "
                 f"by tile_sizes = [{', '.join(map(str, sizes))}] : ({ANY}) -> ({ANY}, {ANY}, {ANY}, {ANY})")
    return L


def script(root_id, tiles, producers, split) -> str:
    """The transform script of one group left to LLVM's loop vectorizer: the row-block
    loop with the producers fused in and the reductions split (`split`: [(mark, tile
    sizes)])."""
    L, forall = _fuse_steps(root_id, tiles, producers)
    return _wrap(L + _split_steps(forall, split))


def fuse_script(root_id, tiles, producers) -> str:
    """First half of a vectorized group: the row-block loop, one copy of each producer
    (fused once per consumer, CSE'd after each: `_fuse_steps`)."""
    return _wrap(_fuse_steps(root_id, tiles, producers)[0])


def _peeled(loop, tag, cols, width):
    """Steps peeling the partial last chunk off `loop` (when `width` does not divide
    `cols`); returns (steps, handle of the loop over whole chunks)."""
    if cols % width == 0:
        return [], loop
    return [f"    %c{tag} = transform.cast {loop} : {ANY} to {FOR}",
            f"    %m{tag}, %e{tag} = transform.loop.peel %c{tag} : ({FOR}) -> ({ANY}, {ANY})",
            f"    transform.apply_patterns to %m{tag} {{ transform.apply_patterns.canonicalization }} : {ANY}",
            f"    %v{tag} = transform.structured.match ops{{[\"linalg.generic\"]}} in %e{tag} : ({ANY}) -> {ANY}",
            f"    transform.annotate %v{tag} \"{REM}\" : {ANY}"], \
        f"%m{tag}"


def _patterns(*names) -> list[str]:
    inner = "".join(f"      transform.apply_patterns.{n}\n" for n in names)
    return [f"    transform.apply_patterns to %func {{\n{inner}    }} : {ANY}"]


def vector_script(forall_id, split, vec) -> str:
    """Second half of a vectorized group, on the row-block loop marked `forall_id`: the
    marked reductions split into `width` partial results that become vector accumulators
    carried in registers through their column loop (vectorize, then hoist the
    accumulator's read and write out of the loop), their final `width` -> 1 reduce a
    vector reduction; each marked elementwise op over whole rows tiled into `width`-column
    chunks and vectorized; the per-row scalars (fills, 1-element ops) vectorized so that
    they fold to values instead of buffers. Partial last chunks are peeled off and stay
    scalar loops. `vec`: dict(width, cols, lead, elementwise=[marks], small=bool): the
    row block's first `lead` dims are its rows, the last its columns."""
    w, cols = vec["width"], vec["cols"]
    L = [f"    %forall = transform.structured.match attributes {{{FORALL} = {forall_id} : i64}} in %arg0 "
         f": ({ANY}) -> {ANY}",
         f"    %func = transform.get_parent_op %forall {{op_name = \"func.func\"}} : ({ANY}) -> {ANY}"]
    L += _split_steps("%forall", split)
    loops, ew_loops = [], []
    for k in range(len(split)):
        steps, loop = _peeled(f"%rf{k}", f"r{k}", cols, w)
        L += steps
        L.append(f"    %vs{k} = transform.structured.match ops{{[\"linalg.generic\"]}} in {loop} "
                 f": ({ANY}) -> {ANY}")
        L.append(f"    transform.structured.vectorize %vs{k} : {ANY}")
        L.append(f"    transform.structured.vectorize %rc{k} : {ANY}")
        L.append(f"    transform.structured.vectorize %ri{k} : {ANY}")
        loops.append(loop)
    for k, mark in enumerate(vec["elementwise"]):
        L.append(f"    %w{k} = transform.structured.match attributes {{{EW} = {mark} : i64}} in %forall "
                 f": ({ANY}) -> {ANY}")
        ew_tiles = ", ".join(["0"] * vec["lead"] + [str(w)])
        L.append(f"    %wt{k}, %wl{k} = transform.structured.tile_using_for %w{k} tile_sizes [{ew_tiles}] "
                 f": ({ANY}) -> ({ANY}, {ANY})")
        steps, loop = _peeled(f"%wl{k}", f"w{k}", cols, w)
        L += steps
        ew_loops.append(loop)
        L.append(f"    %wv{k} = transform.structured.match ops{{[\"linalg.generic\"]}} in {loop} "
                 f": ({ANY}) -> {ANY}")
        L.append(f"    transform.structured.vectorize %wv{k} : {ANY}")
    if vec["small"]:
        L.append(f"    %small = transform.structured.match attributes {{{SMALL} = {forall_id} : i64}} in %forall "
                 f": ({ANY}) -> {ANY}")
        L.append(f"    transform.structured.vectorize %small : {ANY}")
    L += _patterns("canonicalization", "tensor.fold_tensor_subset_ops_into_vector_transfers")
    L.append(f"    transform.apply_cse to %func : {ANY}")
    if cols % w:  # the peeled last chunks, static now: vectors of cols % width
        L.append(f"    %rem = transform.structured.match attributes {{{REM}}} in %forall : ({ANY}) -> {ANY}")
        L.append(f"    transform.structured.vectorize %rem : {ANY}")
        L += _patterns("canonicalization", "tensor.fold_tensor_subset_ops_into_vector_transfers")
    for loop in loops:  # the accumulators out of the loop: vector iter_args (registers)
        L.append(f"    transform.loop.hoist_loop_invariant_subsets {loop} : {ANY}")
    for loop in loops + ew_loops:  # the row's broadcast scalars (max, mean, ...) too
        L.append(f"    transform.apply_licm to {loop} : {ANY}")
    # one pattern set each: mixed, some of them undo each other forever
    L += _patterns("vector.cast_away_vector_leading_one_dim")
    L += _patterns('vector.lower_multi_reduction lowering_strategy = "innerreduction"')
    L += _patterns("vector.transfer_permutation_patterns", "vector.lower_broadcast")
    L += _patterns("canonicalization")
    return _wrap(L)


def _blocks(root):
    """Blocks of func-like ops (where the groups live)."""
    out = []
    for op in root.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "func.func":
            out.extend(op.regions[0].blocks)
    return out


# ---- each group is scheduled in a module of its own ---------------------------------------
# `fuse_into_containing_op` prints its producer and loop into a diagnostic before it tries
# (upstream builds the message eagerly), and printing an op names every value of the
# top-level op around it: fusing into a training step's function cost O(function) per
# producer, 10-15 ms each, and the vector script's pattern sets ran over the whole
# function once a group. A group's ops are copied into a scratch function of the values
# they read (its payload), scheduled there and moved back: the cost follows the group.

class _Scratch(Scratch):
    """A row group's scratch function (`scratch.Scratch`), keyed for sharing schedules."""

    def key(self, gid, params) -> bytes:
        """What the group's schedule depends on, the same for an identical group elsewhere
        (another layer's layer norm): its function's bytecode without locations, its
        constants in a canonical order, the group's marks numbered from its own id, and
        `params` (its tiles and plan, numbered alike)."""
        def canonical(fn):
            # the constants and empty tensors copied in, first in a canonical order (they
            # come in the order of the group's first uses, which the groups' surroundings
            # decide)
            entry = fn.regions[0].blocks[0]
            leaves = sorted(((str(o).split(" = ", 1)[-1], o.operation) for o in entry.operations  # (no SSA name)
                             if not len(o.operation.operands) and not len(o.operation.regions)),
                            key=lambda t: t[0])
            for _, o in reversed(leaves):
                o.move_before(entry.operations[0].operation)
            i64 = ir.IntegerType.get_signless(64)
            for op in walk_ops(fn, lambda n: n.startswith("linalg.")):
                for a in (ROOT, PROD, RED):
                    if a in op.attributes:
                        op.attributes[a] = ir.IntegerAttr.get(i64, ir.IntegerAttr(op.attributes[a]).value - (
                            gid if a == ROOT else 1000 * gid))
        return function_key(self.entry.owner.operation, canonical) + repr(params).encode()


def _clear(root):
    def visit(op):
        for region in op.regions:
            for block in region.blocks:
                for child in block.operations:
                    child = child.operation
                    for a in MARKS:
                        if a in child.attributes:
                            del child.attributes[a]
                    visit(child)
    visit(root)


def _apply(module, text):
    run_transform(module, ir.Module.parse(text))


def _find_forall(module, gid):
    """The row-block loop of group `gid` (the loop around its tiled root)."""
    for op in walk_ops(module, lambda n: n == "linalg.generic"):
        a = op.attributes[ROOT] if ROOT in op.attributes else None
        if a is not None and ir.IntegerAttr(a).value == gid:
            return enclosing(op, "scf.forall")
    return None


def _reuse_inputs(body):
    """An elementwise op of the row block that does not read its output and has an input
    of the output's type, dead after it (exp(x - m) before softmax's scaling, x - mean
    before layer norm's scaling), writes into that input instead: the op reads and writes
    the same chunk of one buffer, which bufferizes in place (its loop over column chunks
    would otherwise write a fresh buffer, a row copy a row)."""
    ops = [op.operation for op in body.operations]
    pos = {op_id(op): i for i, op in enumerate(ops)}  # (by address: the loop rewrites operands)
    for i, op in enumerate(ops):
        if op.name != "linalg.generic" or "reduction" in iterator_kinds(op) or len(op.results) != 1:
            continue
        n_in = len(op.operands) - 1
        args = op.regions[0].blocks[0].arguments
        if any(True for _ in args[n_in].uses):
            continue
        maps = indexing_maps(op)
        for k in range(n_in):
            v = op.operands[k]
            d = _value_owner(v)
            if (v.type != op.results[0].type or maps[k] != maps[n_in] or d is None
                    or d.name not in ("linalg.generic", "scf.if") or op_id(d) not in pos):
                continue
            users = [u.owner for u in v.uses]
            users = [u.operation if hasattr(u, "operation") else u for u in users]
            if any(op_id(u) not in pos or pos[op_id(u)] > i for u in users):
                continue
            same = [j for j in range(n_in) if op.operands[j] == v]
            if any(maps[j] != maps[n_in] for j in same):  # also read elsewhere than in place
                continue
            for j in same:
                args[j].replace_all_uses_with(args[n_in])
            op.operands[n_in] = v
            break


def _vector_plan(forall, split, widths, rows, gid, i64):
    """Marks the ops of a fused group's row loop to vectorize (see `vector_script`);
    returns its `vec` or None (only row blocks of shape `rows` + [columns] whose split
    reductions share one width)."""
    if not split or len(widths) != 1:
        return None
    (width, cols), = widths
    body = forall.regions[0].blocks[0]
    _reuse_inputs(body)
    marks = []
    # (nested ops too: those stable_shift.shift_rows moved onto its branch)
    for k, op in enumerate(walk_ops(forall, lambda n: n in KINDS)):
        if RED in op.attributes:
            continue
        shape = _shape(op.results[0].type) if len(op.results) == 1 else None
        if shape is None:
            continue
        if op.name == "linalg.generic" and "reduction" in iterator_kinds(op):
            continue
        if math.prod(shape) <= width:
            op.attributes[SMALL] = ir.IntegerAttr.get(i64, gid)
        elif op.name == "linalg.generic" and shape == list(rows) + [cols]:
            op.attributes[EW] = ir.IntegerAttr.get(i64, 1000 * gid + k)
            marks.append(1000 * gid + k)
    # (those marked here, and the first chunk's max stable_shift.shift_rows marked)
    small = any(SMALL in o.attributes for o in walk_ops(forall, lambda n: n in KINDS))
    forall.attributes[FORALL] = ir.IntegerAttr.get(i64, gid)
    return dict(width=width, cols=cols, lead=len(rows), elementwise=marks, small=small)


def _forward_scalars(root):
    """`tensor.extract %t[i..]` of a `vector.transfer_write %v, %d[i..]` of a
    one-element vector becomes `vector.extract %v[0..]` (a vectorized per-row scalar, a
    mean's divisor, read back: no pattern upstream folds it, and the row's 1-element
    tensor would become a heap buffer a row)."""
    for op in walk_ops(root, lambda n: n == "tensor.extract"):
        w = defining_op(op.operands[0])
        if w is None or w.name != "vector.transfer_write":
            continue
        vt = ir.VectorType(w.operands[0].type)
        if any(d != 1 for d in vt.shape):
            continue
        idx, widx = list(op.operands[1:]), list(w.operands[2:])
        if len(idx) != len(widx) or any(a != b for a, b in zip(idx, widx)):
            continue
        from mlir.dialects import vector  # (here: ~3 ms to import, and most modules have none)
        with ir.InsertionPoint(op), op.location:
            new = vector.ExtractOp(w.operands[0], [], [0] * vt.rank)
        op.results[0].replace_all_uses_with(new.result)
        op.erase()


def _reassociate(root):
    """The vectorized rows' final `width` -> 1 float sums and products (in the row loops)
    as trees: LLVM otherwise combines the lanes one after another (an ordered reduction,
    ~3 cycles a lane). The partial results already reassociate them; a tree is no less
    accurate."""
    flags = ir.Attribute.parse("#arith.fastmath<reassoc>")
    for forall in walk_ops(root, lambda n: n == "scf.forall"):
        for op in walk_ops(forall, lambda n: n == "vector.reduction"):
            kind = str(op.attributes["kind"])
            if kind not in ("#vector.kind<add>", "#vector.kind<mul>") or not isa(ir.FloatType, op.results[0].type):
                continue
            if "fastmath" not in op.attributes or str(op.attributes["fastmath"]) == "#arith.fastmath<none>":
                op.attributes["fastmath"] = flags


def _shift_rows(forall, gid, width, i64):
    """A row max marked by mirax-stable-shift computed only for the rows that need it
    (stable_shift.shift_rows); returns the split entry of the new sum ([] if none)."""
    rid = 1000 * gid + 999
    new = []

    def mark_sum(op):
        op.attributes[RED] = ir.IntegerAttr.get(i64, rid)
        new.append((rid, [0] * (len(iterator_kinds(op)) - 1) + [width]))

    def mark_small(op):  # (vectorized whole: the first chunk's max is not split)
        op.attributes[SMALL] = ir.IntegerAttr.get(i64, gid)
        if RED in op.attributes:
            del op.attributes[RED]
    shift_rows(forall, width, mark_sum, mark_small)
    return new


class MiraxFuseReductions(MiraxPass):
    @staticmethod
    def _vectorized(ops, gid, tiles, lead, pids, split, widths, i64, memo=None):
        """Fuse (root tiled by `tiles`, its first `lead` dims rows) and vectorize group
        `gid` (its `ops`, in block order); None when done, else the error (the group's
        ops then are as they were). `memo` (key -> schedule) holds the schedules of the
        groups done so far: an identical group (the same ops, types and plan: the layers
        of a network) takes its copy instead of running the transforms again."""
        scratch = _Scratch(ops)
        key = None
        if memo is not None:
            key = scratch.key(gid, (tiles, lead, [p - 1000 * gid for p in pids],
                                    [(r - 1000 * gid, w) for r, w in split], sorted(widths)))
            if key in memo:
                scratch.reuse(memo[key])
                scratch.put_back()
                return None
        try:
            _apply(scratch.module, fuse_script(gid, tiles, pids))
            forall = _find_forall(scratch.module, gid)
            if forall is not None and len(widths) == 1:
                split = split + _shift_rows(forall, gid, next(iter(widths))[0], i64)
            vec = None if forall is None else _vector_plan(forall, split, widths, tiles[:lead], gid, i64)
            if vec is None:
                raise ValueError("nothing to vectorize")
            _apply(scratch.module, vector_script(gid, split, vec))
        except (ir.MLIRError, ValueError) as e:
            return e
        if key is not None:
            memo[key] = scratch.keep()
        scratch.put_back()
        return None

    name = NAME
    summary = "Fuse row-wise reductions with their elementwise producers/consumers into one row-block loop"
    after = ["canonicalize", "cse"]  # the producers' fused copies are identical; the originals dead
    options = {"threads": (0, "threads the row blocks are spread over (0: tuning.threads())"),
               "min-elements": (0, "override the tuning table's min_elements (0: keep)")}

    def run(self, module: ir.Operation):
        threads = int(self.opts["threads"]) or tuning.threads()
        cfg = tuning.table()["row_fusion"]
        min_el = int(self.opts["min-elements"]) or cfg["min_elements"]
        lanes = host_cpu.host().f32_lanes
        with module.context, ir.Location.unknown():
            i64 = ir.IntegerType.get_signless(64)
            drop_unit_dims(module)
            todo = []
            for block in _blocks(module):
                _private_fills(block)
                pos = None
                for g in groups(block):
                    if g[4] >= min_el:
                        if pos is None:
                            pos = {op.operation: k for k, op in enumerate(block.operations)}
                        todo.append(g + (sorted([g[0]] + list(g[1]), key=pos.__getitem__),))
            plans = []  # each group marked up front, then scheduled in a scratch copy of its ops
            for gid, (root, prods, reds, rows, iters, lead, order) in enumerate(todo):
                ext = _extents(root)
                blk = row_block(rows, iters // rows, threads)  # the widest op of the group sets it
                # vectorized: every op's loops but the last are rows (single rows beyond the
                # first dim: a 3-d softmax's rows are its first two dims)
                depth = max(len(iterator_kinds(op)) if op.name == "linalg.generic"
                            else len(_shape(op.results[0].type) or []) for op in [root] + list(prods))
                vt = None
                if depth >= 2 and lead >= depth - 1:
                    vt = ([blk] if depth == 2 else [1] * (depth - 1)) + [0] * (len(ext) - depth + 1)
                root.attributes[ROOT] = ir.IntegerAttr.get(i64, gid)
                pids = []
                for k, p in enumerate(prods):
                    p.attributes[PROD] = ir.IntegerAttr.get(i64, 1000 * gid + k)
                    pids.append(1000 * gid + k)
                split, widths, plain = [], set(), []
                for k, r in enumerate(reds):
                    kinds, rext = iterator_kinds(r), _extents(r)
                    width = tuning.row_fusion_config(rext[-1] if rext else 0)["partial_sums"]
                    # short rows (a transformer's 64 features, 48 attention scores): fewer
                    # partial sums, down to one vector, so that two chunks still fit a row
                    while rext and width > lanes and rext[-1] < 2 * width:
                        width //= 2
                    if (kinds.count("reduction") != 1 or kinds[-1] != "reduction"
                            or rext[-1] < 2 * width or not _combiner_ok(r)):
                        continue
                    r.attributes[RED] = ir.IntegerAttr.get(i64, 1000 * gid + k)
                    split.append((1000 * gid + k, [0] * (len(kinds) - 1) + [width]))
                    widths.add((width, rext[-1]))
                    if rext[-1] >= cfg["split_min"]:  # left to LLVM's vectorizer: long rows only
                        plain.append(split[-1])
                plans.append((gid, order, [blk] + [0] * (len(ext) - 1), vt, depth - 1, pids, split, widths, plain))
            memo = {} if os.environ.get("MIRAX_ROW_GROUP_REUSE", "1") != "0" else None
            for gid, order, tiles, vt, lead, pids, split, widths, plain in plans:
                err = True if vt is None else self._vectorized(order, gid, vt, lead, pids, split, widths, i64, memo)
                if err is not None:  # LLVM's loop vectorizer then
                    scratch = _Scratch(order)
                    try:
                        _apply(scratch.module, script(gid, tiles, pids, plain))
                        scratch.put_back()
                        err = None
                    except (ir.MLIRError, ValueError) as e:  # the group's ops stay as they were
                        err = e
                if err is not None:
                    warnings.warn(f"{NAME}: row group not fused: {err}")
            _clear(module)
            _forward_scalars(module)
            _reassociate(module)



# ---- after bufferization: the next rows on their way while this one computes -----------

PREFETCH = "mirax-row-memory"


def _is_const(v, value):
    d = defining_op(v)
    return (d is not None and d.name == "arith.constant" and isa(ir.IntegerAttr, d.attributes["value"])
            and ir.IntegerAttr(d.attributes["value"]).value == value)


def _row_accesses(forall, ivs):
    """(memref, is_write, loop) of the row accesses `m[i.., k]` (or `v[0.., k]` of a
    subview `v` of `m` at row `i..`) with `i..` the row loop's induction variables `ivs`
    and `m` of one more dim, made by the column loops (top-level `scf.for`s over `k`) of a
    row loop over single rows."""
    n = len(ivs)
    subviews = {}
    tops = body_ops(forall)
    for op in tops:
        if op.name == "memref.subview" and len(op.operands) == 1 + n and list(op.operands[1:]) == list(ivs) \
                and ir.MemRefType(op.operands[0].type).rank == n + 1:
            subviews[op.results[0]] = op.operands[0]
    out = []
    for loop in tops:
        if loop.name != "scf.for":
            continue
        k = loop.regions[0].blocks[0].arguments[0]
        for op in walk_ops(loop, lambda name: name in ("vector.transfer_read", "vector.transfer_write")):
            write = op.name == "vector.transfer_write"
            m, idx = (op.operands[1], list(op.operands[2:])) if write else (op.operands[0], list(op.operands[1:-1]))
            if not isa(ir.MemRefType, m.type) or len(idx) != n + 1 or idx[n] != k:
                continue
            if m in subviews and all(_is_const(i, 0) for i in idx[:n]):
                out.append((subviews[m], write, loop))
            elif idx[:n] == list(ivs) and ir.MemRefType(m.type).rank == n + 1:
                out.append((m, write, loop))
    return out


def _static(forall, name):
    a = str(forall.attributes[name]) if name in forall.attributes else ""
    if not a.startswith("array<i64: "):
        return None
    try:
        return [int(v) for v in a[len("array<i64: "):-1].split(",")]
    except ValueError:  # a dynamic bound
        return None


def _row_loop(forall):
    """The static extents of a row loop over single rows (bounds 0 to U, step 1), or None."""
    ubs = _static(forall, "staticUpperBound")
    if ubs is None or _static(forall, "staticStep") != [1] * len(ubs) \
            or _static(forall, "staticLowerBound") != [0] * len(ubs) or len(forall.regions[0].blocks[0].arguments) != len(ubs):
        return None
    return ubs


def prefetch_next_rows(module, vector_bytes, l1d, locality=2):
    """In each row loop over single rows (`scf.forall` over rows, step 1; a 3-d softmax
    runs over two row dims) whose column loops read or write rows of buffers, prefetch
    those buffers' rows `d` ahead (in row-major order) during the row's busiest column
    loop (the exp in softmax and logsumexp, the sum of squares in layer norm), one
    `memref.prefetch` per `vector_bytes` (a cache line), for
    writing where the row writes the buffer. `d` keeps the prefetched rows of all buffers within a
    quarter of L1d (`l1d` bytes), at least 1: the next row for long rows, several for
    short ones. The first pass over a row (a max, a mean) then reads from cache instead of
    waiting on memory while the cores sit in the exp. `locality` is the prefetch's cache
    level hint (3: into L1, 2: into L2; the tuning table's `prefetch_locality`)."""
    from mlir.dialects import arith, memref
    idx_t = ir.IndexType.get()
    for forall in walk_ops(module, lambda n: n == "scf.forall"):
        body = forall.regions[0].blocks[0]
        ubs = _row_loop(forall)
        if ubs is None or math.prod(ubs) < 2:
            continue
        ivs = list(body.arguments)
        acc = _row_accesses(forall, ivs)
        loops = []
        for _, _, loop in acc:
            if loop not in loops:
                loops.append(loop)
        if not loops:
            continue
        sizes = [len(walk_ops(loop, lambda n: True)) for loop in loops]
        loop = loops[sizes.index(max(sizes))]
        step = defining_op(loop.operands[2])
        if step is None or step.name != "arith.constant":
            continue
        chunk = ir.IntegerAttr(step.attributes["value"]).value
        targets = {}
        for m, write, _ in acc:
            targets[m] = targets.get(m, False) or write
        row_bytes = sum(ir.MemRefType(m.type).shape[-1] * max(1, _bits(m) // 8) for m in targets)
        dist = max(1, l1d // 4 // max(row_bytes, 1))
        with ir.InsertionPoint.at_block_begin(body), ir.Location.unknown():
            c = {}

            def const(v):
                if v not in c:
                    c[v] = arith.ConstantOp(idx_t, v).result
                return c[v]
            flat = ivs[0]
            for iv, ub in zip(ivs[1:], ubs[1:]):  # row-major number of this row
                flat = arith.AddIOp(arith.MulIOp(flat, const(ub)).result, iv).result
            flat = arith.MinSIOp(arith.AddIOp(flat, const(dist)).result, const(math.prod(ubs) - 1)).result
            nxt = []
            for ub in reversed(ubs[1:]):  # and its indices
                nxt.append(arith.RemSIOp(flat, const(ub)).result)
                flat = arith.DivSIOp(flat, const(ub)).result
            nxt = [flat] + nxt[::-1]
        lb = loop.regions[0].blocks[0]
        k = lb.arguments[0]
        with ir.InsertionPoint.at_block_begin(lb), ir.Location.unknown():
            for m, write in targets.items():
                per = max(1, vector_bytes * 8 // max(_bits(m), 8))
                for j in range(0, chunk, per):
                    col = k if j == 0 else arith.AddIOp(k, arith.ConstantOp(idx_t, j).result).result
                    memref.PrefetchOp(m, nxt + [col], write, locality, True)


def _row_subview(op, ivs):
    """(buffer, cols) when `op` is `memref.subview %m[ivs.., 0] [1.., cols] [1..]`, the
    row of the iteration in a buffer of one more dim than the row loop's `ivs`."""
    n = len(ivs)
    if op.name != "memref.subview" or list(op.operands[1:]) != list(ivs):
        return None
    t = ir.MemRefType(op.results[0].type)
    if t.rank != n + 1 or list(t.shape[:n]) != [1] * n or t.shape[n] < 0 \
            or list(ir.DenseI64ArrayAttr(op.attributes["static_offsets"]))[n:] != [0] \
            or list(ir.DenseI64ArrayAttr(op.attributes["static_strides"])) != [1] * (n + 1):
        return None
    return op.operands[0], t.shape[n]


def _chunk_access(op, row, k, n, width):
    """Whether `op` reads or writes `row` as one whole chunk at [0.., k]: an in-bounds
    1-d transfer of `width` elements, unmasked."""
    write = op.name == "vector.transfer_write"
    base, idx = (op.operands[1], op.operands[2:]) if write else (op.operands[0], op.operands[1:-1])
    if base != row or len(idx) != n + 1 or idx[n] != k or any(constant_int(i) != 0 for i in idx[:n]):
        return False
    vt = ir.VectorType((op.operands[0] if write else op.results[0]).type)
    pmap = ir.AffineMapAttr(op.attributes["permutation_map"]).value
    return (vt.rank == 1 and vt.shape[0] == width and len(op.operands) == n + 3  # (no mask)
            and pmap == ir.AffineMap.get_minor_identity(n + 1, 1) and str(op.attributes["in_bounds"]) == "[true]")


def stream_row_outputs(module, min_bytes, line, parallel, max_row_bytes):
    """Rows of large outputs go to memory with non-temporal stores, once.

    A row loop that writes its output row, then reads and rewrites it (softmax's exp,
    then its scaling; layer norm's centred row, then its scaling) keeps the row in cache
    but sends it to memory through normal stores, which first read each line (read for
    ownership): an output larger than the last-level cache (`min_bytes`) moved 1.5x the
    bytes of a copy. Here the row's passes but the last go to a stack row (`memref.alloca`,
    in L1), and the last pass writes the output with `vector.store {nontemporal}` (whole
    `line`-aligned chunks; a row whose address is not `line`-aligned takes the old loop on
    a branch). Only rows written first as whole chunks and last by a loop over all of the
    row's chunks are rewritten, rows of at most `max_row_bytes` (the stack's share).
    `parallel`: iterations are OpenMP tasks with a stack scope each; else the stack row
    is allocated once, before the loop."""
    idx_t = ir.IndexType.get()
    for forall in walk_ops(module, lambda n: n == "scf.forall"):
        if _row_loop(forall) is None:
            continue
        body = forall.regions[0].blocks[0]
        ivs = list(body.arguments)
        n = len(ivs)
        tops = body_ops(forall)
        pos = {op_id(op): i for i, op in enumerate(tops)}  # (by address: the loop rewrites them)
        for sv in [op for op in tops if op.name == "memref.subview"]:
            found = _row_subview(sv, ivs)
            if found is None:
                continue
            m, cols = found
            mt = ir.MemRefType(m.type)
            esize = max(1, _bits(m) // 8)
            if not mt.has_static_shape or math.prod(mt.shape) * esize < min_bytes or cols * esize > max_row_bytes:
                continue
            if any(within(user_op(u), forall) and user_op(u) != sv for u in m.uses):
                continue  # (read or written some other way in the loop)
            row = sv.results[0]
            users = [(user_op(u), u.operand_number) for u in row.uses]
            if not users or any(o.name not in ("vector.transfer_read", "vector.transfer_write") for o, _ in users):
                continue
            where = [block_position(o, pos) for o, _ in users]  # the body's op holding each access
            if any(w is None for w in where) or min(where) == max(where):
                continue
            first, last = tops[min(where)], tops[max(where)]
            if first.name != "scf.for" or last.name != "scf.for" or len(last.results) or len(first.results):
                continue
            lb, ub, step = (constant_int(v) for v in last.operands[:3])
            k = last.regions[0].blocks[0].arguments[0]
            if lb != 0 or ub != cols or not step or cols % step or (step * esize) % line:
                continue
            in_last = [o for (o, _), w in zip(users, where) if w == max(where)]
            in_first = [o for (o, _), w in zip(users, where) if w == min(where)]
            k0 = first.regions[0].blocks[0].arguments[0]
            if not all(_chunk_access(o, row, k, n, step) and o.parent == last for o in in_last) \
                    or any(o.name != "vector.transfer_write" for o in in_first) \
                    or tuple(constant_int(v) for v in first.operands[:3]) != (0, cols, step) \
                    or not all(_chunk_access(o, row, k0, n, step) and o.parent == first for o in in_first) \
                    or not any(o.name == "vector.transfer_write" for o in in_last):
                continue
            from mlir.dialects import arith, memref, scf, vector  # (only for a row it rewrites: ~3 ms to import)
            with ir.InsertionPoint(sv if parallel else forall), sv.location:
                tmp = memref.AllocaOp(ir.MemRefType.get([1] * n + [cols], mt.element_type), [], [],
                                      alignment=ir.IntegerAttr.get(ir.IntegerType.get_signless(64), line)).result
            for o, i in users:
                if not (o.name == "vector.transfer_write" and o in in_last):
                    o.operands[i] = tmp
            with ir.InsertionPoint(last), last.location:
                def index(v):
                    return arith.ConstantOp(idx_t, v).result
                mis = arith.RemUIOp(address_of(row, esize, index), index(line)).result
                ok = arith.CmpIOp(arith.CmpIPredicate.eq, mis, index(0)).result
                branch = scf.IfOp(ok, [], has_else=True)
            with ir.InsertionPoint(branch.then_block), last.location:
                then_yield = scf.YieldOp([])
            with ir.InsertionPoint(branch.else_block), last.location:
                else_yield = scf.YieldOp([])
            fast = last.clone(ir.InsertionPoint(then_yield))
            last.move_before(else_yield)
            for o in walk_ops(fast, lambda name: name == "vector.transfer_write"):
                if o.operands[1] != row:
                    continue
                with ir.InsertionPoint(o), o.location:
                    vector.StoreOp(o.operands[0], row, list(o.operands[2:]), nontemporal=True,
                                   alignment=ir.IntegerAttr.get(ir.IntegerType.get_signless(64), line))
                o.erase()


def stack_row_buffers(module, limit, parallel):
    """Static buffers of at most `limit` bytes allocated and freed inside one iteration of
    a row loop (a peeled chunk's partial results, a row's scalar) become stack buffers:
    no malloc/free a row. `parallel`: the loop becomes OpenMP threads, whose conversion
    wraps each iteration in an `alloca_scope` (the stack is released every row); else
    the buffers move out of the (then sequential) loop."""
    from mlir.dialects import memref
    for forall in walk_ops(module, lambda n: n == "scf.forall"):
        body = forall.regions[0].blocks[0]
        ops = body_ops(forall)
        deallocs = {}
        for op in ops:
            if op.name == "memref.dealloc":
                deallocs.setdefault(op.operands[0], []).append(op)
        for op in [op for op in ops if op.name == "memref.alloc"]:
            if len(op.operands) or op.results[0] not in deallocs:
                continue
            t = ir.MemRefType(op.results[0].type)
            if not t.has_static_shape or math.prod(t.shape) * max(1, _bits(op.results[0]) // 8) > limit:
                continue
            with ir.InsertionPoint(op if parallel else forall), op.location:
                a = memref.AllocaOp(t, [], [], alignment=op.attributes["alignment"] if "alignment" in op.attributes else None)
            for d in deallocs[op.results[0]]:
                d.erase()
            op.results[0].replace_all_uses_with(a.result)
            op.erase()


def _bits(m):
    t = ir.MemRefType(m.type).element_type
    for cls in (ir.FloatType, ir.IntegerType):
        if isa(cls, t):
            return cls(t).width
    return 32


class MiraxRowMemory(MiraxPass):
    name = PREFETCH
    summary = ("On memrefs, mirax-fuse-reductions' row loops: next rows prefetched during a row's busiest "
               "column loop, row buffers on the stack, exp's 2^m scaling as one ldexp on AVX-512, "
               "else a fast branch for exps of |x| < 86")
    options = {"threads": (0, "threads the row loops run on (0: tuning.threads(); 1: sequential)"),
               "ldexp": ("auto", "exp's 2^m scaling as llvm.ldexp (vscalefps): auto (hosts with AVX-512: AVX-512's "
                                 "scalef on the float m where vectors are whole registers), on (llvm.ldexp), scalef, off"),
               "exp-reduce": ("auto", "exps as 2^t, t = x log2(e), by AVX-512's vreduceps and vscalefps "
                                      "(approx.reduced_exps): auto (hosts with AVX-512 DQ), on, off"),
               "exp-range": ("auto", "exps whose lanes all have |x| < 86 on a branch without the clamp and with "
                                     "2^m added to the exponent field: auto (hosts without ldexp's vscalefps), on, off"),
               "vector-bytes": (0, "bytes a prefetch covers (0: the host's cache line, at least a vector)"),
               "l1d": (0, "L1 data cache bytes that bound the prefetch distance (0: the host's)"),
               "locality": (0, "the prefetches' locality hint, 1-3 (0: tuning.py's row_fusion prefetch_locality)"),
               "stream-bytes": (0, "outputs of at least this many bytes get their rows by non-temporal stores "
                                   "(0: tuning.py's, the host's last-level cache; -1: none)"),
               "line": (0, "bytes the non-temporal stores align to (0: tuning.py's cache line)")}
    choices = {"ldexp": ("auto", "on", "scalef", "off"), "exp-reduce": ("auto", "on", "off"),
               "exp-range": ("auto", "on", "off"), "locality": ("0", "1", "2", "3")}

    def run(self, module: ir.Operation):
        from .host_cpu import host
        h = host()
        with module.context:
            l1d = int(self.opts["l1d"]) or h.l1d
            locality = int(self.opts["locality"]) or tuning.table()["row_fusion"]["prefetch_locality"]
            # one prefetch a cache line: one a 32-byte AVX2 vector asked for each line twice
            # (Zen 3, logsumexp 4096^2: 5.07 -> 4.91 ms)
            parallel = (int(self.opts["threads"]) or tuning.threads()) > 1
            stream = int(self.opts["stream-bytes"])
            if stream >= 0:  # (first: the rows it streams are not prefetched for writing)
                cfg = tuning.table()["elementwise"]
                with ir.Location.unknown():
                    stream_row_outputs(module, stream or cfg["streaming_store_bytes"],
                                       int(self.opts["line"]) or cfg["line_bytes"], parallel, h.l2 // 4)
            prefetch_next_rows(module, int(self.opts["vector-bytes"]) or max(h.line, h.vector_bits // 8), l1d,
                               locality)
            stack_row_buffers(module, l1d // 4, parallel)
            ldexp = str(self.opts["ldexp"])
            auto = ldexp == "auto" and "avx512f" in h.features
            use_ldexp = ldexp in ("on", "scalef") or auto
            scalef = ldexp == "scalef" or auto
            exp_range = str(self.opts["exp-range"])
            reduce = str(self.opts["exp-reduce"])
            use_reduce = reduce == "on" or (reduce == "auto" and {"avx512f", "avx512dq"} <= h.features)
            for forall in walk_ops(module, lambda n: n == "scf.forall"):
                if use_reduce:
                    reduced_exps(forall)
                if use_ldexp:
                    scale_with_ldexp(forall, scalef=scalef)
                if exp_range == "on" or (exp_range == "auto" and not use_ldexp):
                    split_exp_range(forall, h.vector_bits // 32)
