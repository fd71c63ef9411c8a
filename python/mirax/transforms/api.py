"""The transforms' Python API, with MLX's signatures. Each call traces the function to
mirax IR, runs the transform's pass (`mirax-grad`, `mirax-vjp`, `mirax-jvp`,
`mirax-vmap`) and calls the new function on the arguments, op by op (lazily, so
inside another transform it becomes part of that trace).

    dfdx = mr.grad(lambda x: (x ** 3).sum())(x)
    (loss, aux), grads = mr.value_and_grad(loss_fn)(params)
    ys = mr.vmap(lambda m, v: m @ v, in_axes=(None, 0))(matrix, vectors)
"""
from __future__ import annotations

import functools

import numpy as np
from mlir import ir
from mlir.passmanager import PassManager

from ..dialect.core import MiraxError
from ..array import Array, STATE, array, where_text
from ..tree import tree_flatten, tree_unflatten
from . import cache as _cache
from .interpret import apply_op, interpret

__all__ = ["grad", "value_and_grad", "vjp", "jvp", "vmap", "jacfwd", "jacrev", "hessian"]


def _as_array(x):
    if isinstance(x, Array):
        return x
    try:
        return array(x)
    except (TypeError, ValueError):
        raise TransformInputError(f"transform inputs must be arrays or trees of arrays, got {type(x).__name__}"
                                  f"{where_text()}") from None


class TransformInputError(TypeError, ValueError):
    """A transform's input that is no array (numpy would say TypeError, MLX ValueError)."""


class Traced:
    """A function traced to a module: `@main(leaves..., captured...) -> (out leaves...)`."""

    def __init__(self, fun, args, constants_out=False, watch=None):
        """`watch` (a `cache.Watch`): trace for the transform cache, which takes the state
        the function reaches as arguments and notes whether the trace evaluated a value."""
        from ..trace import Tracer, placeholder, to_mlir_text
        from ..runtime.context import context
        leaves, self.in_tree = tree_flatten(list(args))
        self.leaves = [_as_array(x) for x in leaves]
        tracer = Tracer("transform")
        tracer.concrete = self.leaves  # (vmap's leaves are placeholders of its example trace)
        if watch is not None:
            tracer.concrete = _cache.Recording(self.leaves)
            tracer.concrete.watch = watch
        ph = [placeholder(a.aval, tracer, i) for i, a in enumerate(self.leaves)]
        STATE.tracing += 1
        try:
            out = fun(*tree_unflatten(self.in_tree, ph))
        finally:
            STATE.tracing -= 1
            tracer.done = True
        out_leaves, self.out_tree = tree_flatten(out)
        # value_and_grad passes non-array leaves of the auxiliary outputs through (as MLX)
        self.out_constants = {}
        for i, o in enumerate(out_leaves):
            if not isinstance(o, Array):
                if not constants_out:
                    raise TypeError(f"a transformed function must return arrays (or trees of arrays), "
                                    f"got {type(o).__name__}{where_text()}")
                self.out_constants[i] = o
        out_leaves = [o for o in out_leaves if isinstance(o, Array)]
        self.out_avals = [o.aval for o in out_leaves]
        self.raw_out = out
        text, self.lifted = to_mlir_text(ph, out_leaves, "main", lift_ids=watch.lift_ids() if watch else ())
        with context(), ir.Location.unknown():
            self.module = ir.Module.parse("module {\n" + text + "\n}\n")
        if watch is not None and not watch.reusable(self.lifted):
            self.uncacheable = True

    uncacheable = False  # traced for the cache, but not a trace to reuse

    def outputs(self, arrays):
        """The function's output tree from the arrays of its array leaves."""
        return _outputs(self.out_tree, self.out_constants, arrays)

    def run_pass(self, pass_obj):
        pm = PassManager("builtin.module", context=self.module.context)
        pass_obj.add_to(pm)
        try:
            pm.run(self.module.operation)
        except MiraxError as err:
            raise MiraxError(f"{getattr(err, 'message', err)}{where_text()}") from None

    def call(self, name, extra=()):
        """Call `@name(leaves..., extra..., captured...)` of the module on arrays."""
        return interpret(self.module, name, list(self.leaves) + list(extra) + list(self.lifted), apply_op)

    def leaf_range(self, argnum):
        """The flat leaf indices of positional argument `argnum`."""
        start = sum(c.num_leaves for c in self.in_tree.children[:argnum])
        return list(range(start, start + self.in_tree.children[argnum].num_leaves))


def _outputs(out_tree, out_constants, arrays):
    it = iter(arrays)
    n = len(arrays) + len(out_constants)
    return tree_unflatten(out_tree, [out_constants[i] if i in out_constants else next(it) for i in range(n)])


def _argnums(argnums, nargs):
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for a in nums:
        if not -nargs <= a < nargs:
            raise MiraxError(f"argnums {argnums} out of range for a function called with {nargs} "
                             f"arguments{where_text()}")
    return [a % nargs for a in nums], len(nums) == 1  # MLX: one argnum, one gradient (not a tuple)


def _captured_last(pass_cls, name, **opts):
    return pass_cls(function="main", result=name, **opts)


def _check_diff_leaves(a, tree):
    for leaf in tree_flatten(tree)[0]:
        if not isinstance(leaf, Array):
            raise ValueError(f"[value_and_grad] argument {a} to differentiate must be an array or a tree "
                             f"of arrays, got a {type(leaf).__name__} leaf{where_text()}")


def _check_grad_trace(t, scalar_only, groups):
    """What grad needs of a traced function: `groups` are (argument number as the user
    counts them, indices of its leaves among the traced leaves)."""
    if scalar_only and (t.out_constants or len(t.out_avals) != 1):
        raise ValueError(f"[grad] The return value of the function whose gradient we want to compute "
                         f"should be a scalar array; use value_and_grad for auxiliary outputs{where_text()}")
    for a, idx in groups:
        for i in idx:
            if not t.leaves[i].dtype.is_inexact:
                raise TransformInputError(f"grad: argument {a} has dtype {t.leaves[i].dtype.name}; only "
                                          f"floating-point (and complex) arrays can be differentiated"
                                          f"{where_text()}")
    if 0 in t.out_constants or not t.out_avals or t.out_avals[0].shape != () \
            or not t.out_avals[0].dtype.is_inexact:
        got = (type(t.out_constants[0]).__name__ if 0 in t.out_constants
               else t.out_avals[0] if t.out_avals else "nothing")
        raise MiraxError(f"grad: the function must return a scalar floating-point loss (first), got {got}"
                         f"{where_text()}")


def _grad_pass(t, flat):
    from .mirax_vjp import MiraxGrad
    t.run_pass(MiraxGrad(function="main", argnums=",".join(map(str, flat)), value=True, result="main_grad"))


def _value_and_grad(fun, argnums, args, scalar_only=False, always_tuple=False):
    """The arguments in `argnums` are traced (each a tree of arrays); the others pass to
    `fun` as they are (any Python value, as MLX). (The uncached path: the transform
    cache's `_vg_cached` serves top-level calls.)"""
    nums, single = _argnums(argnums, len(args))
    for a in nums:
        _check_diff_leaves(a, args[a])

    def diff_only(*d):
        full = list(args)
        for a, v in zip(nums, d):
            full[a] = v
        return fun(*full)
    t = Traced(diff_only, [args[a] for a in nums], constants_out=True)
    _check_grad_trace(t, scalar_only, [(a, t.leaf_range(j)) for j, a in enumerate(nums)])
    _grad_pass(t, list(range(len(t.leaves))))
    res = t.call("main_grad")
    nout = len(t.out_avals)
    value = t.outputs(res[:nout])
    grads_flat = res[nout:]
    grads, k = [], 0
    for j in range(len(nums)):
        n = len(t.leaf_range(j))
        grads.append(tree_unflatten(t.in_tree.children[j], grads_flat[k:k + n]))
        k += n
    return value, grads[0] if single and not always_tuple else tuple(grads)


def _vg_spec(argnums, argnames, args, kwargs):
    """MLX's defaults and checks of a call of `value_and_grad(fun, argnums, argnames)`:
    ("pos", positional argnums, one gradient not a tuple, []) or, with keywords to
    differentiate, ("kw", positional argnums, -, names)."""
    if not kwargs and not argnames:
        nums, single = _argnums(0 if argnums is None else argnums, len(args))
        return "pos", nums, single, []
    names = [argnames] if isinstance(argnames, str) else list(argnames or [])
    for n in names:
        if n not in kwargs:
            raise ValueError(f"[value_and_grad] Can't compute the gradient of argument '{n}': it was not "
                             f"passed as a keyword argument{where_text()}")
    if argnums is None:
        argnums = () if names else 0
    if not names:
        nums, single = _argnums(argnums, len(args))
        return "pos", nums, single, []
    npos = len(args)
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for a in nums:
        if not -npos <= a < npos:
            raise ValueError(f"[value_and_grad] Can't compute the gradient of positional argument {a}: the "
                             f"function was called with {npos} positional arguments{where_text()}")
    return "kw", [a % npos for a in nums], len(nums) == 1, names


def _vg_result(spec, value, grads):
    """`(value, grads)` arranged as MLX: one gradient, a tuple, or with keywords
    `(positional grads, {name: grad})`."""
    mode, nums, single, names = spec
    if mode == "pos":
        return value, grads[0] if single else tuple(grads)
    pos = tuple(grads[:len(nums)])
    if len(nums) == 1:
        pos = pos[0]
    elif not nums:
        pos = None  # MLX: (None, {name: grad}) when only keywords are differentiated
    return value, (pos, dict(zip(names, grads[len(nums):])))


def _with_kwargs(fun, spec, args, kwargs, scalar_only=False):
    """`(value, grads)` with keyword arguments, as MLX: keywords in `argnames` are
    differentiated (their gradients come back as a dict), the others are constants."""
    mode, nums, single, names = spec
    if mode == "pos":
        return _value_and_grad(lambda *a: fun(*a, **kwargs), nums, args, scalar_only)
    npos = len(args)
    rest = {k: v for k, v in kwargs.items() if k not in names}

    def flat(*a):
        return fun(*a[:npos], **rest, **dict(zip(names, a[npos:])))
    value, grads = _value_and_grad(flat, tuple(nums) + tuple(range(npos, npos + len(names))),
                                   tuple(args) + tuple(kwargs[n] for n in names), scalar_only,
                                   always_tuple=True)
    return _vg_result(spec, value, grads)


_NO = object()  # the transform cache cannot serve this call


def _signature(leaves):
    """(array leaves, compile's keys of all leaves) of a call, for the transform cache;
    raises cache.Uncacheable for leaves it cannot key (numpy arrays passed through as they
    are, functions, objects) and for traced arrays."""
    from ..compile import _leaf_key
    arrays, keys = [], []
    for x in leaves:
        if isinstance(x, Array):
            if x._tracer is not None:
                raise _cache.Uncacheable
            arrays.append(x)
        elif isinstance(x, np.ndarray):
            raise _cache.Uncacheable
        try:
            keys.append(_leaf_key(x, False))
        except (ValueError, TypeError):
            raise _cache.Uncacheable from None
    return arrays, tuple(keys)


def _vg_cached(fun, spec, args, kwargs, scalar_only, identity=None, extra_key=(), roots=None, arg_roots=None):
    """`(value, grads)` through the transform cache, or _NO where it cannot serve the call.

    `identity` (default `fun`) keys the cache and `roots` (default `(identity,)`) are where
    the walk finds the state `fun` reads; `extra_key` adds what else the trace depends
    on (nn.value_and_grad calls a new closure each time); `arg_roots` (default: the
    arguments) are walked for what their tree structure does not show (modules'
    attributes)."""
    if not _cache.active():
        return _NO
    try:
        fkey = _cache.identity(fun if identity is None else identity)
        roots = (fun if identity is None else identity,) if roots is None else tuple(roots)
        leaves, treedef = tree_flatten((list(args), dict(kwargs)))
        arrays, lkeys = _signature(leaves)
        skey, state = _cache.walk(roots, (args, kwargs) if arg_roots is None else arg_roots)
    except _cache.Uncacheable:
        return _NO
    mode, nums, single, names = spec
    key = ("vg", fkey, mode, tuple(nums), tuple(names), scalar_only, treedef, lkeys, skey, extra_key)
    e = _cache.lookup(key)
    if e is _cache.UNCACHEABLE:
        return _NO
    # the trees of the differentiated arguments (this call's: a module keeps its attributes)
    pos_tree, kw_tree = treedef.children
    npos = len(args)
    subtrees, starts, k = [], [], 0
    for c in pos_tree.children:
        starts.append(k)
        k += c.num_leaves
    kw_names = list(kwargs)
    for c in kw_tree.children:
        starts.append(k)
        k += c.num_leaves
    children = list(pos_tree.children) + list(kw_tree.children)
    groups = [(a, a) for a in nums] + [(npos + j, npos + kw_names.index(n)) for j, n in enumerate(names)]
    for shown, i in groups:
        subtrees.append(children[i])
    if e is None:
        for shown, i in groups:
            _check_diff_leaves(shown, args[i] if i < npos else kwargs[kw_names[i - npos]])
        try:
            watch = _cache.Watch(roots, state)
        except _cache.Uncacheable:
            _cache.store(key, _cache.UNCACHEABLE)
            return _NO
        at = {}  # leaf index -> index among the array leaves
        for i, x in enumerate(leaves):
            if isinstance(x, Array):
                at[i] = len(at)

        def traced(*ph):
            it = iter(ph)
            pos, kw = tree_unflatten(treedef, [next(it) if isinstance(x, Array) else x for x in leaves])
            return fun(*pos, **kw)
        t = Traced(traced, arrays, constants_out=True, watch=watch)
        idx = [[at[starts[i] + j] for j in range(children[i].num_leaves)] for _, i in groups]
        _check_grad_trace(t, scalar_only, [(shown, ix) for (shown, _), ix in zip(groups, idx)])
        _grad_pass(t, [i for ix in idx for i in ix])
        e = _cache.Entry(t.module, "main_grad", t.lifted, state,
                         (len(t.out_avals), t.out_tree, t.out_constants))
        _cache.store(key, _cache.UNCACHEABLE if t.uncacheable else e)
    nout, out_tree, out_constants = e.meta
    res = e.run(arrays, state)
    value = _outputs(out_tree, out_constants, res[:nout])
    grads, k = [], nout
    for sub in subtrees:
        grads.append(tree_unflatten(sub, res[k:k + sub.num_leaves]))
        k += sub.num_leaves
    return _vg_result(spec, value, grads)


def _check_argnums(argnums, argnames):
    """MLX's checks when the transform is made: ints only, at least one, no repeats."""
    if argnums is None or isinstance(argnums, int):
        return
    nums = tuple(argnums)
    if not all(isinstance(a, int) for a in nums):
        raise TypeError(f"[value_and_grad] argnums must be an int or a tuple of ints, got {argnums!r}")
    if not nums and not argnames:
        raise ValueError("[value_and_grad] no argument to differentiate: argnums is empty and argnames too")
    if len(set(nums)) != len(nums):
        raise ValueError(f"[value_and_grad] argnums {nums} repeats an argument")


def value_and_grad(fun, argnums=None, argnames=(), _scalar_only=False):
    """`(value, grads)` of `fun`; if `fun` returns a tuple/list, its first element is the
    scalar loss and the rest come back with the value, without gradients (as MLX).
    Keyword arguments pass through; those named in `argnames` are differentiated too
    (grads then come as `(positional grads, {name: grad})`). Arguments not
    differentiated may be any Python values. Top-level calls go through the transform
    cache (mirax/transforms/cache.py): traced once per signature."""
    _check_argnums(argnums, argnames)

    @functools.wraps(fun)
    def wrapped(*args, **kwargs):
        spec = _vg_spec(argnums, argnames, args, kwargs)
        out = _vg_cached(fun, spec, args, kwargs, _scalar_only)
        if out is not _NO:
            return out
        if not kwargs and not argnames:
            return _value_and_grad(fun, spec[1], args, _scalar_only)
        return _with_kwargs(fun, spec, args, kwargs, _scalar_only)
    return wrapped


def grad(fun, argnums=None, argnames=()):
    """The gradient of `fun`'s scalar (first) output with respect to `argnums` (and the
    keyword arguments in `argnames`, as `value_and_grad`). `fun` must return one scalar
    array (MLX raises ValueError otherwise)."""
    vg = value_and_grad(fun, argnums, argnames, _scalar_only=True)

    @functools.wraps(fun)
    def wrapped(*args, **kwargs):
        return vg(*args, **kwargs)[1]
    return wrapped


def _primal_signature(fun, primals):
    """(identity, array leaves, their tree, key, state) of a vjp/jvp call for the
    transform cache; raises cache.Uncacheable."""
    fkey = _cache.identity(fun)
    leaves, in_tree = tree_flatten(primals)
    arrays, lkeys = _signature([_as_array(x) for x in leaves])
    skey, state = _cache.walk((fun,), (primals,))
    return fkey, arrays, in_tree, lkeys, skey, state


def _check_cotangents(ct_leaves, out_avals):
    if len(ct_leaves) != len(out_avals):
        raise MiraxError(f"vjp: {len(ct_leaves)} cotangents for {len(out_avals)} outputs{where_text()}")
    for c, a in zip(ct_leaves, out_avals):
        if c.shape != a.shape:
            raise MiraxError(f"vjp: cotangent of shape {c.shape} for an output of shape {a.shape}{where_text()}")


def _vjp_pass(t):
    from .mirax_vjp import MiraxVjp
    diff = [i for i, x in enumerate(t.leaves) if x.dtype.is_inexact]
    t.run_pass(MiraxVjp(function="main", argnums=",".join(map(str, diff)), result="main_vjp"))
    return diff


def _vjp_result(out_tree, in_tree, leaves, diff, res, nout):
    from ..ops import zeros_like
    outs, grads = res[:nout], res[nout:]
    full = []
    it = iter(grads)
    diff = set(diff)
    for i, x in enumerate(leaves):
        full.append(next(it) if i in diff else zeros_like(x))
    return _as_list(tree_unflatten(out_tree, outs)), tree_unflatten(in_tree, full)


def _cached_transform(kind, fun, primals, build):
    """`(entry, arrays, state)` for transform `kind` of `fun` at `primals`' signature from
    the transform cache, traced and made by `build(traced, state)` on a miss; None when
    the cache is off or `fun` cannot be cached (then the caller traces it itself)."""
    if not _cache.active():
        return None
    try:
        fkey, arrays, in_tree, lkeys, skey, state = _primal_signature(fun, primals)
    except _cache.Uncacheable:
        return None
    key = (kind, fkey, in_tree, lkeys, skey)
    e = _cache.lookup(key)
    if e is _cache.UNCACHEABLE:
        return None
    if e is None:
        try:
            watch = _cache.Watch((fun,), state)
        except _cache.Uncacheable:
            _cache.store(key, _cache.UNCACHEABLE)
            return None
        t = Traced(fun, primals, watch=watch)
        e = build(t, state)
        _cache.store(key, _cache.UNCACHEABLE if t.uncacheable else e)
    return e, arrays, in_tree, state


def vjp(fun, primals, cotangents):
    """`(outputs, vjps)`: `fun(*primals)` and the cotangents pulled back to `primals`.
    Top-level calls go through the transform cache (traced once per signature)."""
    primals = list(primals)

    def build(t, state):
        _check_cotangents(ct_leaves, t.out_avals)
        return _cache.Entry(t.module, "main_vjp", t.lifted, state, (t.out_avals, t.out_tree, _vjp_pass(t)))
    ct_leaves = [_as_array(c) for c in tree_flatten(list(cotangents))[0]]
    hit = _cached_transform("vjp", fun, primals, build)
    if hit is not None:
        e, arrays, in_tree, state = hit
        out_avals, out_tree, diff = e.meta
        _check_cotangents(ct_leaves, out_avals)
        # @main_vjp(leaves..., captured..., cotangents...)
        res = e.run(arrays, state, [c.astype(a.dtype) for c, a in zip(ct_leaves, out_avals)])
        return _vjp_result(out_tree, in_tree, arrays, diff, res, len(out_avals))
    t = Traced(fun, primals)
    _check_cotangents(ct_leaves, t.out_avals)
    diff = _vjp_pass(t)
    # @main_vjp(leaves..., captured..., cotangents...): captured come before cotangents
    res = interpret(t.module, "main_vjp", list(t.leaves) + list(t.lifted) + [
        c.astype(a.dtype) for c, a in zip(ct_leaves, t.out_avals)], apply_op)
    return _vjp_result(t.out_tree, t.in_tree, t.leaves, diff, res, len(t.out_avals))


def _check_tangents(leaves, t_leaves):
    if len(t_leaves) != len(leaves):
        raise MiraxError(f"jvp: {len(t_leaves)} tangents for {len(leaves)} primals{where_text()}")
    for x, tg in zip(leaves, t_leaves):
        if x.shape != tg.shape:
            raise MiraxError(f"jvp: tangent of shape {tg.shape} for a primal of shape {x.shape}{where_text()}")


def _jvp_pass(t):
    from .mirax_jvp import MiraxJvp
    diff = [i for i, x in enumerate(t.leaves) if x.dtype.is_inexact]
    t.run_pass(MiraxJvp(function="main", argnums=",".join(map(str, diff)), result="main_jvp"))
    return diff


def jvp(fun, primals, tangents):
    """`(outputs, jvps)`: `fun(*primals)` and the tangents pushed forward. Top-level calls
    go through the transform cache (traced once per signature)."""
    primals = list(primals)

    def build(t, state):
        _check_tangents(t.leaves, t_leaves)
        return _cache.Entry(t.module, "main_jvp", t.lifted, state, (len(t.out_avals), t.out_tree, _jvp_pass(t)))
    t_leaves = [_as_array(x) for x in tree_flatten(list(tangents))[0]]
    hit = _cached_transform("jvp", fun, primals, build)
    if hit is not None:
        e, arrays, _, state = hit
        nout, out_tree, diff = e.meta
        _check_tangents(arrays, t_leaves)
        res = e.run(arrays, state, [t_leaves[i].astype(arrays[i].dtype) for i in diff])
        return (_as_list(tree_unflatten(out_tree, res[:nout])),
                _as_list(tree_unflatten(out_tree, res[nout:])))
    t = Traced(fun, primals)
    _check_tangents(t.leaves, t_leaves)
    diff = _jvp_pass(t)
    res = interpret(t.module, "main_jvp", list(t.leaves) + list(t.lifted) + [
        t_leaves[i].astype(t.leaves[i].dtype) for i in diff], apply_op)
    nout = len(t.out_avals)
    return (_as_list(tree_unflatten(t.out_tree, res[:nout])),
            _as_list(tree_unflatten(t.out_tree, res[nout:])))


def _as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _leaf_axes(axes, tree_args, what):
    """Per-leaf axes: an int/None for all leaves, or one entry per argument (an int,
    None, or a tree of them shaped like that argument), as MLX/JAX in_axes."""
    if axes is None or isinstance(axes, int):
        return [axes] * len(tree_flatten(list(tree_args))[0])
    if isinstance(axes, dict):  # a tree of axes for the one argument (MLX)
        axes = [axes]
    if not isinstance(axes, (list, tuple)):
        raise MiraxError(f"vmap: {what} must be an int, None, or a tree of them, got {axes!r}{where_text()}")
    axes = list(axes)
    if len(axes) != len(tree_args):
        raise MiraxError(f"vmap: {what} has {len(axes)} entries for {len(tree_args)} values{where_text()}")
    out = []
    for ax, a in zip(axes, tree_args):
        leaves, treedef = tree_flatten(a)
        out += _prefix_axes(ax, a, what)
    for ax in out:
        if ax is not None and not isinstance(ax, int):
            raise MiraxError(f"vmap: {what} does not match the arguments' trees (an axis {ax!r} where an "
                             f"array is){where_text()}")
    return out


def _prefix_axes(ax, tree, what):
    """One axis per leaf of `tree`: `ax` is a prefix of it (an int or None covers the whole
    subtree below it, as JAX/MLX in_axes)."""
    from ..tree import _node
    if ax is None or isinstance(ax, int):
        return [ax] * len(tree_flatten(tree)[0])
    node, axnode = _node(tree), _node(ax)
    if node is None or axnode is None or len(node[0]) != len(axnode[0]) or type(ax) is not type(tree) and not (
            isinstance(ax, (list, tuple)) and isinstance(tree, (list, tuple))):
        raise MiraxError(f"vmap: {what} {ax!r} does not match the arguments' trees{where_text()}")
    if isinstance(tree, dict) and set(tree) != set(ax):
        raise MiraxError(f"vmap: {what} keys {sorted(ax)} do not match the argument's {sorted(tree)}{where_text()}")
    if isinstance(tree, dict):
        return [a for k in tree for a in _prefix_axes(ax[k], tree[k], what)]
    return [a for sub_ax, sub in zip(axnode[0], node[0]) for a in _prefix_axes(sub_ax, sub, what)]


def _axes_key(axes):
    leaves, treedef = tree_flatten(axes)
    try:
        hash(tuple(leaves))
    except TypeError:
        raise _cache.Uncacheable from None
    return treedef, tuple(leaves)


def _vmap_build(fun, out_axes, args, treedef, leaves, ia, example_avals, size, watch=None):
    """Trace `fun` on one example and run the vmap pass: (the traced function, whether it
    drew from the global random state: then each call draws per-example keys)."""
    from .mirax_vmap import MiraxVmap
    from ..trace import Tracer, placeholder
    tracer = Tracer("vmap-example")
    examples = [placeholder(a, tracer, i) for i, a in enumerate(example_avals)]
    # global-state random draws inside `fun` are per example (as MLX): the function gets
    # one more argument, a key per example, that mirax.random draws from while tracing
    from .. import random as _random
    from ..dialect import dtypes as _dt
    from ..dialect.core import Aval
    key_ph = placeholder(Aval((2,), _dt.uint32), tracer, len(examples))
    slot = {"key": None, "used": False}

    def with_key(*a):
        slot["key"] = a[-1]
        _random._batch_keys.append(slot)
        try:
            return fun(*a[:-1])
        finally:
            _random._batch_keys.pop()
    t = Traced(with_key, list(tree_unflatten(treedef, examples)) + [key_ph], watch=watch)
    outs = t.raw_out
    oa = _leaf_axes(out_axes, list(outs) if isinstance(outs, (list, tuple)) else [outs], "out_axes")
    ia = list(ia) + [0]
    leaves = list(leaves) + [key_ph]
    in_axes_all = [None if a is None else a % x.ndim for x, a in zip(leaves, ia)] + [None] * len(t.lifted)
    t.run_pass(MiraxVmap(function="main", result="main_vmap", **{
        "in-axes": ",".join("none" if a is None else str(a) for a in in_axes_all),
        "out-axes": ",".join("none" if a is None else str(a) for a in oa),
        "batch-size": size}))
    return t, slot["used"]


def _vmap_keys(used, size):
    from .. import random as _random
    from ..dialect import dtypes as _dt
    from ..ops import zeros
    return _random.split(_random._next(None), size) if used else zeros((size, 2), _dt.uint32)


def vmap(fun, in_axes=0, out_axes=0):
    """`fun` mapped over a batch axis: `in_axes` per argument (None: not batched, or a
    tree of axes per leaf), `out_axes` per output. Top-level calls go through the
    transform cache (traced once per signature)."""

    @functools.wraps(fun)
    def wrapped(*args):
        leaves, treedef = tree_flatten(list(args))
        leaves = [_as_array(x) for x in leaves]
        ia = _leaf_axes(in_axes, args, "in_axes")
        sizes, example_avals = set(), []
        for x, ax in zip(leaves, ia):
            if ax is None:
                example_avals.append(x.aval)
                continue
            if not -x.ndim <= ax < x.ndim:
                raise MiraxError(f"vmap: in_axes {ax} out of range for an argument of shape {x.shape}"
                                 f"{where_text()}")
            ax %= x.ndim
            sizes.add(x.shape[ax])
            example_avals.append(type(x.aval)(x.shape[:ax] + x.shape[ax + 1:], x.dtype))
        if not sizes:
            raise MiraxError(f"vmap: at least one argument must be batched (in_axes all None){where_text()}")
        if len(sizes) > 1:
            raise MiraxError(f"vmap: batched arguments have different sizes {sorted(sizes)}{where_text()}")
        size = sizes.pop()
        if _cache.active():
            try:
                fkey = _cache.identity(fun)
                arrays, lkeys = _signature(leaves)
                skey, state = _cache.walk((fun,), (args,))
                key = ("vmap", fkey, _axes_key(in_axes), _axes_key(out_axes), treedef, lkeys,
                       tuple(None if a is None else a % x.ndim for x, a in zip(leaves, ia)), skey)
                e = _cache.lookup(key)
                if e is _cache.UNCACHEABLE:
                    raise _cache.Uncacheable
                if e is None:
                    try:
                        watch = _cache.Watch((fun,), state)
                    except _cache.Uncacheable:
                        _cache.store(key, _cache.UNCACHEABLE)
                        raise
                    t, used = _vmap_build(fun, out_axes, args, treedef, leaves, ia, example_avals, size, watch)
                    e = _cache.Entry(t.module, "main_vmap", t.lifted, state, (t.out_tree, used))
                    _cache.store(key, _cache.UNCACHEABLE if t.uncacheable else e)
            except _cache.Uncacheable:
                pass
            else:
                out_tree, used = e.meta
                # @main_vmap(leaves..., keys, captured...)
                return tree_unflatten(out_tree, e.run(arrays + [_vmap_keys(used, size)], state))
        t, used = _vmap_build(fun, out_axes, args, treedef, leaves, ia, example_avals, size)
        t.leaves = leaves + [_vmap_keys(used, size)]
        return tree_unflatten(t.out_tree, t.call("main_vmap"))
    return wrapped


# ---- jacobians ---------------------------------------------------------------------------

def _basis(x):
    """An identity of shape (x.size, *x.shape): one unit tangent per element."""
    from ..ops import eye
    return eye(x.size, dtype=x.dtype).reshape((x.size,) + x.shape)


def jacfwd(fun, argnums=0):
    """The Jacobian by forward mode: d out / d arg with shape out.shape + arg.shape."""
    def wrapped(*args):
        nums, single = _argnums(argnums, len(args))
        jacs = []
        for a in nums:
            x = _as_array(args[a])

            def push(t, a=a):
                tangents = [t if i == a else _zeros_like(args[i]) for i in range(len(args))]
                return jvp(fun, list(args), tangents)[1][0]
            cols = vmap(push, in_axes=0, out_axes=-1)(_basis(x))  # out.shape + (x.size,)
            jacs.append(cols.reshape(cols.shape[:-1] + x.shape))
        return jacs[0] if single else tuple(jacs)
    return wrapped


def jacrev(fun, argnums=0):
    """The Jacobian by reverse mode: d out / d arg with shape out.shape + arg.shape."""
    def wrapped(*args):
        nums, single = _argnums(argnums, len(args))
        out = fun(*args)
        out = out[0] if isinstance(out, (list, tuple)) else out

        def pull(ct):
            return vjp(lambda *xs: fun(*xs), list(args), [ct])[1]
        rows = vmap(pull)(_basis(out))  # per argument: (out.size,) + arg.shape
        jacs = [rows[a].reshape(out.shape + _as_array(args[a]).shape) for a in nums]
        return jacs[0] if single else tuple(jacs)
    return wrapped


def hessian(fun, argnums=0):
    """The Hessian of a scalar function: jacfwd of jacrev."""
    return jacfwd(jacrev(fun, argnums), argnums)


def _zeros_like(x):
    from ..ops import zeros_like
    return zeros_like(_as_array(x))
