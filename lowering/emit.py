"""A small text emitter for lowering rules.

A primitive's `lower` rule writes upstream MLIR (linalg, tensor, arith, math, scf) as text
through an `Emitter`; `convert-mirax-to-linalg` wraps the text in a private function,
calls it in place of the mirax op, and lets the upstream inliner put it in line.
Inside a rule every tensor has a *signless* element type (arith has no unsigned types);
the rule reads signedness from the avals.

    def lower_exp(e, ins, in_avals, out):
        return e.map(ins, in_avals, out, lambda b, x: b.op(f"math.exp {x} : f32"))
"""
from __future__ import annotations

import numpy as np

from ..dialect.core import Aval


def scalar_type(aval_or_dtype) -> str:
    d = aval_or_dtype.dtype if isinstance(aval_or_dtype, Aval) else aval_or_dtype
    return d.signless


def ttype(aval: Aval) -> str:
    return aval.tensor_type(lowered=True)


def memory_type(aval_or_dtype) -> str:
    d = aval_or_dtype.dtype if isinstance(aval_or_dtype, Aval) else aval_or_dtype
    return d.memory


def _affine(ndim, dims):
    ds = ", ".join(f"d{i}" for i in range(ndim))
    res = ", ".join(dims)
    return f"affine_map<({ds}) -> ({res})>"


def identity_map(ndim):
    return _affine(ndim, [f"d{i}" for i in range(ndim)])


def projected_map(ndim, kept):
    """The map (d0..dn) -> (d_k for k in kept)."""
    return _affine(ndim, [f"d{k}" for k in kept])


def float_literal(v: float, elt: str) -> str:
    if np.isnan(v):
        return {"f16": "0x7E00", "bf16": "0x7FC0", "f32": "0x7FC00000", "f64": "0x7FF8000000000000"}[elt]
    if np.isinf(v):
        pos = {"f16": "0x7C00", "bf16": "0x7F80", "f32": "0x7F800000", "f64": "0x7FF0000000000000"}[elt]
        neg = {"f16": "0xFC00", "bf16": "0xFF80", "f32": "0xFF800000", "f64": "0xFFF0000000000000"}[elt]
        return pos if v > 0 else neg
    text = repr(float(v))
    if "." not in text:  # MLIR float literals need a decimal point: 1e-05 -> 1.0e-05
        text = text.replace("e", ".0e") if "e" in text else text + ".0"
    return text


class Emitter:
    """Collects lines of MLIR text with fresh SSA names."""

    def __init__(self, counter=None, indent="  "):
        self.lines: list[str] = []
        self._counter = counter if counter is not None else [0]
        self.indent = indent

    def fresh(self, hint="v") -> str:
        self._counter[0] += 1
        return f"%{hint}{self._counter[0]}"

    def line(self, text: str):
        self.lines.append(self.indent + text)

    def op(self, rhs: str, hint="v") -> str:
        """Emit `%new = rhs` and return `%new`."""
        name = self.fresh(hint)
        self.line(f"{name} = {rhs}")
        return name

    def sub(self, extra="  ") -> "Emitter":
        return Emitter(self._counter, self.indent + extra)

    # ---- scalars -----------------------------------------------------------------
    def const(self, value, elt: str) -> str:
        """A scalar constant of element type `elt` (signless)."""
        if elt.startswith("complex"):
            inner = elt[len("complex<"):-1]
            v = complex(value)
            return self.op(f"complex.constant [{float_literal(v.real, inner)} : {inner}, "
                           f"{float_literal(v.imag, inner)} : {inner}] : {elt}")
        if elt == "i1":
            return self.op(f"arith.constant {'true' if value else 'false'}")
        if elt.startswith("i"):
            return self.op(f"arith.constant {int(value)} : {elt}")
        return self.op(f"arith.constant {float_literal(value, elt)} : {elt}")

    def index(self, value: int) -> str:
        return self.op(f"arith.constant {int(value)} : index", "c")

    # ---- tensors -----------------------------------------------------------------
    def empty(self, aval: Aval) -> str:
        return self.op(f"tensor.empty() : {ttype(aval)}", "e")

    def fill(self, value, aval: Aval) -> str:
        c = self.const(value, memory_type(aval))
        e = self.empty(aval)
        return self.op(f"linalg.fill ins({c} : {memory_type(aval)}) outs({e} : {ttype(aval)}) -> {ttype(aval)}")

    def generic(self, ins, in_avals, out_aval, body, maps, iterators, init=None, extra_outs=()):
        """A linalg.generic. `body(b, *scalars)` emits into `b` and returns the value(s)
        to yield; the scalars are the block arguments (inputs, then the accumulator)."""
        out_init = init if init is not None else self.empty(out_aval)
        b = self.sub("  ")
        all_avals = list(in_avals) + [out_aval]
        args = [b.fresh("a") for _ in ins] + [b.fresh("o")]
        # bool is i8 in memory: rules see i1 scalars
        vals = [b.op(f"arith.trunci {a} : i8 to i1") if av.dtype.memory != av.dtype.signless else a
                for a, av in zip(args, all_avals)]
        y = body(b, *vals)
        ys = list(y) if isinstance(y, (list, tuple)) else [y]
        if out_aval.dtype.memory != out_aval.dtype.signless:
            ys = [b.op(f"arith.extui {v} : i1 to i8") for v in ys]
        in_types = [ttype(a) for a in in_avals]
        res = self.fresh("g")
        maps_txt = ", ".join(maps)
        its = ", ".join(f'"{i}"' for i in iterators)
        ins_txt = (f"ins({', '.join(ins)} : {', '.join(in_types)}) " if ins else "")
        self.line(f"{res} = linalg.generic {{indexing_maps = [{maps_txt}], iterator_types = [{its}]}} "
                  f"{ins_txt}outs({out_init} : {ttype(out_aval)}) {{")
        sig = ", ".join(f"{a}: {memory_type(av)}" for a, av in zip(args, all_avals))
        self.lines.append(self.indent + f"^bb0({sig}):")
        self.lines.extend(b.lines)
        self.line(f"  linalg.yield {', '.join(ys)} : {', '.join(memory_type(out_aval) for _ in ys)}")
        self.line(f"}} -> {ttype(out_aval)}")
        return res

    def map(self, ins, in_avals, out_aval, body):
        """An elementwise linalg.generic over same-shaped operands."""
        n = out_aval.ndim
        maps = [identity_map(n)] * (len(ins) + 1)
        return self.generic(ins, in_avals, out_aval, lambda b, *a: body(b, *a[:-1]), maps, ["parallel"] * n)

    def text(self):
        return "\n".join(self.lines)


def kernel_function(name, prim, params, in_avals, out_aval, private=True, target="cpu") -> str:
    """The text of a function computing one primitive with upstream dialects.

    Its signature has lowered types (signless, bool as i8), so lowering rules only see
    signless tensors; `convert-mirax-to-linalg` retypes the callers to match."""
    e = Emitter()
    args = [f"%arg{i}" for i in range(len(in_avals))]
    r = prim.lowering(target)(e, args, list(in_avals), out_aval, **params)
    sig = ", ".join(f"{a}: {ttype(av)}" for a, av in zip(args, in_avals))
    vis = "private " if private else ""
    return (f"func.func {vis}@{name}({sig}) -> {ttype(out_aval)} {{\n{e.text()}\n"
            f"  return {r} : {ttype(out_aval)}\n}}")
