"""`mirax-outline-kernels`: split a very large function into private functions of
bounded size, called in order, so that LLVM optimizes many small functions instead of
one huge one.

LLVM's -O2 pipeline grows faster than linearly with a function's size: a compiled
chain of 10,000 elementwise ops spent 14 s in LLVM as one function (0.3 s at -O0).
After bufferization each kernel is a loop nest on memrefs; runs of consecutive
top-level ops holding about `chunk-ops` nested ops move into `@<f>_part<i>`, marked
`noinline` (LLVM would inline a private function called once straight back). Values a
part reads become its arguments (constants are cloned in, so they stay constants);
values later ops read become its results.

    func.func @main(%a: memref<8xf32>, %out: memref<8xf32>) {
      scf.for ... { big loop nest 1 }   ->   call @main_part0(%a, %t)
      scf.for ... { big loop nest 2 }   ->   call @main_part1(%t, %out)

Functions below `min-ops` nested ops are left alone (one call costs next to nothing,
but small kernels gain nothing either).
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import func

from .pass_base import MiraxPass, defining_op, user_op

NAME = "mirax-outline-kernels"
MIN_OPS = 4000
CHUNK_OPS = 500


def _nested(ops):
    """`ops` and every op nested in them, in program order."""
    for op in ops:
        yield op
        for region in op.regions:
            for block in region.blocks:
                yield from _nested(child.operation for child in block.operations)


def _count(op) -> int:
    return sum(1 for _ in _nested([op]))


def _defined_inside(ops):
    """Values defined by `ops` or anything nested in them (results and block arguments)."""
    out = set()
    for op in _nested(ops):
        out.update(op.results)
        for region in op.regions:
            for block in region.blocks:
                out.update(block.arguments)
    return out


def _enclosing_func(op):
    while op is not None and op.name != "func.func":
        op = op.parent
    return op


def _outline(fn, chunk, name, after):
    """Move `chunk` (consecutive top-level ops of `fn`) into a new private function `name`,
    placed after the op `after`; returns it."""
    inside = _defined_inside(chunk)
    captured, consts = [], []
    seen = set()
    for v in (v for op in _nested(chunk) for v in op.operands):
        if v in inside or v in seen:
            continue
        seen.add(v)
        o = defining_op(v)
        if o is not None and o.name == "arith.constant":
            consts.append((v, o))
        else:
            captured.append(v)
    chunk_set = set(chunk)
    escaping = []
    for op in chunk:
        for r in op.results:
            if any(_top(user_op(u), fn) not in chunk_set for u in r.uses):
                escaping.append(r)
    module_block = fn.parent.regions[0].blocks[0]
    ftype = ir.FunctionType.get([v.type for v in captured], [v.type for v in escaping])
    with ir.InsertionPoint(module_block):
        new = func.FuncOp(name, ftype, visibility="private")
    new.operation.move_after(after)
    new.attributes["passthrough"] = ir.ArrayAttr.get([ir.StringAttr.get("noinline")])
    entry = new.add_entry_block()
    with ir.InsertionPoint(entry):
        ret = func.ReturnOp(escaping)
    mapping = {v: a for v, a in zip(captured, entry.arguments)}
    for v, o in consts:
        c = o.clone(ir.InsertionPoint.at_block_begin(entry))
        mapping[v] = c.results[0]
    with ir.InsertionPoint(chunk[0]):
        call = func.CallOp([v.type for v in escaping], ir.FlatSymbolRefAttr.get(name), captured)
    for op in chunk:
        op.move_before(ret)
    # uses inside the part read its arguments; uses outside read the call's results
    for v, new_v in mapping.items():
        for use in list(v.uses):
            if _enclosing_func(user_op(use)) == new.operation:
                user_op(use).operands[use.operand_number] = new_v
    for r, new_r in zip(escaping, call.results):
        for use in list(r.uses):
            if _enclosing_func(user_op(use)) != new.operation:
                user_op(use).operands[use.operand_number] = new_r
    return new.operation


def _top(op, fn):
    """The top-level op of `fn` that contains `op`."""
    while op.parent is not None and op.parent != fn:
        op = op.parent
    return op


def outline_kernels(module, min_ops=MIN_OPS, chunk_ops=CHUNK_OPS):
    with module.context, ir.Location.unknown():
        funcs = [o.operation for o in module.regions[0].blocks[0].operations if o.operation.name == "func.func"]
        for fn in funcs:
            if not fn.regions[0].blocks or _count(fn) < min_ops:
                continue
            body = [o.operation for o in fn.regions[0].blocks[0].operations]
            chunks, cur, size = [], [], 0
            for op in body[:-1]:  # not the return
                if op.name == "arith.constant":
                    continue
                cur.append(op)
                size += _count(op)
                if size >= chunk_ops:
                    chunks.append(cur)
                    cur, size = [], 0
            if cur:
                chunks.append(cur)
            if len(chunks) < 2:
                continue
            base = ir.StringAttr(fn.attributes["sym_name"]).value
            after = fn
            for i, chunk in enumerate(chunks):
                after = _outline(fn, chunk, f"{base}_part{i}", after)


class MiraxOutlineKernels(MiraxPass):
    name = NAME
    summary = "Split very large functions into noinline private parts of bounded size (LLVM time)"
    options = {"min-ops": (MIN_OPS, "functions with fewer nested ops stay whole"),
               "chunk-ops": (CHUNK_OPS, "about this many nested ops per part")}

    def run(self, module):
        outline_kernels(module, int(self.opts["min-ops"]), int(self.opts["chunk-ops"]))
