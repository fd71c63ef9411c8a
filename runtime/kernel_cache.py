"""An in-memory, bounded cache of compiled kernels keyed by (op, attributes, avals).

    cache = KernelCache(capacity=1024)
    k = cache.get(key) or cache.compile(key, module_text)
"""
from __future__ import annotations

from collections import OrderedDict

from .cpu import compile_module


class KernelCache:
    def __init__(self, capacity: int = 4096):
        self.capacity = capacity
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
        if len(self._items) > self.capacity:
            self._items.popitem(last=False)
        return kernel

    def clear(self):
        self._items.clear()

    def __len__(self):
        return len(self._items)
