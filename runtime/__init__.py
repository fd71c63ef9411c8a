"""mirax's runtime: the shared MLIR context, devices, kernel caches and launchers."""

from . import malloc as _malloc

_malloc.configure()  # kernels' temporaries stay in the heap between calls (runtime/malloc.py)
