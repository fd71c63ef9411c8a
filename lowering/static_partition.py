"""`mirax-static-partition`: an OpenMP loop scheduled statically takes its share of the
iterations from its thread number instead of from the OpenMP runtime.

After `convert-scf-to-openmp` (and mirax-task-counter, which takes the dynamic loops),
each thread of the region computes its own contiguous block, as libomp's balanced
static schedule does (with two threads the same blocks as its default, greedy one):

    omp.parallel {                                 omp.parallel {
      omp.wsloop {                                   %t = func.call @omp_get_thread_num()
        omp.loop_nest (%i) = (%lb) to (%ub)   ->     %p = func.call @omp_get_num_threads()
            step (%s) { body(%i) }                   // n = ceil((ub - lb) / s) iterations:
      }                                              // thread t gets n / p, one more if t < n % p
      omp.terminator                                 scf.for %k = %begin to %end {
    }                                                  scf.execute_region { body(%lb + %k * %s) }
                                                     }
                                                     omp.terminator
                                                   }

Why: Debian's libomp (LLVM 14) is built with KMP_DEBUG, so `__kmpc_for_static_init`
formats its debug-trace strings on every call whether tracing is on or not
(`printf_positional`, `_IO_default_xsputn`, malloc/free: ~2-3% of a 256x512 add's
samples), and the loop's own barrier comes on top of the region's join. The join at
the region's end stays: it is the barrier the loop needed. Loops with clauses, several
dims, or sharing their region with other ops keep the runtime's schedule.
"""
from __future__ import annotations

from mlir import ir

from .pass_base import MiraxPass, body_ops, walk_ops
from .task_counter import lone_loop, move_body

NAME = "mirax-static-partition"
RUNTIME = ("omp_get_thread_num", "omp_get_num_threads")  # (libomp's, as the region's other calls)


def _static(loop) -> bool:
    kind = loop.attributes["schedule_kind"] if "schedule_kind" in loop.attributes else None
    return kind is None or str(kind) == "#omp<schedulekind static>"


def _module(op):
    while op is not None and op.name != "builtin.module":
        op = op.parent
    return op


def _declare(module, i32):
    """func.func private declarations of the runtime calls, unless the module has them."""
    have = {str(ir.StringAttr(o.attributes["sym_name"]).value) for o in body_ops(module)
            if "sym_name" in o.attributes}
    first = module.regions[0].blocks[0].operations[0]
    for name in RUNTIME:
        if name not in have:
            with ir.InsertionPoint(first):
                ir.Operation.create("func.func", regions=1, attributes={
                    "sym_name": ir.StringAttr.get(name), "sym_visibility": ir.StringAttr.get("private"),
                    "function_type": ir.TypeAttr.get(ir.FunctionType.get([], [i32]))})


def rewrite(module) -> int:
    """Rewrite the eligible loops of `module` (see the module doc); returns how many."""
    root = getattr(module, "operation", module)
    todo = [(w, lone_loop(w)) for w in walk_ops(root, lambda n: n == "omp.wsloop") if _static(w)]
    todo = [(w, found) for w, found in todo if found is not None]
    if not todo:
        return 0
    from mlir.dialects import arith, scf  # (only when a loop qualifies)
    with root.context, ir.Location.unknown():
        index, i32 = ir.IndexType.get(), ir.IntegerType.get_signless(32)
        modules = {}
        for w, _ in todo:
            m = _module(w)
            modules[id(m)] = m
        for m in modules.values():
            _declare(m, i32)
        for wsloop, (_, nest) in todo:
            lb, ub, step = nest.operands[0], nest.operands[1], nest.operands[2]
            with ir.InsertionPoint(wsloop):
                def call(name):
                    r = ir.Operation.create("func.call", results=[i32], operands=[],
                                            attributes={"callee": ir.FlatSymbolRefAttr.get(name)}).results[0]
                    return arith.IndexCastOp(index, r).result
                t, p = call("omp_get_thread_num"), call("omp_get_num_threads")
                zero, one = arith.ConstantOp(index, 0).result, arith.ConstantOp(index, 1).result
                n = arith.MaxSIOp(arith.CeilDivSIOp(arith.SubIOp(ub, lb).result, step).result, zero).result
                small, extras = arith.DivUIOp(n, p).result, arith.RemUIOp(n, p).result
                begin = arith.AddIOp(arith.MulIOp(t, small).result, arith.MinUIOp(t, extras).result).result
                more = arith.SelectOp(arith.CmpIOp(arith.CmpIPredicate.ult, t, extras).result, one, zero).result
                end = arith.AddIOp(arith.AddIOp(begin, small).result, more).result
                loop = scf.ForOp(begin, end, one)
            with ir.InsertionPoint(loop.body):
                iv = arith.AddIOp(lb, arith.MulIOp(loop.induction_variable, step).result).result
            move_body(nest, iv, loop.body)  # (in an scf.execute_region)
            wsloop.erase()
    return len(todo)


class MiraxStaticPartition(MiraxPass):
    name = NAME
    summary = "Statically scheduled OpenMP loops split their iterations by thread number"

    def run(self, module):
        rewrite(module)
