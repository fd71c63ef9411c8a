"""Scratch functions: a group of ops scheduled by transform scripts in a function of its
own, then moved back.

A transform script's cost follows the function around its targets, not the targets:
matching walks the payload, `fuse_into_containing_op` verifies and numbers the whole
function it works in, CSE and canonicalization run over all of it. So a pass that
schedules many groups of a large function (a network's row groups: `mirax-fuse-reductions`;
its GPU kernels: `mirax-gpu-map`) schedules each in a scratch copy of its ops, and the
pass's cost grows with the program instead of (groups x program):

    s = Scratch([producer, root])      # copies, in a new module's function
    run_transform(s.module, script)     # the script sees only the group
    s.put_back()                        # the scheduled ops where the root stood
"""
from __future__ import annotations

from mlir import ir

from .pass_base import block_position, clone_mapped, defining_op, inline_body, op_id, outside_values, relocate, user_op


class Scratch:
    """A copy of a group's ops (`ops`, of one block, in block order: the root last) in a
    function of its own: `module` is the transform scripts' payload, `put_back` moves the
    scheduled ops to where the root stood.

    The function takes the values the ops read from elsewhere as arguments (constants
    and static `tensor.empty`s are copied in: fusing a fill of an empty tensor must see
    it; `pass_base.outside_values`) and returns the group's results that ops after the
    root read (the root's, and a producer's that a later op reads: fused, the row loop
    yields its rows). A producer that an op before the root reads keeps its original
    there."""

    def __init__(self, ops):
        from mlir.dialects import func
        members = {op_id(op): k for k, op in enumerate(ops)}
        self.ops, self.root = ops, ops[-1]
        copies, self.args = outside_values(ops)
        self.returned = []
        for op in ops:
            for r in op.results:
                outside = [u for u in map(user_op, r.uses) if block_position(u, members) is None]
                if outside and all(not _top_in_block(u, self.root).is_before_in_block(self.root)
                                   for u in outside):
                    self.returned.append(r)
        self.module = ir.Module.create()
        with ir.InsertionPoint(self.module.body):
            f = func.FuncOp("mirax_scratch", ([v.type for v in self.args], [r.type for r in self.returned]))
        self.entry = f.add_entry_block()
        mapping = dict(zip(self.args, self.entry.arguments))
        ip = ir.InsertionPoint(self.entry)
        for v in copies:
            clone_mapped(defining_op(v), mapping, ip)
        for op in ops:
            clone_mapped(op, mapping, ip)
        with ip:
            func.ReturnOp([mapping[r] for r in self.returned])

    def keep(self):
        """A copy of the scheduled function (before `put_back` moves its ops out)."""
        holder = ir.Module.create()
        self.entry.owner.operation.clone(ir.InsertionPoint(holder.body))
        return holder

    def reuse(self, kept):
        """Take the schedule `kept` (`keep`) of an identical group: its body in place of
        this one's, located at this group's root (not at the other group's lines)."""
        for op in reversed(list(self.entry.operations)):
            op.operation.erase()
        src = kept.body.operations[0].operation.regions[0].blocks[0]
        mapping = dict(zip(src.arguments, self.entry.arguments))
        ip = ir.InsertionPoint(self.entry)
        for op in src.operations:
            clone_mapped(op.operation, mapping, ip)
        relocate(self.entry.owner.operation, self.root.location)

    def put_back(self):
        """Move the scheduled ops before the original root, hand the returned values to
        their readers and erase the originals left without readers."""
        inline_body(self.entry, self.args, self.root, self.returned)
        for op in reversed(self.ops):
            if all(next(iter(r.uses), None) is None for r in op.results):
                op.erase()


def _top_in_block(op, anchor):
    """`op` or its ancestor in the block of `anchor`."""
    blk = anchor.block
    while op is not None and op.block != blk:
        op = op.parent
    return op
