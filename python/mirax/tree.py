"""Trees of arrays, as in `mlx.utils`: lists, tuples, dicts, None, NamedTuples,
dataclasses and registered custom nodes. Anything else is a leaf.

    leaves, treedef = tree_flatten({"w": w, "b": [b1, b2]})
    tree_unflatten(treedef, [2 * x for x in leaves])
    tree_map(lambda x: x * 2, params)

`register_tree_node(cls, flatten, unflatten)` makes a class a node: `flatten(obj)`
returns (children, aux) and `unflatten(aux, children)` rebuilds it.
"""
from __future__ import annotations

import dataclasses

_NODES: dict = {}


def register_tree_node(cls, flatten, unflatten, children=None):
    """Make instances of `cls` tree nodes (see the module docstring). `children(obj)`, if
    given, returns what `flatten(obj)[0]` does, cheaper: `tree_leaves` needs no aux."""
    _NODES[cls] = (flatten, unflatten, children or (lambda x: flatten(x)[0]))
    _LEAF_TYPES.clear()  # (a type seen as a leaf may be a node now)
    _RESOLVED.clear()


# Types whose instances `_node` found to be leaves: whether an object is a node depends on
# its type only, so a type seen once as a leaf skips the registry, its base classes and the
# NamedTuple / dataclass checks next time (a training step flattens ~50 leaves a call).
_LEAF_TYPES: set = set()
_RESOLVED: dict = {}  # type -> its registered (flatten, unflatten) or None


def _is_namedtuple(x):
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def _registered(t):
    """The (flatten, unflatten) registered for `t` or its nearest registered base class
    (nn.Module subclasses), else None; remembered per type."""
    try:
        return _RESOLVED[t]
    except KeyError:
        pass
    got = next((_NODES[b] for b in t.__mro__ if b in _NODES), None)
    _RESOLVED[t] = got
    return got


def _node(x):
    """(children, rebuild) for a node, or None for a leaf."""
    t = type(x)
    reg = _registered(t)
    if reg is not None:
        flatten, unflatten, _ = reg
        children, aux = flatten(x)
        return list(children), lambda cs: unflatten(aux, cs)
    if t is dict:  # (the common nodes first)
        keys = list(x)
        return [x[k] for k in keys], lambda cs: dict(zip(keys, cs))
    if t is list or t is tuple:
        return list(x), lambda cs: t(cs)
    if _is_namedtuple(x):
        return list(x), lambda cs: t(*cs)
    if isinstance(x, (list, tuple)):
        return list(x), lambda cs: t(cs)
    if isinstance(x, dict):
        keys = list(x)
        return [x[k] for k in keys], lambda cs: t(zip(keys, cs)) if t is not dict else dict(zip(keys, cs))
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        fields = [f.name for f in dataclasses.fields(x)]
        return [getattr(x, f) for f in fields], lambda cs: dataclasses.replace(x, **dict(zip(fields, cs)))
    return None


class TreeDef:
    """The structure of a tree: how to rebuild it from its leaves."""

    __slots__ = ("kind", "rebuild", "children", "num_leaves", "_key")

    def __init__(self, kind, rebuild, children, key):
        self.kind = kind  # "leaf", "none" or "node"
        self.rebuild = rebuild
        self.children = children
        self.num_leaves = 1 if kind == "leaf" else sum(c.num_leaves for c in children)
        self._key = key

    def __eq__(self, other):
        return isinstance(other, TreeDef) and self._key == other._key

    def __hash__(self):
        return hash(self._key)

    def __repr__(self):
        return f"TreeDef({self._key})"


_LEAF = TreeDef("leaf", None, (), "*")  # (immutable: one for every leaf)
_NONE = TreeDef("none", None, (), "None")


def _struct_key(x, children):
    t = type(x)
    if isinstance(x, dict):
        return (t.__name__, tuple(x.keys()), children)
    return (t.__qualname__, children)


# The walkers are module-level functions with explicit state: recursive closures form
# reference cycles (function <-> cell) that keep the leaves alive until the garbage
# collector runs, which held on to large output buffers.

def _flatten(x, is_leaf, leaves):
    if is_leaf is not None and is_leaf(x):
        leaves.append(x)
        return _LEAF
    t = type(x)
    if t in _LEAF_TYPES:
        leaves.append(x)
        return _LEAF
    if x is None:
        return _NONE
    node = _node(x)
    if node is None:
        _LEAF_TYPES.add(t)
        leaves.append(x)
        return _LEAF
    children, rebuild = node
    defs = tuple(_flatten(c, is_leaf, leaves) for c in children)
    return TreeDef("node", rebuild, defs, _struct_key(x, tuple(d._key for d in defs)))


def tree_flatten(tree, is_leaf=None):
    """(leaves, treedef). `None` is an empty node, as in MLX/JAX."""
    leaves = []
    treedef = _flatten(tree, is_leaf, leaves)
    return leaves, treedef


def _build(d, it):
    if d.kind == "leaf":
        return next(it)
    if d.kind == "none":
        return None
    return d.rebuild([_build(c, it) for c in d.children])


def tree_unflatten(treedef: TreeDef, leaves):
    return _build(treedef, iter(leaves))


def _collect(x, is_leaf, leaves):
    # tree_flatten's walk without its TreeDef (no keys, no rebuild closures): `mr.eval`
    # of a model's and an optimizer's state ran it every training step (75 -> ~15 us for
    # 14 leaves); the same order and the same leaves as tree_flatten
    if is_leaf is not None and is_leaf(x):
        leaves.append(x)
        return
    t = type(x)
    if t in _LEAF_TYPES:
        leaves.append(x)
        return
    if x is None:
        return
    reg = _registered(t)
    if reg is not None:
        children = reg[2](x)
    elif t is dict:
        children = x.values()
    elif t is list or t is tuple:
        children = x
    else:
        node = _node(x)
        if node is None:
            _LEAF_TYPES.add(t)
            leaves.append(x)
            return
        children = node[0]
    for c in children:
        _collect(c, is_leaf, leaves)


def tree_leaves(tree, is_leaf=None):
    """The leaves of `tree`, in tree_flatten's order."""
    leaves = []
    _collect(tree, is_leaf, leaves)
    return leaves


def tree_map(fn, tree, *rest, is_leaf=None):
    """Apply `fn` to the leaves of `tree` (and the matching leaves of `rest`)."""
    leaves, treedef = tree_flatten(tree, is_leaf)
    others = [treedef_leaves(treedef, r) for r in rest]
    return tree_unflatten(treedef, [fn(x, *[o[i] for o in others]) for i, x in enumerate(leaves)])


def _prefix_leaves(d, x, out):
    if d.kind == "leaf":
        out.append(x)
        return
    if d.kind == "none":
        return
    node = _node(x)
    if node is None:
        raise ValueError(f"tree structures differ: expected a node, got {type(x).__name__}")
    children, _ = node
    if len(children) != len(d.children):
        raise ValueError("tree structures differ: different numbers of children")
    for c, y in zip(d.children, children):
        _prefix_leaves(c, y, out)


def treedef_leaves(treedef: TreeDef, tree):
    """The leaves of `tree` at the positions of `treedef`'s leaves (a prefix match)."""
    out = []
    _prefix_leaves(treedef, tree, out)
    return out


def _with_path(x, path, out):
    if x is None:
        return
    if isinstance(x, dict):
        for k, v in x.items():
            _with_path(v, f"{path}.{k}" if path else str(k), out)
        return
    node = _node(x)
    if node is None:
        out.append((path, x))
        return
    for i, c in enumerate(node[0]):
        _with_path(c, f"{path}.{i}" if path else str(i), out)


def tree_flatten_with_path(tree, prefix=""):
    """[(dotted path, leaf)] as `mlx.utils.tree_flatten` returns them."""
    out = []
    _with_path(tree, prefix, out)
    return out
