"""Composite ops as one kernel in eager code.

MLX's `softmax`, `logsumexp`, `layer_norm`... are primitives with kernels of their own;
mirax writes them with its primitives, so that the transforms see through them and
`mr.compile` fuses them. Eager code ran such an op primitive by primitive: `softmax`
of an 8x16 array was six ops and six kernels (~100 us), and a large one read and wrote
memory once per primitive. `@fused` makes the op, called outside any trace on the CPU,
one lazy node whose kernel is the compiled composition: `mr.compile`'s executable for
the arguments' shapes, dtypes and Python values (traced and built once each), run when
the node is evaluated like any other.

    @fused
    def softmax(a, axis=None, precise=False): ...

    y = mr.softmax(x, axis=-1)     # eager: one node, one kernel (mirax.fused)
    mr.grad(lambda t: mr.softmax(t).sum())(x)   # in a trace: the composition itself
"""
from __future__ import annotations

import functools

from .array import eager_on_cpu


class Fused:
    """The marker primitive of an eager node computed by a compiled composition; its
    params hold the executable (`compile.Executable`)."""

    name = "fused"
    typed_result = True


FUSED = Fused()


def fused(fn):
    """`fn` (a composition of mirax ops returning one array) as one node in eager code on
    the CPU; inside traces, on another device (a `stream=` argument, `mr.stream`), with
    `mr.disable_compile()`, or for arguments a compile cannot take, `fn` itself runs."""
    from .compile import compile as _compile
    compiled = _compile(fn)

    @functools.wraps(fn)
    def op(*args, **kwargs):
        if kwargs.get("stream") is not None or not eager_on_cpu():
            return fn(*args, **kwargs)
        node = compiled.lazy(args, kwargs)
        return fn(*args, **kwargs) if node is None else node
    op.composition = fn  # (tests: the op-by-op form)
    return op
