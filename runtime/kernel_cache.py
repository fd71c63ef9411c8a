"""Bounded, least-recently-used caches of compiled kernels.

    cache = KernelCache(capacity=1024)
    k = cache.get(key) or cache.compile(key, module_text)

`LRU` is the bounded map every in-memory kernel cache of the runtime uses (entries, and
bytes where an entry says what it holds). `KernelCache` is the CPU's cache of one-op
kernels keyed by (op, attributes, avals): a miss goes to `runtime.cpu.compile_module`,
which looks in the on-disk cache (runtime/disk_cache.py) before compiling; `compiles`
here counts misses of this cache, `runtime.cpu.stats` says how many were really compiled.
`MIRAX_KERNEL_CACHE_CAPACITY` sets the default capacity.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

from .environment import number


class LRU:
    """A map of at most `capacity` entries (and `max_bytes` of their `nbytes`), least
    recently used out. Thread-safe.

        c = LRU(2); c.put("a", 1); c.put("b", 2); c.get("a"); c.put("c", 3)   # "b" goes
    """

    def __init__(self, capacity: int, max_bytes: int | None = None, on_evict=None):
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.on_evict = on_evict  # called with each value the bound pushes out
        self.nbytes = 0
        self._items: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key, default=None):
        with self._lock:
            v = self._items.get(key)
            if v is None:
                return default
            self._items.move_to_end(key)
            return v

    def put(self, key, value):
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.nbytes -= getattr(old, "nbytes", 0)
            self._items[key] = value
            self.nbytes += getattr(value, "nbytes", 0)
            while len(self._items) > 1 and (len(self._items) > self.capacity or (
                    self.max_bytes is not None and self.nbytes > self.max_bytes)):
                _, v = self._items.popitem(last=False)
                self.nbytes -= getattr(v, "nbytes", 0)
                if self.on_evict is not None:
                    self.on_evict(v)
        return value

    __setitem__ = put

    def __getitem__(self, key):
        v = self.get(key)
        if v is None:
            raise KeyError(key)
        return v

    def __contains__(self, key):
        return key in self._items

    def clear(self):
        with self._lock:
            self._items.clear()
            self.nbytes = 0

    def __len__(self):
        return len(self._items)

    def values(self):
        with self._lock:
            return list(self._items.values())

    def items(self):
        with self._lock:
            return list(self._items.items())


def default_capacity() -> int:
    return number("MIRAX_KERNEL_CACHE_CAPACITY", 4096, int, minimum=0)


class KernelCache(LRU):
    def __init__(self, capacity: int | None = None):
        super().__init__(capacity or default_capacity())
        self.compiles = 0  # how many kernels were built (for tests and benchmarks)

    def compile(self, key, text: str):
        from .cpu import compile_module
        kernel = compile_module(text, "kernel")
        self.compiles += 1
        return self.put(key, kernel)
