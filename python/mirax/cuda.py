"""`mr.cuda`: the CUDA backend's status. Where an NVIDIA driver and device answer, `mr.gpu`
runs PTX kernels there (runtime/cuda.py); elsewhere Metal (macOS) or Vulkan.

    mr.cuda.is_available()   # False without libcuda.so.1 and a device
"""
from __future__ import annotations


def is_available() -> bool:
    from .runtime.cuda import is_available as available
    return available()
