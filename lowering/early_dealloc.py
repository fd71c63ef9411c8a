"""`mirax-early-dealloc`: free each buffer right after its last use, not at the end of
its block.

Upstream's ownership-based `buffer-deallocation-pipeline` puts every `memref.dealloc` at
the end of the block that allocated the buffer, so in a compiled function every
intermediate lives until the function returns: its peak memory is the sum of all its
temporaries (a gradient holds every forward activation, and a checkpoint saves nothing).
This pass moves each `memref.dealloc %a` of a `memref.alloc` of the same block to just
after the last op of the block that uses `%a` or a view of it (subview, cast, reshape,
...), uses nested in an op's regions counting as uses by that op:

    %a = memref.alloc() : memref<64xf32>          %a = memref.alloc() : memref<64xf32>
    linalg.map ... outs(%a)                       linalg.map ... outs(%a)
    linalg.map ins(%a) outs(%out)          ->     linalg.map ins(%a) outs(%out)
    %b = memref.alloc() : memref<64xf32>          memref.dealloc %a
    ...                                           %b = memref.alloc() : memref<64xf32>
    memref.dealloc %a                             ...

A buffer that reaches anything it cannot follow (a terminator, a `bufferization` op, an
op of an unknown dialect) keeps its dealloc where it was.
"""
from __future__ import annotations

from .pass_base import MiraxPass, defining_op, isa, user_op, walk_ops

NAME = "mirax-early-dealloc"

# users that may make a buffer reachable where this pass cannot follow it
_OPAQUE_PREFIXES = ("bufferization.", "llvm.", "func.return", "cf.", "scf.yield", "scf.condition",
                    "scf.forall.in_parallel", "affine.yield", "omp.", "gpu.", "async.",
                    "memref.extract_aligned_pointer_as_index", "builtin.unrealized_conversion_cast")


def _memref_results(op):
    from mlir import ir
    return [r for r in op.results if isa(ir.MemRefType, r.type)]


def _top(op, block):
    """The op of `block` that is or contains `op` (None: `op` is not inside `block`)."""
    while op is not None:
        parent_block = op.block if hasattr(op, "block") else None
        if parent_block == block:
            return op
        op = op.parent
    return None


def _last_user(alloc, dealloc, block, index):
    """The op of `block` after which `alloc` (and its views) is no longer used, or None
    when a use cannot be followed."""
    last, last_pos = alloc, index[alloc]
    work, seen = [alloc.results[0]], set()
    while work:
        v = work.pop()
        if v in seen:
            continue
        seen.add(v)
        for use in v.uses:
            u = user_op(use)
            if u == dealloc:
                continue
            if u.name.startswith(_OPAQUE_PREFIXES):
                return None
            top = _top(u, block)
            if top is None or top not in index:
                return None
            if index[top] > last_pos:
                last, last_pos = top, index[top]
            work.extend(_memref_results(u))  # a view, a cast: the same buffer
    return last


def _block_deallocs(block, ops):
    index = {op: i for i, op in enumerate(ops)}
    moved = 0
    for op in ops:
        if op.name != "memref.dealloc":
            continue
        alloc = defining_op(op.operands[0])
        if alloc is None or alloc.name != "memref.alloc" or alloc not in index:
            continue
        last = _last_user(alloc, op, block, index)
        if last is None or index[last] + 1 >= index[op]:
            continue
        op.move_after(last)
        moved += 1
    return moved


def _blocks(root):
    """{block: its ops in order} for every block nested in `root`, from MLIR's walk:
    plain ir.Operations (`block.operations` wraps each op in its dialect's OpView,
    importing `mlir.dialects.llvm` at the first llvm op: ~40 ms of a first compile)."""
    blocks = {}
    for op in walk_ops(root, lambda name: True):
        blocks.setdefault(op.block, []).append(op)
    return blocks


def early_dealloc(module) -> int:
    """Move the deallocs of every block of `module` up to their buffers' last uses;
    returns how many moved."""
    return sum(_block_deallocs(b, ops) for b, ops in _blocks(module).items())


class MiraxEarlyDealloc(MiraxPass):
    name = NAME
    summary = "Move each memref.dealloc of a local buffer to just after the buffer's last use"

    def run(self, module):
        early_dealloc(module)
