"""The Python module of the mirax dialect, as the MLIR bindings expect one.

Each time the bindings wrap an operation (iterating a block, `op.opview`, a pass's
callback) they look for the Python module of its dialect, `mlir.dialects.<name>`, and
only remember modules they found: without this one every wrapped mirax op paid a failed
import (30-300 µs, depending on `sys.path`; 0.35 µs once registered). mirax ops are
defined by IRDL (`dialect/mirax.irdl.mlir`) and built from text, so the module needs no
op classes: the bindings' generic `OpView` serves them.

    register()   # done by runtime/context.py before the first context is made

It also gives the bindings an empty module for linalg: `mlir.dialects.linalg` imports its
OpDSL definitions (PyYAML and the named ops' builders: 60-75 ms, as much as a first
compile of gelu in a fresh process), which the first linalg op wrapped used to load. The
bindings search LIGHT first, so linalg ops are wrapped as generic OpViews (mirax reads
them by name, attributes and operands), until code that builds linalg ops imports
`mlir.dialects.linalg` itself, whose op classes then serve (its `_linalg_ops_gen` alone
would cost ~7 ms more a first compile).
"""
from __future__ import annotations

import sys
import types

MODULE = "mlir.dialects.mirax"
LIGHT = "mirax_light_dialects"  # searched for dialect modules before mlir.dialects


def register() -> None:
    if MODULE not in sys.modules:
        m = types.ModuleType(MODULE, __doc__)
        m.__file__ = __file__
        sys.modules[MODULE] = m
    if LIGHT not in sys.modules:
        from mlir._mlir_libs._mlir import globals as bindings
        pkg = types.ModuleType(LIGHT, "dialect modules the MLIR bindings find before mlir.dialects'")
        pkg.__path__ = []  # (a package: any other dialect's module is not found here)
        sys.modules[LIGHT] = pkg
        sys.modules[f"{LIGHT}.linalg"] = types.ModuleType(f"{LIGHT}.linalg", "linalg ops as generic OpViews")
        bindings.dialect_search_modules = [LIGHT] + [p for p in bindings.dialect_search_modules if p != LIGHT]
