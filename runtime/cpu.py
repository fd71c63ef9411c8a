"""The CPU backend: JIT a module through `mirax-cpu-pipeline` and call it on numpy buffers.

    k = compile_module(text, "kernel", n_inputs=2)
    k([a, b], [out])        # out is written in place

Calls go through the ExecutionEngine's packed wrapper with memref descriptors built
from the numpy arrays: no copies, a few microseconds a call.
"""
from __future__ import annotations

import ctypes
import os

import numpy as np
from mlir import ir
from mlir.execution_engine import ExecutionEngine
from mlir.passmanager import PassManager

from ..lowering.cpu_pipeline import MiraxCpuPipeline
from .context import context

_DESCRIPTORS = {}


def descriptor_class(rank: int):
    """The ctypes struct of a ranked memref descriptor."""
    cls = _DESCRIPTORS.get(rank)
    if cls is None:
        fields = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p), ("offset", ctypes.c_int64)]
        if rank:
            fields += [("sizes", ctypes.c_int64 * rank), ("strides", ctypes.c_int64 * rank)]
        cls = type(f"MemRef{rank}D", (ctypes.Structure,), {"_fields_": fields})
        _DESCRIPTORS[rank] = cls
    return cls


def descriptor(a: np.ndarray):
    d = descriptor_class(a.ndim)()
    p = a.ctypes.data
    d.allocated = p
    d.aligned = p
    if a.ndim:
        d.sizes[:] = a.shape
        d.strides[:] = [s // a.itemsize if a.itemsize else 0 for s in a.strides]
    return d


def lower_to_llvm(module: ir.Module) -> None:
    pm = PassManager("builtin.module", context=module.context)
    MiraxCpuPipeline().add_to(pm)
    pm.run(module.operation)


def _shared_libs():
    libdir = os.path.join(os.path.dirname(ir.__file__), "lib")
    return [os.path.join(libdir, "libmlir_c_runner_utils.so")]


class CpuKernel:
    """A JIT-compiled function `name(inputs..., outputs...)`."""

    def __init__(self, engine, name):
        self.engine = engine
        addr = engine.raw_lookup("_mlir_ciface_" + name)
        if not addr:
            raise RuntimeError(f"kernel '{name}' not found in the compiled module")
        self._fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(addr)

    def __call__(self, inputs, outputs):
        args = list(inputs) + list(outputs)
        descs = [descriptor(a) for a in args]
        holders = [ctypes.c_void_p(ctypes.addressof(d)) for d in descs]
        packed = (ctypes.c_void_p * len(args))(*[ctypes.addressof(h) for h in holders])
        self._fn(packed)


def compile_module(module_or_text, name="kernel", opt_level=3) -> CpuKernel:
    """Lower a module holding `func.func @name` (with `llvm.emit_c_interface`) and JIT it."""
    ctx = context()
    with ctx, ir.Location.unknown():
        module = (ir.Module.parse(module_or_text) if isinstance(module_or_text, str) else module_or_text)
        lower_to_llvm(module)
        engine = ExecutionEngine(module, opt_level=opt_level, shared_libs=_shared_libs())
    return CpuKernel(engine, name)
