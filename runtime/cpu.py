"""The CPU backend: JIT a module through `mirax-cpu-pipeline` and call it on numpy buffers.

    k = compile_module(text, "kernel")
    k([a, b], [out])        # out is written in place

Calls go through the packed wrapper `_mlir__mlir_ciface_<name>` with memref descriptors
reused from call to call: no copies, a few microseconds a call. Compiled kernels are kept
in memory (bounded) and on disk (runtime/disk_cache.py): a later process loads the `.so`
an earlier one linked instead of compiling again. `stats` counts compiles and cache hits.
"""
from __future__ import annotations

import ctypes
import os
import threading
import time
from collections import OrderedDict

import numpy as np
from mlir import ir
from mlir.execution_engine import ExecutionEngine
from mlir.passmanager import PassManager

from ..lowering.cpu_pipeline import MiraxCpuPipeline
from . import disk_cache
from .backend import Backend
from .context import context

_DESCRIPTORS = {}


def descriptor_class(rank: int):
    """The ctypes struct of a ranked memref descriptor."""
    cls = _DESCRIPTORS.get(rank)
    if cls is None:
        fields = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p), ("offset", ctypes.c_int64)]
        if rank:
            fields += [("sizes", ctypes.c_int64 * rank), ("strides", ctypes.c_int64 * rank)]
        cls = type(f"MemRef{rank}D", (ctypes.Structure,), {"_fields_": fields})
        _DESCRIPTORS[rank] = cls
    return cls


def descriptor(a: np.ndarray):
    d = descriptor_class(a.ndim)()
    p = a.ctypes.data
    d.allocated = p
    d.aligned = p
    if a.ndim:
        d.sizes[:] = a.shape
        d.strides[:] = [s // a.itemsize if a.itemsize else 0 for s in a.strides]
    return d


def lower_to_llvm(module: ir.Module) -> None:
    pm = PassManager("builtin.module", context=module.context)
    MiraxCpuPipeline().add_to(pm)
    pm.run(module.operation)


def _shared_libs():
    """Libraries kernels link against: MLIR's runner utils and, when kernels may use
    threads, the LLVM OpenMP runtime (`__kmpc_*`, see lowering/tuning.py)."""
    from ..lowering import tuning
    libdir = os.path.join(os.path.dirname(ir.__file__), "lib")
    libs = [os.path.join(libdir, "libmlir_c_runner_utils.so")]
    omp = tuning.openmp_library() if tuning.threads() > 1 else None
    if omp:
        libs.append(omp)
    return libs


class Stats:
    """Counters of what `compile_module` did in this process (for tests and benchmarks)."""

    _fields = ("compiles", "memory_hits", "disk_hits", "disk_misses", "disk_writes", "disk_corrupt",
               "compile_seconds", "load_seconds")

    def __init__(self):
        self.reset()

    def reset(self):
        for f in self._fields:
            setattr(self, f, 0)

    def as_dict(self):
        return {f: getattr(self, f) for f in self._fields}

    def __repr__(self):
        return f"Stats({self.as_dict()})"


stats = Stats()


class _Slots:
    """Reusable memref descriptors and the packed argument array pointing at them."""

    __slots__ = ("n", "descs", "meta", "holders", "packed", "addr")

    def __init__(self, n):
        self.n = n
        self.descs = [None] * n
        self.meta = [None] * n  # (shape, strides) each descriptor was last filled with
        self.holders = (ctypes.c_void_p * n)()  # holders[i] = &descs[i]
        self.packed = (ctypes.c_void_p * n)()  # packed[i] = &holders[i]
        base, size = ctypes.addressof(self.holders), ctypes.sizeof(ctypes.c_void_p)
        for i in range(n):
            self.packed[i] = base + i * size
        self.addr = ctypes.addressof(self.packed)


_PACKED = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class CpuKernel:
    """A compiled function `name(inputs..., outputs...)`, JIT-built or loaded from the disk cache.

    Calls go through the packed wrapper `_mlir__mlir_ciface_<name>` with memref descriptors
    reused from call to call (only the data pointers change when shapes repeat).
    """

    def __init__(self, addr, name, owner=None):
        if not addr:
            raise RuntimeError(f"kernel '{name}' not found in the compiled module")
        self.name = name
        self.owner = owner  # the ExecutionEngine or CDLL that holds the code
        self._fn = _PACKED(addr)
        self._free = []  # idle _Slots; a call pops one, so threads never share descriptors

    @property
    def engine(self):
        return self.owner if isinstance(self.owner, ExecutionEngine) else None

    @classmethod
    def from_engine(cls, engine, name):
        return cls(engine.raw_lookup("_mlir_ciface_" + name), name, engine)

    def __call__(self, inputs, outputs):
        args = (*inputs, *outputs)
        n = len(args)
        try:
            s = self._free.pop()
        except IndexError:
            s = _Slots(n)
        if s.n != n:
            s = _Slots(n)
        descs, meta = s.descs, s.meta
        for i, a in enumerate(args):
            p = a.ctypes.data
            m = (a.shape, a.strides)
            d = descs[i]
            if meta[i] != m:
                if d is None or len(m[0]) != len(meta[i][0]):
                    d = descs[i] = descriptor_class(a.ndim)()
                    s.holders[i] = ctypes.addressof(d)
                if a.ndim:
                    d.sizes[:] = a.shape
                    d.strides[:] = [st // a.itemsize if a.itemsize else 0 for st in a.strides]
                meta[i] = m
            d.allocated = p
            d.aligned = p
        try:
            self._fn(s.addr)
        finally:
            self._free.append(s)


# compile_module's own memory cache: disk-cache key -> CpuKernel (loaded .so or JIT engine)
_loaded: OrderedDict = OrderedDict()
_loaded_lock = threading.Lock()
MEMORY_CAPACITY = int(os.environ.get("MIRAX_KERNEL_MEMORY_CAPACITY", "1024"))


def _remember(key, kernel):
    with _loaded_lock:
        _loaded[key] = kernel
        while len(_loaded) > MEMORY_CAPACITY:
            _loaded.popitem(last=False)


def _count_write(ok):
    if ok:
        stats.disk_writes += 1


def clear_memory_cache():
    """Forget the kernels compile_module holds in memory (the disk cache stays)."""
    with _loaded_lock:
        _loaded.clear()


def compile_module(module_or_text, name="kernel", opt_level=None, prepare=None) -> CpuKernel:
    """Lower a module holding `func.func @name` (with `llvm.emit_c_interface`) and JIT it,
    or load it from the on-disk cache (runtime/disk_cache.py) when an earlier process built it.

    `prepare` is a (tag, function) pair run on the parsed module before lowering; the tag
    joins the cache key, so a cache hit skips parsing and preparing altogether."""
    text = module_or_text if isinstance(module_or_text, str) else str(module_or_text)
    if opt_level is None:
        from ..lowering.tuning import jit_opt_level
        opt_level = jit_opt_level(text)
    libs = _shared_libs()
    key = disk_cache.cache_key(text + (f"\n// prepared by {prepare[0]}" if prepare else ""), name, opt_level, libs)
    k = _loaded.get(key)
    if k is not None:
        stats.memory_hits += 1
        with _loaded_lock:
            if key in _loaded:
                _loaded.move_to_end(key)
        return k
    t0 = time.perf_counter()
    use_disk = disk_cache.cache_dir() is not None
    if use_disk:
        hit = disk_cache.lookup(key, name, libs)
        if hit is not None:
            stats.disk_hits += 1
            lib, addr = hit
            k = CpuKernel(addr, name, lib)
            _remember(key, k)
            stats.load_seconds += time.perf_counter() - t0
            return k
        stats.disk_misses += 1
    ctx = context()
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(text) if isinstance(module_or_text, str) else module_or_text
        if prepare:
            prepare[1](module)
        lower_to_llvm(module)
        engine = ExecutionEngine(module, opt_level=opt_level, shared_libs=libs, enable_pic=use_disk)
    stats.compiles += 1
    k = CpuKernel.from_engine(engine, name)
    if use_disk:  # link and write the .so off the compile path
        disk_cache.store_later(engine, key, name, libs, _count_write)
    _remember(key, k)
    stats.compile_seconds += time.perf_counter() - t0
    return k


class CpuBackend(Backend):
    """The CPU behind `runtime/backend.py`: buffers are numpy arrays (pooled by
    runtime/buffers.py), programs JIT kernels of `mirax-cpu-pipeline`, run at once."""

    kind = "cpu"
    c_interface = True  # the JIT calls kernels through their C-interface wrappers

    def __init__(self):
        from .kernel_cache import KernelCache
        self.kernels = KernelCache()  # one-op kernels by (op, attributes, avals)

    def empty(self, shape, dtype):
        from . import buffers
        return buffers.empty(shape, dtype)

    def upload(self, a):
        return np.ascontiguousarray(a)

    def download(self, buf, dtype, shape):
        return buf

    def program(self, text, name="kernel", key=None):
        if key is None:
            return compile_module(text, name)
        k = self.kernels.get(key)
        return k if k is not None else self.kernels.compile(key, text)

    def run(self, program, inputs, outputs):
        program(inputs, outputs)

    def synchronize(self):
        pass
