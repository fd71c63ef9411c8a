"""Between IR and arrays: read a `func.func` of mirax ops op by op, and write arrays
back as a new function.

Every transform pass is: `interpret` the function with a rule-applying handler on
placeholder arrays, then `emit_function` the resulting graph next to the original.
The Python API calls the transformed function the same way, with real arrays:

    outs = interpret(module, "f_grad", [x, y], apply_op)
"""
from __future__ import annotations

from mlir import ir

from ..dialect import PRIMITIVES
from ..dialect.core import Aval, MiraxError
from ..dialect import dtypes as dt
from ..array import STATE, Array, apply, apply_typed, at_loc, loc_of, located


def aval_of(t: ir.Type) -> Aval:
    rt = ir.RankedTensorType(t)
    return Aval(tuple(rt.shape), dt.from_mlir(str(rt.element_type)))


def find_function(module, name: str):
    """The `func.func @name` of a module (an ir.Module or its operation)."""
    op = module.operation if hasattr(module, "operation") else module
    for f in op.regions[0].blocks[0].operations:
        if f.operation.name == "func.func" and ir.StringAttr(f.attributes["sym_name"]).value == name:
            return f.operation
    raise MiraxError(f"no function @{name} in the module")


def signature(func_op):
    """(input avals, output avals) of a func.func."""
    ft = ir.FunctionType(ir.TypeAttr(func_op.attributes["function_type"]).value)
    return [aval_of(t) for t in ft.inputs], [aval_of(t) for t in ft.results]


def op_params(op):
    """(primitive, params, result aval) of a mirax op."""
    name = op.name[len("mirax."):]
    prim = PRIMITIVES.get(name)
    if prim is None:
        raise MiraxError(f"{op.location}: '{op.name}' is not a mirax primitive")
    return prim, prim.params_from_ir(op), aval_of(op.results[0].type)


def apply_op(prim, params, ins, aval, op=None):
    """Record `prim` on arrays: the plain (non-transforming) handler."""
    if prim.typed_result:
        return apply_typed(prim.name, ins, aval, **params)
    return apply(prim.name, ins, **params)


def interpret(module, name, inputs, handler, call_handler=None):
    """Run `@name` of `module` on `inputs` (any objects the handler understands).

    `handler(prim, params, ins, result_aval, op)` gives the value of each mirax op;
    `call_handler(op, callee, ins)` the values of a `func.call` (default: interpret the
    callee with the same handler). Returns the list of returned values."""
    func_op = find_function(module, name)
    block = func_op.regions[0].blocks[0]
    env = dict(zip(block.arguments, inputs))
    for op in block.operations:
        op = op.operation
        ins = [env[v] for v in op.operands]
        if op.name == "func.return":
            return ins
        if op.name == "func.call":
            callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
            if call_handler is not None:
                outs = call_handler(op, callee, ins)
            else:
                outs = interpret(module, callee, ins, handler)
            for r, v in zip(op.results, outs):
                env[r] = v
            continue
        if not op.name.startswith("mirax."):
            raise MiraxError(f"{op.location}: transforms only understand mirax ops and func.call, got '{op.name}'")
        prim, params, aval = op_params(op)
        loc = loc_of(op.location)
        with at_loc(loc):  # what the handler builds keeps the op's location
            try:
                env[op.results[0]] = handler(prim, params, ins, aval, op)
            except MiraxError as err:  # a rule failed: name the op's line
                raise located(err, loc) from None
    raise MiraxError(f"@{name} has no func.return")


def call_kind(op):
    """("custom" | "checkpoint" | None, the CustomFunction or None, the number of the
    function's own arguments (the rest are values it closed over)) of a func.call."""
    from ..custom import lookup
    for kind in ("custom", "checkpoint"):
        attr = f"mirax.{kind}"
        if attr in op.attributes:
            n = ir.IntegerAttr(op.attributes["mirax.num_args"]).value if "mirax.num_args" in op.attributes \
                else len(op.operands)
            return kind, lookup(ir.StringAttr(op.attributes[attr]).value), n
    return None, None, len(op.operands)


def as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


def placeholders(avals):
    """Fresh traced inputs for building a new function."""
    from ..trace import Tracer, placeholder
    tracer = Tracer("transform")
    return [placeholder(a, tracer, i) for i, a in enumerate(avals)]


class tracing:
    """Record source locations while a transform builds a graph."""

    def __enter__(self):
        STATE.tracing += 1

    def __exit__(self, *exc):
        STATE.tracing -= 1


def emit_function(module, name, inputs, outputs, lifted=(), source=None):
    """Append `func.func @name(inputs) -> outputs` built from an array graph to `module`.

    Arrays the graph captured (concrete, not placeholders) become constants. The new
    function takes the location of function `source` (the one transformed)."""
    from ..trace import to_mlir_text
    loc = loc_of(find_function(module, source).location) if source else None
    text, _ = to_mlir_text(inputs, outputs, name, lift=False, loc=loc)
    with module.context, ir.Location.unknown():
        new = ir.Module.parse("module {\n" + text + "\n}")
        op = module.operation if hasattr(module, "operation") else module
        block = op.regions[0].blocks[0]
        for f in list(new.body.operations):
            block.append(f.operation)


def zeros_for(aval: Aval) -> Array:
    from ..ops import zeros
    return zeros(aval.shape, aval.dtype)


def function_names(module):
    op = module.operation if hasattr(module, "operation") else module
    return [ir.StringAttr(f.attributes["sym_name"]).value for f in op.regions[0].blocks[0].operations
            if f.operation.name == "func.func"]


def unique_name(module, base):
    names = set(function_names(module))
    if base not in names:
        return base
    i = 1
    while f"{base}_{i}" in names:
        i += 1
    return f"{base}_{i}"
