"""Tree utilities with the signatures and semantics of `mlx.utils`.

Here a tree is nested lists, tuples (NamedTuples kept) and dicts (an `nn.Module` is a
dict); anything else, None included, is a leaf. The transforms use the richer trees of
`mirax.tree` (dataclasses, registered nodes); `register_tree_node` is re-exported from it.

    tree_flatten({"a": [x, y]})                    # [("a.0", x), ("a.1", y)]
    tree_unflatten([("a.0", x), ("a.1", y)])       # {"a": [x, y]}
    tree_map(lambda p: p * 0.9, params)
    tree_map_with_path(lambda path, p: p, params)  # path: "a.0", ...
"""
from __future__ import annotations

from itertools import zip_longest
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from .tree import register_tree_node, tree_leaves  # noqa: F401

__all__ = ["tree_flatten", "tree_unflatten", "tree_map", "tree_map_with_path", "tree_leaves", "tree_reduce",
           "tree_merge", "register_tree_node"]


def _rebuild(tree, children):
    """A list/tuple/NamedTuple of the same type as `tree` holding `children`."""
    t = type(tree)
    return t(*children) if hasattr(tree, "_fields") else t(children)


def tree_map(fn: Callable, tree: Any, *rest: Any, is_leaf: Optional[Callable] = None) -> Any:
    """A tree like `tree` with `fn(leaf, *leaves_of_rest)` at each leaf; each of `rest`
    must be a superset of `tree` (indexed by the same keys).

        tree_map(lambda p, g: p - 0.1 * g, params, grads)
    """
    if is_leaf is not None and is_leaf(tree):
        return fn(tree, *rest)
    if isinstance(tree, (list, tuple)):
        return _rebuild(tree, [tree_map(fn, c, *(r[i] for r in rest), is_leaf=is_leaf)
                               for i, c in enumerate(tree)])
    if isinstance(tree, dict):
        return {k: tree_map(fn, c, *(r[k] for r in rest), is_leaf=is_leaf) for k, c in tree.items()}
    return fn(tree, *rest)


def tree_map_with_path(fn: Callable, tree: Any, *rest: Any, is_leaf: Optional[Callable] = None,
                       path: Optional[Any] = None) -> Any:
    """`tree_map` whose `fn` also receives the leaf's dotted path first (`path` prefixes it).

        tree_map_with_path(lambda p, x: p, {"a": [1, 2]})   # {"a": ["a.0", "a.1"]}
    """
    if is_leaf is not None and is_leaf(tree):
        return fn(path, tree, *rest)
    prefix = f"{path}." if path else ""
    if isinstance(tree, (list, tuple)):
        return _rebuild(tree, [tree_map_with_path(fn, c, *(r[i] for r in rest), is_leaf=is_leaf,
                                                  path=f"{prefix}{i}") for i, c in enumerate(tree)])
    if isinstance(tree, dict):
        return {k: tree_map_with_path(fn, c, *(r[k] for r in rest), is_leaf=is_leaf, path=f"{prefix}{k}")
                for k, c in tree.items()}
    return fn(path, tree, *rest)


def tree_flatten(tree: Any, prefix: str = "", is_leaf: Optional[Callable] = None,
                 destination: Optional[Union[List[Tuple[str, Any]], Dict[str, Any]]] = None):
    """The leaves of `tree` with their dotted paths, into `destination` (a list of pairs
    by default, or a dict). As in MLX the first character of `prefix` is dropped.

        tree_flatten([[[0]]], prefix=".hello")         # [("hello.0.0.0", 0)]
        tree_flatten({"a": {"b": 1}}, destination={})  # {"a.b": 1}
    """
    if destination is None:
        destination = []
    if isinstance(destination, list):
        add = destination.extend
    elif isinstance(destination, dict):
        add = destination.update
    else:
        raise ValueError("[tree_flatten] destination should be either a list or a dictionary or None, "
                         f"got {type(destination).__name__}")
    _flatten_into(tree, prefix, is_leaf, add)
    return destination


def _flatten_into(tree, prefix, is_leaf, add):
    if is_leaf is not None and is_leaf(tree):
        add([(prefix[1:], tree)])
    elif isinstance(tree, (list, tuple)):
        for i, item in enumerate(tree):
            _flatten_into(item, f"{prefix}.{i}", is_leaf, add)
    elif isinstance(tree, dict):
        for k, v in tree.items():
            _flatten_into(v, f"{prefix}.{k}", is_leaf, add)
    else:
        add([(prefix[1:], tree)])


def tree_unflatten(tree: Union[List[Tuple[str, Any]], Dict[str, Any]]) -> Any:
    """Rebuild nested dicts/lists from (dotted path, value) pairs or a {path: value} dict.
    Keys that are all canonical integers make a list (gaps filled with `{}`).

        tree_unflatten([("a.0", x), ("a.1", y)])   # {"a": [x, y]}
        tree_unflatten({"hello.world": 42})        # {"hello": {"world": 42}}
    """
    items = list(tree.items()) if isinstance(tree, dict) else list(tree)
    if len(items) == 1 and items[0][0] == "":
        return items[0][1]
    children: dict = {}
    for key, value in items:
        head, _, rest = key.partition(".")
        children.setdefault(head, []).append((rest, value))
    # "01" and "1" are different keys: only canonical integers make a list
    if children and all(k.isdigit() and str(int(k)) == k for k in children):
        out: list = []
        for i, k in sorted((int(k), k) for k in children):
            out.extend({} for _ in range(i - len(out)))
            out.append(tree_unflatten(children[k]))
        return out
    return {k: tree_unflatten(v) for k, v in children.items()}


def tree_reduce(fn: Callable, tree: Any, initializer: Any = None, is_leaf: Optional[Callable] = None) -> Any:
    """Fold `fn(accumulator, leaf)` over the leaves; the first leaf starts it without
    an `initializer`.

        tree_reduce(lambda acc, x: acc + x, {"a": [1, 2, 3], "b": [4, 5]}, 0)   # 15
    """
    if is_leaf is not None and is_leaf(tree):
        return tree if initializer is None else fn(initializer, tree)
    acc = initializer
    if isinstance(tree, (list, tuple)):
        for item in tree:
            acc = tree_reduce(fn, item, acc, is_leaf)
    elif isinstance(tree, dict):
        for item in tree.values():
            acc = tree_reduce(fn, item, acc, is_leaf)
    else:
        return tree if acc is None else fn(acc, tree)
    return acc


def tree_merge(tree_a: Any, tree_b: Any, merge_fn: Optional[Callable] = None) -> Any:
    """One tree holding the values of both, like a deep `dict.update`: dicts merge key by
    key, lists and tuples position by position; an empty container or None is an empty
    subtree; two leaves in one place go to `merge_fn(a, b)` (a ValueError without one).

        tree_merge({"a": 1}, {"b": {"c": 2}})   # {"a": 1, "b": {"c": 2}}
    """
    empty_a = isinstance(tree_a, (dict, list, tuple)) and len(tree_a) == 0
    empty_b = isinstance(tree_b, (dict, list, tuple)) and len(tree_b) == 0
    if empty_a and empty_b:
        if type(tree_a) is not type(tree_b):
            raise ValueError(f"[tree_merge] Cannot merge {type(tree_a).__name__} with {type(tree_b).__name__}")
        return type(tree_a)()
    tree_a = None if empty_a else tree_a
    tree_b = None if empty_b else tree_b
    if tree_b is None:
        return tree_a
    if tree_a is None:
        return tree_b
    if isinstance(tree_a, (list, tuple)) and isinstance(tree_b, (list, tuple)):
        return _rebuild(tree_a, [tree_merge(a, b, merge_fn) for a, b in zip_longest(tree_a, tree_b)])
    if isinstance(tree_a, dict) and isinstance(tree_b, dict):
        keys = list(tree_a) + [k for k in tree_b if k not in tree_a]
        return {k: tree_merge(tree_a.get(k), tree_b.get(k), merge_fn) for k in keys}
    if merge_fn is None:
        raise ValueError("[tree_merge] Trees contain elements at the same locations but no merge function "
                         f"was provided ({type(tree_a).__name__}, {type(tree_b).__name__})")
    return merge_fn(tree_a, tree_b)
