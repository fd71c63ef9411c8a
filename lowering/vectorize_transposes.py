"""`mirax-vectorize-transposes`: transposes as register-tile shuffles instead of gathers.

A `linalg.transpose` that moves the innermost dimension reads one operand with a stride;
left to convert-linalg-to-loops, LLVM vectorizes it with gathers (`vgatherqps`), which
cost a fifth of an MLP training step on Zen 5. Here each such transpose (static shape,
32-bit elements) is tiled into L x L blocks of the two dimensions that trade places
(L = the host's f32 lanes, lowering/host_cpu.py), each block read with L contiguous
vector loads, transposed in registers (`vector.transpose`, lowered by shuffles: the
16x16 AVX-512 sequence where L = 16) and written with L contiguous stores; an output
innermost dim shorter than L (matmul's A repacked into 6-row panels) is one block of
that many rows, L columns. A transpose that keeps the innermost dimension is a copy of
contiguous runs: tiled by the run (at most 4 vectors), one vector read and write each.
Other dims that L does not divide are left alone.

    %t = linalg.transpose ins(%a : tensor<512x784xf32>) outs(%e : tensor<784x512xf32>) permutation = [1, 0]
  becomes
    scf.for %i = 0 to 784 step 16 { scf.for %j = 0 to 512 step 16 {
      %v = vector.transfer_read %a[%j, %i] ... : vector<16x16xf32>
      %w = vector.transpose %v, [1, 0] ...   (then shuffles)
      vector.transfer_write %w, ... [%i, %j] } }

Measured (one Zen 5 thread, 512x784 f32): 64 us against 130 us for the gathers. Short
innermost dims (Zen 4, `x.T * 2` compiled, medians of 15 alternating rounds, AVX-512 /
AVX2): 3x65536 70.6 -> 34.5 / 127.8 -> 57.8 us, 6x4096 15.9 -> 11.9 / 16.9 -> 13.6 us;
1000^3 matmul on AVX2 (its A repacking) 210.1 -> 213.8 GFLOP/s, AVX-512 even.
"""
from __future__ import annotations

import warnings

from mlir import ir
from .pass_base import MiraxPass, apply_transform, transform_script, walk_ops

NAME = "mirax-vectorize-transposes"
MARK = "__mirax_vector_transpose"


def vector_run(n: int, lanes: int):
    """How many elements of a contiguous run of `n` one vectorized copy step moves: the
    whole run up to 4 vectors, else the largest multiple of the lanes up to 4 vectors
    that divides it; None when none does."""
    if n <= 4 * lanes:
        return n
    return max((w for w in range(lanes, 4 * lanes + 1, lanes) if n % w == 0), default=None)


def permutation(op):
    """The permutation `op` applies: a linalg.transpose's, or that of an elementwise
    linalg.generic (all loops parallel, the output and every other input read in loop
    order) reading one 32-bit input through a permutation map (`x.T + 1` after fusion:
    out[i, j] = in[j, i] + 1 is the transpose [1, 0] with an add on the way); else None."""
    if op.name == "linalg.transpose":
        return list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
    if op.name != "linalg.generic" or len(op.results) != 1:
        return None
    if any("parallel" not in str(k) for k in ir.ArrayAttr(op.attributes["iterator_types"])):
        return None
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    dims_of = lambda m: [ir.AffineDimExpr(r).position if isinstance(r, ir.AffineDimExpr) else None  # noqa: E731
                         for r in m.results]
    ident = list(range(maps[-1].n_dims))
    if dims_of(maps[-1]) != ident:
        return None
    perm = None
    for v, m in zip(op.operands[:-1], maps[:-1]):
        dims = dims_of(m)
        if dims == ident or not dims:  # (in loop order, or a 0-d scalar every element reads)
            continue
        if perm is not None or None in dims or sorted(dims) != ident:
            return None
        try:
            width = ir.RankedTensorType(v.type).element_type.width
        except (ValueError, AttributeError):
            return None
        if width != 32:
            return None
        perm = [dims.index(i) for i in ident]  # out dim i walks the input's dim perm[i]
    return perm


def plan(op, lanes: int):
    """Tile sizes over the op's (output) loops, or None to leave it alone."""
    try:
        t = ir.RankedTensorType(op.results[0].type)
    except (ValueError, IndexError):
        return None
    if str(t.element_type) not in ("f32", "i32"):
        return None
    perm = permutation(op)
    if perm is None:
        return None
    rank = len(perm)
    j = perm.index(rank - 1)  # the output dim that walks the input's contiguous dim
    shape = list(t.shape)
    if j == rank - 1 and not ir.ShapedType.is_dynamic_size(shape[-1]):
        # the innermost dim stays: a copy of contiguous runs (matmul's B repacked into
        # nr-wide panels). Left to LLVM, a short run is unrolled into scalar loads and
        # stores it cannot reorder (source and destination may alias): 16 vmovss pairs
        # per panel row, 8% of a 1024^3 product on AVX2. Tiled by the run (or 4 vectors
        # of it), each tile is one vector read and one vector write.
        inner = vector_run(shape[-1], lanes)
        return [1] * (rank - 1) + [inner] if inner else None  # (outer dims may be dynamic: a task's share)
    if j == rank - 1 or not t.has_static_shape:
        return None
    tiles = [1] * rank
    inner = shape[rank - 1]
    if 1 < inner < lanes:
        # an output innermost dim shorter than the lanes is one block whole (A repacked
        # into mr-row panels: [M/6][6][K] -> [M/6][K][6], blocks of 6 x L, a 1-d shuffle),
        # L halved down to 4 until it divides the other dim (K = 1000 with 16 lanes: 8);
        # left to LLVM it was a scalar load and store an element, 3.3% of 1000^3 on AVX2
        w = lanes
        while w > 4 and shape[j] % w:
            w //= 2
        if shape[j] % w:
            return None
        tiles[rank - 1], tiles[j] = inner, w
        return tiles
    if inner % lanes or shape[j] % lanes:
        return None
    tiles[rank - 1] = tiles[j] = lanes
    return tiles


def _run_block(size: int, block: int) -> int:
    """Runs a block copies along a moved dim of `size`, at most `block`: 0 (the whole dim)
    when it is no longer than `block`, else its largest divisor up to `block` (no partial
    blocks), `block` where it has none above 1 or is dynamic (a task's share)."""
    if ir.ShapedType.is_dynamic_size(size):
        return block
    if size <= block:
        return 0
    return max((d for d in range(2, block + 1) if size % d == 0), default=block)


def line_tiles(op, tiles, line: int, run_block: int):
    """Outer tile sizes that group register blocks so each source row read is a whole
    cache line of `line` bytes (two 8x8 blocks side by side with AVX2's 8 lanes and
    64-byte lines), or None where one block already is (AVX-512) or the shape does not
    allow it. One 8x8 block reads half of each of 8 lines; the other half came 512
    blocks later, from L2 again.

    A transpose that keeps the innermost dim (a copy of runs: matmul's B repacked into
    panels, attention's heads split) is copied in blocks of `run_block` runs along each
    dim that moves (`_run_block`; the host's L1d ways, `tuning.table()["other"]`: rows a
    multiple of 4 KiB apart share one L1 set): in the output's order alone it read one run of each
    source row and went on to the next row (B's rows of 1024 floats all fall in one L1
    set, so the next panel read them again from L3); a block reads whole lines of
    `run_block` rows and writes `run_block` runs in a row. Zen 4 (8 ways), medians of 15-25
    alternating rounds, four runs: 1024x1024 into 16-wide panels 220-288 -> 137-243 us,
    1000x1000 into 8-wide 98-151 -> 84-127 us; 1024x4096 into 32-wide better in 3 of 4
    (1520 -> 898 us at best, 1128 -> 1226 at worst). Neutral on whole matmuls and
    training steps, where the copies are a few per cent."""
    perm = permutation(op)
    rank = len(perm)
    j = perm.index(rank - 1)
    shape = list(ir.RankedTensorType(op.results[0].type).shape)
    if j == rank - 1:
        outer = [0] * rank
        for i in (i for i in range(rank - 1) if perm[i] != i):
            outer[i] = _run_block(shape[i], run_block)
        return outer if any(outer) else None
    per_line = line // 4
    if tiles[j] >= per_line or shape[j] % per_line:
        return None
    outer = list(tiles)
    outer[j] = per_line
    return outer


class MiraxVectorizeTransposes(MiraxPass):
    name = NAME
    summary = "Tile transposes into register blocks of the host's vector width, transposed by shuffles"
    options = {"lanes": (0, "block size (0: the host's f32 lanes)"),
               "line": (0, "cache line bytes (0: the host's)"),
               "run-block": (0, "runs a kept-innermost transpose copies at most per moved dim "
                                "(0: the tuning table's, the host's L1d ways)")}

    def run(self, module: ir.Operation):
        from . import tuning
        from .host_cpu import host
        lanes = int(self.opts["lanes"]) or host().f32_lanes
        line = int(self.opts["line"]) or host().line
        run_block = int(self.opts["run-block"]) or tuning.table()["other"]["transpose_run_block"]
        if lanes < 4:
            return
        todo = {}  # (outer tiles, tiles) -> its index: the transposes tiled alike share one
        # match (each match walks the module: one per transpose grew with the program's square)
        with module.context, ir.Location.unknown():
            for op in walk_ops(module, lambda n: n in ("linalg.transpose", "linalg.generic")):
                tiles = plan(op, lanes)
                if tiles is None:
                    continue
                outer = line_tiles(op, tiles, line, run_block)
                k = todo.setdefault((tuple(outer) if outer else None, tuple(tiles)), len(todo))
                op.attributes[MARK] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), k)
            if not todo:
                return
            strategy = "shuffle_16x16" if lanes == 16 else "shuffle_1d"
            body = []
            for i, (outer, tiles) in enumerate(todo):
                body.append(f"%t{i} = transform.structured.match attributes{{{MARK} = {i} : i64}} "
                            f"in %root : (!transform.any_op) -> !transform.any_op")
                h = f"%t{i}"
                for k, sizes in enumerate(([outer] if outer else []) + [tiles]):
                    n = sum(1 for x in sizes if x)
                    body.append(f"%b{i}_{k}, %l{i}_{k}:{n} = transform.structured.tile_using_for {h} tile_sizes "
                                f"[{', '.join(map(str, sizes))}] : (!transform.any_op) -> (!transform.any_op"
                                f"{', !transform.any_op' * n})")
                    h = f"%b{i}_{k}"
                body.append(f"transform.structured.vectorize {h} : !transform.any_op")
            body += ["%f = transform.structured.match ops{[\"func.func\"]} in %root : "
                     "(!transform.any_op) -> !transform.any_op",
                     "transform.apply_patterns to %f {\n"
                     f"      transform.apply_patterns.vector.lower_transpose lowering_strategy = \"{strategy}\"\n"
                     "      transform.apply_patterns.vector.transfer_permutation_patterns\n"
                     "    } : !transform.any_op"]
            err = apply_transform(module, transform_script(body))
            if err is not None:  # the transposes stay as they were
                warnings.warn(f"{NAME}: transposes left as they were: {err}")
            for op in walk_ops(module, lambda n: n in ("linalg.transpose", "linalg.generic")):
                if MARK in op.attributes:
                    del op.attributes[MARK]
