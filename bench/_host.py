"""The host a benchmark ran on, for its header: CPU model, vector ISA, cores.

    from _host import describe; print(describe())
"""
import os
import platform


def describe() -> str:
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k.strip() == "model name":
                    model = v.strip()
                elif k.strip() in ("flags", "Features"):
                    flags = set(v.split())
                    break
    except OSError:
        pass
    isa = ("AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else
           "SVE" if "sve" in flags else "NEON" if "asimd" in flags else platform.machine())
    return f"host: {model}, {isa}, {os.cpu_count()} cores"
