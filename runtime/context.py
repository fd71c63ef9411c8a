"""The one MLIR context mirax uses, with the mirax dialect loaded from its IRDL file.

    with context():
        module = ir.Module.parse(text)
"""
from __future__ import annotations

import threading

from mlir import ir
from mlir.dialects import irdl

_ctx = None
_lock = threading.Lock()


def load_mirax_dialect(ctx: ir.Context) -> None:
    """Register the mirax dialect in `ctx` from `dialect/mirax.irdl.mlir`."""
    from ..dialect import IRDL_PATH
    with ctx, ir.Location.unknown():
        irdl.load_dialects(ir.Module.parse(IRDL_PATH.read_text()))


def new_context() -> ir.Context:
    from ..dialect.bindings import register
    register()  # wrapping a mirax op must not try to import a module each time
    ctx = ir.Context()
    load_mirax_dialect(ctx)
    return ctx


def context() -> ir.Context:
    """The shared context (created on first use)."""
    global _ctx
    if _ctx is None:
        with _lock:
            if _ctx is None:
                _ctx = new_context()
    return _ctx
