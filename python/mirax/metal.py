"""`mr.metal`: the Metal backend's status (MLX's `mx.metal`). On a Mac with Metal `mr.gpu`
runs there (runtime/metal.py); elsewhere it runs on Vulkan.

    mr.metal.is_available()   # False off macOS
"""
from __future__ import annotations


def is_available() -> bool:
    from .runtime.metal import is_available as available
    return available()


# MLX keeps its memory functions under `mx.metal` too (deprecated there): the same figures
from .memory import (clear_cache, get_active_memory, get_cache_memory, get_peak_memory,  # noqa: E402,F401
                     reset_peak_memory, set_cache_limit, set_memory_limit, set_wired_limit)


def device_info() -> dict:
    """What MLX's `mx.metal.device_info()` reports, for the device `mr.gpu` runs on."""
    from .device import device_info as info
    return info()


def start_capture(path: str) -> None:
    """A Metal GPU trace capture (Xcode): only on a Mac with Metal."""
    if not is_available():
        raise RuntimeError("[metal::start_capture] Metal is not available on this machine")
    raise RuntimeError("[metal::start_capture] GPU trace capture is not supported by mirax's Metal runtime")


def stop_capture() -> None:
    if not is_available():
        raise RuntimeError("[metal::stop_capture] Metal is not available on this machine")
