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
import sys
import threading
import time
import weakref

import numpy as np
from mlir import ir
from mlir.execution_engine import ExecutionEngine
from mlir.passmanager import PassManager

from ..lowering.cpu_pipeline import MiraxCpuPipeline
from ..lowering.pass_base import run_verifying_ours, verified_pass_manager
from . import buffers, disk_cache, llvm_codegen
from .backend import Backend
from .context import context
from .environment import number
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


_PIPELINES: dict = {}  # (context id, what the pipeline is built from) -> (context, PassManager, lock)


def lower_to_llvm(module: ir.Module) -> None:
    """mirax-cpu-pipeline on `module`, by a PassManager kept from the last compile in this
    context with the same tuning and threads (disk_cache.runtime_description: what decides
    the pipeline): building one and initializing its upstream passes (the canonicalizers'
    pattern sets) was ~2 ms of a small kernel's 11-28 ms of MLIR. Our passes keep nothing
    between runs. A second thread lowering at the same time builds its own."""
    ctx = module.context
    key = (id(ctx), disk_cache.runtime_description())
    kept = _PIPELINES.get(key)
    if kept is None or kept[0] is not ctx:
        kept = _PIPELINES[key] = (ctx, _cpu_pipeline(ctx), threading.Lock())
        while len(_PIPELINES) > 8:  # (tuning overrides, thread counts: a few at most)
            _PIPELINES.pop(next(iter(_PIPELINES)))
    _, pm, lock = kept
    if not lock.acquire(blocking=False):
        run_verifying_ours(_cpu_pipeline(ctx), module.operation)
        return
    try:
        run_verifying_ours(pm, module.operation)
    finally:
        lock.release()


def _cpu_pipeline(ctx) -> PassManager:
    return verified_pass_manager(MiraxCpuPipeline().add_to, ctx)


def _shared_libs():
    """Libraries kernels link against: MLIR's runner utils, when kernels may use threads
    the LLVM OpenMP runtime (`__kmpc_*`), and the vector math library (lowering/tuning.py)."""
    from ..lowering import tuning
    libdir = os.path.join(os.path.dirname(ir.__file__), "lib")
    libs = [os.path.join(libdir, "libmlir_c_runner_utils.so")]
    omp = tuning.openmp_library() if tuning.threads() > 1 else None
    if omp:
        libs.append(omp)
    vector_library = tuning.vector_math_library()
    if vector_library and llvm_codegen.expected():  # (only runtime/llvm_codegen.py's code calls it)
        libs.append(vector_library[1])
    return libs


_jit_loaded: set = set()  # the libraries an ExecutionEngine of this process has loaded
# element types whose arithmetic LLVM may turn into calls of helpers that only the runner
# utilities' dependencies define (half-float conversions: libmlir_float16_utils)
_HELPER_TYPES = ("f16", "complex", "f80", "f128")


def _is_runner_utils(path):
    return os.path.basename(path).startswith("libmlir_c_runner_utils")


def _jit_libs(module, text, libs):
    """`libs` for the JIT of a lowered (LLVM dialect) module, without MLIR's runner
    utilities when nothing in it calls them: loading that library the first time costs
    ~28 ms (it brings a second MLIR, libMLIR.so, 186 MB), most of a first compile in a
    fresh process. It stays when the module declares a function this process cannot
    resolve yet (`memrefCopy`, a runtime call), when it has element types whose code
    may call half-float helpers, or once it is loaded anyway. A symbol the JIT cannot
    resolve aborts the process, so anything unclear keeps every library. (A kernel that
    links is narrowed again by its own undefined symbols, `disk_cache.link_and_load`:
    OpenMP's `__kmpc_*` do not resolve here before libomp is loaded, which kept the
    runner utilities for every first kernel on the threads.)"""
    runner = [p for p in libs if _is_runner_utils(p)]
    if not runner or all(p in _jit_loaded or p in disk_cache._preloaded for p in runner):
        return libs
    if any(t in text for t in _HELPER_TYPES):
        return libs
    unresolved = []

    def check(op):  # the module's top-level ops; a raw walk imports no dialect module
        name = op.name
        if name == "builtin.module":
            return ir.WalkResult.ADVANCE
        if name == "llvm.func" and not len(op.regions[0].blocks):  # a declaration
            sym = ir.StringAttr(op.attributes["sym_name"]).value
            try:
                _libdl[sym]  # resolves in the process (libc, libm, a library loaded globally)
            except AttributeError:
                unresolved.append(sym)
        elif name == "llvm.mlir.global" and "value" not in op.attributes and not len(op.regions[0].blocks):
            unresolved.append(name)  # an external global: whose it is is not checked here
        return ir.WalkResult.INTERRUPT if unresolved else ir.WalkResult.SKIP

    module.operation.walk(check, ir.WalkOrder.PRE_ORDER)
    if unresolved:
        return libs
    return [p for p in libs if not _is_runner_utils(p)]


_support_done = []


def _global_support_libs():
    """Make the GCC runtime's helpers (`__powisf2`, `__divti3`, `__mulsc3`: calls LLVM's
    code generator may emit) resolvable by kernels: libgcc_s is in the process already
    (libstdc++ needs it) but loaded locally; the runner utilities used to bring it in
    globally as one of their dependencies, and now load only when a kernel calls them."""
    if _support_done:
        return
    _support_done.append(True)
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libgcc_s.so.1", mode=ctypes.RTLD_GLOBAL)
        except OSError:
            pass


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

    def fill(self, i, a, m):
        """Descriptor i describes `a`'s shape and strides `m` (its data pointer is set per call)."""
        d = self.descs[i]
        if d is None or self.meta[i] is None or len(m[0]) != len(self.meta[i][0]):
            d = self.descs[i] = descriptor_class(a.ndim)()
            self.holders[i] = ctypes.addressof(d)
        if a.ndim:
            d.sizes[:] = a.shape
            d.strides[:] = [st // a.itemsize if a.itemsize else 0 for st in a.strides]
        self.meta[i] = m
        return d


_PACKED = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_libdl = ctypes.CDLL(None)
_ndarray = np.ndarray
_void_at = buffers.void_at
_DATA = buffers.DATA_OFFSET  # (where an ndarray holds its data pointer: buffers.data_offset)


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
        # the hot path of every eager op and compiled call: a descriptor is rebuilt only
        # when an argument's shape or strides differ from the last call's
        args = (*inputs, *outputs)
        n = len(args)
        try:
            s = self._free.pop()
        except IndexError:
            s = _Slots(n)
        if s.n != n:
            s = _Slots(n)
        descs, meta, off = s.descs, s.meta, _DATA
        i = 0
        for a in args:
            m = (a.shape, a.strides)
            d = descs[i] if meta[i] == m else s.fill(i, a, m)
            p = _void_at(id(a) + off).value if off is not None and type(a) is _ndarray else a.ctypes.data
            d.allocated = p
            d.aligned = p
            i += 1
        try:
            self._fn(s.addr)
        finally:
            self._free.append(s)


# compile_module's own memory cache: disk-cache key -> CpuKernel (loaded .so or JIT engine),
# bounded in entries and bytes, least recently used out
MEMORY_CAPACITY = number("MIRAX_KERNEL_MEMORY_CAPACITY", 1024, int, minimum=0)
MEMORY_BYTES = int(number("MIRAX_KERNEL_MEMORY_MB", 256.0, minimum=0) * 2**20)
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


def cap_functions(module: ir.Module) -> int:
    """Under `MIRAX_CPU_MAX_ISA`, give every `llvm.func` of a lowered module the features
    above the cap switched off (`target_features`, LLVM's per-function "target-features"):
    MLIR's ExecutionEngine compiles for the whole host, so without them its code used the
    features the cap excludes (zmm registers under `avx2`). Returns the functions marked."""
    from ..lowering import host_cpu
    off = sorted(host_cpu.detected().features - host_cpu.host().features)  # (host(): capped)
    if not off:
        return 0
    attr = ir.Attribute.parse("#llvm.target_features<[" + ", ".join(f'"-{f}"' for f in off) + "]>",
                              module.context)
    n = 0
    for op in module.body.operations:
        if op.operation.name == "llvm.func":
            op.operation.attributes["target_features"] = attr
            n += 1
    return n


def _engine(module, opt_level, jit_libs):
    """MLIR's ExecutionEngine for a lowered module, under the ISA cap (`cap_functions`)."""
    cap_functions(module)
    return ExecutionEngine(module, opt_level=opt_level, shared_libs=jit_libs, enable_pic=True)


def _codegen_path(module) -> bool:
    """Whether runtime/llvm_codegen.py compiles the lowered module (else MLIR's
    ExecutionEngine does: no linker, no libLLVM, or ops MLIR cannot translate)."""
    return bool(disk_cache._link_commands()) and llvm_codegen.available() and llvm_codegen.translatable(module)


class _Build:
    """A kernel between its two halves: `start` (this thread: the caches, MLIR's passes,
    the translation to LLVM IR) and `finish` (any thread: LLVM, the link, the load). The
    ExecutionEngine's way (`engine`) needs the MLIR module, so it runs on the thread that
    made it, after a `finish` that returned None."""

    def __init__(self, key, name, opt_level, module, ctx, libs, jit_libs, use_disk, t0):
        self.key, self.name, self.opt_level = key, name, opt_level
        self.module, self.ctx, self.use_disk, self.t0 = module, ctx, use_disk, t0
        self.libs, self.jit_libs = libs, jit_libs  # (all it may need; those its JIT loads)
        self.llvm_ir = None  # bytes once translated (`translate`, on the starting thread)

    def translate(self) -> bool:
        """The module's LLVM IR (MLIR's translation); False where it cannot be had."""
        try:
            self.llvm_ir = llvm_codegen.translate(self.module)
        except llvm_codegen.CodegenError as e:
            disk_cache._warn_once("llvm-codegen", f"{e}; compiling with MLIR's ExecutionEngine instead")
            return False
        return True

    def finish(self):
        """LLVM's code generation, the link and the load: the kernel, or None where this
        way failed (then `engine`)."""
        try:
            objects = llvm_codegen.compile_objects(self.llvm_ir if self.llvm_ir is not None else self.module,
                                                   self.name, self.opt_level)
        except llvm_codegen.CodegenError as e:
            disk_cache._warn_once("llvm-codegen", f"{e}; compiling with MLIR's ExecutionEngine instead")
            return None
        linked = disk_cache.link_and_load(objects, self.name, self.jit_libs)
        return None if linked is None else self._from_library(*linked)

    def engine(self):
        """The ExecutionEngine's way, on the thread that started the build."""
        with self.ctx:
            engine = _engine(self.module, self.opt_level, self.jit_libs)
        _jit_loaded.update(self.jit_libs)
        # run the kernel from a linked .so (and drop the engine: an engine keeps ~2.4 MB of
        # LLVM state per kernel, 300 eager kernels grew a process by 2 GB; a .so a few KB)
        linked = disk_cache.link_and_load(engine, self.name, self.jit_libs)
        if linked is not None:
            return self._from_library(*linked)
        k = CpuKernel.from_engine(engine, self.name)  # nothing links here: keep the JIT's code
        k.nbytes = ENGINE_BYTES
        return _loaded.put(self.key, k)

    def _from_library(self, lib, addr, elf):
        """The kernel of a linked, loaded library, kept in memory and written to the disk
        cache off the compile path."""
        if self.use_disk:
            disk_cache.store_later(elf, self.key, self.name, self.libs, _count_write)
        return _loaded.put(self.key, CpuKernel(addr, self.name, lib, nbytes=len(elf)))

    def count(self):
        """Add this build to `stats` (on the starting thread: the counters have no lock)."""
        stats.compiles += 1
        stats.compile_seconds += time.perf_counter() - self.t0


def _start(module_or_text, name, opt_level, prepare, lower, libs):
    """compile_module's first half: the kernel itself when a cache holds it, else a _Build
    lowered to the LLVM dialect (not yet translated)."""
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
    _global_support_libs()
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
        jit_libs = _jit_libs(module, text, libs)
    return _Build(key, name, opt_level, module, ctx, libs, jit_libs, use_disk, t0)


def compile_module(module_or_text, name="kernel", opt_level=None, prepare=None, lower=None,
                   libs=()) -> CpuKernel:
    """Lower a module holding `func.func @name` (with `llvm.emit_c_interface`) and JIT it,
    or load it from the on-disk cache (runtime/disk_cache.py) when an earlier process built it.

    `prepare` is a (tag, function) pair run on the parsed module before lowering; the tag
    joins the cache key, so a cache hit skips parsing and preparing altogether. `lower`, a
    (tag, add-passes-to-a-PassManager) pair, replaces mirax-cpu-pipeline (MPI programs);
    `libs` are more shared libraries the kernel calls into (the MPI library)."""
    b = _start(module_or_text, name, opt_level, prepare, lower, libs)
    if isinstance(b, CpuKernel):
        return b
    k = b.finish() if _codegen_path(b.module) else None
    k = k if k is not None else b.engine()
    b.count()
    return k


# the threads that finish compile_many's kernels (not llvm_codegen's pool: a large module's
# finish waits there on its partitions, which must not queue behind that very finish)
_finisher = None
_finisher_lock = threading.Lock()


def _finishers():
    global _finisher
    with _finisher_lock:
        if _finisher is None:
            from concurrent.futures import ThreadPoolExecutor
            _finisher = ThreadPoolExecutor(llvm_codegen.threads(), thread_name_prefix="mirax-finish")
        return _finisher


def _reset_finishers():  # a forked child has none of the parent's threads
    global _finisher, _finisher_lock
    _finisher, _finisher_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_finishers)


def compile_many(texts, name="kernel") -> list:
    """Kernels for several modules (compile_module's, in order), built as a pipeline: this
    thread runs each one's MLIR passes while worker threads run LLVM, the link and the
    load of those before it (LLVM's calls and `ld` release the GIL; MLIR's Python passes
    hold it). A module that fails gives its exception in its place in the list, not
    raised: its op raises it when it runs."""
    out, pending = [], []
    for text in texts:
        try:
            b = _start(text, name, None, None, None, ())
            if isinstance(b, CpuKernel):  # a cache hit
                out.append(b)
            elif _codegen_path(b.module) and b.translate():
                pending.append((len(out), b, _finishers().submit(b.finish)))
                out.append(None)
            else:
                out.append(b.engine())
                b.count()
        except Exception as err:  # noqa: BLE001 - handed back in its place
            out.append(err)
    for i, b, fut in pending:
        try:
            k = fut.result()
            out[i] = k if k is not None else b.engine()
            b.count()
        except Exception as err:  # noqa: BLE001
            out[i] = err
    return out


class CpuBackend(Backend):
    """The CPU behind `runtime/backend.py`: buffers are numpy arrays (pooled by
    runtime/buffers.py), programs JIT kernels of `mirax-cpu-pipeline`, run at once."""

    kind = "cpu"
    c_interface = True  # the JIT calls kernels through their C-interface wrappers

    def __init__(self):
        from .kernel_cache import KernelCache
        self.kernels = KernelCache()  # one-op kernels by (op, attributes, avals)

    def empty(self, shape, dtype):
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

    def programs(self, items, name="kernel"):
        """Build the kernels of several (key, module text) pairs into the kernel cache at
        once (`compile_many`'s pipeline); one that fails is left out, for its op to raise
        when it runs."""
        for (key, _), k in zip(items, compile_many([t for _, t in items], name)):
            if isinstance(k, CpuKernel):
                self.kernels.put(key, k)
                self.kernels.compiles += 1

    def run(self, program, inputs, outputs):
        program(inputs, outputs)

    def synchronize(self):
        pass
