"""Sharding through upstream MLIR's `shard` dialect: a function's arguments and results
are split over a 1-d grid of processes (the MPI ranks), upstream passes partition it and
insert the communication, and every rank runs its part through MPI.

    mirax-shard{grid=2 in-shardings=0,- out-shardings=-}
        convert-mirax-to-linalg; `shard.grid @mesh(shape = 2)`; each argument and result
        annotated with `shard.sharding`/`shard.shard` (an axis: split along it, `-`:
        replicated); upstream `sharding-propagation` and `shard-partition`: the function
        now takes and returns each rank's block, with shard.all_reduce/all_gather/... where
        the blocks must meet (compile's "sharded" stage)
    mirax-shard-to-mpi
        the collectives upstream `convert-shard-to-mpi` lacks (all_gather, all_slice,
        all_to_all) rewritten into those it has (all_reduce, process_linear_index), then
        `convert-shard-to-mpi`: the `mpi` dialect (compile's "mpi" stage)
    mirax-mpi-cpu-pipeline
        bufferization into the caller's buffers and the CPU's LLVM lowering, the `mpi` ops
        becoming calls into the MPI library (`convert-to-llvm`)

MLIR 22's MPI lowering has two Open MPI bugs worked around here: it names the reduction
ops `ompi_mpi_sum` (Open MPI exports `ompi_mpi_op_sum`), and it loads the communicator
`MPI_Comm_split` returns as a 32-bit integer (MPICH's handle; Open MPI's is a pointer, so
the call crashes). mirax's grids are 1-d and span the world, so the split
`convert-shard-to-mpi` emits (color 0, key = the rank) is the world communicator itself:
it is replaced by it, which also saves a collective and a leaked communicator per call.
"""
from __future__ import annotations

import re

from mlir import ir
from mlir.dialects import arith, func, shard, tensor

from ..dialect.core import MiraxError
from .convert_mirax_to_linalg import ConvertMiraxToLinalg
from .cpu_pipeline import BUFFERIZE, OPENMP_ONLY, SIMPLIFY_DEALLOCS, TO_LLVM, distinct_results, split_deallocs
from .lower_barriers import MiraxLowerBarriers
from .pass_base import MiraxPass, PassError, isa, walk_ops

GRID = "mesh"
REPLICATED = "-"


def parse_shardings(text, count, what) -> list:
    """`"0,-,1"` -> [0, None, 1]: per value, the axis split over the grid or None
    (replicated). An empty text replicates all `count` values."""
    text = str(text).strip()
    if not text:
        return [None] * count
    items = [t.strip() for t in text.split(",")]
    if len(items) != count:
        raise MiraxError(f"mirax-shard: {what} has {len(items)} entries ({text!r}) for {count} values")
    out = []
    for t in items:
        if t == REPLICATED:
            out.append(None)
        elif re.fullmatch(r"\d+", t):
            out.append(int(t))
        else:
            raise MiraxError(f"mirax-shard: {what}: {t!r} is neither an axis nor '{REPLICATED}' (replicated)")
    return out


def format_shardings(specs) -> str:
    return ",".join(REPLICATED if s is None else str(s) for s in specs)


def local_shape(shape, axis, grid):
    """A rank's block of `shape` split along `axis` over `grid` processes."""
    if axis is None:
        return tuple(shape)
    return tuple(d // grid if i == axis else d for i, d in enumerate(shape))


def _function(module, name):
    for op in module.regions[0].blocks[0].operations:
        if op.operation.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == name:
            return op.operation
    raise MiraxError(f"mirax-shard: no function @{name} in the module")


def _sharding(axis, rank):
    axes = [[] for _ in range(rank)] if axis is not None else [[]]
    if axis is not None:
        axes[axis] = [0]
    text = "[" + ", ".join("[" + ", ".join(map(str, a)) + "]" for a in axes) + "]"
    return shard.ShardingOp(ir.FlatSymbolRefAttr.get(GRID), ir.Attribute.parse(f"#shard<axisarray{text}>"),
                            [], []).result


def _check_split(op, value, axis, grid, what):
    if axis is None:
        return
    shape = ir.RankedTensorType(value.type).shape
    if axis >= len(shape):
        raise PassError(op, f"mirax-shard: {what} of type {value.type} has no axis {axis} to split")
    if shape[axis] % grid:
        raise PassError(op, f"mirax-shard: {what} of type {value.type}: axis {axis} ({shape[axis]}) is not "
                            f"divisible by the {grid} processes of the grid")


def _constants(fn):
    """Splat tensor constants (broadcast scalars) as linalg.fill: in MLIR 22
    `shard-partition` fails, without a diagnostic, on functions holding arith.constant
    tensors (splat or not), so `mr.compile(in_shardings=)` also passes the captured
    arrays of more than one element as replicated arguments."""
    for op in walk_ops(fn, lambda n: n == "arith.constant"):
        if not isa(ir.DenseElementsAttr, op.attributes["value"]):
            continue
        attr = ir.DenseElementsAttr(op.attributes["value"])
        if not attr.is_splat:
            continue
        t = ir.RankedTensorType(op.results[0].type)
        from mlir.dialects import linalg  # (its OpDSL definitions take ~60 ms to import)
        with ir.InsertionPoint(op), op.location:
            scalar = arith.ConstantOp(t.element_type, attr.get_splat_value()).result
            empty = tensor.EmptyOp(t.shape, t.element_type).result
            filled = linalg.fill(scalar, outs=[empty])
        op.results[0].replace_all_uses_with(filled)
        op.erase()


def _unshare_inits(fn):
    """One tensor.empty (and linalg.fill of it) per user: CSE shares one between ops
    whose results shard differently, and sharding-propagation then asserts (MLIR 22:
    "only support all shard ops have the same grid sharding attr") and aborts."""
    for name in ("linalg.fill", "tensor.empty"):  # the fills first: their copies use the empty again
        for op in walk_ops(fn, lambda n: n == name):
            for use in list(op.results[0].uses)[1:]:
                with ir.InsertionPoint(op):
                    copy = op.clone()
                user = use.owner.operation if hasattr(use.owner, "operation") else use.owner
                user.operands[use.operand_number] = copy.results[0]


def annotate(module, grid, in_shardings, out_shardings, function="main"):
    """Add the grid and annotate `function`'s arguments and results with their shardings."""
    fn = _function(module, function)
    block = fn.regions[0].blocks[0]
    ret = block.operations[len(block.operations) - 1]
    ins = parse_shardings(in_shardings, len(block.arguments), "in-shardings")
    outs = parse_shardings(out_shardings, len(ret.operands), "out-shardings")
    with ir.Location.unknown():
        if not any(op.operation.name == "shard.grid" for op in module.regions[0].blocks[0].operations):
            with ir.InsertionPoint.at_block_begin(module.regions[0].blocks[0]):
                shard.GridOp(GRID, ir.DenseI64ArrayAttr.get([grid]))
        _constants(fn)
        _unshare_inits(fn)
        first = block.operations[0]
        for i, (arg, axis) in enumerate(zip(block.arguments, ins)):
            _check_split(fn, arg, axis, grid, f"argument {i}")
            with ir.InsertionPoint(first):
                s = _sharding(axis, ir.RankedTensorType(arg.type).rank)
                annotated = shard.ShardOp(arg, s).result
            arg.replace_all_uses_except(annotated, annotated.owner.operation)
        for i, (value, axis) in enumerate(zip(list(ret.operands), outs)):
            _check_split(fn, value, axis, grid, f"result {i}")
            with ir.InsertionPoint(ret):
                s = _sharding(axis, ir.RankedTensorType(value.type).rank)
                ret.operands[i] = shard.ShardOp(value, s, annotate_for_users=True).result


class MiraxShard(MiraxPass):
    name = "mirax-shard"
    summary = ("Split a function's arguments and results over a 1-d grid of processes and partition it "
               "with upstream sharding-propagation and shard-partition")
    options = {"grid": (2, "processes in the 1-d grid"),
               "in-shardings": ("", "per argument: the axis split over the grid, or '-' (replicated)"),
               "out-shardings": ("", "per result: the axis split over the grid, or '-' (replicated)"),
               "function": ("main", "the function to partition"),
               "traversal": ("forward-backward", "sharding-propagation's order; forward-backward (a reduction "
                                                 "over a split axis becomes a partial result and one all_reduce; "
                                                 "upstream's default, backward, gathers before reducing, and "
                                                 "trips an assertion on tanh(x @ w).sum() in MLIR 22)")}

    def add_to(self, pm):
        ConvertMiraxToLinalg().add_to(pm)
        # sharding-propagation knows no mirax op: sharded, CSE merges a checkpoint's recomputation
        MiraxLowerBarriers().add_to(pm)
        pm.add("canonicalize")
        pm.add("cse")
        pm.add(lambda op, *_: self.run(op), name="mirax-shard-annotate")
        pm.add(f"func.func(sharding-propagation{{traversal={self.opts['traversal']}}},shard-partition)")
        pm.add("canonicalize")
        pm.add("cse")

    def run(self, module):
        try:
            annotate(module, int(self.opts["grid"]), self.opts["in-shardings"], self.opts["out-shardings"],
                     str(self.opts["function"]))
        except PassError:
            raise
        except (MiraxError, ValueError) as err:  # bad options or input: a diagnostic, not a crash
            raise PassError(module, str(err)) from None


# ---- mirax-shard-to-mpi ----------------------------------------------------------------------

def _grid_of(op):
    grid = ir.FlatSymbolRefAttr(op.attributes["grid"]).value
    axes = list(ir.DenseI16ArrayAttr(op.attributes["grid_axes"])) if "grid_axes" in op.attributes else [0]
    if axes != [0]:
        raise PassError(op, f"mirax-shard-to-mpi: {op.name} over grid axes {axes}: only 1-d grids are supported")
    return grid


def _block_offset(grid, size):
    """This process's offset along a split axis: its index in the grid times the block size."""
    index = shard.ProcessLinearIndexOp(ir.FlatSymbolRefAttr.get(grid)).result
    return arith.MulIOp(index, arith.ConstantOp(ir.IndexType.get(), size).result).result


def _index(op, name):
    return ir.IntegerAttr(op.attributes[name]).value


def _gather(op, value, axis, out_type):
    """all_gather as all_reduce: each process puts its block at its offset in zeros, and the
    sum over the grid is the concatenation (the MPI lowering has no all_gather)."""
    grid = _grid_of(op)
    t = ir.RankedTensorType(out_type)
    local = ir.RankedTensorType(value.type).shape
    zero = arith.ConstantOp(t.element_type, _zero(t.element_type)).result
    from mlir.dialects import linalg  # (see above)
    zeros = linalg.fill(zero, outs=[tensor.EmptyOp(t.shape, t.element_type).result])
    offsets = [0] * t.rank
    dyn = [_block_offset(grid, local[axis])]
    offsets[axis] = ir.ShapedType.get_dynamic_stride_or_offset()
    placed = tensor.InsertSliceOp(value, zeros, dyn, [], [], offsets, local, [1] * t.rank).result
    red = ir.Attribute.parse("#shard<partial sum>")
    return shard.AllReduceOp(t, ir.FlatSymbolRefAttr.get(grid), placed,
                             grid_axes=ir.DenseI16ArrayAttr.get([0]), reduction=red).result


def _slice(op, value, axis, out_type):
    """all_slice: this process's block of a replicated value (no communication)."""
    grid = _grid_of(op)
    t = ir.RankedTensorType(out_type)
    offsets = [0] * t.rank
    dyn = [_block_offset(grid, t.shape[axis])]
    offsets[axis] = ir.ShapedType.get_dynamic_stride_or_offset()
    return tensor.ExtractSliceOp(t, value, dyn, [], [], offsets, t.shape, [1] * t.rank).result


def _zero(element_type):
    if isa(ir.IntegerType, element_type):
        return ir.IntegerAttr.get(element_type, 0)
    return ir.FloatAttr.get(element_type, 0.0)


def lower_collectives(module):
    """shard.all_gather, all_slice and all_to_all in terms of shard.all_reduce and
    shard.process_linear_index, which convert-shard-to-mpi lowers."""
    for op in walk_ops(module, lambda n: n in ("shard.all_gather", "shard.all_slice", "shard.all_to_all")):
        src, res = op.operands[0], op.results[0]
        with ir.InsertionPoint(op), op.location:
            if op.name == "shard.all_gather":
                new = _gather(op, src, _index(op, "gather_axis"), res.type)
            elif op.name == "shard.all_slice":
                new = _slice(op, src, _index(op, "slice_axis"), res.type)
            else:  # the blocks split along concat_axis become blocks split along split_axis
                cat, split = _index(op, "concat_axis"), _index(op, "split_axis")
                shape = list(ir.RankedTensorType(src.type).shape)
                shape[cat] = ir.RankedTensorType(res.type).shape[cat]
                elem = ir.RankedTensorType(src.type).element_type
                whole = _gather(op, src, cat, ir.RankedTensorType.get(shape, elem))
                new = _slice(op, whole, split, res.type)
        res.replace_all_uses_with(new)
        op.erase()
    for op in walk_ops(module, lambda n: n.startswith("shard.") and n not in _CONVERTED):
        raise PassError(op, f"mirax-shard-to-mpi: {op.name} has no lowering to MPI (convert-shard-to-mpi "
                            "lowers all_reduce, update_halo and the process queries)")


_CONVERTED = {"shard.grid", "shard.all_reduce", "shard.update_halo", "shard.process_linear_index",
              "shard.process_multi_index", "shard.neighbors_linear_indices", "shard.sharding",
              "shard.shard_shape", "shard.get_sharding", "shard.grid_shape"}


def world_communicator(module):
    """`mpi.comm_split(world, 0, key)` -> world (module docstring: the grid is the world)."""
    for op in walk_ops(module, lambda n: n == "mpi.comm_split"):
        parent = op.operands[0].owner
        parent = parent.operation if hasattr(parent, "operation") else parent
        if getattr(parent, "name", None) != "mpi.comm_world":
            raise PassError(op, "mirax-shard-to-mpi: a communicator split from another than the world")
        op.results[0].replace_all_uses_with(op.operands[0])
        op.erase()


class MiraxShardToMpi(MiraxPass):
    name = "mirax-shard-to-mpi"
    summary = "Lower a partitioned function's shard collectives to the mpi dialect (convert-shard-to-mpi)"
    options = {"mpi": ("OpenMPI", "the MPI library the mpi ops will call: OpenMPI or MPICH")}

    def add_to(self, pm):
        pm.add(lambda op, *_: self.run(op), name="mirax-shard-collectives")
        pm.add("convert-shard-to-mpi")
        pm.add(lambda op, *_: world_communicator(op), name="mirax-mpi-world-communicator")
        pm.add("canonicalize")
        pm.add("cse")

    def run(self, module):
        lower_collectives(module)
        with module.context:
            module.attributes["dlti.map"] = ir.Attribute.parse(
                f'#dlti.map<"MPI:Implementation" = "{self.opts["mpi"]}">')


# ---- mirax-mpi-cpu-pipeline --------------------------------------------------------------------

_HIDDEN = "mirax.mpi_op"
_HIDDEN_ATTR = "mirax.mpi."
_STUB = "__mirax_mpi_"


def hide_mpi(module):
    """mpi ops on buffers as calls to bodiless functions: the buffer deallocation pipeline
    refuses ops without memory effects, which mpi ops do not declare (MLIR 22), and assumes
    what it must of a call. `restore_mpi` puts them back."""
    body = module.regions[0].blocks[0]
    for n, op in enumerate(walk_ops(module, lambda n: n.startswith("mpi."))):
        if not any(isa(ir.MemRefType, v.type) for v in op.operands):
            continue
        stub = f"{_STUB}{n}"
        with ir.InsertionPoint(body), ir.Location.unknown():
            func.FuncOp(stub, ([v.type for v in op.operands], [r.type for r in op.results]), visibility="private")
        with ir.InsertionPoint(op), op.location:
            call = func.CallOp([r.type for r in op.results], ir.FlatSymbolRefAttr.get(stub), list(op.operands))
        call.attributes[_HIDDEN] = ir.StringAttr.get(op.name)
        for a in op.attributes:
            call.attributes[_HIDDEN_ATTR + a] = op.attributes[a]
        for old, new in zip(op.results, call.results):
            old.replace_all_uses_with(new)
        op.erase()


def restore_mpi(module):
    """The mpi ops hide_mpi turned into calls, and no stubs or grids left over."""
    for call in walk_ops(module, lambda n: n == "func.call"):
        if _HIDDEN not in call.attributes:
            continue
        attrs = {a[len(_HIDDEN_ATTR):]: call.attributes[a] for a in call.attributes if a.startswith(_HIDDEN_ATTR)}
        with ir.InsertionPoint(call), call.location:
            op = ir.Operation.create(ir.StringAttr(call.attributes[_HIDDEN]).value,
                                     results=[r.type for r in call.results], operands=list(call.operands),
                                     attributes=attrs)
        for old, new in zip(call.results, op.results):
            old.replace_all_uses_with(new)
        call.erase()
    for op in list(module.regions[0].blocks[0].operations):
        op = op.operation
        if op.name == "shard.grid" or (op.name == "func.func" and
                                        ir.StringAttr(op.attributes["sym_name"]).value.startswith(_STUB)):
            op.erase()


_OMPI_OPS = ("sum", "max", "min", "prod", "land", "band", "lor", "bor", "lxor", "bxor", "minloc", "maxloc",
             "replace", "no_op")


def open_mpi_symbols(module):
    """Open MPI's names of the predefined reduction ops (module docstring)."""
    rename = {f"ompi_mpi_{o}": f"ompi_mpi_op_{o}" for o in _OMPI_OPS}
    for op in walk_ops(module, lambda n: n in ("llvm.mlir.global", "llvm.mlir.addressof")):
        key = "sym_name" if op.name == "llvm.mlir.global" else "global_name"
        attr = op.attributes[key]
        name = ir.StringAttr(attr).value if op.name == "llvm.mlir.global" else ir.FlatSymbolRefAttr(attr).value
        if name in rename:
            op.attributes[key] = (ir.StringAttr.get(rename[name]) if op.name == "llvm.mlir.global"
                                  else ir.FlatSymbolRefAttr.get(rename[name]))


class MiraxMpiCpuPipeline(MiraxPass):
    name = "mirax-mpi-cpu-pipeline"
    summary = "Lower a function with mpi ops (mirax-shard-to-mpi) to LLVM for the CPU, MPI as library calls"

    def add_to(self, pm):
        pm.add(lambda op, *_: hide_mpi(op), name="mirax-hide-mpi")
        MiraxLowerBarriers().add_to(pm)
        for p in BUFFERIZE:
            if p.startswith("buffer-results-to-out-params"):
                pm.add(distinct_results, name="mirax-distinct-results")
            if p == SIMPLIFY_DEALLOCS:
                pm.add(split_deallocs, name="mirax-split-deallocs")
            pm.add(p)
        pm.add(lambda op, *_: restore_mpi(op), name="mirax-restore-mpi")
        for p in TO_LLVM:
            if p in OPENMP_ONLY:
                continue
            if p == "reconcile-unrealized-casts":
                pm.add("convert-to-llvm")  # the mpi ops, through their dialect's interface
            pm.add(p)
        pm.add(lambda op, *_: open_mpi_symbols(op), name="mirax-open-mpi-symbols")
