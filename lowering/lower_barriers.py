"""`mirax-lower-barriers`: every `mirax.optimization_barrier` becomes its operand.

The pipelines run it just before bufferization, after the last CSE on tensors: until then
the barrier keeps a checkpoint's recomputation apart from the forward values (see
dialect/barrier.py); bufferization then gives the recomputed values buffers of their own,
and the forward ones are freed after their last forward use.

    %b = "mirax.optimization_barrier"(%x) : (tensor<8x4xf32>) -> tensor<8x4xf32>
    %y = linalg.matmul ins(%b, %w : ...) ...
  becomes
    %y = linalg.matmul ins(%x, %w : ...) ...
"""
from __future__ import annotations

from .pass_base import MiraxPass, walk_ops

NAME = "mirax-lower-barriers"
OP = "mirax.optimization_barrier"


def lower_barriers(module) -> int:
    """Replace the barriers nested in `module` by their operands; returns how many."""
    ops = walk_ops(module, lambda n: n == OP)
    for op in ops:
        op.results[0].replace_all_uses_with(op.operands[0])
        op.erase()
    return len(ops)


class MiraxLowerBarriers(MiraxPass):
    name = NAME
    summary = "Replace each mirax.optimization_barrier by its operand (just before bufferization)"

    def run(self, module):
        lower_barriers(module)
