"""The ops a pass wants, found in C: `native_walk.c` built against MLIR's C API (the
headers and `libMLIRPythonCAPI.so` the bindings' wheel ships) and called through ctypes.

A walk through the bindings calls back into Python for every op (~0.75 us each: a
transformer step's Python passes visited 460,000 ops, ~0.4 s of its 2.1 s of MLIR).
Here C walks the ops twice: once for the distinct names under the root (`keep` is then
asked once a name), once for the ops with the names kept; only those become Python
objects. `pass_base.walk_ops` uses it when it loaded, else walks in Python.

    ops = native_walk.ops(module.operation, lambda name: name == "scf.forall")

The library is compiled once per source and MLIR library (`cc`, ~0.2 s) into
`lowering/_native/` (`make setup` does it), else into the cache directory; without a C
compiler every walk stays in Python.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import subprocess
import tempfile
import threading
from pathlib import Path

from mlir import ir

_SOURCE = Path(__file__).with_name("native_walk.c")
_CAPSULE = b"mlir.ir.Operation._CAPIPtr"
_VALUE_CAPSULE = b"mlir.ir.Value._CAPIPtr"
_lock = threading.Lock()
_lib = None  # the loaded library, False when it cannot be built or loaded here
_VP = ctypes.c_void_p


def _mlir_libs() -> Path:
    import mlir._mlir_libs as libs
    return Path(libs.__file__).parent


def _key() -> str:
    """What the library is built from: its source and the MLIR C API library it links."""
    capi = _mlir_libs() / ("libMLIRPythonCAPI" + (".dylib" if platform.system() == "Darwin" else ".so"))
    st = capi.stat()
    text = _SOURCE.read_bytes() + f"|{capi}|{st.st_size}|{st.st_mtime_ns}".encode()
    return hashlib.sha256(text).hexdigest()[:16]


def _candidates() -> list[Path]:
    """Where the library may live, best first: beside this module (what `make setup`
    builds), then the cache directory."""
    dirs = [Path(__file__).with_name("_native")]
    from ..runtime import disk_cache
    root = disk_cache.cache_root()
    if root is not None:
        dirs.append(Path(root) / "native")
    return [d / f"{_prefix()}{_key()}.so" for d in dirs]


def _prefix() -> str:
    """Builds are named by machine: a checkout shared by an x86-64 and an arm64 system (a
    container's mounted volume, test/aarch64/run.sh) keeps one of each."""
    return f"native_walk-{platform.machine().lower()}-"


def build(path: Path) -> Path:
    """Compile the library to `path` (written whole, then renamed into place)."""
    libs = _mlir_libs()
    path.parent.mkdir(parents=True, exist_ok=True)
    cc = os.environ.get("CC") or "cc"
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=path.parent)
    os.close(fd)
    try:
        subprocess.run([cc, "-O2", "-shared", "-fPIC", "-std=c99", f"-I{libs / 'include'}", str(_SOURCE),
                        "-o", tmp, f"-L{libs}", "-lMLIRPythonCAPI", f"-Wl,-rpath,{libs}"],
                       check=True, capture_output=True)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    for old in path.parent.glob("native_walk-*.so"):  # (earlier sources' builds, this machine's
        # or unnamed by machine (before 2026-12); a process that loaded one keeps its mapping)
        if old != path and (old.name.startswith(_prefix()) or old.name.count("-") == 1):
            try:
                old.unlink()
            except OSError:
                pass
    return path


def _load():
    global _lib
    if _lib is None:
        with _lock:
            if _lib is None:
                _lib = _open() or False
    return _lib or None


def _open():
    if os.environ.get("MIRAX_NATIVE_WALK", "1") == "0":
        return None
    try:
        paths = _candidates()
    except OSError:
        return None
    path = next((p for p in paths if p.exists()), None)
    for target in ([] if path else paths):
        try:
            path = build(target)
            break
        except (OSError, subprocess.CalledProcessError):
            continue
    if path is None:
        return None
    try:
        lib = ctypes.PyDLL(str(path))  # (holds the GIL: the IR must not change meanwhile)
    except OSError:
        return None
    lib.mirax_distinct_names.argtypes = [_VP, ctypes.POINTER(ctypes.POINTER(_VP)), ctypes.POINTER(_VP),
                                         ctypes.POINTER(ctypes.c_long), ctypes.POINTER(ctypes.c_long)]
    lib.mirax_matching_ops.argtypes = [_VP, ctypes.POINTER(_VP), ctypes.c_long, ctypes.POINTER(ctypes.POINTER(_VP))]
    lib.mirax_outside_values.argtypes = [ctypes.POINTER(_VP), ctypes.c_long, ctypes.POINTER(ctypes.POINTER(_VP))]
    lib.mirax_remap_operands.argtypes = [_VP, ctypes.POINTER(_VP), ctypes.POINTER(_VP), ctypes.c_long]
    lib.mirax_free.argtypes = [_VP]
    for f in (lib.mirax_distinct_names, lib.mirax_matching_ops, lib.mirax_outside_values, lib.mirax_remap_operands):
        f.restype = ctypes.c_long
    lib.mirax_free.restype = None
    return lib


def available() -> bool:
    """Whether walks run in C here (the library built and loaded)."""
    return _load() is not None


_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.argtypes, _get_pointer.restype = [ctypes.py_object, ctypes.c_char_p], _VP
_new_capsule = ctypes.pythonapi.PyCapsule_New
_new_capsule.argtypes, _new_capsule.restype = [_VP, ctypes.c_char_p, _VP], ctypes.py_object


def op_id(op) -> int:
    """The address of `op` (an ir.Operation or an OpView): what the C side receives, and a
    key that stays the same while the op is rewritten. `hash()` of an ir.Operation hashes
    its contents (operands, attributes, location): an op kept as a dict key is lost as soon
    as one of its operands is replaced (an 8-layer transformer step failed with a KeyError
    in mirax-split-empty-tensors). Needs no compiled library.

        pos = {op_id(o): i for i, o in enumerate(ops)}; ...; pos[op_id(o)]
    """
    return _get_pointer(getattr(op, "operation", op)._CAPIPtr, _CAPSULE)


def _taken(lib, n, out) -> list:
    if n < 0:
        raise MemoryError("native walk: out of memory")
    try:
        return out[:n]
    finally:
        lib.mirax_free(out)


def _distinct(lib, r):
    """([(identifier pointer, name)] of the ops nested in the op at `r`, in first-seen
    order; how many ops are nested in it)."""
    ids, chars, size, count = ctypes.POINTER(_VP)(), _VP(), ctypes.c_long(), ctypes.c_long()
    n = lib.mirax_distinct_names(r, ctypes.byref(ids), ctypes.byref(chars), ctypes.byref(size), ctypes.byref(count))
    if n < 0:
        raise MemoryError("native walk: out of memory")
    try:
        names = ctypes.string_at(chars, size.value).decode().split("\0")  # (n names, then "")
        return [(ids[i], names[i]) for i in range(n)], count.value
    finally:
        lib.mirax_free(ids)
        lib.mirax_free(chars)


def names(root):
    """The distinct names of the ops nested in `root` (not itself), in the order a
    pre-order walk first meets them; None when the library is not available here."""
    lib = _load()
    if lib is None:
        return None
    return [name for _, name in _distinct(lib, op_id(root))[0]]


def count(root):
    """How many ops are nested in `root` (not itself); None when the library is not
    available here."""
    lib = _load()
    if lib is None:
        return None
    return _distinct(lib, op_id(root))[1]


def ops(root, keep):
    """The ops nested in `root` (an ir.Operation, not itself), in program order, whose
    name satisfies `keep(name)`; None when the library is not available here."""
    lib = _load()
    if lib is None:
        return None
    r = op_id(root)
    wanted = [p for p, name in _distinct(lib, r)[0] if keep(name)]
    if not wanted:
        return []
    out = ctypes.POINTER(_VP)()
    found = _taken(lib, lib.mirax_matching_ops(r, (_VP * len(wanted))(*wanted), len(wanted), ctypes.byref(out)), out)
    create = ir.Operation._CAPICreate
    return [create(_new_capsule(p, _CAPSULE, None)) for p in found]


def _value_pointer(v):
    return _get_pointer(v._CAPIPtr, _VALUE_CAPSULE)


def outside_values(ops):
    """The values `ops` and the ops nested in them read that none of them defines, in
    first-use order (as `pass_base.outside_values` lists them); None when the library is
    not available here."""
    lib = _load()
    if lib is None:
        return None
    roots = [op_id(op) for op in ops]
    out = ctypes.POINTER(_VP)()
    found = _taken(lib, lib.mirax_outside_values((_VP * len(roots))(*roots), len(roots), ctypes.byref(out)), out)
    create = ir.Value._CAPICreate
    return [create(_new_capsule(p, _VALUE_CAPSULE, None)) for p in found]


def remap_operands(root, pairs) -> bool:
    """Point each operand of `root` and of the ops nested in it that is the first value of
    one of `pairs` at the second; False when the library is not available here (nothing
    changed then)."""
    lib = _load()
    if lib is None:
        return False
    if not pairs:
        return True
    olds = (_VP * len(pairs))(*[_value_pointer(a) for a, _ in pairs])
    news = (_VP * len(pairs))(*[_value_pointer(b) for _, b in pairs])
    if lib.mirax_remap_operands(op_id(root),
                                olds, news, len(pairs)) < 0:
        raise MemoryError("native walk: out of memory")
    return True
