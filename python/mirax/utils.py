"""Tree utilities with the signatures of `mlx.utils`.

    tree_flatten({"a": [x, y]})          # [("a.0", x), ("a.1", y)]
    tree_unflatten([("a.0", x), ("a.1", y)])  # {"a": [x, y]}
    tree_map(lambda p: p * 0.9, params)
"""
from __future__ import annotations

from .tree import register_tree_node, tree_flatten_with_path, tree_leaves, tree_map  # noqa: F401

__all__ = ["tree_flatten", "tree_unflatten", "tree_map", "tree_leaves", "tree_reduce", "tree_merge", "register_tree_node"]


def tree_flatten(tree, prefix="", is_leaf=None):
    """The leaves of `tree` with their dotted paths, as `mlx.utils.tree_flatten`."""
    if is_leaf is not None:
        from .tree import tree_flatten as _flat
        leaves = _flat(tree, is_leaf)[0]
        return [(str(i), x) for i, x in enumerate(leaves)]
    return tree_flatten_with_path(tree, prefix.lstrip("."))


def tree_unflatten(pairs):
    """Rebuild nested dicts/lists from (dotted path, value) pairs, as `mlx.utils`."""
    if len(pairs) == 1 and pairs[0][0] == "":
        return pairs[0][1]
    children: dict = {}
    for path, value in pairs:
        head, _, rest = path.partition(".")
        children.setdefault(head, []).append((rest, value))
    if all(k.isdigit() for k in children):
        out = [None] * (max(int(k) for k in children) + 1)
        for k, v in children.items():
            out[int(k)] = tree_unflatten(v)
        return out
    return {k: tree_unflatten(v) for k, v in children.items()}


def tree_reduce(fn, tree, initializer=None):
    leaves = tree_leaves(tree)
    acc = initializer
    for x in leaves:
        acc = x if acc is None else fn(acc, x)
    return acc


def tree_merge(tree_a, tree_b, merge_fn=None):
    """One tree holding the values of both, like a deep `dict.update`: dicts merge key by
    key, lists and tuples position by position; an empty container or None is an empty
    subtree; two leaves in one place go to `merge_fn(a, b)` (an error without one).

        tree_merge({"a": 1}, {"b": {"c": 2}})   # {"a": 1, "b": {"c": 2}}
    """
    def empty(t):
        return t is None or (isinstance(t, (dict, list, tuple)) and len(t) == 0)
    if empty(tree_a) and empty(tree_b):
        if type(tree_a) is not type(tree_b) and tree_a is not None and tree_b is not None:
            raise ValueError(f"Cannot merge {type(tree_a).__name__} with {type(tree_b).__name__}")
        return tree_a if tree_b is None else type(tree_b)()
    if empty(tree_a):
        return tree_b
    if empty(tree_b):
        return tree_a
    if isinstance(tree_a, (list, tuple)) and isinstance(tree_b, (list, tuple)):
        n = max(len(tree_a), len(tree_b))
        items = [tree_merge(tree_a[i] if i < len(tree_a) else None, tree_b[i] if i < len(tree_b) else None, merge_fn)
                 for i in range(n)]
        return type(tree_a)(*items) if hasattr(tree_a, "_fields") else type(tree_a)(items)
    if isinstance(tree_a, dict) and isinstance(tree_b, dict):
        keys = list(tree_a) + [k for k in tree_b if k not in tree_a]
        return {k: tree_merge(tree_a.get(k), tree_b.get(k), merge_fn) for k in keys}
    if isinstance(tree_a, (dict, list, tuple)) or isinstance(tree_b, (dict, list, tuple)):
        raise ValueError(f"Cannot merge {type(tree_a).__name__} with {type(tree_b).__name__}")
    if merge_fn is None:
        raise ValueError(f"Trees contain elements at the same location but no merge function was provided "
                         f"({tree_a!r}, {tree_b!r})")
    return merge_fn(tree_a, tree_b)
