"""The one MLIR context mirax uses, with the mirax dialect loaded from its IRDL file.

    with context():
        module = ir.Module.parse(text)
"""
from __future__ import annotations

import os
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


_inherited = []  # the parent's context in a forked child: kept, never destroyed


def _after_fork():
    """A forked child has none of the threads of MLIR's thread pool that the parent's
    context holds: the next pass pipeline run in it would wait for them forever, and so
    would destroying that context (its thread pool's destructor waits on them). The child
    keeps the parent's context alive and starts a context of its own on first use (IR a
    caller kept from before the fork still reads, but running passes on it would hang)."""
    global _ctx, _lock
    if _ctx is not None:
        _inherited.append(_ctx)
    _ctx, _lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
