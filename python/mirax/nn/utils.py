"""`nn.value_and_grad` and `nn.checkpoint`, as `mlx.nn.utils`."""
from __future__ import annotations

from functools import wraps
from typing import Callable, Optional

from .. import random as mrandom
from ..array import Array
from ..tree import tree_flatten, tree_unflatten
from .layers.base import Module, _unflatten_paths

__all__ = ["value_and_grad", "checkpoint"]


def _array_slots(tree, prefix="") -> dict:
    """{dotted path: array} of the arrays reachable through dicts (modules) and lists:
    the slots that `Module.update` can replace."""
    out = {}

    def walk(x, path):
        if isinstance(x, Array):
            out[path] = x
        elif isinstance(x, dict):
            for k, v in x.items():
                walk(v, f"{path}.{k}" if path else str(k))
        elif isinstance(x, list):
            for i, v in enumerate(x):
                walk(v, f"{path}.{i}" if path else str(i))
    walk(tree, prefix)
    return out


def _set(model: Module, items) -> None:
    if items:
        model.update(_unflatten_paths(list(items)), strict=False)


def value_and_grad(model: Module, fn: Callable):
    """`fn`'s value and its gradient with respect to `model.trainable_parameters()`.

    The returned function takes `fn`'s arguments and returns `(value, grads)`, grads
    shaped like the trainable parameters. If `fn` returns a tuple, its first element is
    the scalar loss and the whole tuple comes back as the value (as MLX).

    The trainable parameters, the model's other arrays (frozen parameters, running
    statistics), the array arguments and the global random key all enter the traced
    function as inputs. Arrays
    that `fn` stores in the model (e.g. BatchNorm's running statistics in training mode)
    and the advanced random key leave it as extra outputs and are stored after the call,
    so no traced value leaks;
    everything else in the model is restored afterwards."""
    from ..transforms.api import _NO, _value_and_grad, _vg_cached, _vg_spec

    @wraps(fn)
    def wrapped(*args, **kwargs):
        params = model.trainable_parameters()
        trained = set(_array_slots(params))
        others = [(k, v) for k, v in _array_slots(model).items() if k not in trained]
        # modules among the arguments pass through as they are: their arrays enter the
        # trace through `params` and `others`
        leaves, treedef = tree_flatten((args, kwargs), is_leaf=lambda x: isinstance(x, Module))
        arr_idx = [i for i, x in enumerate(leaves) if isinstance(x, Array)]
        key0 = mrandom.state[0]

        def inner(p, o, a, key):
            mrandom.state[0] = key
            model.update(p)
            _set(model, zip([k for k, _ in others], o))
            try:
                before = _array_slots(model)
                call_leaves = list(leaves)
                for i, v in zip(arr_idx, a):
                    call_leaves[i] = v
                cargs, ckwargs = tree_unflatten(treedef, call_leaves)
                out = fn(*cargs, **ckwargs)
                after = _array_slots(model)
                changed = [(k, v) for k, v in after.items() if before.get(k) is not v]
                new_key = [mrandom.state[0]] if mrandom.state[0] is not key else []
                # the names of the slots `fn` stored into are Python values of the result,
                # so that a cached trace (mirax/transforms/cache.py) gives them back too
                return out, [v for _, v in changed], new_key, tuple(k for k, _ in changed)
            finally:  # the model holds its own arrays again when the trace ends
                model.update(params)
                _set(model, others)
                mrandom.state[0] = key0

        inputs = (params, [v for _, v in others], [leaves[i] for i in arr_idx], key0)
        spec = _vg_spec(0, (), inputs, {})
        try:
            # the trace depends on `fn`, the model (its state), the arguments that are not
            # arrays (Python values, modules) and which arrays are not trained: cached on
            # this function with those in the key (see `_vg_cached`)
            statics = (treedef, tuple(_static_key(leaves[i]) for i in range(len(leaves)) if i not in arr_idx),
                       tuple(k for k, _ in others))
            out = _vg_cached(inner, spec, inputs, {}, False, identity=wrapped, extra_key=statics,
                             roots=[wrapped] + [x for x in leaves if isinstance(x, Module)], arg_roots=())
        except _Unkeyable:
            out = _NO
        try:
            if out is _NO:
                out = _value_and_grad(inner, 0, inputs)
            (value, new_state, new_key, changed_names), grads = out
        finally:
            model.update(params)
            _set(model, others)
            mrandom.state[0] = key0
        _set(model, zip(changed_names, new_state))
        if new_key:
            mrandom.state[0] = new_key[0]
        return value, grads

    return wrapped


class _Unkeyable(Exception):
    pass


def _static_key(x):
    """The cache key of an argument leaf that is not an array (compile's `_leaf_key`); a
    module stands for its state, which the cache walks."""
    import numpy as np
    from ..compile import _leaf_key
    if isinstance(x, Module):
        return ("module",)
    if isinstance(x, np.ndarray):  # compile keys it by shape; here it is a value fn reads
        raise _Unkeyable
    try:
        return _leaf_key(x, False)
    except (ValueError, TypeError):
        raise _Unkeyable from None


def checkpoint(module: Module, fn: Optional[Callable] = None):
    """`fn` (default: the module's `__call__`) with the module's trainable parameters
    as explicit inputs of `mr.checkpoint`, so its intermediates are recomputed in the
    backward pass instead of stored."""
    from ..custom import checkpoint as _checkpoint
    if fn is None:
        fn = module

    def inner_fn(params, *args, **kwargs):
        module.update(params)
        return fn(*args, **kwargs)

    checkpointed = _checkpoint(inner_fn)

    @wraps(fn)
    def wrapped(*args, **kwargs):
        params = module.trainable_parameters()
        try:
            return checkpointed(params, *args, **kwargs)
        finally:
            module.update(params)

    return wrapped
