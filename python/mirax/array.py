"""Lazy arrays: each op records a node; `eval` runs one JIT kernel per primitive.

    a = mr.array([1.0, 2.0])
    b = mr.exp(a) + 1        # nothing runs yet
    mr.eval(b)               # two cached kernels run: exp, add
"""
from __future__ import annotations

import abc
import os
import sys
import threading
import weakref

import numpy as np

from .dialect import PRIMITIVES, dtypes as dt
from .dialect.core import Aval, MiraxError
from . import device as _device
from .runtime import buffers as _buffers

_PKG_DIRS = None


def _pkg_dirs():
    global _PKG_DIRS
    if _PKG_DIRS is None:
        root = __name__.rsplit(".", 1)[0]
        mods = [sys.modules[root + s] for s in ("", ".dialect", ".lowering", ".runtime")]
        _PKG_DIRS = tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in mods)
    return _PKG_DIRS


def user_frame():
    """(filename, line, source) of the first caller outside mirax, for error messages."""
    f = sys._getframe(1)
    dirs = _pkg_dirs()
    while f is not None and f.f_code.co_filename.startswith(dirs):
        f = f.f_back
    if f is None:
        return None
    import linecache
    return f.f_code.co_filename, f.f_lineno, linecache.getline(f.f_code.co_filename, f.f_lineno).strip()


def where_text():
    fr = STATE.loc or user_frame()
    if fr is None:
        return ""
    fn, ln, src = fr
    return f"\n  at {fn}:{ln}" + (f": {src}" if src else "")


_LOC_RE = None
_loc_cache: dict = {}


def loc_of(location):
    """(file, line, source) of an MLIR location holding a file position (the first one
    of a fused or named location), or None for unknown and generated-text positions."""
    global _LOC_RE
    text = str(location)
    if '"-":' in text and STATE.source is not None:  # a buffer mirax-opt read from a file
        text = (text, STATE.source)
    hit = _loc_cache.get(text, False)
    if hit is not False:
        return hit
    if _LOC_RE is None:
        import re
        _LOC_RE = re.compile(r'"((?:[^"\\]|\\.)*)":(\d+):\d+')
    m = _LOC_RE.search(text if isinstance(text, str) else text[0])
    out = None
    if m:
        import linecache
        fn, line = m.group(1), int(m.group(2))
        if not isinstance(text, str):  # mirax-opt's buffer: its file (or stdin, kept as "-")
            if text[1][0] not in ("-", "<stdin>"):
                fn = text[1][0]
            line += text[1][1]
            out = (fn, line, linecache.getline(fn, line).strip() if fn != "-" else "")
        elif fn not in ("-", "<stdin>"):  # "-" outside mirax-opt: text mirax generated
            out = (fn, line, linecache.getline(fn, line).strip())
    if len(_loc_cache) < 10000:
        _loc_cache[text] = out
    return out


class at_loc:
    """Within: arrays built (and errors raised) point at `loc` ((file, line, source))."""

    __slots__ = ("loc", "saved")

    def __init__(self, loc):
        self.loc = loc

    def __enter__(self):
        self.saved = STATE.loc
        if self.loc is not None:
            STATE.loc = self.loc

    def __exit__(self, *exc):
        STATE.loc = self.saved


def located(err, loc):
    """`err` (a MiraxError) naming `loc`'s line, unless it names a line already."""
    if loc is None or "\n  at " in str(err):
        return err
    fn, ln, src = loc
    return type(err)(f"{err}\n  at {fn}:{ln}" + (f": {src}" if src else ""))


def _live_users(users):
    """The users still waiting to run (evaluated nodes no longer read their inputs)."""
    out = []
    for r in users:
        u = r()
        if u is not None and u._prim is not None:
            out.append(r)
    return out


def rebind(target, new) -> None:
    """`target` takes `new`'s value in place (MLX's `x[idx] = v`): nodes already built on
    `target` keep its old value, which moves to a fresh object first."""
    old = Array.__new__(Array)
    for k in Array.__slots__[:-1]:
        setattr(old, k, getattr(target, k))
    ref = weakref.ref(old)
    for x in old._inputs:  # old is a user of target's inputs now (`x[i] += 1` rebinds x[i] first)
        if x._users is None:
            x._users = [ref]
        else:
            x._users.append(ref)
    for r in target._users or ():
        u = r()
        if u is not None and u._prim is not None and any(x is target for x in u._inputs):
            u._inputs = tuple(old if x is target else x for x in u._inputs)
    origin = target._origin if target._origin is not None else (
        old if target._prim is None and target._data is None else None)  # a trace's placeholder
    for k in Array.__slots__[:-1]:
        setattr(target, k, getattr(new, k))
    target._users = new._users
    target._origin = origin


class TraceError(RuntimeError):
    """An array that depends on a traced input was evaluated inside the trace."""


class _State(threading.local):
    def __init__(self):
        self.tracing = 0  # depth of active traces: record source locations while > 0
        # while a transform applies the rule of an op: that op's (file, line, source), so
        # what the rule builds (and any error it raises) points at the user's line
        self.loc = None
        # (file name, line offset) of the buffer `mirax-opt` parsed: its locations read "-"
        self.source = None


STATE = _State()


class Array:
    """An n-dimensional array, computed lazily.

    A node holds its primitive, inputs and parameters until it is evaluated; then it
    holds a numpy buffer (`_data`) and forgets its inputs.
    """

    # _users: weak references to the nodes built on this array (so that `x[i] = v` can
    # leave them the old value); _origin: the placeholder this array was before an
    # in-place update inside a trace (the trace's argument)
    __slots__ = ("aval", "_prim", "_inputs", "_params", "_data", "_tracer", "_loc", "_dev", "_users", "_origin",
                 "__weakref__")
    __array_priority__ = 100

    def __init__(self, val, dtype=None):
        """`mr.array(val, dtype=None)`: from Python scalars, nested lists, numpy arrays or
        arrays (MLX's constructor)."""
        obj = val
        if obj is None:
            raise TypeError("array(): cannot make an array from None")
        a = _from_python(obj, dtype)  # may be a lazy node (a list of arrays is a stack)
        for k in Array.__slots__[:-1]:
            setattr(self, k, getattr(a, k))

    # ---- construction ----------------------------------------------------------------
    @staticmethod
    def _node(prim, inputs, params, aval):
        a = Array.__new__(Array)
        a.aval = aval
        a._prim = prim
        a._inputs = inputs
        a._params = params
        a._data = None
        tr = None  # the innermost trace any input belongs to
        for x in inputs:
            t = x._tracer
            if t is not None and (tr is None or t.level > tr.level):
                tr = t
        a._tracer = tr
        a._loc = (STATE.loc or user_frame()) if STATE.tracing else None
        a._dev = _device.current_device()  # where it will run (mr.stream, stream=, default)
        a._users = None
        a._origin = None
        if inputs:
            ref = weakref.ref(a)
            for x in inputs:
                users = x._users
                if users is None:
                    x._users = [ref]
                else:
                    users.append(ref)
                    if len(users) >= 64 and not len(users) & (len(users) - 1):  # at powers of two
                        x._users = _live_users(users)
        return a

    @staticmethod
    def _leaf(data, dtype: dt.Dtype, shape=None):
        """An evaluated array: `data` is a numpy array (CPU) or a device buffer (then
        `shape` is given)."""
        a = Array.__new__(Array)
        a.aval = Aval(tuple(data.shape) if shape is None else tuple(shape), dtype)
        a._dev = _device.cpu if shape is None else _device.gpu
        a._prim = None
        a._inputs = ()
        a._params = None
        a._data = data
        a._tracer = None
        a._loc = (STATE.loc or user_frame()) if STATE.tracing else None  # a constant of a trace
        a._users = None
        a._origin = None
        return a

    @staticmethod
    def _host_result(data, aval):
        """An evaluated CPU array of `aval` holding `data` (a numpy array of that shape,
        of the dtype's storage): `_leaf` without making the aval again (compiled calls)."""
        a = Array.__new__(Array)
        a.aval = aval
        a._dev = _device.cpu
        a._prim = None
        a._inputs = ()
        a._params = None
        a._data = data
        a._tracer = None
        a._loc = (STATE.loc or user_frame()) if STATE.tracing else None
        a._users = None
        a._origin = None
        return a

    # ---- properties ------------------------------------------------------------------
    @property
    def shape(self):
        return self.aval.shape

    @property
    def dtype(self):
        return self.aval.dtype

    @property
    def ndim(self):
        return len(self.aval.shape)

    @property
    def size(self):
        return self.aval.size

    @property
    def itemsize(self):
        return self.aval.dtype.size

    @property
    def nbytes(self):
        return self.size * self.itemsize

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    # ---- evaluation ------------------------------------------------------------------
    def _numpy(self) -> np.ndarray:
        """The evaluated buffer (bfloat16 widened to float32, since numpy lacks it)."""
        if self._tracer is not None:  # a value of grad/vjp/jvp's trace: its concrete twin's
            return _concrete([self])[0]._numpy()
        eval(self)
        d = _host(self._data, self.aval)
        if self.dtype is dt.bfloat16:  # (np.asarray: a 0-d result would be a numpy scalar)
            return np.asarray(np.asarray(d).astype(np.uint32) << 16).view(np.float32)
        return d

    @property
    def device(self):
        """The device this array is (or will be) computed on."""
        return self._dev

    def item(self):
        if self.size != 1:
            raise ValueError(f"item() needs an array of size 1, got shape {self.shape}")
        return self._numpy().reshape(()).item()

    def tolist(self):
        return self._numpy().tolist()

    def __array__(self, dtype=None, copy=None):
        """`np.asarray(x)`: a read-only view of the evaluated buffer (no copy), so numpy
        cannot change a mirax array, or a lazy result computed from it, behind its back;
        `np.array(x)` and `copy=True` give a writable copy."""
        a = self._numpy()
        if dtype is not None and np.dtype(dtype) != a.dtype:
            return a.astype(dtype)
        if copy:
            return a.copy()
        v = a.view()
        v.flags.writeable = False
        return v

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        """DLPack export (CPU): a copy of the value, so a consumer cannot write into mirax's
        buffer (the rule `np.asarray` keeps with a read-only view)."""
        a = np.array(self._numpy(), copy=True)
        kw = {} if max_version is None else {"max_version": max_version}
        return a.__dlpack__(stream=stream, **kw)

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU: the exported copy lives in host memory

    def __bool__(self):
        return bool(self.item())

    def __int__(self):
        return int(self.item())

    def __float__(self):
        return float(self.item())

    def __complex__(self):
        return complex(self.item())

    def __format__(self, spec):
        """`f"{x:.2f}"`: a one-element array formats as its value (as MLX)."""
        if not spec:
            return repr(self)
        if self.size != 1:
            raise TypeError(f"unsupported format string {spec!r} for an array of shape {self.shape}: only "
                            f"one-element arrays format as numbers")
        return format(self.item(), spec)

    def __reduce__(self):
        """Pickling stores the value (bfloat16 as its bits)."""
        return (_unpickle, (np.array(_host(self._evaluated()._data, self.aval)), self.dtype.name))

    def __array_namespace__(self, api_version=None):
        """The array API namespace of mirax arrays: `mirax` itself."""
        import mirax
        return mirax

    def __copy__(self):
        return Array._leaf(np.array(_host(self._evaluated()._data, self.aval)), self.dtype)

    def __deepcopy__(self, memo):
        return self.__copy__()

    def _evaluated(self):
        eval(self)
        return self

    def __index__(self):
        if self.dtype.kind not in "iu":
            raise TypeError(f"only integer arrays can be used as an index, got {self.dtype}")
        return int(self.item())

    def __repr__(self):
        if self._tracer is not None and _concrete([self], check=True) is None:
            raise TraceError(f"cannot print an array inside a traced function (transform or compile): "
                             f"it is a placeholder {self.aval} with no value yet; use "
                             f"mr.disable_compile() to debug with prints{where_text()}")
        from .printing import array2string_kwargs
        a = self._numpy()
        body = np.array2string(a, separator=", ", prefix="array(", **array2string_kwargs())
        body = body.replace(",\n\n", ",\n")  # MLX puts no blank line between blocks
        return f"array({body}, dtype={self.dtype.name})"

    def __iter__(self):
        return ArrayIterator(self)

    __hash__ = object.__hash__


class ArrayIterator:
    """`iter(x)` (MLX's `ArrayIterator`): `x[0]`, `x[1]`, ... along the first axis."""

    __slots__ = ("_a", "_i")

    def __init__(self, a):
        if not a.shape:
            raise TypeError("iteration over a 0-d array")
        self._a, self._i = a, 0

    def __iter__(self):
        return self

    def __next__(self):
        if self._i >= self._a.shape[0]:
            raise StopIteration
        self._i += 1
        return self._a[self._i - 1]


class ArrayLike(metaclass=abc.ABCMeta):  # ABCMeta: for __subclasshook__
    """MLX's `ArrayLike`: any object with an `__mlx_array__` method returning an array,
    which `mr.array` and the ops accept in place of one. `ArrayLike(obj)` wraps such an
    object, and `isinstance(obj, mr.ArrayLike)` is true for every one:

        class Box:
            def __mlx_array__(self): return mr.array([1, 2])
        mr.array(Box()) + 1    # array([2, 3])
    """

    __slots__ = ("obj",)

    def __init__(self, obj, /):
        self.obj = obj

    def __mlx_array__(self):
        out = self.obj if isinstance(self.obj, Array) else self.obj.__mlx_array__()
        if not isinstance(out, Array):
            raise TypeError(f"__mlx_array__ of {type(self.obj).__name__} returned a {type(out).__name__}, "
                            f"not an array")
        return out

    @classmethod
    def __subclasshook__(cls, other):
        return True if callable(getattr(other, "__mlx_array__", None)) else NotImplemented


def _host(data, aval):
    """A numpy array of evaluated data: a device buffer is copied out once its device has
    run what was queued (so numpy can never write into device memory)."""
    if isinstance(data, np.ndarray):
        return data
    return data.read(aval.dtype.storage, aval.shape)


def _move_to(a, dev):
    """An evaluated CPU array read by a GPU op is uploaded once and lives there from now on
    (MLX: the copy at the edge); its device buffer."""
    if isinstance(a._data, np.ndarray):
        a._data, a._dev = dev.backend.upload(a._data), dev
    return a._data


def _on(dev, data, aval):
    """`data` where `dev` reads it: numpy for the CPU, a device buffer for the GPU."""
    if dev.type is _device.DeviceType.cpu:
        if isinstance(data, np.ndarray):
            return data
        return data.host(aval.dtype.storage, aval.shape)
    return data


def _from_python(obj, dtype=None) -> Array:
    if isinstance(obj, Array):
        return obj if dtype is None or dt.to_dtype(dtype) is obj.dtype else obj.astype(dtype)
    if hasattr(type(obj), "__mlx_array__"):  # MLX's ArrayLike protocol
        return _from_python(ArrayLike.__mlx_array__(ArrayLike(obj)), dtype)
    d = dt.to_dtype(dtype) if dtype is not None else None
    if isinstance(obj, (bytes, bytearray, memoryview)):  # a buffer: its bytes, as MLX
        return Array._leaf(np.frombuffer(bytes(obj), np.uint8).copy(), dt.uint8).astype(d) if d else \
            Array._leaf(np.frombuffer(bytes(obj), np.uint8).copy(), dt.uint8)
    if isinstance(obj, (bool, float, complex)) and d is None:  # ints: by value, below
        d = dt.to_dtype(type(obj))
    if isinstance(obj, (list, tuple)) and any(isinstance(x, Array) for x in _flat(obj)):
        from .ops import stack
        parts = [x if isinstance(x, Array) else Array(x) for x in obj]
        if len({p.shape for p in parts}) > 1:
            raise ValueError("Initialization encountered non-uniform length.")  # MLX's words
        arr = stack(parts)
        return arr if d is None else arr.astype(d)
    from_numpy = isinstance(obj, (np.ndarray, np.generic))  # keeps its dtype, as in MLX
    try:
        a = np.asarray(obj)
    except OverflowError:
        a = np.asarray(obj, dtype=object)
    if a.dtype == object and not from_numpy and all(isinstance(v, int) for v in _flat(obj)):
        raise OverflowError(f"mirax.array: Python int out of the int64 range in {_short(obj)}")
    if a.dtype.kind in "USVO" and not (a.dtype.kind == "V" and a.dtype.itemsize == 2):
        if not isinstance(obj, (list, tuple, np.ndarray)):
            raise TypeError(f"mirax.array: cannot make an array from a {type(obj).__name__}")
        raise ValueError(f"mirax.array: cannot make an array from {_short(obj)} (elements of numpy type "
                         f"{a.dtype}; mirax arrays hold numbers and bools)")
    if d is None:
        if a.dtype == np.float64:
            d = dt.float32  # MLX: Python floats and numpy float64 make float32 arrays (ask for float64)
        elif a.dtype == np.int64 and not from_numpy:
            # MLX: Python ints make int32 arrays, int64 when a value needs it (never cut)
            lo, hi = np.iinfo(np.int32).min, np.iinfo(np.int32).max
            d = dt.int32 if a.size == 0 or (lo <= a.min() and a.max() <= hi) else dt.int64
        else:
            d = dt.from_numpy(a.dtype)
    elif d.kind in "iu" and not from_numpy and a.dtype.kind in "iuO":
        info = np.iinfo(d.storage)
        if a.size and (int(a.min()) < info.min or int(a.max()) > info.max):
            bad = int(a.min()) if int(a.min()) < info.min else int(a.max())
            # MLX's message for a Python scalar beside a narrower array (`x + 2**40`)
            raise ValueError(f"Converting {bad} to {d.name} would result in overflow.{where_text()}")
    if d is dt.bfloat16:
        bits = np.array(a, np.float32, order="C").view(np.uint32)
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even
        return Array._leaf(np.asarray(bits, np.uint16).reshape(a.shape), d)
    if a.dtype.kind == "c" and d.kind != "c":
        raise TypeError(f"cannot make a {d.name} array from complex values")
    return Array._leaf(_copy(a, d.storage), d)


def _copy(a: np.ndarray, storage) -> np.ndarray:
    """A C-contiguous copy of `a` as `storage`, from a cache line (runtime/buffers.py:
    vectors 16 bytes off a line span two, and numpy's arrays start so)."""
    out = _buffers.aligned(a.shape, storage)
    np.copyto(out, a, casting="unsafe")
    return out


def _short(obj, n=60):
    r = repr(obj)
    return r if len(r) <= n else r[:n] + "..."


def _flat(x):
    if isinstance(x, (list, tuple)):
        for y in x:
            yield from _flat(y)
    else:
        yield x


def _unpickle(data, name):
    return Array._leaf(np.ascontiguousarray(data), dt.from_name(name))


def from_dlpack(x, dtype=None, copy=None):
    """An array from any DLPack producer (numpy, torch, jax on the CPU): `mr.from_dlpack(t)`.
    mirax always copies the producer's values (its arrays own their buffers);
    `copy=False` is refused as MLX refuses it where it cannot share."""
    if copy is False:
        raise ValueError("from_dlpack: mirax copies imported data; copy=False cannot be honoured")
    return Array(np.from_dlpack(x), dtype)


def asarray(a, dtype=None, copy=None):
    """`a` itself when it is an array of that dtype already (unless `copy=True`), else
    `mr.array(a, dtype)`; `copy=False` raises ValueError (as MLX)."""
    if copy is False:  # as MLX: never promised
        raise ValueError("asarray: copy=False is not supported (mirax cannot promise to share memory)")
    if isinstance(a, Array) and (dtype is None or dt.to_dtype(dtype) is a.dtype):
        return a.__copy__() if copy else a
    return Array(a, dtype)


def async_eval(*trees) -> None:
    """MLX's `async_eval`: mirax evaluates now (its devices finish what `eval` queues)."""
    eval(*trees)


# `mr.array` is the class itself, as `mx.array`: a constructor and a type for isinstance
#     mr.array([[1, 2], [3, 4]], dtype=mr.float32); isinstance(x, mr.array)
array = Array


# ---- applying primitives -------------------------------------------------------------

def apply(name: str, inputs, **params) -> Array:
    """Record primitive `name` on `inputs`; shape/dtype errors name the op and user line."""
    prim = PRIMITIVES[name]
    try:
        aval = prim.check([x.aval for x in inputs], params)
    except MiraxError as err:
        raise MiraxError(f"{err}{where_text()}") from None
    return Array._node(prim, tuple(inputs), params, aval)


def apply_typed(name: str, inputs, aval: Aval, **params) -> Array:
    """Record a primitive whose result type is given (constant, arange)."""
    return Array._node(PRIMITIVES[name], tuple(inputs), params, aval)


def eager_on_cpu(x=None) -> bool:
    """Whether eager code may make a result now, on the CPU, instead of recording ops: outside
    any trace (compile, grad, vmap and shapeless compiles record the ops), `x` (if given)
    no value of a trace, and the CPU the current device."""
    return (not STATE.tracing and (x is None or x._tracer is None)
            and _device.current_device().type is _device.DeviceType.cpu)


def eager_host_data(x):
    """`x`'s numpy buffer (in x's shape) when eager code may make a result from it now
    with numpy (a broadcast, a reshape, a basic index: no op recorded, no kernel): as
    `eager_on_cpu`, and `x` evaluated on the CPU. Else None."""
    d = x._data
    if type(d) is not np.ndarray or d.shape != x.aval.shape or not eager_on_cpu(x):
        return None
    return d


def _topo(outputs):
    """Unevaluated nodes reachable from `outputs`, inputs before users."""
    if len(outputs) == 1:  # one op on evaluated inputs (eager code): no walk
        o = outputs[0]
        for x in o._inputs:
            if x._data is None:
                break
        else:
            return [o] if o._data is None else []
    order, seen = [], set()
    stack = [(o, False) for o in outputs if o._data is None]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for x in node._inputs:
            if x._data is None and id(x) not in seen:
                stack.append((x, False))
    return order


def _concrete(nodes, check=False):
    """Concrete twins of traced arrays. grad, vjp and jvp trace the function on
    placeholders that stand for the call's arguments (`tracer.concrete`); MLX computes on
    values there, so a traced array's value can be had (`.item()`, `mr.eval`, printing)
    by replaying its ops on those arguments. The traced arrays themselves stay symbolic
    (the transform still differentiates them). Raises TraceError where a placeholder has
    no value (compile, vmap, custom functions); with `check`, returns None instead."""
    from .dialect.core import Primitive
    memo = {}
    for node in _topo(nodes):
        if node._tracer is None:
            continue
        if node._prim is None:
            vals = node._tracer.concrete
            if vals is None:
                if check:
                    return None
                raise TraceError(
                    "cannot evaluate an array inside a traced function (compile, vmap or a custom "
                    "function): its value is not known while tracing; evaluate the results instead"
                    + where_text())
            memo[id(node)] = vals[node._params["index"]]
        elif not isinstance(node._prim, Primitive):  # the output of a traced call
            if check:
                return None
            raise TraceError("cannot evaluate the output of a custom function or checkpoint inside a "
                             "transform; evaluate the results instead" + where_text())
        else:
            memo[id(node)] = Array._node(node._prim, tuple(memo.get(id(x), x) for x in node._inputs),
                                         node._params, node.aval)
    twins = [memo.get(id(n), n) for n in nodes]
    if any(t._tracer is not None for t in twins):  # placeholders bound to an outer trace's values
        return _concrete(twins, check)
    return twins


def _one_op_now(o) -> bool:
    """`eval`'s path for the commonest eager case: `o` is one op recorded on the CPU
    whose inputs all hold host buffers (`mr.eval(a + b)`): it runs at once, without the
    graph walk, the trace checks and the per-device bookkeeping (~2 us of ~16 on Zen 3).
    False (nothing done) for anything else."""
    dev = o._dev
    if dev is not _device.cpu or o._prim is None:
        return False
    inputs = o._inputs
    for x in inputs:
        if type(x._data) is not np.ndarray:
            return False
    o._data = dev.run(o._prim, o._params, [x.aval for x in inputs], o.aval, [x._data for x in inputs])
    o._prim = None  # now a leaf holding data, as eval leaves it
    o._inputs = ()
    o._params = None
    return True


def eval(*trees) -> None:
    """Evaluate every array in `trees` (arrays, lists, tuples, dicts). Inside grad, vjp
    and jvp, evaluating a traced value is allowed (as MLX) and changes nothing; a traced
    value that outlived its transform (kept in a closure) gets its value here."""
    if len(trees) == 1:
        t = trees[0]
        if type(t) is Array and t._data is None and t._tracer is None and _one_op_now(t):
            return
    outs = []
    for t in trees:  # arrays given directly (the common case) need no tree walk
        if type(t) is not Array:
            from .tree import tree_leaves
            outs = [x for x in tree_leaves(trees) if isinstance(x, Array) and x._data is None]
            break
        if t._data is None:
            outs.append(t)
    if not outs:
        return
    traced = [o for o in outs if o._tracer is not None]
    if traced:
        twins = _concrete(traced)
        outs = [o for o in outs if o._tracer is None]
        leaked = [(o, t) for o, t in zip(traced, twins) if o._tracer.done]
        if leaked:
            eval([t for _, t in leaked])
            for o, t in leaked:  # the trace is over: the array is that value from now on
                o._data, o._dev, o._prim, o._inputs, o._params, o._tracer = t._data, t._dev, None, (), None, None
        if not outs:
            return
    for o in outs:
        if o._tracer is not None:
            raise TraceError(
                "cannot evaluate an array inside a traced function (transform or compile): "
                "its value is not known while tracing; evaluate the results instead"
                + where_text())
    used = []
    gpu = _device.DeviceType.gpu
    order = _topo(outs)
    _device.evaluating.nodes = order  # (for a kernel miss: CpuDevice._build)
    try:
        for node in order:
            if node._prim is None:
                raise TraceError("cannot evaluate a placeholder of a traced function" + where_text())
            dev = node._dev
            inputs = node._inputs
            if dev.type is gpu:
                ins = [_move_to(x, dev) for x in inputs]
            else:
                ins = [x._data if type(x._data) is np.ndarray else _on(dev, x._data, x.aval) for x in inputs]
            node._data = dev.run(node._prim, node._params, [x.aval for x in inputs], node.aval, ins)
            if not used or (used[0] is not dev and dev not in used):
                used.append(dev)
            node._prim = None  # now a leaf holding data, like an array made from values
            node._inputs = ()
            node._params = None
    finally:
        _device.evaluating.nodes = None
    for dev in used:  # MLX: eval returns when the values exist (one submit per device)
        dev.synchronize()
