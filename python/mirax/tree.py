"""Trees of arrays: nested lists, tuples, dicts (and None), as in `mlx.utils`.

    leaves, treedef = tree_flatten({"w": w, "b": [b1, b2]})
"""
from __future__ import annotations


def tree_leaves(tree):
    out = []

    def walk(t):
        if isinstance(t, (list, tuple)):
            for x in t:
                walk(x)
        elif isinstance(t, dict):
            for k in t:
                walk(t[k])
        elif t is not None:
            out.append(t)
    walk(tree)
    return out


def tree_map(fn, tree, *rest):
    if isinstance(tree, (list, tuple)):
        items = [tree_map(fn, t, *(r[i] for r in rest)) for i, t in enumerate(tree)]
        return type(tree)(*items) if hasattr(tree, "_fields") else type(tree)(items)
    if isinstance(tree, dict):
        return {k: tree_map(fn, tree[k], *(r[k] for r in rest)) for k in tree}
    if tree is None:
        return None
    return fn(tree, *rest)
