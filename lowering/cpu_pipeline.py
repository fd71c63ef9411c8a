"""`mirax-cpu-pipeline`: mirax (or linalg on tensors) all the way to the LLVM dialect.

The functions it leaves take their inputs and then their outputs as memrefs, written in
place (`buffer-results-to-out-params`), with C interfaces, so the runtime calls them on
numpy buffers without copies.

Stages (each a pass of its own, so `mirax-opt` can stop anywhere):

    convert-mirax-to-linalg     one linalg op per mirax op
    mirax-fuse                  elementwise chains + broadcasts -> one linalg.generic
    mirax-stable-shift          row maxes used only as logsumexp's shift marked (then
                                computed only for rows whose cheap-shift sum overflows)
    mirax-math-approx           f32 exp/log/erf/tanh (and pow, where the tuning table
                                says) as vectorizable arithmetic (after fusion: the ops
                                around an erf fold into its coefficients)
    mirax-fuse-reductions       row-wise groups (softmax, layer norm) -> one row-block scf.forall
    (matmul_codegen hook)       tiled, vectorized matmuls when that module is present
    mirax-parallelize           large ops -> scf.forall over the threads (tuning.py); streamed
                                ones in more tasks, scheduled dynamically (`_dynamic_schedule`)
    mirax-vectorize-transposes  transposes as blocks of vector shuffles (not gathers)
    mirax-lower-barriers        optimization barriers (checkpoint) -> their operands
    mirax-split-empty-tensors   no tensor.empty shared by more than 32 ops (analysis time)
    bufferize                   into the caller's buffers
    mirax-results-in-place      results written through reshaped views (tiled matmuls' C)
                                computed in the caller's buffer, not copied into it
    mirax-row-memory            row loops: next rows prefetched, row buffers on the stack
    mirax-early-dealloc         each temporary freed after its last use (not at the return)
    mirax-streaming-stores      outputs beyond the last-level cache: vector loops with
                                non-temporal stores (no read for ownership)
    mirax-pin-constants         x86 without AVX-512: loops' vector constants made before
                                them, opaque to LLVM (not re-broadcast every iteration)
    mirax-outline-kernels       very large functions -> noinline parts (LLVM time stays linear)
    loops, OpenMP, LLVM         scf.forall -> scf.parallel -> omp.wsloop (dynamic: matmul
                                tasks, streamed tasks; else static); LLVM's loop
                                vectorizer widens the fused loops at JIT time (O3)
    mirax-task-counter          (after convert-scf-to-openmp) a dynamic omp.wsloop -> its
                                threads take iterations from an atomic counter
    mirax-static-partition      a static omp.wsloop -> each thread its block by thread number
                                (no __kmpc_for_static_init, no loop barrier before the join)

`threads=1` (or no OpenMP runtime on the machine) leaves everything serial.
"""
from __future__ import annotations

from mlir import ir

from . import tuning
from .approx import MATH_OPS, MathApprox
from .convert_mirax_to_linalg import ConvertMiraxToLinalg
from .donate_arguments import MiraxDonateArguments, MiraxDropDonatedResults, MiraxSinkDonatedWriters
from .early_dealloc import MiraxEarlyDealloc
from .expand_bf16_truncf import MiraxExpandBf16Truncf
from .fuse import MiraxFuse
from .fuse_reductions import MiraxFuseReductions, MiraxRowMemory
from .lower_barriers import MiraxLowerBarriers
from .outline_kernels import MiraxOutlineKernels
from .parallelize import MiraxParallelize
from .pass_base import MiraxPass, walk_ops
from .pin_constants import MiraxPinConstants
from .reshape_views import MiraxReshapeViews
from .results_in_place import MiraxResultsInPlace
from .stable_shift import MiraxStableShift
from .static_partition import MiraxStaticPartition
from .streaming_stores import STREAMED, MiraxStreamingStores
from .task_counter import MiraxTaskCounter
from .vectorize_transposes import MiraxVectorizeTransposes

NAME = "mirax-cpu-pipeline"

# Bufferize straight into the caller's buffers (see DESIGN.md, "Bufferization").
BUFFERIZE = [
    "eliminate-empty-tensors",
    "one-shot-bufferize{bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map}",
    "canonicalize", "cse",
    "drop-equivalent-buffer-results",
    "buffer-results-to-out-params{modify-public-functions hoist-static-allocs}",
    # upstream's buffer-deallocation-pipeline spelled out (BufferizationPipelines.cpp),
    # so that `split_deallocs` runs before its simplification
    "func.func(expand-realloc{emit-deallocs=false})", "func.func(canonicalize)",
    "func.func(ownership-based-buffer-deallocation)", "func.func(canonicalize)",
    "func.func(buffer-deallocation-simplification)",
    "bufferization-lower-deallocations", "func.func(cse)", "func.func(canonicalize)",
]
SIMPLIFY_DEALLOCS = "func.func(buffer-deallocation-simplification)"

# OpenMP needs finalize-memref-to-llvm before convert-scf-to-cf (DESIGN.md). The passes
# that convert ops inside functions before them run nested in `func.func(...)`, so MLIR
# runs them on the functions (mirax-outline-kernels' parts) on all cores. From
# finalize-memref-to-llvm on they run on the module: convert-openmp-to-llvm turns the
# functions into llvm.func, which a func.func(...) nest would no longer visit (and
# convert-math-to-libm adds libm's declarations to the module).
TO_LLVM = [
    "scf-forall-to-parallel",
    "convert-scf-to-openmp",            # dropped when serial: scf.parallel then becomes loops
    "func.func(convert-linalg-to-loops)",
    "func.func(convert-vector-to-scf{full-unroll}, convert-complex-to-standard, "
    "arith-emulate-unsupported-floats{source-types=bf16 target-type=f32})",
    "func.func(convert-math-to-llvm)",
    "convert-math-to-libm",
    "func.func(convert-complex-to-llvm, expand-strided-metadata, lower-affine, convert-vector-to-llvm)",
    "finalize-memref-to-llvm",
    "convert-openmp-to-llvm",           # dropped when serial
    "convert-scf-to-cf", "convert-cf-to-llvm", "convert-arith-to-llvm", "convert-index-to-llvm",
    "convert-func-to-llvm", "convert-ub-to-llvm", "reconcile-unrealized-casts",
]
OPENMP_ONLY = ("convert-scf-to-openmp", "convert-openmp-to-llvm")


# set by lowering/matmul_codegen.py on a module whose matmuls it tiled (`_dynamic_schedule`)
DYNAMIC_SCHEDULE = "mirax.omp_dynamic_schedule"
MATMUL_OPS = ("linalg.matmul", "linalg.batch_matmul")


def _optimize_matmuls(op, *_):
    """The matmul code generator's hook, when lowering/matmul_codegen.py exists. (Imported
    only for a module with matmuls: ~0.6 ms of a first compile.)"""
    if not walk_ops(op, lambda n: n in MATMUL_OPS):
        return
    try:
        from .matmul_codegen import optimize_matmuls
    except ImportError:
        return
    optimize_matmuls(op)


def _strided_copies(op, *_):
    """Strided memref copies (from padding) as linalg.copy loops, not the runtime's
    element-by-element memrefCopy."""
    if not walk_ops(op, lambda n: n == "memref.copy"):
        return
    from .strided_copies import strided_copies_to_linalg
    strided_copies_to_linalg(op)


def distinct_results(op, *_):
    """A buffer returned twice by one function gets a copy for each later place: upstream
    `buffer-results-to-out-params` crashes (a segfault) on a function returning the same
    value twice, which CSE makes of `compile(lambda x: (x + 1, x + 1))`."""
    from mlir import ir
    from mlir.dialects import memref
    from .pass_base import walk_ops
    with op.context, ir.Location.unknown():
        for ret in walk_ops(op, lambda n: n == "func.return"):
            seen = set()
            for i, v in enumerate(list(ret.operands)):
                if not str(v.type).startswith("memref<"):
                    continue
                if v in seen:
                    with ir.InsertionPoint(ret):
                        c = memref.AllocOp(ir.MemRefType(v.type), [], [])
                        memref.CopyOp(v, c.result)
                    ret.operands[i] = c.result
                seen.add(v)


# uses of one tensor.empty at most, for bufferization's analysis (below). An 8-layer
# transformer step, 32 -> 8: eliminate-empty-tensors 0.65 -> 0.38 s, one-shot-bufferize
# 0.90 -> 0.41 s, 397 -> 418 malloc sites, the same step time and peak memory (Zen 4)
EMPTY_USES = 8


def split_empty_tensors(op, *_):
    """Each top-level `tensor.empty` of a function shared by more than EMPTY_USES ops (CSE
    merges every empty tensor of a type into one) becomes one per EMPTY_USES consecutive
    uses: `eliminate-empty-tensors` and `one-shot-bufferize` analyse the uses of all values
    aliasing one buffer pairwise, which made them grow with the square of the program (a
    training step: 0.7 and 0.8 s of an 8-layer step's lowering, 0.2 s split). The ops
    that shared one still reuse its buffer within each group."""
    from mlir import ir
    from .pass_base import op_id, user_op, walk_ops
    for fn in walk_ops(op, lambda n: n == "func.func"):
        if not len(fn.regions[0].blocks):
            continue
        block = fn.regions[0].blocks[0]
        empties = [e for e in walk_ops(fn, lambda n: n == "tensor.empty")
                   if e.parent == fn and len(list(e.results[0].uses)) > EMPTY_USES]
        if not empties:
            continue
        top_ops = [o.operation for o in block.operations]
        index = {op_id(o): i for i, o in enumerate(top_ops)}  # (by address: the users change)

        def top(o):  # the op of `block` that holds `o`
            while o.parent != fn:
                o = o.parent
            return o
        for e in empties:
            uses = sorted(((index[op_id(top(user_op(u)))], u.operand_number, user_op(u)) for u in e.results[0].uses),
                          key=lambda t: t[0])
            for j in range(EMPTY_USES, len(uses), EMPTY_USES):
                group = uses[j:j + EMPTY_USES]
                v = e.clone(ir.InsertionPoint(top_ops[group[0][0]])).results[0]
                for _, k, user in group:
                    user.operands[k] = v


def split_deallocs(op, *_):
    """Each `bufferization.dealloc` of several fresh allocations (`memref.alloc` results,
    which cannot alias one another) that retains nothing becomes one per allocation.
    Ownership-based deallocation frees every buffer of a function body in one dealloc at
    its end; the simplification then splits it itself, but only after asking the alias
    analysis about every pair: quadratic (value_and_grad of a 3,000-op chain: 1,520
    buffers, 0.76 s; of 10,000 ops: 7.9 s)."""
    from mlir import ir
    from .pass_base import defining_op, walk_ops
    for d in walk_ops(op, lambda n: n == "bufferization.dealloc"):
        n_mem, n_cond, n_keep = ir.DenseI32ArrayAttr(d.attributes["operandSegmentSizes"])
        if n_keep or n_mem < 2 or n_cond != n_mem:
            continue
        memrefs, conds = list(d.operands)[:n_mem], list(d.operands)[n_mem:]
        if not all((o := defining_op(m)) is not None and o.name == "memref.alloc" for m in memrefs) \
                or len(set(memrefs)) != n_mem:
            continue
        with d.context, d.location, ir.InsertionPoint(d):
            for m, c in zip(memrefs, conds):
                ir.Operation.create("bufferization.dealloc", results=[], operands=[m, c],
                                    attributes={"operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 1, 0])})
        d.erase()


# LLVM's loop unroller on the scalar loops of linalg ops (which its vectorizer has
# already widened) cost a quarter of the JIT time of a transformer training step (0.3 of
# 1.2 s) for no measurable speed: those loops stream memory.
# Modules with fewer loops are left alone: their JIT time is small anyway, and the
# attribute's first use imports mlir.dialects.llvm (~25-70 ms, a third of the first
# compile of a gelu in a fresh process).
NO_UNROLL = "#llvm.loop_annotation<unroll = <disable = true>>"
ANNOTATE_MIN_LOOPS = 64


def _annotate_loops(op, *_):
    """`llvm.loop.unroll.disable` on every scf.for without vector values (the loops of
    linalg ops; the matmul and transpose kernels' vector loops keep LLVM's unrolling),
    in modules of at least ANNOTATE_MIN_LOOPS loops."""
    from mlir import ir
    from .pass_base import walk_ops
    loops = walk_ops(op, lambda n: n == "scf.for")
    if len(loops) < ANNOTATE_MIN_LOOPS:
        return
    mark = "mirax.vector_loop"  # (a temporary mark: ir.Operation hashes are not reliable keys)
    with op.context:
        attr = ir.Attribute.parse(NO_UNROLL)
        for v in walk_ops(op, lambda n: n.startswith("vector.")):
            p = v.parent
            while p is not None and p.name != "func.func":
                if p.name == "scf.for":
                    p.attributes[mark] = ir.UnitAttr.get()
                p = p.parent
        for loop in loops:
            if mark in loop.attributes:
                del loop.attributes[mark]
            else:
                loop.attributes["loop_annotation"] = attr


def _dynamic_schedule(op, *_):
    """schedule(dynamic) for the omp.wsloops of tiled matmuls and of streamed elementwise
    ops (mirax-parallelize's `task_count`: their tasks balance so when another process
    holds a core); the others (row loops, smaller ops: many short iterations) stay static,
    a dispatch call an iteration costing more than it balances."""
    if DYNAMIC_SCHEDULE in op.attributes:
        from .matmul_codegen import openmp_dynamic_schedule
        openmp_dynamic_schedule(op)
    dynamic = None
    for loop in walk_ops(op, lambda n: n == "omp.wsloop"):
        if "schedule_kind" not in loop.attributes and any(
                STREAMED in o.attributes for o in walk_ops(loop, lambda n: n == "scf.for")):
            dynamic = dynamic or ir.Attribute.parse("#omp<schedulekind dynamic>", op.context)
            loop.attributes["schedule_kind"] = dynamic


class MiraxCpuPipeline(MiraxPass):
    name = NAME
    summary = "Lower mirax to LLVM for the CPU: linalg, fusion, threads, bufferization into out-params, LLVM"
    options = {"threads": (0, "threads for large kernels (0: tuning.threads(); 1: serial)"),
               "fuse": (True, "fuse elementwise ops (mirax-fuse)"),
               "approx": (True, "f32 exp/log/erf/tanh as polynomials (mirax-math-approx)"),
               "matmuls": (True, "tile and vectorize matmuls (lowering/matmul_codegen.py); off: "
                                 "they were already (matmul_codegen.lower_to_llvm) or stay generic"),
               "stream-bytes": (0, "outputs of at least this many bytes get streaming stores "
                                   "(mirax-streaming-stores; 0: the host's last-level cache, -1: none)")}

    def add_to(self, pm):
        threads = self.add_tensor_passes(pm)
        MiraxLowerBarriers().add_to(pm)  # after the last CSE on tensors (dialect/barrier.py)
        MiraxReshapeViews().add_to(pm)  # (reshaped results computed in the caller's buffer)
        for p in BUFFERIZE:
            if p == "eliminate-empty-tensors":
                pm.add(split_empty_tensors, name="mirax-split-empty-tensors")
            if p.startswith("one-shot-bufferize"):  # (donated arguments' writers after their readers)
                MiraxSinkDonatedWriters().add_to(pm)
            if p == "drop-equivalent-buffer-results":  # (results in donated arguments: not out-params)
                MiraxDropDonatedResults().add_to(pm)
            if p.startswith("buffer-results-to-out-params"):
                pm.add(distinct_results, name="mirax-distinct-results")
            if p == SIMPLIFY_DEALLOCS:
                pm.add(split_deallocs, name="mirax-split-deallocs")
            pm.add(p)
        MiraxResultsInPlace().add_to(pm)  # results written through reshaped views: not copied
        pm.add(_strided_copies, name="mirax-strided-copies")
        # rows prefetched, row buffers on the stack, large outputs' rows by streaming stores
        MiraxRowMemory(threads=threads, **{"stream-bytes": int(self.opts["stream-bytes"])}).add_to(pm)
        MiraxEarlyDealloc().add_to(pm)
        if int(self.opts["stream-bytes"]) >= 0:
            MiraxStreamingStores(**{"min-bytes": int(self.opts["stream-bytes"])}).add_to(pm)
        MiraxPinConstants().add_to(pm)  # (x86 without AVX-512; nothing elsewhere)
        MiraxOutlineKernels().add_to(pm)
        for p in [p for p in TO_LLVM if threads > 1 or p not in OPENMP_ONLY]:
            pm.add(p)
            if p == "convert-scf-to-openmp":
                pm.add(_dynamic_schedule, name="mirax-omp-dynamic-schedule")
                MiraxTaskCounter().add_to(pm)  # (those loops' iterations from a counter of their own)
                MiraxStaticPartition().add_to(pm)  # (the others' blocks from the thread number)
            if p == "func.func(convert-linalg-to-loops)":
                pm.add(_annotate_loops, name="mirax-annotate-loops")
            if "arith-emulate-unsupported-floats" in p:  # (its f32 results back to bf16)
                MiraxExpandBf16Truncf().add_to(pm)

    def add_tensor_passes(self, pm) -> int:
        """The passes on tensors, up to bufferization (compile's "optimized" stage);
        returns the thread count they planned for."""
        threads = int(self.opts["threads"]) or tuning.threads()
        ConvertMiraxToLinalg().add_to(pm)
        MiraxDonateArguments().add_to(pm)  # (results into donated arguments: a no-op without any)
        for p in ["canonicalize", "cse"]:
            pm.add(p)
        if self.opts["fuse"]:
            MiraxFuse().add_to(pm)
            MiraxStableShift().add_to(pm)  # (while exp and log are math ops; fuse-reductions acts on it)
        if self.opts["approx"]:  # after fusion: it sees the ops around each function in one body
            # (pow: the polynomial or the vector math library, as the tuning table says)
            ops = [o for o in MATH_OPS if o != "powf" or tuning.table()["math"]["pow_polynomial"]]
            MathApprox(target="cpu", ops=",".join(ops)).add_to(pm)
        if self.opts["fuse"]:
            MiraxFuseReductions(threads=threads).add_to(pm)
        if self.opts["matmuls"]:
            pm.add(_optimize_matmuls, name="mirax-matmul-codegen")
        MiraxParallelize(threads=threads, **{"stream-bytes": int(self.opts["stream-bytes"])}).add_to(pm)
        MiraxVectorizeTransposes().add_to(pm)
        return threads
