"""`nn.Module`, as MLX's: a dict whose array-valued entries are parameters and whose
Module-valued entries (directly or inside lists and dicts) are submodules.

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = [nn.Linear(2, 8), nn.Linear(8, 1)]
        def __call__(self, x):
            return self.layers[1](nn.relu(self.layers[0](x)))

    model = MLP()
    model.parameters()            # {"layers": [{"weight": ..., "bias": ...}, {...}]}
    model.freeze(keys="bias")     # trainable_parameters() drops the biases
    model.update(new_params)      # in place; nested dicts/lists, partial is fine

Module is registered as a tree node (its items, rebuilt as a module of the same class),
so the transforms see a module as the dict of its contents and call functions with a
module; `mirax.utils` sees it as a dict.
"""
from __future__ import annotations

import textwrap
from typing import Any, Callable, List, Optional, Union

from ...array import Array
from ...dtypes import floating, issubdtype
from ...tree import register_tree_node

__all__ = ["Module"]


def _flatten_paths(tree, prefix: str = "", is_leaf=None):
    """[(dotted path, leaf)]: dicts (modules included unless `is_leaf` says otherwise),
    lists and tuples are nodes, as `mlx.utils.tree_flatten(tree, prefix, is_leaf)`."""
    out = []

    def walk(x, path):
        if is_leaf is not None and is_leaf(x):
            out.append((path, x))
        elif isinstance(x, dict):
            for k, v in x.items():
                walk(v, f"{path}.{k}" if path else str(k))
        elif isinstance(x, (list, tuple)):
            for i, v in enumerate(x):
                walk(v, f"{path}.{i}" if path else str(i))
        else:
            out.append((path, x))
    walk(tree, prefix)
    return out


def _unflatten_paths(pairs):
    """Nested dicts/lists from (dotted path, value) pairs (digit keys make lists)."""
    if len(pairs) == 1 and pairs[0][0] == "":
        return pairs[0][1]
    children: dict = {}
    for path, value in pairs:
        head, _, rest = path.partition(".")
        children.setdefault(head, []).append((rest, value))
    if children and all(k.isdigit() for k in children):
        out: list = [{} for _ in range(max(int(k) for k in children) + 1)]
        for k, v in children.items():
            out[int(k)] = _unflatten_paths(v)
        return out
    return {k: _unflatten_paths(v) for k, v in children.items()}


class Module(dict):
    """Base class of layers and models (see the module docstring)."""

    __call__: Callable

    def __init__(self):
        """Subclasses must call this first."""
        object.__setattr__(self, "_no_grad", set())
        object.__setattr__(self, "_training", True)

    # ---- attributes are dict entries -------------------------------------------------
    @property
    def training(self) -> bool:
        """Whether the module is in training mode (see `train`/`eval`)."""
        return self._training

    @property
    def state(self):
        """The module itself: a live tree of everything it holds (parameters, running
        statistics, ...) whose leaves can be replaced in place, e.g. by
        `mr.compile(step, inputs=model.state, outputs=model.state)`."""
        return self

    def __getattr__(self, key: str):
        if key in self:
            return self[key]
        return object.__getattribute__(self, key)  # raises AttributeError

    def __setattr__(self, key: str, val: Any):
        if isinstance(val, (Array, dict, list, tuple)):
            if key in self.__dict__:
                del self.__dict__[key]
            self[key] = val
        else:
            object.__setattr__(self, key, val)
            self.pop(key, None)

    def __delattr__(self, key: str):
        if key in self:
            del self[key]
        else:
            object.__delattr__(self, key)

    # dicts compare by contents; arrays do not compare to bools, so modules compare
    # by identity (as objects), which is also what containment tests need
    def __eq__(self, other):
        return self is other

    def __ne__(self, other):
        return self is not other

    __hash__ = object.__hash__

    def _extra_repr(self) -> str:
        return ""

    def __repr__(self):
        children = _flatten_paths(self.children(), is_leaf=self.is_module)
        value = f"{type(self).__name__}({self._extra_repr()}"
        for k, v in children:
            value += "\n" + textwrap.indent(f"({k}): {repr(v)}", prefix="  ")
        if children:
            value += "\n"
        return value + ")"

    # ---- filters ---------------------------------------------------------------------
    @staticmethod
    def is_module(value) -> bool:
        return isinstance(value, Module)

    @staticmethod
    def valid_child_filter(module, key, value) -> bool:
        return isinstance(value, (dict, list))

    @staticmethod
    def valid_parameter_filter(module, key, value) -> bool:
        return isinstance(value, (dict, list, Array)) and not str(key).startswith("_")

    @staticmethod
    def trainable_parameter_filter(module, key, value) -> bool:
        return Module.valid_parameter_filter(module, key, value) and key not in module._no_grad

    def filter_and_map(self, filter_fn: Callable[["Module", str, Any], bool],
                       map_fn: Optional[Callable] = None,
                       is_leaf_fn: Optional[Callable[["Module", str, Any], bool]] = None):
        """The contents selected by `filter_fn(module, key, value)`, recursively, as
        nested dicts and lists, with `map_fn` applied to the leaves."""
        map_fn = map_fn or (lambda x: x)
        is_leaf_fn = is_leaf_fn or (lambda m, k, v: not isinstance(v, (Module, dict, list)))
        return {k: _unwrap(self, k, v, filter_fn, map_fn, is_leaf_fn)
                for k, v in self.items() if filter_fn(self, k, v)}

    def parameters(self):
        """All array members, recursively, as a dict of dicts and lists."""
        return self.filter_and_map(self.valid_parameter_filter)

    def trainable_parameters(self):
        """The arrays that are not frozen, recursively, as a dict of dicts and lists."""
        return self.filter_and_map(self.trainable_parameter_filter)

    def children(self):
        """The direct submodules (inside their lists and dicts)."""
        return self.filter_and_map(self.valid_child_filter, is_leaf_fn=lambda m, k, v: isinstance(v, Module))

    def leaf_modules(self):
        """The submodules that have no submodules."""
        def is_leaf_module(m, k, v):
            return isinstance(v, Module) and len(_flatten_paths(v.children())) == 0
        return self.filter_and_map(self.valid_child_filter, is_leaf_fn=is_leaf_module)

    # ---- updates ---------------------------------------------------------------------
    def update(self, parameters: dict, strict: bool = True) -> "Module":
        """Replace parameters, in place, with those of a (possibly partial) nested dict/list.

        With `strict`, every key must name an existing member and arrays must be
        replaced by arrays."""
        def apply(dst, params):
            if isinstance(params, dict):
                for k in params:
                    if k in dst:
                        cur, new = dst[k], params[k]
                        if new is None:  # an empty slot
                            continue
                        if isinstance(cur, Array):
                            if strict and not isinstance(new, Array):
                                raise ValueError(f"Received invalid type: {type(new).__name__}.")
                            dst[k] = new
                        else:
                            apply(cur, new)
                    elif strict:
                        raise ValueError(f'Module does not have parameter named "{k}".')
            elif isinstance(params, list):
                for i in range(len(params)):
                    if i >= len(dst):  # e.g. weights of layers the model does not have
                        if strict:
                            raise ValueError(f"List index {i} is out of bounds for destination of length {len(dst)}.")
                        continue
                    cur, new = dst[i], params[i]
                    if new is None:
                        continue
                    if isinstance(cur, Array):
                        if strict and not isinstance(new, Array):
                            raise ValueError(f"Received invalid type: {type(new).__name__}.")
                        dst[i] = new
                    else:
                        apply(cur, new)
            elif strict:
                raise ValueError(f"Received invalid type: {type(params).__name__}.")
        apply(self, parameters)
        return self

    def apply(self, map_fn: Callable[[Array], Array],
              filter_fn: Optional[Callable[["Module", str, Any], bool]] = None) -> "Module":
        """Map the parameters (those `filter_fn` selects) with `map_fn`, in place:
        `model.apply(lambda x: x.astype(mr.float16))`."""
        filter_fn = filter_fn or Module.valid_parameter_filter
        self.update(self.filter_and_map(filter_fn, map_fn))
        return self

    def update_modules(self, modules: dict, strict: bool = True) -> "Module":
        """Replace submodules, in place, with those of a (possibly partial) nested dict/list
        (`{}` leaves a submodule as it is)."""
        _update_modules(self, modules, strict)
        return self

    def apply_to_modules(self, apply_fn: Callable[[str, "Module"], Any]) -> "Module":
        """Call `apply_fn(dotted_name, module)` on this module and every submodule."""
        stack = [("", self)]
        while stack:
            prefix, mod = stack.pop()
            apply_fn(prefix, mod)
            stack.extend(_flatten_paths(mod.children(), prefix=prefix, is_leaf=self.is_module))
        return self

    def modules(self) -> List["Module"]:
        """This module and all its submodules."""
        out: list = []
        self.apply_to_modules(lambda k, m: out.append(m))
        return out

    def named_modules(self):
        """[(dotted name, module)] for this module ("") and all its submodules."""
        out: list = []
        self.apply_to_modules(lambda k, m: out.append((k, m)))
        return out

    # ---- freezing and modes ----------------------------------------------------------
    def _validate_keys(self, keys, strict):
        keys = keys if isinstance(keys, list) else [keys]
        if strict:
            for k in keys:
                if k not in self:
                    raise KeyError(f"Module doesn't contain member {k}.")
        return keys

    def _validate_keys_recursive(self, keys):
        # a key such as "bias" must exist somewhere in the model, not in every submodule
        keys = keys if isinstance(keys, list) else [keys]
        modules = self.modules()
        for k in keys:
            if not any(k in m for m in modules):
                raise KeyError(f"Module doesn't contain member {k}.")

    def freeze(self, *, recurse: bool = True, keys: Optional[Union[str, List[str]]] = None,
               strict: bool = False) -> "Module":
        """Freeze (exclude from `trainable_parameters` and `nn.value_and_grad`) all the
        parameters, or those named by `keys`, of this module (and submodules if `recurse`)."""
        def impl(_, m):
            local = keys
            if local is None:
                local = [k for k, _ in _flatten_paths(m.filter_and_map(
                    lambda mm, k, v: not isinstance(v, Module) and mm.valid_parameter_filter(mm, k, v)))]
            m._no_grad.update(m._validate_keys(local, strict))
        if recurse:
            if strict and keys is not None:
                self._validate_keys_recursive(keys)
                strict = False
            self.apply_to_modules(impl)
        else:
            impl("", self)
        return self

    def unfreeze(self, *, recurse: bool = True, keys: Optional[Union[str, List[str]]] = None,
                 strict: bool = False) -> "Module":
        """Undo `freeze` for all parameters, or those named by `keys`."""
        def impl(_, m):
            if keys is None:
                m._no_grad.clear()
            else:
                m._no_grad.difference_update(m._validate_keys(keys, strict))
        if recurse:
            if strict and keys is not None:
                self._validate_keys_recursive(keys)
                strict = False
            self.apply_to_modules(impl)
        else:
            impl("", self)
        return self

    def _set_training_mode(self, mode: bool) -> None:
        """Set this module's own mode; `train` calls it on every module (a layer may
        override it to react to the switch)."""
        object.__setattr__(self, "_training", mode)

    def train(self, mode: bool = True) -> "Module":
        """Set training mode (Dropout drops, BatchNorm uses batch statistics) on all modules."""
        self.apply_to_modules(lambda _, m: m._set_training_mode(mode))
        return self

    def eval(self) -> "Module":
        """Set evaluation mode: `train(False)`."""
        return self.train(False)

    def set_dtype(self, dtype, predicate: Optional[Callable] = lambda d: issubdtype(d, floating)):
        """Cast the parameters that `predicate(param.dtype)` selects (by default the
        floating-point ones; None selects all) to `dtype`, in place.

            model.set_dtype(mr.bfloat16)     # integer parameters keep their dtype
        """
        if predicate is None:
            predicate = lambda _: True  # noqa: E731
        self.apply(lambda x: x.astype(dtype) if predicate(x.dtype) else x)

    # ---- weights I/O -----------------------------------------------------------------
    def save_weights(self, file: str):
        """Save the parameters to `file`: `.npz` (numpy) or `.safetensors`."""
        from .. import _io
        file = str(file)
        params = dict(_flatten_paths(self.parameters()))
        if file.endswith(".npz"):
            _io.save_npz(file, params)
        elif file.endswith(".safetensors"):
            _io.save_safetensors(file, params)
        else:
            raise ValueError(f"Unsupported file extension for {file}. Use '.npz' or '.safetensors'.")

    def load_weights(self, file_or_weights, strict: bool = True) -> "Module":
        """Load parameters from a `.npz`/`.safetensors` file or a list of (name, array).

        With `strict`, the names must match the parameters exactly, with equal shapes;
        otherwise only the given names are loaded."""
        from .. import _io
        weights = file_or_weights
        if not isinstance(weights, (list, tuple, dict)):
            weights = list(_io.load(str(weights)).items())
        elif isinstance(weights, dict):
            weights = list(weights.items())
        if strict:
            new = dict(weights)
            cur = dict(_flatten_paths(self.parameters()))
            extras = new.keys() - cur.keys()
            if extras:
                raise ValueError(f"Received {len(extras)} parameters not in model: \n"
                                 + ",\n".join(sorted(extras)) + ".")
            missing = cur.keys() - new.keys()
            if missing:
                raise ValueError(f"Missing {len(missing)} parameters: \n" + ",\n".join(sorted(missing)) + ".")
            for k, v in cur.items():
                vn = new[k]
                if not isinstance(vn, Array):
                    raise ValueError(f"Expected mirax Array but received {type(vn)} for parameter {k}")
                if tuple(vn.shape) != tuple(v.shape):
                    raise ValueError(f"Expected shape {v.shape} but received shape {vn.shape} for parameter {k}")
        if len(weights) != 0:
            self.update(_unflatten_paths(list(weights)), strict=False)
        return self


def _update_modules(dst, modules, strict):
    # a module-level function, not a closure over the module: a recursive closure is a
    # reference cycle that would keep the module's arrays alive until the next gc pass
    if isinstance(modules, dict):
        for k in modules:
            if k in dst:
                cur, new = dst[k], modules[k]
                if Module.is_module(cur) and Module.is_module(new):
                    dst[k] = new
                elif isinstance(cur, (dict, list)):
                    _update_modules(cur, new, strict)
                elif strict and new != {}:  # {} marks a slot left as it is
                    raise ValueError(f"Received invalid type: {type(new).__name__}.")
            elif strict:
                raise ValueError(f'Module does not have sub-module named "{k}".')
    elif isinstance(modules, list):
        for i in range(len(modules)):
            if i >= len(dst):
                if strict:
                    raise ValueError(f"List index {i} is out of bounds for destination of length {len(dst)}.")
                continue
            cur, new = dst[i], modules[i]
            if Module.is_module(cur) and Module.is_module(new):
                dst[i] = new
            elif isinstance(cur, (dict, list)):
                _update_modules(cur, new, strict)
            elif strict and new != {}:
                raise ValueError(f"Received invalid type: {type(new).__name__}.")
    elif strict:
        raise ValueError(f"Received invalid type: {type(modules).__name__}.")


def _unwrap(model, key, value, filter_fn, map_fn, is_leaf_fn):
    if is_leaf_fn(model, key, value):
        return map_fn(value)
    if isinstance(value, Module):
        return {k: _unwrap(value, k, v, filter_fn, map_fn, is_leaf_fn)
                for k, v in value.items() if filter_fn(value, k, v)}
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            tk = f"{key}.{k}"
            out[k] = _unwrap(model, tk, v, filter_fn, map_fn, is_leaf_fn) if filter_fn(model, tk, v) else {}
        return out
    if isinstance(value, list):
        out = []
        for i, v in enumerate(value):
            tk = f"{key}.{i}"
            out.append(_unwrap(model, tk, v, filter_fn, map_fn, is_leaf_fn) if filter_fn(model, tk, v) else {})
        return out
    raise RuntimeError("Unexpected leaf found while traversing the module")


def _flatten_module(m):
    # aux: the class and the plain attributes (never arrays: those are items), not the
    # module itself, so cached tree structures do not keep its arrays alive
    attrs = dict(m.__dict__)
    attrs["_no_grad"] = set(m._no_grad)
    return list(m.values()), (type(m), attrs, list(m.keys()))


def _unflatten_module(aux, children):
    cls, attrs, keys = aux
    m = cls.__new__(cls)
    m.__dict__.update(attrs)
    m.__dict__["_no_grad"] = set(attrs["_no_grad"])
    dict.update(m, zip(keys, children))
    return m


# A module is a tree node: its items. It is rebuilt as a module of the same class with
# the same attributes, so a transformed function called with a module gets a module
# (`mr.grad(lambda m: m.layer(x).sum())(model)`, as MLX); `_node` in mirax.tree also
# covers subclasses.
register_tree_node(Module, _flatten_module, _unflatten_module, children=lambda m: m.values())
