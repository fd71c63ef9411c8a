"""Einstein summation with MLX's semantics: `einsum` and `einsum_path`.

    mr.einsum("ij,jk->ik", a, b)            # a @ b
    mr.einsum("...ij,...jk", a, b)          # batched matmul, ellipsis broadcast
    mr.einsum("ii->i", m)                   # diagonal
    path, info = mr.einsum_path("ij,jk,kl", a, b, c)   # [(1, 2), (0, 1)] and a summary

As in MLX (after numpy and opt_einsum): operands are contracted pairwise in a greedy
order; each pair whose labels include a contraction becomes one batched `matmul`
(transpose + reshape to (batch, M, K) x (batch, K, N)); repeated labels within an operand
become a diagonal, labels found in one operand only are summed first, and only what
remains (outer and hadamard products) is a broadcast multiply. It is all other mirax ops,
so grad, vmap, compile and the GPU come from theirs.
"""
from __future__ import annotations

import string

from ..array import Array, array, where_text
from ..dialect.core import MiraxError
from . import elementwise as ew
from . import reduction as red
from . import shape as sh
from .composite import diagonal
from .linalg import matmul

__all__ = ["einsum", "einsum_path"]

_LETTERS = string.ascii_lowercase + string.ascii_uppercase


def _arr(x) -> Array:
    return x if isinstance(x, Array) else array(x)


def _err(fn, msg):
    return MiraxError(f"{fn}: {msg}{where_text()}")


def _parse(subscripts):
    """(input subscripts, output subscript); an implicit output is the labels seen once,
    sorted, after an ellipsis if any input has one."""
    s = subscripts.replace(" ", "")
    if "->" in s:
        lhs, rhs = s.split("->", 1)
    else:
        lhs = s
        letters = lhs.replace(",", "").replace(".", "")
        rhs = ("..." if "." in lhs else "") + "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    return lhs.split(","), rhs


def _expand_ellipsis(sub, ndim, spare, fn, index):
    """`sub` with its letters checked and "..." replaced by the last letters of `spare`;
    returns (subscript, ellipsis length or None)."""
    body = sub.replace("...", "", 1)
    if "..." in body:
        raise _err(fn, f"only one ellipsis per subscript is allowed, got '{sub}'")
    bad = [c for c in body if c not in _LETTERS]
    if bad:
        raise _err(fn, f"subscripts must be letters, got '{bad[0]}' in '{sub}'")
    if "..." not in sub:
        return sub, None
    n = ndim - len(body)
    if n < 0:
        raise _err(fn, f"operand {index} has {ndim} dims, fewer than the {len(body)} labels of '{sub}'")
    return sub.replace("...", spare[len(spare) - n:] if n else ""), n


def _size(term, dims):
    n = 1
    for c in term:
        n *= dims[c]
    return n


def _flops(term, inner, num_terms, dims):
    """opt_einsum's cost model: size of the index space times the number of operations."""
    return _size(term, dims) * (max(1, num_terms - 1) + bool(inner))


def _naive_cost(inputs, output, dims):
    labels = set().union(*map(set, inputs))
    return _flops(labels, bool(labels - set(output)), len(inputs), dims), len(labels)


def _greedy_path(inputs, output, dims, cost_limit, memory_limit):
    """MLX's (opt_einsum's) greedy order: repeatedly contract the pair that removes the most
    elements (then the cheapest), outer products only when nothing else is left.
    Returns ([(positions, input subscripts, output subscript)], cost, scaling)."""
    inputs = list(inputs)
    pairs = [(i, j) for i in range(len(inputs)) for j in range(i + 1, len(inputs))]
    path, candidates, cost, scaling = [], [], 0, 0
    for _ in range(len(inputs) - 1):
        def consider(p, q):
            labels = set(inputs[p]) | set(inputs[q])
            rest = set(output).union(*(set(t) for k, t in enumerate(inputs) if k not in (p, q)))
            kept = labels & rest
            new_size = _size(kept, dims)
            if new_size > memory_limit:
                return
            removed = _size(set(inputs[p]), dims) + _size(set(inputs[q]), dims) - new_size
            c = _flops(labels, len(labels) > len(kept), 2, dims)
            if cost + c <= cost_limit:
                candidates.append((removed, c, kept, len(labels), p, q))

        for p, q in pairs:
            if set(inputs[p]) & set(inputs[q]):
                consider(p, q)
        if not candidates:
            for p, q in pairs:
                consider(p, q)
        if not candidates:
            c, scale = _naive_cost(inputs, output, dims)
            path.append((tuple(range(len(inputs))), list(inputs), output))
            cost, scaling = cost + c, max(scaling, scale)
            break
        best = candidates[0]
        for cand in candidates[1:]:
            if cand[0] > best[0] or (cand[0] == best[0] and cand[1] < best[1]):
                best = cand
        removed, c, kept, nlabels, x, y = best
        scaling = max(scaling, nlabels)
        new = "".join(sorted(kept, key=lambda ch: (dims[ch], ch)))
        path.append(((x, y), [inputs[x], inputs[y]], new))
        del inputs[y], inputs[x]
        inputs.append(new)
        candidates = [(r, cc, k, nl, p - (p > x) - (p > y), q - (q > x) - (q > y))
                      for r, cc, k, nl, p, q in candidates if not {p, q} & {x, y}]
        pairs = [(i, len(inputs) - 1) for i in range(len(inputs) - 1)]
        cost += c
    return path, cost, scaling


def _plan(subscripts, operands, fn):
    """Check the equation against the operands and choose the contraction order.
    Returns (path, (naive cost, naive scaling, optimized cost, optimized scaling))."""
    if not isinstance(subscripts, str):
        raise TypeError(f"{fn}: subscripts must be a str, got {type(subscripts).__name__}")
    if not operands:
        raise _err(fn, "at least one operand is required")
    ins, out = _parse(subscripts)
    if len(ins) != len(operands):
        raise _err(fn, f"{len(operands)} operands do not match the {len(ins)} input subscripts of '{subscripts}'")
    spare = "".join(c for c in _LETTERS if c not in subscripts)
    longest = 0
    for i, (sub, a) in enumerate(zip(ins, operands)):
        ins[i], n = _expand_ellipsis(sub, a.ndim, spare, fn, i)
        longest = max(longest, n or 0)
    out, _ = _expand_ellipsis(out, longest + len(out.replace("...", "")), spare, fn, "out")
    if len(set(out)) != len(out):
        raise _err(fn, f"repeated labels are not allowed in the output '{out}'")
    dims = {}
    for i, (sub, a) in enumerate(zip(ins, operands)):
        if len(sub) != a.ndim:
            raise _err(fn, f"{len(sub)} labels '{sub}' for operand {i} with {a.ndim} dims (shape {a.shape})")
        own = {}
        for c, d in zip(sub, a.shape):
            if own.setdefault(c, d) != d:
                raise _err(fn, f"repeated label '{c}' of operand {i} spans dims of different sizes "
                               f"({own[c]} != {d}), shape {a.shape}")
        for j, (c, d) in enumerate(zip(sub, a.shape)):
            have = dims.get(c, d)
            if d != 1 and have != 1 and have != d:
                raise _err(fn, f"cannot broadcast dim {j} of operand {i} with shape {a.shape} to size {have}")
            dims[c] = max(have, d)
    missing = [c for c in out if c not in dims]
    if missing:
        raise _err(fn, f"output label '{missing[0]}' does not appear in any input of '{subscripts}'")
    naive = _naive_cost(ins, out, dims)
    if len(ins) <= 2:
        return [(tuple(range(len(ins))), ins, out)], naive + naive
    memory = max(_size(t, dims) for t in ins + [out])
    path, cost, scaling = _greedy_path(ins, out, dims, naive[0], memory)
    path[-1] = path[-1][:2] + (out,)
    return path, naive + (cost, scaling)


def einsum_path(subscripts, *operands):
    """The contraction order `einsum` uses and a summary of its cost, as `mx.einsum_path`.

    >>> mr.einsum_path("ij,jk,kl", mr.zeros((5, 8)), mr.zeros((8, 10)), mr.zeros((10, 7)))[0]
    [(1, 2), (0, 1)]"""
    operands = [_arr(a) for a in operands]
    path, (naive_cost, naive_scaling, cost, scaling) = _plan(subscripts, operands, "einsum_path")
    info = (f"  Complete contraction:  {subscripts}\n"
            f"         Naive scaling:  {naive_scaling}\n"
            f"     Optimized scaling:  {scaling}\n"
            f"      Naive FLOP count:  {naive_cost}\n"
            f"  Optimized FLOP count:  {cost}\n")
    return [positions for positions, _, _ in path], info


def _collapse_repeats(a, sub):
    """Take the diagonal of every repeated label: ("ii", (4, 4)) -> ("i", (4,))."""
    while len(set(sub)) < len(sub):
        c = next(ch for ch in sub if sub.count(ch) > 1)
        i = sub.index(c)
        j = sub.index(c, i + 1)
        a = diagonal(a, 0, i, j)
        sub = "".join(ch for k, ch in enumerate(sub) if k not in (i, j)) + c
    return a, sub


def _prepare(subs, out, arrays):
    """Collapse repeated labels and sum the labels found in one term only (of this step's
    operands and its output), as MLX does before contracting."""
    subs, arrays = list(subs), list(arrays)
    for i, sub in enumerate(subs):
        arrays[i], subs[i] = _collapse_repeats(arrays[i], sub)
    counts = {}
    for t in subs + [out]:
        for c in set(t):
            counts[c] = counts.get(c, 0) + 1
    for i, sub in enumerate(subs):
        axes = [k for k, c in enumerate(sub) if counts[c] == 1]
        if axes:
            arrays[i] = red.sum(arrays[i], axis=axes)
            subs[i] = "".join(c for c in sub if counts[c] != 1)
    return subs, arrays


def _dot(a, b, sa, sb, out):
    """One batched matmul: labels of both operands kept in `out` are batch dims, labels of
    both dropped from it are contracted, the rest are the M and N dims."""
    batch = [c for c in sa if c in out and c in sb]
    contract = [c for c in sa if c not in out]
    ma = [c for c in sa if c in out and c not in sb]
    nb = [c for c in sb if c in out and c not in sa]
    size = {}
    for c, d in list(zip(sa, a.shape)) + list(zip(sb, b.shape)):
        size[c] = max(size.get(c, 1), d)
    # a size-1 batch or contracted dim broadcasts against the other operand's
    a = sh.broadcast_to(a, tuple(size[c] if c in sb else d for c, d in zip(sa, a.shape)))
    b = sh.broadcast_to(b, tuple(size[c] if c in sa else d for c, d in zip(sb, b.shape)))

    def group(x, sub, first, second):
        x = sh.transpose(x, [sub.index(c) for c in batch + first + second])
        n1 = n2 = 1
        for c in first:
            n1 *= size[c]
        for c in second:
            n2 *= size[c]
        return sh.reshape(x, tuple(size[c] for c in batch) + (n1, n2))

    r = matmul(group(a, sa, ma, contract), group(b, sb, contract, nb))
    labels = batch + ma + nb
    r = sh.reshape(r, tuple(size[c] for c in labels))
    return sh.transpose(r, [labels.index(c) for c in out])


def _multiply_sum(subs, arrays, out):
    """The remaining terms (outer and hadamard products) as a broadcast multiply and sum."""
    labels = []
    for t in subs:
        labels += [c for c in t if c not in labels]
    r = None
    for t, a in zip(subs, arrays):
        order = sorted(range(len(t)), key=lambda k: labels.index(t[k]))
        a = sh.transpose(a, order)
        present = "".join(t[k] for k in order)
        shape, it = [], iter(a.shape)
        for c in labels:
            shape.append(next(it) if c in present else 1)
        a = sh.reshape(a, tuple(shape))
        r = a if r is None else ew.multiply(r, a)
    gone = [k for k, c in enumerate(labels) if c not in out]
    if gone:
        r = red.sum(r, axis=gone)
    left = [c for c in labels if c in out]
    return sh.transpose(r, [left.index(c) for c in out])


def einsum(subscripts, *operands):
    """Einstein summation over the operands, as `mx.einsum`.

    >>> mr.einsum("ij,jk->ik", mr.ones((2, 3)), mr.ones((3, 4))).shape
    (2, 4)"""
    arrays = [_arr(a) for a in operands]
    path, _ = _plan(subscripts, arrays, "einsum")
    for positions, subs, out in path:
        taken = [arrays[p] for p in positions]
        subs, taken = _prepare(subs, out, taken)
        if len(subs) == 2 and any(c not in out for c in subs[0]):
            result = _dot(taken[0], taken[1], subs[0], subs[1], out)
        else:
            result = _multiply_sum(subs, taken, out)
        arrays = [a for k, a in enumerate(arrays) if k not in positions] + [result]
    return arrays[0]
