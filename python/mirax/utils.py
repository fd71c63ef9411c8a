"""Tree utilities with the signatures of `mlx.utils`.

    tree_flatten({"a": [x, y]})          # [("a.0", x), ("a.1", y)]
    tree_unflatten([("a.0", x), ("a.1", y)])  # {"a": [x, y]}
    tree_map(lambda p: p * 0.9, params)
"""
from __future__ import annotations

from .tree import register_tree_node, tree_flatten_with_path, tree_leaves, tree_map  # noqa: F401

__all__ = ["tree_flatten", "tree_unflatten", "tree_map", "tree_leaves", "tree_reduce", "register_tree_node"]


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
