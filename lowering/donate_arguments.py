"""Buffer donation: results written into the buffers of arguments the caller gave up
(MLX's compile does it for arrays nothing else holds, `jax.jit(donate_argnums=...)` on
request). mirax's compile donates a step's captured state: the new parameters and
optimizer state are written over the old ones (mirax/compile.py, `_donors`).

Three passes, in the CPU pipeline's order:

`mirax-donate-arguments` (on tensors, after convert-mirax-to-linalg): an argument with
`{mirax.aliasing_output = J : i64}` (XLA's `tf.aliasing_output`) is to hold result J when
the function returns; return operand J becomes a `bufferization.materialize_in_destination`
into the argument, which is marked writable and `mirax.donated = J`.

    func.func @main(%arg0: tensor<4xf32> {mirax.aliasing_output = 0 : i64}) -> tensor<4xf32> {
      %0 = linalg.generic ... ins(%arg0 : ...) outs(%e : ...) ...
      return %0
  becomes
    func.func @main(%arg0: tensor<4xf32> {bufferization.writable = true, mirax.donated = 0 : i64}) -> ... {
      %0 = linalg.generic ... ins(%arg0 : ...) outs(%e : ...) ...
      %1 = bufferization.materialize_in_destination %0 in %arg0 : (...) -> tensor<4xf32>
      return %1

`eliminate-empty-tensors` then makes the argument the destination of the ops computing
the result, and one-shot-bufferize writes them into its buffer where nothing reads the
argument after they write it (else into a buffer of their own, copied in at the end:
correct, one copy more).

`mirax-sink-donated-writers` (after eliminate-empty-tensors): the ops computing a donated
result move after the last other reader of the argument. A traced step updates a weight
where its gradient is ready, before the backward pass has read the weight for the layer
below (`g @ W2.T`): there it could not be written in place. In an `scf.forall` (a
parallelized update) whose shared output starts as the argument, the body's slices of the
argument read the shared output instead (the same values: the body sees the outputs as
they were before the loop), so that bufferization sees each iteration read and write one
slice of one buffer.

`mirax-drop-donated-results` (after one-shot-bufferize): a result that is its donated
argument's buffer leaves the function's results (upstream `drop-equivalent-buffer-results`
does this for private functions only, with their callers): the caller finds it in the
buffer it passed.

matmul_epilogue.py leaves an update of a donated argument (W' = W - lr * dW into W) out
of the product's tiles: fused, the product's K slices accumulate in the destination and
its tiles read W through views bufferization does not match to the writes (it copied W
first); on its own the update is an elementwise loop, written in place.
"""
from __future__ import annotations

from mlir import ir

from .early_dealloc import _top as _top_of
from .pass_base import MiraxPass, PassError, defining_op, user_op, walk_ops

NAME = "mirax-donate-arguments"
ATTR = "mirax.aliasing_output"
DONATED = "mirax.donated"


def _int_arg_attrs(fn, name) -> dict:
    """{argument index: value} of `fn`'s integer argument attribute `name`."""
    if "arg_attrs" not in fn.attributes:
        return {}
    out = {}
    for i, d in enumerate(ir.ArrayAttr(fn.attributes["arg_attrs"])):
        d = ir.DictAttr(d)
        if name in d:
            out[i] = ir.IntegerAttr(d[name]).value
    return out


def donations(fn) -> dict:
    """{argument index: result index} from `fn`'s ATTR argument attributes."""
    return _int_arg_attrs(fn, ATTR)


def donated_arguments(fn) -> list:
    """(entry block argument, the result it holds) for each argument of `fn` that
    mirax-donate-arguments marked (DONATED)."""
    if not len(fn.regions[0].blocks):
        return []
    block = fn.regions[0].blocks[0]
    return [(block.arguments[i], j) for i, j in _int_arg_attrs(fn, DONATED).items()]


def _set_arg_attrs(fn, pairs):
    """Mark the donated arguments writable and DONATED (the result each holds) instead of
    ATTR."""
    old = list(ir.ArrayAttr(fn.attributes["arg_attrs"]))
    new = []
    for i, d in enumerate(old):
        entries = {n.name: n.attr for n in ir.DictAttr(d)}
        if i in pairs:
            entries.pop(ATTR, None)
            entries["bufferization.writable"] = ir.BoolAttr.get(True)
            entries[DONATED] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), pairs[i])
        new.append(ir.DictAttr.get(entries))
    fn.attributes["arg_attrs"] = ir.ArrayAttr.get(new)


def donate_arguments(module) -> int:
    """Rewrite each function's donated results (above); returns how many."""
    n = 0
    for fn in walk_ops(module, lambda name: name == "func.func"):
        pairs = donations(fn)
        if not pairs or not len(fn.regions[0].blocks):
            continue
        from mlir.dialects import bufferization  # (here: ~2 ms on a first compile that donates nothing)
        block = fn.regions[0].blocks[0]
        ret = walk_ops(fn, lambda name: name == "func.return")[-1]
        name = ir.StringAttr(fn.attributes["sym_name"]).value
        if len(set(pairs.values())) < len(pairs):
            raise PassError(fn, f"{NAME}: @{name}: two arguments hold the same result ({ATTR} {sorted(pairs.items())})")
        for i, j in sorted(pairs.items()):
            arg = block.arguments[i]
            if j >= len(ret.operands) or ret.operands[j].type != arg.type:
                raise PassError(fn, f"{NAME}: @{name}: argument {i} ({arg.type}) cannot hold result {j} "
                                f"({ret.operands[j].type if j < len(ret.operands) else 'there is none'})")
            with ir.InsertionPoint(ret), ret.location:
                m = bufferization.MaterializeInDestinationOp(arg.type, ret.operands[j], arg)
            ret.operands[j] = m.result
            n += 1
        _set_arg_attrs(fn, pairs)
    return n


# ---- before one-shot-bufferize: orders and reads that let the result be written in place --

_VIEWS = ("tensor.expand_shape", "tensor.collapse_shape", "tensor.extract_slice", "tensor.cast")


def _op(o):
    return getattr(o, "operation", o)


def _top(op, block):
    """The op of `block` that is or holds `op`, as an ir.Operation (hashable alike
    wherever it came from); None: it is not in `block`."""
    t = _top_of(op, block)
    return None if t is None else _op(t)


def _readers(value, block, skip):
    """The ops of `block` reading `value` or a view of it (reshapes and slices followed),
    other than those in `skip`."""
    out, todo = [], [value]
    while todo:
        v = todo.pop()
        for u in v.uses:
            user = user_op(u)
            top = _top(user, block)
            if top is None or top in skip:
                continue
            if user == top and user.name in _VIEWS:
                todo.append(user.results[0])
            else:
                out.append(top)
    return out


def _operand_ops(op, block):
    """The ops of `block` defining the values `op` and its nested ops read."""
    out = []
    for o in [op] + walk_ops(op, lambda name: True):
        for v in o.operands:
            d = defining_op(v)
            if d is not None and _op(d).block == block:
                out.append(_op(d))
    return out


def _writers(m, block):
    """The ops of `block` that compute materialize_in_destination `m`'s source and
    nothing else: the source's defining op (read by `m` alone) and, backwards, each op
    whose results only those ops read. Empty where the source is read elsewhere too."""
    src = defining_op(m.operands[0])
    if src is None or _op(src).block != block:
        return set()
    src = _op(src)
    if any(user_op(u) != m for r in src.results for u in r.uses):
        return set()
    chosen = {src}
    todo = _operand_ops(src, block)
    while todo:  # (an op is looked at again each time one of its readers is chosen)
        op = todo.pop()
        if op not in chosen and all(_top(user_op(u), block) in chosen for r in op.results for u in r.uses):
            chosen.add(op)
            todo += _operand_ops(op, block)
    return chosen


def _calls(op) -> bool:
    return op.name == "func.call" or bool(walk_ops(op, lambda name: name == "func.call"))


def sink_donated_writers(module) -> int:
    """Each donated result's computation (`_writers`) moves after the last other reader of
    its argument: a traced step updates a weight where its gradient is ready, before the
    backward pass has read the weight for the layer below (`g @ W2.T`); written in place
    there, the weight would be gone. (The ops read only values defined before them, so
    any later place in the block has them.) Also, in each `scf.forall` whose shared
    output starts as a donated argument, slices of the argument read in its body read
    the shared output instead (the same values there: the body sees the outputs as they
    were before the loop), and equal `affine.apply`s of its body become one: bufferization
    then sees each iteration read and write the same slice of one buffer."""
    n = 0
    for fn in walk_ops(module, lambda name: name == "func.func"):
        args = [a for a, _ in donated_arguments(fn)]
        if not args:
            continue
        block = fn.regions[0].blocks[0]
        ms = [o for o in walk_ops(fn, lambda name: name == "bufferization.materialize_in_destination")
              if o.block == block and o.operands[1] in args]
        for m in ms:
            writers = _writers(m, block)
            if not writers or any(_calls(w) for w in writers):  # (a call's effects keep their order)
                continue
            order = {o.operation: i for i, o in enumerate(block.operations)}
            readers = _readers(m.operands[1], block, writers | {m})
            if not readers:
                continue
            last = max(readers, key=lambda o: order[o])
            moved = sorted(writers, key=lambda o: order[o])
            if order[moved[0]] > order[last]:
                continue
            anchor = last
            for op in moved:
                if order[op] < order[last]:
                    op.move_after(anchor)
                    anchor = op
                    n += 1
        for loop in walk_ops(fn, lambda name: name == "scf.forall"):
            _read_through_shared_outs(loop, args)
    return n


def _read_through_shared_outs(loop, args):
    """In `loop` (an scf.forall), slices of a shared output's initial value `args` holds
    read the shared output instead (the body sees the outputs as they were before the
    loop: the same values); then equal `affine.apply`s and equal slices of the shared
    output in the body become one, so that an elementwise op reading and writing the
    slice has one value as input and output (bufferization writes such an op in place; two
    equal slices it treats as two views that may overlap, and copies one)."""
    body = loop.regions[0].blocks[0]
    n_outs = len(loop.results)
    outs = list(body.arguments)[-n_outs:] if n_outs else []
    inits = list(loop.operands)[-n_outs:] if n_outs else []
    shared = []
    for init, out in zip(inits, outs):
        if init not in args:
            continue
        shared.append(out)
        for u in list(init.uses):
            user = user_op(u)
            if user.name == "tensor.extract_slice" and u.operand_number == 0 and user.parent == loop:
                user.operands[0] = out
    if not shared:
        return
    seen = {}
    for op in [o.operation for o in body.operations]:
        if op.name == "affine.apply":
            key = (str(op.attributes["map"]), tuple(op.operands))
        elif op.name == "tensor.extract_slice" and op.operands[0] in shared:
            key = (tuple(op.operands), tuple((n, str(op.attributes[n])) for n in op.attributes), str(op.results[0].type))
        else:
            continue
        if key in seen:
            op.results[0].replace_all_uses_with(seen[key].results[0])
            op.erase()
        else:
            seen[key] = op


# ---- after one-shot-bufferize: the donated results leave the function's results --------

def drop_donated_results(module) -> int:
    """Each result that bufferization wrote into a donated argument (the
    materialize_in_destination made it that argument's buffer) leaves the function's
    results: the caller finds it in the buffer it passed. (Upstream
    `drop-equivalent-buffer-results` does this for private functions and their callers;
    @main is public and called from the runtime.) A donated result returned as anything
    but its argument is an error: the caller counts on every one leaving. Returns how
    many left."""
    n = 0
    for fn in walk_ops(module, lambda name: name == "func.func"):
        donated = donated_arguments(fn)
        if not donated:
            continue
        ret = walk_ops(fn, lambda name: name == "func.return")[-1]
        operands = list(ret.operands)
        gone = {}
        for arg, j in donated:
            v = operands[j] if j < len(operands) else None
            while v is not None and defining_op(v) is not None and defining_op(v).name == "memref.cast":
                v = defining_op(v).operands[0]
            if v != arg:
                raise PassError(fn, f"mirax-drop-donated-results: result {j} is not in the buffer of argument "
                                    f"{arg.arg_number} it was donated (bufferization returned {operands[j] if v is not None else 'nothing'})")
            gone[j] = arg
        keep = [j for j in range(len(operands)) if j not in gone]
        n += len(gone)
        with ir.InsertionPoint(ret), ret.location:
            ir.Operation.create("func.return", operands=[operands[j] for j in keep])
        ret.erase()
        ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
        fn.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get(list(ftype.inputs), [ftype.results[j] for j in keep]))
        if "res_attrs" in fn.attributes:
            old = list(ir.ArrayAttr(fn.attributes["res_attrs"]))
            fn.attributes["res_attrs"] = ir.ArrayAttr.get([old[j] for j in keep])
    return n


class MiraxDonateArguments(MiraxPass):
    name = NAME
    summary = "Write results into the arguments marked mirax.aliasing_output (buffer donation), on tensors"

    def run(self, module):
        donate_arguments(module)


class MiraxSinkDonatedWriters(MiraxPass):
    name = "mirax-sink-donated-writers"
    summary = "Move a donated result's computation after its argument's last reader (before one-shot-bufferize)"

    def run(self, module):
        sink_donated_writers(module)


class MiraxDropDonatedResults(MiraxPass):
    name = "mirax-drop-donated-results"
    summary = "Drop the results bufferized into donated arguments from the function's results"

    def run(self, module):
        drop_donated_results(module)
