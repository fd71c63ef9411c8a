"""The transform cache: eager `grad`, `value_and_grad`, `vjp`, `jvp`, `vmap` and
`nn.value_and_grad` trace their function and run their pass once per signature, as
`compile` does, and call the transformed function again on later calls.

The key: the transform and its options; the function (`compile.fun_identity`); the
arguments' tree structure, shapes, dtypes and Python scalars (`compile._leaf_key`); and
the state the function reaches, found by a walk over its closure, defaults, bound object,
the globals its code names (for the user's code, not mirax's) and the attributes of
modules among its arguments. The walk keys the Python values it meets (a global flag
that steers control flow retraces when it changes) and the shapes and dtypes of the
arrays; those arrays are inputs of the cached function, not constants: each call reads
them again, so parameters updated between calls (or in place) are what it computes with.

Not cached (the call traces and runs its pass, as before the cache): inside a trace (so
nesting is untouched: grad of grad, vmap of grad, grad inside compile), arguments that are
neither arrays nor constants `compile` keys (numpy arrays among the non-differentiated
arguments, functions, objects), a function whose reachable state is too big to walk
(`_MAX_OBJECTS`), and a trace that evaluated a traced value (`.item()`, `float(x)`:
control flow on array values), drew from the global random key, or replaced arrays in the
state it reaches (e.g. running statistics). Otherwise the function's Python side effects
happen when it is traced, not on every call (as `compile`).

Calls replay the transformed function op by op (lazily, as before); from the
`MIRAX_TRANSFORM_JIT_AFTER`-th hit of an entry (default 8; compile's tiering: a one-off
call does not pay for a compile) it runs as one compiled executable, compile's
`Executable`, unless compile is disabled (`mr.disable_compile()` also turns this cache
off). The cache is an LRU of `MIRAX_TRANSFORM_CACHE_CAPACITY` entries (default 128; 0
turns it off), and a function's entries go when the function is garbage-collected.
"""
from __future__ import annotations

import functools
import os
import threading
import types
import weakref
from collections import OrderedDict

import numpy as np

from ..array import STATE, Array, eval as _eval
from ..runtime.environment import number
from ..dialect.dtypes import Dtype as _Dtype

__all__ = ["cache_info", "clear", "capacity", "set_capacity", "enabled", "set_enabled"]

_CAPACITY = [number("MIRAX_TRANSFORM_CACHE_CAPACITY", 128, int, minimum=0)]
_ENABLED = [True]
_JIT_AFTER = [number("MIRAX_TRANSFORM_JIT_AFTER", 8, int)]
_MAX_OBJECTS = 4096  # values one walk of a function's state may visit
_MAX_DEPTH = 48
_SMALL_NUMPY = 1 << 16  # numpy arrays up to this many bytes are keyed by value, larger ones by identity

_ENTRIES: OrderedDict = OrderedDict()  # key -> Entry, or UNCACHEABLE
_WATCHED: dict = {}  # function identity -> weakref.finalize dropping its entries
_LOCK = threading.RLock()
_STATS = {"hits": 0, "misses": 0, "traces": 0, "uncacheable": 0, "compiled": 0, "compile_failed": 0}

UNCACHEABLE = object()  # stored for a key whose trace must run on every call


def capacity() -> int:
    return _CAPACITY[0]


def set_capacity(n: int) -> None:
    """At most `n` entries (0: no cache, every call traces)."""
    with _LOCK:
        _CAPACITY[0] = int(n)
        _trim()


def enabled() -> bool:
    return _ENABLED[0]


def set_enabled(on: bool) -> None:
    """Off: every call traces and runs its pass (as before the cache); the entries stay."""
    _ENABLED[0] = bool(on)


def clear() -> None:
    with _LOCK:
        _ENTRIES.clear()


def cache_info() -> dict:
    """Counters: hits, misses, traces (cached builds), uncacheable (calls that traced
    because the cache cannot hold them), compiled (entries that reached the compiled
    tier), and size/capacity."""
    with _LOCK:
        return dict(_STATS, size=len(_ENTRIES), capacity=_CAPACITY[0])


def active() -> bool:
    """Whether this call may use the cache at all (cheap; checked first)."""
    if _CAPACITY[0] <= 0 or STATE.tracing or not _ENABLED[0]:
        return False
    from ..compile import _ENABLED as compile_enabled
    return compile_enabled[0]


class Uncacheable(Exception):
    """This call cannot use the cache: trace as before."""


# ---- the function and its state ------------------------------------------------------------

def identity(fun):
    """The function's key (compile's), watching the function so that its entries go
    with it; raises Uncacheable when it cannot be watched (no weak references)."""
    from ..compile import fun_identity
    if _DEAD:
        _purge()
    f, key = fun_identity(fun)
    if key in _WATCHED:
        return key
    objs = [f]
    owner = getattr(fun, "__self__", None)
    if owner is not None:
        objs.append(owner)
    try:
        fins = [weakref.finalize(o, _forget, key) for o in objs]
    except TypeError:
        raise Uncacheable from None
    for fin in fins:
        fin.atexit = False
    _WATCHED[key] = fins
    return key


_DEAD: list = []  # identities of functions that ended, to drop before the next lookup


def _forget(key):
    # a finalizer can run anywhere (in the middle of another cache operation): note it,
    # and drop the entries before the next lookup (an id is reused only after this)
    _DEAD.append(key)


def _purge():
    with _LOCK:
        while _DEAD:
            key = _DEAD.pop()
            for fin in _WATCHED.pop(key, ()):
                fin.detach()
            for k in [k for k in _ENTRIES if k[1] == key]:
                del _ENTRIES[k]


_LIB_DIRS: list = []


def _library(code) -> bool:
    """Code of mirax itself: its globals are mirax's modules and tables, not user state."""
    if not _LIB_DIRS:
        import mirax
        from .. import dialect, lowering, runtime
        for m in (mirax, dialect, lowering, runtime):
            for p in m.__path__:  # (as imported, too: code names its file by that path, which
                # may hold "..": bench/ puts "bench/../python" on sys.path, and mirax's own
                # functions were walked as user code, 620 objects a call of nn.value_and_grad)
                _LIB_DIRS.extend({os.path.join(p, ""), os.path.join(os.path.abspath(p), ""),
                                  os.path.join(os.path.realpath(p), "")})
    return code.co_filename.startswith(tuple(_LIB_DIRS))


_NAMES: dict = {}  # id(code) -> (code, the names it and its nested code read)


def _names(code):
    got = _NAMES.get(id(code))
    if got is not None and got[0] is code:
        return got[1]
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names.update(_names(c))
    names = tuple(sorted(names))
    if len(_NAMES) > 8192:
        _NAMES.clear()
    _NAMES[id(code)] = (code, names)
    return names


_OPAQUE = (types.ModuleType, type, types.BuiltinFunctionType, types.FunctionType, types.MethodType,
           functools.partial)
_SIMPLE = (bool, int, float, complex, str, bytes, type(None))


class _Walk:
    """Keys and arrays of the state reachable from some roots (see the module docstring)."""

    __slots__ = ("key", "arrays", "seen", "record", "budget")

    def __init__(self):
        self.key = []
        self.arrays = []
        self.seen = {}
        self.record = True
        self.budget = _MAX_OBJECTS

    def visit(self, x, depth=0):
        t = type(x)
        key = self.key
        if t is Array or isinstance(x, Array):
            self.budget -= 1
            if x._tracer is not None:
                raise Uncacheable  # a value of a trace (leaked, or of one under way)
            if self.record:
                key.append(x.aval)
                self.arrays.append(x)
            return
        self.budget -= 1
        if self.budget < 0 or depth > _MAX_DEPTH:
            raise Uncacheable  # too much to walk on every call: trace every call instead
        if t in _SIMPLE:
            key.append(t)
            key.append(x)
            return
        i = id(x)
        got = self.seen.get(i)
        if got is not None:
            key.append(("@", got))
            return
        self.seen[i] = len(self.seen)
        depth += 1
        if t is list or t is tuple:
            key.append((t, len(x)))
            for v in x:
                self.visit(v, depth)
        elif t is dict:
            self._dict(x, depth)
        elif t is types.FunctionType:
            self._function(x, depth)
        elif t is types.MethodType:
            self.visit(x.__func__, depth)
            self.visit(x.__self__, depth)
        elif t is functools.partial:
            key.append(t)
            self.visit(x.func, depth)
            self.visit(x.args, depth)
            self.visit(x.keywords, depth)
        elif isinstance(x, (types.ModuleType, types.BuiltinFunctionType, type)):
            key.append(i)  # long-lived: identity
        elif isinstance(x, np.ndarray):
            key.append((x.shape, x.dtype.str, x.tobytes() if x.nbytes <= _SMALL_NUMPY else i))
        elif isinstance(x, np.generic):
            key.append((t, x.item()))
        elif isinstance(x, (set, frozenset)):
            try:
                key.append((t, frozenset(x)))
            except TypeError:
                key.append((t, i))
        else:
            if isinstance(x, _Dtype):
                key.append(("dtype", x.name))
                return
            key.append(t)
            if isinstance(x, dict):  # nn.Module: its items, then its attributes
                self._dict(x, depth)
            elif isinstance(x, (list, tuple)):  # NamedTuples, list subclasses
                key.append(len(x))
                for v in x:
                    self.visit(v, depth)
            d = getattr(x, "__dict__", None)
            slots = _slots(t)
            if isinstance(d, dict):
                self._dict(d, depth)
            for s in slots:
                key.append(s)
                self.visit(getattr(x, s, None), depth)
            if d is None and not slots and not isinstance(x, (dict, list, tuple)):
                key.append(i)  # opaque (no attributes to walk): identity
            elif depth == 1:  # a callable object as the function: its code's globals too
                call = getattr(t, "__call__", None)
                if type(call) is types.FunctionType:
                    self._function(call, depth)

    def _dict(self, d, depth):
        key = self.key
        key.append(len(d))
        for k, v in d.items():
            if type(k) in _SIMPLE:
                key.append(k)
            else:
                self.visit(k, depth)
            self.visit(v, depth)

    def _function(self, f, depth):
        key = self.key
        code = f.__code__
        key.append(id(code))
        for cell in f.__closure__ or ():
            try:
                v = cell.cell_contents
            except ValueError:  # not yet bound
                key.append("<empty cell>")
                continue
            self.visit(v, depth)
        if f.__defaults__:
            self.visit(f.__defaults__, depth)
        if f.__kwdefaults__:
            self.visit(f.__kwdefaults__, depth)
        if _library(code):
            return
        g = f.__globals__
        names = _names(code)
        for name in names:
            v = g.get(name, _MISSING)
            if v is _MISSING:
                continue
            key.append(name)
            if isinstance(v, types.ModuleType):  # `module.attr`: the attributes the code names
                for a in names:
                    av = getattr(v, a, _MISSING)
                    if av is _MISSING or isinstance(av, _OPAQUE) or callable(av) and not isinstance(av, dict):
                        continue
                    key.append(a)
                    self.visit(av, depth)
            else:
                self.visit(v, depth)


_MISSING = object()
_SLOTS: dict = {}


def _slots(cls):
    """The `__slots__` attributes of a class and its bases (objects without a __dict__)."""
    got = _SLOTS.get(cls)
    if got is None:
        names = []
        for c in cls.__mro__:
            s = c.__dict__.get("__slots__", ())
            for n in (s,) if isinstance(s, str) else s:
                if n not in ("__dict__", "__weakref__") and n not in names:
                    names.append(n)
        got = _SLOTS[cls] = tuple(names)
    return got


def walk(roots, arg_roots=()):
    """(key, arrays) of the state reachable from `roots` (functions, objects); the
    `arg_roots` (the call's arguments) add the keys of what their tree structure does not
    show (module attributes such as `training`), not their arrays. Raises Uncacheable."""
    w = _Walk()
    for r in roots:
        w.visit(r)
    w.record = False
    for r in arg_roots:
        w.visit(r)
    return tuple(w.key), w.arrays


# ---- entries -------------------------------------------------------------------------------

def lookup(key):
    if _DEAD:
        _purge()
    with _LOCK:
        e = _ENTRIES.get(key)
        if e is not None:
            _ENTRIES.move_to_end(key)
            if e is UNCACHEABLE:
                _STATS["uncacheable"] += 1
            else:
                _STATS["hits"] += 1
                e.hits += 1
        return e


def store(key, entry):
    if _DEAD:
        _purge()
    with _LOCK:
        if _CAPACITY[0] <= 0 or key[1] not in _WATCHED:
            return
        _ENTRIES[key] = entry
        _ENTRIES.move_to_end(key)
        if entry is UNCACHEABLE:
            _STATS["uncacheable"] += 1
        _trim()


def _trim():
    while len(_ENTRIES) > max(_CAPACITY[0], 0):
        _ENTRIES.popitem(last=False)


class Watch:
    """Around a trace for the cache: evaluates the state it will read (so a lazy array
    there is an input, not a graph baked in), then tells whether the trace was one the
    cache can reuse (see the module docstring)."""

    def __init__(self, roots, arrays):
        from .. import random as _random
        self.roots = roots
        self.before = arrays
        pending = [a for a in arrays if a._data is None]
        if pending:
            try:
                _eval(*pending)
            except Exception:
                raise Uncacheable from None
        self.key0 = _random.state[0]
        self.evaluated = False
        _STATS["misses"] += 1

    def lift_ids(self):
        """The arrays the trace must take as arguments: the state, and the global random
        key (to see whether the trace read it)."""
        ids = {id(a) for a in self.before}
        ids.add(id(self.key0))
        return ids

    def reusable(self, lifted) -> bool:
        from .. import random as _random
        k1 = _random.state[0]
        if self.evaluated:  # Python saw an array's value: control flow may depend on it
            return False
        if k1 is not self.key0 and getattr(k1, "_tracer", None) is None:  # drew from the global key
            return False
        if any(a is self.key0 for a in lifted):
            return False
        try:
            _, after = walk(self.roots)
        except Uncacheable:
            return False
        # the trace stored arrays into the state (running statistics, a leaked value)
        return len(after) == len(self.before) and all(a is b for a, b in zip(after, self.before))


class Recording(list):
    """The concrete values behind a trace's placeholders (`Tracer.concrete`) that notes
    when one is read: the trace evaluated a traced array."""

    __slots__ = ("watch",)

    def __getitem__(self, i):
        self.watch.evaluated = True
        return list.__getitem__(self, i)


class Entry:
    """One cached transformed function: how to replay it op by op, its captured inputs
    (an index into the walked state, or an array kept), and its compiled executable once
    it is called often enough."""

    __slots__ = ("module", "name", "plan", "captured", "hits", "exe", "meta", "in_avals", "out_avals")

    def __init__(self, module, name, lifted, state, meta):
        from .interpret import find_function, signature
        self.module = module
        self.name = name
        self.plan = _plan(module, name)
        index = {}
        for i, a in enumerate(state):
            index.setdefault(id(a), i)
        self.captured = [index.get(id(a), a) for a in lifted]
        self.hits = 0
        self.exe = None
        self.meta = meta
        self.in_avals, self.out_avals = signature(find_function(module, name))
        _STATS["traces"] += 1

    def run(self, head, state, tail=()):
        """The transformed function on `head + captured + tail` (captured: the state read
        at this call, or the arrays kept)."""
        ins = list(head)
        for c in self.captured:
            ins.append(state[c] if type(c) is int else c)
        ins += tail
        if self.exe is not False and self.hits >= _JIT_AFTER[0]:
            outs = self._run_compiled(ins)
            if outs is not None:
                return outs
        return _replay(self.plan, ins)

    def _run_compiled(self, ins):
        from ..compile import _ENABLED
        if not _ENABLED[0]:
            return None
        fresh = self.exe is None
        try:
            if fresh:
                self.exe = _executable(self.module, self.name, self.in_avals, self.out_avals)
            pending = [a for a in ins if a._data is None]
            if pending:
                _eval(*pending)
            outs = self.exe.run(ins)
        except Exception:  # what compile cannot lower (or run here) runs op by op, as before
            if fresh:
                self.exe = False
                _STATS["compile_failed"] += 1
                return None
            raise
        if fresh:
            self.module = None  # the plan and the executable are all a call needs now
            _STATS["compiled"] += 1
        return outs


def _plan(module, name):
    """(steps, returned slots) of `@name`: each step a mirax op (primitive, params,
    result aval, input slots) or a call (None, the callee's plan, input slots); slots
    number the arguments, then each result in order."""
    from mlir import ir
    from .interpret import find_function, op_params
    block = find_function(module, name).regions[0].blocks[0]
    slot = {v: i for i, v in enumerate(block.arguments)}
    n = len(slot)
    steps = []
    for op in block.operations:
        op = op.operation
        ins = tuple(slot[v] for v in op.operands)
        if op.name == "func.return":
            return steps, ins
        if op.name == "func.call":
            callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
            steps.append((None, _plan(module, callee), None, ins))
            for r in op.results:
                slot[r] = n
                n += 1
            continue
        prim, params, aval = op_params(op)
        steps.append((prim, params, aval, ins))
        slot[op.results[0]] = n
        n += 1
    raise ValueError(f"@{name} has no func.return")


def _replay(plan, inputs):
    """Record the ops of a plan on arrays (lazily, as `interpret` with `apply_op`; the
    result types are the traced ones, so no shape rule runs again)."""
    steps, rets = plan
    env = list(inputs)
    node = Array._node
    for prim, params, aval, ins in steps:
        if prim is None:  # a call: its callee inline
            env += _replay(params, [env[i] for i in ins])
        else:
            env.append(node(prim, tuple([env[i] for i in ins]), params, aval))
    return [env[i] for i in rets]


def _executable(module, name, in_avals, out_avals):
    """compile's Executable of the transformed function (renamed @main, the function
    it was made from dropped)."""
    from mlir import ir
    from ..compile import _executable as build
    with module.context, ir.Location.unknown():
        m = ir.Module.parse(str(module))
        ops = [op.operation for op in m.body.operations]
        for op in ops:
            if op.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == "main":
                op.erase()
        for op in m.body.operations:
            op = op.operation
            if op.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == name:
                op.attributes["sym_name"] = ir.StringAttr.get("main")
        text = "\n".join(str(op) for op in m.body.operations)
    return build(text, list(in_avals), list(out_avals), None, 0, [], name)
