"""The gpu kernels of `mirax-gpu-pipeline` as NVIDIA PTX, in-process (upstream NVVM passes).

    prog = ptx_program(module, "main", chip="sm_80")
    prog.kernels["main_kernel"].ptx     # PTX text, entry `main_kernel`, with its block size
    prog.steps                          # the launch plan, as for Vulkan (a GpuProgram)

The mapping strategies are the same as for SPIR-V (the "gpu" stage is shared); only the
memory spaces differ: workgroup memory is NVVM's shared space (3, as on Vulkan), and a
thread's private arrays, Vulkan's Function space (6), become plain allocas (local).
"""
from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.passmanager import PassManager

from .pass_base import PRIVATE, WORKGROUP, isa, memory_space, walk_ops

NVVM = ("lower-affine", "convert-scf-to-cf", "nvvm-attach-target{{chip={chip} O=3}}",
        # kernel arguments as bare pointers (a memref descriptor would be 3 + 2 x rank of them)
        "gpu.module(convert-gpu-to-nvvm{{use-bare-ptr-memref-call-conv=1}})", "reconcile-unrealized-casts",
        "gpu-module-to-binary{{format=isa}}")
DEFAULT_CHIP = "sm_80"


@dataclass
class PtxKernel:
    ptx: str
    entry: str
    nargs: int
    block: tuple

    def text(self, mod):
        return f"// kernel {mod}: entry {self.entry}, block {self.block}\n{self.ptx}"


def _private_arrays_generic(module):
    """Vulkan's Function space (6) on private arrays -> no memory space (NVVM local)."""
    for op in walk_ops(module, lambda n: True):
        for r in op.results:
            if isa(ir.MemRefType, r.type) and memory_space(r.type) == PRIVATE:
                t = ir.MemRefType(r.type)
                r.set_type(ir.MemRefType.get(t.shape, t.element_type, t.layout))


def _workgroup_attributions(module):
    """Workgroup buffers (memref.alloc in space 3 inside a kernel; SPIR-V makes them
    Workgroup variables) become workgroup attributions of the gpu.func, which NVVM turns
    into `.shared` arrays (an alloc would become a device malloc)."""
    for g in walk_ops(module, lambda n: n == "gpu.func"):
        body = g.regions[0].blocks[0]
        allocs = [a for a in walk_ops(g, lambda n: n == "memref.alloc") if memory_space(a.results[0].type) == WORKGROUP]
        if not allocs:
            continue
        n = ir.IntegerAttr(g.attributes["workgroup_attributions"]).value if "workgroup_attributions" in g.attributes \
            else 0
        for a in allocs:
            arg = body.add_argument(a.results[0].type, a.location)
            a.results[0].replace_all_uses_with(arg)
            a.erase()
            n += 1
        for d in walk_ops(g, lambda n: n == "memref.dealloc"):
            if d.operands[0].owner == body:
                d.erase()
        g.attributes["workgroup_attributions"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), n)


def ptx_program(module, name="main", chip=DEFAULT_CHIP, stages=None):
    """Lower a module of mirax ops (in place) to PTX: its GpuProgram (launch plan), each
    kernel a PtxKernel."""
    from .gpu_pipeline import binary_objects, kernel_signatures, launch_plan, lower_to_gpu
    lower_to_gpu(module, stages=stages)
    with module.context, ir.Location.unknown():
        sigs = kernel_signatures(module.operation)
        _private_arrays_generic(module.operation)
        _workgroup_attributions(module.operation)
        pm = PassManager.parse("builtin.module(" + ", ".join(p.format(chip=chip) for p in NVVM) + ")")
        pm.run(module.operation)
        prog = launch_plan(module.operation, name, binary_objects(module.operation), sigs)
    prog.kernels = {mod: PtxKernel(k.spirv.decode(), k.name, k.nargs, k.block) for mod, k in prog.kernels.items()}
    if stages is not None:
        stages["ptx"] = prog.text()
    return prog
