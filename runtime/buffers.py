"""Output buffers, recycled: a large array that nothing references any more is handed
out again instead of asking the OS for fresh pages (which it zero-fills on first touch:
~50 ms for the 512 MB output of a gelu that itself runs in ~35 ms).

    out = empty((32, 1000, 4096), np.float32)

The pool keeps the arrays it allocated; one is free when the pool holds the only
reference to it (views of it reference it as their base, so they keep it busy).
Smaller arrays are allocated afresh, and all but the smallest start at a cache line too.
`MIRAX_BUFFER_CACHE_MB` bounds the pool (default 2048; 0 disables it).
"""
from __future__ import annotations

import ctypes
import math
import sys
import threading
import weakref

import numpy as np

from .environment import number

MIN_BYTES = 1 << 20
# the arrays start at a cache line (and an AVX-512 vector): the row kernels' streaming
# stores of whole lines need it (numpy's large arrays start 16 bytes into a page), and
# every vector load or store of an array 16 bytes off a line spans two lines: a compiled
# 256x784 @ 784x512 ran at 108-113 GFLOP/s with A and B 16 bytes off, 134-146 aligned
# (Emerald Rapids, AVX-512; mr.array's copies and outputs under 1 MiB came from numpy so)
ALIGN = 64
ALIGN_MIN = 4096  # (smaller arrays: numpy's own, ~1 us less an eager op; a line or two split)
_LIMIT = number("MIRAX_BUFFER_CACHE_MB", 2048, int, minimum=0) << 20
_pool: list = []  # owning uint8 arrays, oldest first
_lock = threading.Lock()


void_at = ctypes.c_void_p.from_address


def data_offset():
    """Where an ndarray's data pointer lies from the object's address (`PyArrayObject.data`
    follows the object header), checked here against `a.ctypes.data`; None where that does
    not hold (another Python implementation or layout): `data_pointer` then uses
    `a.ctypes.data`. Reading it costs ~0.1 us, `a.ctypes.data` ~1 us (it builds a helper
    object): every kernel call reads its arguments' pointers (runtime/cpu.py), and every
    aligned output its own."""
    if sys.implementation.name != "cpython":
        return None
    off = object.__basicsize__
    base = np.arange(12, dtype=np.float64).reshape(3, 4)
    try:
        for a in (base, base[1:, 2:], base.T, np.empty(0, np.int8), np.zeros((), np.int32), base.view(np.uint8)):
            if void_at(id(a) + off).value != a.ctypes.data:
                return None
    except (ValueError, OverflowError):
        return None
    return off


DATA_OFFSET = data_offset()


def data_pointer(a: np.ndarray) -> int:
    """The address of `a`'s first element (`a.ctypes.data`, read ~10x faster)."""
    if DATA_OFFSET is not None and type(a) is np.ndarray:
        return void_at(id(a) + DATA_OFFSET).value or 0
    return a.ctypes.data


def _free_refcount():
    probe = [np.empty(1, np.uint8)]
    return sys.getrefcount(probe[0])


_FREE = _free_refcount()  # references a pooled array has when nothing else holds it


# bytes of the arrays handed out and still alive, and the most there were (MLX's
# get_active_memory / get_peak_memory); a finalizer on each array gives its bytes back
_active = [0, 0]  # [active, peak]


_watch: dict = {}  # id(weakref) -> (weakref, bytes): its callback gives the array's bytes back


def _released(r):
    entry = _watch.pop(id(r), None)
    if entry is not None:
        _active[0] -= entry[1]


def _counted(a: np.ndarray, nbytes: int) -> np.ndarray:
    # a weakref with a callback (~0.3 us) rather than weakref.finalize (~6 us): this runs
    # for every eager op's output; one module-level callback, no closure per array
    if nbytes:
        r = weakref.ref(a, _released)
        _watch[id(r)] = (r, nbytes)
        with _lock:
            n = _active[0] = _active[0] + nbytes
            if n > _active[1]:
                _active[1] = n
    return a


def active_bytes() -> int:
    return _active[0]


def peak_bytes() -> int:
    return _active[1]


def reset_peak() -> None:
    _active[1] = _active[0]


def set_limit(nbytes: int) -> int:
    """Bound the pool to `nbytes` (0 disables it); returns the previous bound."""
    global _LIMIT
    old, _LIMIT = _LIMIT, int(nbytes)
    if _LIMIT <= 0:
        clear()
    return old


def empty(shape, dtype) -> np.ndarray:
    """An uninitialised C-contiguous array, recycled from the pool when possible."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize  # (np.prod costs 3 us: this runs per eager op)
    if nbytes < MIN_BYTES or _LIMIT <= 0:  # (the pool holds only large arrays)
        return _counted(_fresh(shape, dtype, nbytes), nbytes)
    return _counted(_pooled(shape, dtype, nbytes), nbytes)


def aligned(shape, dtype) -> np.ndarray:
    """An uninitialised C-contiguous array starting at a cache line (not pooled, not
    counted): `mr.array`'s copy of the caller's data."""
    dtype = np.dtype(dtype)
    return _fresh(shape, dtype, math.prod(shape) * dtype.itemsize)


def _fresh(shape, dtype, nbytes) -> np.ndarray:
    if nbytes < ALIGN_MIN:  # tiny: numpy's own
        return np.empty(shape, dtype)
    return _aligned(np.empty(nbytes + ALIGN, np.uint8), nbytes, dtype, shape)


def _pooled(shape, dtype, nbytes) -> np.ndarray:
    with _lock:
        for i in range(len(_pool)):
            if _pool[i].nbytes == nbytes + ALIGN and sys.getrefcount(_pool[i]) == _FREE:
                raw = _pool.pop(i)
                _pool.append(raw)  # most recently used last
                return _aligned(raw, nbytes, dtype, shape)
        raw = np.empty(nbytes + ALIGN, np.uint8)
        _pool.append(raw)
        total = sum(b.nbytes for b in _pool)
        i = 0
        while total > _LIMIT and i < len(_pool) - 1:  # drop free buffers, oldest first
            if sys.getrefcount(_pool[i]) == _FREE:
                total -= _pool.pop(i).nbytes
            else:
                i += 1
    return _aligned(raw, nbytes, dtype, shape)


def _aligned(raw, nbytes, dtype, shape) -> np.ndarray:
    """The `nbytes` of pooled `raw` from its first ALIGN-byte boundary, as an array (its
    base is `raw`: the pool sees it busy while the array or a view of it lives)."""
    # (ndarray's own constructor on the buffer: ~0.35 us, where slicing, view and reshape
    # took ~0.6 and `raw.ctypes.data` ~1)
    return np.ndarray(shape, dtype, raw, -data_pointer(raw) % ALIGN)


def clear() -> None:
    with _lock:
        _pool.clear()


def pooled_bytes() -> int:
    """Bytes of the pool's arrays that nothing else references (free for reuse)."""
    with _lock:
        return sum(b.nbytes for b in _pool if sys.getrefcount(b) == _FREE + 1)


def _refs(a) -> int:
    return sys.getrefcount(a)


class _Holder:
    __slots__ = ("d",)


def _held_refcount():
    h = _Holder()
    h.d = np.empty(1, np.uint8)
    return _refs(h.d)


_HELD = _held_refcount()  # references `_refs(x._data)` sees when `x._data` holds the only one


def sole_owner(d) -> bool:
    """Whether numpy buffer `d`, read as `holder.attr` by the caller, is referenced by that
    attribute alone and no other array shares its memory, so that a kernel may overwrite
    it (buffer donation, mirax/compile.py): C-contiguous, writable, and owning its memory
    or a view of a raw buffer of ours (pooled or aligned) that nothing else views. A view
    of another array's memory (`np.asarray(x)` of a mirax array, a slice), an array
    backed by a file (`mr.load`'s memory maps) or one whose memory a user's array owns:
    False."""
    if type(d) is not np.ndarray or not d.flags.c_contiguous or not d.flags.writeable:
        return False
    if sys.getrefcount(d) != _HELD:
        return False
    base = d.base
    if base is None:
        return True
    if type(base) is not np.ndarray or base.base is not None or base.dtype != np.uint8:
        return False
    with _lock:
        pooled = any(b is base for b in _pool)
    # the view's base reference, `base` here and getrefcount's argument; the pool's list
    return sys.getrefcount(base) == 3 + pooled
