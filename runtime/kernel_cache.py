"""An in-memory, bounded cache of compiled kernels keyed by (op, attributes, avals).

    cache = KernelCache(capacity=1024)
    k = cache.get(key) or cache.compile(key, module_text)

A miss goes to `runtime.cpu.compile_module`, which looks in the on-disk cache
(runtime/disk_cache.py) before compiling: `compiles` here counts misses of this cache,
`runtime.cpu.stats` says how many of them were really compiled and how many loaded.
`MIRAX_KERNEL_CACHE_CAPACITY` sets the default capacity.
"""
from __future__ import annotations

import os
from collections import OrderedDict

from .cpu import compile_module


class KernelCache:
    def __init__(self, capacity: int | None = None):
        self.capacity = capacity or int(os.environ.get("MIRAX_KERNEL_CACHE_CAPACITY", "4096"))
        self._items: OrderedDict = OrderedDict()
        self.compiles = 0  # how many kernels were built (for tests and benchmarks)

    def get(self, key):
        k = self._items.get(key)
        if k is not None:
            self._items.move_to_end(key)
        return k

    def compile(self, key, text: str):
        kernel = compile_module(text, "kernel")
        self.compiles += 1
        self._items[key] = kernel
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)
        return kernel

    def clear(self):
        self._items.clear()

    def __len__(self):
        return len(self._items)
