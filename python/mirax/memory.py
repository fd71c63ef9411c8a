"""What mirax keeps around between calls, and how to let it go.

    mr.clear_cache()            # recycled buffers and compiled kernels held in memory
    mr.clear_cache(disk=True)   # ...and every entry of the on-disk kernel cache
    mr.get_cache_memory()       # bytes of buffers kept for reuse
    mr.get_active_memory(), mr.get_peak_memory(), mr.reset_peak_memory()

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


def get_active_memory() -> int:
    """Bytes of the CPU buffers mirax allocated that arrays still hold (results of
    eager ops and compiled calls; MLX's `get_active_memory`). GPU buffers live in the
    device's memory pool and are not counted here."""
    from .runtime import buffers
    return buffers.active_bytes()


def get_peak_memory() -> int:
    """The most `get_active_memory()` has been since the start or the last
    `reset_peak_memory()`."""
    from .runtime import buffers
    return buffers.peak_bytes()


def reset_peak_memory() -> None:
    from .runtime import buffers
    buffers.reset_peak()


_limits = {"memory": None, "wired": 0}


def set_cache_limit(limit: int) -> int:
    """Bound the bytes of freed buffers kept for reuse (0: keep none); returns the
    previous bound (MLX's `set_cache_limit`)."""
    from .runtime import buffers
    if limit < 0:
        raise ValueError(f"set_cache_limit: the limit must be >= 0, got {limit}")
    return buffers.set_limit(limit)


def set_memory_limit(limit: int) -> int:
    """Set the memory limit; returns the previous one (default: the machine's RAM, as
    MLX's default is its recommended working set). Above it, mirax stops keeping freed
    buffers for reuse, which is what it has to give back."""
    from .runtime import buffers
    if limit < 0:
        raise ValueError(f"set_memory_limit: the limit must be >= 0, got {limit}")
    old = get_memory_limit()
    _limits["memory"] = int(limit)
    if buffers.active_bytes() + buffers.pooled_bytes() > limit:
        buffers.clear()
    return old


def get_memory_limit() -> int:
    """The memory limit in bytes: the last `set_memory_limit`, else the machine's RAM."""
    import os
    if _limits["memory"] is None:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return _limits["memory"]


def get_array_buffer_size(*args) -> int:
    """Bytes of the buffers behind the arrays in `args` (arrays or trees of them; other
    leaves are ignored), each buffer counted once at its allocated size:
    `mr.get_array_buffer_size(a, {"w": [b]})`. The arrays must be evaluated."""
    import numpy as np
    from .array import Array
    from .tree import tree_leaves
    seen = {}
    for leaf in tree_leaves(list(args)):
        if not isinstance(leaf, Array):
            continue
        data = leaf._data
        if data is None:
            raise ValueError("[get_array_buffer_size] Arrays must be evaluated before querying buffer size.")
        while isinstance(data, np.ndarray) and isinstance(data.base, np.ndarray):
            data = data.base  # a view (reshape, a pooled buffer's slice): its owner is the buffer
        seen[id(data)] = int(getattr(data, "nbytes", 0))
    return sum(seen.values())


def set_wired_limit(limit: int) -> int:
    """Metal's wired-memory limit (no effect on the CPU and Vulkan devices); returns the
    previous value."""
    if limit < 0:
        raise ValueError(f"set_wired_limit: the limit must be >= 0, got {limit}")
    old, _limits["wired"] = _limits["wired"], int(limit)
    return old


def _trim() -> None:
    """Hand freed heap pages back to the OS (glibc keeps them otherwise)."""
    import ctypes
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass
