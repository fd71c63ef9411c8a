"""`mirax-pin-constants`: vector constants of loops made once before the loop nest,
behind an empty inline asm, on x86 without AVX-512.

When a loop's values and constants outgrow the vector registers, LLVM's register
allocator rematerializes a splat constant at each use rather than spill it: on AVX-512
that is an embedded broadcast folded into the arithmetic (`{1to16}`), free; on AVX2 it
is one `vbroadcastss` per constant per iteration (14 in gelu's loop of 16 elements, a
fifth of its instructions). A value LLVM cannot see through is spilled once and reloaded
from the stack instead, as a plain load or an operand (`vfmadd213ps mem, ...`). This
pass gives each splat f32/f64 vector constant of one or two registers used in a loop
nest (`scf.for`s, in a function or in a parallel loop's body) one such value, made before the nest
(wider constants serve several registers a broadcast: left alone):

    scf.for %i = ... {                         %c = arith.constant dense<0.5> : vector<16xf32>
      %c = arith.constant dense<0.5> ...   ->  %p = vector.extract_strided_slice %c {offsets = [0], sizes = [8], ...}
      arith.mulf %x, %c                        %h = llvm.inline_asm "", "=x,0" %p : (vector<8xf32>) -> vector<8xf32>
                                               %k = (%h inserted at lanes 0 and 8 of %c)
                                               scf.for %i = ... { arith.mulf %x, %k }

one vector register (`bytes`, the tuning table's `pin_bytes`: 32 on AVX2, 16 on SSE, 0
elsewhere) through the asm, repeated to the constant's width. Measured on Zen 3, one
thread, interleaved in one process: gelu over 32x1000x4096 (mirax-streaming-stores'
loop) 73.2 -> 65.1 ms, over 1024x4096 2795 -> 2689 us, over 256x4096 763 -> 739 us.
The nests inside parallel loops' bodies are pinned too (per task, before its nest).
"""
from __future__ import annotations

from mlir import ir

from . import tuning
from .pass_base import MiraxPass, defining_op, enclosing, isa, splat_attr, user_op, walk_ops

NAME = "mirax-pin-constants"


# Vectors of at most this many registers: a rematerialized constant costs one broadcast an
# iteration whatever its width, a pinned one a load per register it spans. Measured on Zen
# 3 (4096^2, interleaved): gelu's 2-register loop one thread 10.02 -> 9.42 ms pinned; the
# row kernels' 4- and 8-register loops 1-7% slower pinned (softmax, layer norm, logsumexp).
MAX_REGISTERS = 2


def _lanes(t, reg_bytes: int) -> int:
    """Lanes of one register for a 1-d f32/f64 vector type `t` it divides into at most
    MAX_REGISTERS registers, else 0."""
    if not isa(ir.VectorType, t):
        return 0
    vt = ir.VectorType(t)
    if vt.rank != 1 or not isa(ir.FloatType, vt.element_type):
        return 0
    width = ir.FloatType(vt.element_type).width
    lanes = reg_bytes * 8 // width if width in (32, 64) else 0
    return lanes if lanes and vt.shape[0] % lanes == 0 and vt.shape[0] <= MAX_REGISTERS * lanes else 0


def _splat(value):
    """The splat constant `value` holds, as its attribute's text (an arith.constant of a
    splat, or a vector.broadcast of a scalar arith.constant), else None. Zero is left out:
    a zero vector is one `vxorps`, no load and no broadcast."""
    attr = splat_attr(value, broadcast=True)
    if attr is None or (isa(ir.FloatAttr, attr) and ir.FloatAttr(attr).value == 0.0):
        return None
    return str(attr)


def pinned(v, reg_bytes: int):
    """Vector `v` with its first register's worth of lanes through an empty
    `llvm.inline_asm` and repeated to its width (see the module docstring)."""
    from mlir.dialects import vector
    lanes = _lanes(v.type, reg_bytes)
    if not lanes:
        return v
    vt = ir.VectorType(v.type)
    piece_t = ir.VectorType.get([lanes], vt.element_type)
    piece = vector.ExtractStridedSliceOp(piece_t, v, [0], [lanes], [1]).result
    hidden = ir.Operation.create(
        "llvm.inline_asm", results=[piece_t], operands=[piece],
        attributes={"asm_string": ir.StringAttr.get(""), "constraints": ir.StringAttr.get("=x,0")}).results[0]
    out = v
    for k in range(0, vt.shape[0], lanes):
        out = vector.InsertStridedSliceOp(hidden, out, [k], [1]).result
    return out


def _is_root(loop) -> bool:
    """Whether `loop` is an outermost scf.for: none encloses it, in its function or in the
    body of a parallel loop (the pinned values are made per task). With loops of a line (two
    AVX2 registers) pinning in a parallel body measured slower (gelu over 256x4096 on Zen
    3: 426-506 us unpinned, 473-535 pinned); with mirax-streaming-stores' loops of one
    register it wins (its docstring: 32x1000x4096 on Zen 4 capped at AVX2, 25.5-25.9 ms
    unpinned, 23.9-24.2 pinned) and is even in cache."""
    return enclosing(loop, "scf.for") is None  # (a function is never inside a loop)


_CONSUMERS = ("arith.", "math.", "vector.fma")
# ops whose constant operands LLVM must see: `pow(x, 2.0)` is one multiply, but with the
# exponent hidden a vector pow is a libm `powf` call per lane (a user's layer norm, with
# its `(x - mu) ** 2`, ran 29x slower on AVX2 than on AVX-512: 205 against 7 ms, 4096^2)
_VISIBLE = ("math.powf", "math.fpowi", "math.ipowi")


def _clone_constant(src):
    """A copy of constant `src` (an arith.constant, or a vector.broadcast of one) at the
    insertion point."""
    if src.name == "vector.broadcast":
        scalar = defining_op(src.operands[0]).clone()
        new = src.clone()
        new.operands[0] = scalar.results[0]
        return new.results[0]
    return src.clone().results[0]


def pin_constants(module, reg_bytes: int) -> int:
    """Pin the splat vector constants of every loop nest of `module`; returns how many
    pinned values it made. Sibling nests of one block share them (made before the first):
    a streamed op's head, body and tail loops."""
    if not reg_bytes:
        return 0
    places, made, lanes_of = [], 0, {}  # [(block, first nest, {constant: pinned})]

    def lanes(t):
        k = str(t)
        if k not in lanes_of:
            lanes_of[k] = _lanes(t, reg_bytes) if k.startswith("vector<") else 0
        return lanes_of[k]

    for root in [loop for loop in walk_ops(module, lambda n: n == "scf.for") if _is_root(loop)]:
        uses = []  # (op, operand index, constant key, defining op)
        for op in walk_ops(root, lambda n: n.startswith(_CONSUMERS) and n != "arith.constant" and n not in _VISIBLE):
            for i, v in enumerate(op.operands):
                if lanes(v.type):
                    key = _splat(v)
                    if key is not None:
                        uses.append((op, i, (str(v.type), key), defining_op(v)))
        if not uses:
            continue
        place = next((p for p in places if p[0] == root.block), None)
        if place is None:
            place = (root.block, root, {})
            places.append(place)
        _, first, pins = place
        with ir.InsertionPoint(first), root.location:
            for op, i, key, src in uses:
                if key not in pins:
                    pins[key] = pinned(_clone_constant(src), reg_bytes)
                    made += 1
                op.operands[i] = pins[key]
        dead = []  # the constants replaced, now unused (each op once: erased ops are gone)
        for _, _, _, src in uses:
            if not any(src == d for d in dead):
                dead.append(src)
        for src in dead:
            if any(len(list(r.uses)) for r in src.results):
                continue
            scalar = defining_op(src.operands[0]) if src.name == "vector.broadcast" else None
            src.erase()
            if scalar is not None and not len(list(scalar.results[0].uses)):
                scalar.erase()
    return made


class MiraxPinConstants(MiraxPass):
    name = NAME
    summary = "Splat vector constants of loop nests made once before them, opaque to LLVM (x86 without AVX-512)"
    options = {"bytes": (-1, "bytes of the vector register a pinned piece fills (0: none; -1: tuning.py's)")}

    def run(self, module):
        n = int(self.opts["bytes"])
        with module.context:
            pin_constants(module, tuning.table()["elementwise"]["pin_bytes"] if n < 0 else n)
