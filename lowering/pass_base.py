"""What a mirax pass is: a name, a summary, options, and a `run` over the module.

Passes run inside upstream `PassManager`s as Python passes, so a pipeline mixes them
freely with upstream passes: `add_to(pm)` appends the pass and any upstream passes that
complete it (`after`).
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import threading

from mlir import ir
from mlir.passmanager import PassManager

from ..dialect.core import MiraxError
from . import native_walk


# ---- Python passes never raise through the pass manager ------------------------------------
# An exception escaping a Python pass into PassManager.run unwinds C++ frames without their
# cleanups: the MLIRContext stays marked as running passes on threads, and the next code
# that registers dialect extensions (NVVM's target, loaded on first use) aborts the process
# on an assertion. So every Python callable added to a PassManager is wrapped: it keeps its
# exception and signals a pass failure, and PassManager.run re-raises the exception (the
# same PassError or MiraxError as before) once the pass manager has returned normally.
_failure = threading.local()
# Verification of our Python passes' IR (see run_verifying_ours): .mode is None (no checks:
# a plain PassManager.run), "groups" or "each"; .pending names the Python passes that ran
# since the IR was last verified
_verify = threading.local()
_add, _run = PassManager.add, PassManager.run


def _some_location(ctx):
    """The caller's default location if it set one, else an unknown one: the bindings'
    type and attribute builders need a location for their diagnostics and raise without
    one (a 0-d ui64 constant failed to lower when the PassManager ran outside
    `with ir.Location...`, as a user's own pipeline does)."""
    try:
        if ir.Location.current is not None:
            return contextlib.nullcontext()
    except ValueError:  # (older bindings raise where newer ones return None)
        pass
    return ir.Location.unknown(ctx)


def _guarded(fn, name):
    def callback(op, pass_):
        try:
            with _some_location(op.context):
                fn(op, pass_)
            mode = getattr(_verify, "mode", None)
            if mode == "each":
                _check(op, [name])
            elif mode == "groups":
                _verify.pending.append(name)
        except Exception as err:  # noqa: BLE001 - kept and re-raised by PassManager.run
            _keep_failure(err, pass_)
    return callback


def _keep_failure(err, pass_) -> None:
    """Keep a Python pass's exception for PassManager.run to raise and fail the pass."""
    if getattr(_failure, "error", None) is None:
        _failure.error = err
    pass_.signal_pass_failure()


def _check(op, names) -> None:
    """Verify `op`, raising a PassError that names the Python passes `names` (those that
    ran since the IR was last verified) when it is invalid."""
    try:
        op.verify()
    except ir.MLIRError as err:
        if len(names) == 1:
            who = f"pass '{names[0]}'"
        else:
            who = (f"one of the passes {', '.join(repr(n) for n in names)} (verified together; "
                   f"MIRAX_VERIFY_EACH_PASS=1 verifies after each)")
        raise PassError(op, f"{who} produced invalid IR: {err}") from None


def _verify_pending(op, pass_):
    """Before an upstream pass: verify the IR if Python passes changed it since the last
    check (upstream passes assume valid IR; they may crash on invalid IR)."""
    try:
        names = getattr(_verify, "pending", None)
        if getattr(_verify, "mode", None) == "groups" and names:
            _verify.pending = []
            _check(op, names)
    except Exception as err:  # noqa: BLE001 - kept and re-raised by PassManager.run
        _keep_failure(err, pass_)


def _add_guarded(self, pipeline, *args, **kwargs):
    if callable(pipeline):
        pipeline = _guarded(pipeline, kwargs.get("name") or getattr(pipeline, "__name__", "python pass"))
    elif getattr(_building, "verified", False):
        _add(self, _verify_pending, name="mirax-verify-python-passes")
    return _add(self, pipeline, *args, **kwargs)


_building = threading.local()  # .verified: inside verified_pass_manager


def verified_pass_manager(build, context=None, anchor="builtin.module") -> PassManager:
    """A PassManager filled by `build(pm)` for `run_verifying_ours`, with a check before
    each upstream pass that verifies what our Python passes wrote since the last one (a
    no-op elsewhere; pass managers built otherwise, as mirax-opt's, have none: their
    `--mlir-print-ir-after-all` shows only the passes asked for)."""
    pm = PassManager(anchor, context=context)
    _building.verified = True
    try:
        build(pm)
    finally:
        _building.verified = False
    return pm


def _run_raising_pass_errors(self, op, *args, **kwargs):
    outer = getattr(_failure, "error", None)  # a pass manager run from inside a pass
    _failure.error = None
    try:
        return _run(self, op, *args, **kwargs)
    except ir.MLIRError:
        err = _failure.error
        if err is not None:
            raise err from None
        raise
    finally:
        _failure.error = outer


PassManager.add = _add_guarded
PassManager.run = _run_raising_pass_errors


def run_verifying_ours(pm, op) -> None:
    """Run `pm` on `op` with MLIR's verifier after our Python passes and once at the end,
    not after every upstream pass (upstream passes keep valid IR valid; the verifier after
    all ~75 passes was 22% of a transformer step's MLIR time, a third of a gelu's).

    Consecutive Python passes are verified together, before the next upstream pass reads
    their IR (verifying after each of the 32 was 13% of a transformer step's MLIR time);
    an invalid IR's error names the passes of that run (`MIRAX_VERIFY_EACH_PASS=1`
    verifies after each, naming the one). A Python pass that leaves invalid IR fails
    before any upstream pass reads that IR."""
    pm.enable_verifier(False)
    outer = getattr(_verify, "mode", None), getattr(_verify, "pending", None)
    _verify.mode = "each" if os.environ.get("MIRAX_VERIFY_EACH_PASS", "0") not in ("", "0") else "groups"
    _verify.pending = []
    try:
        pm.run(op)
        if _verify.pending:
            _check(op, _verify.pending)
        else:
            op.verify()
    finally:
        _verify.mode, _verify.pending = outer


class PassError(MiraxError):
    """A pass failed on an op; carries the op's location for MLIR-style diagnostics."""

    def __init__(self, op, message):
        self.location = str(op.location) if op is not None else "loc(unknown)"
        self.message = message
        super().__init__(f"{self.location}: error: {message}")


class MiraxPass:
    name = ""
    summary = ""
    after: list = []  # upstream pipeline elements appended after run()
    options: dict = {}  # option name -> (default, help)
    choices: dict = {}  # option name -> the values it may take

    def __init__(self, **options):
        unknown = set(options) - set(self.options)
        if unknown:
            raise ValueError(f"pass '{self.name}' has no option {', '.join(sorted(unknown))}")
        # checked here, where mirax-opt reports a usage error, not in run() (a traceback)
        for k, v in options.items():
            default = self.options[k][0]
            if type(default) is int and not (type(v) is int or (isinstance(v, str) and v.lstrip("-").isdigit())):
                raise ValueError(f"pass '{self.name}': option {k} must be an integer, got {v!r}")
            if k in self.choices and str(v) not in self.choices[k]:
                raise ValueError(f"pass '{self.name}': option {k} must be {', '.join(self.choices[k][:-1])} or "
                                 f"{self.choices[k][-1]}, got {v!r}")
        self.opts = {k: v[0] for k, v in self.options.items()}
        self.opts.update(options)

    def run(self, module: ir.Operation):
        raise NotImplementedError

    def add_to(self, pm):
        def callback(op, *_):
            self.run(op)
        pm.add(callback, name=self.name) if _add_takes_name(pm) else pm.add(callback)
        for p in self.after:
            pm.add(p)


def isa(cls, value) -> bool:
    """Whether an ir.Type / ir.Attribute / affine expr casts to `cls` (the bindings raise
    ValueError when it does not): `isa(ir.MemRefType, v.type)`."""
    try:
        cls(value)
        return True
    except (ValueError, TypeError):
        return False


def element_type(t):
    """The element type of a shaped type (vector, tensor, memref), else `t` itself."""
    try:
        return ir.ShapedType(t).element_type
    except ValueError:
        return t


def defining_op(value):
    """The operation that defines `value`, or None for a block argument."""
    owner = value.owner
    if isinstance(owner, ir.Block):
        return None
    return owner.operation if hasattr(owner, "operation") else owner


# an op's address: a key that stays the same while the op is rewritten (`hash()` covers
# its operands); for the passes, beside the other helpers
op_id = native_walk.op_id


def strip_locations(fn) -> None:
    """Drop the locations in function `fn` (upstream `strip-debuginfo`), so that the same
    IR from different places compares equal (by bytecode, which carries locations): a
    network's identical kernels, its identical row groups. A part shared by several places
    would name the first one's only anyway."""
    pm = PassManager("func.func", context=fn.context)
    pm.add("strip-debuginfo")
    pm.run(fn)


def function_key(fn, edit=None) -> bytes:
    """The bytecode of a copy of function `fn` under a fixed name and without locations,
    after `edit(copy)` (what else must not tell copies apart): the same for the same IR
    from different places (a network's layers), for sharing the work done on one."""
    holder = ir.Module.create()
    g = fn.clone(ir.InsertionPoint(holder.body))
    g.attributes["sym_name"] = ir.StringAttr.get("f")
    if edit is not None:
        edit(g)
    strip_locations(g)
    out = io.BytesIO()
    holder.operation.write_bytecode(out)
    return out.getvalue()


def relocate(op, loc) -> None:
    """`op` and every op nested in it at `loc` (a copy of another place's work, located
    at its own place)."""
    op.location = loc
    for o in walk_ops(op, lambda n: True):
        o.location = loc


def user_op(use):
    """The operation of an OpOperand (a value's use)."""
    return use.owner.operation if hasattr(use.owner, "operation") else use.owner


def clone_mapped(op, mapping, ip=None):
    """A clone of `op` at `ip` (else the current insertion point) reading `mapping[v]`
    for each operand `v` that `mapping` holds, its regions' ops too; its results are
    added to `mapping` (old value -> new), so a block's ops cloned in order read each
    other's clones."""
    new = op.clone(ip) if ip is not None else op.clone()
    outside = native_walk.outside_values([new]) if len(new.regions) else None
    if outside is None or not native_walk.remap_operands(new, [(v, mapping[v]) for v in outside if v in mapping]):
        for o in [new] + (walk_ops(new, lambda name: True) if len(new.regions) else []):
            for i, v in enumerate(o.operands):
                if v in mapping:
                    o.operands[i] = mapping[v]
    for old, r in zip(op.results, new.results):
        mapping[old] = r
    return new


def _constant_or_static_empty(op) -> bool:
    return op is not None and op.name in ("arith.constant", "tensor.empty") and not len(op.operands)


def outside_values(ops, copied=_constant_or_static_empty):
    """The values `ops` (and the ops nested in them) read that none of them defines, in
    first-use order, as (copies, args): those whose defining op `copied` accepts
    (default: constants and static `tensor.empty`s), which a function holding `ops`
    takes as copies of its own (what canonicalization and fusion see of them stays the
    same), and the rest, its arguments."""
    found = native_walk.outside_values(ops)
    if found is None:  # (the walk in Python)
        nested = []
        for op in ops:
            nested.append(op)
            nested.extend(walk_ops(op, lambda name: True))
        inside = set()
        for o in nested:
            inside.update(o.results)
            for region in o.regions:
                for block in region.blocks:
                    inside.update(block.arguments)
        found = list(dict.fromkeys(v for o in nested for v in o.operands if v not in inside))
    copies, args = [], []
    for v in found:
        (copies if copied(defining_op(v)) else args).append(v)
    return copies, args


def block_position(op, pos):
    """Index in the block of `op`, or of its ancestor there (`pos`: the block's ops'
    indices by `op_id`); None if it is in none of them."""
    while op is not None:
        k = op_id(op)
        if k in pos:
            return pos[k]
        op = op.operation.parent
    return None


def inline_body(block, values, anchor, results) -> None:
    """Put the ops of a function body `block` (its function's only block), called with
    `values`, before `anchor`, and hand the readers of `results` the values it returns."""
    for a, v in zip(block.arguments, values):
        a.replace_all_uses_with(v)
    body = body_ops(block.owner)  # (plain ops: no OpView, no dialect package imported)
    for op in body[:-1]:
        op.move_before(anchor)
    for r, v in zip(results, list(body[-1].operands)):
        r.replace_all_uses_with(v)


def address_of(memref_value, esize: int, index):
    """The address of a memref's first element (its aligned pointer plus its offset of
    `esize`-byte elements), as an index value; `index(n)` makes an index constant."""
    from mlir.dialects import arith, memref
    ptr = memref.ExtractAlignedPointerAsIndexOp(memref_value).result
    offset = memref.ExtractStridedMetadataOp(memref_value).results[1]
    return arith.AddIOp(ptr, arith.MulIOp(offset, index(esize)).result).result


def enclosing(op, name: str):
    """The nearest op named `name` around `op` (not `op` itself), or None."""
    p = op.parent
    while p is not None and p.name != name:
        p = p.parent
    return p


def within(op, ancestor) -> bool:
    """Whether `op` is `ancestor` or nested in it (either an ir.Operation or an OpView)."""
    ancestor = getattr(ancestor, "operation", ancestor)
    while op is not None:
        op = getattr(op, "operation", op)
        if op == ancestor:
            return True
        op = op.parent
    return False


_ITERATOR = re.compile(r"iterator_type<(\w+)>")


def iterator_kinds(op):
    """A linalg op's iterator types as strings: ["parallel", "reduction"] for a row sum.
    (The array printed once: printing each element cost as much.)"""
    return _ITERATOR.findall(str(op.attributes["iterator_types"]))


def iterator_types_attr(kinds):
    """The `iterator_types` attribute of a linalg.generic: ["parallel", "reduction"] ->
    [#linalg.iterator_type<parallel>, #linalg.iterator_type<reduction>]."""
    return ir.Attribute.parse("[" + ", ".join(f"#linalg.iterator_type<{k}>" for k in kinds) + "]")


def indexing_maps(op):
    """A linalg op's indexing maps as `ir.AffineMap`s, one an operand."""
    return [ir.AffineMapAttr(a).value for a in op.attributes["indexing_maps"]]


def reassociation(op):
    """A collapse/expand_shape's reassociation as lists: [[src dims of dst dim 0], ...]."""
    return [[ir.IntegerAttr(d).value for d in ir.ArrayAttr(g)] for g in ir.ArrayAttr(op.attributes["reassociation"])]


def reassociation_attr(groups):
    """The reassociation attribute of `groups` (lists of dims), for a collapse/expand_shape."""
    i64 = ir.IntegerType.get_signless(64)
    return ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(i64, d) for d in g]) for g in groups])


def constant_int(value):
    """The integer an `arith.constant` (index or integer) defines, else None."""
    op = defining_op(value)
    if op is not None and op.name == "arith.constant":
        try:
            return ir.IntegerAttr(op.attributes["value"]).value
        except ValueError:  # a float or a dense constant
            return None
    return None


def is_transpose_2d(op) -> bool:
    """Whether `op` is a `linalg.transpose` swapping the two dims of a matrix."""
    return (op is not None and op.name == "linalg.transpose"
            and list(ir.DenseI64ArrayAttr(op.attributes["permutation"])) == [1, 0])


def splat_attr(value, op_name: str = "arith.constant", broadcast: bool = False):
    """The scalar attribute constant `value` holds, else None: the `value` attribute of the
    `op_name` op defining it (the element of a dense splat; None for any other dense
    attribute), or with `broadcast` that of a `vector.broadcast` of such a constant.

        splat_attr(v)                  # arith.constant dense<2.0> : vector<8xf32> -> 2.0 : f32
        splat_attr(v, "mirax.constant")
    """
    op = defining_op(value)
    if op is not None and broadcast and op.name == "vector.broadcast":
        return splat_attr(op.operands[0], op_name)
    if op is None or op.name != op_name:
        return None
    try:
        a = op.attributes["value"]
    except TypeError:  # a complex dense attribute: the bindings cannot wrap it
        return None
    if not isa(ir.DenseElementsAttr, a):
        return a
    dense = ir.DenseElementsAttr(a)
    return dense.get_splat_value() if dense.is_splat else None


def one_dim_kernels(module):
    """The outlined `gpu.func` kernels of a one-dimensional workgroup, with its x size:
    [(func, threads)] (the row kernels' shape: no two threads share an x id)."""
    out = []
    for func in walk_ops(module, lambda n: n == "gpu.func"):
        if "known_block_size" in func.attributes:
            block = list(ir.DenseI32ArrayAttr(func.attributes["known_block_size"]))
            if block[1] == 1 and block[2] == 1:
                out.append((func, block[0]))
    return out


def only_loaded_and_stored(buffer):
    """Whether every use of memref `buffer` is a load, a store into it or its dealloc (no
    view of it, no copy, no call: all its accesses are visible as loads and stores)."""
    for use in buffer.uses:
        op = user_op(use)
        if op.name not in ("memref.load", "memref.store", "memref.dealloc") \
                or (op.name == "memref.store" and op.operands[0] == buffer):
            return False
    return True


# Vulkan's storage classes as memref memory spaces (SPIR-V conversion's numbering)
WORKGROUP, PRIVATE = 3, 6


def private_memref_type(shape, element_type):
    """A memref type in PRIVATE space (a SPIR-V Function variable: registers once the
    driver's compiler promotes it)."""
    return ir.MemRefType.get(shape, element_type, memory_space=ir.Attribute.parse(f"{PRIVATE} : i64"))


def memory_space(memref_type):
    """A memref type's memory space as an integer (3 workgroup, 6 private), or None."""
    ms = ir.MemRefType(memref_type).memory_space
    return None if ms is None else int(str(ms).split(":")[0])


def _add_takes_name(pm):
    return True


def walk_ops(root, keep):
    """The ops nested in `root` (not `root` itself), in program order, whose name
    satisfies `keep(name)`.

    MLIR's own walk hands over plain `ir.Operation`s: iterating `block.operations` would
    wrap each op in its dialect's OpView class, importing `mlir.dialects.<name>` on first
    sight (`llvm`: ~18 ms; `linalg`: ~40 ms), a cost a first compile paid in every pass
    that looked at ops of a new dialect.

    The walk runs in C where lowering/native_walk.py's library loaded (a Python callback
    an op cost ~0.75 us; `keep` is then asked once per distinct name, so it must be a
    function of the name alone)."""
    root = getattr(root, "operation", root)
    found = native_walk.ops(root, keep)
    if found is not None:
        return found
    out = []
    failed = []

    def visit(op):
        if op == root:
            return _ADVANCE
        try:
            if keep(op.name):
                out.append(op)
        except BaseException as err:  # noqa: BLE001 - re-raised as is below
            failed.append(err)
            return _INTERRUPT
        return _ADVANCE

    root.walk(visit, ir.WalkOrder.PRE_ORDER)
    if failed:
        raise failed[0]
    return out


_ADVANCE, _INTERRUPT, _SKIP = ir.WalkResult.ADVANCE, ir.WalkResult.INTERRUPT, ir.WalkResult.SKIP


def count_ops(root) -> int:
    """How many ops are nested in `root` (not counting itself)."""
    root = getattr(root, "operation", root)
    n = native_walk.count(root)
    return n if n is not None else len(walk_ops(root, lambda name: True))


def distinct_names(root) -> tuple:
    """The distinct names of the ops nested in `root`, in the order a pre-order walk first
    meets them (a cheap signature of a loop nest: the walk in C makes no op objects)."""
    root = getattr(root, "operation", root)
    names = native_walk.names(root)
    if names is None:
        names = list(dict.fromkeys(op.name for op in walk_ops(root, lambda name: True)))
    return tuple(names)


def body_ops(op):
    """The ops of `op`'s single-block body, in order, as plain `ir.Operation`s
    (`block.operations` wraps each in its OpView, importing its dialect's package:
    `mlir.dialects.affine` ~1.7 ms at a first compile's first `affine.apply`)."""
    op = getattr(op, "operation", op)
    out = []

    def visit(o):
        if o == op:
            return _ADVANCE
        out.append(o)
        return _SKIP  # (not into its regions: the body's own ops only)
    op.walk(visit, ir.WalkOrder.PRE_ORDER)
    return out


# ---- transform-dialect scripts ------------------------------------------------------------

def transform_script(lines) -> str:
    """A transform module whose `@__transform_main` (payload root `%root`) runs `lines`."""
    return ("module attributes {transform.with_named_sequence} {\n"
            "  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {\n    "
            + "\n    ".join(lines) + "\n    transform.yield\n  }\n}\n")


def restore(root, backup) -> None:
    """Replace the body of module `root` by the ops of `backup` (a clone taken earlier)."""
    body = root.regions[0].blocks[0]
    for op in list(body.operations):
        op.erase()
    for op in list(backup.regions[0].blocks[0].operations):
        body.append(op)


def run_transform(payload, script) -> None:
    """Run the entry sequence of transform module `script` (an ir.Module) on `payload`,
    without the interpreter's expensive checks (on by default: they re-check every
    handle's payload ops after each transform op, which made fusing a transformer step's
    row groups take ~2x as long as the fusion itself).

    The interpreter's native module is called directly: `mlir.dialects.transform.interpreter`
    imports the whole transform dialect package first (~4 ms of a fresh process's first
    compile, for op classes the text scripts never use)."""
    from mlir._mlir_libs import _mlirTransformInterpreter as interpreter
    options = interpreter.TransformOptions()
    options.expensive_checks = False
    # (the entry found by a walk, a plain ir.Operation: `script.body.operations[0]` would
    # wrap it in an OpView, importing that package all the same)
    entry = walk_ops(script, lambda n: n == "transform.named_sequence")[0]
    interpreter.apply_named_sequence(getattr(payload, "operation", payload), entry, script.operation, options)


def apply_transform(root, script: str, backup=None):
    """Apply a transform script to module `root`; on failure put `root` back as it was
    (or as `backup`, a clone taken before earlier rewrites) and return the error, else
    None. `backup` is consumed."""
    backup = backup if backup is not None else root.clone()
    try:
        run_transform(root, ir.Module.parse(script))
        return None
    except (ir.MLIRError, ValueError) as err:  # the interpreter raises ValueError
        restore(root, backup)
        return err
    finally:
        backup.erase()
