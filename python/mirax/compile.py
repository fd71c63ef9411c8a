"""`mr.compile`: trace a function once to mirax IR, optimize and lower it to one native
function, and call that on later inputs (MLX's `mx.compile` semantics).

    @mr.compile
    def gelu(x):
        return x * (1 + mr.erf(x / math.sqrt(2))) / 2

    step = mr.compile(step, inputs=state, outputs=state)   # captures implicit state
    print(mr.compile(f).lower(x).as_text("linalg"))       # the IR at each stage

The cache is keyed by the function, the input tree structure, shapes (unless
`shapeless`), dtypes and Python scalar values; it is shared by every wrapper of the same
function. Called on traced inputs (inside a transform or another compiled function) a
compiled function simply runs its Python body, so it is inlined into the outer trace.
"""
from __future__ import annotations

import contextlib
import copy
import functools
import os
import sys
import weakref

import numpy as np
from mlir import ir

from . import device as _device
from . import fused as _fused
from . import shapeless as _shapeless
from .array import STATE, Array, _host, _move_to, _on, eval as _eval, where_text
from .dialect.core import MiraxError
from .runtime import buffers
from .tree import tree_flatten, tree_unflatten

__all__ = ["compile", "disable_compile", "enable_compile"]

_ENABLED = [os.environ.get("MIRAX_DISABLE_COMPILE", "") in ("", "0")]
# MIRAX_DONATE=0: new state always in buffers of its own (the old state's are never written)
_DONATE = os.environ.get("MIRAX_DONATE", "1") not in ("", "0")


def disable_compile():
    """Run compiled functions as plain Python (so `print` inside them works)."""
    _ENABLED[0] = False


def enable_compile():
    _ENABLED[0] = True


# ---- leaves, keys and in-place state --------------------------------------------------------

_SCALARS = (bool, int, float, complex)


def _leaf_key(x, shapeless):
    # shapeless: the rank stays in the key (as MLX, a new rank traces again)
    if isinstance(x, Array):
        return ("a", x.ndim if shapeless else x.shape, x.dtype.name)
    if isinstance(x, np.ndarray):
        return ("n", x.ndim if shapeless else x.shape, str(x.dtype))
    if isinstance(x, _SCALARS):
        return ("s", type(x).__name__, x)
    if isinstance(x, (str, np.generic)) or x is None:
        return ("o", type(x).__name__, x)
    from .dialect.dtypes import Dtype
    if isinstance(x, Dtype):  # a dtype argument selects a specialisation
        return ("d", x.name)
    # as MLX: anything else would be a constant the cache cannot see change
    raise ValueError(f"[compile] Function arguments must be trees of arrays or constants (numbers, strings, "
                     f"dtypes, None), but received type {type(x).__module__}.{type(x).__qualname__}{where_text()}")


def _slots(tree):
    """[(container, key)] of the array leaves of a tree of mutable containers, in
    tree_flatten order: where compile reads captured state and writes it back."""
    out = []
    _collect_slots(tree, out)
    return out


def _collect_slots(x, out):
    # a module-level recursion: a recursive closure would be a reference cycle
    if isinstance(x, dict):
        for k in x:
            v = x[k]
            if isinstance(v, Array):
                out.append((x, k))
            else:
                _collect_slots(v, out)
    elif isinstance(x, list):
        for i, v in enumerate(x):
            if isinstance(v, Array):
                out.append((x, i))
            else:
                _collect_slots(v, out)
    elif isinstance(x, tuple):
        for v in x:
            if isinstance(v, Array):
                raise TypeError("compile: state captured with inputs=/outputs= must live in lists, "
                                f"dicts or modules (a tuple cannot be updated in place){where_text()}")
            _collect_slots(v, out)
    elif x is not None and hasattr(x, "__dict__") and not isinstance(x, Array):
        for k, v in vars(x).items():
            if isinstance(v, Array):
                out.append((_Attrs(x), k))
            elif isinstance(v, (dict, list, tuple)):
                _collect_slots(v, out)


class _Attrs:
    """Item access to an object's attributes (for state held by plain objects)."""

    def __init__(self, obj):
        self.obj = obj

    def __getitem__(self, k):
        return getattr(self.obj, k)

    def __setitem__(self, k, v):
        setattr(self.obj, k, v)


# ---- the executable --------------------------------------------------------------------------

class Executable:
    """One specialization: a native function per device and how to call it."""

    def __init__(self, module_text, stages, in_avals, out_avals, out_tree, n_state_out, lifted, name,
                 passthrough=None, donations=None):
        self.text = module_text
        self.stages = stages  # filled on demand by Lowered
        self.in_avals = in_avals
        self.out_avals = out_avals  # every output; the kernel writes those not passed through
        self.passthrough = passthrough or {}  # output position -> the input it is
        # output position -> the input whose buffer it may be written into (new state in
        # the old state's buffers: `donating`)
        self.donations = donations or {}
        self.donated = {}  # the donations this kernel makes (its `donating` twin's)
        self.written_avals = [a for j, a in enumerate(out_avals) if j not in self.passthrough]
        self.kernel_avals = self.written_avals  # the kernel's out-parameters
        self.out_tree = out_tree
        self.n_state_out = n_state_out
        self.lifted = [np.asarray(_host(a._data, a.aval)) for a in lifted]
        self.lifted_avals = [a.aval for a in lifted]
        self.name = name
        self._kernel = None   # CPU: built on first use
        self._program = None  # GPU
        self._lifted_gpu = None
        self._host = None  # HostSplitProgram, False when the function has no host ops
        self._twin = None

    def donating(self):
        """This executable with its donations made (CPU): the kernel writes output j into
        the buffer of input `donations[j]` (mirax-donate-arguments), which the caller gives
        up; `run(arrays, donors=...)` copies the inputs that are not given up first. None
        where that kernel could not be built."""
        if self._twin is None:
            t = copy.copy(self)
            position = {j: r for r, j in enumerate(j for j in range(len(self.out_avals)) if j not in self.passthrough)}
            pairs = {i: position[j] for j, i in self.donations.items()}
            t.stages = {"traced": _with_donations(self.stages["traced"], pairs, self.in_avals)}
            t.text = _module_text(t.stages["traced"])
            t.donated = dict(self.donations)
            t.kernel_avals = [a for j, a in enumerate(self.out_avals) if j not in self.passthrough and j not in t.donated]
            t._kernel = t._program = t._twin = None
            try:
                t.kernel  # (built now: where the donating kernel cannot be built, the plain one runs)
            except Exception:  # noqa: BLE001 (the plain kernel then raises what is wrong with the function)
                t = False
            self._twin = t
        return self._twin or None

    @property
    def kernel(self):
        if self._kernel is None:
            from .runtime.cpu import compile_module
            # keyed by the traced text: a disk-cache hit needs no MLIR at all
            self._kernel = compile_module(self.text, "main", prepare=("mirax-simplify", _prepare_for_cpu))
        return self._kernel

    @property
    def host_program(self):
        """The function split at its host ops (LAPACK decompositions), or None without any."""
        if self._host is None:
            from .runtime import host
            self._host = host.HostSplitProgram(self.text) if host.has_host_ops(self.text) else False
        return self._host or None

    def program(self, backend):
        if self.host_program is not None:
            from .runtime import host
            raise host.gpu_error(next(n for n in host.host_names() if f'"mirax.{n}"' in self.text))
        if self._program is None:
            self._program = backend.program(self.text, "main", prepare=("mirax-simplify", _prepare_for_gpu))
        return self._program

    def run(self, arrays, device=None, donors=()):
        """Call on evaluated input arrays; returns the output arrays. `donors`: the inputs
        of `donated` pairs whose buffers the kernel may overwrite (the others are copied
        for it first)."""
        dev = device or _device.current_device()
        if dev.type is _device.DeviceType.gpu:
            return self._run_gpu(arrays, dev)
        ins = [a._data if type(a._data) is np.ndarray else _on(dev, a._data, a.aval) for a in arrays]
        for i in self.donated.values():
            if i not in donors:
                ins[i] = _copy(ins[i])
        if self.lifted:
            ins += self.lifted
        if self._host is not False and self.host_program is not None:  # compiled segments around host calls (runtime/host.py)
            outs = self.host_program(ins)
            return self._with_passthrough([Array._leaf(o, a.dtype) for o, a in zip(outs, self.kernel_avals)], arrays)
        outs = self.run_buffers(ins)
        return self._with_passthrough([Array._host_result(o, a) for o, a in zip(outs, self.kernel_avals)], arrays,
                                      ins=ins)

    def run_buffers(self, ins):
        """The CPU kernel on numpy buffers (the inputs, then the lifted constants); returns
        its new output buffers."""
        kernel = self._kernel or self.kernel
        outs = [buffers.empty(a.shape, a.dtype.storage) for a in self.kernel_avals]
        kernel(ins, outs)
        return outs

    def _with_passthrough(self, results, arrays, wrap=None, ins=None):
        """The kernel's results with the passed-through inputs put in their places
        (`wrap(i)`: input i as an output, else the input array itself), and the donated
        outputs in the buffers `ins` gave the kernel for their inputs."""
        if not self.passthrough and not self.donated:
            return results
        it = iter(results)
        out = []
        for j, a in enumerate(self.out_avals):
            if j in self.passthrough:
                i = self.passthrough[j]
                out.append(wrap(i) if wrap else arrays[i])
            elif j in self.donated:
                out.append(Array._host_result(ins[self.donated[j]], a))
            else:
                out.append(next(it))
        return out

    def call(self, arrays):
        """A compiled call on positional input arrays (no captured state): evaluate the
        pending inputs, run, and give the outputs in the traced function's tree."""
        for a in arrays:
            if a._data is None:
                _eval(*[a for a in arrays if a._data is None])
                break
        outs = self.run(arrays)
        if self.out_tree.kind == "leaf":
            return outs[0]
        return tree_unflatten(self.out_tree, outs)

    def _run_gpu(self, arrays, dev):
        backend = dev.backend
        prog = self.program(backend)
        if self._lifted_gpu is None:
            self._lifted_gpu = [backend.upload(a) for a in self.lifted]
        ins = [_move_to(a, dev) for a in arrays]
        outs = [backend.empty(a.shape, a.dtype.storage) for a in self.written_avals]
        backend.run(prog, ins + self._lifted_gpu, outs)
        return self._with_passthrough([Array._leaf(o, a.dtype, a.shape) for o, a in zip(outs, self.written_avals)],
                                      arrays, lambda i: Array._leaf(ins[i], arrays[i].dtype, arrays[i].shape))


_DONOR_REFS = 4  # the state's slot, `_run`'s arrays, `_donors`' `a` and getrefcount's argument


def _donors(exe, arrays):
    """The inputs of `exe.donations` whose buffers this call may overwrite: CPU arrays that
    nothing but the captured state holds (the user kept no reference, no lazy array reads
    them: exactly `_DONOR_REFS` references) and whose memory nothing else shares
    (`buffers.sole_owner`). A training step's parameters, the outputs of the step
    before, are: their new values are written over them."""
    if _device.current_device().type is not _device.DeviceType.cpu:
        return ()
    out = []
    for i in exe.donations.values():
        a = arrays[i]
        if sys.getrefcount(a) == _DONOR_REFS and buffers.sole_owner(a._data):
            out.append(i)
    return out


def _copy(buf):
    """A copy of numpy buffer `buf` in a buffer of the pool's (for a kernel to overwrite)."""
    out = buffers.empty(buf.shape, buf.dtype)
    np.copyto(out, buf)
    return out


def _with_donations(text, pairs, in_avals):
    """The traced `text` with @main's argument i marked to hold its result `pairs[i]`
    (`{mirax.aliasing_output = r : i64}`, read by mirax-donate-arguments)."""
    start = text.index("func.func @main(")
    end = text.index(") -> (", start)
    sig = text[start:end]
    for i, r in pairs.items():
        head = f"%arg{i}: {in_avals[i].tensor_type()}"
        k = sig.index(head) + len(head)
        sig = sig[:k] + f" {{mirax.aliasing_output = {r} : i64}}" + sig[k:]
    return text[:start] + sig + text[end:]


def _fast_key(args):
    """(shape, dtype, shape, dtype, ...) of positional arguments that are all arrays of
    no trace, else None: with the argument count it decides the specialization exactly
    as `_specialization`'s key does for such calls."""
    key = []
    for x in args:
        if type(x) is not Array or x._tracer is not None:
            return None
        av = x.aval
        key.append(av.shape)
        key.append(av.dtype)
    return tuple(key)


_STATIC = (int, float, bool, str, type(None))


def _lazy_key(args, kwargs):
    """`_fast_key` for `Compiled.lazy`'s calls: arrays of no trace by shape and dtype,
    Python values (an axis, keepdims, eps, None) by type and value (repr: -0.0 and nan
    apart), keywords by name; None for anything else (numpy arrays, lists), which
    takes the general path. Its arrays are the positional ones, in order."""
    key = []
    for x in args:
        t = type(x)
        if t is Array:
            if x._tracer is not None:
                return None
            key.append(x.aval.shape)
            key.append(x.aval.dtype)
        elif _static(x):
            key.append((t, repr(x)))
        else:
            return None
    for k, x in kwargs.items():
        if not _static(x):
            return None
        key.append((k, type(x), repr(x)))
    return tuple(key)


def _static(x) -> bool:
    """A Python value `_lazy_key` keys by its repr: a number, bool, string, None, or a tuple of ints."""
    t = type(x)
    return t in _STATIC or (t is tuple and all(type(i) is int for i in x))


_CACHE: dict = {}  # function key -> {call key -> Executable or traced module}
_TRACES: dict = {}  # function key -> number of traces


def fun_identity(fun):
    """(the object whose end ends the cache entries of `fun`, the key of `fun`): a bound
    method is keyed by its function and its object. Shared with the transform cache."""
    f = getattr(fun, "__func__", fun)
    return f, (id(f), id(getattr(fun, "__self__", None)))


def _fun_key(fun):
    f, key = fun_identity(fun)
    if key not in _CACHE:
        _CACHE[key] = {}
        _TRACES[key] = 0
        try:
            weakref.finalize(f, _forget, key)
        except TypeError:
            pass
    return key


def _forget(key):
    _CACHE.pop(key, None)
    _TRACES.pop(key, None)


_FLAT = {}
_KWARGS = "__mirax_kwargs__"  # marks the argument tree of a call with keyword arguments


def _call_fun(fun, tree):
    """Call `fun` on an unflattened argument tree: a positional list, or [positional list,
    keyword dict, marker] when the call had keywords."""
    if len(tree) == 3 and isinstance(tree[2], str) and tree[2] == _KWARGS and isinstance(tree[1], dict) and isinstance(tree[0], list):
        return fun(*tree[0], **tree[1])
    return fun(*tree)


def _flat_treedef(n):
    """The tree structure of n positional arrays."""
    d = _FLAT.get(n)
    if d is None:
        d = _FLAT[n] = tree_flatten([Array._leaf(np.zeros(()), None)] * n)[1]
    return d


class Compiled:
    """The callable `mr.compile` returns."""

    def __init__(self, fun, inputs=None, outputs=None, shapeless=False):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.inputs = inputs
        self.outputs = outputs
        self.shapeless = shapeless
        self._key = _fun_key(fun)
        # positional arrays only, no captured state: the executable by the arguments'
        # shapes and dtypes, found without building _specialization's key (a cache hit's path)
        self._fast = {} if inputs is None and outputs is None and not shapeless else None
        self._lazy = {}  # `lazy`'s calls: _lazy_key -> an executable that can be one node
        self._state_memo = None  # captured state: (args' _fast_key, executable, the state's avals) of the last call

    @property
    def trace_count(self):
        """How many times this function has been traced (shared by all its wrappers)."""
        return _TRACES.get(self._key, 0)

    def __get__(self, obj, objtype=None):  # compiled methods
        if obj is None:
            return self
        return functools.partial(self.__call__, obj)

    # ---- calling ----------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if not _ENABLED[0] or STATE.tracing:
            return self.fun(*args, **kwargs)  # disabled, or inside a trace: inline
        fk = None if kwargs else _fast_key(args)
        fast = self._fast
        if fast is not None and fk is not None:
            exe = fast.get(fk)
            if exe is not None:
                return exe.call(args)
        memo = self._state_memo
        if memo is not None and fk is not None and fk == memo[0]:
            # captured state as the last call left it (its arrays, by their avals, are that
            # call's outputs): that call's executable, without building the cache key
            # (no list of the state but `arrays`: `_donors` counts the references to it)
            state_slots = _slots(self.inputs)
            arrays = list(args)
            arrays += [c[k] for c, k in state_slots]
            avals = memo[2]
            if len(arrays) - len(args) == len(avals) and all(
                    type(x) is Array and x.aval is a for x, a in zip(arrays[len(args):], avals)):
                return self._run(memo[1], arrays, state_slots, memo[0])
        if kwargs:
            # keywords as MLX: arrays are traced, Python scalars join the cache key; the
            # tree (positional list, keyword dict) is unpacked again by _call_fun
            leaves, treedef = tree_flatten([list(args), dict(kwargs), _KWARGS])
        elif all(type(x) is Array for x in args):  # the common case, without walking a tree
            leaves, treedef = list(args), _flat_treedef(len(args))
        else:
            leaves, treedef = tree_flatten(list(args))
        for x in leaves:
            if type(x) is Array and x._tracer is not None:
                return self.fun(*args, **kwargs)  # called on traced values: inline
        exe, arrays, state_slots = self._specialization(args, leaves, treedef)
        if fast is not None and fk is not None and exe.n_state_out == 0:
            fast[fk] = exe
        return self._run(exe, arrays, state_slots, None if self.shapeless else fk)

    def _run(self, exe, arrays, state_slots, fk):
        """Run `exe` on `arrays` (the arguments' arrays, then the captured state's), write
        the new state to its slots and return the outputs in the function's tree. `fk`:
        the arguments' `_fast_key`, under which the next call with this state may skip the
        cache key (None: it may not)."""
        pending = [a for a in arrays if a._data is None]
        if pending:
            _eval(*pending)
        del pending
        if exe.n_state_out:
            # the state's slots as read for this call when inputs= is outputs= and no
            # trace ran since (no Python of the user's between the two walks)
            same = state_slots is not None and self.outputs is self.inputs
            out_slots = state_slots if same else _slots(self.outputs)
            if len(out_slots) != exe.n_state_out:
                raise MiraxError(f"compile: the outputs= state changed structure since it was traced "
                                 f"({len(out_slots)} arrays now, {exe.n_state_out} then){where_text()}")
        donors = _donors(exe, arrays) if exe.donations and _DONATE else ()
        twin = exe.donating() if donors else None
        outs = twin.run(arrays, donors=donors) if twin is not None else exe.run(arrays)
        n = len(outs) - exe.n_state_out
        if exe.n_state_out:
            for (c, k), v in zip(out_slots, outs[n:]):
                c[k] = v
            if same and fk is not None:
                self._state_memo = (fk, exe, tuple(v.aval for v in outs[n:]))
        return tree_unflatten(exe.out_tree, outs[:n])

    def lazy(self, args, kwargs):
        """This call as one lazy node (`fused.FUSED`: evaluated with the graph around it)
        instead of run now; None where it cannot be one (compile disabled, traced
        arguments, captured state, not exactly one output, host ops)."""
        if not _ENABLED[0] or self.inputs is not None or self.outputs is not None or self.shapeless:
            return None
        fast = self._lazy
        fk = _lazy_key(args, kwargs)
        exe = fast.get(fk) if fk is not None else None
        if exe is not None:  # (only executables that passed the checks below are kept)
            arrays = [x for x in args if type(x) is Array]
        else:
            if kwargs:
                leaves, treedef = tree_flatten([list(args), dict(kwargs), _KWARGS])
            else:
                leaves, treedef = tree_flatten(list(args))
            if any(type(x) is Array and x._tracer is not None for x in leaves):
                return None
            exe, arrays, _ = self._specialization(args, leaves, treedef)
            if exe.n_state_out or exe.passthrough or exe.out_tree.kind != "leaf" or exe.host_program is not None:
                return None
            if fk is not None:
                fast[fk] = exe
        return Array._node(_fused.FUSED, tuple(arrays), {"exe": exe}, exe.out_avals[0])

    def _specialization(self, args, leaves, treedef):
        """(the executable for these arguments, building it if needed; the input arrays:
        the array leaves, then the captured state; the state's slots, None when the
        function was traced now: its Python may have changed the state's structure)."""
        state_slots = _slots(self.inputs) if self.inputs is not None else []
        state_in = [c[k] for c, k in state_slots]
        if self.shapeless:
            state_key = tuple(_leaf_key(x, True) for x in state_in)
        else:  # (state leaves are arrays: _leaf_key's key for one, without a call per leaf)
            state_key = tuple([("a", v.shape, v.dtype.name) for v in [x.aval for x in state_in]])
        key = (treedef, tuple(_leaf_key(x, self.shapeless) for x in leaves), state_key)
        arrays = [x if isinstance(x, Array) else Array(x) for x in leaves if isinstance(x, (Array, np.ndarray))]
        arrays += state_in
        cache = _CACHE[self._key]
        exe = cache.get(key)
        if exe is None or (self.shapeless and exe.in_avals != [a.aval for a in arrays]):
            exe = self._build(args, leaves, treedef, state_slots, arrays, key, cache)
            state_slots = None
        return exe, arrays, state_slots

    def _build(self, args, leaves, treedef, state_slots, arrays, key, cache):
        avals = tuple(a.aval for a in arrays)
        base = cache.get(key)
        if base is not None:  # shapeless, new shapes: specialize the traced IR, no retrace
            specs = cache.setdefault(("shapes", key), {})
            exe = specs.get(avals)
            if exe is None:
                exe = specs[avals] = _respecialize(base, list(avals))
            return exe
        exe = self._trace(args, leaves, treedef, state_slots, arrays)
        cache[key] = exe
        return exe

    def _trace(self, args, leaves, treedef, state_slots, arrays):
        """Trace the function on placeholders and build its executable."""
        from .trace import Tracer, placeholder, to_mlir_text
        tracer = Tracer("compile")
        ph = [placeholder(a.aval, tracer, i) for i, a in enumerate(arrays)]
        it = iter(ph)
        traced_leaves = [next(it) if isinstance(x, (Array, np.ndarray)) else x for x in leaves]
        state_ph = [next(it) for _ in state_slots]
        saved = [c[k] for c, k in state_slots]
        for (c, k), p in zip(state_slots, state_ph):
            c[k] = p
        STATE.tracing += 1
        try:
            with _shapeless.tracing() if self.shapeless else contextlib.nullcontext():
                out = _call_fun(self.fun, tree_unflatten(treedef, traced_leaves))
            out_leaves, out_tree = tree_flatten(out)
            out_slots = _slots(self.outputs) if self.outputs is not None else []
            state_out = [c[k] for c, k in out_slots]
        finally:
            STATE.tracing -= 1
            for (c, k), v in zip(state_slots, saved):
                c[k] = v
        for o in out_leaves:
            if not isinstance(o, Array):
                raise TypeError(f"compile: the function must return arrays (or trees of arrays), got "
                                f"{type(o).__name__}{where_text()}")
        _TRACES[self._key] = _TRACES.get(self._key, 0) + 1
        all_out = list(out_leaves) + list(state_out)
        # an output that is an input as it came in (state the step left alone: SGD's
        # momentum buffers at momentum 0, say) is handed back, not copied by the kernel
        # into a new buffer (2.6 MB a step of the MLP benchmark)
        # (by identity, and still the placeholder: `state[0] *= 2` rebinds the placeholder's
        # object to the product, array.rebind, which is then a result like any other)
        index = {id(p): i for i, p in enumerate(ph)}
        passthrough = {j: index[id(o)] for j, o in enumerate(all_out) if id(o) in index and o._origin is None}
        if len(passthrough) == len(all_out):
            passthrough = {}  # (a kernel of no results: nothing to gain, keep the plain path)
        kernel_out = [o for j, o in enumerate(all_out) if j not in passthrough]
        text, lifted = to_mlir_text(ph, kernel_out, "main")
        _eval(lifted)
        name = getattr(self.fun, "__name__", "fun")
        donations = {} if self.shapeless else _donations(state_slots, out_slots, len(out_leaves), arrays, all_out,
                                                         passthrough, text)
        return _executable(text, [a.aval for a in arrays], [o.aval for o in all_out], out_tree,
                           len(state_out), lifted, name, passthrough, donations)

    # ---- inspection ---------------------------------------------------------------------
    def lower(self, *args):
        """The IR of this function for `args` at each stage: `.as_text(stage)`."""
        leaves, treedef = tree_flatten(list(args))
        exe, _, _ = self._specialization(args, leaves, treedef)
        return Lowered(exe.stages)


class Lowered:
    """The IR of a compiled function at each stage of its lowering:
    `mirax` (as traced), `simplified` (after mirax-simplify), `linalg` (after
    convert-mirax-to-linalg), `optimized` (fused, tiled and parallelized linalg on
    tensors, before bufferization), `llvm` (after the whole CPU pipeline)."""

    STAGES = ("mirax", "simplified", "linalg", "optimized", "llvm")
    # the gpu dialect (kernels and launches), the spirv dialect (Vulkan), and the kernels as
    # Metal Shading Language (SPIRV-Cross) and as NVIDIA PTX (NVVM)
    GPU_STAGES = ("gpu", "spirv", "msl", "ptx")

    def __init__(self, stages):
        self.stages = stages  # computed lazily past "simplified"

    def as_text(self, stage="mirax"):
        if stage not in self.STAGES + self.GPU_STAGES:
            raise ValueError(f"no stage '{stage}'; stages are {', '.join(self.STAGES + self.GPU_STAGES)}")
        if "simplified" not in self.stages:
            self.stages.update(early_stages(self.stages["traced"]))
        if stage in self.GPU_STAGES and stage not in self.stages:
            self.stages.update(_gpu_stages(self.stages["simplified"], stage))
        if stage not in self.stages:
            self.stages.update(_late_stages(self.stages["simplified"]))
        return self.stages[stage]

    def __repr__(self):
        return f"Lowered(stages={list(self.STAGES)})"


def _module_text(text):
    return "module {\n" + text + "\n}\n"


def _with_c_interface(text):
    """Parse a traced module and mark @main to get a C interface."""
    from .runtime.context import context
    from .transforms.interpret import find_function
    with context(), ir.Location.unknown():
        m = ir.Module.parse(_module_text(text))
        find_function(m, "main").attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
        return m


def _prepare_for_cpu(module):
    """What compile does to a traced module before the CPU pipeline."""
    from .transforms.interpret import find_function
    with module.context, ir.Location.unknown():
        find_function(module, "main").attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
    _prepare_for_gpu(module)


def _prepare_for_gpu(module):
    """What compile does to a traced module before the GPU pipelines (the CPU's too)."""
    from .lowering import PASSES
    _run_passes(module, PASSES["mirax-simplify"]().add_to)


def _run_passes(module, add):
    from mlir.passmanager import PassManager
    pm = PassManager("builtin.module", context=module.context)
    add(pm)
    with module.context, ir.Location.unknown():
        pm.run(module.operation)


def _run(module, add) -> str:
    """`module` after the passes `add` adds, as text (the stages `lower` shows)."""
    _run_passes(module, add)
    return str(module)


def early_stages(text) -> dict:
    """The traced module (`mirax`) and after mirax-simplify (`simplified`)."""
    from .lowering import PASSES
    m = _with_c_interface(text)
    stages = {"mirax": str(m)}
    stages["simplified"] = _run(m, PASSES["mirax-simplify"]().add_to)
    return stages


def _gpu_stages(simplified, stage) -> dict:
    """The GPU stages the lowering for `stage`'s target fills: "gpu" and "spirv" for this
    machine's Vulkan device, "msl" for Metal, "ptx" for NVIDIA."""
    from .lowering.gpu_pipeline import lower_to_spirv
    from .lowering.gpu_to_ptx import ptx_program
    from .lowering.spirv_to_msl import msl_program
    from .runtime.context import context
    from .runtime.vulkan import target
    lower = {"msl": msl_program, "ptx": ptx_program}.get(
        stage, lambda m, name, stages: lower_to_spirv(m, name, target(), stages))
    stages = {}
    with context(), ir.Location.unknown():
        lower(ir.Module.parse(simplified), "main", stages=stages)
    return {stage: stages[stage]} if stage in ("msl", "ptx") else stages


def _late_stages(simplified) -> dict:
    from .lowering import PASSES
    from .lowering.cpu_pipeline import MiraxCpuPipeline
    from .runtime.context import context
    ctx = context()
    with ctx, ir.Location.unknown():
        linalg = _run(ir.Module.parse(simplified), PASSES["convert-mirax-to-linalg"]().add_to)
        optimized = _run(ir.Module.parse(simplified), MiraxCpuPipeline().add_tensor_passes)
        llvm = _run(ir.Module.parse(simplified), MiraxCpuPipeline().add_to)
    return {"linalg": linalg, "optimized": optimized, "llvm": llvm}


def _slot_id(slot):
    c, k = slot
    return (id(c.obj) if isinstance(c, _Attrs) else id(c), k)


def _donations(state_slots, out_slots, n_out, arrays, all_out, passthrough, text):
    """{output position: input position} for the new state that may be written over the
    old: an `outputs=` slot that is also an `inputs=` slot, of the same shape and dtype,
    whose old value is not also handed back (passed through). None (an empty dict) for
    functions split at host ops (runtime/host.py), whose segments are compiled apart."""
    if not out_slots or not state_slots:
        return {}
    n_args = len(arrays) - len(state_slots)
    position = {_slot_id(sl): n_args + s for s, sl in enumerate(state_slots)}
    given = set(passthrough.values())
    out = {}
    for s, sl in enumerate(out_slots):
        j, i = n_out + s, position.get(_slot_id(sl))
        if i is None or j in passthrough or i in given:
            continue
        a, b = all_out[j].aval, arrays[i].aval
        if a.shape == b.shape and a.dtype == b.dtype:
            out[j] = i
    if out:
        from .runtime import host
        if host.has_host_ops(text):
            return {}
    return out


def _executable(text, in_avals, out_avals, out_tree, n_state_out, lifted, name, passthrough=None,
                donations=None):
    try:
        stages = {"traced": text}
        if os.environ.get("MIRAX_DUMP_IR"):
            low = Lowered(stages)
            for st in Lowered.STAGES:
                low.as_text(st)
            _dump(name, {k: v for k, v in stages.items() if k != "traced"})
        return Executable(_module_text(text), stages, in_avals, out_avals, out_tree, n_state_out, lifted, name,
                          passthrough, donations)
    except ir.MLIRError as err:
        raise MiraxError(f"compile: lowering failed: {err}{where_text()}") from None


def _respecialize(exe, in_avals):
    """A shapeless function at new input shapes of the same ranks: the traced IR recorded
    again at those shapes (no new trace; see `mirax.shapeless`); what cannot follow the
    new shapes fails with the op's error and line."""
    from .runtime.context import context
    from .trace import to_mlir_text
    with context(), ir.Location.unknown():
        m = ir.Module.parse(_module_text(exe.stages["traced"]))
    n_lifted = len(exe.lifted)
    lifted = [Array._leaf(d, a.dtype) for d, a in zip(exe.lifted, exe.lifted_avals)]
    STATE.tracing += 1
    try:
        ph, outs = _shapeless.respecialize(m, "main", in_avals, lifted)
    except MiraxError as err:
        raise MiraxError(f"compile(shapeless=True): the function cannot run on the new input shapes "
                         f"{[a.shape for a in in_avals]}: {str(err).splitlines()[0]}{where_text()}") from None
    finally:
        STATE.tracing -= 1
    text, new_lifted = to_mlir_text(ph, outs, "main", lift=True)
    assert n_lifted == 0 or new_lifted, "captured constants are lifted again"
    _eval(new_lifted)
    it = iter([o.aval for o in outs])  # (the passed-through outputs: the new inputs' avals)
    out_avals = [in_avals[exe.passthrough[j]] if j in exe.passthrough else next(it) for j in range(len(exe.out_avals))]
    return _executable(text, in_avals, out_avals, exe.out_tree, exe.n_state_out, new_lifted, exe.name, exe.passthrough)


_DUMPS = [0]


def _dump(name, stages):
    d = os.environ.get("MIRAX_DUMP_IR")
    if not d:
        return
    _DUMPS[0] += 1
    try:
        os.makedirs(d, exist_ok=True)
        for stage, text in stages.items():
            with open(os.path.join(d, f"{name}.{_DUMPS[0]}.{stage}.mlir"), "w") as f:
                f.write(text)
    except OSError as err:
        raise OSError(err.errno, f"MIRAX_DUMP_IR={d!r}: cannot write the IR dumps there ({err.strerror})",
                      err.filename) from None


def compile(fun=None, inputs=None, outputs=None, shapeless=False, *, in_shardings=None, out_shardings=None):
    """Compile `fun` (MLX's `mx.compile`); usable as `@mr.compile`, `mr.compile(f, ...)`
    and through `functools.partial(mr.compile, inputs=..., outputs=...)`.

    State captured with `inputs=`/`outputs=` is donated as MLX donates buffers: on the CPU
    the new value of a slot is written over its old array's buffer when nothing else holds
    that array (keep a reference, or a numpy view, and it stays intact; `MIRAX_DONATE=0`
    never donates):

        step = mr.compile(step, inputs=state, outputs=state)
        step(x, y)   # the parameters and optimizer state keep their buffers

    `in_shardings=`/`out_shardings=` (beyond MLX) split the function over the processes
    of an MPI job through MLIR's `shard` dialect (mirax/sharding.py)."""
    if in_shardings is not None or out_shardings is not None:
        if inputs is not None or outputs is not None or shapeless:
            raise ValueError("compile: in_shardings/out_shardings cannot be combined with inputs=, outputs= "
                             "or shapeless=True")
        from .sharding import ShardedCompiled
        if fun is None:
            return lambda f: ShardedCompiled(f, in_shardings, out_shardings)
        return ShardedCompiled(fun, in_shardings, out_shardings)
    if fun is None:
        return lambda f: Compiled(f, inputs, outputs, shapeless)
    return Compiled(fun, inputs, outputs, shapeless)
