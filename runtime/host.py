"""Host primitives: primitives whose CPU implementation is a Python function on numpy
arrays (LAPACK through numpy.linalg for the decompositions of `mirax.linalg`).

A family module declares the primitive as usual (IRDL, shape rule, jvp/vjp/batch rules)
and registers its host function here instead of a linalg lowering:

    primitive("inv", ["x"], _inv_shape, host_lowering("inv"), _inv_ref, attrs=...)
    register("inv", lambda a, tri, upper: ...)      # numpy in, numpy out

Where they run:
- eagerly: `mr.cpu` calls `run` instead of building a JIT kernel;
- in `mr.compile`: `HostSplitProgram` cuts the traced function at its host ops into
  compiled segments (each one JIT kernel, as a function without host ops) and calls
  the host functions between them on the segments' numpy buffers. Splitting keeps the
  whole CPU pipeline, the kernel caches and the calling convention unchanged; a call
  back from JIT code into Python would need a new ABI through bufferization, the
  OpenMP regions and the on-disk cache, for ops (LAPACK) that cost far more than the
  boundary. The GPU refuses host ops (as MLX refuses its CPU-only linalg ops there).

A primitive with several results of one computation (`svd`: U, S, Vt) is one op per
result, told apart by its `output` attribute; its host function returns all of them,
and the results of one call are reused by the sibling ops on the same inputs.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from ..dialect.core import MiraxError

_HOST: dict = {}  # primitive name -> fn(*numpy inputs, **params) -> array or tuple of arrays
_FAMILY: dict = {}  # primitive name -> its family, as MLX's error messages name it
_EXCHANGE = set()  # primitives the GPU runs through host memory (the collectives)


def register(name, fn, family="linalg", gpu_through_host=False):
    """Run primitive `name` on the host with `fn(*inputs, **params)`; a multi-result
    primitive (with an `output` attribute) returns the tuple of all its results.
    `gpu_through_host`: on the GPU its operands are read to host memory, `fn` runs, and
    the result is uploaded (the collectives); otherwise the GPU refuses it."""
    _HOST[name] = fn
    _FAMILY[name] = family
    if gpu_through_host:
        _EXCHANGE.add(name)


def gpu_through_host(name) -> bool:
    return name in _EXCHANGE


def is_host(name) -> bool:
    return name in _HOST


def host_names():
    return tuple(_HOST)


def host_lowering(name):
    """The `lower` of a host primitive: there is no linalg form to lower to."""
    def lower(*_args, **_params):
        raise MiraxError(f"mirax.{name} runs on the host (runtime/host.py) and has no linalg lowering; "
                         "mr.compile calls it between compiled segments")
    return lower


def gpu_error(name):
    family = _FAMILY.get(name, "linalg")
    if name in _EXCHANGE:  # eager calls work; a compiled program is one GPU program
        return MiraxError(f"[{family}::{name}] A compiled function with this collective cannot run on the GPU "
                          "yet (eager collectives on GPU arrays go through host memory). Compile it on a CPU "
                          "stream.")
    return MiraxError(f"[{family}::{name}] This op is not yet supported on the GPU. "
                      "Explicitly pass a CPU stream to run it.")


# ---- calling ----------------------------------------------------------------------------

_RECENT = OrderedDict()  # eager calls of multi-result primitives: key -> (inputs kept alive, results)
_RECENT_SIZE = 4
_lock = threading.Lock()


def _call_all(name, params, inputs):
    rest = {k: v for k, v in params.items() if k != "output"}
    return _HOST[name](*inputs, **rest)


def _result(name, params, results, out_aval):
    r = results[params["output"]] if "output" in params else results
    r = np.require(r, dtype=out_aval.dtype.storage, requirements="C")  # ascontiguousarray makes 0-d 1-d
    if r.shape != tuple(out_aval.shape):
        raise RuntimeError(f"internal error: host mirax.{name} gave shape {r.shape}, expected {out_aval.shape}")
    return r


def run(prim, params, inputs, out_aval, memo=None):
    """The result of host primitive `prim` on numpy `inputs` (a new array). `memo` (a dict
    keyed by the caller's own value keys) shares one computation between sibling results;
    without it, recent eager calls are looked up by input identity (their buffers are
    kept alive meanwhile, and mirax never writes into an array's buffer)."""
    name = prim.name
    if "output" not in params:
        return _result(name, params, _call_all(name, params, inputs), out_aval)
    rest = tuple(sorted((k, v) for k, v in params.items() if k != "output"))
    if memo is not None:
        key = (name, rest, memo.pop("__inputs__"))
        results = memo.get(key)
        if results is None:
            results = memo[key] = _call_all(name, params, inputs)
        return _result(name, params, results, out_aval)
    key = (name, rest, tuple(id(x) for x in inputs))
    with _lock:
        hit = _RECENT.get(key)
        if hit is not None:
            _RECENT.move_to_end(key)
    if hit is None:
        hit = (list(inputs), _call_all(name, params, inputs))
        with _lock:
            _RECENT[key] = hit
            while len(_RECENT) > _RECENT_SIZE:
                _RECENT.popitem(last=False)
    return _result(name, params, hit[1], out_aval)


def clear():
    """Forget the recent eager results (and the input buffers they keep alive)."""
    with _lock:
        _RECENT.clear()


# ---- compile: segments around host calls -------------------------------------------------

def has_host_ops(text) -> bool:
    """Whether a module's text holds an op of a host primitive."""
    return any(f'"mirax.{n}"' in text for n in _HOST)


class _Val:
    """A value of the split function: where it comes from and from which segment on it
    exists (`stage`)."""

    __slots__ = ("aval", "stage", "kind", "ref", "needed")

    def __init__(self, aval, stage, kind, ref):
        self.aval, self.stage, self.kind, self.ref = aval, stage, kind, ref
        self.needed = False  # a segment value read after its segment: one of its results


class _Segment:
    """The ops of one stage, traced again on placeholders for the values they read."""

    def __init__(self, index):
        from ..trace import Tracer
        self.index = index
        self.tracer = Tracer("host-split")
        self.imports = []  # _Vals read from earlier stages, in argument order
        self.args = {}  # id(_Val) -> placeholder
        self.outputs = []
        self.kernel = None
        self.lifted = []

    def value(self, v):
        if v.kind == "seg" and v.stage == self.index:
            return v.ref
        ph = self.args.get(id(v))
        if ph is None:
            from ..trace import placeholder
            if v.kind == "seg":
                v.needed = True
            ph = self.args[id(v)] = placeholder(v.aval, self.tracer, len(self.imports))
            self.imports.append(v)
        return ph


class HostSplitProgram:
    """A traced function with host ops, as compiled segments and host calls:

        prog = HostSplitProgram(module_text)      # @main of a traced module
        outs = prog([x, y])                       # numpy in, numpy out

    Each op goes to the earliest stage at which its operands exist: stage 0 reads only
    the arguments; a host op whose operands exist at stage s runs after segment s, and
    its result exists from stage s + 1."""

    def __init__(self, text, name="main"):
        from mlir import ir
        from ..array import STATE
        from ..compile import _prepare_for_gpu
        from ..transforms.interpret import apply_op, find_function, interpret, signature
        from .context import context
        with context(), ir.Location.unknown():
            module = ir.Module.parse(text)
            _prepare_for_gpu(module)  # mirax-simplify: CSE merges repeated host calls
            in_avals, _ = signature(find_function(module, name))
        self.inputs = [_Val(a, 0, "in", i) for i, a in enumerate(in_avals)]
        self.segments = []
        self.calls = []  # (stage, primitive, params, input _Vals, result _Val)

        def segment(k):
            while len(self.segments) <= k:
                self.segments.append(_Segment(len(self.segments)))
            return self.segments[k]

        def handler(prim, params, ins, aval, op=None):
            stage = max((v.stage for v in ins), default=0)
            if is_host(prim.name):
                for v in ins:
                    if v.kind == "seg":
                        v.needed = True
                out = _Val(aval, stage + 1, "host", len(self.calls))
                self.calls.append((stage, prim, params, list(ins), out))
                segment(stage + 1)
                return out
            seg = segment(stage)
            arrays = [seg.value(v) for v in ins]
            return _Val(aval, stage, "seg", apply_op(prim, params, arrays, aval))

        segment(0)
        STATE.tracing += 1
        try:
            with context(), ir.Location.unknown():
                self.results = interpret(module, name, self.inputs, handler)
        finally:
            STATE.tracing -= 1
        for v in self.results:
            if v.kind == "seg":
                v.needed = True
        def collect(v):
            if v.kind == "seg" and v.needed and v not in self.segments[v.stage].outputs:
                self.segments[v.stage].outputs.append(v)
        for seg in self.segments:
            for v in seg.imports:
                collect(v)
        for _, _, _, ins, _ in self.calls:
            for v in ins:
                collect(v)
        for v in self.results:
            collect(v)
        for seg in self.segments:
            if seg.outputs:
                self._build(seg)

    def _build(self, seg):
        from ..array import _host, eval as _eval
        from ..compile import _module_text, _prepare_for_cpu
        from ..trace import to_mlir_text
        from .cpu import compile_module
        ph = [seg.args[id(v)] for v in seg.imports]
        text, lifted = to_mlir_text(ph, [v.ref for v in seg.outputs], "main")
        _eval(lifted)
        seg.lifted = [np.asarray(_host(a._data, a.aval)) for a in lifted]
        seg.kernel = compile_module(_module_text(text), "main", prepare=("mirax-simplify", _prepare_for_cpu))

    def __call__(self, inputs):
        from . import buffers
        env = {id(v): x for v, x in zip(self.inputs, inputs)}
        memo = {}
        for seg in self.segments:
            if seg.kernel is not None:
                outs = [buffers.empty(v.aval.shape, v.aval.dtype.storage) for v in seg.outputs]
                seg.kernel([env[id(v)] for v in seg.imports] + seg.lifted, outs)
                for v, o in zip(seg.outputs, outs):
                    env[id(v)] = o
            for stage, prim, params, ins, out in self.calls:
                if stage == seg.index:
                    memo["__inputs__"] = tuple(id(v) for v in ins)
                    env[id(out)] = run(prim, params, [env[id(v)] for v in ins], out.aval, memo)
        # an argument returned as it is gets its own buffer, as a compiled kernel gives
        return [np.array(env[id(v)]) if v.kind == "in" else env[id(v)] for v in self.results]
