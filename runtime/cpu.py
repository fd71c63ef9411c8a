"""The CPU backend: JIT a module through `mirax-cpu-pipeline` and call it on numpy buffers.

    k = compile_module(text, "kernel")
    k([a, b], [out])        # out is written in place

Calls go through the packed wrapper `_mlir__mlir_ciface_<name>` with memref descriptors
reused from call to call: no copies, a few microseconds a call. A JIT-compiled kernel is
linked into a shared object and run from there, its ExecutionEngine dropped (an engine
keeps ~2.4 MB, a loaded .so a few KB). Compiled kernels are kept in memory (bounded) and on disk (runtime/disk_cache.py): a later process loads the `.so`
an earlier one linked instead of compiling again. `stats` counts compiles and cache hits.
"""
from __future__ import annotations

import ctypes
import os
import threading
import time
import weakref

import numpy as np
from mlir import ir
from mlir.execution_engine import ExecutionEngine
from mlir.passmanager import PassManager

from ..lowering.cpu_pipeline import MiraxCpuPipeline
from . import disk_cache
from .backend import Backend
from .context import context
from .kernel_cache import LRU

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
_libdl = ctypes.CDLL(None)


def _dlclose(handle):
    _libdl.dlclose(ctypes.c_void_p(handle))


class CpuKernel:
    """A compiled function `name(inputs..., outputs...)`, JIT-built or loaded from the disk cache.

    Calls go through the packed wrapper `_mlir__mlir_ciface_<name>` with memref descriptors
    reused from call to call (only the data pointers change when shapes repeat).
    """

    def __init__(self, addr, name, owner=None, nbytes=0):
        if not addr:
            raise RuntimeError(f"kernel '{name}' not found in the compiled module")
        self.name = name
        self.owner = owner  # the ExecutionEngine or CDLL that holds the code
        self.nbytes = nbytes  # what holding it costs, for the memory cache's byte bound
        self._fn = _PACKED(addr)
        self._free = []  # idle _Slots; a call pops one, so threads never share descriptors
        if isinstance(owner, ctypes.CDLL):
            # ctypes never unloads a library: without this, every kernel ever loaded would
            # stay mapped. A call holds `self`, so this runs only once no call can be running.
            weakref.finalize(self, _dlclose, owner._handle)

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


# compile_module's own memory cache: disk-cache key -> CpuKernel (loaded .so or JIT engine),
# bounded in entries and bytes, least recently used out
MEMORY_CAPACITY = int(os.environ.get("MIRAX_KERNEL_MEMORY_CAPACITY", "1024"))
MEMORY_BYTES = int(float(os.environ.get("MIRAX_KERNEL_MEMORY_MB", "256")) * 2**20)
ENGINE_BYTES = 2_500_000  # what an ExecutionEngine keeps, measured (kernels that could not link)
_loaded = LRU(MEMORY_CAPACITY, MEMORY_BYTES)


def memory_cache_info():
    """(entries, bytes) of the kernels compile_module holds in memory."""
    return len(_loaded), _loaded.nbytes


def _count_write(ok):
    if ok:
        stats.disk_writes += 1


def clear_memory_cache():
    """Forget the kernels compile_module holds in memory (the disk cache stays)."""
    _loaded.clear()


def compile_module(module_or_text, name="kernel", opt_level=None, prepare=None, lower=None,
                   libs=()) -> CpuKernel:
    """Lower a module holding `func.func @name` (with `llvm.emit_c_interface`) and JIT it,
    or load it from the on-disk cache (runtime/disk_cache.py) when an earlier process built it.

    `prepare` is a (tag, function) pair run on the parsed module before lowering; the tag
    joins the cache key, so a cache hit skips parsing and preparing altogether. `lower`, a
    (tag, add-passes-to-a-PassManager) pair, replaces mirax-cpu-pipeline (MPI programs);
    `libs` are more shared libraries the kernel calls into (the MPI library)."""
    text = module_or_text if isinstance(module_or_text, str) else str(module_or_text)
    if opt_level is None:
        from ..lowering.tuning import jit_opt_level
        opt_level = jit_opt_level(text)
    libs = _shared_libs() + list(libs)
    tags = (f"\n// prepared by {prepare[0]}" if prepare else "") + (f"\n// lowered by {lower[0]}" if lower else "")
    key = disk_cache.cache_key(text + tags, name, opt_level, libs)
    k = _loaded.get(key)
    if k is not None:
        stats.memory_hits += 1
        return k
    t0 = time.perf_counter()
    use_disk = disk_cache.cache_dir() is not None
    if use_disk:
        hit = disk_cache.lookup(key, name, libs)
        if hit is not None:
            stats.disk_hits += 1
            lib, addr, nbytes = hit
            k = CpuKernel(addr, name, lib, nbytes=nbytes)
            _loaded.put(key, k)
            stats.load_seconds += time.perf_counter() - t0
            return k
        stats.disk_misses += 1
    ctx = context()
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(text) if isinstance(module_or_text, str) else module_or_text
        if prepare:
            prepare[1](module)
        if lower:
            pm = PassManager("builtin.module", context=module.context)
            lower[1](pm)
            pm.run(module.operation)
        else:
            lower_to_llvm(module)
        engine = ExecutionEngine(module, opt_level=opt_level, shared_libs=libs, enable_pic=True)
    stats.compiles += 1
    # run the kernel from a linked .so and drop the engine: an engine keeps ~2.4 MB of LLVM
    # state per kernel (300 eager kernels grew a process by 2 GB), a loaded .so a few KB
    linked = disk_cache.link_and_load(engine, name, libs)
    if linked is None:  # nothing links here: keep the JIT's code
        k = CpuKernel.from_engine(engine, name)
        k.nbytes = ENGINE_BYTES
    else:
        lib, addr, elf = linked
        k = CpuKernel(addr, name, lib, nbytes=len(elf))
        del engine
        if use_disk:  # write the entry off the compile path
            disk_cache.store_later(elf, key, name, libs, _count_write)
    _loaded.put(key, k)
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
