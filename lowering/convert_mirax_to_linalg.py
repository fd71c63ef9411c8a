"""`convert-mirax-to-linalg`: every mirax op becomes upstream linalg/tensor/arith/math.

Each op's lowering rule writes a private function (one per op, attributes and types),
parsed once; its body is cloned in place of each op it lowers (every op of it located at
the lowered op), and the functions are dropped. Cloning here instead of
calling and running the upstream inliner keeps the pass linear: the inliner costs
O(block size) per call site (10,000 ops: 18 s).

    %0 = "mirax.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  becomes
    %0 = linalg.generic {...} ins(%x : tensor<4xf32>) outs(%e : tensor<4xf32>) {
      ^bb0(%a: f32, %o: f32):  %1 = math.exp %a : f32  linalg.yield %1 : f32 }
"""
from __future__ import annotations

import hashlib

from mlir import ir
from mlir.dialects import func

from ..dialect import PRIMITIVES
from ..dialect.core import Aval
from ..dialect import dtypes as dt
from .emit import kernel_function
from .pass_base import MiraxPass, PassError, inline_body, isa, walk_ops

NAME = "convert-mirax-to-linalg"


def aval_of(t: ir.Type) -> Aval:
    rt = ir.RankedTensorType(t)
    return Aval(tuple(rt.shape), dt.from_mlir(str(rt.element_type)))


def mirax_ops(root: ir.Operation):
    """All mirax ops nested in `root`, in program order."""
    return walk_ops(root, lambda name: name.startswith("mirax."))


def op_signature(op):
    """(primitive, params, input avals, output aval) of a mirax op, or a PassError."""
    name = op.name[len("mirax."):]
    prim = PRIMITIVES.get(name)
    if prim is None:
        raise PassError(op, f"'{op.name}' is not a mirax primitive")
    try:
        params = prim.params_from_ir(op)
        ins = [aval_of(v.type) for v in op.operands]
        out = aval_of(op.results[0].type)
    except (KeyError, ValueError, TypeError) as err:
        raise PassError(op, f"'{op.name}': {err}") from None
    return prim, params, ins, out




def lowered_type(t: ir.Type) -> ir.Type:
    """The type lowered code uses: arith is signless (tensor<4xui8> becomes tensor<4xi8>)
    and bool is stored one byte per element (tensor<4xi1> becomes tensor<4xi8>)."""
    if isa(ir.RankedTensorType, t):
        rt = ir.RankedTensorType(t)
        elt = str(rt.element_type)
        try:
            mem = dt.from_mlir(elt).memory
        except TypeError:
            return t
        if mem != elt:
            return ir.RankedTensorType.get(rt.shape, ir.Type.parse(mem))
    return t


def lower_signatures(module: ir.Operation):
    """Give every function's arguments and results their lowered types."""
    for op in module.regions[0].blocks[0].operations:
        if op.operation.name != "func.func":
            continue
        op = op.operation
        ftype = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
        ins = [lowered_type(t) for t in ftype.inputs]
        outs = [lowered_type(t) for t in ftype.results]
        if list(ftype.inputs) == ins and list(ftype.results) == outs:
            continue
        if op.regions[0].blocks:
            for arg, t in zip(op.regions[0].blocks[0].arguments, ins):
                arg.set_type(t)
        op.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(ins, outs, context=op.context))


def _single_block(f):
    """Lowering function `f` when its body is one block (copied in place), else False
    (called: the inliner finishes)."""
    return f if len(list(f.regions[0].blocks)) == 1 else False


def _clone_body(fn, anchor) -> None:
    """Put a copy of the body of lowering function `fn` in place of the mirax op `anchor`:
    its arguments bound to `anchor`'s operands, the readers of `anchor`'s result handed
    the value it returns, every copied op, nested ones too, located at `anchor`.

    The whole function is cloned at once and its ops moved out (`inline_body`): MLIR
    rewires the uses of its arguments, nested ones too (cloning op by op and re-pointing
    each operand in Python was a third of this pass)."""
    copy = fn.clone(ir.InsertionPoint(anchor))
    loc = anchor.location

    def locate(op):
        op.location = loc
        return ir.WalkResult.ADVANCE
    copy.walk(locate)
    inline_body(copy.regions[0].blocks[0], list(anchor.operands), anchor, list(anchor.results))
    copy.erase()


class ConvertMiraxToLinalg(MiraxPass):
    name = NAME
    summary = "Lower mirax ops to linalg, tensor, arith and math"
    after = ["inline{default-pipeline=}", "symbol-dce"]  # upstream passes that finish the conversion
    options = {"target": ("cpu", "whose lowering rules to use: cpu | gpu (see register_lowering)")}

    def run(self, module: ir.Operation):
        ctx = module.context
        block = module.regions[0].blocks[0]
        made = {}
        bodies = {}  # function name -> its func op, or False (call it instead)
        # read every op's avals before retyping values to their lowered types
        ops = []
        for op in mirax_ops(module):
            sig = op_signature(op)
            # one private function per op, attribute values and types
            params = "|".join(f"{k}={v}" for k, v in sorted(sig[1].items())) + f"|{self.opts['target']}"
            ops.append((op, sig, f"{op.name}|{params}|{[str(v.type) for v in op.operands]}|{op.results[0].type}"))
        with ctx, ir.Location.unknown():
            lower_signatures(module)
        for op, (prim, params, ins, out), key in ops:
            fname = made.get(key)
            if fname is None:
                fname = f"__mirax_{prim.name}_{hashlib.sha1(key.encode()).hexdigest()[:10]}"
                try:
                    text = kernel_function(fname, prim, params, ins, out, target=self.opts["target"])
                except Exception as err:  # a rule that cannot lower these types
                    raise PassError(op, f"'{op.name}' cannot be lowered for {ins} -> {out}: {err}") from None
                with ctx, ir.Location.unknown():
                    try:
                        snippet = ir.Module.parse(text)
                    except ir.MLIRError as err:
                        raise PassError(op, f"internal error lowering '{op.name}': {err}\n{text}") from None
                    f = snippet.body.operations[0].operation
                    block.append(f)
                made[key] = fname
                bodies[fname] = _single_block(f)
            callee = bodies[fname]
            with ctx, op.location, ir.InsertionPoint(op):
                if callee is False:  # not a single-block body: call it (the inliner finishes)
                    res = func.CallOp([lowered_type(op.results[0].type)], ir.FlatSymbolRefAttr.get(fname),
                                      list(op.operands)).results[0]
                    op.results[0].replace_all_uses_with(res)
                else:
                    _clone_body(callee, op)
            op.erase()
        for fname, body in bodies.items():  # drop the lowering functions that were cloned
            if body is not False:
                body.erase()
