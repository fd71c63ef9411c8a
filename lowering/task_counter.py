"""`mirax-task-counter`: an OpenMP loop scheduled dynamically hands out its iterations
from a counter of its own instead of through the OpenMP runtime.

After `convert-scf-to-openmp` (and `_dynamic_schedule`, which picks the loops: matmul
tasks, streamed elementwise tasks), each thread of the region takes the next iteration
with one atomic add on a counter on the parent's stack, zeroed before the region starts:

    omp.parallel {                                 %n = memref.alloca() : memref<i64>  (entry)
      omp.wsloop schedule(dynamic) {               memref.store %c0, %n[]
        omp.loop_nest (%i) = (%lb) to (%ub)   ->   omp.parallel {
            step (%s) { body(%i) }                   scf.while {
      }                                                %k = memref.atomic_rmw addi %c1, %n[]
      omp.terminator                                   %i = %lb + %k * %s
    }                                                  scf.condition(%i < %ub) %i
                                                     } do { ^bb0(%i): body(%i) }
                                                     omp.terminator
                                                   }

Why: Debian's libomp (LLVM 14) formats debug-trace strings in every
`__kmpc_dispatch_next` call whether tracing is on or not (`printf_positional`,
`__parse_one_specmb`, malloc/free: ~2.7% of an MLP training step's samples once its
products ran in 8 row tasks a thread). The region's end joins the threads as the
loop's barrier did. Loops with clauses (reductions, private copies, a chunk size),
several dims, or sharing their region with other ops keep the runtime's schedule.
"""
from __future__ import annotations

from mlir import ir

from .pass_base import MiraxPass, body_ops, walk_ops

NAME = "mirax-task-counter"


def _dynamic(loop) -> bool:
    return "schedule_kind" in loop.attributes and str(loop.attributes["schedule_kind"]) == "#omp<schedulekind dynamic>"


def _eligible(wsloop):
    """The (omp.parallel, omp.loop_nest) of a dynamically scheduled omp.wsloop this pass
    can rewrite, else None."""
    return lone_loop(wsloop) if _dynamic(wsloop) else None


def lone_loop(wsloop):
    """(omp.parallel, omp.loop_nest) when `wsloop` has no clauses, one dim with an
    exclusive bound and a one-block body, and is alone in a region of its own; else None
    (also mirax-static-partition's test)."""
    if len(wsloop.operands) or "nowait" in wsloop.attributes:
        return None
    par = wsloop.parent
    if par is None or par.name != "omp.parallel" or len(par.operands):
        return None
    if [o.name for o in body_ops(par)] != ["omp.wsloop", "omp.terminator"]:
        return None
    nests = body_ops(wsloop)
    if len(nests) != 1 or nests[0].name != "omp.loop_nest" or len(nests[0].operands) != 3:
        return None
    nest = nests[0]
    if len(nest.regions[0].blocks) != 1:
        return None
    if "loop_inclusive" in nest.attributes:
        return None
    return par, nest


def _entry_block(op):
    f = op.parent
    while f is not None and f.name not in ("func.func", "llvm.func"):
        f = f.parent
    return None if f is None else f.regions[0].blocks[0]


def move_body(nest, iv, block) -> None:
    """Move the body of omp.loop_nest `nest` (less its omp.yield), its induction
    variable replaced by `iv`, into an scf.execute_region appended to `block`, then end
    `block` with scf.yield (also mirax-static-partition's). The execute_region because,
    lowered, the body may take several blocks (memref.alloca_scope's stack save and
    restore), which the regions of scf.while and scf.for may not have."""
    from mlir.dialects import scf
    with ir.InsertionPoint(block):
        region = scf.ExecuteRegionOp([])
        scf.YieldOp([])
    inner = region.region.blocks.append()
    with ir.InsertionPoint(inner):
        end = scf.YieldOp([])
    ops = body_ops(nest)
    nest.regions[0].blocks[0].arguments[0].replace_all_uses_with(iv)
    for o in ops[:-1]:  # (the last: omp.yield)
        o.move_before(end)


def rewrite(module) -> int:
    """Rewrite the eligible loops of `module` (see the module doc); returns how many."""
    root = getattr(module, "operation", module)
    todo = [(w, _eligible(w), _entry_block(w)) for w in walk_ops(root, lambda n: n == "omp.wsloop")]
    todo = [(w, found, entry) for w, found, entry in todo if found is not None and entry is not None]
    if not todo:
        return 0
    from mlir.dialects import arith, memref, scf  # (~10 ms the first time: only when needed)
    done = 0
    with root.context, ir.Location.unknown():
        index, i64 = ir.IndexType.get(), ir.IntegerType.get_signless(64)
        for wsloop, (par, nest), entry in todo:
            lb, ub, step = nest.operands[0], nest.operands[1], nest.operands[2]
            with ir.InsertionPoint.at_block_begin(entry):
                counter = memref.AllocaOp(ir.MemRefType.get([], i64), [], []).result
            with ir.InsertionPoint(par):
                memref.StoreOp(arith.ConstantOp(i64, 0).result, counter, [])
            with ir.InsertionPoint(wsloop):
                loop = scf.WhileOp([index], [])  # (its result: the first index past the end)
                before = loop.before.blocks.append()
                after = loop.after.blocks.append(index)
            with ir.InsertionPoint(before):
                one = arith.ConstantOp(i64, 1).result
                taken = memref.AtomicRMWOp(arith.AtomicRMWKind.addi, one, counter, []).result
                k = arith.IndexCastOp(index, taken).result
                iv = arith.AddIOp(lb, arith.MulIOp(k, step).result).result
                more = arith.CmpIOp(arith.CmpIPredicate.slt, iv, ub).result
                scf.ConditionOp(more, [iv])
            move_body(nest, after.arguments[0], after)
            wsloop.erase()
            done += 1
    return done


class MiraxTaskCounter(MiraxPass):
    name = NAME
    summary = "Dynamically scheduled OpenMP loops take their iterations from an atomic counter"

    def run(self, module):
        rewrite(module)
