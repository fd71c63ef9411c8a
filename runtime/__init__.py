"""mirax's runtime: the shared MLIR context, devices, kernel caches and launchers."""
