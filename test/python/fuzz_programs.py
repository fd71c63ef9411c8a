"""Random mirax programs for the fuzzers (test_fuzz.py): hypothesis draws a list of
steps over a pool of values; `run(steps, inputs, np_like)` replays it with mirax or
with numpy, so every program has a reference.

    prog = draw(programs())       # (input shapes, steps)
    want = run(prog, xs, NUMPY)
    got = run(prog, [mr.array(x) for x in xs], MIRAX)
"""
import numpy as np
from hypothesis import strategies as st

import mirax as mr

# name -> (arity, mirax function, numpy function, smooth: may be differentiated)
UNARY = {
    "exp_tanh": (lambda m, x: m.exp(m.tanh(x)), True),
    "sin": (lambda m, x: m.sin(x), True),
    "cos": (lambda m, x: m.cos(x), True),
    "tanh": (lambda m, x: m.tanh(x), True),
    "negative": (lambda m, x: -x, True),
    "square": (lambda m, x: x * x, True),
    "sigmoid": (lambda m, x: 1 / (1 + m.exp(-x)), True),
    "log1p_sq": (lambda m, x: m.log(1 + x * x), True),
    "sqrt_sq": (lambda m, x: m.sqrt(x * x + 1), True),
    "abs": (lambda m, x: m.abs(x), False),
}
# the ops an integer program may use (no float math; division by y*y+1 never divides by 0)
INT_UNARY = {"negative", "square", "abs"}
INT_BINARY = {"add", "subtract", "multiply", "maximum", "minimum", "floor_divide"}
BINARY = {
    "add": (lambda m, x, y: x + y, True),
    "subtract": (lambda m, x, y: x - y, True),
    "multiply": (lambda m, x, y: x * y, True),
    "divide": (lambda m, x, y: x / (y * y + 1), True),
    "maximum": (lambda m, x, y: m.maximum(x, y), False),
    "minimum": (lambda m, x, y: m.minimum(x, y), False),
    "floor_divide": (lambda m, x, y: m.floor_divide(x, y * y + 1), False),
}


class _Numpy:
    """numpy under mirax's names, so one step function serves both."""
    exp, sin, cos, tanh, log, sqrt, abs = np.exp, np.sin, np.cos, np.tanh, np.log, np.sqrt, np.abs
    maximum, minimum = np.maximum, np.minimum

    @staticmethod
    def sum(x, axis=None, keepdims=False):
        return np.sum(x, axis=axis, keepdims=keepdims, dtype=x.dtype)  # MLX keeps int32

    @staticmethod
    def max(x, axis=None, keepdims=False):
        return np.max(x, axis=axis, keepdims=keepdims)

    @staticmethod
    def mean(x, axis=None, keepdims=False):
        return np.mean(x, axis=axis, keepdims=keepdims)

    transpose, expand_dims, reshape, broadcast_to = np.transpose, np.expand_dims, np.reshape, np.broadcast_to
    concatenate, where, matmul = np.concatenate, np.where, np.matmul

    @staticmethod
    def floor_divide(x, y):
        return np.floor_divide(x, y)

    @staticmethod
    def softmax(x, axis):
        e = np.exp(x - np.max(x, axis=axis, keepdims=True))
        return e / np.sum(e, axis=axis, keepdims=True)

    @staticmethod
    def logsumexp(x, axis=None, keepdims=False):
        m = np.max(x, axis=axis, keepdims=True)
        r = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
        return r if keepdims else np.squeeze(r, axis=axis)

    @staticmethod
    def cumsum(x, axis):
        return np.cumsum(x, axis=axis, dtype=x.dtype)

    @staticmethod
    def astype(x, dtype):
        return x.astype(dtype)

    @staticmethod
    def take(x, idx, axis):
        n = x.shape[axis]
        i = np.clip(np.where(idx < 0, idx + n, idx), 0, n - 1)  # gathers clamp
        return np.take(x, i, axis=axis)


NUMPY = _Numpy
MIRAX = mr


def shapes(max_rank=3):
    return st.lists(st.sampled_from([1, 2, 3]), min_size=0, max_size=max_rank).map(tuple)


@st.composite
def programs(draw, smooth=False, max_steps=6, dtype="float32"):
    """(input shapes, steps, dtype). A step is (kind, name, operand positions, extra).
    `smooth`: only differentiable steps (for grad); an integer `dtype`: integer ops only."""
    integer = np.dtype(dtype).kind in "iu"
    n_in = draw(st.integers(1, 2))
    base = draw(shapes())
    # inputs broadcast against each other: the second drops or unit-sizes some dims
    in_shapes = [base]
    if n_in == 2:
        other = tuple(d if draw(st.booleans()) else 1 for d in base)
        in_shapes.append(other[draw(st.integers(0, len(other))):])
    shape_of = list(in_shapes)
    steps = []
    kinds = ["unary", "binary", "reduce", "shape", "take", "concat", "where", "slice"]
    if not integer:
        kinds += ["softmax", "cumsum", "matmul", "astype"]
    for _ in range(draw(st.integers(1, max_steps))):
        pool = len(shape_of)
        kind = draw(st.sampled_from(kinds))
        a = draw(st.integers(0, pool - 1))
        sa = shape_of[a]
        if kind == "unary":
            names = [k for k, (f, sm) in UNARY.items() if (sm or not smooth) and (not integer or k in INT_UNARY)]
            steps.append(("unary", draw(st.sampled_from(names)), (a,), None))
            shape_of.append(sa)
        elif kind in ("binary", "where", "concat"):
            b = draw(st.integers(0, pool - 1))
            try:
                out = np.broadcast_shapes(sa, shape_of[b])
            except ValueError:
                continue
            if kind == "binary":
                names = [k for k, (f, sm) in BINARY.items() if (sm or not smooth) and (not integer or k in INT_BINARY)]
                steps.append(("binary", draw(st.sampled_from(names)), (a, b), None))
                shape_of.append(out)
            elif kind == "where":
                steps.append(("where", "where", (a, b), None))
                shape_of.append(out)
            else:  # concatenate along an axis both share (after broadcasting b to a's rank)
                if sa != shape_of[b] or not sa:
                    continue
                axis = draw(st.integers(0, len(sa) - 1))
                steps.append(("concat", "concatenate", (a, b), axis))
                shape_of.append(sa[:axis] + (2 * sa[axis],) + sa[axis + 1:])
        elif kind == "matmul":
            b = draw(st.integers(0, pool - 1))
            sb = shape_of[b]
            if len(sa) < 1 or len(sb) < 1 or sa[-1] != (sb[-2] if len(sb) >= 2 else sb[0]):
                continue
            try:
                out = np.matmul(np.zeros(sa), np.zeros(sb)).shape
            except ValueError:
                continue
            steps.append(("matmul", "matmul", (a, b), None))
            shape_of.append(out)
        elif kind in ("reduce", "softmax", "cumsum"):
            if not sa:
                continue
            axis = draw(st.integers(-len(sa), len(sa) - 1))
            empty = 0 in sa  # no identity: numpy raises too
            if kind == "softmax" and empty:
                continue
            if kind == "reduce":
                keep = draw(st.booleans())
                names = ["sum", "max"] if integer else ["sum", "mean", "logsumexp"] + ([] if smooth else ["max"])
                if empty:
                    names = ["sum"]
                steps.append(("reduce", draw(st.sampled_from(names)), (a,), (axis, keep)))
                shape_of.append(np.sum(np.zeros(sa), axis=axis, keepdims=keep).shape)
            else:
                steps.append((kind, kind, (a,), axis))
                shape_of.append(sa)
        elif kind == "astype":  # a round trip through a narrower float (numpy rounds the same)
            steps.append(("astype", draw(st.sampled_from(["float16", "bfloat16"])) if not smooth else "float64",
                          (a,), None))
            shape_of.append(sa)
        elif kind == "slice":
            if not sa:
                continue
            axis = draw(st.integers(0, len(sa) - 1))
            sl = draw(st.sampled_from([slice(None, None, -1), slice(1, None), slice(None, None, 2)]))
            steps.append(("slice", "slice", (a,), (axis, sl)))
            shape_of.append(sa[:axis] + (len(range(sa[axis])[sl]),) + sa[axis + 1:])
        elif kind == "shape":
            op = draw(st.sampled_from(["transpose", "expand_dims", "reshape", "broadcast_to"]))
            if op == "transpose":
                perm = tuple(draw(st.permutations(range(len(sa)))))
                out = tuple(sa[p] for p in perm)
                extra = perm
            elif op == "expand_dims":
                extra = draw(st.integers(0, len(sa)))
                out = sa[:extra] + (1,) + sa[extra:]
            elif op == "reshape":
                extra = (int(np.prod(sa)),)
                out = extra
            else:
                extra = (draw(st.sampled_from([1, 2, 3])),) + sa
                out = extra
            steps.append(("shape", op, (a,), extra))
            shape_of.append(out)
        else:
            if not sa or 0 in sa:
                continue
            axis = draw(st.integers(0, len(sa) - 1))
            idx = tuple(draw(st.lists(st.integers(-2 * sa[axis], 2 * sa[axis]), min_size=1, max_size=3)))
            steps.append(("take", "take", (a,), (axis, idx)))
            shape_of.append(sa[:axis] + (len(idx),) + sa[axis + 1:])
    return in_shapes, steps, dtype


def _bf16_round(x):
    """numpy's float32 rounded to bfloat16 (to nearest even) and back."""
    b = np.asarray(x, np.float32).view(np.uint32)
    b = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16 << 16).astype(np.uint32)
    return b.view(np.float32)


def run(prog, inputs, m):
    """Replay the steps on `inputs` with module `m` (MIRAX or NUMPY); the last value."""
    return run_all(prog, inputs, m)[-1]


def run_all(prog, inputs, m):
    """Every value the steps make (after the inputs), in order."""
    steps = prog[1]
    vals = list(inputs)
    for kind, name, ops, extra in steps:
        x = vals[ops[0]]
        if kind == "unary":
            y = UNARY[name][0](m, x)
        elif kind == "binary":
            y = BINARY[name][0](m, x, vals[ops[1]])
        elif kind == "where":
            y = m.where(x > 0, x, vals[ops[1]])
        elif kind == "concat":
            y = m.concatenate([x, vals[ops[1]]], axis=extra)
        elif kind == "matmul":
            y = m.matmul(x, vals[ops[1]])
        elif kind == "reduce":
            y = getattr(m, name)(x, axis=extra[0], keepdims=extra[1])
        elif kind == "softmax":
            y = m.softmax(x, axis=extra)
        elif kind == "cumsum":
            y = m.cumsum(x, axis=extra)
        elif kind == "astype":
            if m is NUMPY:
                y = (_bf16_round(x) if name == "bfloat16" else x.astype(name)).astype(x.dtype)
            else:
                y = x.astype(getattr(mr, name)).astype(x.dtype)
        elif kind == "slice":
            key = (slice(None),) * extra[0] + (extra[1],)
            y = x[key]
        elif kind == "shape":
            if name == "transpose":
                y = m.transpose(x, extra)
            elif name == "expand_dims":
                y = m.expand_dims(x, extra)
            elif name == "reshape":
                y = m.reshape(x, extra)
            else:
                y = m.broadcast_to(x, extra)
        else:
            idx = np.array(extra[1], np.int32)
            y = m.take(x, idx if m is NUMPY else mr.array(idx), extra[0])
        vals.append(y)
    return vals[len(inputs):] or vals[-1:]


def inputs_for(prog, rng, dtype=None):
    dtype = np.dtype(dtype or prog[2])
    if dtype.kind in "iu":
        return [rng.integers(-5, 6, s).astype(dtype) for s in prog[0]]
    return [rng.uniform(-1.5, 1.5, s).astype(dtype) for s in prog[0]]
