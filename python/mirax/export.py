"""MLX's graph and function export: `export_to_dot`, `export_function`, `exporter`,
`import_function`.

An exported function is a zip file: `function.json` holds the metadata and, per traced
signature (positional count, keyword names, input shapes and dtypes), the function as
mirax IR (`func.func @main`, the text `mr.trace` prints); arrays it closed over of more
than a few elements are stored once each as `.npy` entries and passed as trailing
arguments. Importing parses the IR and calls it op by op on the given arrays (the way
the transforms call what they produce), so an imported function is lazy and works under
`grad`, `vmap` and `compile` like the function it came from.

    mr.export_function("f.mlxfn", lambda x, y: x * y + 1, mr.ones((3,)), y=mr.ones((3,)))
    f = mr.import_function("f.mlxfn")
    (out,) = f(mr.arange(3.0), y=mr.full((3,), 2.0))
"""
from __future__ import annotations

import io
import json
import zipfile

import numpy as np

from .array import STATE, Array
from .dialect import dtypes as dt

__all__ = ["export_to_dot", "export_function", "exporter", "import_function", "FunctionExporter"]

_FORMAT = "mirax-exported-function"
_VERSION = 1


# ---- DOT -------------------------------------------------------------------------------------

def _letters(k):
    """The k-th default node name (1-based): A, B, ..., Z, AA, AB, ..."""
    out = []
    while k > 0:
        out.append(chr(ord("A") + (k - 1) % 26))
        k = (k - 1) // 26
    return "".join(reversed(out))


def _depth_first(outputs):
    """Every array reachable from `outputs` (through unevaluated nodes), inputs first."""
    order, seen = [], set()
    for root in outputs:
        stack = [(root, False)]
        while stack:
            node, done = stack.pop()
            if done:
                order.append(node)
                continue
            if id(node) in seen:
                continue
            seen.add(id(node))
            stack.append((node, True))
            stack.extend((x, False) for x in reversed(node._inputs) if id(x) not in seen)
    return order


def export_to_dot(file, *args, **kwargs) -> None:
    """Write the lazy graph computing the arrays in `args` as Graphviz DOT to `file` (a path
    or anything with `write`); keyword arrays name their nodes, the others are A, B, ...:

        x = mr.array(1.0); y = mr.exp(x) + x
        mr.export_to_dot("graph.dot", y, x=x)      # dot -Tsvg graph.dot
    """
    from .tree import tree_leaves
    arrays = [a for a in tree_leaves((list(args), kwargs)) if isinstance(a, Array)]
    names = {id(v): k for k, v in kwargs.items() if isinstance(v, Array)}

    def name(a):
        if id(a) not in names:
            names[id(a)] = _letters(len(names) + 1)
        return names[id(a)]
    nodes = _depth_first(arrays)
    used = {id(x) for n in nodes if n._prim is not None for x in n._inputs}
    lines = ["digraph {"]
    for k, n in enumerate(nodes):
        if n._prim is None:  # evaluated (or a placeholder of a trace): an input
            lines.append(f'{{ rank=source; "{name(n)}"; }}')
            continue
        prim = f"p{k}"
        label = getattr(n._prim, "name", type(n._prim).__name__)
        lines.append(f'{{ {prim} [label ="{label}", shape=rectangle]; }}')
        lines += [f'"{name(x)}" -> {prim}' for x in n._inputs]
        lines.append("{ " + ("" if id(n) in used else "rank=sink; ") + f'"{name(n)}"; }}')
        lines.append(f'{prim} -> "{name(n)}"')
    lines.append("}")
    text = "\n".join(lines)
    if isinstance(file, str):
        with open(file, "w") as f:
            f.write(text)
    elif hasattr(file, "write"):
        file.write(text)
    else:
        raise ValueError("[export_to_dot] Accepts file-like objects or strings to be used as filenames.")


# ---- exporting functions ----------------------------------------------------------------------

def _inputs(args, kwargs, prefix):
    """MLX's accepted call forms: arrays as *args/**kwargs, or one tuple/list of arrays
    and/or one dict of arrays. Returns (positional arrays, {name: array})."""
    def bad():
        return ValueError(f"{prefix} Inputs can either be a variable number of positional and keyword arrays or "
                          "a single tuple and/or dictionary of arrays.")

    def arrays(seq):
        seq = list(seq)
        if not all(isinstance(a, Array) for a in seq):
            raise bad()
        return seq

    def named(d):
        if not isinstance(d, dict) or not all(isinstance(k, str) and isinstance(v, Array) for k, v in d.items()):
            raise bad()
        return dict(d)
    if not args:
        return [], named(kwargs)
    if isinstance(args[0], Array):
        return arrays(args), named(kwargs)
    if kwargs or len(args) > 2:
        raise bad()
    if len(args) == 1:
        if isinstance(args[0], dict):
            return [], named(args[0])
        if not isinstance(args[0], (list, tuple)):
            raise bad()
        return arrays(args[0]), {}
    if not isinstance(args[0], (list, tuple)):
        raise bad()
    return arrays(args[0]), named(args[1])


def _outputs(out):
    if isinstance(out, Array):
        return [out]
    if isinstance(out, (list, tuple)) and all(isinstance(o, Array) for o in out):
        return list(out)
    raise ValueError("[export_function] Outputs can be either a single array, a tuple, or a list of arrays.")


def _signature(pos, kw):
    return {"nargs": len(pos), "kwargs": sorted(kw),
            "inputs": [[list(a.shape), a.dtype.name] for a in pos + [kw[k] for k in sorted(kw)]]}


class FunctionExporter:
    """Collects traces of one function, one per call signature, and writes them to one file
    (MLX's `mx.exporter`): call it with example inputs, then `close()` (or use `with`)."""

    def __init__(self, file, fun, shapeless=False, metadata=None):
        if not isinstance(file, str):
            raise TypeError(f"exporter: file must be a path (str), got {type(file).__name__}")
        if not callable(fun):
            raise TypeError(f"exporter: fun must be callable, got {type(fun).__name__}")
        if metadata is not None and not isinstance(metadata, str):
            raise TypeError(f"[export_function] metadata must be a str, got {type(metadata).__name__}")
        self.file, self.fun, self.shapeless = file, fun, bool(shapeless)
        self.metadata = "" if metadata is None else metadata
        self.traces = []
        self.constants = []  # (array, its numpy value), each closed-over array once
        self.closed = False

    def __call__(self, *args, **kwargs):
        if self.closed:
            raise RuntimeError("[export_function] Attempting to write after exporting is closed.")
        pos, kw = _inputs(args, kwargs, "[export_function]")
        sig = _signature(pos, kw)
        for t in self.traces:
            if _same_signature(t, sig, self.shapeless):
                raise ValueError("[export_function] A function with the same signature was already exported.")
        self.traces.append(self._trace(pos, kw, sig))
        self._write()

    def _trace(self, pos, kw, sig):
        from .trace import Tracer, placeholder, to_mlir_text
        names = sorted(kw)
        tracer = Tracer("export")
        ph = [placeholder(a.aval, tracer, i) for i, a in enumerate(pos + [kw[k] for k in names])]
        STATE.tracing += 1
        try:
            out = _outputs(self.fun(*ph[:len(pos)], **dict(zip(names, ph[len(pos):]))))
        finally:
            STATE.tracing -= 1
            tracer.done = True
        text, lifted = to_mlir_text(ph, out, "main")
        refs = []
        for a in lifted:
            if a._tracer is not None:
                raise ValueError("[export_function] the function uses a value of an enclosing transform; "
                                 "export it outside grad/vmap/compile")
            k = next((i for i, (c, _) in enumerate(self.constants) if c is a), None)
            if k is None:
                k = len(self.constants)
                self.constants.append((a, None))
            refs.append(k)
        return dict(sig, shapeless=self.shapeless, constants=refs, module="module {\n" + text + "\n}\n")

    def _write(self):
        body = {"format": _FORMAT, "version": _VERSION, "metadata": self.metadata, "traces": self.traces,
                "constants": [a.dtype.name for a, _ in self.constants]}
        with zipfile.ZipFile(self.file, "w", zipfile.ZIP_STORED) as z:
            z.writestr("function.json", json.dumps(body))
            for i, (a, _) in enumerate(self.constants):
                buf = io.BytesIO()
                from .array import _host
                np.save(buf, np.ascontiguousarray(_host(a._data, a.aval)), allow_pickle=False)
                z.writestr(f"c{i}.npy", buf.getvalue())

    def close(self):
        """Finish: later calls raise RuntimeError."""
        self.closed = True
        self.fun = None  # the file is written: drop what the function holds

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def exporter(file, fun, *, shapeless=False, metadata=None) -> FunctionExporter:
    """A FunctionExporter writing every traced signature of `fun` to `file`:

        with mr.exporter("sum.mlxfn", lambda *xs: sum(xs)) as ex:
            ex(mr.array(1)); ex(mr.array(1), mr.array(2))
    """
    return FunctionExporter(file, fun, shapeless, metadata)


def export_function(file, fun, *args, shapeless=False, metadata=None, **kwargs) -> None:
    """Trace `fun` on the example arrays (`*args`/`**kwargs`, or one tuple and/or one
    dict) and write it to `file`; `shapeless` lets the import take other shapes of the
    same ranks and dtypes:

        mr.export_function("f.mlxfn", fun, x, y=y)
    """
    if callable(file) and not isinstance(file, str):
        if metadata:
            raise ValueError("[export_function] The metadata argument is only supported when exporting to a file, "
                             "not when using a callback.")
        raise TypeError("[export_function] mirax exports to a file path (str); MLX's callback form (its "
                        "primitives one by one) is not supported")
    with FunctionExporter(file, fun, shapeless, metadata) as ex:
        ex(*args, **kwargs)


# ---- importing -------------------------------------------------------------------------------

def _same_signature(t, sig, shapeless):
    if t["nargs"] != sig["nargs"] or t["kwargs"] != sig["kwargs"] or len(t["inputs"]) != len(sig["inputs"]):
        return False
    for (s1, d1), (s2, d2) in zip(t["inputs"], sig["inputs"]):
        if d1 != d2 or len(s1) != len(s2) or (not shapeless and list(s1) != list(s2)):
            return False
    return True


class ImportedFunction:
    """A function read by `import_function`: call it as MLX's (arrays as *args/**kwargs,
    or one tuple and/or one dict); it returns a tuple of arrays."""

    def __init__(self, file):
        with zipfile.ZipFile(file) as z:
            body = json.loads(z.read("function.json"))
            if body.get("format") != _FORMAT:
                raise ValueError(f"[import_function] {file} is not a function exported by mirax")
            if body.get("version") != _VERSION:
                raise ValueError(f"[import_function] {file} has format version {body.get('version')}; "
                                 f"this mirax reads version {_VERSION}")
            self.constants = []
            for i, name in enumerate(body["constants"]):
                data = np.load(io.BytesIO(z.read(f"c{i}.npy")), allow_pickle=False)
                self.constants.append(Array._leaf(data, dt.from_name(name)))
        self.file = file
        self.metadata = body["metadata"]
        self.traces = body["traces"]
        self._modules = {}

    def _module(self, k):
        if k not in self._modules:
            from mlir import ir
            from .runtime.context import context
            with context():
                self._modules[k] = ir.Module.parse(self.traces[k]["module"])
        return self._modules[k]

    def __call__(self, *args, **kwargs):
        from .transforms.interpret import apply_op, interpret
        pos, kw = _inputs(args, kwargs, "[import_function::call]")
        sig = _signature(pos, kw)
        for k, t in enumerate(self.traces):
            if _same_signature(t, sig, t["shapeless"]):
                ins = pos + [kw[n] for n in t["kwargs"]] + [self.constants[i] for i in t["constants"]]
                return tuple(interpret(self._module(k), "main", ins, apply_op))
        raise ValueError(f"[import_function::call] No imported function found which matches the given inputs "
                         f"({len(pos)} positional, keywords {sorted(kw)}, inputs "
                         f"{[(tuple(s), d) for s, d in sig['inputs']]}).")


def import_function(file, return_metadata=False):
    """The function `export_function` wrote to `file` (and its metadata string with
    `return_metadata`):

        f = mr.import_function("f.mlxfn"); (y,) = f(x)
    """
    fn = ImportedFunction(file)
    return (fn, fn.metadata) if return_metadata else fn
