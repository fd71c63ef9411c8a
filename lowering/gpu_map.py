"""`mirax-gpu-map`: give every linalg op of a function a GPU mapping strategy, chosen per
kernel, and tile it into `scf.forall`s mapped to GPU blocks and threads.

Runs on fused linalg on tensors (after `mirax-fuse`). Each top-level op, last first,
becomes the root of one kernel:

    matmul       A and B tiles staged in workgroup memory (32x32 block of C, K step 16,
                 16x16 threads, each owning a 2x2 block of C); shapes that do not divide
                 the tile take the `parallel` strategy (one thread per output, serial K)
    row          a reduction over trailing dims, or an all-parallel op that reads such a
                 reduction (softmax's scaling, layer norm's scale): one workgroup per
                 row, of 256 threads (fewer for short rows: the row rounded up to a power
                 of two, at least the device's subgroup size); the reductions and elementwise producers of the row
                 are fused into the kernel, each reduction split over the threads with
                 its partial results in workgroup memory (address space 3) and barriers
                 between the steps; elementwise producers are recomputed where they are
                 read, so no row is ever materialized
    parallel     everything else (elementwise, broadcast, transpose, fill, gather, copy;
                 reductions over leading dims and convolutions keep their reduction loop
                 per thread): blocks of up to 256 threads over the innermost dims, the
                 grid over the outer ones, each dim of the grid within the device's limit

The tiling is a transform-dialect script generated per kernel (`kernel_script`), applied
to a scratch copy of the kernel's ops (`scratch.Scratch`: the script's cost follows the
kernel, not the function), then the function is canonicalized once (`CLEANUP`); the
block foralls are tagged `mirax.gpu_kernel = i` and carry their workgroup size, which
`mirax-gpu-launch` (after bufferization) turns into `gpu.launch`es.

    %r = scf.forall (%i) in (4) {              // one block per row
      scf.forall (%t) in (256) { partial max } {mapping = [#gpu.thread<x>]}
      ... } {mapping = [#gpu.block<linear_dim_0>], mirax.gpu_kernel = 0}
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from mlir import ir

from .pass_base import (MiraxPass, PassError, defining_op, inline_body, isa, iterator_kinds, iterator_types_attr,
                        op_id, run_transform, transform_script, user_op)
from .scratch import Scratch

NAME = "mirax-gpu-map"
ROOT = "mirax.gpu_root"      # tags the ops a script handles: root / fused producer
KERNEL = "mirax.gpu_kernel"  # tags a block forall: the kernel index
BLOCK = "mirax.gpu_block"    # the workgroup size of a tagged forall, [x, y, z]

THREADS = 256      # threads per workgroup (lavapipe and every Vulkan 1.1 device allow 256)
MAX_GRID = 65535   # Vulkan's guaranteed maxComputeWorkGroupCount per dimension
MM_TILE = (32, 32, 16)  # matmul block tile of C (M, N) and the K step staged per iteration
MM_THREADS = (16, 16)
SUBGROUP = 32  # a row workgroup's fewest threads unless the device reports its subgroup size
MM_PAD_MIN_WORK = 1 << 20  # m*n*k from which a matmul is padded to the tiles (fewer: one thread per output)
# buffers one kernel may bind unless the device says (Metal's argument table holds 31;
# Vulkan devices report maxPerStageDescriptorStorageBuffers: lavapipe 32)
MAX_BUFFERS = 31


def _is_linalg(op):
    return op.name.startswith("linalg.") and op.name != "linalg.yield" and op.name != "linalg.index"


def _iterators(op):
    """The iterator types of a structured op as 'parallel'/'reduction' strings (named ops
    without the attribute too)."""
    if "iterator_types" in op.attributes:
        return iterator_kinds(op)
    if op.name in ("linalg.matmul",):
        return ["parallel", "parallel", "reduction"]
    if op.name == "linalg.batch_matmul":
        return ["parallel"] * 3 + ["reduction"]
    if op.name.startswith("linalg.conv") or op.name.startswith("linalg.depthwise") or "pooling" in op.name:
        return None  # named ops with reductions we do not inspect
    rank = ir.ShapedType(op.results[0].type).rank if len(op.results) else 0
    return ["parallel"] * rank


def _result_maps(op):
    if "indexing_maps" not in op.attributes:
        return None
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    return maps


def _static_shape(value):
    t = ir.ShapedType(value.type)
    return list(t.shape) if t.has_static_shape else None


def _loop_ranges(op):
    """Static iteration-space extents of a generic (from its operands), or None."""
    maps = _result_maps(op)
    its = _iterators(op)
    if maps is None or its is None:
        return None
    ranges = [None] * len(its)
    for v, m in zip(list(op.operands), maps):
        shape = _static_shape(v)
        if shape is None:
            return None
        for r, e in zip(m.results, shape):
            s = str(r)
            if s.startswith("d") and s[1:].isdigit():
                ranges[int(s[1:])] = e
    return ranges if all(r is not None for r in ranges) else None


def _is_row_reduction(op):
    """A generic whose reduction dims all come after its parallel dims, writing one
    value per row (its output map is the identity on the parallel dims)."""
    if op.name != "linalg.generic":
        return False
    its = _iterators(op)
    if not its or "reduction" not in its:
        return False
    k = its.index("reduction")
    if "parallel" in its[k:]:
        return False
    maps = _result_maps(op)
    n_in = len(op.operands) - len(op.results)
    for m in maps[n_in:]:
        if [str(r) for r in m.results] != [f"d{i}" for i in range(k)]:
            return False
    ranges = _loop_ranges(op)
    # one reduction dim, split over the threads; upstream tiling asserts on more, and on a
    # split of a single element; and it must recognise the combiner
    return ranges is not None and its.count("reduction") == 1 and ranges[-1] >= 2 and _plain_combiner(op)


def _plain_combiner(op):
    """Whether each yielded value is computed by one op straight from its accumulator
    (`%r = arith.addf %x, %acc`): the form upstream's reduction splitting can analyse
    (a bool max through i8/i1 casts, or argmax's selects, it cannot)."""
    block = op.regions[0].blocks[0]
    ops = [o.operation for o in block.operations]
    n_in = len(op.operands) - len(op.results)
    outs = list(block.arguments)[n_in:]
    for v, acc in zip(ops[-1].operands, outs):
        owner = defining_op(v)
        if owner is None or owner.name == "arith.select" or not any(x == acc for x in owner.operands):
            return False
    return True


@dataclass
class Kernel:
    index: int
    strategy: str               # matmul | row | parallel
    root: object                # the op tiled into blocks
    fused: list = field(default_factory=list)  # producers fused into the block forall (topological order)
    block: tuple = (1, 1, 1)    # workgroup size
    rows: int = 0               # row strategy: how many leading dims are rows
    tiles: list = field(default_factory=list)  # block tile sizes of the root
    threads: list = field(default_factory=list)  # thread-level num_threads of the root


def plan(func_op, threads=THREADS, subgroup=SUBGROUP, max_buffers=MAX_BUFFERS) -> list:
    """The kernels of one function: strategies, roots and fused producers."""
    body = func_op.regions[0].blocks[0]
    ops = [o.operation for o in body.operations]
    claimed = set()
    kernels = []
    for op in reversed(ops):
        if not _is_linalg(op) or op_id(op) in claimed:
            continue
        if not len(op.results):
            continue  # linalg on memrefs: handled after bufferization
        k = _plan_root(op, len(kernels), claimed, threads, subgroup, max_buffers)
        if k is None:
            continue
        k.fused = _private_to_kernel(k.root, k.fused)  # a fill shared by two matmuls: one each
        claimed.add(op_id(op))
        for p in k.fused:
            claimed.add(op_id(p))
        kernels.append(k)
    return kernels


def _negative_maps(op):
    """Indexing maps with a negative coefficient (an operand read in reverse): upstream
    tiling asserts on them (the process would abort), so they are refused first. mirax's
    own lowerings avoid them (conv flips its kernel with a gather)."""
    maps = _result_maps(op) or []
    return any("* -" in str(r) or str(r).startswith("-") or "+ -" in str(r) or " - d" in str(r)
               for m in maps for r in m.results)


def _plan_root(op, index, claimed, threads, subgroup=SUBGROUP, max_buffers=MAX_BUFFERS):
    if _negative_maps(op):
        raise PassError(op, f"'{op.name}' reads an operand in reverse (a negative coefficient in its "
                            "indexing maps); the GPU mapping cannot tile it")
    shape = _static_shape(op.results[0])
    if shape is None:
        return None
    if op.name in ("linalg.matmul", "linalg.batch_matmul"):
        k = _plan_matmul(op, index, claimed)
        if k is not None:
            return k
    its = _iterators(op)
    # one workgroup per row needs the rows on a grid of at most three dims; more row dims
    # (a grouped convolution's batch, rows, groups, channels) reduce serially per thread
    if its is not None and "reduction" in its and _is_row_reduction(op) and 1 <= its.index("reduction") <= 3 \
            and len(op.results) == 1:
        # the row's result is written by one thread: a copy of the reduction is the root
        # and the reduction (private to each thread) is fused into it
        copy = _copy_after(op)
        claimed.add(op_id(copy))
        return _plan_row(copy, index, claimed, threads, its.index("reduction"), subgroup, max_buffers)
    if its is not None and "reduction" not in its and op.name in ("linalg.generic", "linalg.copy"):
        # an all-parallel op reading a row reduction of the same rows: one row kernel
        reds = _row_reductions_upstream(op, claimed)
        shape = _static_shape(op.results[0])
        reds = [r for r in reds if _row_shape(r) == shape[:len(_row_shape(r))]]  # over this op's rows
        if reds:
            rows = min(_iterators(r).index("reduction") for r in reds)
            if 1 <= rows <= 3 and rows < len(its):
                return _plan_row(op, index, claimed, threads, rows, subgroup, max_buffers)
    return _plan_parallel(op, index, threads)


def _copy_after(op):
    """Insert `linalg.copy` of `op`'s result after it and make every user read the copy."""
    from mlir.dialects import linalg, tensor
    r = op.results[0]
    users = [(user_op(u), u.operand_number) for u in r.uses]
    t = ir.RankedTensorType(r.type)
    with op.context, op.location, ir.InsertionPoint.after(op):
        empty = tensor.EmptyOp(t.shape, t.element_type)
        c = linalg.copy(r, outs=[empty.result])
    for u, i in users:
        u.operands[i] = c
    owner = c.owner
    return owner.operation if hasattr(owner, "operation") else owner


def _inputs(op):
    n_in = len(op.operands) - len(op.results)
    return list(op.operands)[:n_in]


def _row_reductions_upstream(op, claimed, depth=0):
    """Row reductions feeding `op` directly or through elementwise generics."""
    out = []
    for v in _inputs(op):
        p = defining_op(v)
        if p is None or not _is_linalg(p) or op_id(p) in claimed or depth > 8:
            continue
        if _is_row_reduction(p):
            out.append(p)
        elif p.name == "linalg.generic" and "reduction" not in (_iterators(p) or ["reduction"]):
            out.extend(_row_reductions_upstream(p, claimed, depth + 1))
    return out


def _row_shape(op):
    """The extents of a row reduction's rows (its parallel dims)."""
    return _loop_ranges(op)[:_iterators(op).index("reduction")]


def _collect_group(root, claimed, row_shape):
    """Producers of `root` to fuse into a row kernel: row reductions over the same rows
    (`row_shape`), elementwise generics and fills, transitively; in topological order.
    A reduction over other rows (x.sum(1) feeding a full sum) is a kernel of its own, and
    so is one the kernel would need more than its own row of: sort's ranks, read along
    the placing reduction (each of 300 workgroups computed all 300 ranks of its row).
    Which loop dims of each op one workgroup fixes (`_fixed_dims`) follows the maps from
    the root, whose row dims are fixed. (A depth-first walk with its own stack: a chain of
    thousands of ops is deeper than Python's recursion allows.)"""
    seen, order = set(), []
    fixed = {op_id(root): set(range(len(row_shape)))}

    def fused(p, fixed_p):
        if p.name == "linalg.fill" or (p.name == "linalg.generic" and "reduction" not in (_iterators(p) or ["reduction"])):
            return True
        return (_is_row_reduction(p) and _row_shape(p) == row_shape
                and set(range(len(row_shape))) <= fixed_p)  # one row of it per workgroup
    stack = [(root, iter(list(enumerate(root.operands))))]
    while stack:
        op, operands = stack[-1]
        for i, v in operands:
            p = defining_op(v)
            if p is None or op_id(p) in seen or op_id(p) in claimed or not _is_linalg(p):
                continue
            fixed_p = _fixed_dims(op, i, fixed.get(op_id(op), set()), p)
            if not fused(p, fixed_p):
                continue
            seen.add(op_id(p))
            fixed[op_id(p)] = fixed_p
            stack.append((p, iter(list(enumerate(p.operands)))))
            break
        else:  # every operand seen: the op after its producers
            stack.pop()
            if stack:
                order.append(op)
    return order


def _fixed_dims(op, i, fixed_op, p) -> set:
    """The loop dims of producer `p` that a workgroup fixes, given those of `op` (which
    reads p's result as its operand `i`): a result dim of p is fixed where op's map for
    the operand reads it by a fixed dim (or a constant); a loop dim of p where p's output
    map writes it to a fixed result dim."""
    maps, pmaps = _result_maps(op), _result_maps(p)
    rank = ir.ShapedType(op.operands[i].type).rank
    if maps is None:  # (named ops: identity maps)
        out_fixed = {j for j in range(rank) if j in fixed_op}
    else:
        out_fixed = set()
        for j, e in enumerate(maps[i].results):
            if isa(ir.AffineConstantExpr, e) or (isa(ir.AffineDimExpr, e) and ir.AffineDimExpr(e).position in fixed_op):
                out_fixed.add(j)
    if pmaps is None:
        return out_fixed
    return {ir.AffineDimExpr(e).position for j, e in enumerate(pmaps[-1].results)
            if j in out_fixed and isa(ir.AffineDimExpr, e)}


def _plan_row(op, index, claimed, threads, rows, subgroup=SUBGROUP, max_buffers=MAX_BUFFERS):
    shape = _static_shape(op.results[0]) if op.name != "linalg.generic" or "reduction" not in _iterators(op) \
        else (_loop_ranges(op) or [])
    if not shape:
        shape = _loop_ranges(op)
    n = len(_iterators(op))
    tiles = [1] * rows + [0] * (n - rows)
    grid = 1
    for d in shape[:rows]:
        grid *= d
    if grid > MAX_GRID ** 2:
        return None
    group = _within_buffers(op, _without_shared(op, _collect_group(op, claimed, list(shape[:rows]))), max_buffers)
    group = _one_use_each(op, _private_to_kernel(op, group))
    return Kernel(index, "row", op, group, (_row_threads([op] + group, threads, subgroup), 1, 1), rows=rows,
                  tiles=tiles)


def _row_threads(ops, threads, subgroup=SUBGROUP):
    """Threads of a row workgroup: enough for the longest innermost dim the row's ops split
    over them (a power of two, at least the device's `subgroup` size), at most `threads`. A 24-wide
    softmax row on 256 threads left 232 idle and had every thread combine 256 partials:
    a 1-layer transformer step's row kernels took 0.1-1 s each on lavapipe."""
    longest = 0
    for op in ops:
        if op.name == "linalg.fill":
            continue
        ranges = _loop_ranges(op) if "indexing_maps" in op.attributes else _static_shape(op.results[0])
        if not ranges:
            return threads  # dynamic extents: the whole workgroup
        longest = max(longest, ranges[-1])
    n = max(1, subgroup)
    while n < min(longest, threads):
        n *= 2
    return min(n, threads)


def _without_shared(root, group):
    """`group` less the producers that ops outside the kernel read too, and what they
    read in turn (fills and ops of scalars excepted: recomputed where needed): such a
    producer becomes a kernel of its own, written once, and this kernel reads it.
    Recomputed instead, a chain of row ops reaching back through a network's layers (the
    residual stream's layer norms, their gradients) was fused whole into every kernel
    that read it: each layer's kernel recomputed all the layers before it, and a 2-layer
    transformer step's largest row kernel held 226 ops."""
    inside = {op_id(root)} | {op_id(p) for p in group}
    changed = True
    while changed:
        changed = False
        for p in group:
            if op_id(p) not in inside:
                continue
            users = [op_id(user_op(u)) in inside for r in p.results for u in r.uses]
            if not any(users) or not (all(users) or _cheap(p)):
                inside.discard(op_id(p))
                changed = True
    return [p for p in group if op_id(p) in inside]


def _within_buffers(root, group, max_buffers):
    """`group` less its most upstream producers (each then a kernel of its own) until the
    kernel binds at most `max_buffers` buffers: the tensors it reads from outside and the
    root's results."""
    while group and len(_outside_tensors(root, group)) + len(root.results) > max_buffers:
        group = _without_shared(root, group[1:])
    return group


def _outside_tensors(root, group) -> set:
    inside = {op_id(root)} | {op_id(p) for p in group}
    return {v for o in [root] + group for v in _inputs(o)
            if isa(ir.ShapedType, v.type) and (defining_op(v) is None or op_id(defining_op(v)) not in inside)}


def _cheap(op) -> bool:
    """A fill, or an op reading scalars only (0-d tensors): recomputing it costs nothing."""
    return op.name == "linalg.fill" or all(
        not isa(ir.ShapedType, v.type) or ir.ShapedType(v.type).rank == 0 for v in _inputs(op))


def _private_to_kernel(root, group):
    """Producers fused into a kernel that are also used outside it are cloned: the clone
    serves the kernel, the original the outside users. (Fusing a producer with outside
    users would replace the kernel's forall by one that also returns the producer,
    invalidating every handle into it.) Consumers first, so a clone's own producers are
    seen with their new users."""
    inside = {op_id(root)} | {op_id(p) for p in group}
    out = list(group)
    for idx in range(len(out) - 1, -1, -1):
        p = out[idx]
        outside = [u for r in p.results for u in r.uses if op_id(user_op(u)) not in inside]
        if not outside:
            continue
        with p.context, p.location, ir.InsertionPoint.after(p):
            c = p.clone()
        inside.discard(op_id(p))
        inside.add(op_id(c))
        for r, rc in zip(p.results, c.results):
            for u in list(r.uses):
                o = user_op(u)
                if op_id(o) in inside and op_id(o) != op_id(c):
                    o.operands[u.operand_number] = rc
        out[idx] = c
    return out


def _one_use_each(root, group):
    """Clone every elementwise producer of the group once per use inside the group, so
    each copy is fused into (recomputed in) the one thread loop that reads it."""
    keys = {op_id(g) for g in group} | {op_id(root)}
    changed = True
    while changed:
        changed = False
        for p in group:
            if p.name != "linalg.generic" or _is_row_reduction(p):
                continue
            uses = [u for u in p.results[0].uses if op_id(user_op(u)) in keys]
            for use in uses[1:]:
                clone = p.clone(ir.InsertionPoint(p))
                u = user_op(use)
                u.operands[use.operand_number] = clone.results[0]
                keys.add(op_id(clone))
                changed = True
        if changed:
            group = _in_block_order(root, keys)
    return group


def _in_block_order(root, keys):
    return [o.operation for o in root.block.operations
            if op_id(o.operation) in keys and op_id(o.operation) != op_id(root)]


def _plan_matmul(op, index, claimed):
    out = _static_shape(op.results[0])
    a = _static_shape(op.operands[0])
    if out is None or a is None:
        return None
    tm, tn, tk = MM_TILE
    m, n = out[-2], out[-1]
    kdim = a[-1]
    if m % tm or n % tn or kdim % tk:
        return None
    fused = []
    init = defining_op(op.operands[2])
    if init is not None and init.name == "linalg.fill" and op_id(init) not in claimed:
        fused.append(init)
    batch = [1] if op.name == "linalg.batch_matmul" else []
    return Kernel(index, "matmul", op, fused, (MM_THREADS[1], MM_THREADS[0], 1),
                  tiles=batch + [tm, tn, 0])


def _plan_parallel(op, index, threads):
    its = _iterators(op)
    if its is None:  # named convolutions and the like: the output's dims are parallel
        its = ["parallel"] * ir.ShapedType(op.results[0].type).rank + ["reduction"]
    par = [i for i, t in enumerate(its) if t == "parallel"]
    ranges = _loop_ranges(op) if op.name == "linalg.generic" else None
    if ranges is None:
        out = _static_shape(op.results[0])
        if op.name in ("linalg.matmul", "linalg.batch_matmul"):
            ranges = out + [0]
        elif op.name.startswith("linalg.generic") or op.name in ("linalg.fill", "linalg.copy", "linalg.transpose",
                                                                  "linalg.map", "linalg.broadcast"):
            ranges = out
        else:
            ranges = out + [0] * (len(its) - len(out))
            par = list(range(len(out)))
    # parallel dims, innermost last: threads over the innermost ones, the grid over the rest
    pdims = [d for d in par if ranges[d] > 0]
    if not pdims:
        # no loops, or a 0-d result that is not one row (_full_reductions_as_one_row takes
        # those with one reduction dim; a forall cannot tile a reduction dim):
        # mirax-gpu-launch runs it on one thread
        return None
    tiles, thr, block = parallel_tiles(ranges, pdims, threads, len(its))
    return Kernel(index, "parallel", op, _init_fill(op, its, thr), block, tiles=tiles, threads=thr)


def _init_fill(op, its, thr):
    """[the fill of a reduction's init] when the kernel can write it itself: each thread
    fills the outputs it then reduces into (its num_threads on the output's dims read off
    the output map, in the loops' order), instead of a fill kernel of its own before the
    reduction's (30 of the 2-layer transformer step's 515 kernels). [] else."""
    if "reduction" not in its or op.name != "linalg.generic" or len(op.results) != 1:
        return []
    fill = defining_op(op.operands[len(op.operands) - 1])
    out_map = (_result_maps(op) or [None])[-1]
    if fill is None or fill.name != "linalg.fill" or out_map is None or not all(
            isa(ir.AffineDimExpr, e) for e in out_map.results):
        return []
    dims = [ir.AffineDimExpr(e).position for e in out_map.results]
    if dims != sorted(dims):  # (the fill's threads then map as the root's: each its own outputs)
        return []
    return [fill]


def _fill_threads(k: Kernel):
    """The root's num_threads on the dims of its output (for its fused init fill)."""
    out_map = _result_maps(k.root)[-1]
    return [k.threads[ir.AffineDimExpr(e).position] for e in out_map.results]


def parallel_tiles(ranges, pdims, threads, n):
    """How n loops with extents `ranges` spread over the GPU along their parallel dims
    `pdims` (innermost last): threads over up to three innermost dims of more than one
    element (powers of two, `threads` in all), the grid over at most three dims: the
    thread dims whose extent needs more than one block, then the outer dims with the
    most blocks; any other dim loops inside each thread. Each grid dim within MAX_GRID
    blocks. Returns (block tile sizes, threads per dim, workgroup size (x, y, z)); a 0
    tile leaves the dim untiled.

    Unit dims take no thread dim (a reduction's kept unit dims took all three: 4 threads
    for 256 outputs), and outer dims beyond the thread dims get the grid slots the
    thread dims do not need (a 9-d sum over 5 axes looped 87,380 times a thread)."""
    tiles, thr, block = [0] * n, [0] * n, []
    wide = [d for d in pdims if ranges[d] > 1] or pdims[-1:]
    left = threads
    for d in reversed(wide):
        if left <= 1 or len(block) == 3:
            break
        t = 1
        while t * 2 <= left and t < ranges[d]:
            t *= 2
        thr[d] = t
        block.append(t)
        left //= t
    blocks = {d: -(-ranges[d] // (thr[d] or 1)) for d in wide}
    grid = [d for d in wide if thr[d] and blocks[d] > 1]
    outer = sorted((d for d in wide if not thr[d] and blocks[d] > 1), key=lambda d: -blocks[d])
    grid += outer[:3 - len(grid)]
    if not grid:  # one block: its innermost dim is the grid's one (of one block)
        grid = [d for d in wide if thr[d]][-1:]
    for d in grid:
        tiles[d] = thr[d] or 1
        while -(-ranges[d] // tiles[d]) > MAX_GRID:  # give each block more work than the grid allows blocks
            tiles[d] *= 2
    return tiles, thr, tuple(block + [1] * (3 - len(block)))


# ---- the transform script ---------------------------------------------------------------

_ANY = "!transform.any_op"
_MAPPING_T = ["#gpu.thread<x>", "#gpu.thread<y>", "#gpu.thread<z>"]


def _block_mapping(n):
    """Linear block mappings for n grid dims, innermost fastest (x)."""
    return ", ".join(f"#gpu.block<linear_dim_{n - 1 - i}>" for i in range(n))


def _thread_mapping(thr):
    """Thread mappings for the non-zero entries of `thr`, innermost x."""
    dims = [i for i, t in enumerate(thr) if t]
    return ", ".join(_MAPPING_T[len(dims) - 1 - j] for j in range(len(dims)))


def _match(h, op_name, tag, within="%root"):
    return (f"{h} = transform.structured.match ops{{[\"{op_name}\"]}} attributes{{{ROOT} = {tag} : i64}} "
            f"in {within} : ({_ANY}) -> {_ANY}")


def _l(xs):
    return "[" + ", ".join(str(int(x)) for x in xs) + "]"


def kernel_script(k: Kernel, tags) -> list:
    """Transform ops tiling kernel `k`; `tags[op]` is the ROOT tag of each op."""
    i = k.index
    s = []
    r = f"%k{i}"
    s.append(_match(r, k.root.name, tags[op_id(k.root)]))
    if k.strategy == "parallel" and not k.tiles:
        # a 0-d result: one thread
        s.append(f"%t{i}, %f{i} = transform.structured.tile_using_forall {r} num_threads [] "
                 f"(mapping = []) : ({_ANY}) -> ({_ANY}, {_ANY})")
        return s
    tiles = k.tiles
    nblk = sum(1 for t in tiles if t)
    s.append(f"%t{i}, %f{i} = transform.structured.tile_using_forall {r} tile_sizes {_l(tiles)} "
             f"(mapping = [{_block_mapping(nblk)}]) : ({_ANY}) -> ({_ANY}, {_ANY})")
    s.append(f"%fn{i} = transform.structured.match ops{{[\"func.func\"]}} in %root : ({_ANY}) -> {_ANY}")
    s.insert(0, f"%kidx{i} = transform.param.constant {i} : i64 -> !transform.param<i64>")
    # producers fused into the block, consumers first (each used only inside the kernel:
    # _private_to_kernel), the block annotated once they are in
    fused = {}
    block = f"%f{i}"
    for j, p in reversed(list(enumerate(k.fused))):
        ph = f"%p{i}_{j}"
        s.append(_match(ph, p.name, tags[op_id(p)]))
        if _is_row_reduction(p):  # its readers in the block share one slice of it: fuse it once
            s.append(f"transform.apply_cse to %fn{i} : {_ANY}")
        s.append(f"{ph}f, %f{i}_{j} = transform.structured.fuse_into_containing_op {ph} into {block} "
                 f": ({_ANY}, {_ANY}) -> ({_ANY}, {_ANY})")
        block = f"%f{i}_{j}"
        fused[op_id(p)] = f"{ph}f"
    s.append(f"transform.annotate {block} \"{KERNEL}\" = %kidx{i} : {_ANY}, !transform.param<i64>")
    if k.strategy == "parallel":
        thr = k.threads
        for j, p in enumerate(k.fused):  # the init fill: each thread its own outputs, first
            ft = _fill_threads(k)
            s.append(f"%pf{i}_{j}, %pff{i}_{j} = transform.structured.tile_using_forall {fused[op_id(p)]} "
                     f"num_threads {_l(ft)} (mapping = [{_thread_mapping(ft)}]) : ({_ANY}) -> ({_ANY}, {_ANY})")
        s.append(f"%tt{i}, %tf{i} = transform.structured.tile_using_forall %t{i} num_threads {_l(thr)} "
                 f"(mapping = [{_thread_mapping(thr)}]) : ({_ANY}) -> ({_ANY}, {_ANY})")
    elif k.strategy == "matmul":
        batch = len(k.tiles) == 4
        kt = MM_TILE[2]
        s.append(f"%mk{i}, %mloop{i} = transform.structured.tile_using_for %t{i} tile_sizes "
                 f"{_l(([0] if batch else []) + [0, 0, kt])} : ({_ANY}) -> ({_ANY}, {_ANY})")
        s.append(f"%pa{i} = transform.get_operand %mk{i}[0] : ({_ANY}) -> !transform.any_value")
        s.append(f"%pb{i} = transform.get_operand %mk{i}[1] : ({_ANY}) -> !transform.any_value")
        s.append(f"%sa{i} = transform.structured.promote_tensor to 3 %pa{i} : !transform.any_value")
        s.append(f"%sb{i} = transform.structured.promote_tensor to 3 %pb{i} : !transform.any_value")
        ty, tx = MM_THREADS
        thr = ([0] if batch else []) + [ty, tx, 0]
        s.append(f"%mt{i}, %mtf{i} = transform.structured.tile_using_forall %mk{i} num_threads {_l(thr)} "
                 f"(mapping = [#gpu.thread<y>, #gpu.thread<x>]) : ({_ANY}) -> ({_ANY}, {_ANY})")
        for j, p in enumerate(k.fused):  # the zero fill of C: over the threads too
            s.append(f"%ff{i}_{j}, %fff{i}_{j} = transform.structured.tile_using_forall {fused[op_id(p)]} "
                     f"num_threads {_l(([0] if batch else []) + [ty, tx])} "
                     f"(mapping = [#gpu.thread<y>, #gpu.thread<x>]) : ({_ANY}) -> ({_ANY}, {_ANY})")
    elif k.strategy == "row":
        s.extend(_row_thread_script(k, fused))
    return s


def _row_thread_script(k: Kernel, fused):
    """Inside one row block: every reduction split over the threads (partials in
    workgroup memory), the root tiled over the threads, elementwise producers recomputed
    inside the thread loops that read them."""
    i = k.index
    s = []
    n_threads = k.block[0]

    def nthreads(op):
        its = _iterators(op)
        if op.name == "linalg.fill":
            return None
        # split the innermost dim of the op over the threads
        return [0] * (len(its) - 1) + [n_threads]

    root_thr = nthreads(k.root)
    s.append(f"%rt{i}, %rf{i} = transform.structured.tile_using_forall %t{i} num_threads {_l(root_thr)} "
             f"(mapping = [#gpu.thread<x>]) : ({_ANY}) -> ({_ANY}, {_ANY})")
    foralls = {op_id(k.root): [f"%rf{i}"]}
    for j, p in reversed(list(enumerate(k.fused))):
        h = fused[op_id(p)]
        users = [u for u in _users_in(p, [k.root] + k.fused)]
        if _is_row_reduction(p):
            thr = nthreads(p)
            nres = len(p.results)
            fills = [f"%rfill{i}_{j}_{q}" for q in range(nres)]
            combs = [f"%rcomb{i}_{j}_{q}" for q in range(nres)]
            outs_t = ", ".join([_ANY] * (2 * nres + 2))
            s.append(f"{', '.join(fills)}, %rsplit{i}_{j}, {', '.join(combs)}, %rforall{i}_{j} = "
                     f"transform.structured.tile_reduction_using_forall {h} by num_threads = {_l(thr)} "
                     f"mapping = [#gpu.thread<x>] : ({_ANY}) -> ({outs_t})")
            for q, fl in enumerate(fills):
                # the partials live in workgroup memory, written by the threads, read by all
                s.append(f"{fl}v = transform.get_result {fl}[0] : ({_ANY}) -> !transform.any_value")
                s.append(f"{fl}s = transform.structured.promote_tensor to 3 {fl}v : !transform.any_value")
                # each thread fills its own slot of the partials
                s.append(f"{fl}t, {fl}f = transform.structured.tile_using_forall {fl} "
                         f"num_threads {_l([0] * (len(thr) - 1) + [n_threads])} (mapping = [#gpu.thread<x>]) "
                         f": ({_ANY}) -> ({_ANY}, {_ANY})")
            foralls[op_id(p)] = [f"%rforall{i}_{j}"]
        elif p.name == "linalg.generic":
            # recompute in every thread loop that reads it
            outs = []
            for u in users:
                for fh in foralls.get(op_id(u), []):
                    c = f"%rc{i}_{j}_{len(outs)}"
                    s.append(f"{c}, {c}f = transform.structured.fuse_into_containing_op {h} into {fh} "
                             f": ({_ANY}, {_ANY}) -> ({_ANY}, {_ANY})")
                    outs.append(fh)
            foralls[op_id(p)] = outs
        # fills (reduction inits) stay per thread: their buffers become private memory
    return s


def _users_in(p, group):
    out = []
    for r in p.results:
        for use in r.uses:
            u = use.owner
            u = u.operation if hasattr(u, "operation") else u
            if op_id(u) in {op_id(g) for g in group} and op_id(u) not in {op_id(o) for o in out}:
                out.append(u)
    return out


# after the kernels: a row's reduction result starts as a fresh tensor inside the block
# (private to each thread once bufferized), not as a slice of a function-level buffer
CLEANUP = [f"%fn = transform.structured.match ops{{[\"func.func\"]}} in %root : ({_ANY}) -> {_ANY}",
           "transform.apply_patterns to %fn {\n  transform.apply_patterns.tensor.fold_tensor_empty\n"
           "  transform.apply_patterns.canonicalization\n} : " + _ANY,
           f"transform.apply_cse to %fn : {_ANY}"]


def _tile_kernel(k: Kernel, tags, pos) -> None:
    """Apply kernel `k`'s script to a scratch copy of its ops (`scratch.Scratch`) and put
    the tiled ops back: in the function itself, each kernel's matches, fusions and CSE
    cost the whole function (a 2-layer transformer step took 89 s to map)."""
    s = Scratch(sorted([k.root] + k.fused, key=lambda op: pos[op_id(op)]))
    run_transform(s.module, ir.Module.parse(transform_script(kernel_script(k, tags))))
    s.put_back()


def _drop_empty_loops(func_op):
    """A structured op with an operand of zero elements has an empty iteration space: its
    results are its inits (a sum over an empty axis is its fill). Upstream tiling asserts
    on such ops, so they never reach it."""
    body = func_op.regions[0].blocks[0]
    for op in [o.operation for o in body.operations]:
        if not _is_linalg(op) or not len(op.results):
            continue
        shapes = [_static_shape(v) for v in op.operands if isa(ir.ShapedType, v.type)]
        if not any(s is not None and 0 in s for s in shapes):
            continue
        inits = list(op.operands)[-len(op.results):]
        for r, init in zip(op.results, inits):
            r.replace_all_uses_with(init)
        op.erase()


_DIM = re.compile(r"\bd(\d+)\b")


def _drop_unit_reductions(func_op):
    """Reduction dims of extent 1 leave the iteration space (their index 0 in the maps): a
    row reduction has one reduction dim, and reshape propagation leaves unit ones beside
    it (a (1, 70000) @ (70000, 1) product reduced over (70000, 1): a thread looping 70,000
    times, past lavapipe's loop limit)."""
    for op in walk_ops_named(func_op, "linalg.generic"):
        its, ranges = _iterators(op), _loop_ranges(op)
        if not its or ranges is None or walk_ops_named(op, "linalg.index"):
            continue
        unit = [d for d, t in enumerate(its) if t == "reduction" and ranges[d] == 1]
        if not unit or len(unit) == its.count("reduction"):
            continue
        keep = [d for d in range(len(its)) if d not in unit]
        maps = [_renamed(m, lambda d: None if d in unit else keep.index(d), len(keep)) for m in _result_maps(op)]
        with op.context:
            op.attributes["indexing_maps"] = ir.Attribute.parse(f"[{', '.join(maps)}]")
            op.attributes["iterator_types"] = iterator_types_attr([its[d] for d in keep])


def _full_reductions_as_one_row(func_op):
    """A reduction to a 0-d result gets a unit parallel dim in front (its init expanded to
    tensor<1xT>, the result collapsed back): one row, so the row strategy reduces it with a
    workgroup of threads instead of one thread walking the whole array."""
    from mlir.dialects import tensor
    body = func_op.regions[0].blocks[0]
    for op in [o.operation for o in body.operations]:
        if op.name != "linalg.generic" or len(op.results) != 1 or ir.ShapedType(op.results[0].type).rank != 0:
            continue
        its = _iterators(op)
        if not its or "parallel" in its or walk_ops_named(op, "linalg.index"):
            continue
        n = len(its)
        maps = [_renamed(m, lambda d: d + 1, n + 1) for m in _result_maps(op)]
        maps[-1] = f"affine_map<({', '.join(f'd{i}' for i in range(n + 1))}) -> (d0)>"
        t0 = ir.RankedTensorType(op.results[0].type)
        t1 = ir.RankedTensorType.get([1], t0.element_type)
        with op.context, op.location:
            with ir.InsertionPoint(op):
                init = tensor.ExpandShapeOp(t1, op.operands[-1], ir.ArrayAttr.get([]), [], [1]).result
            op.operands[len(op.operands) - 1] = init
            op.attributes["indexing_maps"] = ir.Attribute.parse(f"[{', '.join(maps)}]")
            op.attributes["iterator_types"] = iterator_types_attr(["parallel"] + its)
            r = op.results[0]
            r.set_type(t1)
            with ir.InsertionPoint.after(op):
                back = tensor.CollapseShapeOp(t0, r, ir.ArrayAttr.get([]))
            for u in list(r.uses):
                owner = u.owner.operation if hasattr(u.owner, "operation") else u.owner
                if owner != back.operation:
                    owner.operands[u.operand_number] = back.result


_PLAIN_MATMUL = {"linalg.matmul": [["d0", "d2"], ["d2", "d1"], ["d0", "d1"]],
                 "linalg.batch_matmul": [["d0", "d1", "d3"], ["d0", "d3", "d2"], ["d0", "d1", "d2"]]}


def _plain_matmul(op):
    """A matmul without transposed operands (its indexing maps, when printed, are the default)."""
    if "indexing_maps" not in op.attributes:
        return True
    maps = [[str(e) for e in ir.AffineMapAttr(m).value.results] for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    return maps == _PLAIN_MATMUL[op.name]


def _split_long_reductions(func_op, limit=None):
    """A reduction the row strategy does not take (several reduction dims, or one before
    a parallel dim) runs one thread per output, each reducing serially; where that is
    more than `limit` (SERIAL_REDUCTION) elements per output, its innermost reduction
    dim (of extent > 1) is reduced first by a generic of its own (the original body, the
    other dims parallel: often a row reduction, one workgroup per row), and the rest of
    the reduction reads those partials with the combiner alone; repeated until each
    piece is short. `sum(x, axis=(1, 2))` of a (2, 300, 300) array took two threads
    looping 90,000 times each — slow on any GPU, and wrong on lavapipe, whose shaders stop
    a loop after 65,535 iterations. Needs an init filled with the combiner's identity."""
    limit = SERIAL_REDUCTION if limit is None else limit
    body = func_op.regions[0].blocks[0]
    todo = [o.operation for o in body.operations]
    while todo:
        op = todo.pop()
        if op.name != "linalg.generic" or len(op.results) != 1 or _is_row_reduction(op):
            continue
        its, ranges = _iterators(op), _loop_ranges(op)
        red = [d for d, t in enumerate(its or []) if t == "reduction"]
        if not red or ranges is None or math.prod(ranges[d] for d in red) <= limit or not _plain_combiner(op):
            continue
        par = [d for d in range(len(its)) if d not in red]
        if par + red != list(range(len(its))):
            # the reduction dims last: the same loops in an order the row strategy (and
            # the split below) takes (once: then they are in order)
            if not walk_ops_named(op, "linalg.index"):
                todo.append(_permute_loops(op, par + red))
            continue
        fill = defining_op(op.operands[len(op.operands) - 1])
        long = [d for d in red if ranges[d] > 1]
        out_map = ir.AffineMapAttr(list(ir.ArrayAttr(op.attributes["indexing_maps"]))[-1]).value
        if fill is None or fill.name != "linalg.fill" or len(long) < 2 or not all(
                isa(ir.AffineDimExpr, e) for e in out_map.results):  # (the rest renames its dims)
            continue
        todo.extend(_split_reduction(op, long[-1], fill, ranges, its))  # (each checked again)


def _renamed(m, dim, n_dims) -> str:
    """The text of affine map `m` over `n_dims` dims, its dim d_i read as d_dim(i) (as 0
    where dim(i) is None: a dim dropped from the loops)."""
    def sub(g):
        d = dim(int(g.group(1)))
        return "0" if d is None else f"d{d}"
    res = ", ".join(_DIM.sub(sub, str(e)) for e in m.results)
    return f"affine_map<({', '.join(f'd{k}' for k in range(n_dims))}) -> ({res})>"


def _permute_loops(op, order):
    """`op` (a generic, no linalg.index) with its loops in `order` (old dim numbers, new
    order): the maps read the same elements, the body is unchanged."""
    maps = [_renamed(m, order.index, len(order)) for m in _result_maps(op)]
    its = _iterators(op)
    with op.context:
        op.attributes["indexing_maps"] = ir.Attribute.parse(f"[{', '.join(maps)}]")
        op.attributes["iterator_types"] = iterator_types_attr([its[old] for old in order])
    return op


SERIAL_REDUCTION = 4096  # elements one thread may reduce serially (see _split_long_reductions)


def _split_reduction(op, r, fill, ranges, its):
    """Replace reduction `op` by a generic reducing its dim `r` (to partials over all the
    other dims) and one reducing the rest of the partials; returns both."""
    from mlir.dialects import linalg as L
    n = len(its)
    keep = [d for d in range(n) if d != r]
    dims = ", ".join(f"d{i}" for i in range(n))
    n_in = len(op.operands) - 1
    maps = list(ir.ArrayAttr(op.attributes["indexing_maps"]))
    out_t = ir.RankedTensorType(op.results[0].type)
    part_t = ir.RankedTensorType.get([ranges[d] for d in keep], out_t.element_type)
    block = op.regions[0].blocks[0]
    ops = [o.operation for o in block.operations]
    acc = list(block.arguments)[n_in]
    combiner = defining_op(ops[-1].operands[0])
    with op.context, op.location, ir.InsertionPoint(op):
        init = fill.clone()
        init.operands[1] = ir.Operation.create("tensor.empty", results=[part_t]).results[0]
        init.results[0].set_type(part_t)
        part = op.clone()
        part.operands[n_in] = init.results[0]
        part.results[0].set_type(part_t)
        keep_map = ir.Attribute.parse(f"affine_map<({dims}) -> ({', '.join(f'd{d}' for d in keep)})>")
        part.attributes["indexing_maps"] = ir.ArrayAttr.get(maps[:n_in] + [keep_map])
        part.attributes["iterator_types"] = iterator_types_attr(["reduction" if d == r else "parallel"
                                                                 for d in range(n)])
        # the rest: the partials (d_r dropped, the dims after it renumbered) into the output
        rdims = ", ".join(f"d{k}" for k in range(n - 1))
        out_map = _renamed(ir.AffineMapAttr(maps[n_in]).value, keep.index, n - 1)
        rest = ir.Operation.create(
            "linalg.generic", results=[out_t], operands=[part.results[0], op.operands[n_in]],
            attributes={"indexing_maps": ir.Attribute.parse(f"[affine_map<({rdims}) -> ({rdims})>, {out_map}]"),
                        "iterator_types": iterator_types_attr([its[d] for d in keep]),
                        "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 1])},
            regions=1)
        et = out_t.element_type
        b = rest.regions[0].blocks.append(et, et)
    with op.context, op.location, ir.InsertionPoint(b):
        operands = [b.arguments[1] if v == acc else b.arguments[0] for v in combiner.operands]
        c = ir.Operation.create(combiner.name, results=[et], operands=operands,
                                attributes={k: combiner.attributes[k] for k in combiner.attributes})
        L.YieldOp([c.results[0]])
    op.results[0].replace_all_uses_with(rest.results[0])
    op.erase()
    return [part, rest]


def _plain_matmuls(func_op):
    """(op, (A's, B's, C's shapes)) for the function's matmuls and batch matmuls without
    transposed operands and of static shapes (a list: callers rewrite them)."""
    out = []
    for op in [o.operation for o in func_op.regions[0].blocks[0].operations]:
        if op.name in ("linalg.matmul", "linalg.batch_matmul") and _plain_matmul(op):
            shapes = tuple(_static_shape(v) for v in list(op.operands)[:3])
            if None not in shapes:
                out.append((op, shapes))
    return out


def _pad_matmuls(func_op):
    """A matmul whose M, N or K is not a multiple of the tile is computed on operands
    zero-padded to the tile (tensor.pad, exact: the padding adds zeros to every dot
    product) and the result sliced back, so it takes the tiled strategy (A/B tiles in
    workgroup memory, C in registers) instead of one thread per output element. Small
    matmuls (any of M, N < 32 or K < 16) keep the simple strategy."""
    from mlir.dialects import arith, tensor
    tm, tn, tk = MM_TILE
    for op, (a, b, c) in _plain_matmuls(func_op):
        m, k, n = a[-2], a[-1], b[-1]
        if not (m % tm or n % tn or k % tk) or m < tm or n < tn or k < tk or m * n * k < MM_PAD_MIN_WORK:
            continue
        mp, np_, kp = -(-m // tm) * tm, -(-n // tn) * tn, -(-k // tk) * tk
        batch = a[:-2]

        def pad(v, shape, target):
            t = ir.RankedTensorType(v.type)
            rt = ir.RankedTensorType.get(target, t.element_type)
            p = tensor.PadOp(rt, v, [], [], [0] * len(shape), [x - y for x, y in zip(target, shape)])
            blk = p.regions[0].blocks.append(*([ir.IndexType.get()] * len(shape)))
            with ir.InsertionPoint(blk):
                zero = arith.ConstantOp(t.element_type, 0.0 if isa(ir.FloatType, t.element_type) else 0)
                tensor.YieldOp(zero.result)
            return p.result
        with op.context, op.location, ir.InsertionPoint(op):
            ap = pad(op.operands[0], a, batch + [mp, kp])
            bp = pad(op.operands[1], b, batch + [kp, np_])
            init = defining_op(op.operands[2])
            if init is not None and init.name == "linalg.fill":  # a bigger fill, fused into the kernel
                t = ir.RankedTensorType(op.operands[2].type)
                big = ir.RankedTensorType.get(batch + [mp, np_], t.element_type)
                fill = init.clone()
                fill.operands[1] = tensor.EmptyOp(big.shape, big.element_type).result
                fill.results[0].set_type(big)
                cp = fill.results[0]
            else:
                cp = pad(op.operands[2], c, batch + [mp, np_])
            new = op.clone()
            for i, v in enumerate((ap, bp, cp)):
                new.operands[i] = v
            new.results[0].set_type(cp.type)
            r = len(c)
            out = tensor.ExtractSliceOp(op.results[0].type, new.results[0], [], [], [], [0] * r, c, [1] * r)
        op.results[0].replace_all_uses_with(out.result)
        op.erase()


SPLIT_K = 512  # the most of K one tiled matmul kernel walks (32 steps of MM_TILE's 16)


def _split_k(func_op, most=None):
    """A tiled matmul (M, N, K multiples of the tile) whose K is past `most` (SPLIT_K)
    becomes a batch of S products over K's pieces (A's pieces moved next to the batch by
    a transpose, B's a reshape), then a sum over the S partial products added to C's init:
    (64, 4096) @ (4096, 64) was 4 workgroups each walking all of K (a GPU mostly idle, and
    292,626 loop iterations a thread: refused on lavapipe); now 32, each walking 512."""
    most = SPLIT_K if most is None else most
    tm, tn, tk = MM_TILE
    for op, (a, b, c) in _plain_matmuls(func_op):
        m, k, n = a[-2], a[-1], b[-1]
        et = str(ir.RankedTensorType(op.results[0].type).element_type)
        if m % tm or n % tn or k % tk or k <= most or et not in ("f32", "f16") or any(
                str(ir.RankedTensorType(v.type).element_type) != et for v in list(op.operands)[:3]):
            continue
        steps = k // tk
        d = max(x for x in range(1, most // tk + 1) if steps % x == 0)  # K steps a piece
        ks, sp = d * tk, steps // d
        batch = a[:-2]  # () or (nb,): matmul's or batch_matmul's
        nb = batch[0] if batch else 1
        t = lambda shape: f"tensor<{'x'.join(map(str, shape))}x{et}>"  # noqa: E731
        bd = len(batch)
        lead = "[" + ", ".join(f"[{i}]" for i in range(bd)) + (", " if bd else "")
        # A (.., M, K) -> (.., M, S, ks) -> (.., S, M, ks) -> (nb S, M, ks); B (.., K, N) -> (nb S, ks, N)
        perm = list(range(bd)) + [bd + 1, bd, bd + 2]
        group_b = "[" + ", ".join(map(str, range(bd + 1))) + "]"
        # C and the result as (nb, M, N): batch_matmul's already, matmul's with a unit batch
        c3 = "%c" if bd else "%c3"
        unbatch = (f"  %c3 = tensor.expand_shape %c [[0, 1], [2]] output_shape [1, {m}, {n}] : {t(c)} into "
                   f"{t([1, m, n])}\n") if not bd else ""
        ret = ("  return %r : " + t(c)) if bd else (f"  %r2 = tensor.collapse_shape %r [[0, 1], [2]] : {t([1, m, n])} "
                                                  f"into {t(c)}\n  return %r2 : {t(c)}")
        text = f"""func.func @split(%a: {t(a)}, %b: {t(b)}, %c: {t(c)}) -> {t(c)} {{
  %ae = tensor.expand_shape %a {lead}[{bd}], [{bd + 1}, {bd + 2}]] output_shape [{', '.join(map(str, batch + [m, sp, ks]))}] : {t(a)} into {t(batch + [m, sp, ks])}
  %e0 = tensor.empty() : {t(batch + [sp, m, ks])}
  %at = linalg.transpose ins(%ae : {t(batch + [m, sp, ks])}) outs(%e0 : {t(batch + [sp, m, ks])}) permutation = {perm}
  %ac = tensor.collapse_shape %at [{group_b}, [{bd + 1}], [{bd + 2}]] : {t(batch + [sp, m, ks])} into {t([nb * sp, m, ks])}
  %bc = tensor.expand_shape %b {lead}[{bd}, {bd + 1}], [{bd + 2}]] output_shape [{', '.join(map(str, batch + [sp, ks, n]))}] : {t(b)} into {t(batch + [sp, ks, n])}
  %bb = tensor.collapse_shape %bc [{group_b}, [{bd + 1}], [{bd + 2}]] : {t(batch + [sp, ks, n])} into {t([nb * sp, ks, n])}
  %z = arith.constant 0.0 : {et}
  %e1 = tensor.empty() : {t([nb * sp, m, n])}
  %f = linalg.fill ins(%z : {et}) outs(%e1 : {t([nb * sp, m, n])}) -> {t([nb * sp, m, n])}
  %p = linalg.batch_matmul ins(%ac, %bb : {t([nb * sp, m, ks])}, {t([nb * sp, ks, n])}) outs(%f : {t([nb * sp, m, n])}) -> {t([nb * sp, m, n])}
  %pe = tensor.expand_shape %p [[0, 1], [2], [3]] output_shape [{nb}, {sp}, {m}, {n}] : {t([nb * sp, m, n])} into {t([nb, sp, m, n])}
{unbatch}  %r = linalg.generic {{indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d2, d3)>], iterator_types = ["parallel", "reduction", "parallel", "parallel"]}} ins(%pe : {t([nb, sp, m, n])}) outs({c3} : {t([nb, m, n])}) {{
  ^bb0(%x: {et}, %acc: {et}):
    %s = arith.addf %x, %acc : {et}
    linalg.yield %s : {et}
  }} -> {t([nb, m, n])}
{ret}
}}"""
        with op.context, op.location:
            parsed = ir.Module.parse(text)  # (held until inlined)
        inline_body(parsed.body.operations[0].regions[0].blocks[0], list(op.operands)[:3], op, list(op.results))
        op.erase()


def _long_matmuls_as_rows(func_op, limit=None):
    """A matmul the tiled strategy does not take (M, N or K off the tile, too small to pad)
    runs a thread per output looping over K; past `limit` (SERIAL_REDUCTION) it becomes a
    linalg.generic instead (upstream's generalization), a row reduction: a workgroup per
    output, K split over its threads. (4, 70000) @ (70000, 4) looped 70,000 times a thread:
    refused on lavapipe (its loop limit), slow on any GPU."""
    limit = SERIAL_REDUCTION if limit is None else limit
    tm, tn, tk = MM_TILE
    found = False
    with func_op.context:
        for op, (a, _, out) in _plain_matmuls(func_op):
            m, n, k = out[-2], out[-1], a[-1]
            if k > limit and (m % tm or n % tn or k % tk):
                op.attributes[_GENERALIZE] = ir.UnitAttr.get()
                found = True
    if found:
        run_transform(func_op, ir.Module.parse(transform_script([
            f"%m = transform.structured.match attributes{{{_GENERALIZE}}} in %root : ({_ANY}) -> {_ANY}",
            f"%g = transform.structured.generalize %m : ({_ANY}) -> {_ANY}"])))
        for op in walk_ops_named(func_op, "linalg.generic"):
            if _GENERALIZE in op.attributes:
                del op.attributes[_GENERALIZE]


_GENERALIZE = "mirax.gpu_generalize"


def walk_ops_named(root, name):
    from .pass_base import walk_ops
    return walk_ops(root, lambda n: n == name)




def map_function(func_op, threads=THREADS, subgroup=SUBGROUP, max_buffers=MAX_BUFFERS):
    """Tile the linalg ops of one function for the GPU (in place); returns its kernels."""
    _drop_empty_loops(func_op)
    _drop_unit_reductions(func_op)
    _full_reductions_as_one_row(func_op)
    _split_long_reductions(func_op)
    _pad_matmuls(func_op)
    _split_k(func_op)
    _long_matmuls_as_rows(func_op)
    kernels = plan(func_op, threads, subgroup, max_buffers)
    if not kernels:
        return None
    tags = {}
    ctx = func_op.context
    with ctx:
        i64 = ir.IntegerType.get_signless(64)
        for k in kernels:
            for op in [k.root] + k.fused:
                tags[op_id(op)] = len(tags)
                op.attributes[ROOT] = ir.IntegerAttr.get(i64, tags[op_id(op)])
    body = func_op.regions[0].blocks[0]
    pos = {op_id(o.operation): n for n, o in enumerate(body.operations)}
    with ctx, ir.Location.unknown():
        for k in kernels:
            _tile_kernel(k, tags, pos)
        run_transform(func_op, ir.Module.parse(transform_script(CLEANUP)))
        # record each kernel's workgroup size on its block forall
        _tag_blocks(func_op, {k.index: k.block for k in kernels})
        _partials_in_workgroup_memory(func_op)
        _partials_per_reduction(func_op)
    # the elementwise producers recomputed in a thread loop: one loop body, no buffer
    from mlir.passmanager import PassManager
    pm = PassManager.parse("builtin.module(func.func(linalg-fuse-elementwise-ops, canonicalize, cse))",
                           context=func_op.context)
    pm.run(func_op.parent if hasattr(func_op, "parent") else func_op)
    return kernels


def _tag_blocks(func_op, blocks):
    from .pass_base import walk_ops
    with func_op.context:
        for f in walk_ops(func_op, lambda n: n == "scf.forall"):
            if KERNEL in f.attributes:
                idx = ir.IntegerAttr(f.attributes[KERNEL]).value
                f.attributes[BLOCK] = ir.DenseI64ArrayAttr.get(list(blocks[idx]))


def _partials_in_workgroup_memory(func_op):
    """`promote_tensor` copies a thread loop's result into workgroup memory after the
    loop; make the loop write there in the first place (no copy, no race on it):

        %p = scf.forall ... shared_outs(%o = %e)        %a = alloc_tensor() {memory_space = 3}
        %a = alloc_tensor() {memory_space = 3}    ->    %p = scf.forall ... shared_outs(%o = %a)
        %m = materialize_in_destination %p in %a
    """
    from .pass_base import walk_ops
    for m in walk_ops(func_op, lambda n: n == "bufferization.materialize_in_destination"):
        src, dest = m.operands[0], m.operands[1]
        f, a = defining_op(src), defining_op(dest)
        if f is None or a is None or f.name != "scf.forall" or a.name != "bufferization.alloc_tensor":
            continue
        if len(f.results) != 1 or len(list(a.operands)):
            continue
        a.move_before(f)
        n_out = len(f.results)
        f.operands[len(f.operands) - n_out] = a.results[0]
        m.results[0].replace_all_uses_with(f.results[0])
        m.erase()


def _partials_per_reduction(func_op):
    """CSE merges the identical zero-fills of two reductions' partials (var's mean and
    sum of squares): both reductions would then accumulate into one workgroup buffer,
    and bufferization resolves the conflict with a copy that races with the threads.
    Give every extra reader its own fill and its own workgroup buffer."""
    from .pass_base import walk_ops
    for f in walk_ops(func_op, lambda n: n == "scf.forall"):
        if len(f.results) != 1:
            continue
        init = defining_op(f.operands[len(f.operands) - 1])
        if init is None or init.name != "bufferization.alloc_tensor" or "memory_space" not in init.attributes:
            continue
        uses = [u for u in f.results[0].uses]
        for u in uses[1:]:
            user = user_op(u)
            with f.context, f.location, ir.InsertionPoint(user):
                a = init.clone()
                g = f.clone()
            g.operands[len(g.operands) - 1] = a.results[0]
            user.operands[u.operand_number] = g.results[0]


class MiraxGpuMap(MiraxPass):
    name = NAME
    summary = "Tile fused linalg into scf.foralls mapped to GPU blocks and threads, a strategy per kernel"
    options = {"threads": (THREADS, "threads per workgroup"),
               "subgroup": (SUBGROUP, "the device's subgroup size: a row workgroup's fewest threads"),
               "max-buffers": (MAX_BUFFERS, "buffers one kernel may bind: a row kernel fuses no more producers")}

    def run(self, module):
        from .pass_base import walk_ops
        for f in walk_ops(module, lambda n: n == "func.func"):
            if not f.regions[0].blocks:
                continue
            try:
                map_function(f, int(self.opts["threads"]), subgroup=int(self.opts["subgroup"]),
                             max_buffers=int(self.opts["max-buffers"]))
            except ir.MLIRError as err:
                raise PassError(f, f"mirax-gpu-map: tiling failed: {err}") from None
