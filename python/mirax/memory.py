"""What mirax keeps around between calls, and how to let it go.

    mr.clear_cache()            # recycled buffers and compiled kernels held in memory
    mr.clear_cache(disk=True)   # ...and every entry of the on-disk kernel cache
    mr.get_cache_memory()       # bytes of buffers kept for reuse

As in MLX, `clear_cache` only drops what can be rebuilt: arrays stay valid, and a kernel
needed again is reloaded from the disk cache (or compiled again).
"""
from __future__ import annotations

import sys


def clear_cache(disk: bool = False) -> None:
    """Free the buffer pool and the one-op kernels held in memory (CPU and GPU);
    with `disk=True` also delete the on-disk kernel cache's entries. Compiled functions
    keep their executables (as `mx.compile`'s cache does in MLX)."""
    import gc
    from .runtime import buffers, cpu, disk_cache
    from .device import _DEVICES
    buffers.clear()
    cpu.clear_memory_cache()
    _DEVICES["cpu"].kernels.clear()
    gpu = _DEVICES["gpu"]
    gpu.kernels.clear()
    if gpu._backend is not None and getattr(gpu._backend, "_programs", None) is not None:
        gpu._backend._programs.clear()
    vulkan = sys.modules.get(__package__ + ".runtime.vulkan")  # only if the GPU was used: not
    if vulkan is not None:                                      # loading Vulkan to clear nothing
        vulkan._programs.clear()
    gc.collect()  # kernels unload when their last reference goes
    if disk:
        disk_cache.flush()
        disk_cache.clear()
    _trim()


def get_cache_memory() -> int:
    """Bytes held by the buffer pool for reuse (MLX's `get_cache_memory`)."""
    from .runtime import buffers
    return buffers.pooled_bytes()


def _trim() -> None:
    """Hand freed heap pages back to the OS (glibc keeps them otherwise)."""
    import ctypes
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass
