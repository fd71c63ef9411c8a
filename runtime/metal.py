"""The Metal backend (macOS; PyPI `pyobjc-framework-Metal`): `mr.gpu` on a Mac.

    dev = MetalDevice.get()          # None off macOS, or without a Metal device
    prog = dev.program(module_text)  # mirax ops -> SPIR-V -> MSL (lowering/spirv_to_msl.py)
    dev.run(prog, [x], [out])        # encoded into the current command buffer
    dev.synchronize()                # commit, wait

Buffers are MTLBuffers in shared storage (the CPU and GPU see the same memory), read as
numpy through their contents. Libraries are built from the MSL source with fast math off
(NaN-aware max/min and exact division, as on the CPU); one compute pipeline per kernel,
cached. Consecutive launches share one serial compute encoder (Metal orders them and makes
each one's writes visible to the next) and are committed together at `synchronize`.
Kept small: everything up to the MSL text is tested on Linux; this runs on macOS only.
"""
from __future__ import annotations

import sys

import numpy as np

from .backend import Backend

try:
    import Metal  # PyObjC, macOS only
except ImportError:
    Metal = None

INSTALL_HINT = "Metal runs on macOS only (pip install pyobjc-framework-Metal)"


class MetalBuffer:
    """An MTLBuffer in shared storage; `host`/`read` as runtime/vulkan.py's Buffer."""

    __slots__ = ("device", "mtl", "size", "__weakref__")

    def __init__(self, device, mtl, size):
        self.device, self.mtl, self.size = device, mtl, size

    def array(self, dtype, shape):
        count = int(np.prod(shape, dtype=np.int64))
        raw = self.mtl.contents().as_buffer(max(self.size, 1))
        return np.frombuffer(raw, dtype=dtype, count=count).reshape(shape)

    def host(self, dtype, shape):
        self.device.synchronize()
        return self.array(dtype, shape)

    def read(self, dtype, shape):
        return self.device.download(self, dtype, shape)


class MetalDevice(Backend):
    kind = "metal"
    def __init__(self):
        if Metal is None or sys.platform != "darwin":
            raise RuntimeError(INSTALL_HINT)
        self.device = Metal.MTLCreateSystemDefaultDevice()
        if self.device is None:
            raise RuntimeError("no Metal device")
        self.name = str(self.device.name())
        self.queue = self.device.newCommandQueue()
        self.pipelines = {}  # (source, entry) -> MTLComputePipelineState
        self.cmd = self.encoder = None
        self.pending = []  # buffers the encoded commands use

    # ---- buffers ----------------------------------------------------------------------------
    def empty(self, shape, dtype):
        n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        mtl = self.device.newBufferWithLength_options_(max(n, 4), Metal.MTLResourceStorageModeShared)
        return MetalBuffer(self, mtl, n)

    def upload(self, a):
        a = np.ascontiguousarray(a)
        buf = self.empty(a.shape, a.dtype)
        if a.nbytes:
            buf.array(a.dtype, a.shape)[...] = a
        return buf

    def download(self, buf, dtype, shape):
        self.synchronize()
        return buf.array(dtype, shape).copy()

    # ---- programs and launches ----------------------------------------------------------------
    def program(self, text, name="kernel", key=None, prepare=None):
        from ..lowering.spirv_to_msl import msl_program
        return self._lowered(text, name, prepare, msl_program)

    def _pipeline(self, k):
        pso = self.pipelines.get((k.source, k.entry))
        if pso is None:
            opts = Metal.MTLCompileOptions.new()
            opts.setFastMathEnabled_(False)
            lib, err = self.device.newLibraryWithSource_options_error_(k.source, opts, None)
            if lib is None:
                raise RuntimeError(f"Metal cannot compile kernel {k.entry}: {err}")
            pso, err = self.device.newComputePipelineStateWithFunction_error_(lib.newFunctionWithName_(k.entry), None)
            if pso is None:
                raise RuntimeError(f"Metal cannot build a pipeline for {k.entry}: {err}")
            self.pipelines[(k.source, k.entry)] = pso
        return pso

    def dispatch(self, k, grid, block, args):
        if self.encoder is None:
            self.cmd = self.queue.commandBuffer()
            self.encoder = self.cmd.computeCommandEncoder()  # serial: ordered, visible
        self.encoder.setComputePipelineState_(self._pipeline(k))
        for j, buf in enumerate(args):
            self.encoder.setBuffer_offset_atIndex_(buf.mtl, 0, k.buffers[j])
        self.encoder.dispatchThreadgroups_threadsPerThreadgroup_(
            Metal.MTLSizeMake(*grid), Metal.MTLSizeMake(*k.threadgroup))
        self.pending.extend(args)

    def synchronize(self):
        if self.encoder is None:
            return
        self.encoder.endEncoding()
        self.cmd.commit()
        self.cmd.waitUntilCompleted()
        err = self.cmd.error()
        self.cmd = self.encoder = None
        self.pending = []
        if err is not None:
            raise RuntimeError(f"a Metal command buffer failed: {err}")


def is_available() -> bool:
    """True on a Mac with a Metal device (and PyObjC's Metal bindings)."""
    return MetalDevice.get() is not None
