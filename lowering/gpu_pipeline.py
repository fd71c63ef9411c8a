"""`mirax-gpu-pipeline`: mirax (or fused linalg on tensors) to SPIR-V kernels and a launch plan.

Stages (each a pass, so `mirax-opt` can stop anywhere and `lower().as_text` shows them):

    convert-mirax-to-linalg, mirax-fuse, mirax-math-approx    shared with the CPU
    mirax-gpu-map         a strategy per kernel: scf.forall over blocks and threads
    bufferize             into the caller's buffers (out-params), workgroup memory = space 3
    mirax-gpu-launch      block foralls -> gpu.launch (barriers between thread loops);
                          copies and fills left at host level become kernels too
    gpu                   linalg -> loops in the kernels, private buffers on the stack,
                          outlined gpu.func kernels with their workgroup size; row
                          kernels' partials kept in registers while a thread loops
                          (mirax-gpu-private-partials) and folded in a tree
                          (mirax-gpu-tree-reductions) (compile's "gpu" stage)
    spirv                 spirv-attach-target (capabilities from the device),
                          convert-gpu-to-spirv (compile's "spirv" stage)

`lower_to_spirv(module)` does it all and returns a `GpuProgram`: the SPIR-V binary of each
kernel and the launch plan read off what is left of the host function (its buffers and
its `gpu.launch_func`s in order), which runtime/vulkan.py executes.

    prog = lower_to_spirv(module, "main")
    prog.kernels["main_kernel"].spirv      # bytes, validated by spirv-val in the tests
    prog.steps                             # [Launch(kernel, grid, block, args), ...]
"""
from __future__ import annotations

import math
import dataclasses
from dataclasses import dataclass, field

from mlir import ir
from mlir.passmanager import PassManager

from .approx import MathApprox
from .convert_mirax_to_linalg import ConvertMiraxToLinalg
from .fuse import MiraxFuse
from .gpu_map import BLOCK, MAX_BUFFERS, SUBGROUP, MiraxGpuMap, THREADS, parallel_tiles
from .gpu_matmul_registers import matmul_accumulators_in_registers
from .gpu_private_partials import private_partials
from .gpu_tree_reductions import tree_reductions
from .lower_barriers import MiraxLowerBarriers
from .pass_base import (MiraxPass, PassError, defining_op, element_type, isa, memory_space, op_id, private_memref_type,
                        run_transform, user_op, walk_ops)

NAME = "mirax-gpu-pipeline"

BUFFERIZE = [
    "eliminate-empty-tensors",
    "empty-tensor-to-alloc-tensor",
    "one-shot-bufferize{bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map}",
    "canonicalize", "cse",
    "buffer-results-to-out-params{modify-public-functions hoist-static-allocs}",
    "canonicalize",
]

KERNEL_LOOPS = [
    "func.func(convert-linalg-to-loops)",  # after mirax-gpu-kernel-copies
    "canonicalize", "cse",
    "fold-memref-alias-ops",
]
OUTLINE = [
    "gpu-launch-sink-index-computations",
    "gpu-kernel-outlining",
    "canonicalize",
]


@dataclass
class Target:
    """What the device supports: the SPIR-V capabilities and extensions to use."""

    float64: bool = True
    int64: bool = True
    int16: bool = True
    int8: bool = True
    float16: bool = True
    storage8: bool = True
    storage16: bool = True
    max_threads: int = THREADS
    subgroup: int = SUBGROUP  # the device's subgroup size: row workgroups have at least this many threads
    # buffers one kernel may bind (Vulkan's maxPerStageDescriptorStorageBuffers; by default
    # Metal's argument table, 31): fusion stays within it, and a kernel beyond it is refused
    max_buffers: int = MAX_BUFFERS
    # loop iterations one thread may run (0: no limit). lavapipe's shaders (llvmpipe's
    # gallivm) stop every loop of an invocation after 65,535 iterations in all: past it,
    # results are silently wrong, so such a kernel is refused there
    max_loop_iterations: int = 0
    # every float op decorated NoContraction (and a*b + c written as fma first): Mesa's
    # Vulkan drivers (lavapipe: NIR, then LLVM) otherwise reassociate float arithmetic,
    # which undoes the error terms of our approximations (exp's x - m ln2_hi - m ln2_lo:
    # 4e-6 relative error). Not for Metal: SPIRV-Cross writes each such op as a call to an
    # optnone helper there, and the runtime compiles MSL without fast math anyway
    exact_floats: bool = False

    def attach_options(self) -> str:
        caps = ["Shader"]
        exts = ["SPV_KHR_storage_buffer_storage_class"]
        if self.int64:
            caps.append("Int64")
        if self.float64:
            caps.append("Float64")
        if self.int8:
            caps.append("Int8")
        if self.int16:
            caps.append("Int16")
        if self.float16:
            caps.append("Float16")
        if self.storage8:
            caps += ["StorageBuffer8BitAccess"]
            exts.append("SPV_KHR_8bit_storage")
        if self.storage16:
            caps += ["StorageBuffer16BitAccess"]
            exts.append("SPV_KHR_16bit_storage")
        return f"ver=v1.3 caps={','.join(caps)} exts={','.join(exts)} client_api=Vulkan"

    def key(self):
        return self.attach_options() + (f" threads={self.max_threads} subgroup={self.subgroup} buffers={self.max_buffers}"
                                        f" loops={self.max_loop_iterations} exact={int(self.exact_floats)}")


DEFAULT_TARGET = Target()


def tensor_passes(pm, threads=THREADS, subgroup=SUBGROUP, max_buffers=MAX_BUFFERS):
    """The tensor-level passes shared with the CPU, then the GPU mapping."""
    ConvertMiraxToLinalg(target="gpu").add_to(pm)
    for p in ["canonicalize", "cse"]:
        pm.add(p)
    # (mirax-gpu-map maps single-result generics)
    MiraxFuse(**{"multi-use": False, "max-buffers": max_buffers}).add_to(pm)
    # after fusion, as on the CPU; tanh stays the target's own (GLSL.std.450 Tanh, Metal's
    # tanh, NVVM's): with the polynomial, a row kernel that reduces tanh(x) and reads it
    # again (softmax(tanh(x)), tanh(x) - max(tanh(x))) gave wrong values on lavapipe
    # (errors up to 3.0 on 4x8; the gpu-dialect IR and the MSL read right, the cause is
    # not found; not the driver's reassociation, which Target.exact_floats now stops), and
    # the same kernel with the target's tanh is right. powf: the target's, with C99's
    # cases; sin/cos/tan: the argument reduced exactly (the targets' are inexact far from
    # 0); expm1/log1p: the targets' have none (exp(x) - 1 lost x near 0: 2e-4 relative)
    MathApprox(target="gpu", ops="exp,log,erf,powf,sin,cos,tan,expm1,log1p").add_to(pm)
    MiraxGpuMap(threads=threads, subgroup=subgroup, **{"max-buffers": max_buffers}).add_to(pm)


def _strip_c_interface(op, *_):
    with op.context:
        for f in walk_ops(op, lambda n: n == "func.func"):
            if "llvm.emit_c_interface" in f.attributes:
                del f.attributes["llvm.emit_c_interface"]


def _bufferize(pm):
    pm.add(_strip_c_interface, name="mirax-strip-c-interface")
    MiraxLowerBarriers().add_to(pm)  # after the last CSE on tensors (dialect/barrier.py)
    from .cpu_pipeline import distinct_results, split_empty_tensors
    for p in BUFFERIZE:
        if p == "eliminate-empty-tensors":  # (as on the CPU: the analyses grow with an empty's uses squared)
            pm.add(split_empty_tensors, name="mirax-split-empty-tensors")
        if p.startswith("buffer-results-to-out-params"):
            pm.add(distinct_results, name="mirax-distinct-results")  # (a value returned twice)
        pm.add(p)


# ---- block foralls and leftovers -> gpu.launch --------------------------------------------

_ANY = "!transform.any_op"


def _top_level_leftovers(func_op):
    """Memref ops at host level that still touch data: copies and linalg ops left by
    bufferization (returning an input, concatenation, padding)."""
    body = func_op.regions[0].blocks[0]
    out = []
    for o in body.operations:
        o = o.operation
        if o.name == "memref.copy" or (o.name.startswith("linalg.") and not len(o.results)):
            out.append(o)
    return out


def _copy_as_linalg(c):
    """Replace `memref.copy` `c` by the same `linalg.copy` (tileable, and lowered to loops
    inside kernels); returns the new op."""
    from mlir.dialects import linalg
    with c.context, c.location, ir.InsertionPoint(c):
        new = linalg.copy(c.operands[0], outs=[c.operands[1]])
    c.erase()
    op = new.owner if hasattr(new, "owner") else new
    return op.operation if hasattr(op, "operation") else op


LEFTOVER = "mirax.gpu_leftover_forall"  # the block forall of a host-level leftover, by number


def gpu_launch(module):
    """Turn each kernel forall into a gpu.launch; leftover host-level memref work too.

    The ops are matched by class (the same tiling, the same workgroup size), a match and
    its transforms for all of a class at once: a match walks the whole function, so one
    per op cost (ops x function) — 8 s of an 8-layer transformer step's GPU lowering."""
    from .gpu_map import _l, _block_mapping, _thread_mapping
    i64 = ir.IntegerType.get_signless(64, module.context)
    for f in walk_ops(module, lambda n: n == "func.func"):
        if not f.regions[0].blocks:
            continue
        _copies_as_linalg(f)
        lines = []
        classes = {}  # (tiles, threads, workgroup size) of host-level leftovers -> class number
        with f.context:
            for o in _top_level_leftovers(f):
                shape = ir.MemRefType(o.operands[-1].type).shape
                if not shape:  # no loops to tile: one thread does it
                    _single_thread_launch(o)
                    continue
                tiles, thr, block = _memref_plan(o, shape)
                key = (tuple(tiles), tuple(thr), tuple(block))
                n = classes.setdefault(key, len(classes))
                o.attributes["mirax.gpu_leftover"] = ir.IntegerAttr.get(i64, n)
        for (tiles, thr, block), n in classes.items():
            h = f"%l{n}"
            nblk = sum(1 for t in tiles if t)
            lines += [f'{h} = transform.structured.match attributes{{mirax.gpu_leftover = {n} : i64}} '
                      f'in %root : ({_ANY}) -> {_ANY}',
                      f"%lt{n}, %lf{n} = transform.structured.tile_using_forall {h} tile_sizes "
                      f"{_l(tiles)} (mapping = [{_block_mapping(nblk)}]) : ({_ANY}) -> ({_ANY}, {_ANY})",
                      f"%ltt{n}, %ltf{n} = transform.structured.tile_using_forall %lt{n} num_threads "
                      f"{_l(thr)} (mapping = [{_thread_mapping(thr)}]) : ({_ANY}) -> ({_ANY}, {_ANY})",
                      # a param carries one integer: tag the foralls with the class's number,
                      # then give them its workgroup size (below)
                      f"%lb{n} = transform.param.constant {n} : i64 -> !transform.param<i64>",
                      f"transform.annotate %lf{n} \"{LEFTOVER}\" = %lb{n} : {_ANY}, !transform.param<i64>"]
        if lines:
            _apply(f, lines)
            blocks = {n: block for (_, _, block), n in classes.items()}
            with f.context:
                for x in walk_ops(f, lambda nm: nm == "scf.forall"):
                    if LEFTOVER in x.attributes:
                        x.attributes[BLOCK] = ir.DenseI64ArrayAttr.get(
                            list(blocks[ir.IntegerAttr(x.attributes[LEFTOVER]).value]))
        _workgroup_copies_over_threads(f)
        # every kernel forall: map to blocks, then its nested thread loops (by workgroup size)
        sizes = {}
        with f.context:
            for x in walk_ops(f, lambda nm: nm == "scf.forall"):
                if BLOCK in x.attributes:
                    block = tuple(ir.DenseI64ArrayAttr(x.attributes[BLOCK]))
                    x.attributes["mirax.gpu_launch"] = ir.IntegerAttr.get(i64, sizes.setdefault(block, len(sizes)))
        lines = []
        for block, j in sizes.items():
            lines += [f'%g{j} = transform.structured.match attributes{{mirax.gpu_launch = {j} : i64}} '
                      f'in %root : ({_ANY}) -> {_ANY}',
                      f"%gl{j} = transform.gpu.map_forall_to_blocks %g{j} generate_gpu_launch "
                      f": ({_ANY}) -> {_ANY}",
                      f"%gt{j} = transform.gpu.map_nested_forall_to_threads %gl{j} block_dims = {_l(block)} "
                      f": ({_ANY}) -> {_ANY}"]
        if lines:
            _apply(f, lines)


def _workgroup_copies_over_threads(f):
    """Copies into workgroup memory inside a kernel (matmul's A and B tiles): every thread
    copies its share, and the barrier after the loop makes the tile visible to all (the
    copies of kernels of one workgroup size tiled together: see `gpu_launch`)."""
    sizes = {}
    for x in walk_ops(f, lambda nm: nm == "scf.forall"):
        if BLOCK not in x.attributes:
            continue
        block = tuple(ir.DenseI64ArrayAttr(x.attributes[BLOCK]))
        for c in walk_ops(x, lambda nm: nm == "memref.copy"):
            t = ir.MemRefType(c.operands[1].type)
            if memory_space(t) != 3 or t.rank != 2:
                continue
            op = _copy_as_linalg(c)
            with f.context:
                op.attributes["mirax.gpu_wgcopy"] = ir.IntegerAttr.get(
                    ir.IntegerType.get_signless(64), sizes.setdefault(block, len(sizes)))
    lines = []
    for block, n in sizes.items():
        lines += [f'%c{n} = transform.structured.match attributes{{mirax.gpu_wgcopy = {n} : i64}} '
                  f'in %root : ({_ANY}) -> {_ANY}',
                  f"%ct{n}, %cf{n} = transform.structured.tile_using_forall %c{n} num_threads "
                  f"[{block[1]}, {block[0]}] (mapping = [#gpu.thread<y>, #gpu.thread<x>]) "
                  f": ({_ANY}) -> ({_ANY}, {_ANY})"]
    if lines:
        _apply(f, lines)


def _single_thread_launch(op):
    """Wrap a loop-free host-level op (0-d) in a gpu.launch of one thread."""
    from mlir.dialects import arith, gpu
    with op.context, op.location, ir.InsertionPoint(op):
        one = arith.ConstantOp(ir.IndexType.get(), 1).result
        launch = gpu.LaunchOp((one, one, one), (one, one, one))
        # the builder makes the body block (12 index arguments: ids and sizes)
        block = launch.body.blocks[0]
    with op.context, op.location, ir.InsertionPoint(block):
        term = gpu.TerminatorOp()
    op.move_before(term)


def _memref_plan(op, shape):
    """Block tiles, thread counts and workgroup size for a host-level memref op."""
    return parallel_tiles(list(shape), list(range(len(shape))), THREADS, len(shape))


def _copies_as_linalg(f):
    """Host-level `memref.copy`s become `linalg.copy` (tileable onto the GPU)."""
    for op in [o.operation for o in f.regions[0].blocks[0].operations if o.operation.name == "memref.copy"]:
        _copy_as_linalg(op)


def _apply(f, lines):
    inner = "\n    ".join(lines)
    script = ("module attributes {transform.with_named_sequence} {\n"
              "  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {\n"
              f"    {inner}\n    transform.yield\n  }}\n}}\n")
    with f.context, ir.Location.unknown():
        smod = ir.Module.parse(script)
        try:
            run_transform(f, smod)
        except (ValueError, ir.MLIRError) as err:
            raise PassError(f, f"mirax-gpu-launch: {err}") from None


def _set_workgroup_sizes(module, *_):
    """`spirv.entry_point_abi` on each outlined kernel, from its launch's block size
    (the SPIR-V conversion ignores `known_block_size`)."""
    with module.context:
        for g in walk_ops(module, lambda n: n == "gpu.func"):
            if "known_block_size" in g.attributes:
                size = list(ir.DenseI32ArrayAttr(g.attributes["known_block_size"]))
            else:
                size = [1, 1, 1]
            g.attributes["spirv.entry_point_abi"] = ir.Attribute.parse(
                f"#spirv.entry_point_abi<workgroup_size = [{size[0]}, {size[1]}, {size[2]}]>")


def _kernel_copies(module, *_):
    """memref.copy inside a kernel (between a row's private buffers) -> linalg.copy -> loops."""
    for launch in walk_ops(module, lambda n: n == "gpu.launch"):
        for c in walk_ops(launch, lambda n: n == "memref.copy"):
            _copy_as_linalg(c)


def _private_buffers(module, *_):
    """Buffers allocated inside a kernel without a memory space are per thread (a row's
    running reduction): make them allocas, which become private (Function) variables.
    Workgroup buffers (space 3) stay allocs; SPIR-V makes them workgroup variables.
    Vulkan's numbering of memory spaces: 3 Workgroup, 6 Function."""
    from mlir.dialects import memref
    for launch in walk_ops(module, lambda n: n == "gpu.launch"):
        for a in walk_ops(launch, lambda n: n in ("memref.alloc", "memref.dealloc")):
            t = ir.MemRefType(a.operands[0].type if a.name == "memref.dealloc" else a.results[0].type)
            if t.memory_space is not None:
                continue
            if a.name == "memref.dealloc":
                a.erase()
                continue
            shape = list(t.shape)
            if len(list(a.operands)):
                # a partial tile's size: its upper bound sizes a private array, when every
                # user only loads and stores (a SPIR-V Function variable has a static size)
                bounds = [_upper_bound(v) for v in a.operands]
                if None in bounds or not all(user_op(u).name in ("memref.load", "memref.store")
                                             for u in a.results[0].uses):
                    continue
                dyn = iter(bounds)
                shape = [next(dyn) if d == ir.ShapedType.get_dynamic_size() else d for d in shape]
            private = private_memref_type(shape, t.element_type)
            with a.context, a.location, ir.InsertionPoint(a):
                new = memref.AllocaOp(private, [], [])
            a.results[0].replace_all_uses_with(new.result)
            a.erase()


def _upper_bound(v):
    """A constant upper bound of an index value built by tiling (constants, affine.min with
    a constant result, affine.max of bounded values), or None."""
    op = defining_op(v)
    if op is None:
        return None
    if op.name == "arith.constant":
        return ir.IntegerAttr(op.attributes["value"]).value
    if op.name not in ("affine.min", "affine.max"):
        return None
    amap = ir.AffineMapAttr(op.attributes["map"]).value
    operands = list(op.operands)

    def bound(e):
        # upper bounds of sums, and of products and divisions by positive constants, of
        # values with known bounds (a thread's share: `s0 ceildiv 256` with s0 <= 256)
        if isa(ir.AffineConstantExpr, e):
            return ir.AffineConstantExpr(e).value
        if isa(ir.AffineDimExpr, e):
            return _upper_bound(operands[ir.AffineDimExpr(e).position])
        if isa(ir.AffineSymbolExpr, e):
            return _upper_bound(operands[amap.n_dims + ir.AffineSymbolExpr(e).position])
        for cls, f in ((ir.AffineAddExpr, lambda a, c: a + c), (ir.AffineMulExpr, lambda a, c: a * c),
                       (ir.AffineCeilDivExpr, lambda a, c: -(-a // c)), (ir.AffineFloorDivExpr, lambda a, c: a // c)):
            if isa(cls, e):
                b = cls(e)
                if cls is ir.AffineAddExpr:
                    lhs, rhs = bound(b.lhs), bound(b.rhs)
                    return None if lhs is None or rhs is None else lhs + rhs
                if not isa(ir.AffineConstantExpr, b.rhs) or ir.AffineConstantExpr(b.rhs).value <= 0:
                    return None
                lhs = bound(b.lhs)
                return None if lhs is None else f(lhs, ir.AffineConstantExpr(b.rhs).value)
        return None
    bounds = [bound(e) for e in amap.results]
    if op.name == "affine.min":
        known = [b for b in bounds if b is not None]
        return min(known) if known else None
    return None if None in bounds else max(bounds)


def _sink_host_loads(module, *_):
    """A scalar read on the host (a pad value, a 0-d operand) that a kernel uses is read
    by the kernel instead: the host never touches device memory. Each launch gets its own
    copy of the memref.load at the top of its body."""
    originals = {}  # the host loads read by kernels (by op_id): erased once none reads them
    for launch in walk_ops(module, lambda n: n == "gpu.launch"):
        body = launch.regions[0].blocks[0]
        nested = walk_ops(launch, lambda n: True)
        inside = {op_id(o) for o in nested}
        moved = {}
        for op in nested:
            for i, v in enumerate(op.operands):
                d = defining_op(v)
                if d is None or d.name != "memref.load" or op_id(d) in inside:
                    continue
                if op_id(d) not in moved:
                    with ir.InsertionPoint.at_block_begin(body):
                        c = d.clone()
                    moved[op_id(d)] = c
                    originals[op_id(d)] = d
                op.operands[i] = moved[op_id(d)].results[0]
    # (once, not a walk of the module per launch: quadratic in a large program's kernels)
    for d in originals.values():
        if not list(d.results[0].uses):
            d.erase()


def _drop_final_barriers(module, *_):
    """Thread mapping puts a barrier after every thread loop; the one right before the end
    of a kernel orders nothing (the launch boundary does) and only costs a sync."""
    for launch in walk_ops(module, lambda n: n == "gpu.launch"):
        ops = [o.operation for o in launch.regions[0].blocks[0].operations]
        if len(ops) >= 2 and ops[-1].name == "gpu.terminator" and ops[-2].name == "gpu.barrier":
            ops[-2].erase()


class MiraxGpuLaunch(MiraxPass):
    name = "mirax-gpu-launch"
    summary = "Map kernel foralls (and host-level copies) to gpu.launch with their workgroup sizes"

    def run(self, module):
        gpu_launch(module)


class MiraxGpuPipeline(MiraxPass):
    name = NAME
    summary = "Lower mirax to the gpu dialect and SPIR-V: a mapping strategy per kernel, Vulkan kernels"
    options = {"stage": ("spirv", "stop after: gpu | spirv"),
               "threads": (THREADS, "threads per workgroup"),
               "subgroup": (SUBGROUP, "the device's subgroup size: a row workgroup's fewest threads"),
               "max-buffers": (MAX_BUFFERS, "buffers one kernel may bind (the device's limit)"),
               "exact-floats": (0, "1: every float op NoContraction, a * b + c as fma first (Vulkan's "
                                   "Mesa drivers reassociate otherwise; mirax's Vulkan runtime sets it)")}

    def add_to(self, pm, target: Target | None = None):
        target = target or DEFAULT_TARGET
        if int(self.opts["exact-floats"]) and not target.exact_floats:
            target = dataclasses.replace(target, exact_floats=True)
        tensor_passes(pm, int(self.opts["threads"]), int(self.opts["subgroup"]), int(self.opts["max-buffers"]))
        add_gpu_passes(pm)
        if self.opts["stage"] != "gpu":
            add_spirv_passes(pm, target)


def add_gpu_passes(pm):
    """Bufferization to the outlined gpu.func kernels (compile's "gpu" stage)."""
    _bufferize(pm)
    MiraxGpuLaunch().add_to(pm)
    pm.add(_kernel_copies, name="mirax-gpu-kernel-copies")
    for p in KERNEL_LOOPS:
        pm.add(p)
    pm.add(matmul_accumulators_in_registers, name="mirax-gpu-matmul-registers")
    pm.add(_private_buffers, name="mirax-gpu-private-buffers")
    pm.add(_sink_host_loads, name="mirax-gpu-sink-host-loads")
    pm.add(_drop_final_barriers, name="mirax-gpu-drop-final-barriers")
    for p in OUTLINE:
        pm.add(p)
    pm.add(_set_workgroup_sizes, name="mirax-spirv-workgroup-size")
    # (both need the kernels' block sizes)
    pm.add(private_partials, name="mirax-gpu-private-partials")
    pm.add(tree_reductions, name="mirax-gpu-tree-reductions")
    pm.add("canonicalize")


def _dtype_name(t):
    s = str(t)
    if s.startswith("complex"):
        return "complex64"
    return {"f64": "float64", "f32": "float32", "f16": "float16", "bf16": "bfloat16", "i64": "int64/uint64",
            "i32": "int32/uint32", "i16": "int16/uint16", "i8": "int8/uint8", "i1": "bool"}.get(s, s)


def check_target(target: Target):
    """A pass that refuses, by op and dtype, what the target cannot run, before SPIR-V
    conversion would fail with a bare 'failed to legalize' (or, for 16-bit types on a
    device without 16-bit storage, silently pack them into 32-bit words), and a kernel
    binding more buffers than the device can (a Vulkan driver's behaviour is undefined
    then: lavapipe crashed)."""
    missing = {"f64": not target.float64, "i64": not target.int64,
               "f16": not (target.float16 and target.storage16), "i16": not (target.int16 and target.storage16),
               "i8": not (target.int8 and target.storage8)}

    def run(module, *_):
        names = {}  # type -> its element type and that type's name (a program has few types)
        for gm in walk_ops(module, lambda n: n == "gpu.module"):
            for g in walk_ops(gm, lambda n: n == "gpu.func"):
                buffers = [ir.MemRefType(a.type) for a in g.regions[0].blocks[0].arguments
                           if isa(ir.MemRefType, a.type)]
                if len(buffers) > target.max_buffers:  # (what fusion bounds: a kernel made otherwise)
                    raise PassError(g, f"a GPU kernel here binds {len(buffers)} buffers; the device binds at "
                                       f"most {target.max_buffers} per kernel (split the computation, or run "
                                       f"it on mr.cpu)")
                for t in buffers:
                    # (SPIR-V kernels index with 32 bits: past 2^31 elements the offsets wrap,
                    # writes land outside the buffer and the driver crashes)
                    if t.has_static_shape and math.prod(t.shape) >= 2 ** 31:
                        raise PassError(g, f"a GPU kernel here reads or writes {math.prod(t.shape)} elements of "
                                           f"one array ({t}); GPU kernels index with 32 bits, at most 2^31 - 1 "
                                           f"elements an array (split the array, or run this on mr.cpu)")
            for op in walk_ops(gm, lambda n: True):
                for v in list(op.operands) + list(op.results):
                    t = v.type
                    if t not in names:
                        et = element_type(t)
                        names[t] = (et, str(et))
                    et, s = names[t]
                    if s.startswith("complex"):
                        raise PassError(op, f"{_dtype_name(et)} cannot run on the GPU: SPIR-V has no complex "
                                            f"type (run this op on mr.cpu)")
                    if s == "bf16":  # (mirax-gpu-bf16-as-i16 leaves none: SPIR-V would store it as f32)
                        raise PassError(op, f"a bfloat16 value is left in a GPU kernel after its conversion "
                                            f"to 16-bit integers ({op.name}; run this on mr.cpu)")
                    if missing.get(s):
                        raise PassError(op, f"{_dtype_name(et)} cannot run on this GPU: the device does not "
                                            f"report {_dtype_name(et)} support (run this op on mr.cpu)")
                    if s == "f64" and op.name.startswith("math."):
                        raise PassError(op, f"float64 {op.name} cannot run on the GPU: SPIR-V's GLSL.std.450 "
                                            f"math is 16/32-bit only (use float32, or run on mr.cpu)")
    return run


def check_loops(target: Target):
    """A pass (before lower-affine: the tiles' bounds are affine.min ops still) that
    refuses a kernel whose threads would loop more than `target.max_loop_iterations`."""
    def run(module, *_):
        if not target.max_loop_iterations:
            return
        for g in walk_ops(module, lambda n: n == "gpu.func"):
            loops = _loop_iterations(g)
            if loops > target.max_loop_iterations:
                raise PassError(g, f"a GPU kernel here loops {loops} times a thread; this device (lavapipe) "
                                   f"stops a kernel's loops after {target.max_loop_iterations} iterations, "
                                   f"which would give wrong results (run this on mr.cpu)")
    return run


def _loop_iterations(kernel) -> int:
    """The iterations a thread of `kernel` (a gpu.func) runs at most in all its scf.for
    loops, by their bounds' constant upper bounds (`_upper_bound`; a loop without one
    counts as one iteration)."""
    total = 0
    for loop in walk_ops(kernel, lambda n: n == "scf.for"):
        n = 1
        x = loop
        while x is not None and x.name != "gpu.func":
            if x.name == "scf.for":
                n *= _trip_count(x)
            x = x.parent
        total += n
    return total


def _trip_count(loop) -> int:
    lb, ub, step = list(loop.operands)[:3]
    d = defining_op(lb)
    lb = ir.IntegerAttr(d.attributes["value"]).value if d is not None and d.name == "arith.constant" else 0
    ub, step = _upper_bound(ub), _upper_bound(step)
    if ub is None or not step:
        return 1
    return max(0, -(-(ub - lb) // step))


# ops a bf16 buffer or value can start from (a kernel may hold bf16 values between f32
# buffers: `x.astype(bfloat16) * 3` read back as float32)
_BF16_SOURCES = ("func.func", "gpu.func", "memref.alloc", "memref.alloca", "memref.global", "arith.truncf",
                 "arith.constant", "arith.sitofp", "arith.uitofp", "arith.bitcast")


def _bf16_as_i16(module, *_):
    """bfloat16 buffers as 16-bit integers (SPIR-V has no bfloat16 type): every memref of
    bf16 (arguments, allocations, views, globals) holds i16, a load is bitcast to bf16
    after it and a store's value before it; `BF16_ARITH` then computes in f32 and turns
    the conversions into integer ops, and the moving bf16 values left become i16
    (`_bf16_values_as_i16`), so no bf16 value is left. The bits are the same: the
    runtime's buffers do not change."""
    import numpy as np
    ctx = module.context
    with ctx, ir.Location.unknown():
        bf16, i16 = ir.BF16Type.get(), ir.IntegerType.get_signless(16)
        # (where bf16 buffers and values come from: without one, nothing to do — the walk
        # below and the passes after it were 13% of a transformer step's GPU compile)
        sources = walk_ops(module, lambda n: n in _BF16_SOURCES)
        if not any("bf16" in str(ir.TypeAttr(o.attributes["function_type" if "func" in o.name else "type"]).value)
                   if o.name in ("func.func", "gpu.func", "memref.global") else o.results[0].type == bf16
                   or "bf16" in str(o.results[0].type) for o in sources):
            return

        def as_i16(t):
            if not isa(ir.MemRefType, t):
                return None
            m = ir.MemRefType(t)
            if m.element_type != bf16:
                return None
            return ir.MemRefType.get(m.shape, i16, m.layout, m.memory_space)

        def retype_function(f):
            ft = ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value)
            ins = [as_i16(t) or t for t in ft.inputs]
            outs = [as_i16(t) or t for t in ft.results]
            if ins != list(ft.inputs) or outs != list(ft.results):
                f.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(ins, outs))

        for op in walk_ops(module, lambda n: True):
            if op.name in ("func.func", "gpu.func"):
                retype_function(op)
            if op.name == "memref.global":
                t = as_i16(ir.TypeAttr(op.attributes["type"]).value)
                if t is not None:
                    attr = ir.DenseElementsAttr(op.attributes["initial_value"])
                    vals = ([attr.get_splat_value()] if attr.is_splat else [attr[i] for i in range(len(attr))])
                    bits = _bf16_bits([ir.FloatAttr(v).value for v in vals])
                    bits = np.full(t.shape, bits[0], np.int16) if attr.is_splat else bits.reshape(t.shape)
                    op.attributes["type"] = ir.TypeAttr.get(t)
                    op.attributes["initial_value"] = ir.DenseElementsAttr.get(
                        bits, type=ir.RankedTensorType.get(t.shape, i16))
            for region in op.regions:
                for block in region.blocks:
                    for a in block.arguments:
                        t = as_i16(a.type)
                        if t is not None:
                            a.set_type(t)
            for r in op.results:
                t = as_i16(r.type)
                if t is not None:
                    r.set_type(t)
            if op.name == "memref.load" and op.results[0].type == bf16:
                r = op.results[0]
                r.set_type(i16)
                with op.location, ir.InsertionPoint.after(op):
                    cast = ir.Operation.create("arith.bitcast", results=[bf16], operands=[r])
                for u in list(r.uses):
                    owner = user_op(u)
                    if owner != cast:
                        owner.operands[u.operand_number] = cast.results[0]
            elif op.name == "memref.store" and op.operands[0].type == bf16:
                with op.location, ir.InsertionPoint(op):
                    cast = ir.Operation.create("arith.bitcast", results=[i16], operands=[op.operands[0]])
                op.operands[0] = cast.results[0]
    from mlir.passmanager import PassManager
    PassManager.parse(f"builtin.module({BF16_ARITH})", context=ctx).run(module)
    _bf16_values_as_i16(module)
    PassManager.parse("builtin.module(gpu.module(gpu.func(canonicalize)))", context=ctx).run(module)


def _bf16_bits(values):
    """The bfloat16 bits of float values that are bfloat16 values (exact: the top half of
    their float32 bits), as int16 (i16's signless storage)."""
    import numpy as np
    return (np.array(values, np.float32).view(np.uint32) >> 16).astype(np.uint16).view(np.int16)


def _bf16_values_as_i16(module):
    """After BF16_ARITH: the bf16 values left only move (selects, loop-carried values, the
    bitcasts around loads and stores, constants): they become i16 of the same bits (the
    bitcasts then fold away)."""
    with module.context, ir.Location.unknown():
        bf16, i16 = ir.BF16Type.get(), ir.IntegerType.get_signless(16)
        for g in walk_ops(module, lambda n: n == "gpu.func"):
            for op in walk_ops(g, lambda n: True):
                if op.name == "arith.constant" and op.results[0].type == bf16:
                    bits = _bf16_bits([ir.FloatAttr(op.attributes["value"]).value])[0]
                    op.attributes["value"] = ir.IntegerAttr.get(i16, int(bits))
                for region in op.regions:
                    for block in region.blocks:
                        for a in block.arguments:
                            if a.type == bf16:
                                a.set_type(i16)
                for r in op.results:
                    if r.type == bf16:
                        r.set_type(i16)


# bf16 arithmetic in f32 (what LLVM does on the CPU), then its conversions as integer ops
BF16_ARITH = ("gpu.module(gpu.func(arith-emulate-unsupported-floats{source-types=bf16 target-type=f32}, "
              "arith-expand{include-bf16=true}, canonicalize))")


def _expand_f64_fma(module, *_):
    """float64 math.fma (arange's index arithmetic) as a multiply and an add: GLSL.std.450's
    Fma is 16/32-bit only."""
    from mlir.dialects import arith
    for op in walk_ops(module, lambda n: n == "math.fma"):
        if str(op.results[0].type) != "f64":
            continue
        a, b, c = op.operands
        with op.context, op.location, ir.InsertionPoint(op):
            r = arith.AddFOp(arith.MulFOp(a, b).result, c).result
        op.results[0].replace_all_uses_with(r)
        op.erase()


def _expand_atan2(module, *_):
    """math.atan2 has no SPIR-V lowering (GLSL.std.450 has Atan2, the MLIR dialect does not):
    write it with atan, with numpy's results for signed zeros and infinities."""
    import math as pymath
    from mlir.dialects import arith, math
    for op in walk_ops(module, lambda n: n == "math.atan2"):
        y, x = op.operands[0], op.operands[1]
        t = y.type
        with op.context, op.location, ir.InsertionPoint(op):
            def c(v):
                return arith.ConstantOp(t, v).result

            def cmp(pred, a, b):
                return arith.CmpFOp(pred, a, b).result
            q = math.AtanOp(arith.DivFOp(y, x).result).result
            neg = cmp(arith.CmpFPredicate.OLT, math.CopySignOp(c(1.0), x).result, c(0.0))  # x < 0 or x is -0
            pi_y = math.CopySignOp(c(pymath.pi), y).result
            r = arith.SelectOp(neg, arith.AddFOp(q, pi_y).result, q).result
            zero_y = math.CopySignOp(c(0.0), y).result
            r = arith.SelectOp(cmp(arith.CmpFPredicate.OEQ, y, c(0.0)),
                               arith.SelectOp(neg, pi_y, zero_y).result, r).result
            inf = c(float("inf"))
            both_inf = arith.AndIOp(cmp(arith.CmpFPredicate.OEQ, math.AbsFOp(x).result, inf),
                                    cmp(arith.CmpFPredicate.OEQ, math.AbsFOp(y).result, inf)).result
            corner = math.CopySignOp(arith.SelectOp(neg, c(3 * pymath.pi / 4), c(pymath.pi / 4)).result, y).result
            r = arith.SelectOp(both_inf, corner, r).result
            r = math.CopySignOp(r, y).result  # atan2 has y's sign (drivers' atan(-0) may give +0)
            r = arith.SelectOp(cmp(arith.CmpFPredicate.UNO, x, y), arith.AddFOp(x, y).result, r).result  # nan in
        op.results[0].replace_all_uses_with(r)
        op.erase()


def add_spirv_passes(pm, target: Target):
    pm.add(check_loops(target), name="mirax-gpu-check-loops")
    pm.add("lower-affine")
    pm.add(_expand_atan2, name="mirax-gpu-expand-atan2")
    pm.add(_expand_f64_fma, name="mirax-gpu-expand-f64-fma")
    pm.add("gpu.module(gpu.func(arith-expand))")  # floordivsi, ceildivsi, ... have no SPIR-V op
    pm.add(_bf16_as_i16, name="mirax-gpu-bf16-as-i16")
    pm.add(check_target(target), name="mirax-gpu-check-target")
    if target.exact_floats:
        pm.add(_contract_fmas, name="mirax-gpu-contract-fmas")
    pm.add(f"spirv-attach-target{{{target.attach_options()}}}")
    pm.add("gpu.module(convert-math-to-spirv)")
    pm.add("convert-gpu-to-spirv")
    pm.add("spirv.module(spirv-lower-abi-attrs, spirv-update-vce)")
    if target.exact_floats:
        pm.add(_no_contraction, name="mirax-gpu-no-contraction")


# (f64 fma is expanded before, mirax-gpu-expand-f64-fma; an f16 math.fma left SPIR-V
# conversion with an f16 -> f32 cast it could not legalize)
_FLOAT_TYPES = ("f32",)


def _contract_fmas(module, *_):
    """In kernels, `a * b + c` (the product used once) becomes `math.fma a, b, c`: what a
    driver may contract stays contracted once every float op is exact (`_no_contraction`)."""
    with module.context:
        for add in walk_ops(module, lambda n: n in ("arith.addf", "arith.subf")):
            if str(add.results[0].type) not in _FLOAT_TYPES:
                continue
            for i, v in enumerate(add.operands):
                mul = defining_op(v)
                if mul is None or mul.name != "arith.mulf" or len(list(v.uses)) != 1:
                    continue
                a, b = mul.operands
                c = add.operands[1 - i]
                with add.location, ir.InsertionPoint(add):
                    if add.name == "arith.subf":  # a*b - c, or c - a*b = (-a)*b + c
                        if i == 0:
                            c = ir.Operation.create("arith.negf", results=[c.type], operands=[c]).results[0]
                        else:
                            a = ir.Operation.create("arith.negf", results=[a.type], operands=[a]).results[0]
                    fma = ir.Operation.create("math.fma", results=[add.results[0].type], operands=[a, b, c])
                add.results[0].replace_all_uses_with(fma.results[0])
                add.erase()
                mul.erase()
                break


_FLOAT_ARITH = ("spirv.FAdd", "spirv.FSub", "spirv.FMul", "spirv.FDiv", "spirv.FRem", "spirv.FMod",
                "spirv.FNegate", "spirv.GL.Fma")


def _no_contraction(module, *_):
    """Decorate every float arithmetic op of the SPIR-V kernels NoContraction: the driver
    keeps IEEE order (no reassociation, no factoring; see Target.exact_floats)."""
    with module.context:
        unit = ir.UnitAttr.get()
        for op in walk_ops(module, lambda n: n in _FLOAT_ARITH):
            op.attributes["no_contraction"] = unit


# ---- the program: SPIR-V kernels and the launch plan ----------------------------------------

@dataclass
class GpuKernel:
    name: str           # the gpu.module / entry point
    spirv: bytes
    nargs: int
    block: tuple


@dataclass
class Step:
    """One host-level action of a program, in order:
    ("alloc", buffer id, nbytes), ("const", buffer id, hex bytes), ("launch", kernel, grid, block, [ids])."""

    kind: str
    args: tuple


@dataclass
class GpuProgram:
    """What the Vulkan runtime runs: buffers 0..n_in-1 are the inputs, the next n_out the
    outputs (out-params); the steps allocate intermediates and launch kernels."""

    n_in: int
    n_out: int
    kernels: dict = field(default_factory=dict)  # gpu.module name -> GpuKernel (MslKernel, PtxKernel)
    steps: list = field(default_factory=list)
    n_buffers: int = 0

    def text(self) -> str:
        """The kernels as text (MSL or PTX programs), each after a line saying how to launch it."""
        return "\n".join(k.text(mod) for mod, k in self.kernels.items())

    def to_json(self):
        import base64
        import json
        return json.dumps({"n_in": self.n_in, "n_out": self.n_out, "n_buffers": self.n_buffers,
                           "kernels": {k: [v.name, base64.b64encode(v.spirv).decode(), v.nargs, list(v.block)]
                                       for k, v in self.kernels.items()},
                           "steps": [[s.kind, list(s.args)] for s in self.steps]})

    @staticmethod
    def from_json(text):
        import base64
        import json
        d = json.loads(text)
        p = GpuProgram(d["n_in"], d["n_out"], n_buffers=d["n_buffers"])
        p.kernels = {k: GpuKernel(v[0], base64.b64decode(v[1]), v[2], tuple(v[3])) for k, v in d["kernels"].items()}
        p.steps = [Step(k, tuple(a)) for k, a in d["steps"]]
        return p


def _global_bytes(module, get):
    """The bytes of the memref.global a memref.get_global reads (row-major, storage dtype)."""
    import numpy as np
    name = ir.FlatSymbolRefAttr(get.attributes["name"]).value
    g = next(o.operation for o in module.regions[0].blocks[0].operations
             if o.operation.name == "memref.global" and ir.StringAttr(o.operation.attributes["sym_name"]).value == name)
    t = ir.MemRefType(ir.TypeAttr(g.attributes["type"]).value)
    attr = ir.DenseElementsAttr(g.attributes["initial_value"])
    et = str(t.element_type)
    np_t = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i1": np.bool_, "i8": np.int8,
            "i16": np.int16, "i32": np.int32, "i64": np.int64}.get(et)
    if np_t is None:
        raise PassError(g, f"a constant of {et} cannot be uploaded to the GPU")
    if attr.is_splat:
        v = attr.get_splat_value()
        v = v.value if hasattr(v, "value") else v
        a = np.full(t.shape, v, np_t)
    elif et == "i1":
        a = np.array([bool(ir.IntegerAttr(attr[i]).value) for i in range(len(attr))], np.bool_)
    else:
        a = np.array(attr, copy=True).astype(np_t)
    return np.ascontiguousarray(a).tobytes()


def _const_index(v):
    op = v.owner
    op = op.operation if hasattr(op, "operation") else op
    if op.name != "arith.constant":
        raise PassError(op, "a launch size is not a constant")
    return ir.IntegerAttr(op.attributes["value"]).value


def _nbytes(t):
    mt = ir.MemRefType(t)
    n = 1
    for d in mt.shape:
        n *= d
    et = mt.element_type
    width = et.width if hasattr(et, "width") else (ir.FloatType(et).width if isa(ir.FloatType, et)
                                                   else ir.IntegerType(et).width)
    return n * max(width // 8, 1)


_VIEWS = ("memref.collapse_shape", "memref.expand_shape", "memref.reshape", "memref.cast")


def spirv_binaries(module):
    """Move each spirv.module into its gpu.module and serialize: {kernel name: bytes}."""
    body = module.regions[0].blocks[0]
    gpu_mods = {}
    spv = []
    for o in body.operations:
        o = o.operation
        if o.name == "gpu.module":
            gpu_mods[ir.StringAttr(o.attributes["sym_name"]).value] = o
        elif o.name == "spirv.module":
            spv.append(o)
    for s in spv:
        name = ir.StringAttr(s.attributes["sym_name"]).value
        target = name[len("__spv__"):] if name.startswith("__spv__") else name
        g = gpu_mods[target]
        blk = g.regions[0].blocks[0]
        s.move_before(blk.operations[0])
    pm = PassManager.parse("builtin.module(gpu-module-to-binary)", context=module.context)
    pm.run(module)
    return binary_objects(module)


def binary_objects(module):
    """{gpu.binary name: the bytes of its (one) object} after gpu-module-to-binary."""
    from mlir.dialects import gpu
    out = {}
    for o in module.regions[0].blocks[0].operations:
        o = o.operation
        if o.name == "gpu.binary":
            objs = ir.ArrayAttr(o.attributes["objects"])
            out[ir.StringAttr(o.attributes["sym_name"]).value] = gpu.ObjectAttr(objs[0]).object
    return out


def kernel_signatures(module):
    """{(gpu.module name, kernel name): (number of arguments, workgroup size)} of the
    outlined gpu.funcs (outlining reuses one function name across modules)."""
    kernels = {}
    for gm in walk_ops(module, lambda n: n == "gpu.module"):
        mod = ir.StringAttr(gm.attributes["sym_name"]).value
        for g in walk_ops(gm, lambda n: n == "gpu.func"):
            kname = ir.StringAttr(g.attributes["sym_name"]).value
            size = list(ir.DenseI32ArrayAttr(g.attributes["known_block_size"])) \
                if "known_block_size" in g.attributes else [1, 1, 1]
            nargs = len(ir.FunctionType(ir.TypeAttr(g.attributes["function_type"]).value).inputs)
            kernels[(mod, kname)] = (nargs, tuple(size))
    return kernels


def launch_plan(module, name="main", binaries=None, signatures=None) -> GpuProgram:
    """Read the host function left by the pipeline as a GpuProgram."""
    f = next(o.operation for o in module.regions[0].blocks[0].operations
             if o.operation.name == "func.func" and ir.StringAttr(o.operation.attributes["sym_name"]).value == name)
    ftype = ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value)
    if len(ftype.results):
        raise PassError(f, "the GPU host function must return its results through out-params")
    block = f.regions[0].blocks[0]
    arg_values = list(block.arguments)
    table = [(a, i) for i, a in enumerate(arg_values)]  # (value, buffer id)

    def find(v):
        for val, i in table:
            if val == v:
                return i
        raise PassError(f, f"a kernel argument is not a buffer of the plan: {v}")
    n_in = len(arg_values)
    prog = GpuProgram(n_in=n_in, n_out=0)
    kernels = signatures if signatures is not None else kernel_signatures(module)
    nxt = n_in
    for o in block.operations:
        o = o.operation
        nm = o.name
        if nm in ("arith.constant", "func.return", "memref.dealloc"):
            continue
        if nm == "memref.get_global" and all(user_op(u).name == "memref.reshape" and u.operand_number == 1
                                              for u in o.results[0].uses):
            continue  # a static reshape's target shape: metadata, never read on the device
        if nm == "memref.get_global":  # a constant array: uploaded once, read by kernels
            table.append((o.results[0], nxt))
            prog.steps.append(Step("const", (nxt, _global_bytes(module, o).hex())))
            nxt += 1
            continue
        if nm == "memref.alloc":
            table.append((o.results[0], nxt))
            prog.steps.append(Step("alloc", (nxt, _nbytes(o.results[0].type))))
            nxt += 1
        elif nm in _VIEWS:
            table.append((o.results[0], find(o.operands[0])))
        elif nm == "gpu.launch_func":
            kref = str(o.attributes["kernel"])  # @mod::@fn
            mod = kref.split("::")[0].lstrip("@")
            fn = kref.split("::")[1].lstrip("@")
            ops = list(o.operands)
            grid = [_const_index(v) for v in ops[0:3]]
            blk = [_const_index(v) for v in ops[3:6]]
            args = [find(v) for v in ops[6:] if isa(ir.MemRefType, v.type)]
            nargs, _ = kernels[(mod, fn)]
            if binaries is not None and mod not in prog.kernels:
                prog.kernels[mod] = GpuKernel(fn, binaries[mod], nargs, tuple(blk))
            prog.steps.append(Step("launch", (mod, grid, blk, args)))
        else:
            raise PassError(o, f"the GPU pipeline left '{nm}' on the host; it cannot run on the device")
    prog.n_buffers = nxt
    return prog


def lower_to_gpu(module, threads=THREADS, stages=None, subgroup=SUBGROUP, max_buffers=MAX_BUFFERS):
    """The target-neutral half of the GPU pipeline, in place: mirax ops to outlined
    gpu.func kernels and their host launches (the "gpu" stage, shared by SPIR-V and PTX)."""
    pm = PassManager("builtin.module", context=module.context)
    tensor_passes(pm, threads, subgroup, max_buffers)
    add_gpu_passes(pm)
    with module.context, ir.Location.unknown():
        pm.run(module.operation)
    if stages is not None:
        stages["gpu"] = str(module)


def lower_to_spirv(module, name="main", target: Target | None = None, stages=None) -> GpuProgram:
    """Run the whole GPU pipeline on `module` (mirax ops, in place) and return its program.
    `stages`, a dict, receives the "gpu" and "spirv" texts when given."""
    target = target or DEFAULT_TARGET
    lower_to_gpu(module, target.max_threads, stages, target.subgroup, target.max_buffers)
    with module.context, ir.Location.unknown():
        pm = PassManager("builtin.module", context=module.context)
        add_spirv_passes(pm, target)
        pm.run(module.operation)
        if stages is not None:
            stages["spirv"] = str(module)
        sigs = kernel_signatures(module.operation)
        binaries = spirv_binaries(module.operation)
        return launch_plan(module.operation, name, binaries, sigs)
