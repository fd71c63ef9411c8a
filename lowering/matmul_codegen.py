"""Matmul codegen: tiled, vectorized, register-blocked `linalg.matmul`/`batch_matmul`.

`optimize_matmuls(module)` runs on linalg on tensors (after `convert-mirax-to-linalg`,
before bufferization). Every f32 matmul with static shapes that is large enough becomes

    scf.forall (M tiles [, batch])            two threads, through OpenMP
      scf.for N / K cache tiles               B's block stays in L2
        scf.for mr x nr micro tiles
          scf.for k (step 1)                  C's mr x nr block in registers
            vector.fma (outer products)

built by a transform-dialect script (text generated here per op from `tuning.matmul_config`) and
applied with `transform.interpreter.apply_named_sequence`. A product's only reader, an
elementwise generic (bias + relu, an SGD update), then runs on each register tile before
its store (lowering/matmul_epilogue.py). A shape that does not divide
the micro tile is split into the part it divides and remainder products
(`split_remainders`: slices of A, B and C, no copies), or padded with zeros whole
(`transform.structured.pad`: the result a slice of the padded product), as the tuning
table says; a remainder is padded to its own tile. Other ops (other dtypes, dynamic or
small shapes) are left alone for the generic lowering. Each product is tiled in a small
function of its own, then put back (`_outline`, `_inline`): in the program's function
the script's cost would grow with (products x program size). Identical products (another
layer's projection: the same kernel function and plan) are tiled once, the others take a
copy (`_identical_kernels`; `MIRAX_MATMUL_REUSE=0` tiles each).

    with ctx:
        module = ir.Module.parse(text)            # linalg.matmul on tensors
        optimize_matmuls(module)                  # scf.forall + vector.fma on tensors
        lower_to_llvm(module)                     # what the CPU pipeline must do after it

In mirax-cpu-pipeline (lowering/cpu_pipeline.py) it runs after fusion, before
mirax-parallelize and bufferization, as the Python pass `mirax-matmul-codegen`; what the
pipeline does after it is what `lower_to_llvm` runs (the pipeline with its matmul hook
off), so the tuner and the tests check and time the code a compile makes:
  1. after convert-mirax-to-linalg (+ canonicalize, cse) and fusion, on tensors:
     `optimize_matmuls(module)`; then mirax-parallelize splits the repackings over the
     threads and mirax-vectorize-transposes vectorizes them;
  2. bufferization into out-params, then `mirax-strided-copies` (lowering/strided_copies.py:
     padding copies vectorizable instead of `memrefCopy` calls);
  3. TO_LLVM: `scf-forall-to-parallel`, `convert-scf-to-openmp`, then
     `openmp_dynamic_schedule` (helps when other processes hold a core),
     `convert-vector-to-scf{full-unroll}`, `convert-vector-to-llvm` (before
     `finalize-memref-to-llvm`) and `convert-openmp-to-llvm` (after it);
  4. the runtime's code generation (runtime/cpu.py `compile_module`) links an LLVM
     OpenMP runtime (`__kmpc_*`: Debian `libomp5` or PyPI `intel-openmp`;
     `openmp_library()` finds one).
"""
from __future__ import annotations

import contextlib
import math
import os
import warnings

from mlir import ir

from . import matmul_dot
from . import matmul_epilogue as epilogue
from . import tuning
from .parallelize import PARALLEL
from .pass_base import (apply_transform, body_ops, clone_mapped, defining_op, enclosing, inline_body, is_transpose_2d,
                        function_key, outside_values, relocate, transform_script, walk_ops, within)

# Tile sizes come from lowering/tuning.py (`matmul_config`): derived from the host's
# vector registers and caches, or the tuner's measured choice for the op's shape class.
#   forall_m  rows of C per parallel task (scf.forall -> OpenMP)
#   nc, kc    cache tiles: a kc x nc block of B stays in L2 across a task's rows
#   mr, nr    register tile: mr x nr accumulators, k step 1
#   min_flops smaller products are left to the generic lowering
#   max_pad   padding may grow M*N by at most this factor with the preferred tile;
#             max_pad_skinny with the tile that pads least, else the op is left alone

MARK = "__mirax_matmul_codegen"

# the CPU pipeline's bufferization passes, for tests that stop after them; the mark on a
# module whose matmuls were tiled
from .cpu_pipeline import BUFFERIZE, DYNAMIC_SCHEDULE  # noqa: E402


def lower_to_llvm(module) -> None:
    """Bufferize and lower a module that went through optimize_matmuls (in place): the
    rest of mirax-cpu-pipeline, exactly as a compile runs it (its matmul hook off), so the
    tuner and the tests time and check the code a later compile makes: the repackings
    split over the threads by mirax-parallelize and vectorized by
    mirax-vectorize-transposes (a pass list of its own here had left them serial and
    scalar, and the tuner ranked the packed candidates by that: on a 2-core AVX2 host
    its best for 256x512x512 measured 86 GFLOP/s, and 148 in a later tuner run lowered as
    compiled)."""
    from mlir.passmanager import PassManager
    pm = PassManager("builtin.module", context=module.context)
    add_lowering(pm)
    pm.run(module.operation)


def add_lowering(pm) -> None:
    """Add `lower_to_llvm`'s passes to PassManager `pm`: mirax-cpu-pipeline, its matmul
    hook off."""
    from .cpu_pipeline import MiraxCpuPipeline
    MiraxCpuPipeline(matmuls=False).add_to(pm)


def _walk(root, name):
    return walk_ops(root, lambda n: n == name)


def openmp_dynamic_schedule(module, min_task_macs=None) -> None:
    """After convert-scf-to-openmp: give the `omp.wsloop`s of the matmul tasks (those
    holding the register tiles' `vector.fma`) of at least `min_task_macs` multiply-adds a
    task (default: the tuning table's `dynamic_min_task_macs`) `schedule(dynamic)`.

    Static (the default) splits the tasks in halves up front; when another process holds
    one of the two cores, the other thread then waits at the barrier. Measured here under
    load (1024^3, interleaved): static ~44-74, dynamic ~51-104 GFLOP/s. The other loops
    (rows, elementwise blocks) stay static: dynamic hands out one iteration a call to
    `__kmpc_dispatch_next`, and Debian's libomp formats debug-trace strings in each call
    (a transformer step's 6144-row softmax loops: 42% of its samples in printf). Small
    tasks stay static too: a transformer's attention products are 128 tasks of ~37k
    multiply-adds (a fraction of a microsecond each), and a dispatch call a task made its
    step ~6% slower (paired rounds, Zen 4)."""
    root = module.operation if hasattr(module, "operation") else module
    if min_task_macs is None:
        min_task_macs = tuning.table()["matmul"][("linalg.matmul", "f32")]["dynamic_min_task_macs"]
    with root.context:
        kind = ir.Attribute.parse("#omp<schedulekind dynamic>")
        for op in _walk(root, "omp.wsloop"):
            fmas = _walk(op, "vector.fma")
            if "schedule_kind" not in op.attributes and fmas and max(map(_task_macs, fmas)) >= min_task_macs:
                op.attributes["schedule_kind"] = kind


TASK_MACS = "mirax.task_macs"  # on a matmul's vector.fmas: the multiply-adds of one parallel task


def _task_macs(fma) -> float:
    return ir.IntegerAttr(fma.attributes[TASK_MACS]).value if TASK_MACS in fma.attributes else math.inf


def tag_task_work(f, p) -> None:
    """Mark the `vector.fma`s of matmul kernel `f` (plan `p`) with the multiply-adds of
    one of its parallel tasks (for `openmp_dynamic_schedule`)."""
    b = p.get("batch") or 1
    (mp, np_), k = p["pad"], p["dims"][2]
    if p.get("forall_b"):  # (B's panels split: nr columns each)
        tasks = np_ // (p["forall_b"] * p["nr"])
    else:
        tasks = b * (np_ // p["forall_n"] if p.get("forall_n") else max(1, mp // p["forall_m"]))
    attr = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), b * mp * np_ * k // max(1, tasks))
    for op in _walk(f, "vector.fma"):
        op.attributes[TASK_MACS] = attr


openmp_library = tuning.openmp_library


def _static_shape(value):
    try:
        t = ir.RankedTensorType(value.type)
    except ValueError:
        return None
    if not t.has_static_shape:
        return None
    return list(t.shape), str(t.element_type)


DEFAULT_MAPS = ("[affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d2, d1)>, "
                "affine_map<(d0, d1, d2) -> (d0, d1)>]")
TRANSPOSED_A = ("[affine_map<(d0, d1, d2) -> (d2, d0)>, affine_map<(d0, d1, d2) -> (d2, d1)>, "
                "affine_map<(d0, d1, d2) -> (d0, d1)>]")
TRANSPOSED_B = ("[affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d1, d2)>, "
                "affine_map<(d0, d1, d2) -> (d0, d1)>]")


def plan(op, config=None, inherit=None, prefer_nr=None):
    """Tile sizes for one linalg.matmul/batch_matmul op, or None to leave it alone.

    `config` (the tuner's candidates, tests) replaces the tuning table's entries;
    `inherit` (the divisible piece of a split product: its parent's tiles) stands in for
    the measured entry; `prefer_nr` (a row remainder whose divisible piece repacked B into
    panels that wide) breaks ties between a remainder's tiles. Returns dict(batch,
    dims=(M, N, K), pad=(Mp, Np), forall_m, nc, kc, mr, nr, pack, pack_a, rows_outer,
    split, tiles)."""
    name = op.name
    if len(op.operands) != 3 or len(op.results) != 1:
        return None
    shapes = [_static_shape(v) for v in op.operands]
    if any(s is None for s in shapes):
        return None
    dtypes = {s[1] for s in shapes}
    if len(dtypes) != 1:
        return None
    dtype = dtypes.pop()
    # the default (row-major) indexing maps, A transposed (stored K x M: the micro
    # kernel then reads A's mr values of a k step contiguously), or B transposed (stored
    # N x K, a weight read through x @ W.T: repacked into panels from that layout)
    transpose_a = transpose_b = False
    if "indexing_maps" in op.attributes and name == "linalg.matmul":
        maps = str(op.attributes["indexing_maps"])
        if maps == TRANSPOSED_A:
            transpose_a = True
        elif maps == TRANSPOSED_B:
            transpose_b = True
        elif maps != DEFAULT_MAPS:
            return None
    (a, _), (b, _), (c, _) = shapes
    if name == "linalg.batch_matmul":
        batch, (M, K), (_, N) = a[0], a[1:], b[1:]
    else:
        batch, (M, K), (_, N) = None, (a[::-1] if transpose_a else a), (b[::-1] if transpose_b else b)
    form = tuning.form_of(name, transpose_a, transpose_b)
    cfg = tuning.matmul_config(form, dtype, batch, M, N, K)
    if cfg is None:
        return None
    cfg.update(inherit or {})
    cfg.update(config or {})
    if 2 * (batch or 1) * M * N * K < cfg["min_flops"] or K < 8:  # (K < 8: outer products)
        return None
    mr, nr = cfg["mr"], cfg["nr"]
    Mp, Np = _up(M, mr), _up(N, nr)
    if REMAINDER in op.attributes and ((Mp, Np) != (M, N) or prefer_nr not in (None, nr)) and config is None:
        # a split product's remainder (the last M % mr rows, say): the host's register tile
        # that pads it least, the most accumulators among those (4 rows: 4x16, not 6x16
        # padded with two rows of zeros, a third of its FMAs wasted); among equals, one
        # as wide as the B panels it may share (`prefer_nr`)
        from .host_cpu import host
        tiles = tuning.register_tiles(host(), every=True)
        mr, nr = min(tiles, key=lambda t: (_up(M, t[0]) * _up(N, t[1]), t[1] != prefer_nr, -t[0] * t[1]))
        Mp, Np = _up(M, mr), _up(N, nr)
        cfg.update(tuning.matmul_tiles(host(), mr, nr))
    if Mp * Np > cfg["max_pad"] * M * N and config is None:
        # the tile (measured for a neighbouring shape class, or derived) pads this shape
        # too much: the host's register tile that pads least, up to max_pad_skinny (a
        # skinny product, N = 10 say, runs ~50x slower in the generic lowering than
        # padded to one vector: 0.6 ms vs 0.01 ms for 256x512 @ 512x10 on Zen 5)
        from .host_cpu import host
        tiles = tuning.register_tiles(host(), every=True)
        mr, nr = min(tiles, key=lambda t: _up(M, t[0]) * _up(N, t[1]))
        Mp, Np = _up(M, mr), _up(N, nr)
        if Mp * Np <= cfg["max_pad_skinny"] * M * N:
            cfg.update(tuning.matmul_tiles(host(), mr, nr), max_pad=cfg["max_pad_skinny"])
    if Mp * Np > cfg["max_pad"] * M * N:
        return None
    # largest multiple of mr dividing Mp, at most forall_m, and with two tasks when possible;
    # a task count the threads share evenly wins over a larger task down to a quarter of
    # its rows (1000^3 in 4-row tiles on 2 threads: 5 tasks of 200 rows 153 GFLOP/s, 10
    # of 100 rows 184)
    tasks = batch or 1
    nested = enclosing(op, "scf.forall") is not None  # on a thread of its own (a convolution's chunk)
    threads = 1 if nested else int(cfg.get("threads") or tuning.threads())
    limit = cfg["forall_m"] if tasks >= 2 or Mp < 2 * mr else min(cfg["forall_m"], Mp // 2)
    divisors = [d for d in range(mr, max(limit, mr) + 1, mr) if Mp % d == 0]
    forall_m = max(divisors)
    if threads > 1:
        # the task height whose slowest thread runs the fewest rows (an even share when
        # one exists), down to a quarter of the largest: 1026 rows in 6-row tiles, 2
        # threads: 19 tasks of 54 (540 rows on the slower thread), not 9 of 114 (570: the
        # other thread idle a tenth of the time, measured on AVX2)
        forall_m = min((d for d in divisors if 4 * d >= forall_m),
                       key=lambda d: (_slowest_share(tasks * Mp, d, threads), -d))
    nc = max(d for d in range(nr, max(cfg["nc"], nr) + 1, nr) if Np % d == 0)
    if tasks == 1 and nc == Np and "forall_m" not in (config or {}):
        # one n-block: a task's row tiles share each kc x N slice of B, fetched from L3
        # once per task, so one task per thread (1024^3 on Zen 4, 2 threads, 4x64 tiles:
        # 32-row tasks 145-153 GFLOP/s, 512-row tasks 158-186). A's strip is read once per
        # k-slice whatever its height. (But see `_balanced_rows` below.)
        n = max(2, threads)  # (two at least: a one-trip forall folds away)
        if Mp % (n * mr) == 0:  # (else tasks of unequal height: the slowest thread decides)
            forall_m = max(forall_m, Mp // n)
    # split off the rows and columns the tile does not divide (split_remainders) instead
    # of padding; a remainder piece itself is padded
    split = cfg.get("split")
    if split is None:  # unmeasured: the host's rule (tuning.split_default)
        split = tuning.split_default(M, N, K, mr, nr)
    split = bool(split) and (Mp, Np) != (M, N) and REMAINDER not in op.attributes and M >= mr and N >= nr
    pack_b = cfg.get("pack_b")
    if pack_b is None:  # unmeasured: the host's rule (tuning.pack_b_default)
        pack_b = tuning.pack_b_default(M, N, K, mr)
    if transpose_b:  # (only its panels read it well; padded, not split: the pieces are slices of A, B, C)
        pack_b, split = True, False
    pack = bool(pack_b) and _zero_filled(op.operands[2])
    if transpose_b and not pack:
        return None
    pack_a = pack and batch is None and bool(cfg.get("pack_a"))  # (rows_outer: only with A packed)
    if pack_a and "pack_a" not in (config or {}) and _window_copy(op.operands[0]):
        # A was just copied row by row into a buffer of its own (a convolution's window
        # copy): repacking it copies it again. A 1-d convolution's 256 x 128 x 640 chunk
        # products, 6x16 tiles, A repacked 0.80x jax.jit, read in place 0.95x (Zen 3)
        pack_a = False
    rows_outer = pack_a and bool(cfg.get("rows_outer"))
    if pack and batch:
        forall_m = Mp  # a task a whole product of the batch: it repacks its own B once
    elif tasks == 1 and threads > 1 and "forall_m" not in (config or {}):
        # what a task reads of B: the kc x N slice of its parallel loop, or (the threads'
        # rows outermost) all of B's panels
        b_bytes = (K * Np if rows_outer else min(cfg["kc"], K) * Np) * 4
        if (rows_outer or nc == Np) and b_bytes <= cfg["l2_bytes"] // 2:
            forall_m = _balanced_rows(Mp, mr, threads, cfg["tasks_per_thread"]) or forall_m
    # one task of rows (a remainder's few rows, a product of few rows): the threads
    # split its columns instead, in blocks of whole register tiles (a 4x512x784 remainder
    # of an MLP step ran on one thread while the other waited)
    forall_n = 0
    if threads > 1 and tasks == 1 and forall_m == Mp and not pack and "forall_m" not in (config or {}):
        forall_n = _even_split(Np, nr, threads)
        if forall_n:
            nc = max(d for d in range(nr, min(nc, forall_n) + 1, nr) if forall_n % d == 0)
    if nested:  # one task: its forall folds away (a nested parallel loop would share the
        # outer one's task counter)
        forall_m, forall_n = Mp, 0
    return dict(batch=batch, dims=(M, N, K), pad=(Mp, Np), forall_m=forall_m, forall_n=forall_n, nc=nc,
                kc=min(cfg["kc"], K), mr=mr, nr=nr, pack=pack, pack_a=pack_a,
                rows_outer=rows_outer, transpose_a=transpose_a,
                transpose_b=transpose_b, threads=threads,
                split=split, init_op=_linalg_producer(op.operands[2]) is not None,
                tiles={x: cfg[x] for x in tuning.MATMUL_KEYS if x in cfg})


REMAINDER = "__mirax_matmul_remainder"  # a piece split_remainders cut off: padded, not split again


def _up(x: int, t: int) -> int:
    """x rounded up to a multiple of t."""
    return -(-x // t) * t


def _balanced_rows(Mp: int, mr: int, threads: int, per_thread: int) -> int:
    """Rows a task when a product's B stays in each core's L2 from one task to the next
    (one n-block of it, or all of it with the threads' rows outermost): the tallest task
    of whole register tiles dividing Mp with `per_thread` tasks a thread or more, two
    tiles at least (one makes a one-trip loop, folded away under a live handle of the
    script); 0 when Mp has no such divisor. Scheduled dynamically, the tasks let threads of
    unequal speed end together: an MLP step's 256-row products in 128-row halves, the
    worker ran its halves 1.4-1.5x as long as the main thread (two vCPUs of unequal speed
    while both compute) and the main thread waited 23% of the step; in 16-row tasks (8 a
    thread) the step's median was 7-11% lower in five interleaved runs of six, 3% higher
    in one quiet one (Emerald Rapids KVM guest)."""
    target = max(2 * mr, Mp // (max(2, threads) * per_thread))
    fine = [d for d in range(2 * mr, min(target, Mp // 2) + 1, mr) if Mp % d == 0]
    return max(fine, default=0)


def _slowest_share(total: int, d: int, threads: int) -> int:
    """What the busiest of `threads` runs of `total` rows (or columns) cut into tasks of
    `d`: its whole tasks times `d`."""
    return _up(total // d, threads) // threads * d


def _even_split(total: int, step: int, threads: int) -> int:
    """Tasks of which multiple of `step` dividing `total` (at most total / threads) leave
    the busiest of `threads` the least to run, the largest of those; 0 where none does."""
    blocks = [d for d in range(step, total // threads + 1, step) if total % d == 0]
    return min(blocks, key=lambda d: (_slowest_share(total, d, threads), -d)) if blocks else 0


def split_remainders(op, p):
    """Cut matmul `op` into the part its mr x nr tile divides and the remainders:

        C[:Mm, :Nm] = A[:Mm] @ B[:, :Nm]      Mm = M - M % mr, Nm = N - N % nr
        C[:Mm, Nm:] = A[:Mm] @ B[:, Nm:]      (and the rows Mm: likewise)

    each a matmul on slices (A, B and C read and written in place, C's fill per piece),
    so no operand is copied into a padded one and C is not sliced out of a padded
    product: 1000^3 with 14x16 tiles padded A, B and C to 1008 (three 4 MB copies) and ran
    ~8% slower per flop than 1008^3. The remainder pieces (marked REMAINDER) are padded to
    their own tiles. An elementwise generic reading the whole product goes to each piece,
    on its slices (`matmul_epilogue.piece_epilogue`), for the tiled pieces to fuse.
    Returns the pieces, the divisible one first."""
    from mlir.dialects import linalg, tensor
    M, N, K = p["dims"]
    mr, nr = p["mr"], p["nr"]
    cut = lambda n, t: [(0, n - n % t), (n - n % t, n)] if n % t else [(0, n)]  # noqa: E731 (plan: n >= t)
    rows, cols = cut(M, mr), cut(N, nr)
    lead = [p["batch"]] if p["batch"] else []
    z = [0] * len(lead)
    a, b, init = op.operands[0], op.operands[1], op.operands[2]
    fill = defining_op(init)
    filled = fill is not None and fill.name == "linalg.fill"  # (each piece fills its slice)
    c = fill.operands[1] if filled else init
    c = _own_empty(c, op)
    maps = None
    if "indexing_maps" in op.attributes:
        maps = [ir.AffineMapAttr(x).value for x in ir.ArrayAttr(op.attributes["indexing_maps"])]

    def piece_of(v, offsets, sizes):
        t = ir.RankedTensorType.get(lead + sizes, ir.RankedTensorType(v.type).element_type)
        return tensor.ExtractSliceOp(t, v, [], [], [], z + offsets, lead + sizes, [1] * (len(lead) + 2)).result

    # an elementwise reader of the whole product goes to each piece (matmul_epilogue.py)
    e = epilogue.consumer(op.results[0]) if p.get("epilogues", True) else None
    if e is not None and not all(epilogue.available_at(x, op) for x in e.operands[:-1] if x != op.results[0]):
        e = None
    ci = next(i for i, x in enumerate(e.operands) if x == op.results[0]) if e is not None else None
    pieces = []
    with ir.InsertionPoint(op), op.location:
        # one slice of B per column range (and of A per row range): a row remainder finds
        # the B its divisible piece repacked by value (optimize_matmuls, `share_b`)
        bvs = {(c0, c1): piece_of(b, [0, c0], [K, c1 - c0]) for c0, c1 in cols}
        for r0, r1 in rows:
            av = (piece_of(a, [0, r0], [K, r1 - r0]) if p["transpose_a"] else piece_of(a, [r0, 0], [r1 - r0, K]))
            for c0, c1 in cols:
                bv = bvs[(c0, c1)]
                cv = piece_of(c, [r0, c0], [r1 - r0, c1 - c0])
                if filled:
                    cv = linalg.fill(fill.operands[0], outs=[cv])
                if p["batch"]:
                    r = linalg.batch_matmul(av, bv, outs=[cv])
                else:
                    r = linalg.matmul(av, bv, outs=[cv], indexing_maps=maps) if maps else linalg.matmul(av, bv, outs=[cv])
                new = defining_op(r)
                if (r0, c0) != (0, 0):
                    new.attributes[REMAINDER] = ir.UnitAttr.get()
                pieces.append(new)
                if e is not None:
                    r = epilogue.piece_epilogue(e, ci, r, [r0, c0])
                c = tensor.InsertSliceOp(r, c, [], [], [], z + [r0, c0], lead + [r1 - r0, c1 - c0],
                                         [1] * (len(lead) + 2)).result
    if e is not None:
        e.results[0].replace_all_uses_with(c)
        e.erase()
    op.results[0].replace_all_uses_with(c)
    op.erase()
    if filled and not list(fill.results[0].uses):
        fill.erase()
    return pieces


OWN = "__mirax_own_buffer"  # on a tensor.empty that CSE must not merge with its twins
_owned = [0]


def _own_empty(value, op):
    """`value` if it is not a `tensor.empty`; else a twin of that empty, placed before
    `op`, that CSE cannot merge back (a unique OWN attribute). The pieces of a split
    product write slices of C; CSE makes every empty tensor of a type one value, and
    when two products wrote slices of the same one, bufferization copied the slice
    (undefined contents, but it cannot tell through `extract_slice`) into a new buffer
    for the later product: four serial 252x512 copies in an MLP training step."""
    d = defining_op(value)
    if d is None or d.name != "tensor.empty" or len(d.operands):
        return value
    twin = d.clone(ir.InsertionPoint(op))
    _owned[0] += 1
    twin.attributes[OWN] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), _owned[0])
    return twin.results[0]


def _sizes(xs):
    return "[" + ", ".join(str(x) for x in xs) + "]"


def _handles(n):
    return "(!transform.any_op) -> (" + ", ".join(["!transform.any_op"] * n) + ")"


def op_script(i, name, p):
    """Transform IR (inside the named sequence, root %root) for the op `i`, handle `%m<i>`."""
    b = p["batch"] is not None
    lead = [0] if b else []
    M, N, _ = p["dims"]
    Mp, Np = p["pad"]
    h = f"%m{i}"
    s = []
    if (Mp, Np) != (M, N):
        # zero padding to whole micro tiles; the result is a slice of the padded product
        s.append(f"{h}p, %pad{i}, %copy{i} = transform.structured.pad {h} pad_to_multiple_of "
                 f"{_sizes([p['mr'], p['nr'], 1])} {{padding_values = "
                 f"[0.0 : f32, 0.0 : f32, 0.0 : f32], padding_dimensions = {_sizes(range(len(lead), len(lead) + 3))}, "
                 f'copy_back_op = "none"}} : {_handles(3)}')
        h = f"{h}p"
    # the producer of C (its zero fill; padded: the pad of it) moves into the parallel
    # loop: each task fills its rows, in parallel and while they are in cache. (Fusing
    # A's tensor.pad the same way leaves an i1 memref.store that MLIR 22's memref-to-llvm
    # asserts on.)
    # A C of the caller's (an accumulating product, a split product's slice), unpadded,
    # has no producer to move.
    fused = p["init_op"] or (Mp, Np) != (M, N)
    if fused:
        s.append(f"%fill{i} = transform.get_producer_of_operand {h}[2] : (!transform.any_op) -> !transform.any_op")
    forall_tiles = ([1] if b else []) + ([0, p["forall_n"]] if p.get("forall_n") else [p["forall_m"], 0])
    s.append(f"%t{i}a, %forall{i} = transform.structured.tile_using_forall {h} tile_sizes "
             f"{_sizes(forall_tiles)} : {_handles(2)}")
    fuse = ": (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)"
    if fused:
        s.append(f"%ff{i}, %forall{i}b = transform.structured.fuse_into_containing_op %fill{i} into "
                 f"%forall{i} {fuse}")
    # a cache tile as large as its dimension would make a one-trip loop, which the
    # canonicalization below folds away under a live handle: such dims are not tiled
    K = p["dims"][2]
    nc = p["nc"] if p["nc"] < (p.get("forall_n") or Np) else 0  # (within a task's columns)
    kc = p["kc"] if p["kc"] < K else 0
    s.append(_cache_loops(i, f"%t{i}a", f"%t{i}b", lead + [0, nc, kc], nc, kc))
    s.append(f"%t{i}c, %i{i}r, %j{i}r, %k{i}r = transform.structured.tile_using_for %t{i}b tile_sizes "
             f"{_sizes(lead + [p['mr'], p['nr'], 1])} : {_handles(4)}")
    s.append(f"transform.structured.vectorize %t{i}c {{create_named_contraction}} : !transform.any_op")
    return s + micro_kernel_tail(i, unit_dims=b, hoist=[f"%k{i}r"] + [f"%k{i}"] * bool(kc), every_loop=True)


def micro_kernel_tail(i, unit_dims: bool, hoist, every_loop: bool = False) -> list:
    """The script's end for op `i` after `vectorize`: canonicalize and CSE the function
    (constants must leave the loops for the hoisting), drop the unit dims of the
    contraction (before the hoisting, else C's tile travels through the k loop as a
    1 x mr x nr vector rebuilt by inserts each step: a padded 64x256^3 ran at a third of
    the speed), hoist C's register tile out of the k loops (read once before, written once
    after; `every_loop`: out of every loop of the function too, found anew after the
    canonicalization, which can replace a loop and empty its handle — op_script's
    products; packed_script's keep their handles' loops, whose structure skip_zero_fill
    reads), and lower the contraction to outer products (vector.fma)."""
    s = [f"%par{i} = transform.get_parent_op %k{i}r {{op_name = \"func.func\"}} : "
         f"(!transform.any_op) -> !transform.any_op",
         f"transform.apply_patterns to %par{i} {{\n"
         f"  transform.apply_patterns.canonicalization\n"
         f"  transform.apply_patterns.tensor.fold_tensor_subset_ops_into_vector_transfers\n"
         f"}} : !transform.any_op",
         f"transform.apply_cse to %par{i} : !transform.any_op"]
    if unit_dims:  # (own pattern set: mixed in with the others, it loops)
        s.append(f"transform.apply_patterns to %par{i} {{\n"
                 f"  transform.apply_patterns.vector.cast_away_vector_leading_one_dim\n"
                 f"}} : !transform.any_op")
    s += [f"transform.loop.hoist_loop_invariant_subsets {h} : !transform.any_op" for h in hoist]
    if every_loop:
        # ...and out of every loop of the kernel's function, found anew: the canonicalization
        # can replace a tiled loop, and its handle is then empty (a batched 48x16x48
        # attention product's %k handle held nothing there, and C's tile stayed in its k
        # loop, written every step: 12 stores an FMA step)
        s += [f"%loops{i} = transform.structured.match ops{{[\"scf.for\"]}} in %par{i} : "
              f"(!transform.any_op) -> !transform.any_op",
              f"transform.loop.hoist_loop_invariant_subsets %loops{i} : !transform.any_op"]
    s.append(f"transform.apply_patterns to %par{i} {{\n"
             f"  transform.apply_patterns.vector.lower_contraction lowering_strategy = \"outerproduct\"\n"
             f"  transform.apply_patterns.vector.transfer_permutation_patterns\n"
             f"  transform.apply_patterns.vector.lower_transpose\n"
             f"  transform.apply_patterns.vector.lower_broadcast\n"
             f"  transform.apply_patterns.vector.lower_outerproduct\n"
             f"}} : !transform.any_op")
    return s


def _linalg_producer(value):
    """The linalg op (C's fill, say) that defines `value`, which the script fuses into the
    parallel loop; None for anything else (an argument, a slice)."""
    op = defining_op(value)
    return op if op is not None and op.name.startswith("linalg.") else None


def _zero_filled(value) -> bool:
    """Whether `value` is a `linalg.fill` of 0.0 (a product that starts from zeros)."""
    op = defining_op(value)
    if op is None or op.name != "linalg.fill":
        return False
    c = defining_op(op.operands[0])
    return c is not None and c.name == "arith.constant" and str(c.attributes["value"]).startswith("0.0")


def _packed_text(p) -> str:
    """The packed form of one matmul as a function of (A, B): B repacked into nr-wide
    panels, [N/nr][K][nr], so the micro kernel reads B contiguously (the plain layout
    reads it with B's row stride: on 4 KiB multiples every row maps to the same L1
    sets, and each k step touches a new page); C is the same bytes as [M][N/nr][nr]
    ([M/mr][mr][N/nr][nr] with A packed), a view of a 2-d tensor: bufferized, the
    product writes the caller's buffer (a C of its own, collapsed, was copied into it:
    a 64 MiB copy and 64 MiB of page faults a call at 4096x4096). A batched product has
    the batch dim first in each (B's panels [L][N/nr][K][nr]; A is not repacked)."""
    M, N, K = p["dims"]
    Mp, Np = p["pad"]
    nr, N1 = p["nr"], p["pad"][1] // p["nr"]
    L = [p["batch"]] if p["batch"] else []
    o = len(L)  # (the first dim after the batch)
    t = lambda *dims: "tensor<" + "x".join(str(d) for d in L + list(dims)) + "xf32>"  # noqa: E731
    zeros = lambda n: "[" + ", ".join(["0"] * (n + o)) + "]"  # noqa: E731
    high = lambda *dims: "[" + ", ".join(["0"] * o + [str(d) for d in dims]) + "]"  # noqa: E731
    groups = lambda *gs: "[" + ", ".join(["[0]"] * o + ["[" + ", ".join(str(i + o) for i in g) + "]" for g in gs]) + "]"  # noqa: E731
    perm = lambda *ds: "[" + ", ".join([str(i) for i in range(o)] + [str(i + o) for i in ds]) + "]"  # noqa: E731
    a_t = t(K, M) if p["transpose_a"] else t(M, K)
    ap_t = t(K, Mp) if p["transpose_a"] else t(Mp, K)
    idx = ", ".join(f"%i{d}: index" for d in range(o + 2))
    pad = (f"^bb0({idx}):\n    %zz = arith.constant 0.0 : f32\n    tensor.yield %zz : f32\n  }}")
    given = p.get("given_b") is not None  # B's panels from the divisible piece (a row remainder)
    bp_arg = f", %bp: {t(N1, K, nr)}" if given else ""
    # B stored K x N, or N x K (transpose_b, x @ W.T): its panels are nr-column blocks of
    # it, or nr-row blocks of it transposed
    tb = p.get("transpose_b")
    b_t, bq_t = (t(N, K), t(Np, K)) if tb else (t(K, N), t(K, Np))
    lines = [f"func.func @packed(%a: {a_t}, %b: {b_t}, %cd: {t(M, N)}{bp_arg}) -> {t(M, N)} {{",
             "  %z = arith.constant 0.0 : f32"]
    a = "%a"
    if Mp != M:
        hi = high(0, Mp - M) if p["transpose_a"] else high(Mp - M, 0)
        lines.append(f"  %ap = tensor.pad %a low{zeros(2)} high{hi} {{\n  {pad} : {a_t} to {ap_t}")
        a = "%ap"
    b = "%b"
    if not given:
        if Np != N:
            hi = high(Np - N, 0) if tb else high(0, Np - N)
            lines.append(f"  %bq = tensor.pad %b low{zeros(2)} high{hi} {{\n  {pad} : {b_t} to {bq_t}")
            b = "%bq"
        b3, b3_groups, b_perm = (([N1, nr, K], groups([0, 1], [2]), perm(0, 2, 1)) if tb
                                 else ([K, N1, nr], groups([0], [1, 2]), perm(1, 0, 2)))
        lines += [f"  %b3 = tensor.expand_shape {b} {b3_groups} output_shape {L + b3} : {bq_t} into {t(*b3)}",
                  f"  %eb = tensor.empty() : {t(N1, K, nr)}",
                  f"  %bp = linalg.transpose ins(%b3 : {t(*b3)}) outs(%eb : {t(N1, K, nr)}) permutation = {b_perm}"]
    lead = "l, " * o
    if p.get("pack_a"):
        # A too, into mr-row panels [M/mr][K][mr]: the micro kernel reads its mr values of
        # a k step from one cache line (row-major A reads them from mr rows, which on
        # 4 KiB-multiple strides share one L1 set: more than 8 rows thrash it)
        mr, M1 = p["mr"], Mp // p["mr"]
        if p["transpose_a"]:
            lines.append(f"  %a3 = tensor.expand_shape {a} {groups([0], [1, 2])} output_shape {L + [K, M1, mr]} : "
                         f"{ap_t} into {t(K, M1, mr)}")
            a_perm, a3_t = perm(1, 0, 2), t(K, M1, mr)
        else:
            lines.append(f"  %a3 = tensor.expand_shape {a} {groups([0, 1], [2])} output_shape {L + [M1, mr, K]} : "
                         f"{ap_t} into {t(M1, mr, K)}")
            a_perm, a3_t = perm(0, 2, 1), t(M1, mr, K)
        a, ap_t = "%apk", t(M1, K, mr)
        lines += [f"  %ea = tensor.empty() : {ap_t}",
                  f"  %apk = linalg.transpose ins(%a3 : {a3_t}) outs(%ea : {ap_t}) permutation = {a_perm}"]
        dims, amap, cmap = f"({lead}b, m1, m, n, k)", f"({lead}m1, k, m)", f"({lead}m1, m, b, n)"
        c_shape, c_groups = [M1, mr, N1, nr], groups([0, 1], [2, 3])
    else:
        dims = f"({lead}b, m, n, k)"
        amap, cmap = (f"({lead}k, m)" if p["transpose_a"] else f"({lead}m, k)"), f"({lead}m, b, n)"
        c_shape, c_groups = [Mp, N1, nr], groups([0], [1, 2])
    c_t = t(*c_shape)
    # C's own destination (%cd: what the product's zero fill filled) unless padded: a
    # split product's piece is a slice of the caller's C, which a new tensor.empty would
    # copy into (bufferization does not see through the expand_shape)
    dest = "%cd"
    if (Mp, Np) != (M, N):
        lines.append(f"  %e2 = tensor.empty() : {t(Mp, Np)}")
        dest = "%e2"
    lines += [f"  %e = tensor.expand_shape {dest} {c_groups} output_shape {L + c_shape} : {t(Mp, Np)} into {c_t}",
              f"  %f = linalg.fill ins(%z : f32) outs(%e : {c_t}) -> {c_t}",
              f"  %r = linalg.contract indexing_maps = [affine_map<{dims} -> {amap}>, "
              f"affine_map<{dims} -> ({lead}b, k, n)>, affine_map<{dims} -> {cmap}>]",
              f"       ins({a}, %bp : {ap_t}, {t(N1, K, nr)}) outs(%f : {c_t}) -> {c_t}",
              f"  %c = tensor.collapse_shape %r {c_groups} : {c_t} into {t(Mp, Np)}"]
    out = "%c"
    if (Mp, Np) != (M, N):
        lines.append(f"  %s = tensor.extract_slice %c{zeros(2)} {L + [M, N]} {[1] * (o + 2)} : {t(Mp, Np)} to {t(M, N)}")
        out = "%s"
    lines += [f"  return {out} : {t(M, N)}", "}"]
    return "\n".join(lines)


def share_b(op, p, panels, main) -> bool:
    """Make plan `p` of a split product's row remainder `op` read the B panels `panels`
    that its divisible piece (plan `main`) repacked, when they fit: the same panel width
    and columns, C zero-filled. Its few rows cannot share the work by rows, so the
    threads split the panels (`forall_b`), and K is not sliced (its C tile stays in
    registers throughout). Left alone, a 4-row remainder of 1024^3 read B with its 4 KiB
    row stride (each k step in the same L1 set, B streamed from L3): 3.4% of the
    product's samples for 0.4% of its multiply-adds (AVX2, Zen 4)."""
    _, N, K = p["dims"]
    if (p["batch"] is not None or p["nr"] != main["nr"] or (N, K) != main["dims"][1:]
            or not _zero_filled(op.operands[2])):
        return False
    threads = p.get("threads", 1)
    forall_b = _even_split(p["pad"][1] // p["nr"], 1, threads) if threads > 1 else 0
    p.update(pack=True, pack_a=False, rows_outer=False, given_b=panels, forall_b=forall_b,
             forall_m=p["pad"][0], forall_n=0, kc=K)
    return True


def pack_b(op, p):
    """Replace matmul `op` by its packed form (`_packed_text`), built in place; returns
    the linalg.contract to tile."""
    tmp = ir.Module.parse(_packed_text(p))  # kept alive while its ops are cloned
    block = tmp.body.operations[0].operation.regions[0].blocks[0]
    mapping = {block.arguments[0]: op.operands[0], block.arguments[1]: op.operands[1],
               block.arguments[2]: defining_op(op.operands[2]).operands[1]}  # (C zero-filled: plan)
    if p.get("given_b") is not None:
        mapping[block.arguments[3]] = p["given_b"]
    contract = result = None
    for src in list(block.operations):
        src = src.operation
        if src.name == "func.return":
            result = mapping[src.operands[0]]
            break
        new = clone_mapped(src, mapping, ir.InsertionPoint(op))
        if new.name == "linalg.contract":
            contract = new
        # the repackings and the zero fill of C (unless each task fills its own rows), left
        # serial, were ~10% of a 1024^3 product on 2 threads (Amdahl): mirax-parallelize
        # splits them whatever their size
        shared = new.name == "linalg.transpose" or (new.name == "linalg.fill" and not _fuses_fill(p))
        if shared and p.get("threads", 1) > 1 and not _fuses_b_pack(p):
            new.attributes[PARALLEL] = ir.UnitAttr.get()
    a_pack = defining_op(contract.operands[0])
    if _fuses_a_pack(p) and PARALLEL in a_pack.attributes:  # each task repacks its own rows of A
        del a_pack.attributes[PARALLEL]
    fill = op.operands[2].owner
    op.results[0].replace_all_uses_with(result)
    op.erase()
    fill = fill.operation if hasattr(fill, "operation") else fill
    if not list(fill.results[0].uses):
        fill.erase()
    return contract


def _cache_loops(i, handle, out, tile_sizes, n_tile, k_tile) -> str:
    """The script line tiling `handle` into its n-block and k-slice loops (`%n<i>`,
    `%k<i>`: those whose tile is nonzero), the tiled op named `out`; a cast when neither."""
    loops = [f"%n{i}"] * bool(n_tile) + [f"%k{i}"] * bool(k_tile)
    if not loops:
        return f"{out} = transform.cast {handle} : !transform.any_op to !transform.any_op"
    line = (f"{out}, {', '.join(loops)} = transform.structured.tile_using_for {handle} tile_sizes "
            f"{_sizes(tile_sizes)} : {_handles(1 + len(loops))}")
    if k_tile:  # (skip_zero_fill finds the slice loop by this mark, not by its bounds)
        line += f"\ntransform.annotate %k{i} \"{K_SLICE}\" : !transform.any_op"
    return line


def _fuses_fill(p) -> bool:
    """Whether packed_script fuses C's zero fill into the threads' loop (each task fills
    its own part of C, in cache)."""
    return bool(p.get("rows_outer") or p.get("forall_b"))


def _fuses_a_pack(p) -> bool:
    """Whether packed_script fuses A's repacking into the threads' loop over rows."""
    return bool(p.get("pack") and p.get("pack_a") and p.get("rows_outer"))


def _fuses_b_pack(p) -> bool:
    """Whether packed_script fuses B's repacking into the threads' loop: a batched
    product's tasks are its products, each repacking its own B (and filling its C)."""
    return bool(p.get("pack") and p.get("batch"))


def packed_script(i, p):
    """Transform IR for the packed product marked `i`: GotoBLAS's loop order. For each
    nc-wide block of B's panels and kc-deep slice of K (a packed block that stays in L2),
    the threads split the rows of C (scf.forall -> OpenMP), each running mr x nr
    register tiles over the block (vector.fma outer products, C's tile in registers).
    Handle `%m<i>`."""
    K = p["dims"][2]
    nb = p["nc"] // p["nr"] if p["nc"] < p["pad"][1] else 0
    kc = p["kc"] if p["kc"] < K else 0
    fuse = ": (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)"
    if p.get("pack_a"):  # dims (b, m1, m, n, k): m1 counts A's mr-row panels
        cache, forall, micro = [nb, 0, 0, 0, kc], [0, p["forall_m"] // p["mr"], 0, 0, 0], [1, 1, 0, 0, 1]
    elif p.get("batch"):  # dims (l, b, m, n, k): l the batch
        cache, forall, micro = [0, nb, 0, 0, kc], [1, 0, 0, 0, 0], [1, 1, p["mr"], 0, 1]
    else:  # dims (b, m, n, k)
        cache, forall, micro = [nb, 0, 0, kc], [0, p["forall_m"], 0, 0], [1, p["mr"], 0, 1]
    if _fuses_b_pack(p):
        # the threads split the batch, each task zero-filling its C and repacking its B
        # (into L2, where the products of its n-blocks and k-slices read it)
        s = [f"%fill{i} = transform.get_producer_of_operand %m{i}[2] : (!transform.any_op) -> !transform.any_op",
             f"%pb{i} = transform.get_producer_of_operand %m{i}[1] : (!transform.any_op) -> !transform.any_op",
             f"%t{i}a, %forall{i} = transform.structured.tile_using_forall %m{i} tile_sizes "
             f"{_sizes(forall)} : {_handles(2)}",
             f"%ff{i}, %forall{i}b = transform.structured.fuse_into_containing_op %fill{i} into %forall{i} {fuse}",
             f"%fb{i}, %forall{i}c = transform.structured.fuse_into_containing_op %pb{i} into %forall{i}b {fuse}",
             # its panels a buffer of the task's own (a slice of an empty tensor is an
             # empty tensor), not a slice of one for the whole batch
             f"transform.apply_patterns to %forall{i}c {{\n  transform.apply_patterns.tensor.fold_tensor_empty\n"
             f"}} : !transform.any_op",
             _cache_loops(i, f"%t{i}a", f"%t{i}b", cache, nb, kc)]
    elif p.get("forall_b"):
        # a row remainder on its divisible piece's B panels: too few rows to share, so
        # the threads split the panels, each zero-filling its columns of C
        forall = [p["forall_b"], 0, 0, 0]
        s = [f"%fill{i} = transform.get_producer_of_operand %m{i}[2] : (!transform.any_op) -> !transform.any_op",
             f"%t{i}a, %forall{i} = transform.structured.tile_using_forall %m{i} tile_sizes "
             f"{_sizes(forall)} : {_handles(2)}",
             f"%ff{i}, %forall{i}b = transform.structured.fuse_into_containing_op %fill{i} into %forall{i} {fuse}",
             _cache_loops(i, f"%t{i}a", f"%t{i}b", [0, 0, 0, kc], 0, kc)]
    elif p.get("rows_outer"):
        # the threads split C's rows first, each zero-filling its own rows (in cache) and
        # running the n-blocks and k-slices over them; each repacks its own rows of A
        # there too (no parallel region of its own, no barrier before the products)
        s = [f"%fill{i} = transform.get_producer_of_operand %m{i}[2] : (!transform.any_op) -> !transform.any_op"]
        if _fuses_a_pack(p):
            s.append(f"%pa{i} = transform.get_producer_of_operand %m{i}[0] : (!transform.any_op) -> !transform.any_op")
        s += [f"%t{i}a, %forall{i} = transform.structured.tile_using_forall %m{i} tile_sizes "
              f"{_sizes(forall)} : {_handles(2)}",
              f"%ff{i}, %forall{i}b = transform.structured.fuse_into_containing_op %fill{i} into %forall{i} {fuse}"]
        if _fuses_a_pack(p):
            s.append(f"%fa{i}, %forall{i}c = transform.structured.fuse_into_containing_op %pa{i} into %forall{i}b {fuse}")
        s.append(_cache_loops(i, f"%t{i}a", f"%t{i}b", cache, nb, kc))
    else:
        s = [_cache_loops(i, f"%m{i}", f"%t{i}a", cache, nb, kc),
             f"%t{i}b, %forall{i} = transform.structured.tile_using_forall %t{i}a tile_sizes "
             f"{_sizes(forall)} : {_handles(2)}"]
    loops = [f"%l{i}r"] * bool(p.get("batch") and not p.get("pack_a")) + [f"%i{i}r", f"%j{i}r", f"%k{i}r"]
    s.append(f"%t{i}c, {', '.join(loops)} = transform.structured.tile_using_for %t{i}b tile_sizes "
             f"{_sizes(micro)} : {_handles(1 + len(loops))}")
    s.append(f"transform.structured.vectorize %t{i}c {{create_named_contraction}} : !transform.any_op")
    return s + micro_kernel_tail(i, unit_dims=True, hoist=[f"%k{i}r"])


def build_script(items):
    """The transform module for [(index, op name, plan)]: the marked ops (one in each
    kernel function, in order: see `_outline`) matched once and split into a handle
    `%m<i>` each (a match per op would walk the whole module per op), then each op's
    transforms."""
    body = [f"%marked = transform.structured.match attributes{{{MARK}}} in %root : "
            "(!transform.any_op) -> !transform.any_op",
            f"{', '.join(f'%m{i}' for i, _, _ in items)} = transform.split_handle %marked : {_handles(len(items))}"]
    for i, name, p in items:
        body += packed_script(i, p) if p.get("pack") else op_script(i, name, p)
    return transform_script(body)


def matmul_ops(module):
    root = module.operation if hasattr(module, "operation") else module
    return _walk(root, "linalg.matmul") + _walk(root, "linalg.batch_matmul")


def _fold_transposed_operand(root, config, which: int, dims) -> int:
    """Operand `which` of each default-layout linalg.matmul that is a 2-d
    `linalg.transpose`, read in place instead: one linalg.matmul on the transpose's
    input with `dims` ((i, j) of A, B, C over (m, n, k)) as its indexing maps, where the
    plan takes it. Returns how many were folded."""
    from mlir.dialects import linalg
    folded = 0
    for op in _walk(root, "linalg.matmul"):
        if "indexing_maps" in op.attributes and str(op.attributes["indexing_maps"]) != DEFAULT_MAPS:
            continue
        t = defining_op(op.operands[which])
        if not is_transpose_2d(t):
            continue
        maps = [ir.AffineMap.get(3, 0, [ir.AffineDimExpr.get(i), ir.AffineDimExpr.get(j)]) for i, j in dims]
        ins = [op.operands[0], op.operands[1]]
        ins[which] = t.operands[0]
        with ir.InsertionPoint(op), op.location:
            new = linalg.matmul(*ins, outs=[op.operands[2]], indexing_maps=maps)
        new_op = defining_op(new)
        if plan(new_op, config) is None:
            new_op.erase()
            continue
        op.results[0].replace_all_uses_with(new)
        op.erase()
        if not list(t.results[0].uses):
            t.erase()
        folded += 1
    return folded


def fold_transposed_a(root, config=None) -> int:
    """`linalg.matmul(linalg.transpose(x), b)` -> one linalg.matmul reading x transposed
    (`indexing_maps` (k, m), (k, n), (m, n)), for the matmuls this code generator takes:
    the micro kernel reads A's mr values of each k step contiguously from x, and the
    transpose's copy goes (a gradient's `x.T @ g`). Returns how many were folded."""
    return _fold_transposed_operand(root, config, 0, ((2, 0), (2, 1), (0, 1)))


def fold_transposed_b(root, config=None) -> int:
    """`linalg.matmul(a, linalg.transpose(w))` -> one linalg.matmul reading w (N x K)
    transposed (`indexing_maps` (m, k), (n, k), (m, n)), whose B panels are repacked
    from w's layout: `x @ W.T` (MLX's Linear) without its transpose's copy (256x784 @
    784x512 of an MLP step 5%, 256x512 @ 512x512 10% faster, Emerald Rapids). Only where
    the plan repacks B (a zero-filled C), else the transpose stays. Returns how many
    were folded."""
    return _fold_transposed_operand(root, config, 1, ((0, 2), (1, 2), (0, 1)))


def fold_transposed_products(root, config=None) -> int:
    """`linalg.transpose(x.T @ g)` -> `g.T @ x`, both read in place: a weight's gradient
    through `y = x @ W.T` (MLX's Linear) is the transpose of `x.T @ g`, which the vjp
    wrote as a product (A read transposed: fold_transposed_a) and then a transpose of
    its result; as the product of the swapped operands (g read transposed, x as it is)
    it comes out in W's layout, and the transpose's copy goes (512x784 and 512x512 a
    step of the MLP benchmark). Returns how many were folded."""
    from mlir.dialects import linalg, tensor
    folded = 0
    for t in _walk(root, "linalg.transpose"):
        if not is_transpose_2d(t):
            continue
        mm = defining_op(t.operands[0])
        if mm is None or mm.name != "linalg.matmul" or len(list(mm.results[0].uses)) != 1:
            continue
        if "indexing_maps" not in mm.attributes or str(mm.attributes["indexing_maps"]) != TRANSPOSED_A:
            continue
        fill = defining_op(mm.operands[2])
        if fill is None or fill.name != "linalg.fill":
            continue  # (an accumulating product: its C is not in the transposed layout)
        x, g = mm.operands[0], mm.operands[1]  # C = x.T @ g: x is K x M, g is K x N
        out_t = ir.RankedTensorType(t.results[0].type)
        with ir.InsertionPoint(t), t.location:
            e = tensor.EmptyOp(list(out_t.shape), out_t.element_type)
            f = linalg.fill(fill.operands[0], outs=[e.result])
            new = linalg.matmul(g, x, outs=[f], indexing_maps=[ir.AffineMapAttr(m).value for m in
                                                             ir.ArrayAttr(mm.attributes["indexing_maps"])])
        new_op = defining_op(new)
        if plan(new_op, config) is None:  # (left to the generic lowering, the transpose is cheaper)
            new_op.erase()
            defining_op(f).erase()
            e.operation.erase()
            continue
        t.results[0].replace_all_uses_with(new)
        t.erase()
        mm.erase()
        if not list(fill.results[0].uses):
            fill.erase()
        folded += 1
    return folded


KERNEL = "__mirax_matmul_kernel_"  # the functions the ops are tiled in (see _outline)
CLEAN = "__mirax_matmul_clean"       # on the functions they came from


def _outline(root, op, i, p=None):
    """Move matmul `op` (marked `i`) and the producer of its init (C's zero fill, which
    the script fuses into the parallel loop) into a private function of their own, called
    in their place: `func.call @__mirax_matmul_kernel_<i>(A, B, ...)`. Returns the call.
    With A repacked and the threads' rows outermost (plan `p`), A's repacking comes along
    too: the script fuses it into the threads' loop (`packed_script`).

    The script then tiles, vectorizes and cleans up each op in its small function: the
    transform ops are local, but several of them cost the size of the nearest function
    around their target (`fuse_into_containing_op` prints its targets into a diagnostic,
    which verifies and numbers that whole function; canonicalization and CSE run over
    it), so in the step's one big function, with ~25 matmuls per layer, the script cost
    (matmuls x function size): 8 of the 12 s of a 4-layer training step's MLIR pipeline.
    Constants and `tensor.empty` come along as copies (what canonicalization sees of them
    stays the same); other values outside come in as arguments."""
    from mlir.dialects import func
    init = _linalg_producer(op.operands[len(op.operands) - 1])  # (a slice of C stays where it is)
    group = ([init] if init is not None else []) + [op]
    if p is not None and _fuses_a_pack(p):
        group.insert(0, defining_op(op.operands[0]))
    if p is not None and _fuses_b_pack(p):
        group.insert(0, defining_op(op.operands[1]))
    top = op.parent
    while top.name != "func.func":
        top = top.parent
    top.attributes[CLEAN] = ir.UnitAttr.get()
    copies, args = outside_values(group)
    result = op.results[0]
    module_body = root.regions[0].blocks[0]
    with ir.InsertionPoint(module_body), op.location:
        f = func.FuncOp(f"{KERNEL}{i}", ([v.type for v in args], [result.type]), visibility="private")
    entry = f.add_entry_block()
    local = {v: a for v, a in zip(args, entry.arguments)}
    with ir.InsertionPoint(entry):
        for v in copies:
            local[v] = defining_op(v).clone().results[0]
        for g in group:
            clone_mapped(g, local)
        func.ReturnOp([local[result]])
    with ir.InsertionPoint(op), op.location:
        call = func.CallOp([result.type], ir.FlatSymbolRefAttr.get(f"{KERNEL}{i}"), args)
    result.replace_all_uses_with(call.results[0])
    op.erase()
    for g in reversed(group[:-1]):  # (C's fill, A's repacking: used by nothing else)
        if all(not list(r.uses) for r in g.results):
            g.erase()
    return call.operation, f.operation



def drop_zero_slice_guards(root):
    """Each `scf.if %empty { tensor.generate } else { tensor.pad (extract_slice) }` that
    tiling a `tensor.pad` leaves (upstream's guard for a task whose slice of the source
    is empty) becomes its else branch, which computes the same tensor then too (its
    offsets are clamped into bounds, and an empty slice padded is all padding).

    The result of an scf.if bufferizes to a fully dynamic layout (`strided<[?, ?],
    offset: ?>`), so the register tile's `vector.transfer_read` of C lowered to a scalar
    loop per row: the transformer's logits products ((1536x64)@(64x24), padded) read
    their 14x32 tiles element by element, and each kernel cost 0.19 s of LLVM time."""
    for guard in walk_ops(root, lambda n: n == "scf.if"):
        if len(guard.results) != 1 or len(guard.regions) != 2 or not len(guard.regions[1].blocks):
            continue
        then = [o.operation.name for o in guard.regions[0].blocks[0].operations]
        if then != ["tensor.generate", "scf.yield"]:
            continue
        body = [o.operation for o in guard.regions[1].blocks[0].operations]
        if not any(o.name == "tensor.pad" for o in body):
            continue
        for o in body[:-1]:
            o.move_before(guard)
        guard.results[0].replace_all_uses_with(body[-1].operands[0])
        guard.erase()


def _defined_in(value, loop) -> bool:
    """Whether `value` is defined inside `loop` (a result of an op nested in it, or an
    argument of a block of its regions)."""
    owner = value.owner
    op = owner.owner if isinstance(owner, ir.Block) else owner
    return within(getattr(op, "operation", op), loop)


def _window_copy(value) -> bool:
    """Whether `value` is (a slice or reshape of) a `linalg.generic` that only copies its
    input: the rows of a convolution's window copy (dialect/conv.py `_im2col_products`),
    through the barrier that keeps the product a matmul."""
    seen = 0
    op = defining_op(value)
    while op is not None and seen < 8 and op.name in (
            "tensor.extract_slice", "tensor.collapse_shape", "tensor.expand_shape", "mirax.optimization_barrier"):
        op, seen = defining_op(op.operands[0]), seen + 1
    if op is None or op.name != "linalg.generic" or len(op.regions[0].blocks) != 1:
        return False
    ops = body_ops(op)  # (plain operations: no import of the linalg dialect's Python package)
    return (len(ops) == 1 and ops[0].name == "linalg.yield" and len(ops[0].operands) == 1
            and ops[0].operands[0] == op.regions[0].blocks[0].arguments[0])


def hoist_invariant_packs(root) -> int:
    """Move the repackings of operands that do not change in a `scf.for` out of it (out
    of every enclosing one they do not depend on), with their `tensor.empty` and the
    reshapes of their input: a convolution's window-copy chunks (dialect/conv.py) each
    multiply by the same weights, whose panels were packed again in every chunk (a 1-d
    convolution: 128 chunks, 128 packings of a 640 x 128 weight and as many parallel
    regions). Loops over threads (`scf.forall`) keep theirs: there each task packs its
    own part. Returns how many moved."""
    moved = 0
    for t in walk_ops(root, lambda n: n == "linalg.transpose"):
        while True:
            loop = t.parent
            if loop is None or loop.name != "scf.for":
                break
            src, init = t.operands[0], t.operands[1]
            chain = []
            reshape = defining_op(src)
            if _defined_in(src, loop):
                if reshape is None or reshape.name not in ("tensor.expand_shape", "tensor.collapse_shape") \
                        or len(reshape.operands) != 1 or _defined_in(reshape.operands[0], loop):
                    break
                chain.append(reshape)
            empty = defining_op(init)
            if empty is None or empty.name != "tensor.empty" or len(empty.operands) or \
                    len(list(init.uses)) != 1:
                break
            for op in chain + [empty, t]:
                op.move_before(loop)
            moved += 1
    return moved


def fold_padded_fills(root):
    """A task's padded block of C as a fill of its own: `tensor.pad(extract_slice(fill v))`
    padded with v becomes `fill v` of the padded shape, so the tasks of a padded product
    no longer read their rows of a zero-filled C (one write and one read of C less)."""
    from mlir.dialects import linalg, tensor
    with root.context, ir.Location.unknown():
        for pad in walk_ops(root, lambda n: n == "tensor.pad"):
            sl = defining_op(pad.operands[0])
            if sl is None or sl.name != "tensor.extract_slice":
                continue
            fill = defining_op(sl.operands[0])
            if fill is None or fill.name != "linalg.fill":
                continue
            yielded = list(pad.regions[0].blocks[0].operations)[-1].operands[0]
            if yielded != fill.operands[0]:  # (the same constant, after CSE)
                continue
            t = ir.RankedTensorType(pad.results[0].type)
            if not t.has_static_shape:
                continue
            with ir.InsertionPoint(pad), pad.location:
                e = tensor.EmptyOp(list(t.shape), t.element_type)
                f = linalg.fill(fill.operands[0], outs=[e.result])
            pad.results[0].replace_all_uses_with(f)
            pad.erase()
            if not list(sl.results[0].uses):
                sl.erase()
                if not list(fill.results[0].uses):
                    fill.erase()


def parallel_padding(root):
    """The copies that padding adds around a product, split over the threads.

    Padding to whole register tiles (`transform.structured.pad`) leaves a `tensor.pad` of
    an operand and an `extract_slice` of the padded product, each a serial copy after
    bufferization: for 1000^3 on 2 threads (B padded to 1024 columns, C sliced back) ~20
    MB of serial memory traffic beside ~10 ms of parallel work. A zero `tensor.pad`
    becomes a `linalg.copy` of the source into the padded buffer plus zero fills of the
    margins, and a returned slice of a larger tensor a `linalg.copy`; the copies are
    marked for mirax-parallelize (`PARALLEL`), and bufferization writes them in place.

        %p = tensor.pad %b low[0, 0] high[0, 24] {yield 0.0} : 1000x1000 to 1000x1024
      becomes
        %e = tensor.empty() : tensor<1000x1024xf32>
        %c = linalg.copy {mirax.parallel} ins(%b) outs(extract_slice %e[0, 0] [1000, 1000])
        %i = tensor.insert_slice %c into %e[0, 0] [1000, 1000]
        %z = linalg.fill ins(0.0) outs(extract_slice %i[0, 1000] [1000, 24])
        %p = tensor.insert_slice %z into %i[0, 1000] [1000, 24]
    """
    from mlir.dialects import linalg, tensor
    with root.context, ir.Location.unknown():
        for fn in _walk(root, "func.func"):
            for op in [o.operation for o in fn.regions[0].blocks[0].operations]:
                if op.name == "tensor.pad" and _large(op.results[0]):
                    _pad_as_copies(op)
                elif op.name == "func.return":
                    for i, v in enumerate(op.operands):
                        d = defining_op(v)
                        if d is None or d.name != "tensor.extract_slice" or len(list(v.uses)) != 1 or not _large(v):
                            continue
                        t = ir.RankedTensorType(v.type)
                        with ir.InsertionPoint(op):
                            e = tensor.EmptyOp(list(t.shape), t.element_type)
                            c = linalg.copy(v, outs=[e.result])
                        c.owner.attributes[PARALLEL] = ir.UnitAttr.get()
                        op.operands[i] = c


def _pad_as_copies(pad):
    from mlir.dialects import linalg, tensor
    src_t, dst_t = ir.RankedTensorType(pad.operands[0].type), ir.RankedTensorType(pad.results[0].type)
    if not (src_t.has_static_shape and dst_t.has_static_shape) or len(pad.operands) != 1:
        return  # (dynamic low/high operands)
    low = list(ir.DenseI64ArrayAttr(pad.attributes["static_low"]))
    if any(low):
        return
    yielded = list(pad.regions[0].blocks[0].operations)[-1].operands[0]
    owner = defining_op(yielded)
    if owner is None or owner.name != "arith.constant":
        return  # (a padding value computed from the indices)
    src, dst = list(src_t.shape), list(dst_t.shape)
    r = len(src)
    with ir.InsertionPoint(pad), pad.location:
        fill_value = owner.clone().results[0] if within(owner, pad) else yielded
        e = tensor.EmptyOp(dst, dst_t.element_type).result
        window = tensor.extract_slice(ir.RankedTensorType.get(src, dst_t.element_type), e, [], [], [],
                                      [0] * r, src, [1] * r)
        c = linalg.copy(pad.operands[0], outs=[window])
        c.owner.attributes[PARALLEL] = ir.UnitAttr.get()
        acc = tensor.insert_slice(c, e, [], [], [], [0] * r, src, [1] * r)
        for d in range(r):
            if dst[d] == src[d]:
                continue
            offs = [src[d] if k == d else 0 for k in range(r)]
            sizes = [dst[d] - src[d] if k == d else (src[k] if k < d else dst[k]) for k in range(r)]
            part_t = ir.RankedTensorType.get(sizes, dst_t.element_type)
            part = tensor.extract_slice(part_t, acc, [], [], [], offs, sizes, [1] * r)
            z = linalg.fill(fill_value, outs=[part])
            acc = tensor.insert_slice(z, acc, [], [], [], offs, sizes, [1] * r)
    pad.results[0].replace_all_uses_with(acc)
    pad.erase()


def _large(value) -> bool:
    """A tensor of static shape large enough for its copy to run on the threads: at least
    the tuning table's `parallel_min_elements` for copies and fills (derived from the
    host's L2, or measured); smaller ones stay serial (a thread start costs more)."""
    t = ir.RankedTensorType(value.type)
    return t.has_static_shape and math.prod(t.shape) >= tuning.table()["other"]["parallel_min_elements"]


K_SLICE = "__mirax_k_slice"  # the scf.for over K's kc-deep slices (_cache_loops marks it)


def _k_slice_loop(op) -> bool:
    """Whether scf.for `op` is the loop over K's kc-deep slices. By its mark, not its
    bounds: with N == K and nc == kc the loop over C's n-blocks has the same bounds (0 to
    K step kc), and 1024^3 in 512 x 512 blocks started its tiles from zeros in the first
    n-block instead of the first slice (NaN where C's buffer held them)."""
    return K_SLICE in op.attributes


def skip_zero_fill(kernel, kc: int, k: int) -> int:
    """A tiled kernel's register tiles start from zeros instead of reading C's zero fill,
    and the fill goes: C is then never read before it is written (4096x4096x1024: a 64
    MiB fill and its read-back saved; a transformer step's 1536x64 products: their fills
    were 5% of its samples; an MLP step's products over 784 or 256 in 128-deep slices:
    `memset` was 3% of its samples). Where K is split into slices (`kc` < `k`), a tile
    starts from zeros in the first slice only (`scf.if` on the slice loop's index) and
    reads what the earlier slices wrote in the others. The C reads are found by following
    the fill's value through scf.for iter_args, scf.forall shared outs and
    extract_slices to the transfer_reads that start a loop's accumulator. Returns how
    many reads became zeros (or zeros in the first slice)."""
    from mlir.dialects import arith, scf
    from .pass_base import user_op
    sliced = kc < k
    done = 0
    for fill in walk_ops(kernel, lambda n: n == "linalg.fill"):
        if not _zero_constant(fill.operands[0]):
            continue
        # (value, the K-slice loop whose iter_arg it is or is inside of, or None)
        reads, todo, ok = [], [(fill.results[0], None)], True
        while todo and ok:
            v, kloop = todo.pop()
            for use in v.uses:
                u, n = user_op(use), use.operand_number
                if u.name == "scf.for" and n >= 3:  # an init: follow the iter_arg
                    inner = u if sliced and kloop is None and _k_slice_loop(u) else kloop
                    todo.append((u.regions[0].blocks[0].arguments[n - 2], inner))
                elif u.name == "scf.forall" and n >= len(u.operands) - len(u.results):  # a shared out
                    args = u.regions[0].blocks[0].arguments
                    todo.append((args[len(args) - len(u.operands) + n], kloop))
                elif u.name == "tensor.extract_slice" and n == 0:
                    todo.append((u.results[0], kloop))
                elif u.name == "vector.transfer_read" and n == 0:
                    r = u.results[0]
                    ok = all(user_op(x).name == "scf.for" for x in r.uses)  # an accumulator's start
                    ok = ok and (kloop is not None or not sliced)  # (every read in a slice: guarded)
                    reads.append((u, kloop))
                elif u.name == "scf.yield" or (u.name in ("vector.transfer_write", "tensor.insert_slice",
                                                          "tensor.parallel_insert_slice") and n == 1):
                    continue  # handed on unchanged / written over
                else:
                    ok = False
        if not ok or not reads:
            continue
        for r, kloop in reads:
            t = r.results[0].type
            with ir.InsertionPoint(r), r.location:
                zero = arith.ConstantOp(t, ir.DenseElementsAttr.get_splat(t, ir.FloatAttr.get(ir.VectorType(t).element_type, 0.0)))
                if kloop is None:
                    r.results[0].replace_all_uses_with(zero.result)
                    r.erase()
                else:  # zeros in the first slice, C as the earlier slices left it after
                    iv = kloop.regions[0].blocks[0].arguments[0]
                    first = arith.CmpIOp(arith.CmpIPredicate.eq, iv, kloop.operands[0])
                    branch = scf.IfOp(first.result, [t], has_else=True)
                    r.results[0].replace_all_uses_with(branch.results[0])
                    with ir.InsertionPoint(branch.then_block):
                        scf.YieldOp([zero.result])
                    with ir.InsertionPoint(branch.else_block):
                        last = scf.YieldOp([r.results[0]])
                    r.move_before(last)
            done += 1
        fill.results[0].replace_all_uses_with(fill.operands[1])
        fill.erase()
    return done


def _drop_k_slice_marks(kernel) -> None:
    for loop in walk_ops(kernel, lambda n: n == "scf.for"):  # (the mark has served)
        if K_SLICE in loop.attributes:
            del loop.attributes[K_SLICE]


def scalar_broadcast_reads(kernel) -> int:
    """In a tiled kernel, a `vector.transfer_read` used only by `vector.extract`s of
    single elements (A's mr values of a k step, each broadcast against B's row: a
    vector<6xf32> of packed A, a vector<6x1xf32> column of row-major A) becomes one
    `tensor.extract` per element, so each broadcast is a `vbroadcastss` from memory.
    Read as one vector<6xf32>, LLVM loads elements 4 and 5 as a pair (`vmovsd`) and
    splats them with shuffles on the FP pipes the FMAs need: on Zen 2, a 6x16 k loop of
    that form ran at 78 GFLOP/s a core against 92 with six memory broadcasts (the same
    loop written out by hand, L1-resident operands). Returns how many reads were split."""
    from mlir.dialects import arith, tensor
    from .pass_base import user_op
    done = 0
    for read in walk_ops(kernel, lambda n: n == "vector.transfer_read"):
        try:
            src_t = ir.RankedTensorType(read.operands[0].type)
        except ValueError:
            continue  # (on memrefs: not here, the script runs on tensors)
        vt = ir.VectorType(read.results[0].type)
        uses = [user_op(u) for u in read.results[0].uses]
        if not uses or any(u.name != "vector.extract" or len(u.operands) != 1
                           or not isinstance(u.results[0].type, ir.FloatType) for u in uses):
            continue  # (a vector use, or a dynamic position)
        if len(read.operands) != 2 + src_t.rank:
            continue  # (a masked read)
        pmap = ir.AffineMapAttr(read.attributes["permutation_map"]).value
        in_bounds = [ir.BoolAttr(b).value for b in ir.ArrayAttr(read.attributes["in_bounds"])]
        if not all(in_bounds) or len(pmap.results) != vt.rank or not all(isinstance(e, ir.AffineDimExpr) for e in pmap.results):
            continue  # (a broadcast dim, a read that may run out of bounds)
        dims = [ir.AffineDimExpr(e).position for e in pmap.results]  # vector dim -> source dim
        indices = list(read.operands[1:1 + src_t.rank])
        for u in uses:
            pos = list(ir.DenseI64ArrayAttr(u.attributes["static_position"]))
            with ir.InsertionPoint(u), u.location:
                idx = list(indices)
                for d, p in zip(dims, pos):
                    if p:
                        step = arith.ConstantOp(ir.IndexType.get(), p).result
                        idx[d] = arith.AddIOp(indices[d], step).result
                x = tensor.ExtractOp(read.operands[0], idx).result
            u.results[0].replace_all_uses_with(x)
            u.erase()
        read.erase()
        done += 1
    return done


def _zero_constant(value) -> bool:
    c = defining_op(value)
    return c is not None and c.name == "arith.constant" and str(c.attributes["value"]).startswith("0.0")


def _kernel_key(f, p):
    """What a kernel's tiling depends on: its function (`_outline`) without its name and
    locations, and its plan; None when the plan holds IR (a remainder reading another
    product's B panels: not shared)."""
    if not all(isinstance(v, (int, float, str, bool, tuple, list, dict, type(None))) for v in p.values()):
        return None
    return function_key(f) + repr(sorted(p.items())).encode()


def _identical_kernels(items, kernels) -> dict:
    """{j: i} for each kernel j identical to an earlier kernel i (`_kernel_key`): j's op
    loses its mark, so the script tiles i only (`_share_tiling` copies it). A transformer
    step's products are a few shapes repeated per layer: 8 layers, 195 products, 14
    plans."""
    if os.environ.get("MIRAX_MATMUL_REUSE", "1") == "0":
        return {}
    first, shared = {}, {}
    for (i, _, p), (_, f) in zip(items, kernels):
        key = _kernel_key(f, p)
        if key is None:
            continue
        if key in first:
            shared[i] = first[key]
            for o in f.regions[0].blocks[0].operations:
                if MARK in o.operation.attributes:
                    del o.operation.attributes[MARK]
        else:
            first[key] = i
    return shared


def _share_tiling(kernels, shared) -> None:
    """Kernel j of `shared` ({j: i}) becomes a copy of tiled kernel i, under j's name and
    at j's location (the product's own line, not i's)."""
    for j, i in shared.items():
        call, f = kernels[j]
        new = kernels[i][1].clone(ir.InsertionPoint(f))
        new.attributes["sym_name"] = f.attributes["sym_name"]
        f.erase()
        relocate(new, call.location)
        kernels[j] = (call, new)


def _inline(root, kernels):
    """Canonicalize the functions the kernels came from once (what the products' own
    canonicalization did to the rest of them: pack_b's layout ops), put the tiled kernels
    back in place of their calls (see `_outline`), and CSE those functions (the copies
    of constants and of `tensor.empty` merged with the originals again: one buffer for
    the products that shared one). Not canonicalized again: that would turn the
    kernels' register tiles into element-wise vector.from_elements."""
    match = (f'%f = transform.structured.match ops{{["func.func"]}} attributes{{{CLEAN}}} in %root '
             ": (!transform.any_op) -> !transform.any_op")
    err = apply_transform(root, transform_script([
        match,
        "transform.apply_patterns to %f {\n"
        "  transform.apply_patterns.canonicalization\n"
        "  transform.apply_patterns.tensor.fold_tensor_subset_ops_into_vector_transfers\n"
        "} : !transform.any_op"]))
    for call, f in kernels:
        inline_body(f.regions[0].blocks[0], list(call.operands), call, list(call.results))
        call.erase()
        f.erase()
    err = err or apply_transform(root, transform_script([match, "transform.apply_cse to %f : !transform.any_op"]))
    for f in walk_ops(root, lambda n: n == "func.func"):
        if CLEAN in f.attributes:
            del f.attributes[CLEAN]
    if err is not None:
        raise RuntimeError(f"optimize_matmuls: clean-up failed: {err}")


def optimize_matmuls(module, *, return_script: bool = False, config=None, epilogues: bool = True, host=None):
    """Rewrite the f32 matmuls of `module` (linalg on tensors) in place; see the module doc.

    Ops it cannot help (dtype, dynamic or small shapes, transposed maps) are left as they
    are. If the script fails, the module is restored from a copy (with a warning) for the
    generic lowering. With `return_script`, returns the script text that was applied
    (None when no op qualified). `config` overrides the tuning table's tiles (the tuner).
    `epilogues`: a product's elementwise reader runs on its register tiles
    (lowering/matmul_epilogue.py); off, it stays a loop of its own. `host` (a preset of
    host_cpu.PRESETS): the products a few vectors wide become dot products for that host
    (lowering/matmul_dot.py); by default for this one, and not at all when `config` is
    given (the tuner's and the tests' tiles are for outer products)."""
    root = module.operation  # an ir.Module, or the module op a Python pass receives
    items, ops = [], []
    _owned[0] = 0  # (the same module, the same IR)
    with root.context, ir.Location.unknown():
        fold_transposed_a(root, config)
        fold_transposed_products(root, config)
        fold_transposed_b(root, config)
        # products a few vectors wide at most: dot products along K (lowering/matmul_dot.py)
        if (config is None or host is not None) and matmul_dot.dot_products(root, host=host):
            root.attributes[DYNAMIC_SCHEDULE] = ir.UnitAttr.get()  # (their row blocks: see below)
        backup = root.clone()  # before any rewrite: a failed script restores the plain ops
        todo = [(op, config, None) for op in matmul_ops(root)]
        packed_b = {}  # a repacked B (its value before) -> (its panels, the plan that made them)
        while todo:
            op, cfg, inherit = todo.pop(0)
            given = packed_b.get(op.operands[1]) if REMAINDER in op.attributes else None
            p = plan(op, cfg, inherit, prefer_nr=given[1]["nr"] if given else None)
            if p is None:
                continue
            p["epilogues"] = epilogues
            if given is not None:
                share_b(op, p, *given)
            if p["split"]:  # the pieces are planned in turn: the divisible one with this
                # plan's tiles, the remainders (padded) with the table's
                main, *rest = split_remainders(op, p)
                todo[:0] = [(main, cfg, p["tiles"])] + [(r, None, None) for r in rest]
                continue
            if p["pack"]:
                b = op.operands[1]
                op = pack_b(op, p)
                if p["batch"] is None and p.get("given_b") is None:
                    packed_b[b] = (op.operands[1], p)
            op.attributes[MARK] = ir.UnitAttr.get()
            items.append((len(items), op.name, p))
            ops.append(op)
        if not items:
            backup.erase()
            return None
        kernels = [_outline(root, op, i, p) for (i, _, p), op in zip(items, ops)]
        shared = _identical_kernels(items, kernels)
        script = build_script([it for it in items if it[0] not in shared])
        err = apply_transform(root, script, backup)
        if err is not None:
            items = []
            warnings.warn(f"optimize_matmuls: transform failed, matmuls left as they were: {err}")
        else:
            _share_tiling(kernels, shared)
            for j, ((i, _, p), (call, f)) in enumerate(zip(items, kernels)):
                skip_zero_fill(f, p["kc"], p["dims"][2])
                tag_task_work(f, p)
                scalar_broadcast_reads(f)
                e, outer = epilogue.reader(call) if epilogues else (None, [])
                if e is not None:
                    fused = epilogue.fuse_epilogue(call, f, e, outer, _k_slice_loop)
                    if fused is not None:
                        kernels[j] = (fused, f)
                _drop_k_slice_marks(f)
            _inline(root, kernels)
            hoist_invariant_packs(root)
            drop_zero_slice_guards(root)
            fold_padded_fills(root)
            if max(p.get("threads", 1) for _, _, p in items) > 1:
                parallel_padding(root)
        for op in matmul_ops(root):  # ops left alone keep no marker
            for mark in (MARK, REMAINDER):
                if mark in op.attributes:
                    del op.attributes[mark]
        if not items:
            return None
        # the register-blocked loops balance best with dynamic OpenMP scheduling; streaming
        # kernels lose with it (gelu 35 -> 49 ms), so the pipeline applies it on this mark
        root.attributes[DYNAMIC_SCHEDULE] = ir.UnitAttr.get()
    return script if return_script else None


# --- standalone driver (the tuner and the tests) ---

def compile_standalone(text: str, name: str, *, optimize: bool = True, opt_level: int | None = None, config=None,
                       epilogues: bool = True):
    """Compile `func.func @name` (linalg on tensors, `llvm.emit_c_interface`) through
    optimize_matmuls + lower_to_llvm and the runtime's code generation (runtime/cpu.py:
    the host's LLVM target under MIRAX_CPU_MAX_ISA, the JIT opt level, the disk cache),
    so the tuner times the code a later compile makes. Returns `call(inputs, outputs)`
    writing outputs in place.

        mm = compile_standalone(text, "mm")
        mm([a, b], [c])
    """
    from ..runtime import cpu

    # (MLIR's ExecutionEngine, used here before, targets the whole host: under
    # MIRAX_CPU_MAX_ISA=avx2 the tuner raced AVX-512 code for the AVX2 table)
    prepare = (f"matmul_codegen.optimize_matmuls config={config!r}" + ("" if epilogues else " epilogues=False"),
               lambda module: optimize_matmuls(module, config=config, epilogues=epilogues)) if optimize else None
    kernel = cpu.compile_module(text, name, opt_level=opt_level, prepare=prepare,
                                lower=("matmul_codegen.lower_to_llvm", add_lowering))

    def call(inputs, outputs):
        arrays = list(inputs) + list(outputs)
        for a in arrays:
            if not a.flags.c_contiguous:
                raise ValueError("compile_standalone: arrays must be C-contiguous")
        kernel(inputs, outputs)

    call.kernel = kernel  # keep it alive
    return call


def main(argv=None):
    """`python -m mirax.lowering.matmul_codegen FILE.mlir [-split-input-file] [--script]
    [--tiles mr=8,nr=32,...] [--host avx2|avx512|neon|sve] [--parallel-min N]`: print FILE
    after optimize_matmuls (or the transform script it applies), with this host's tiles,
    fixed ones, or those derived for a preset host of another ISA family; `--parallel-min`
    fixes the elements from which padding copies run on the threads (the tuning table's
    `other.parallel_min_elements`)."""
    import argparse
    from . import host_cpu
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("file")
    ap.add_argument("-split-input-file", "--split-input-file", dest="split", action="store_true")
    ap.add_argument("--script", action="store_true", help="print the transform script instead")
    ap.add_argument("--tiles", default="", help="fixed tiles: mr=8,nr=32,kc=256,nc=512,forall_m=64")
    ap.add_argument("--host", choices=sorted(host_cpu.PRESETS), help="the tiles derived for a preset host")
    ap.add_argument("--parallel-min", type=int, default=0,
                    help="elements from which copies run on the threads (default: the tuning table's)")
    args = ap.parse_args(argv)
    config = None
    if args.host:
        config = dict(tuning.derive(host_cpu.PRESETS[args.host])["matmul"][("linalg.matmul", "f32")], pack_b=0)
    if args.tiles:
        config = dict(config or {}, **{k: int(v) for k, v in (kv.split("=") for kv in args.tiles.split(","))})
    text = open(args.file).read()
    chunks = text.split("// -----") if args.split else [text]
    outs = []
    fixed = {"parallel": {"other": {"parallel_min_elements": args.parallel_min}}} if args.parallel_min else {}
    preset = host_cpu.use(host_cpu.PRESETS[args.host]) if args.host else contextlib.nullcontext()
    with tuning.override(**fixed), preset:
        for chunk in chunks:
            with ir.Context(), ir.Location.unknown():
                module = ir.Module.parse(chunk)
                script = optimize_matmuls(module, return_script=True, config=config,
                                          host=host_cpu.PRESETS[args.host] if args.host else None)
                outs.append(str(script) if args.script else str(module))
    print("\n// -----\n".join(outs))


if __name__ == "__main__":
    main()
