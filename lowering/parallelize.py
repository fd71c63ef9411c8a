"""`mirax-parallelize`: split large linalg ops across threads as `scf.forall` (then OpenMP).

Each linalg op on tensors with at least the tuning table's `parallel_min_elements`
iterations (`lowering/tuning.py`, per op family) is tiled with
`transform.structured.tile_using_forall ... num_threads [..., T, ...]` on its outermost
parallel loop that has at least T iterations; the CPU pipeline turns the foralls into
`scf.parallel` after bufferization and those into `omp.parallel` + `omp.wsloop`.
Smaller ops stay serial (threads lose below ~1M elements), and without an OpenMP
runtime (`tuning.threads() == 1`) the pass does nothing, so eager single-op kernels of
small arrays never pay for the transform interpreter.

    %r = linalg.generic {...} ins(%x : tensor<32x1000x4096xf32>) ...
  becomes
    %r = scf.forall (%i) in (2) shared_outs(%o = %e) -> (tensor<32x1000x4096xf32>) {
      %s = tensor.extract_slice %x[%i * 16, 0, 0] [16, 1000, 4096] [1, 1, 1] ...
      %g = linalg.generic {...} ins(%s : tensor<16x1000x4096xf32>) ...
      scf.forall.in_parallel { tensor.parallel_insert_slice %g into %o[...] ... } }

An elementwise op whose output mirax-streaming-stores will stream (it outgrows the
last-level cache: `stream-bytes`) is split into more tasks, up to `stream-tasks` a thread
on its outermost dim (`task_count`), and the CPU pipeline schedules their OpenMP loop
dynamically: when another process holds one of the cores, the other thread takes over
its tasks instead of waiting for it at the barrier. gelu over 32x1000x4096 on two
threads (Zen 4), calls back to back, interleaved medians of 11 rounds: beside a process
spinning on one core, one task a thread 40.4 ms, 16 tasks 27.4 (three runs: 27.4, 27.4,
31.4); quiet 20.9 vs 20.8 (AVX2 24.8 vs 25.4). (After a pause long enough for OpenMP's
workers to sleep, Linux woke the worker beside its master on the free core: both splits,
and numpy's two-thread copy, then took ~2x.)

Matmuls are left to `lowering/matmul_codegen.py`, which marks the ops around a product
that must not stay serial whatever their size (the repacking of B, the padding copies,
the zero fill of C) with `mirax.parallel`; this pass splits those too and drops the mark.
"""
from __future__ import annotations

import math

from mlir import ir

from . import tuning
from .pass_base import MiraxPass, run_transform, walk_ops

NAME = "mirax-parallelize"
MARK = "mirax.parallel_dim"
TASKS = "mirax.parallel_tasks"
# set by other passes on ops to split whatever their size (a large matmul's repacking of B)
PARALLEL = "mirax.parallel"
SKIP = ("linalg.matmul", "linalg.batch_matmul", "linalg.matvec", "linalg.vecmat", "linalg.dot")


def _static_shape(t):
    try:
        rt = ir.RankedTensorType(t)
    except ValueError:
        try:
            rt = ir.MemRefType(t)
        except ValueError:
            return None
    if not rt.has_static_shape:
        return None
    return list(rt.shape)


def loop_ranges(op):
    """(extents, iterator kinds) of a linalg op's loops, or None when unknown."""
    if op.name == "linalg.generic":
        maps = [ir.AffineMapAttr(a).value for a in op.attributes["indexing_maps"]]
        its = [str(a) for a in op.attributes["iterator_types"]]
        kinds = ["reduction" if "reduction" in s else "parallel" for s in its]
        ext = [None] * len(kinds)
        for v, m in zip(op.operands, maps):
            shape = _static_shape(v.type)
            if shape is None:
                return None
            for i, e in enumerate(m.results):
                if isinstance(e, ir.AffineDimExpr):
                    ext[e.position] = shape[i]
        if any(e is None for e in ext):
            return None
        return ext, kinds
    if op.name in ("linalg.fill", "linalg.copy", "linalg.map", "linalg.transpose"):
        if len(op.results) != 1:
            return None
        shape = _static_shape(op.results[0].type)
        return (shape, ["parallel"] * len(shape)) if shape is not None else None
    return None


def family(op, kinds):
    if op.name == "linalg.generic":
        return "reduction" if "reduction" in kinds else "elementwise"
    return tuning.FAMILY_OF.get(op.name, "other")


def choose_dim(ext, kinds, threads):
    """The outermost parallel loop to split across `threads`: one that divides evenly
    or is long enough that the imbalance is small; None if there is none."""
    cands = [d for d, (e, k) in enumerate(zip(ext, kinds)) if k == "parallel" and e >= threads]
    for d in cands:
        if ext[d] % threads == 0 or ext[d] >= 8 * threads:
            return d
    return cands[0] if cands else None


def plan(op, ranges, threads):
    """The loop to split for `op` (its `loop_ranges`), or None to leave it serial."""
    ext, kinds = ranges
    n = math.prod(ext)
    if n < tuning.table()[family(op, kinds)]["parallel_min_elements"] and PARALLEL not in op.attributes:
        return None
    return choose_dim(ext, kinds, threads)


def task_count(op, d, ext, kinds, threads, stream_bytes, per_thread) -> int:
    """How many tasks to split `op` into on its dim `d`: one a thread; but an elementwise
    op whose output mirax-streaming-stores will stream (at least `stream_bytes`) gets up
    to `per_thread` a thread on its outermost dim, as many as divide it (the tasks stay
    contiguous and of one static shape, as the streamed loop needs). The CPU pipeline
    schedules those dynamically (`cpu_pipeline._dynamic_schedule`): when another process
    holds a core, the other threads take over its tasks."""
    if d != 0 or stream_bytes < 0 or family(op, kinds) != "elementwise" or not op.results:
        return threads
    try:
        bits = ir.RankedTensorType(op.results[0].type).element_type.width
    except (ValueError, AttributeError):  # (an index or complex result: no width)
        return threads
    if math.prod(ext) * bits // 8 < stream_bytes:
        return threads
    for k in range(per_thread, 1, -1):
        if ext[0] % (threads * k) == 0:
            return threads * k
    return threads


def linalg_ops(root):
    """linalg ops with tensor results, not nested in another linalg op nor in an
    scf.forall (mirax-fuse-reductions' row loops are already spread over the threads)."""
    out = []

    def visit(op):
        for region in op.regions:
            for block in region.blocks:
                for child in block.operations:
                    child = child.operation
                    if child.name.startswith("linalg."):
                        if len(child.results):
                            out.append(child)
                        continue
                    if child.name != "scf.forall":
                        visit(child)
    visit(root)
    return out


def script(splits) -> str:
    """The transform script tiling the ops marked with each (dim, task count) of `splits`."""
    lines = []
    for i, (d, n) in enumerate(sorted(splits)):
        nt = ", ".join(str(n if k == d else 0) for k in range(d + 1))
        lines.append(f"    %m{i} = transform.structured.match attributes {{{MARK} = {d} : i64, {TASKS} = {n} : i64}} in %root "
                     f": (!transform.any_op) -> !transform.any_op")
        lines.append(f"    %t{i}, %f{i} = transform.structured.tile_using_forall %m{i} num_threads [{nt}] "
                     f": (!transform.any_op) -> (!transform.any_op, !transform.any_op)")
    body = "\n".join(lines)
    return ("module attributes {transform.with_named_sequence} {\n"
            "  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {\n"
            f"{body}\n    transform.yield\n  }}\n}}\n")


class MiraxParallelize(MiraxPass):
    name = NAME
    summary = "Tile large linalg ops into scf.forall over the threads (OpenMP after bufferization)"
    options = {"threads": (0, "threads to split over (0: tuning.threads())"),
               "min-elements": (0, "override the tuning table's parallel_min_elements (0: keep)"),
               "stream-bytes": (0, "elementwise outputs of at least this many bytes (streamed by "
                                   "mirax-streaming-stores) get `stream-tasks` tasks a thread (0: "
                                   "tuning.py's streaming_store_bytes, the last-level cache; -1: none)"),
               "stream-tasks": (0, "most tasks a thread for those (0: tuning.py's stream_tasks_per_thread)")}

    def run(self, module: ir.Operation):
        threads = int(self.opts["threads"]) or tuning.threads()
        if threads <= 1:
            return
        ops = linalg_ops(module)
        if not ops:
            return
        cfg = tuning.table()["elementwise"]
        stream_bytes = int(self.opts["stream-bytes"]) or cfg["streaming_store_bytes"]
        per_thread = int(self.opts["stream-tasks"]) or cfg["stream_tasks_per_thread"]
        splits = set()
        with module.context, ir.Location.unknown():
            i64 = ir.IntegerType.get_signless(64)
            for op in ops:
                r = loop_ranges(op) if op.name not in SKIP else None
                if r is None:
                    continue
                if self.opts["min-elements"]:
                    d = choose_dim(*r, threads) if math.prod(r[0]) >= self.opts["min-elements"] else None
                else:
                    d = plan(op, r, threads)
                if d is None:
                    continue
                n = task_count(op, d, *r, threads, stream_bytes, per_thread)
                op.attributes[MARK] = ir.IntegerAttr.get(i64, d)
                op.attributes[TASKS] = ir.IntegerAttr.get(i64, n)
                splits.add((d, n))
            if not splits:
                return
            try:
                run_transform(module, ir.Module.parse(script(splits)))
            except Exception:  # noqa: BLE001 - a schedule that does not apply leaves the ops serial
                pass
            finally:
                for op in _nested_linalg(module):
                    for a in (MARK, TASKS, PARALLEL):
                        if a in op.attributes:
                            del op.attributes[a]


def _nested_linalg(root):
    """The marked linalg ops nested in `root`, in program order (a walk: iterating blocks
    wraps every op in its dialect's OpView, importing e.g. `mlir.dialects.affine`)."""
    return [op for op in walk_ops(root, lambda n: n.startswith("linalg."))
            if MARK in op.attributes or PARALLEL in op.attributes]
