"""`mr.metal`: the Metal backend's status (MLX's `mx.metal`). On a Mac with Metal `mr.gpu`
runs there (runtime/metal.py); elsewhere it runs on Vulkan.

    mr.metal.is_available()   # False off macOS
"""
from __future__ import annotations


def is_available() -> bool:
    from .runtime.metal import is_available as available
    return available()
