"""`mirax-gpu-tree-reductions`: a row kernel combines its partial results in a tree.

The row strategy of `mirax-gpu-map` splits each reduction over the workgroup's threads
(upstream `tile_reduction_using_forall`): every thread leaves one partial in workgroup
memory (space 3), and then *every thread* folds all N partials into its own copy of the
result, one after the other:

    gpu.barrier
    scf.for %k = 0 to 256 {
      %p = memref.load %partials[%c0, %k] : memref<1x256xf32, 3>
      %a = memref.load %acc[%c0] : memref<1xf32, 6>
      memref.store (%p + %a), %acc[%c0] }

N dependent loads and ops a thread, N * N a workgroup. This pass folds the partials
pairwise instead, in log2(N) rounds with a barrier after each, and lets each thread read
the one result:

    for s in N/2, N/4, ..., 1:                  (unrolled: N is static)
      scf.if %tid < s { %partials[tid] = %partials[tid] + %partials[tid + s] }
      gpu.barrier
    memref.store (%partials[0] + %acc), %acc

Legal when the loop is exactly that fold (one combiner op among add, mul, max, min and
the bitwise ones: associative and commutative, up to floating-point rounding, as every
parallel reduction assumes), runs in the kernel's top-level block (every thread reaches
the barriers), N is a power of two no larger than twice the workgroup's x size, the
workgroup is one-dimensional (no two threads share an x id), the partials are only
loaded and stored (no view of them) and nothing reads them after the loop (the tree
overwrites them). Anything else is left as it is.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, gpu, memref, scf

from .pass_base import WORKGROUP, constant_int, memory_space, one_dim_kernels, only_loaded_and_stored, user_op

NAME = "mirax-gpu-tree-reductions"

COMBINERS = {"arith.addf", "arith.mulf", "arith.maximumf", "arith.minimumf", "arith.maxnumf", "arith.minnumf",
             "arith.addi", "arith.muli", "arith.maxsi", "arith.minsi", "arith.maxui", "arith.minui",
             "arith.andi", "arith.ori", "arith.xori"}


def _fold_loop(loop):
    """(partials, prefix indices, partial load, acc load, combiner, acc store, N) if `loop`
    is a plain sequential fold of workgroup partials into a private accumulator, else None."""
    lb, ub, step = (constant_int(v) for v in list(loop.operands)[:3])
    if lb != 0 or step != 1 or ub is None or ub < 2 or ub & (ub - 1) or len(loop.results):
        return None
    body = loop.regions[0].blocks[0]
    ops = [op.operation for op in body.operations]
    names = [o.name for o in ops]
    if len(ops) != 5 or names[:2] != ["memref.load", "memref.load"] or names[3:] != ["memref.store", "scf.yield"]:
        return None
    k = body.arguments[0]
    lp, la, comb, st = ops[:4]
    if comb.name not in COMBINERS or len(comb.results) != 1:
        return None
    part_idx = list(lp.operands)[1:]
    if memory_space(lp.operands[0].type) != WORKGROUP or not part_idx or part_idx[-1] != k \
            or any(constant_int(i) is None for i in part_idx[:-1]) \
            or ir.MemRefType(lp.operands[0].type).shape[-1] != ub:
        return None
    acc, acc_idx = la.operands[0], list(la.operands)[1:]
    if st.operands[1] != acc or list(st.operands)[2:] != acc_idx or st.operands[0] != comb.results[0] \
            or set(comb.operands) != {lp.results[0], la.results[0]} or k in acc_idx \
            or memory_space(acc.type) == WORKGROUP:
        return None
    return lp.operands[0], part_idx[:-1], lp, la, comb, st, ub


def _read_after(buffer, loop):
    """Whether anything but a dealloc uses `buffer` after `loop` in its block."""
    block_ops = [op.operation for op in loop.parent.regions[0].blocks[0].operations] \
        if loop.parent is not None else []
    after = block_ops[block_ops.index(loop) + 1:] if loop in block_ops else []
    for use in buffer.uses:
        op = user_op(use)
        while op is not None and op not in block_ops:
            op = op.parent
        if op in after and user_op(use).name != "memref.dealloc":
            return True
    return False


def tree_reductions(module, *_):
    """Rewrite each qualifying fold loop of each outlined kernel (see the module doc)."""
    for func, threads in one_dim_kernels(module):
        entry = func.regions[0].blocks[0]
        for loop in [op.operation for op in entry.operations if op.operation.name == "scf.for"]:
            fold = _fold_loop(loop)
            if fold is None:
                continue
            partials, prefix, part_load, acc_load, comb, acc_store, n = fold
            if n > 2 * threads or not only_loaded_and_stored(partials) or _read_after(partials, loop):
                continue
            _rewrite(loop, partials, prefix, part_load, acc_load, comb, acc_store, n)


def _rewrite(loop, partials, prefix, part_load, acc_load, comb, acc_store, n):
    idx = ir.IndexType.get()
    # the combiner's operand order, kept: (partial, acc) or (acc, partial)
    partial_first = comb.operands[0] == part_load.results[0]
    attrs = {name: comb.attributes[name] for name in comb.attributes}  # (fastmath flags)

    def combine(p, a):
        operands = [p, a] if partial_first else [a, p]
        return ir.Operation.create(comb.name, results=[comb.results[0].type], operands=operands,
                                   attributes=attrs).results[0]

    with ir.InsertionPoint(loop), loop.location:
        tid = gpu.ThreadIdOp(gpu.Dimension.x).result
        s = n // 2
        while s >= 1:
            c = arith.ConstantOp(idx, s).result
            cond = arith.CmpIOp(arith.CmpIPredicate.ult, tid, c).result
            branch = scf.IfOp(cond)
            with ir.InsertionPoint(branch.then_block):
                mine = memref.LoadOp(partials, prefix + [tid]).result
                other = memref.LoadOp(partials, prefix + [arith.AddIOp(tid, c).result]).result
                memref.StoreOp(combine(mine, other), partials, prefix + [tid])
                scf.YieldOp([])
            gpu.BarrierOp()
            s //= 2
        zero = arith.ConstantOp(idx, 0).result
        total = memref.LoadOp(partials, prefix + [zero]).result
        acc = memref.LoadOp(acc_load.operands[0], list(acc_load.operands)[1:]).result
        memref.StoreOp(combine(total, acc), acc_store.operands[1], list(acc_store.operands)[2:])
    loop.erase()
