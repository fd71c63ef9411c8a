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

from abc import ABC, abstractmethod

import numpy as np


class Backend(ABC):
    kind = ""  # "cpu", "vulkan", ... (a device's own name may differ: "llvmpipe (LLVM 15)")
    # compile a one-op kernel module with C-interface wrappers (the CPU JIT calls them)
    c_interface = False

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

    @abstractmethod
    def run(self, program, inputs, outputs) -> None:
        """Queue `program` on buffers: inputs, then outputs (written in place)."""

    @abstractmethod
    def synchronize(self) -> None:
        """Wait until everything queued has run."""
