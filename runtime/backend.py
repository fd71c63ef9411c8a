"""The seam between mirax's devices and the runtimes that execute kernels.

A device (`mr.cpu`, `mr.gpu`; python/mirax/device.py) holds no backend code: it asks
its backend for buffers and programs and queues programs on them. One module per
backend implements this interface: `runtime/cpu.py` (numpy buffers, LLVM JIT kernels)
and `runtime/vulkan.py` (pooled device memory, SPIR-V pipelines); Metal and CUDA follow.

    b = mr.gpu.backend
    x = b.upload(np.arange(4, dtype=np.float32))    # a buffer of this backend
    out = b.empty((4,), np.float32)
    prog = b.program(module_text, "kernel")        # from a module of mirax ops; cached
    b.run(prog, [x], [out])                        # queued on the device
    b.download(out, np.float32, (4,))              # numpy, once the queue has run it

A buffer is freed when its last reference dies (its memory goes back to the backend's
pool). Programs are cached by the backend in memory and on disk, keyed by the module
text, the pipeline and the compiler sources (runtime/disk_cache.py).
"""
from __future__ import annotations

import threading
from abc import ABC, abstractmethod

import numpy as np

_lock = threading.Lock()
_instances = {}  # backend class -> its one instance, or the reason there is none (str)


class Backend(ABC):
    kind = ""  # "cpu", "vulkan", ... (a device's own name may differ: "llvmpipe (LLVM 15)")
    # compile a one-op kernel module with C-interface wrappers (the CPU JIT calls them)
    c_interface = False

    @classmethod
    def get(cls):
        """The process's one device of this backend, or None where it cannot start (no
        driver, no device, another OS): `why_unavailable()` then says why."""
        inst = _instances.get(cls)
        if inst is None:
            with _lock:
                inst = _instances.get(cls)
                if inst is None:
                    try:
                        inst = cls()
                    except Exception as err:  # no library, driver or device
                        inst = f"{type(err).__name__}: {err}"
                    _instances[cls] = inst
        return None if isinstance(inst, str) else inst

    @classmethod
    def why_unavailable(cls):
        return None if cls.get() is not None else _instances[cls]

    @abstractmethod
    def empty(self, shape, dtype):
        """An uninitialised buffer for an array of `shape` and numpy `dtype`."""

    @abstractmethod
    def upload(self, a: np.ndarray):
        """A buffer of this backend holding `a` (the copy at the edge)."""

    @abstractmethod
    def download(self, buf, dtype, shape) -> np.ndarray:
        """The contents of `buf` as a numpy array, after what was queued on it ran."""

    @abstractmethod
    def program(self, text: str, name: str = "kernel", key=None):
        """The executable of function `name` of a module of mirax ops (text), built by
        the backend's pipeline or found in its caches; `key` names it in memory."""

    def _lowered(self, text, name, prepare, lower):
        """`lower(module, name)` of a module of mirax ops, `prepare`d first, built once per
        (text, name) in this process (backends without an on-disk program cache)."""
        from mlir import ir
        from .context import context
        from .kernel_cache import LRU, default_capacity
        programs = self.__dict__.get("_programs")
        if programs is None:
            programs = self._programs = LRU(default_capacity())
        p = programs.get((text, name))
        if p is None:
            with context(), ir.Location.unknown():
                module = ir.Module.parse(text)
                if prepare:
                    prepare[1](module)
                p = programs[(text, name)] = lower(module, name)
        return p

    def run(self, program, inputs, outputs) -> None:
        """Queue `program` (a GpuProgram's launch plan) on buffers: inputs, then outputs
        (written in place); temporaries are allocated, constants uploaded once per program."""
        bufs = list(inputs) + list(outputs)
        for st in program.steps:
            if st.kind == "alloc":
                bufs.append(self.empty((st.args[1],), np.uint8))
            elif st.kind == "const":
                consts = program.__dict__.setdefault("_device_consts", {}).setdefault(self.kind, {})
                if st.args[0] not in consts:
                    consts[st.args[0]] = self.upload(np.frombuffer(bytes.fromhex(st.args[1]), np.uint8))
                bufs.append(consts[st.args[0]])
            else:
                mod, grid, block, ids = st.args
                self.dispatch(program.kernels[mod], grid, block, [bufs[i] for i in ids])

    def dispatch(self, kernel, grid, block, args) -> None:
        """Queue one kernel of a program on a grid of workgroups (GPU backends)."""
        raise NotImplementedError(f"the {self.kind} backend runs whole kernels, not launch plans")

    @abstractmethod
    def synchronize(self) -> None:
        """Wait until everything queued has run."""
