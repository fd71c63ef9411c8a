"""Sharded compilation (beyond MLX, as JAX's `jit(in_shardings=, out_shardings=)`): a
function written for whole arrays runs split over the processes of an MPI job, the
partitioning and the communication planned by upstream MLIR's `shard` passes.

    # every rank of `mirax.launch -n 4 script.py` passes its block of rows of x
    f = mr.compile(lambda x, w: mr.tanh(x @ w).sum(axis=0), in_shardings=(0, None), out_shardings=None)
    y = f(x_rows, w)                        # the same, whole y on every rank
    print(f.lower(x_rows, w).as_text("sharded"))   # the partitioned program

A sharding is, per argument or result, the axis split over the 1-d grid of all the
processes (each holds one equal block, in rank order) or None (every process holds the
whole value); one sharding alone applies to every argument (or result). Arguments are
passed and results returned as each process's block. The function is traced at the
whole shapes, lowered to linalg (`linalg`), annotated and partitioned by
`sharding-propagation` and `shard-partition` (`sharded`), its collectives lowered by
`convert-shard-to-mpi` (`mpi`), and compiled for the CPU with the MPI calls linked
against the job's MPI library (`llvm`); see lowering/shard.py. In a process of its own
the function runs as `mr.compile(f)` on the whole arrays.

The communication runs inside the compiled code: a rank that dies there ends the job
through the launcher (no MIRAX_DISTRIBUTED_TIMEOUT, which the runtime's collectives
have). CPU only: arrays on the GPU are read to host memory first.
"""
from __future__ import annotations

import numpy as np
from mlir import ir

from .array import STATE, Array, _host, eval as _eval
from .dialect.core import Aval, MiraxError
from .compile import _run as _stage_text  # run passes on a module, return its text
from .runtime import buffers, mpi

STAGES = ("mirax", "linalg", "sharded", "mpi", "llvm")


def _specs(spec, count, what):
    """Per-value shardings from one sharding or a sequence of them."""
    if spec is None or isinstance(spec, int):
        spec = [spec] * count
    spec = list(spec)
    if len(spec) != count:
        raise ValueError(f"compile: {what} has {len(spec)} entries for {count} "
                         f"{'arguments' if what == 'in_shardings' else 'results'}")
    for s in spec:
        if s is not None and (not isinstance(s, int) or isinstance(s, bool) or s < 0):
            raise TypeError(f"compile: {what} entries are an axis (int >= 0) or None, got {s!r}")
    return spec


class ShardedExecutable:
    """One specialization: the traced function at whole shapes, its stages, and (built
    on first call) the kernel every rank runs."""

    def __init__(self, text, lifted, grid, ins, outs, in_avals, out_avals, out_tree):
        self.text, self.lifted, self.grid = text, lifted, grid
        self.ins, self.outs = ins, outs
        self.in_avals, self.out_avals, self.out_tree = in_avals, out_avals, out_tree
        self.stages = {}
        self._kernel = None

    def stage(self, name):
        if name not in STAGES:
            raise ValueError(f"no stage '{name}'; stages are {', '.join(STAGES)}")
        if not self.stages:
            self._lower()
        if name == "llvm" and name not in self.stages:
            from .lowering import PASSES
            from .runtime.context import context
            with context(), ir.Location.unknown():
                m = ir.Module.parse(self.stages["mpi_ready"])
                self.stages["llvm"] = _stage_text(m, PASSES["mirax-mpi-cpu-pipeline"]().add_to)
        return self.stages[name]

    def _lower(self):
        from .lowering import PASSES
        from .lowering.shard import format_shardings
        from .runtime.context import context
        from .transforms.interpret import find_function
        stages = {}
        with context(), ir.Location.unknown():
            m = ir.Module.parse("module {\n" + self.text + "\n}\n")
            stages["mirax"] = str(m)
            _stage_text(m, PASSES["mirax-simplify"]().add_to)
            stages["linalg"] = _stage_text(m, PASSES["convert-mirax-to-linalg"]().add_to)
            shard = PASSES["mirax-shard"](grid=self.grid, **{"in-shardings": format_shardings(self.ins),
                                                            "out-shardings": format_shardings(self.outs)})
            try:
                stages["sharded"] = _stage_text(m, shard.add_to)
            except ir.MLIRError as err:
                ops = sorted(set(_op_names(stages["linalg"])))
                raise MiraxError(f"compile(in_shardings=...): upstream shard-partition could not partition the "
                                 f"function (its ops: {', '.join(ops)}): {err}") from None
            stages["mpi"] = _stage_text(m, PASSES["mirax-shard-to-mpi"]().add_to)
            find_function(m, "main").attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
            stages["mpi_ready"] = str(m)  # with the C interface the runtime calls
        self.stages = stages

    @property
    def kernel(self):
        if self._kernel is None:
            from .lowering import PASSES
            from .runtime.cpu import compile_module
            if not self.stages:
                self._lower()
            text = self.stages["mpi_ready"]
            self._kernel = compile_module(text, "main", lower=("mirax-mpi-cpu-pipeline",
                                                               PASSES["mirax-mpi-cpu-pipeline"]().add_to),
                                          libs=(mpi.library(),))
        return self._kernel

    def run(self, arrays):
        from .lowering.shard import local_shape
        ins = [np.ascontiguousarray(_host(a._data, a.aval)) for a in arrays] + self.lifted
        outs = [buffers.empty(local_shape(a.shape, s, self.grid), a.dtype.storage)
                for a, s in zip(self.out_avals, self.outs)]
        self.kernel(ins, outs)
        return [Array._leaf(o, a.dtype) for o, a in zip(outs, self.out_avals)]


def _op_names(text):
    import re
    return re.findall(r"=\s*([a-z_]+\.[a-z_.]+)", text)


class ShardedCompiled:
    """What `mr.compile(f, in_shardings=..., out_shardings=...)` returns."""

    def __init__(self, fun, in_shardings=None, out_shardings=None):
        self.fun = fun
        self.in_shardings = in_shardings
        self.out_shardings = out_shardings
        self._cache = {}
        self._plain = None

    def __call__(self, *args):
        arrays = self._arrays(args)
        _specs(self.in_shardings, len(arrays), "in_shardings")
        grid = mpi.group(mpi.world()).size
        if STATE.tracing and grid > 1:
            raise MiraxError("compile(in_shardings=...): a sharded function cannot be called inside a transform "
                             "or another compiled function (it takes and returns this process's blocks)")
        if grid == 1:  # one process: the whole arrays are the blocks
            from .compile import compile as _compile
            self._plain = self._plain or _compile(self.fun)
            return self._plain(*args)
        exe = self._specialize(arrays, grid)
        pending = [a for a in arrays if a._data is None]
        if pending:
            _eval(*pending)
        outs = exe.run(arrays)
        from .tree import tree_unflatten
        return tree_unflatten(exe.out_tree, outs)

    def lower(self, *args, grid=None):
        """The stages of the program for these blocks (`.as_text(stage)`; stages
        "mirax", "linalg", "sharded", "mpi", "llvm"), over `grid` processes (default: the
        processes of the job)."""
        arrays = self._arrays(args)
        return ShardedLowered(self._specialize(arrays, grid or mpi.group(mpi.world()).size))

    def _arrays(self, args):
        out = []
        for i, a in enumerate(args):
            if not isinstance(a, (Array, np.ndarray)):
                raise TypeError(f"compile(in_shardings=...): argument {i} must be an array, got {type(a).__name__}")
            out.append(a if isinstance(a, Array) else Array(a))
        return out

    def _specialize(self, arrays, grid):
        ins = _specs(self.in_shardings, len(arrays), "in_shardings")
        key = (grid, tuple((a.shape, a.dtype.name) for a in arrays))
        exe = self._cache.get(key)
        if exe is None:
            exe = self._cache[key] = self._trace(arrays, ins, grid)
        return exe

    def _trace(self, arrays, ins, grid):
        from .trace import Tracer, placeholder, to_mlir_text
        from .tree import tree_flatten
        whole = []
        for i, (a, axis) in enumerate(zip(arrays, ins)):
            if axis is not None and axis >= a.ndim:
                raise ValueError(f"compile: in_shardings[{i}] = {axis} but argument {i} has {a.ndim} axes")
            shape = tuple(d * grid if k == axis else d for k, d in enumerate(a.shape))
            whole.append(Aval(shape, a.dtype))
        tracer = Tracer("compile")
        ph = [placeholder(av, tracer, i) for i, av in enumerate(whole)]
        STATE.tracing += 1
        try:
            out = self.fun(*ph)
        finally:
            STATE.tracing -= 1
        leaves, out_tree = tree_flatten(out)
        for o in leaves:
            if not isinstance(o, Array):
                raise TypeError(f"compile: the function must return arrays, got {type(o).__name__}")
        outs = _specs(self.out_shardings, len(leaves), "out_shardings")
        for i, (o, axis) in enumerate(zip(leaves, outs)):
            if axis is not None and (axis >= o.ndim or o.shape[axis] % grid):
                raise ValueError(f"compile: out_shardings[{i}] = {axis} cannot split result {i} of shape "
                                 f"{list(o.shape)} over {grid} processes")
        text, lifted = to_mlir_text(ph, leaves, "main", lift_size=1)  # replicated arguments
        _eval(lifted)
        lifted_data = [np.ascontiguousarray(_host(a._data, a.aval)) for a in lifted]
        return ShardedExecutable(text, lifted_data, grid, ins + [None] * len(lifted), outs,
                                 whole, [o.aval for o in leaves], out_tree)


class ShardedLowered:
    """The IR of a sharded function at each stage (`as_text(stage)`)."""

    STAGES = STAGES

    def __init__(self, exe):
        self._exe = exe

    def as_text(self, stage="mirax"):
        return self._exe.stage(stage)
