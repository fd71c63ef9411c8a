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

from mlir import ir
from mlir.passmanager import PassManager

from ..dialect.core import MiraxError
from ..array import Array, STATE, array, where_text
from ..tree import tree_flatten, tree_unflatten, treedef_leaves
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

    def __init__(self, fun, args, constants_out=False):
        from ..trace import Tracer, placeholder, to_mlir_text
        from ..runtime.context import context
        leaves, self.in_tree = tree_flatten(list(args))
        self.leaves = [_as_array(x) for x in leaves]
        tracer = Tracer("transform")
        tracer.concrete = self.leaves  # (vmap's leaves are placeholders of its example trace)
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
        text, self.lifted = to_mlir_text(ph, out_leaves, "main")
        with context(), ir.Location.unknown():
            self.module = ir.Module.parse("module {\n" + text + "\n}\n")

    def outputs(self, arrays):
        """The function's output tree from the arrays of its array leaves."""
        it = iter(arrays)
        n = len(arrays) + len(self.out_constants)
        return tree_unflatten(self.out_tree, [self.out_constants[i] if i in self.out_constants else next(it)
                                              for i in range(n)])

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


def _argnums(argnums, nargs):
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for a in nums:
        if not -nargs <= a < nargs:
            raise MiraxError(f"argnums {argnums} out of range for a function called with {nargs} "
                             f"arguments{where_text()}")
    return [a % nargs for a in nums], len(nums) == 1  # MLX: one argnum, one gradient (not a tuple)


def _captured_last(pass_cls, name, **opts):
    return pass_cls(function="main", result=name, **opts)


def _value_and_grad(fun, argnums, args, scalar_only=False, always_tuple=False):
    """The arguments in `argnums` are traced (each a tree of arrays); the others pass to
    `fun` as they are (any Python value, as MLX)."""
    from .mirax_vjp import MiraxGrad
    nums, single = _argnums(argnums, len(args))
    for a in nums:
        for leaf in tree_flatten(args[a])[0]:
            if not isinstance(leaf, Array):
                raise ValueError(f"[value_and_grad] argument {a} to differentiate must be an array or a tree "
                                 f"of arrays, got a {type(leaf).__name__} leaf{where_text()}")

    def diff_only(*d):
        full = list(args)
        for a, v in zip(nums, d):
            full[a] = v
        return fun(*full)
    t = Traced(diff_only, [args[a] for a in nums], constants_out=True)
    if scalar_only and (t.out_constants or len(t.out_avals) != 1):
        raise ValueError(f"[grad] The return value of the function whose gradient we want to compute "
                         f"should be a scalar array; use value_and_grad for auxiliary outputs{where_text()}")
    flat = list(range(len(t.leaves)))
    for j, a in enumerate(nums):
        for i in t.leaf_range(j):
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
    t.run_pass(MiraxGrad(function="main", argnums=",".join(map(str, flat)), value=True, result="main_grad"))
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


def _with_kwargs(fun, argnums, argnames, args, kwargs, scalar_only=False):
    """`(value, grads)` with keyword arguments, as MLX: keywords in `argnames` are
    differentiated (their gradients come back as a dict), the others are constants."""
    if isinstance(argnames, str):
        argnames = [argnames]
    argnames = list(argnames or [])
    for n in argnames:
        if n not in kwargs:
            raise ValueError(f"[value_and_grad] Can't compute the gradient of argument '{n}': it was not "
                             f"passed as a keyword argument{where_text()}")
    if argnums is None:
        argnums = () if argnames else 0
    if not argnames:
        if not kwargs:
            return _value_and_grad(fun, argnums, args, scalar_only)
        return _value_and_grad(lambda *a: fun(*a, **kwargs), argnums, args, scalar_only)
    npos = len(args)
    rest = {k: v for k, v in kwargs.items() if k not in argnames}

    def flat(*a):
        return fun(*a[:npos], **rest, **dict(zip(argnames, a[npos:])))
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for a in nums:
        if not -npos <= a < npos:
            raise ValueError(f"[value_and_grad] Can't compute the gradient of positional argument {a}: the "
                             f"function was called with {npos} positional arguments{where_text()}")
    nums = [a % npos for a in nums]
    value, grads = _value_and_grad(flat, tuple(nums) + tuple(range(npos, npos + len(argnames))),
                                   tuple(args) + tuple(kwargs[n] for n in argnames), scalar_only,
                                   always_tuple=True)
    pos = tuple(grads[:len(nums)])
    if len(nums) == 1:
        pos = pos[0]
    elif not nums:
        pos = None  # MLX: (None, {name: grad}) when only keywords are differentiated
    return value, (pos, dict(zip(argnames, grads[len(nums):])))


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
    differentiated may be any Python values."""
    _check_argnums(argnums, argnames)

    @functools.wraps(fun)
    def wrapped(*args, **kwargs):
        if not kwargs and not argnames:
            return _value_and_grad(fun, 0 if argnums is None else argnums, args, _scalar_only)
        return _with_kwargs(fun, argnums, argnames, args, kwargs, _scalar_only)
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


def vjp(fun, primals, cotangents):
    """`(outputs, vjps)`: `fun(*primals)` and the cotangents pulled back to `primals`."""
    from .mirax_vjp import MiraxVjp
    primals = list(primals)
    t = Traced(fun, primals)
    ct_leaves = [_as_array(c) for c in tree_flatten(list(cotangents))[0]]
    if len(ct_leaves) != len(t.out_avals):
        raise MiraxError(f"vjp: {len(ct_leaves)} cotangents for {len(t.out_avals)} outputs{where_text()}")
    for c, a in zip(ct_leaves, t.out_avals):
        if c.shape != a.shape:
            raise MiraxError(f"vjp: cotangent of shape {c.shape} for an output of shape {a.shape}{where_text()}")
    diff = [i for i, x in enumerate(t.leaves) if x.dtype.is_inexact]
    t.run_pass(MiraxVjp(function="main", argnums=",".join(map(str, diff)), result="main_vjp"))
    # @main_vjp(leaves..., captured..., cotangents...): captured come before cotangents
    res = interpret(t.module, "main_vjp", list(t.leaves) + list(t.lifted) + [
        c.astype(a.dtype) for c, a in zip(ct_leaves, t.out_avals)], apply_op)
    nout = len(t.out_avals)
    outs, grads = res[:nout], res[nout:]
    full = []
    it = iter(grads)
    from ..ops import zeros_like
    for i, x in enumerate(t.leaves):
        full.append(next(it) if i in diff else zeros_like(x))
    return _as_list(tree_unflatten(t.out_tree, outs)), tree_unflatten(t.in_tree, full)


def jvp(fun, primals, tangents):
    """`(outputs, jvps)`: `fun(*primals)` and the tangents pushed forward."""
    from .mirax_jvp import MiraxJvp
    primals = list(primals)
    t = Traced(fun, primals)
    t_leaves = [_as_array(x) for x in tree_flatten(list(tangents))[0]]
    if len(t_leaves) != len(t.leaves):
        raise MiraxError(f"jvp: {len(t_leaves)} tangents for {len(t.leaves)} primals{where_text()}")
    for x, tg in zip(t.leaves, t_leaves):
        if x.shape != tg.shape:
            raise MiraxError(f"jvp: tangent of shape {tg.shape} for a primal of shape {x.shape}{where_text()}")
    diff = [i for i, x in enumerate(t.leaves) if x.dtype.is_inexact]
    t.run_pass(MiraxJvp(function="main", argnums=",".join(map(str, diff)), result="main_jvp"))
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


def vmap(fun, in_axes=0, out_axes=0):
    """`fun` mapped over a batch axis: `in_axes` per argument (None: not batched, or a
    tree of axes per leaf), `out_axes` per output."""
    from .mirax_vmap import MiraxVmap
    from ..trace import Tracer, placeholder

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
        # trace fun on one example (placeholders of the unbatched shapes)
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
        t = Traced(with_key, list(tree_unflatten(treedef, examples)) + [key_ph])
        from ..ops import zeros
        keys = _random.split(_random._next(None), size) if slot["used"] else zeros((size, 2), _dt.uint32)
        t.leaves = leaves + [keys]
        ia = list(ia) + [0]
        leaves = leaves + [keys]
        outs = t.raw_out
        oa = _leaf_axes(out_axes, list(outs) if isinstance(outs, (list, tuple)) else [outs], "out_axes")
        in_axes_all = [None if a is None else a % x.ndim for x, a in zip(leaves, ia)] + [None] * len(t.lifted)
        t.run_pass(MiraxVmap(function="main", result="main_vmap", **{
            "in-axes": ",".join("none" if a is None else str(a) for a in in_axes_all),
            "out-axes": ",".join("none" if a is None else str(a) for a in oa),
            "batch-size": size}))
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
