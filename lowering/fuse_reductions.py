"""`mirax-fuse-reductions`: row-wise kernels (softmax, layer norm, logsumexp) as one loop.

After `mirax-fuse` a softmax is still four kernels over the whole array (max, exp(x - m),
sum, divide) because the exp has two consumers. This pass finds each group of linalg ops
connected by def-use edges that all index the same outer parallel loop (the rows) and
hold at least one reduction, tiles the group's last op into row blocks
(`transform.structured.tile_using_forall ... tile_sizes [R, 0]`) and pulls every other op
of the group into that loop, greedily from the consumer up
(`transform.structured.fuse_into_containing_op`), so each block of R rows is read from
memory once and its intermediates stay in cache:

    %r = scf.forall (%i) in (4096) shared_outs(%o = %e) -> (tensor<4096x4096xf32>) {
      %m = linalg.generic {"parallel", "reduction"} ... -> tensor<1xf32>        // max
      %x = linalg.generic {"parallel", "parallel"} ... -> tensor<1x4096xf32>     // exp(x - m)
      %s = scf.for %k = %c0 to %c4096 step %c64 iter_args(%a = %z) -> (tensor<1x64xf32>) {
        ... linalg.generic {"parallel", "parallel"}                               // 64 partial sums
      }
      %t = linalg.reduce { arith.addf } ins(%s : tensor<1x64xf32>) ...         // 64 -> 1
      %d = linalg.generic {"parallel", "parallel"} ... -> tensor<1x4096xf32>     // divide
      scf.forall.in_parallel { tensor.parallel_insert_slice %d into %o[%i, 0] [1, 4096] [1, 1] }
    }

The exp is written straight into the output's rows and the divide rewrites it there, so
there is no temporary array at all; a row is read from memory once (the max) and then
from L1. Blocks are single rows by default (the tuning table's `block_elements`).

Reductions over the innermost loop are split into `partial_sums` independent
accumulators (`transform.structured.tile_reduction_using_for`): a loop over columns that
is elementwise across the accumulators, which LLVM vectorizes (a single f32 accumulator
would not be: that needs reassociation). The forall becomes OpenMP threads in the CPU
pipeline (one row block an iteration, statically scheduled).

Groups below the tuning table's `min_elements` (`lowering/tuning.py`, "row_fusion") are
left alone, so eager single-op kernels of small arrays never start the transform
interpreter; a schedule that does not apply leaves the module as it was.
"""
from __future__ import annotations

import math
import warnings

from mlir import ir
from mlir.dialects.transform import interpreter

from . import tuning
from .pass_base import MiraxPass

NAME = "mirax-fuse-reductions"
ROOT, PROD, RED = "mirax.fr_root", "mirax.fr_producer", "mirax.fr_reduction"
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


def _maps(op):
    return [ir.AffineMapAttr(a).value for a in op.attributes["indexing_maps"]]


def _kinds(op):
    return ["reduction" if "reduction" in str(a) else "parallel" for a in op.attributes["iterator_types"]]


def _extents(op):
    """Loop extents of a generic (static shapes only), or None."""
    ext = {}
    for v, m in zip(op.operands, _maps(op)):
        s = _shape(v.type)
        if s is None:
            return None
        for i, e in enumerate(m.results):
            if isinstance(e, ir.AffineDimExpr):
                ext[e.position] = s[i]
    n = len(op.attributes["iterator_types"])
    return [ext.get(i) for i in range(n)] if len(ext) == n else None


def _is_row_op(op, rows, inside):
    """Does `op` index `rows` rows with its loop 0, on every operand it shares with the
    group (`inside(value)`) and on its outputs?"""
    if op.name == "linalg.fill":
        s = _shape(op.results[0].type)
        return bool(s) and s[0] == rows
    kinds = _kinds(op)
    if not kinds or kinds[0] != "parallel":  # a 0-d op has no loop to share
        return False
    ext = _extents(op)
    if ext is None or ext[0] != rows:
        return False
    n_in = len(op.operands) - len(op.results)
    for k, (v, m) in enumerate(zip(op.operands, _maps(op))):
        if k < n_in and not inside(v):
            continue
        r = m.results
        if not r or not isinstance(r[0], ir.AffineDimExpr) or ir.AffineDimExpr(r[0]).position != 0:
            return False
        if any(isinstance(e, ir.AffineDimExpr) and ir.AffineDimExpr(e).position == 0 for e in r[1:]):
            return False
    return True


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


def groups(block):
    """Row groups of a block: (root, producers consumer-first, reductions, rows, iterations)."""
    ops = [op.operation for op in block.operations if op.operation.name in KINDS]
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
            if o is not None and o in idx:
                parent[find(i)] = find(idx[o])
    comps = {}
    for i in range(len(ops)):
        comps.setdefault(find(i), []).append(i)
    out = []
    for members in comps.values():
        reds = [i for i in members if ops[i].name == "linalg.generic" and "reduction" in _kinds(ops[i])]
        if not reds:
            continue
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
            continue
        root = ops[roots[0]]
        if root.name != "linalg.generic":
            continue
        ext = _extents(root)
        if not ext:  # unknown, or a 0-d result (a full reduction): no rows to block
            continue
        rows = ext[0]
        if not all(_is_row_op(ops[i], rows, inside) for i in members):
            continue
        iters = max(math.prod(_extents(ops[i]) or [0]) for i in reds)
        iters = max(iters, math.prod(ext))
        prods = sorted((i for i in members if i != roots[0]), reverse=True)
        out.append((root, [ops[i] for i in prods], [ops[i] for i in reds], rows, iters))
    return out


def row_block(rows, row_elems, threads):
    """Rows per block: the largest divisor of `rows` whose block holds at most the tuning
    table's `block_elements`, leaving at least `threads` blocks."""
    cfg = tuning.table()["row_fusion"]
    cap = max(1, min(cfg["block_elements"] // max(row_elems, 1), rows // max(threads, 1) or 1))
    for r in range(cap, 0, -1):
        if rows % r == 0:
            return r
    return 1


def script(root_id, rank, block, producers, split) -> str:
    ts = ", ".join([str(block)] + ["0"] * (rank - 1))
    L = [f"    %root = transform.structured.match attributes {{{ROOT} = {root_id} : i64}} in %arg0 "
         ": (!transform.any_op) -> !transform.any_op",
         f"    %tiled, %f0 = transform.structured.tile_using_forall %root tile_sizes [{ts}] "
         ": (!transform.any_op) -> (!transform.any_op, !transform.any_op)"]
    for k, pid in enumerate(producers):
        L.append(f"    %p{k} = transform.structured.match attributes {{{PROD} = {pid} : i64}} in %arg0 "
                 ": (!transform.any_op) -> !transform.any_op")
        L.append(f"    %q{k}, %f{k + 1} = transform.structured.fuse_into_containing_op %p{k} into %f{k} "
                 ": (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)")
    last = f"%f{len(producers)}"
    for k, (rid, sizes) in enumerate(split):
        L.append(f"    %r{k} = transform.structured.match attributes {{{RED} = {rid} : i64}} in {last} "
                 ": (!transform.any_op) -> !transform.any_op")
        L.append(f"    %ri{k}, %rs{k}, %rc{k}, %rf{k} = transform.structured.tile_reduction_using_for %r{k} "
                 f"by tile_sizes = [{', '.join(map(str, sizes))}] : (!transform.any_op) -> "
                 "(!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)")
    body = "\n".join(L)
    return ("module attributes {transform.with_named_sequence} {\n"
            "  transform.named_sequence @__transform_main(%arg0: !transform.any_op {transform.readonly}) {\n"
            f"{body}\n    transform.yield\n  }}\n}}\n")


def _blocks(root):
    """Blocks of func-like ops (where the groups live)."""
    out = []
    for op in root.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "func.func":
            out.extend(op.regions[0].blocks)
    return out


def _restore(module, backup):
    body = module.regions[0].blocks[0]
    for op in list(body.operations):
        op.erase()
    for op in list(backup.regions[0].blocks[0].operations):
        body.append(op)


def _clear(root):
    def visit(op):
        for region in op.regions:
            for block in region.blocks:
                for child in block.operations:
                    child = child.operation
                    for a in (ROOT, PROD, RED):
                        if a in child.attributes:
                            del child.attributes[a]
                    visit(child)
    visit(root)


class MiraxFuseReductions(MiraxPass):
    name = NAME
    summary = "Fuse row-wise reductions with their elementwise producers/consumers into one row-block loop"
    after = ["canonicalize", "cse"]  # the producers' fused copies are identical; the originals dead
    options = {"threads": (0, "threads the row blocks are spread over (0: tuning.threads())"),
               "min-elements": (0, "override the tuning table's min_elements (0: keep)")}

    def run(self, module: ir.Operation):
        threads = int(self.opts["threads"]) or tuning.threads()
        cfg = tuning.table()["row_fusion"]
        min_el = int(self.opts["min-elements"]) or cfg["min_elements"]
        with module.context, ir.Location.unknown():
            i64 = ir.IntegerType.get_signless(64)
            todo = []
            for block in _blocks(module):
                for g in groups(block):
                    if g[4] >= min_el:
                        todo.append(g)
            for gid, (root, prods, reds, rows, iters) in enumerate(todo):
                ext = _extents(root)
                blk = row_block(rows, iters // rows, threads)  # the widest op of the group sets it
                root.attributes[ROOT] = ir.IntegerAttr.get(i64, gid)
                pids = []
                for k, p in enumerate(prods):
                    p.attributes[PROD] = ir.IntegerAttr.get(i64, 1000 * gid + k)
                    pids.append(1000 * gid + k)
                split = []
                for k, r in enumerate(reds):
                    kinds, rext = _kinds(r), _extents(r)
                    width = tuning.row_fusion_config(rext[-1] if rext else 0)["partial_sums"]
                    if (kinds.count("reduction") != 1 or kinds[-1] != "reduction"
                            or rext[-1] < max(2 * width, cfg["split_min"]) or not _combiner_ok(r)):
                        continue
                    r.attributes[RED] = ir.IntegerAttr.get(i64, 1000 * gid + k)
                    split.append((1000 * gid + k, [0] * (len(kinds) - 1) + [width]))
                text = script(gid, len(ext), blk, pids, split)
                backup = module.clone()
                try:
                    xf = ir.Module.parse(text)
                    interpreter.apply_named_sequence(module, xf.body.operations[0], xf)
                except (ir.MLIRError, ValueError) as err:  # leave the module as it was
                    _restore(module, backup)
                    warnings.warn(f"{NAME}: row group not fused: {err}")
                    break
                finally:
                    backup.erase()
            _clear(module)
