"""`mirax-expand-bf16-truncf`: every `arith.truncf` from f32 or f64 to bf16 (scalar or
vector) becomes integer arithmetic, rounding to nearest even as the hardware would (f64
through an f32 rounded to odd: one rounding).

x86 without AVX512-BF16 has no instruction for it, and LLVM calls the compiler runtime's
`__truncsfbf2` (`__truncdfbf2` from f64) instead, which neither the kernels' link nor
the process provides: every
kernel converting to bfloat16 failed to load from its shared object ("undefined symbol:
__truncsfbf2"), warned, and stayed out of the disk cache. (upstream `arith-expand` has the
same rewrite under include-bf16, with the min/max expansions besides.)

    %h = arith.truncf %x : f32 to bf16
  becomes
    %b = arith.bitcast %x : f32 to i32
    %r = arith.addi %b, 0x7FFF + ((%b >> 16) & 1)      (round half to even)
    %h = bitcast(trunci(%r >> 16) : i16) : bf16, or 0x7FC0 where %x is NaN
"""
from __future__ import annotations

from mlir import ir

from .pass_base import MiraxPass, element_type, isa, walk_ops

NAME = "mirax-expand-bf16-truncf"


def _like(t: ir.Type, element: ir.Type) -> ir.Type:
    """`element`, or a vector of it shaped as `t`."""
    return ir.VectorType.get(ir.VectorType(t).shape, element) if isa(ir.VectorType, t) else element


def _const(t: ir.Type, value: int, loc) -> ir.Value:
    attr = ir.IntegerAttr.get(element_type(t), value)
    if isa(ir.VectorType, t):
        attr = ir.DenseElementsAttr.get_splat(t, attr)
    return ir.Operation.create("arith.constant", [t], attributes={"value": attr}, loc=loc).result


def _op(name, operands, result, loc, **attrs) -> ir.Value:
    return ir.Operation.create(name, [result], operands, attributes=attrs, loc=loc).result


def _cmpf(predicate: int, a, b, i1, loc):
    return _op("arith.cmpf", [a, b], i1, loc, predicate=ir.IntegerAttr.get(ir.IntegerType.get_signless(64), predicate))


OGT, UNE, UNO = 2, 13, 14  # arith.cmpf predicates


def _odd_f32_bits(x, i32, i1, loc):
    """f64 `x` as the bits of an f32 rounded to odd (toward zero, the last bit set when
    inexact): rounding those to bf16 is rounding x to bf16 once, as an f32 has more than
    two bits more than a bf16 (a plain f32 rounding first could round twice)."""
    f32 = _like(x.type, ir.F32Type.get())
    t = _op("arith.truncf", [x], f32, loc)
    back = _op("arith.extf", [t], x.type, loc)
    b = _op("arith.bitcast", [t], i32, loc)
    away = _cmpf(OGT, _op("math.absf", [back], x.type, loc), _op("math.absf", [x], x.type, loc), i1, loc)
    b = _op("arith.subi", [b, _op("arith.extui", [away], i32, loc)], i32, loc)  # (inf: the largest f32)
    return _op("arith.ori", [b, _op("arith.extui", [_cmpf(UNE, back, x, i1, loc)], i32, loc)], i32, loc)


def expand_bf16_truncf(root) -> int:
    """Rewrite the f32 and f64 -> bf16 truncations nested in `root`; returns how many."""
    done = 0
    for op in walk_ops(root, lambda n: n == "arith.truncf"):
        x, out = op.operands[0], op.results[0]
        wide = isa(ir.F64Type, element_type(x.type))
        if not ((wide or isa(ir.F32Type, element_type(x.type))) and isa(ir.BF16Type, element_type(out.type))):
            continue
        loc = op.location
        i32, i16, i1 = (_like(x.type, ir.IntegerType.get_signless(w)) for w in (32, 16, 1))
        with ir.InsertionPoint(op):
            b = _odd_f32_bits(x, i32, i1, loc) if wide else _op("arith.bitcast", [x], i32, loc)
            lsb = _op("arith.andi", [_op("arith.shrui", [b, _const(i32, 16, loc)], i32, loc),
                                     _const(i32, 1, loc)], i32, loc)
            r = _op("arith.addi", [b, _op("arith.addi", [lsb, _const(i32, 0x7FFF, loc)], i32, loc)], i32, loc)
            h = _op("arith.trunci", [_op("arith.shrui", [r, _const(i32, 16, loc)], i32, loc)], i16, loc)
            nan = _cmpf(UNO, x, x, i1, loc)
            h = _op("arith.select", [nan, _const(i16, 0x7FC0, loc), h], i16, loc)
            y = _op("arith.bitcast", [h], out.type, loc)
        out.replace_all_uses_with(y)
        op.erase()
        done += 1
    return done


class MiraxExpandBf16Truncf(MiraxPass):
    name = NAME
    summary = "Rewrite arith.truncf f32/f64 -> bf16 into integer rounding (no __truncsfbf2 calls)"

    def run(self, module):
        expand_bf16_truncf(module)
