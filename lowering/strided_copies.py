"""`mirax-strided-copies`: copies between strided memrefs as vectorized `linalg.copy` loops.

After bufferization, a `memref.copy` between strided memrefs (a matmul's padding copies,
the slice of a padded result copied to the out-param) would become a call of the runtime's
element-by-element `memrefCopy` in finalize-memref-to-llvm (5x slower). Here it becomes a
`linalg.copy` tiled along its contiguous last dimension and vectorized:

    memref.copy %a, %b : memref<100x250xf32, strided<[256, 1]>> to memref<100x250xf32>
  becomes
    scf.for %i ... { scf.for %j step 64 { vector.transfer_read / transfer_write } }  (+ a peeled rest)

Contiguous copies are left to finalize-memref-to-llvm (a memcpy).
"""
from __future__ import annotations

import warnings

from mlir import ir

from .pass_base import apply_transform, transform_script, walk_ops

NAME = "mirax-strided-copies"

COPY_MARK = "__mirax_vector_copy"


def _inner_stride_one(t) -> bool:
    try:
        strides, _ = t.get_strides_and_offset()
    except (AttributeError, ValueError):
        return False
    return t.rank >= 1 and strides[-1] == 1


def strided_copies_to_linalg(module) -> None:
    """After bufferization: `memref.copy` between strided memrefs (padding copies, the
    slice of a padded result copied to the out-param) becomes a `linalg.copy` tiled along
    its contiguous last dimension and vectorized (4 vectors of the host's f32 lanes a
    step, masked at the end). finalize-memref-to-llvm would make it a call of the
    runtime's element-by-element `memrefCopy` (5x slower), and LLVM leaves the scalar
    loops of convert-linalg-to-loops unvectorized: padding a 64x256x256 operand that way
    cost twice the matmul itself."""
    from mlir.dialects import linalg

    root = module.operation if hasattr(module, "operation") else module
    copies = walk_ops(root, lambda n: n == "memref.copy")
    marked = {}  # (rank, inner size) -> its index: the copies of one shape class share one
    # match (each match walks the module: one per copy grew with the square of the program)
    with root.context, ir.Location.unknown():
        for op in copies:
            src, dst = op.operands
            try:
                ts, td = ir.MemRefType(src.type), ir.MemRefType(dst.type)
            except ValueError:
                continue
            if not any(x in str(t) for t in (ts, td) for x in ("strided<", "affine_map")):
                continue  # contiguous: finalize-memref-to-llvm emits a memcpy
            with ir.InsertionPoint(op):
                # (on memrefs the builder returns the op's empty result list: its owner is the op)
                new = linalg.copy(src, outs=[dst]).owner
            op.erase()
            # (complex elements have no vector type: their copies stay scalar loops)
            if _inner_stride_one(ts) and _inner_stride_one(td) and ts.rank <= 4 \
                    and not isinstance(ts.element_type, ir.ComplexType):
                inner = ts.shape[-1] if not ir.ShapedType.is_dynamic_size(ts.shape[-1]) else None
                k = marked.setdefault((ts.rank, inner), len(marked))
                new.attributes[COPY_MARK] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), k)
        if marked:
            _vectorize_copies(root, list(marked))


def _vectorize_copies(root, copies) -> None:
    """Tile the copies marked with each class [(rank, inner size or None)] along their
    last dim by 4 host vectors (a shorter run whole) and vectorize the full tiles; a
    remainder is peeled off as a scalar loop (masked vectorization leaves `vector.mask`s
    the LLVM lowering rejects)."""
    from .host_cpu import host
    from .vectorize_transposes import vector_run
    lanes = host().f32_lanes
    body = []
    for i, (rank, inner) in enumerate(copies):
        # a short run (a repacked panel row of B, a head's 16 columns) in one step; else a
        # multiple of the lanes that divides it, or 4 vectors and a peeled remainder
        width = (vector_run(inner, lanes) if inner is not None else None) or 4 * lanes
        tiles = ", ".join(["1"] * (rank - 1) + [str(width)])
        body.append(f"%c{i} = transform.structured.match ops{{[\"linalg.copy\"]}} attributes{{{COPY_MARK} = {i} : i64}} "
                    f"in %root : (!transform.any_op) -> !transform.any_op")
        tile = (f"%t{i}, %l{i}:{rank} = transform.structured.tile_using_for {{}} tile_sizes [{tiles}] : "
                f"(!transform.any_op) -> (!transform.any_op{', !transform.any_op' * rank})")  # (of a handle)
        if inner is not None and inner % width == 0:  # (tiling and vectorizing take all the class at once)
            body += [tile.format(f"%c{i}"), f"transform.structured.vectorize %t{i} : !transform.any_op"]
            continue
        # (a loop peel takes exactly one loop: each copy of the class in turn)
        body += [f"transform.foreach %c{i} : !transform.any_op {{",
                 f"  ^bb0(%x{i}: !transform.any_op):",
                 "  " + tile.format(f"%x{i}"),
                 f"  %f{i} = transform.cast %l{i}#{rank - 1} : !transform.any_op to !transform.op<\"scf.for\">",
                 f"  %main{i}, %rest{i} = transform.loop.peel %f{i} : (!transform.op<\"scf.for\">) -> "
                 f"(!transform.any_op, !transform.any_op)",
                 f"  transform.apply_patterns to %main{i} {{ transform.apply_patterns.canonicalization }} "
                 f": !transform.any_op",
                 f"  %v{i} = transform.structured.match ops{{[\"linalg.copy\"]}} in %main{i} : "
                 f"(!transform.any_op) -> !transform.any_op",
                 f"  transform.structured.vectorize %v{i} : !transform.any_op",
                 "}"]
    err = apply_transform(root, transform_script(body))
    if err is not None:  # the copies stay scalar loops: slower, still right
        warnings.warn(f"strided_copies_to_linalg: copies not vectorized: {err}")
    for op in walk_ops(root, lambda n: n == "linalg.copy"):
        if COPY_MARK in op.attributes:
            del op.attributes[COPY_MARK]
