"""The Python module of the mirax dialect, as the MLIR bindings expect one.

Each time the bindings wrap an operation (iterating a block, `op.opview`, a pass's
callback) they look for the Python module of its dialect, `mlir.dialects.<name>`, and
only remember modules they found: without this one every wrapped mirax op paid a failed
import (30-300 µs, depending on `sys.path`; 0.35 µs once registered). mirax ops are
defined by IRDL (`dialect/mirax.irdl.mlir`) and built from text, so the module needs no
op classes: the bindings' generic `OpView` serves them.

    register()   # done by runtime/context.py before the first context is made
"""
from __future__ import annotations

import sys
import types

MODULE = "mlir.dialects.mirax"


def register() -> None:
    if MODULE not in sys.modules:
        m = types.ModuleType(MODULE, __doc__)
        m.__file__ = __file__
        sys.modules[MODULE] = m
