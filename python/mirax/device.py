"""Devices and streams, with MLX's API. A device holds no backend code: it runs
primitives through its backend, behind one interface (runtime/backend.py): `mr.cpu`
runs each primitive as its own JIT kernel (runtime/cpu.py); `mr.gpu` lowers it through
the gpu dialect to SPIR-V and runs it on Vulkan (runtime/vulkan.py).

    mr.set_default_device(mr.gpu)
    with mr.stream(mr.cpu):
        y = mr.exp(x)                 # on the CPU
    z = mr.add(x, y, stream=mr.gpu)   # on the GPU; y is read where it lives
    mr.synchronize()

Arrays made on the GPU stay there until read (`np.asarray`, `.item()`, printing);
an op on one device whose input lives on the other reads it there (copy at the edge).
"""
from __future__ import annotations

import enum
import functools
import os
import threading

import numpy as np

from .dialect.core import MiraxError, op_text
from .runtime import buffers as _buffers


class DeviceType(enum.Enum):
    cpu = 0
    gpu = 1


class Device:
    """`mr.Device(mr.gpu)`, `mr.Device(mr.DeviceType.gpu, 0)` or `mr.Device("gpu")`."""

    def __new__(cls, type_="cpu", index: int = 0):
        if isinstance(type_, Device):
            return type_
        t = type_.name if isinstance(type_, DeviceType) else str(type_)
        if t not in _DEVICES or index != 0:
            raise ValueError(f"no device {t}:{index}; devices are cpu:0 and gpu:0")
        return _DEVICES[t]

    def __repr__(self):
        return f"Device({self.type.name}, {self.index})"

    def __eq__(self, other):
        if isinstance(other, DeviceType):
            return self.type == other
        return isinstance(other, Device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self):
        return hash((self.type, self.index))


def _params_key(params):
    return tuple(sorted((k, str(v) if k == "value" else v) for k, v in params.items()))


def kernel_key(name, params, in_avals, out_aval):
    """The eager kernel cache's key: (op, attributes, operand and result shapes and dtypes),
    made of tuples, ints, strings and Dtypes only, so hashing and comparing it runs no
    Python code (an Aval's dataclass hash and eq would, several times per lookup)."""
    pk = _params_key(params) if params else ()
    if len(in_avals) == 1:
        a = in_avals[0]
        return (name, pk, a.shape, a.dtype, out_aval.shape, out_aval.dtype)
    if len(in_avals) == 2:
        a, b = in_avals
        return (name, pk, a.shape, a.dtype, b.shape, b.dtype, out_aval.shape, out_aval.dtype)
    return (name, pk, tuple((a.shape, a.dtype) for a in in_avals), out_aval.shape, out_aval.dtype)


def kernel_module_text(prim, params, in_avals, out_aval, c_interface=True) -> str:
    """A module whose `@kernel` applies one primitive: the eager kernel's source."""
    args = [f"%arg{i}" for i in range(len(in_avals))]
    # inputs are the caller's buffers: bufferization must never write into them
    sig = ", ".join(f"{a}: {av.tensor_type()} {{bufferization.writable = false}}" for a, av in zip(args, in_avals))
    body = op_text(prim, "%0", args, in_avals, out_aval, params)
    attrs = " attributes {llvm.emit_c_interface}" if c_interface else ""
    return (f"func.func @kernel({sig}) -> {out_aval.tensor_type()}{attrs} {{\n"
            f"  {body}\n  return %0 : {out_aval.tensor_type()}\n}}\n")


class _Runner:
    """Eager execution on a device, through its backend (runtime/backend.py): one
    kernel per (primitive, attributes, avals), built once and kept in `self.kernels`."""

    def run(self, prim, params, in_avals, out_aval, inputs):
        """Run one primitive on buffers of this device (inputs living elsewhere are
        copied at the edge); returns the new output buffer."""
        b = self.backend
        ins = [self._here(x, b) for x in inputs]
        out = b.empty(out_aval.shape, out_aval.dtype.storage)
        if out_aval.size == 0:
            return out
        key = kernel_key(prim.name, params, in_avals, out_aval)
        kernel = self.kernels.get(key)
        if kernel is None:
            kernel = self._build(key, prim, params, in_avals, out_aval)
        b.run(kernel, ins, [out])
        return out

    def synchronize(self):
        self.backend.synchronize()


_host_mod = None
# the graph (nodes in order) of the eval in progress on this thread, until its first kernel
# miss (array.eval sets it; CpuDevice._build takes it)
evaluating = threading.local()
# MIRAX_EAGER_BATCH=0: each missing kernel built when its op runs, one after the other
BUILD_TOGETHER = os.environ.get("MIRAX_EAGER_BATCH", "1") != "0"


@functools.lru_cache(maxsize=None)
def small_copy() -> int:
    """Outputs of at most this many elements that a copy makes (an eager `broadcast_to`)
    are made by numpy: the tuning table's threshold below which such a kernel runs on one
    thread (no faster than numpy's copy), and numpy needs no kernel per shape."""
    from .lowering import tuning
    return tuning.table()["other"]["parallel_min_elements"]


def _host():
    """runtime/host.py (imported on first use; an import statement per op costs ~1 us)."""
    global _host_mod
    if _host_mod is None:
        from .runtime import host
        _host_mod = host
    return _host_mod


class CpuDevice(_Runner, Device):
    """The CPU: arrays hold numpy buffers; kernels are JIT-compiled (runtime/cpu.py)."""

    def __new__(cls):
        return object.__new__(cls)

    def __init__(self, *_):
        if hasattr(self, "type"):  # Device(mr.cpu) returns the one instance; Python re-inits it
            return
        from .runtime.cpu import CpuBackend
        self.type = DeviceType.cpu
        self.index = 0
        self.backend = CpuBackend()
        self.kernels = self.backend.kernels

    @staticmethod
    def _here(x, backend):
        return to_host(x)

    def run(self, prim, params, in_avals, out_aval, inputs):
        """_Runner.run for the CPU, inlined: this is the whole eager path of an op whose
        kernel is cached (the output from runtime/buffers.py, the kernel called on numpy
        buffers), so it avoids the generic path's extra calls."""
        name = prim.name
        host = _host()
        if host.is_host(name):  # a numpy/LAPACK function, not a JIT kernel
            return host.run(prim, params, inputs, out_aval)
        ins = [x if type(x) is np.ndarray else to_host(x) for x in inputs]
        if name == "fused":  # a compiled composition (fused.py): its executable's kernel
            exe = params["exe"]
            return exe.run_buffers(ins + exe.lifted if exe.lifted else ins)[0]
        out = _buffers.empty(out_aval.shape, out_aval.dtype.storage)
        if out_aval.size == 0:
            return out
        if name == "broadcast_to" and out_aval.size <= small_copy():  # numpy's copy: no kernel per shape
            out[...] = ins[0].view(out.dtype).reshape(in_avals[0].shape)  # (a GPU buffer's host copy is bytes)
            return out
        key = kernel_key(name, params, in_avals, out_aval)
        kernel = self.kernels.get(key)
        if kernel is None:
            kernel = self._build(key, prim, params, in_avals, out_aval)
        kernel(ins, [out])
        return out

    def _build(self, key, prim, params, in_avals, out_aval):
        nodes = getattr(evaluating, "nodes", None)
        if nodes is not None and BUILD_TOGETHER:  # the first kernel an eval misses: the graph's others too
            evaluating.nodes = None
            self._build_missing(nodes)
            kernel = self.kernels.get(key)
            if kernel is not None:
                return kernel
        return self.backend.program(kernel_module_text(prim, params, in_avals, out_aval, c_interface=True),
                                    "kernel", key=key)

    def _build_missing(self, nodes):
        """The kernels that `nodes` (an eval's graph, in order) still run here and that no
        cache holds, built together when there are several: one thread runs MLIR's passes
        of each while others run LLVM on the ones before (runtime/cpu.py `compile_many`),
        instead of one after the other as the ops reach them (a model's first eval)."""
        host = _host()
        items, seen = [], set()
        room = self.kernels.capacity // 2  # (more would evict the first before their ops run)
        for node in nodes:
            if len(items) >= room:
                break
            prim = node._prim
            if prim is None or node._dev is not self or node.aval.size == 0 or host.is_host(prim.name):
                continue
            if prim.name == "fused" or (prim.name == "broadcast_to" and node.aval.size <= small_copy()):
                continue  # (not kernels of one op: see run)
            try:
                in_avals = [x.aval for x in node._inputs]
                key = kernel_key(prim.name, node._params, in_avals, node.aval)
                if key in seen or key in self.kernels:
                    continue
                seen.add(key)
                items.append((key, kernel_module_text(prim, node._params, in_avals, node.aval, c_interface=True)))
            except Exception:  # noqa: BLE001 - that op raises it itself when it runs, not this one
                continue
        if len(items) > 1:
            self.backend.programs(items)


class GpuDevice(_Runner, Device):
    """The GPU: Vulkan (lavapipe on a machine without a GPU). Arrays hold device buffers."""

    def __new__(cls):
        return object.__new__(cls)

    def __init__(self, *_):
        if hasattr(self, "type"):
            return
        from .runtime.kernel_cache import LRU, default_capacity
        self.type = DeviceType.gpu
        self.index = 0
        self.kernels = LRU(default_capacity())
        self._backend = None

    @property
    def backend(self):
        """CUDA where an NVIDIA driver and device answer, Metal on a Mac that has it, else
        Vulkan; MIRAX_GPU_BACKEND=vulkan|metal|cuda picks one."""
        if self._backend is None:
            dev = _cuda_backend() or _metal_backend()
            if dev is None:
                from .runtime.vulkan import VulkanDevice
                dev = VulkanDevice.get()
                if dev is None:
                    raise MiraxError("the GPU is not available: " + VulkanDevice.why_unavailable())
            self._backend = dev  # chosen once per process
        return self._backend

    @staticmethod
    def _here(x, backend):
        return to_device(x, backend)

    def run(self, prim, params, in_avals, out_aval, inputs):
        from .runtime import host
        if host.gpu_through_host(prim.name):  # collectives: download, exchange, upload
            ins = [to_host(x) if isinstance(x, np.ndarray) else x.host(a.dtype.storage, a.shape)
                   for x, a in zip(inputs, in_avals)]
            out = host.run(prim, params, ins, out_aval)
            return self.backend.upload(np.ascontiguousarray(out, dtype=out_aval.dtype.storage))
        if host.is_host(prim.name):  # MLX runs its decompositions on the CPU only
            raise host.gpu_error(prim.name)
        return super().run(prim, params, in_avals, out_aval, inputs)

    def _build(self, key, prim, params, in_avals, out_aval):
        text = kernel_module_text(prim, params, in_avals, out_aval, c_interface=False)
        try:
            prog = self.backend.program("module {\n" + text + "}\n", "kernel")
        except Exception as err:
            raise MiraxError(f"mirax.{prim.name} cannot run on the GPU for {in_avals} -> {out_aval}: "
                             f"{_reason(err)}") from None
        return self.kernels.put(key, prog)

    def synchronize(self):
        from .runtime.vulkan import VulkanDevice
        dev = self._backend or _cuda_backend() or _metal_backend() or VulkanDevice.get()  # none: nothing to wait
        if dev is not None:
            dev.synchronize()


def _chosen_gpu_backend():
    import os
    return os.environ.get("MIRAX_GPU_BACKEND", "").lower()


def _metal_backend():
    import sys
    if sys.platform != "darwin" or _chosen_gpu_backend() not in ("", "metal"):
        return None
    from .runtime.metal import MetalDevice
    return MetalDevice.get()


def _cuda_backend():
    if _chosen_gpu_backend() not in ("", "cuda"):
        return None
    from .runtime.cuda import CudaDevice
    return CudaDevice.get()


def _reason(err):
    """The line of a pipeline failure that says what went wrong (MLIR puts it after a header)."""
    msg = getattr(err, "message", None) or str(err)
    lines = [ln.strip() for ln in msg.splitlines() if ln.strip()]
    for ln in lines:
        if "error:" in ln:
            return ln[ln.index("error:") + 6:].strip()
    return lines[0] if lines else type(err).__name__


def to_host(x):
    """A numpy array of a buffer of any device (waits for the GPU when needed)."""
    if isinstance(x, np.ndarray):
        return x
    return x.host(np.uint8, (x.size,))  # raw bytes: the caller reinterprets


def to_device(x, dev):
    """A device buffer holding `x` (a numpy array is uploaded: the copy at the edge)."""
    if isinstance(x, np.ndarray):
        return dev.upload(x)
    return x


cpu = CpuDevice()
gpu = GpuDevice()
_DEVICES = {"cpu": cpu, "gpu": gpu}


class _State(threading.local):
    def __init__(self):
        self.default = None
        self.streams = []  # the devices of active `with mr.stream(...)` blocks


_state = _State()
_global_default = [cpu]


def default_device() -> Device:
    return _global_default[0]


def set_default_device(device) -> None:
    if isinstance(device, Stream):
        device = device.device
    if not isinstance(device, Device):
        raise TypeError(f"set_default_device expects a mirax Device, got {device!r}")
    _global_default[0] = device


def current_device() -> Device:
    """The device an op made now runs on: the innermost `mr.stream`, else the default."""
    return _state.streams[-1] if _state.streams else _global_default[0]


def is_available(device) -> bool:
    """`mr.is_available(mr.gpu)`: True when the device can run kernels here."""
    d = Device(device.type if isinstance(device, Device) else device)
    if d.type == DeviceType.cpu:
        return True
    if _cuda_backend() is not None or _metal_backend() is not None:
        return True
    from .runtime.vulkan import is_available as vk_available
    return vk_available()


def device_count(device_type) -> int:
    t = device_type.name if isinstance(device_type, DeviceType) else str(device_type)
    if t == "cpu":
        return 1
    return 1 if is_available(gpu) else 0


def device_info(device=None) -> dict:
    """MLX's `mx.device_info()`: what the device is and how much memory it may use.

        mr.device_info(mr.cpu)["device_name"]   # e.g. 'AMD EPYC'
    """
    import os
    import platform
    d = Device(device.type if isinstance(device, Device) else device) if device is not None else current_device()
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    info = {"architecture": platform.machine(), "memory_size": ram,
            "max_recommended_working_set_size": ram, "max_buffer_length": ram}
    if d.type == DeviceType.cpu:
        name = platform.processor() or platform.machine()
        try:
            with open("/proc/cpuinfo") as f:
                name = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
        except (OSError, StopIteration):
            pass
        info["device_name"] = name
    else:
        info["device_name"] = getattr(d, "name", None) or str(d)
    return info


def synchronize(stream=None) -> None:
    """Wait until everything queued on the device (default: all devices) has run."""
    if stream is None:
        cpu.synchronize()
        gpu.synchronize()
    else:
        _as_device(stream).synchronize()


class Stream:
    """A queue of work on a device (MLX's `mx.Stream`): mirax runs one per device."""

    def __init__(self, device, index=0):
        self.device = Device(device)
        self.index = index

    def __repr__(self):
        return f"Stream({self.device!r}, {self.index})"

    def __eq__(self, other):
        return isinstance(other, Stream) and (self.device, self.index) == (other.device, other.index)

    def __hash__(self):
        return hash((self.device, self.index))


def default_stream(device) -> Stream:
    return Stream(device, 0)


def new_stream(device) -> Stream:
    """A stream on `device`; its work runs in order with the device's other work."""
    return Stream(device, 0)


def set_default_stream(stream) -> None:
    """Make `stream`'s device the default (mirax runs one stream per device)."""
    set_default_device(stream.device if isinstance(stream, Stream) else stream)


def _as_device(s) -> Device:
    if s is None:
        return current_device()
    if isinstance(s, Stream):
        return s.device
    if isinstance(s, (Device, DeviceType, str)):
        return Device(s)
    raise TypeError(f"stream= expects a Device or a Stream, got {s!r}")


class stream:
    """`with mr.stream(mr.gpu): ...` runs the ops made inside on that device."""

    def __init__(self, s):
        self.device = _as_device(s)

    def __enter__(self):
        _state.streams.append(self.device)
        return self

    def __exit__(self, *exc):
        _state.streams.pop()
        return False
