"""Random numbers: `random_bits`, counter-based Threefry-2x32 (as JAX's threefry PRNG).

A key is a uint32 tensor of shape (..., 2). `random_bits` hashes a counter per output
element with its key, so the op is a pure function of (key, shape): the same key gives
the same bits on every backend, and nothing is stateful at the IR level.

    %0 = "mirax.random_bits"(%key) {shape = array<i64: 3, 4>} : (tensor<2xui32>) -> tensor<3x4xui32>
    %1 = "mirax.random_bits"(%keys) {shape = array<i64: 3>} : (tensor<5x2xui32>) -> tensor<5x3xui32>

The scheme is JAX's "partitionable" threefry (`jax_threefry_partitionable`, the default
since JAX 0.5): the element with row-major index i of the per-key shape takes the
64-bit counter i split as (hi, lo) = (i >> 32, i & 0xffffffff), and its 32 bits are
`y0 ^ y1` where (y0, y1) = threefry2x32(key, (hi, lo)) (20 rounds, rotations
[13, 15, 26, 6] and [17, 29, 16, 24], key schedule with the parity 0x1BD11BDA).
Each element depends only on its own index, so a generic computes it in place.
Leading key dims are batch dims: element (b..., i...) uses key[b..., :].
"""
from __future__ import annotations

import numpy as np

from . import dtypes as dt
from .core import I64Array, Aval, MiraxError, primitive

ROTATIONS = ([13, 15, 26, 6], [17, 29, 16, 24])
PARITY = 0x1BD11BDA


def threefry_schedule(add, xor, rotl, const, k0, k1, x0, x1):
    """Threefry-2x32 with 20 rounds over any arithmetic: `add`/`xor` wrap mod 2**32,
    `rotl(x, r)` rotates left by the Python int r, `const(c)` makes a uint32 constant.
    Shared by the numpy reference and the MLIR lowering, so they agree by construction."""
    ks = [k0, k1, xor(xor(k0, k1), const(PARITY))]
    x0 = add(x0, ks[0])
    x1 = add(x1, ks[1])
    for i in range(5):
        for r in ROTATIONS[i % 2]:
            x0 = add(x0, x1)
            x1 = rotl(x1, r)
            x1 = xor(x0, x1)
        x0 = add(x0, ks[(i + 1) % 3])
        x1 = add(add(x1, ks[(i + 2) % 3]), const(i + 1))
    return x0, x1


# ---- numpy reference ---------------------------------------------------------------------

def threefry2x32_np(k0, k1, x0, x1):
    """Threefry-2x32 on uint32 numpy arrays (broadcasting)."""
    u = np.uint32
    with np.errstate(over="ignore"):
        return threefry_schedule(
            lambda a, b: np.asarray(a + b, u), lambda a, b: np.asarray(a ^ b, u),
            lambda a, r: np.asarray((a << u(r)) | (a >> u(32 - r)), u), lambda c: u(c),
            np.asarray(k0, u), np.asarray(k1, u), np.asarray(x0, u), np.asarray(x1, u))


def random_bits_ref(key, shape):
    key = np.asarray(key, np.uint32)
    shape = tuple(int(s) for s in shape)
    n = int(np.prod(shape, dtype=np.int64))
    i = np.arange(n, dtype=np.uint64)
    hi = (i >> np.uint64(32)).astype(np.uint32)
    lo = (i & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    k0 = key[..., 0:1]
    k1 = key[..., 1:2]
    y0, y1 = threefry2x32_np(k0, k1, hi, lo)
    return (y0 ^ y1).reshape(key.shape[:-1] + shape)


# ---- the primitive ------------------------------------------------------------------------

def _random_bits_shape(avals, shape):
    (k,) = avals
    if k.dtype is not dt.uint32 or k.ndim < 1 or k.shape[-1] != 2:
        raise MiraxError(f"mirax.random_bits: the key must be a uint32 array of shape (..., 2), "
                         f"got {k.dtype.name}{list(k.shape)}")
    shape = tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise MiraxError(f"mirax.random_bits: negative dimension in shape {shape}")
    return Aval(k.shape[:-1] + shape, dt.uint32)


def _random_bits_lower(e, ins, in_avals, out, shape):
    from ..lowering.emit import identity_map, ttype
    (k,) = in_avals
    nb = k.ndim - 1  # batch (leading key) dims
    n = out.ndim
    shape = tuple(int(s) for s in shape)
    key = ins[0]

    def body(b, o):
        idx = [b.op(f"linalg.index {d} : index") for d in range(n)]
        # row-major flat index within the per-key shape: in i32 when it fits (no 64-bit
        # integers in the kernel, which GPUs prefer), else in i64 split as (hi, lo)
        wide = int(np.prod(shape, dtype=np.int64)) > 1 << 32
        it = "i64" if wide else "i32"
        flat = None
        stride = 1
        for d in reversed(range(nb, n)):
            v = b.op(f"arith.index_cast {idx[d]} : index to {it}")
            if stride != 1:
                c = stride - (1 << 32) if not wide and stride >= 1 << 31 else stride  # i32 is signless
                v = b.op(f"arith.muli {v}, {b.const(c, it)} : {it}")
            flat = v if flat is None else b.op(f"arith.addi {flat}, {v} : {it}")
            stride *= shape[d - nb]
        if flat is None:
            flat = b.const(0, it)
        if wide:
            lo = b.op(f"arith.trunci {flat} : i64 to i32")
            sh = b.op(f"arith.shrui {flat}, {b.const(32, 'i64')} : i64")
            hi = b.op(f"arith.trunci {sh} : i64 to i32")
        else:
            lo, hi = flat, b.const(0, "i32")
        kt = ttype(k)
        lead = idx[:nb]
        k0 = b.op(f"tensor.extract {key}[{', '.join(lead + [b.index(0)])}] : {kt}")
        k1 = b.op(f"tensor.extract {key}[{', '.join(lead + [b.index(1)])}] : {kt}")

        def add(x, y):
            return b.op(f"arith.addi {x}, {y} : i32")

        def xor(x, y):
            return b.op(f"arith.xori {x}, {y} : i32")

        def rotl(x, r):
            left = b.op(f"arith.shli {x}, {b.const(r, 'i32')} : i32")
            right = b.op(f"arith.shrui {x}, {b.const(32 - r, 'i32')} : i32")
            return b.op(f"arith.ori {left}, {right} : i32")

        def const(c):
            c = int(c) & 0xFFFFFFFF
            return b.const(c - (1 << 32) if c >= 1 << 31 else c, "i32")

        y0, y1 = threefry_schedule(add, xor, rotl, const, k0, k1, hi, lo)
        return xor(y0, y1)
    return e.generic([], [], out, body, [identity_map(n)], ["parallel"] * n)


primitive("random_bits", ["key"], _random_bits_shape, _random_bits_lower, random_bits_ref,
          attrs={"shape": I64Array()},
          summary="uint32 Threefry-2x32 bits of `shape` per key (key: uint32[..., 2])",
          dtypes=[dt.uint32])


# ---- transform rules ----------------------------------------------------------------------

def _rules():
    from .rules import defjvp, defvjp, move_to_front
    from .core import PRIMITIVES

    defjvp("random_bits", None)  # integer output: no derivative
    defvjp("random_bits", None)

    def batch(args, dims, shape):
        from mirax.array import apply
        (key,), (d,) = args, dims
        # leading key dims are already batch dims: the batched key just has one more
        return apply("random_bits", [move_to_front(key, d)], shape=shape), 0
    PRIMITIVES["random_bits"].batch = batch


_rules()
