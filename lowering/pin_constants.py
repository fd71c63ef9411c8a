"""`mirax-pin-constants`: vector constants of loops made once before the loop nest,
behind an empty inline asm, on x86 without AVX-512.

When a loop's values and constants outgrow the vector registers, LLVM's register
allocator rematerializes a splat constant at each use rather than spill it: on AVX-512
that is an embedded broadcast folded into the arithmetic (`{1to16}`), free; on AVX2 it
is one `vbroadcastss` per constant per iteration (14 in gelu's loop of 16 elements, a
fifth of its instructions). A value LLVM cannot see through is spilled once and reloaded
from the stack instead, as a plain load or an operand (`vfmadd213ps mem, ...`). This
pass gives each splat f32/f64 vector constant of one or two registers used in a loop nest
(`scf.for`s; an `scf.forall` body is a place of its own) one such value, made before the
nest (wider constants serve several registers a broadcast: left alone):

    scf.for %i = ... {                         %c = arith.constant dense<0.5> : vector<16xf32>
      %c = arith.constant dense<0.5> ...   ->  %p = vector.extract_strided_slice %c {offsets = [0], sizes = [8], ...}
      arith.mulf %x, %c                        %h = llvm.inline_asm "", "=x,0" %p : (vector<8xf32>) -> vector<8xf32>
                                               %k = (%h inserted at lanes 0 and 8 of %c)
                                               scf.for %i = ... { arith.mulf %x, %k }

one vector register (`bytes`, the tuning table's `pin_bytes`: 32 on AVX2, 16 on SSE, 0
elsewhere) through the asm, repeated to the constant's width. Measured on Zen 3
(interleaved in one process, twice): gelu over 32x1000x4096 (mirax-streaming-stores'
loop) on one thread 74.0-74.4 -> 67.1-67.8 ms; on both threads, where the two cores
share the memory bandwidth, unchanged (35.0-35.3 vs 35.6-35.7 ms).
"""
from __future__ import annotations

from mlir import ir

from . import tuning
from .pass_base import MiraxPass, defining_op, isa, user_op, walk_ops

NAME = "mirax-pin-constants"
_PLACES = ("func.func", "scf.forall", "scf.parallel", "omp.parallel", "omp.wsloop")


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
    """The splat constant attribute `value` holds (an arith.constant of a splat, or a
    vector.broadcast of a scalar arith.constant), else None."""
    op = defining_op(value)
    if op is None:
        return None
    if op.name == "vector.broadcast":
        src = defining_op(op.operands[0])
        if src is None or src.name != "arith.constant":
            return None
        return ("scalar", str(src.attributes["value"]))
    if op.name == "arith.constant" and isa(ir.DenseElementsAttr, op.attributes["value"]):
        attr = ir.DenseElementsAttr(op.attributes["value"])
        return ("splat", str(attr.get_splat_value())) if attr.is_splat else None
    return None


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


def _nest_root(loop):
    """The outermost scf.for around `loop` (itself included) within its place."""
    root, p = loop, loop.parent
    while p is not None and p.name not in _PLACES:
        if p.name == "scf.for":
            root = p
        p = p.parent
    return root


def _inside(op, ancestor) -> bool:
    while op is not None:
        if op == ancestor:
            return True
        op = op.parent
    return False


def pin_constants(module, reg_bytes: int) -> int:
    """Pin the splat vector constants of every loop nest of `module`; returns how many
    pinned values it made."""
    if not reg_bytes:
        return 0
    roots = []
    for loop in walk_ops(module, lambda n: n == "scf.for"):
        r = _nest_root(loop)
        if r not in roots:
            roots.append(r)
    made = 0
    for root in roots:
        uses = []  # (op, operand index, constant key, value)
        for op in walk_ops(root, lambda n: True):
            for i, v in enumerate(op.operands):
                if not _lanes(v.type, reg_bytes):
                    continue
                key = _splat(v)
                if key is not None:
                    uses.append((op, i, (str(v.type),) + key, v))
        if not uses:
            continue
        pins = {}
        with ir.InsertionPoint(root), root.location:
            for op, i, key, v in uses:
                if key not in pins:
                    src = defining_op(v)
                    if _inside(src, root):  # made inside the nest: clone it (and its scalar) before it
                        scalar = defining_op(src.operands[0]) if src.name == "vector.broadcast" else None
                        mapping = {}
                        if scalar is not None:
                            mapping[scalar.results[0]] = scalar.clone().results[0]
                        new = src.clone()
                        for j, o in enumerate(new.operands):
                            if o in mapping:
                                new.operands[j] = mapping[o]
                        v = new.results[0]
                    pins[key] = pinned(v, reg_bytes)
                    made += 1
                op.operands[i] = pins[key]
        dead = []  # the nest's own constants, now unused (each op once: erased ops are gone)
        for _, _, _, v in uses:
            src = defining_op(v)
            if _inside(src, root) and not any(src == d for d in dead):
                dead.append(src)
        for src in dead:
            if any(len(list(r.uses)) for r in src.results):
                continue
            scalar = defining_op(src.operands[0]) if src.name == "vector.broadcast" else None
            src.erase()
            if scalar is not None and _inside(scalar, root) and not len(list(scalar.results[0].uses)):
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
