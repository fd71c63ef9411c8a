"""glibc malloc settings for the temporaries of compiled kernels.

    from mirax.runtime import malloc
    malloc.configure()          # once, at import of mirax.runtime

Compiled code allocates its temporaries (padded operands, intermediates of a fused
function) with `malloc` and frees them before returning. glibc serves blocks above
`M_MMAP_THRESHOLD` with a fresh `mmap` and gives trimmed heap tops back to the kernel,
so each call of such a kernel page-faults its temporaries in again, zeroed by the
kernel: a padded 64x256x256 batched matmul spent more time in page faults than in its
FMAs (75 vs 131 GFLOP/s on one Zen 5 thread, CPU time). Here blocks up to 32 MiB (glibc's
maximum for the threshold) come from the heap, and up to `MIRAX_MALLOC_RETAIN_MB`
(default 256) of free heap top is kept for the next call, as MLX and PyTorch keep freed
buffers in a cache. Other C libraries (musl, macOS) are left as they are.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import sys

from .environment import number

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
_done = []


def configure() -> bool:
    """Apply the settings once per process; False where the C library is not glibc."""
    if _done:
        return _done[0]
    ok = False
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            mallopt = libc.mallopt
        except (OSError, AttributeError):  # musl has no mallopt
            mallopt = None
        if mallopt is not None:
            retain = int(number("MIRAX_MALLOC_RETAIN_MB", 256.0, minimum=0) * 2**20)
            ok = bool(mallopt(M_MMAP_THRESHOLD, 32 << 20)) and bool(mallopt(M_TRIM_THRESHOLD, max(retain, 128 << 10)))
    _done.append(ok)
    return ok
