"""`mirax-verify`: every mirax op has the type its primitive's shape rule gives.

IRDL only checks that operands and results are tensors; this pass checks the rest:
ranked static tensors of mirax dtypes, attributes that parse, and the result type

    %0 = "mirax.add"(%a, %b) : (tensor<4xf32>, tensor<3xf32>) -> tensor<4xf32>
    // error: mirax.add: operand shapes differ: (4,), (3,)

Errors are emitted as diagnostics at each op's location; the pass then fails.
"""
from __future__ import annotations

from mlir import ir

from ..dialect import PRIMITIVES
from ..dialect import dtypes as dt
from ..dialect.core import Aval
from .convert_mirax_to_linalg import mirax_ops
from .pass_base import MiraxPass, PassError

NAME = "mirax-verify"


class VerifyError(PassError):
    """Verification failed; `errors` holds (op location, message) of each failure,
    already emitted as diagnostics."""

    def __init__(self, op, errors):
        super().__init__(op, errors[0][1] if len(errors) == 1 else
                         f"{len(errors)} mirax ops failed verification; first: {errors[0][1]}")
        self.errors = errors
        self.emitted = True


def _aval(t: ir.Type, what: str) -> Aval:
    try:
        rt = ir.RankedTensorType(t)
    except ValueError:
        raise ValueError(f"{what} must be a ranked tensor, got {t}") from None
    if not rt.has_static_shape:
        raise ValueError(f"{what} must have a static shape, got {t}")
    try:
        return Aval(tuple(rt.shape), dt.from_mlir(str(rt.element_type)))
    except TypeError as err:
        raise ValueError(f"{what}: {err}") from None


def verify_op(op: ir.Operation) -> str | None:
    """The error message of a malformed mirax op, or None."""
    prim = PRIMITIVES.get(op.name[len("mirax."):])
    if prim is None:
        return f"'{op.name}' is not a mirax primitive"
    if len(op.results) != 1:
        return f"'{op.name}' op expects one result, got {len(op.results)}"
    try:
        ins = [_aval(v.type, f"operand #{i}") for i, v in enumerate(op.operands)]
        out = _aval(op.results[0].type, "result")
        params = prim.params_from_ir(op)
    except KeyError as err:
        return f"'{op.name}' op requires attribute {err}"
    except (ValueError, TypeError) as err:
        return f"'{op.name}' op {err}"
    if prim.typed_result:
        if "value" in params:
            value = params["value"]
            if isinstance(value, str):  # (ComplexDenseText: complex values, which the bindings cannot wrap)
                vtype = ir.Type.parse(value.rsplit(" : ", 1)[1])
            else:
                vtype = ir.DenseElementsAttr(value).type
            if str(vtype) != str(op.results[0].type):
                return f"'{op.name}' op value type {vtype} differs from result type {op.results[0].type}"
        if prim.name == "arange" and out.ndim != 1:
            return f"'{op.name}' op result must be 1-d, got {op.results[0].type}"
        if prim.name == "arange" and params.get("step") == 0:
            return f"'{op.name}' op step must not be zero"
        return None
    try:
        want = prim.check(ins, params)
    except Exception as err:  # a shape rule's MiraxError, or a rule surprised by odd attributes
        return str(err)
    if want != out:
        return (f"'{op.name}' op result type {op.results[0].type} differs from the inferred type "
                f"{want.tensor_type()}")
    return None


def verify_errors(module) -> list:
    """[(op, message)] for each malformed mirax op in `module`, in program order."""
    root = module.operation if isinstance(module, ir.Module) else module
    out = []
    for op in mirax_ops(root):
        msg = verify_op(op)
        if msg:
            out.append((op, msg))
    return out


def verify_module(module, emit=True) -> None:
    """Raise a VerifyError when any mirax op is malformed; with `emit`, each error is
    also emitted as a diagnostic at its op's location (as MLIR's verifier does)."""
    errors = verify_errors(module)
    if not errors:
        return
    if emit:
        for op, msg in errors:
            op.location.emit_error(msg)
    err = VerifyError(errors[0][0], [(str(op.location), msg) for op, msg in errors])
    err.emitted = emit
    raise err


class MiraxVerify(MiraxPass):
    name = NAME
    summary = "Check every mirax op's operand, result and attribute types against its shape rule"

    def run(self, module: ir.Operation):
        verify_module(module, emit=False)

    def add_to(self, pm):
        # Inside a PassManager, emit the diagnostics and signal failure the MLIR way:
        # raising after emitting would leave captured diagnostics unhandled (an abort).
        def callback(op, pass_):
            errors = verify_errors(op)
            for bad, msg in errors:
                bad.location.emit_error(msg)
            if errors:
                pass_.signal_pass_failure()
        pm.add(callback, name=self.name)


# ---- before parsing ----------------------------------------------------------------------

_DENSE_ARRAY = None
_LINALG_ARRAY = None  # linalg.transpose's `permutation = [...]`, linalg.broadcast's and reduce's `dimensions = [...]`


def check_parsable(text: str):
    """(line, column, message) of the first construct that would abort MLIR's parser
    (the wheels are built with assertions) instead of failing with a diagnostic, or None.

    Known: a dense array of a type that has no bit width, `array<index: 1>`; a malformed
    list after linalg.transpose's `permutation =` or linalg.broadcast's and linalg.reduce's
    `dimensions =` (`permutation = 2, 1]`, `[0, 2 1]`: their parsers set a null attribute)."""
    global _DENSE_ARRAY, _LINALG_ARRAY
    import re
    if _DENSE_ARRAY is None:
        _DENSE_ARRAY = re.compile(r"array<\s*([^\s:>]+)")
        _LINALG_ARRAY = re.compile(r"\b(permutation|dimensions)\s*=\s*")
    ok = re.compile(r"(?:[su]?i\d+|bf16|tf32|f\d+\w*)")
    int_list = re.compile(r"\[\s*(?:-?\d+\s*(?:,\s*-?\d+\s*)*)?\]")
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("//"):
            continue
        if "array<" in line:
            for m in _DENSE_ARRAY.finditer(line):
                if not ok.fullmatch(m.group(1)):
                    return (n, m.start() + 1, f"dense array element type must be an integer or float type, "
                                              f"got '{m.group(1)}'")
        if "linalg." in line:
            for m in _LINALG_ARRAY.finditer(line):
                rest = line[m.end():]
                if rest.startswith("array<") or int_list.match(rest):
                    continue
                return (n, m.end() + 1, f"expected a list of integers in brackets after '{m.group(0).strip()}'")
    return None
