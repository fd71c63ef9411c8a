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
    from ..transforms import value_and_grad as _vg

    @wraps(fn)
    def wrapped(*args, **kwargs):
        params = model.trainable_parameters()
        trained = set(_array_slots(params))
        others = [(k, v) for k, v in _array_slots(model).items() if k not in trained]
        # modules among the arguments pass through as they are: their arrays enter the
        # trace through `params` and `others`
        leaves, treedef = tree_flatten((args, kwargs), is_leaf=lambda x: isinstance(x, Module))
        arr_idx = [i for i, x in enumerate(leaves) if isinstance(x, Array)]
        changed_names: list = []
        key_changed = [False]
        key0 = mrandom.state[0]

        def inner(p, o, a, key):
            mrandom.state[0] = key
            model.update(p)
            _set(model, zip([k for k, _ in others], o))
            before = _array_slots(model)
            call_leaves = list(leaves)
            for i, v in zip(arr_idx, a):
                call_leaves[i] = v
            cargs, ckwargs = tree_unflatten(treedef, call_leaves)
            out = fn(*cargs, **ckwargs)
            after = _array_slots(model)
            changed = [(k, v) for k, v in after.items() if before.get(k) is not v]
            changed_names[:] = [k for k, _ in changed]
            key_changed[0] = mrandom.state[0] is not key
            new_key = [mrandom.state[0]] if key_changed[0] else []
            return out, [v for _, v in changed], new_key

        try:
            (value, new_state, new_key), grads = _vg(inner)(params, [v for _, v in others],
                                                            [leaves[i] for i in arr_idx], key0)
        finally:
            model.update(params)
            _set(model, others)
            mrandom.state[0] = key0
        _set(model, zip(changed_names, new_state))
        if new_key:
            mrandom.state[0] = new_key[0]
        return value, grads

    return wrapped


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
