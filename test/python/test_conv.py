"""The `mirax.conv` primitive and its API (conv_general, conv1d/2d/3d, conv_transpose1d/2d).

Forward: the lowered kernel against the numpy reference, and the reference against a
naive loop over output elements. Rules, all in float64: jvp against central finite
differences, <vjp(u), v> == <u, jvp(v)>, and vmap (input, weights, both) against a
Python loop over the examples.
"""
import itertools

import numpy as np
import pytest

import mirax as mr
from arrays import A
from mirax.array import apply
from mirax.dialect import PRIMITIVES

REF = PRIMITIVES["conv"].reference


def P(d, stride=1, lo=0, hi=0, kd=1, idl=1, groups=1, flip=False):
    t = lambda v: tuple(v) if isinstance(v, (tuple, list)) else (v,) * d  # noqa: E731
    return dict(stride=t(stride), padding_lo=t(lo), padding_hi=t(hi), kernel_dilation=t(kd),
                input_dilation=t(idl), groups=groups, flip=flip)


def naive(x, w, stride, padding_lo, padding_hi, kernel_dilation, input_dilation, groups, flip):
    """Output element by output element, straight from the definition."""
    d = x.ndim - 2
    n, sz, c_in = x.shape[0], x.shape[1:-1], x.shape[-1]
    c_out, ksz, cig = w.shape[0], w.shape[1:-1], w.shape[-1]
    cog = c_out // groups
    padded = [(s - 1) * idl + 1 + lo + hi for s, idl, lo, hi in zip(sz, input_dilation, padding_lo, padding_hi)]
    out_sz = [(p - ((k - 1) * kd + 1)) // s + 1 for p, k, kd, s in zip(padded, ksz, kernel_dilation, stride)]
    out = np.zeros((n,) + tuple(out_sz) + (c_out,))

    def xval(b, pos, c):  # the padded, dilated input at `pos`
        idx = []
        for i in range(d):
            q = pos[i] - padding_lo[i]
            if q < 0 or q % input_dilation[i] or q // input_dilation[i] >= sz[i]:
                return 0.0
            idx.append(q // input_dilation[i])
        return x[(b,) + tuple(idx) + (c,)]

    for b, o, co in itertools.product(range(n), itertools.product(*map(range, out_sz)), range(c_out)):
        g = co // cog
        acc = 0.0
        for k in itertools.product(*map(range, ksz)):
            kk = tuple(ks - 1 - ki for ks, ki in zip(ksz, k)) if flip else k
            pos = [o[i] * stride[i] + kk[i] * kernel_dilation[i] for i in range(d)]
            for ci in range(cig):
                acc += xval(b, pos, g * cig + ci) * w[(co,) + k + (ci,)]
        out[(b,) + o + (co,)] = acc
    assert c_in == groups * cig
    return out


# (input shape, weight shape, params)
FORWARD = [
    ((2, 7, 3), (4, 3, 3), P(1)),
    ((2, 9, 3), (4, 3, 3), P(1, stride=2, lo=1, hi=2, kd=2)),
    ((2, 7, 4), (6, 3, 2), P(1, groups=2, flip=True)),
    ((1, 5, 4), (4, 2, 1), P(1, groups=4, idl=2, lo=-1, hi=1)),
    ((2, 6, 5, 3), (4, 3, 2, 3), P(2, stride=(2, 1), lo=(1, 0), hi=(1, 1))),
    ((2, 6, 5, 4), (6, 3, 2, 2), P(2, groups=2, kd=(1, 2), idl=(2, 1), flip=True)),
    ((1, 5, 6, 2), (3, 2, 3, 2), P(2, stride=2, kd=2, lo=(2, 1), hi=(0, 3))),
    ((1, 4, 4, 3, 2), (2, 2, 2, 2, 2), P(3, lo=(1, 0, 0))),
]


@pytest.mark.parametrize("xs,ws,params", FORWARD)
def test_forward_matches_reference(xs, ws, params, rng):
    x, w = rng.standard_normal(xs), rng.standard_normal(ws)
    want = REF(x, w, **params)
    if x.ndim <= 4:
        np.testing.assert_allclose(want, naive(x, w, **params), rtol=1e-12, atol=1e-12)
    for d, tol in [(np.float64, 1e-12), (np.float32, 1e-5)]:
        got = np.asarray(apply("conv", [A(x.astype(d)), A(w.astype(d))], **params))
        np.testing.assert_allclose(got, REF(x.astype(d), w.astype(d), **params), rtol=tol, atol=tol)
    xi, wi = rng.integers(-3, 4, xs).astype(np.int32), rng.integers(-3, 4, ws).astype(np.int32)
    np.testing.assert_array_equal(np.asarray(apply("conv", [A(xi), A(wi)], **params)),
                                  REF(xi, wi, **params))


def test_api_matches_mlx_semantics(rng):
    x1, w1 = rng.standard_normal((2, 8, 4)), rng.standard_normal((6, 3, 2))
    got = np.asarray(mr.conv1d(A(x1), A(w1), stride=2, padding=1, dilation=2, groups=2))
    np.testing.assert_allclose(got, naive(x1, w1, **P(1, stride=2, lo=1, hi=1, kd=2, groups=2)), rtol=1e-12)
    x2, w2 = rng.standard_normal((2, 6, 5, 3)), rng.standard_normal((4, 3, 2, 3))
    got = np.asarray(mr.conv2d(A(x2), A(w2), stride=(2, 1), padding=(1, 0)))
    np.testing.assert_allclose(got, naive(x2, w2, **P(2, stride=(2, 1), lo=(1, 0), hi=(1, 0))), rtol=1e-12)
    got = np.asarray(mr.conv_general(A(x2), A(w2), padding=([1, 0], [0, 2]), input_dilation=2,
                                     flip=True))
    np.testing.assert_allclose(got, naive(x2, w2, **P(2, lo=(1, 0), hi=(0, 2), idl=2, flip=True)), rtol=1e-12)
    x3, w3 = rng.standard_normal((1, 4, 3, 3, 2)), rng.standard_normal((2, 2, 2, 2, 2))
    np.testing.assert_allclose(np.asarray(mr.conv3d(A(x3), A(w3), padding=1)),
                               REF(x3, w3, **P(3, lo=1, hi=1)), rtol=1e-12)
    # float32 and int32 operands promote to float32, as MLX
    r = mr.conv1d(A(x1.astype(np.float32)), A(np.ones((2, 3, 4), np.int32)))
    assert r.dtype == mr.float32 and r.shape == (2, 6, 2)


def test_conv_transpose_is_the_input_gradient(rng):
    """conv_transpose(y, w) is the vjp of conv w.r.t. its input at cotangent y, with the
    weight's in/out channels swapped (MLX's weight layout (C_out, K..., C_in))."""
    for nd, s, p, dil, xs in [(1, 2, 1, 1, (2, 9, 3)), (1, 3, 0, 2, (1, 10, 2)), (2, 2, 1, 1, (1, 7, 6, 3))]:
        wf = rng.standard_normal((5,) + (3,) * nd + (xs[-1],))  # forward conv: C_in=xs[-1] -> 5
        conv = getattr(mr, f"conv{nd}d")
        y = conv(A(rng.standard_normal(xs)), A(wf), stride=s, padding=p, dilation=dil)
        u = rng.standard_normal(y.shape)
        _, (ct,) = mr.vjp(lambda a: conv(a, A(wf), stride=s, padding=p, dilation=dil),
                          [A(rng.standard_normal(xs))], [A(u)])
        wt = np.moveaxis(wf, [0, -1], [-1, 0])  # (C_in, K, 5)
        # output_padding recovers the input positions the strided forward conv never reached
        op = tuple(xs[1 + i] - ((y.shape[1 + i] - 1) * s - 2 * p + (3 - 1) * dil + 1) for i in range(nd))
        tr = getattr(mr, f"conv_transpose{nd}d")(A(u), A(wt), stride=s, padding=p, dilation=dil,
                                                 output_padding=op)
        assert tr.shape == ct.shape == xs
        np.testing.assert_allclose(np.asarray(tr), np.asarray(ct), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("call,msg", [
    (lambda: mr.conv1d(mr.zeros((1, 5, 3)), mr.zeros((2, 3, 2))), "channel mismatch"),
    (lambda: mr.conv1d(mr.zeros((1, 5, 4)), mr.zeros((3, 3, 2)), groups=2), "groups \\(2\\) must divide"),
    (lambda: mr.conv1d(mr.zeros((1, 5, 3)), mr.zeros((2, 3, 1)), groups=2), "groups \\(2\\) must divide"),
    (lambda: mr.conv2d(mr.zeros((1, 5, 3)), mr.zeros((2, 3, 3))), "expects a 4-D input"),
    (lambda: mr.conv1d(mr.zeros((1, 2, 3)), mr.zeros((2, 3, 3))), "smaller than the dilated kernel"),
    (lambda: mr.conv1d(mr.zeros((1, 5, 3)), mr.zeros((2, 3, 3)), stride=0), "stride must be positive"),
    (lambda: mr.conv2d(mr.zeros((1, 5, 5, 3)), mr.zeros((2, 3, 3, 3)), padding=(1, 2, 3)), "needs 2 entries"),
    (lambda: apply("conv", [mr.zeros((1, 5, 4)), mr.zeros((2, 3, 3))], **P(1)), "channel mismatch"),
    (lambda: apply("conv", [mr.zeros((1, 5, 4)), mr.zeros((3, 3, 2))], **P(1, groups=2)), "must divide"),
    (lambda: apply("conv", [mr.zeros((1, 5, 4)), mr.zeros((2, 3, 4), mr.int32)], **P(1)), "dtypes differ"),
])
def test_errors(call, msg):
    with pytest.raises(mr.MiraxError, match=msg):
        call()


# ---- rules ---------------------------------------------------------------------------

EPS = 1e-6


def _conv_fn(params):
    return lambda x, w: apply("conv", [x, w], **params)


RULES = [
    ((2, 7, 3), (4, 3, 3), P(1)),
    ((2, 9, 3), (4, 3, 3), P(1, stride=2, lo=1, hi=2, kd=2)),
    ((2, 8, 4), (6, 3, 2), P(1, stride=3, groups=2, flip=True, lo=2, hi=0)),
    ((1, 5, 4), (4, 2, 1), P(1, groups=4, idl=2, lo=-1, hi=1, stride=2)),
    ((2, 6, 5, 3), (4, 3, 2, 3), P(2, stride=(2, 1), lo=(1, 0), hi=(1, 1))),
    ((1, 6, 5, 4), (6, 3, 2, 2), P(2, groups=2, kd=(1, 2), idl=(2, 1), stride=(1, 2), flip=True)),
]


@pytest.mark.parametrize("xs,ws,params", RULES)
def test_jvp_and_vjp(xs, ws, params, rng):
    f = _conv_fn(params)
    x, w = rng.standard_normal(xs), rng.standard_normal(ws)
    tx, tw = rng.standard_normal(xs), rng.standard_normal(ws)
    (y,), (ty,) = mr.jvp(f, [A(x), A(w)], [A(tx), A(tw)])
    y, ty = np.asarray(y), np.asarray(ty)
    np.testing.assert_allclose(y, REF(x, w, **params), rtol=1e-12, atol=1e-12)
    fd = (REF(x + EPS * tx, w + EPS * tw, **params) - REF(x - EPS * tx, w - EPS * tw, **params)) / (2 * EPS)
    np.testing.assert_allclose(ty, fd, rtol=1e-6, atol=1e-6)
    u = rng.standard_normal(y.shape)
    _, (cx, cw) = mr.vjp(f, [A(x), A(w)], [A(u)])
    cx, cw = np.asarray(cx), np.asarray(cw)
    assert cx.shape == xs and cw.shape == ws
    np.testing.assert_allclose(np.sum(cx * tx) + np.sum(cw * tw), np.sum(u * ty), rtol=1e-10, atol=1e-10)
    # each cotangent on its own: <vjp_x(u), tx> == <u, conv(tx, w)>, <vjp_w(u), tw> == <u, conv(x, tw)>
    np.testing.assert_allclose(np.sum(cx * tx), np.sum(u * REF(tx, w, **params)), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(np.sum(cw * tw), np.sum(u * REF(x, tw, **params)), rtol=1e-10, atol=1e-10)


def test_second_order(rng):
    """grad of a function of grad: the rules of the transposed convolutions."""
    params = P(1, stride=2, lo=1, hi=0, kd=2, groups=2)
    x, w = rng.standard_normal((2, 9, 4)), rng.standard_normal((4, 2, 2))
    u = rng.standard_normal(REF(x, w, **params).shape)

    def g(w_):
        _, (cx,) = mr.vjp(lambda a: apply("conv", [a, w_], **params), [A(x)], [A(u)])
        return mr.sum(cx * cx)
    got = np.asarray(mr.grad(g)(A(w)))
    t = rng.standard_normal(w.shape)
    fd = (float(np.asarray(g(A(w + EPS * t)))) - float(np.asarray(g(A(w - EPS * t))))) / (2 * EPS)
    np.testing.assert_allclose(np.sum(got * t), fd, rtol=1e-6, atol=1e-6)


VMAP = [
    ((2, 7, 4), (6, 3, 2), P(1, stride=2, lo=1, hi=1, groups=2)),
    ((1, 6, 5, 3), (4, 3, 2, 3), P(2, kd=(2, 1), idl=(1, 2), flip=True)),
]


@pytest.mark.parametrize("xs,ws,params", VMAP)
@pytest.mark.parametrize("in_axes", [(0, None), (None, 0), (0, 0), (2, 1)])
def test_vmap(xs, ws, params, in_axes, rng):
    f = _conv_fn(params)
    b = 3
    x = rng.standard_normal(xs if in_axes[0] is None else xs[:in_axes[0]] + (b,) + xs[in_axes[0]:])
    w = rng.standard_normal(ws if in_axes[1] is None else ws[:in_axes[1]] + (b,) + ws[in_axes[1]:])
    got = np.asarray(mr.vmap(f, in_axes=in_axes)(A(x), A(w)))
    want = np.stack([REF(x if in_axes[0] is None else np.take(x, i, in_axes[0]),
                         w if in_axes[1] is None else np.take(w, i, in_axes[1]), **params) for i in range(b)])
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_vmap_of_grad(rng):
    """Per-example weight gradients: vmap over (x, ct) of the vjp w.r.t. the weights."""
    params = P(1, stride=2, groups=2)
    x, w = rng.standard_normal((3, 2, 8, 4)), rng.standard_normal((4, 3, 2))

    def loss(w_, xe):
        return mr.sum(apply("conv", [xe, w_], **params) ** 2)
    got = np.asarray(mr.vmap(mr.grad(loss), in_axes=(None, 0))(A(w), A(x)))
    want = np.stack([np.asarray(mr.grad(loss)(A(w), A(x[i]))) for i in range(3)])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


# ---- the CPU lowering: window copies (im2col) and tiled products ------------------------

from mirax.dialect.conv import im2col_chunks  # noqa: E402
from mirax.dialect.core import Aval  # noqa: E402
from mirax.dialect import dtypes as dt  # noqa: E402
from mirax.lowering import tuning  # noqa: E402


def _chunks(xs, ws, params, budget, min_rows=4):
    """im2col_chunks of a convolution without input dilation."""
    out = REF(np.zeros(xs, np.float32), np.zeros(ws, np.float32), **params).shape
    xp = (xs[0],) + tuple(s + lo + hi for s, lo, hi in zip(xs[1:-1], params["padding_lo"], params["padding_hi"])) \
        + (xs[-1],)
    return im2col_chunks(Aval(xp, dt.float32), Aval(ws, dt.float32), Aval(out, dt.float32), budget, min_rows)


def test_im2col_chunks_fit_the_budget():
    p = P(2, lo=1, hi=1)
    # all of it fits: one chunk (nb = N, ob = O_0, kb = K_0)
    assert _chunks((2, 8, 8, 4), (3, 3, 3, 4), p, 1 << 20) == (2, 8, 3)
    # 36-column rows (3 x 3 x 4), 8 a (image, output row): whole images while they fit,
    # then rows of one image
    assert _chunks((4, 8, 8, 4), (3, 3, 3, 4), p, 2 * 64 * 36 * 4) == (2, 8, 3)
    assert _chunks((4, 8, 8, 4), (3, 3, 3, 4), p, 4 * 8 * 36 * 4) == (1, 4, 3)
    assert _chunks((4, 8, 8, 4), (3, 3, 3, 4), p, 10) == (1, 1, 1)  # at least one row unit
    # a weight gradient's shape (the kernel as large as the image): the kernel is cut when
    # min_rows rows of its whole window would not fit
    g = P(2)
    assert _chunks((8, 16, 16, 4), (6, 16, 16, 4), g, 4 * 64 * 8 * 4, min_rows=64) == (8, 1, 4)


def _matches_reference(xs, ws, params, rng, ints=True):
    """The lowered convolution of random operands of shapes xs, ws against the numpy
    reference in float32 and float64 (and exactly in int32 with `ints`)."""
    x, w = rng.standard_normal(xs), rng.standard_normal(ws)
    for d, tol in [(np.float32, 2e-5), (np.float64, 1e-12)]:
        got = np.asarray(apply("conv", [A(x.astype(d)), A(w.astype(d))], **params))
        np.testing.assert_allclose(got, REF(x.astype(d), w.astype(d), **params), rtol=tol, atol=tol * 10)
    if ints:
        xi, wi = rng.integers(-3, 4, xs).astype(np.int32), rng.integers(-3, 4, ws).astype(np.int32)
        np.testing.assert_array_equal(np.asarray(apply("conv", [A(xi), A(wi)], **params)), REF(xi, wi, **params))


# (input, weight, params, budget in bytes): every way a convolution is cut in chunks, with
# products large enough for mirax-matmul-codegen's tiling (f32) and the generic one
CHUNKED = [
    ((3, 12, 10, 16), (24, 3, 3, 16), P(2, lo=1, hi=1), 4 * 10 * 144 * 4),  # rows of one image
    ((4, 6, 6, 16), (20, 3, 3, 16), P(2, lo=1, hi=1), 2 * 36 * 144 * 4),  # whole images
    ((2, 13, 11, 8), (16, 3, 4, 8), P(2, stride=(2, 1), lo=(2, 1), hi=(1, 2), kd=(1, 2)), 3000),
    ((6, 16, 16, 8), (12, 12, 12, 8), P(2), 16 * 12 * 8 * 4 * 4),  # the kernel cut too
    ((4, 40, 24), (32, 7, 24), P(1, stride=3, lo=3, hi=3, kd=2), 2048),
    ((8, 9, 9, 32), (48, 1, 1, 32), P(2), 64),  # 1x1: the input is the matrix
    ((8, 9, 9, 32), (48, 1, 1, 32), P(2, stride=2), 64),  # strided 1x1: a window copy
    # padding wider than a chunk's rows: chunks at each end read no input row at all
    ((2, 5, 6, 16), (16, 2, 3, 16), P(2, lo=(4, 1), hi=(5, 0)), 4 * 6 * 96 * 4),
]


@pytest.mark.parametrize("xs,ws,params,budget", CHUNKED)
def test_chunked_products_match_reference(xs, ws, params, budget, rng):
    """Each cut against the reference; a padded input's rows are padded chunk by chunk
    (dialect/conv.py `_padded_rows`: the zeros each chunk's first row implies)."""
    with tuning.override(conv={"im2col_bytes": budget, "min_rows": 4}):
        _matches_reference(xs, ws, params, rng)


def test_padded_product_in_a_kernel_loop(rng):
    """A weight gradient's shape with few rows (9: one input channel, 3x3) and its kernel
    cut in chunks: the tiled product pads its rows, a new tensor each chunk, which goes
    back into the loop's accumulator (bufferization refused to yield it: a CNN's first
    layer failed to compile)."""
    xs, ws, params = (1, 10, 10, 128), (32, 8, 8, 128), P(2)
    budget = 9 * 2 * 8 * 128 * 4  # (9 rows of two of the kernel's 8 rows)
    assert _chunks(xs, ws, params, budget, min_rows=9) == (1, 3, 2)
    x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
    with tuning.override(conv={"im2col_bytes": budget, "min_rows": 9}):
        got = np.asarray(apply("conv", [A(x), A(w)], **params))
    np.testing.assert_allclose(got, REF(x, w, **params), rtol=2e-5, atol=2e-4)


def test_chunked_cases_cut_every_dim():
    """CHUNKED cuts images, rows and kernels somewhere (else it tests less than it says)."""
    cuts = set()
    for xs, ws, params, budget in CHUNKED:
        ch = _chunks(xs, ws, params, budget)
        out = REF(np.zeros(xs), np.zeros(ws), **params).shape
        cuts |= {name for name, c, full in zip("nok", ch, (xs[0], out[1], ws[1])) if c < full}
    assert cuts == {"n", "o", "k"}


def test_convolutions_become_tiled_products(rng):
    """A 3x3 convolution and a 1x1 one compile to mirax-matmul-codegen's register tiles
    (vector.fma), not a convolution loop nest: fusion must not fold the window copy and the
    reshapes back into one linalg.generic (the barriers in dialect/conv.py)."""
    for xs, ws, pad in [((4, 16, 16, 32), (32, 3, 3, 32), 1), ((4, 16, 16, 64), (32, 1, 1, 64), 0)]:
        x, w = A(rng.standard_normal(xs).astype(np.float32)), A(rng.standard_normal(ws).astype(np.float32))
        f = mr.compile(lambda x, w: mr.conv2d(x, w, padding=pad))
        text = f.lower(x, w).as_text("optimized")
        assert "vector.fma" in text, xs
        assert '"reduction", "reduction", "reduction"' not in text, xs
        np.testing.assert_allclose(np.asarray(f(x, w)), REF(np.asarray(x), np.asarray(w), **P(2, lo=pad, hi=pad)),
                                   rtol=2e-5, atol=2e-4)


# input dilation (transposed convolutions, strided convolutions' input gradients): one
# convolution per output phase, without the zeros
PHASES = [
    ((2, 7, 6, 8), (12, 3, 3, 8), P(2, idl=2, lo=2, hi=2)),  # a stride-2 3x3's input gradient
    ((2, 5, 9, 4), (6, 4, 3, 4), P(2, idl=(3, 2), lo=(3, 1), hi=(2, 2), flip=True)),
    ((1, 6, 6, 4), (6, 3, 3, 4), P(2, idl=2, kd=2, lo=(-1, 0), hi=(1, -1))),  # gcd(kd, idl) = 2; crops
    ((3, 9, 5), (4, 1, 5), P(1, idl=3, lo=1, hi=1)),  # one tap: phases no tap reaches stay zero
    ((2, 4, 6), (5, 2, 6), P(1, idl=4, lo=0, hi=0)),
    ((1, 2, 3), (2, 3, 3), P(1, idl=5, lo=2, hi=2)),  # fewer outputs than phases
    ((2, 17, 16, 32), (48, 5, 5, 32), P(2, idl=2, lo=(4, 3), hi=(4, 2))),  # products the codegen tiles
]


@pytest.mark.parametrize("xs,ws,params", PHASES)
def test_input_dilation_by_phases(xs, ws, params, rng):
    if np.prod(xs) < 2000:
        x, w = rng.standard_normal(xs), rng.standard_normal(ws)
        np.testing.assert_allclose(REF(x, w, **params), naive(x, w, **params), rtol=1e-12, atol=1e-12)
    _matches_reference(xs, ws, params, rng, ints=False)


# a few wide groups: one product a group (dialect/conv.py `_group_products`), also by phases
GROUPED = [
    ((2, 6, 5, 32), (32, 3, 2, 16), P(2, groups=2, lo=1, hi=(1, 0))),
    ((2, 9, 7, 48), (48, 3, 3, 16), P(2, groups=3, stride=2, kd=(1, 2), lo=2, hi=1, flip=True)),
    ((1, 5, 4, 32), (32, 3, 3, 16), P(2, groups=2, idl=2, lo=2, hi=2)),
    ((3, 20, 64), (64, 5, 16), P(1, groups=4, lo=2, hi=2)),
]


@pytest.mark.parametrize("xs,ws,params", GROUPED)
def test_grouped_products_match_reference(xs, ws, params, rng):
    from mirax.dialect.conv import _group_products
    g = params["groups"]
    assert _group_products(g, ws[0] // g)
    _matches_reference(xs, ws, params, rng)


def test_half_precision_sums_in_float32(rng):
    """float16 / bfloat16 convolutions multiply-add in float32 and round once (as MLX): a
    float16 running sum of 3 x 3 x 32 products lost digits."""
    x = rng.standard_normal((2, 9, 9, 32)).astype(np.float16)
    w = rng.standard_normal((8, 3, 3, 32)).astype(np.float16)
    want = REF(x.astype(np.float64), w.astype(np.float64), **P(2, lo=1, hi=1))
    got = np.asarray(mr.conv2d(A(x), A(w), padding=1)).astype(np.float64)
    np.testing.assert_allclose(got, want.astype(np.float16).astype(np.float64), rtol=2e-3, atol=2e-2)
    b = np.asarray(mr.conv2d(A(x).astype(mr.bfloat16), A(w).astype(mr.bfloat16), padding=1).astype(mr.float32))
    np.testing.assert_allclose(b, want, rtol=3e-2, atol=0.3)


def test_conv1d_over_more_spatial_dims(rng):
    """As MLX's conv1d (conv_general with one stride, padding, dilation): a 4-D input is a
    2-D convolution with those in both dims."""
    x, w = rng.standard_normal((1, 6, 5, 4)), rng.standard_normal((4, 3, 3, 2))
    got = np.asarray(mr.conv1d(A(x), A(w), stride=2, padding=1, groups=2))
    np.testing.assert_allclose(got, REF(x, w, **P(2, stride=2, lo=1, hi=1, groups=2)), rtol=1e-12, atol=1e-12)
