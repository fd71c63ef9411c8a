"""Devices. `mr.cpu` runs each primitive as its own JIT kernel, cached per
(op, attributes, shapes, dtypes); the GPU device comes with the Vulkan runtime.

    mr.set_default_device(mr.cpu)
"""
from __future__ import annotations

import numpy as np

from .dialect.core import op_text
from .runtime import buffers
from .runtime.kernel_cache import KernelCache


class Device:
    def __init__(self, type_: str, index: int = 0):
        self.type = type_
        self.index = index

    def __repr__(self):
        return f"Device({self.type}, {self.index})"

    def __eq__(self, other):
        return isinstance(other, Device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self):
        return hash((self.type, self.index))


class CpuDevice(Device):
    def __init__(self):
        super().__init__("cpu", 0)
        self.kernels = KernelCache()

    def run(self, prim, params, in_avals, out_aval, inputs):
        """Run one primitive on numpy buffers; returns the new output buffer."""
        out = buffers.empty(out_aval.shape, out_aval.dtype.storage)
        if out.size == 0:
            return out
        key = (prim.name, _params_key(params), tuple(in_avals), out_aval)
        kernel = self.kernels.get(key)
        if kernel is None:
            kernel = self.kernels.compile(key, kernel_module_text(prim, params, in_avals, out_aval))
        kernel(inputs, [out])
        return out


def _params_key(params):
    return tuple(sorted((k, str(v) if k == "value" else v) for k, v in params.items()))


def kernel_module_text(prim, params, in_avals, out_aval) -> str:
    """A module whose `@kernel` applies one primitive: the eager kernel's source."""
    args = [f"%arg{i}" for i in range(len(in_avals))]
    # inputs are the caller's buffers: bufferization must never write into them
    sig = ", ".join(f"{a}: {av.tensor_type()} {{bufferization.writable = false}}" for a, av in zip(args, in_avals))
    body = op_text(prim, "%0", args, in_avals, out_aval, params)
    return (f"func.func @kernel({sig}) -> {out_aval.tensor_type()} attributes {{llvm.emit_c_interface}} {{\n"
            f"  {body}\n  return %0 : {out_aval.tensor_type()}\n}}\n")


cpu = CpuDevice()
_default = [cpu]


def default_device() -> Device:
    return _default[0]


def set_default_device(device: Device) -> None:
    if not isinstance(device, Device):
        raise TypeError(f"set_default_device expects a mirax Device, got {device!r}")
    _default[0] = device
