"""Convolution: `conv`, MLX's `conv_general` as one primitive.

Channels-last layout, as MLX: the input is (N, S_1..S_d, C_in), the weight
(C_out, K_1..K_d, C_in / groups), the result (N, O_1..O_d, C_out). Per spatial dim i:

    the input is dilated (input_dilation[i] - 1 zeros between elements), padded with
    padding_lo[i] / padding_hi[i] zeros (negative: cropped), and the kernel, spread by
    kernel_dilation[i], slides with stride[i]:
        O_i = (P_i - ((K_i - 1) * kernel_dilation[i] + 1)) // stride[i] + 1
        P_i = (S_i - 1) * input_dilation[i] + 1 + padding_lo[i] + padding_hi[i]
    out[n, o, co] = sum_{k, ci} xp[n, o * stride + k' * kernel_dilation, g * C_in_g + ci] * w[co, k, ci]
    with g = co // (C_out / groups) and k' = k, or K - 1 - k when `flip` (a true convolution
    rather than a correlation; the transposed convolutions need it).

    %0 = "mirax.conv"(%x, %w) {stride = array<i64: 1>, padding_lo = array<i64: 1>,
           padding_hi = array<i64: 1>, kernel_dilation = array<i64: 1>, input_dilation = array<i64: 1>,
           groups = 1 : i64, flip = false} : (tensor<2x8x3xf32>, tensor<4x3x3xf32>) -> tensor<2x8x4xf32>

Lowering on the CPU (`_conv_lower`): the convolution as matrix products. The padded
input's windows, a chunk of output rows at a time (half of L2, at least 1 MiB), are
copied into a matrix (rows: output positions; columns: kernel position and channel)
and multiplied by the weights as a (K*C_in, C_out) matrix with a `linalg.matmul`, which
mirax-matmul-codegen tiles; a 1x1 kernel is one product of the input itself. Input
dilation (a transposed convolution, a strided convolution's input gradient) is one such
convolution per output phase, over the taps that phase reaches, without the zeros; a
few wide groups run a product each; many narrow groups (a depthwise convolution) and
the GPU keep the general form: input dilation scatters the input into a zero tensor (a
strided `tensor.insert_slice`), padding is `tensor.pad` (and `tensor.extract_slice` for
negative padding), then one `linalg.generic` over (n, o..., g, co_g, k..., ci) with the
groups split out by `tensor.reshape`; a 2-D (1-D) convolution with one group becomes
`linalg.conv_2d_nhwc_fhwc` (`linalg.conv_1d_nwc_wcf`) there. A flip reverses the
(small) kernel first. Half precision multiplies and adds in float32 on the CPU.

Rules (as JAX's conv_general_dilated): jvp bilinear; the vjp w.r.t. the input is the
transposed convolution (the cotangent convolved with the flipped, in/out-swapped weights,
input dilation = stride), w.r.t. the weights a convolution of the input with the
cotangent (batch and feature dims swapped, the groups carried by the channel dim);
batching folds the batch into N (input) or into the groups (weights).
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from . import dtypes as dt
from .core import Aval, Bool, I64, I64Array, MiraxError, primitive, register_lowering
from .reduction import _reshape
from ..lowering.emit import _affine, identity_map, memory_type, ttype

CONV_TEST = [dt.float32, dt.float64, dt.int32]

PARAMS = ("stride", "padding_lo", "padding_hi", "kernel_dilation", "input_dilation", "groups", "flip")


# ---- shape rule ----------------------------------------------------------------------

def conv_geometry(x_shape, w_shape, stride, padding_lo, padding_hi, kernel_dilation, input_dilation):
    """(padded sizes, dilated kernel sizes, output sizes) per spatial dim."""
    d = len(x_shape) - 2
    padded = [(x_shape[1 + i] - 1) * input_dilation[i] + 1 + padding_lo[i] + padding_hi[i]
              if x_shape[1 + i] else padding_lo[i] + padding_hi[i] for i in range(d)]
    kd = [(w_shape[1 + i] - 1) * kernel_dilation[i] + 1 for i in range(d)]
    out = [(p - k) // s + 1 for p, k, s in zip(padded, kd, stride)]
    return padded, kd, out


def _conv_shape(avals, stride, padding_lo, padding_hi, kernel_dilation, input_dilation, groups, flip):
    x, w = avals
    op = "mirax.conv"
    if x.dtype is not w.dtype:
        raise MiraxError(f"{op}: operand dtypes differ: {x.dtype.name} and {w.dtype.name}")
    if x.dtype.kind not in "iuf":
        raise MiraxError(f"{op} does not support dtype {x.dtype.name}")
    if x.ndim < 3 or x.ndim != w.ndim:
        raise MiraxError(f"{op}: input (N, spatial..., C_in) and weight (C_out, spatial..., C_in / groups) "
                         f"need the same rank >= 3, got shapes {x.shape} and {w.shape}")
    d = x.ndim - 2
    vecs = {"stride": stride, "padding_lo": padding_lo, "padding_hi": padding_hi,
            "kernel_dilation": kernel_dilation, "input_dilation": input_dilation}
    for k, v in vecs.items():
        if len(tuple(v)) != d:
            raise MiraxError(f"{op}: {k} {tuple(v)} needs one entry per spatial dim ({d}) of input {x.shape}")
    for k in ("stride", "kernel_dilation", "input_dilation"):
        if any(int(s) < 1 for s in vecs[k]):
            raise MiraxError(f"{op}: {k} must be positive, got {tuple(vecs[k])}")
    groups = int(groups)
    c_in, c_out = x.shape[-1], w.shape[0]
    if groups < 1:
        raise MiraxError(f"{op}: groups must be positive, got {groups}")
    if c_in % groups or c_out % groups:
        raise MiraxError(f"{op}: groups ({groups}) must divide the input channels ({c_in}) and the output "
                         f"channels ({c_out}); shapes {x.shape} and {w.shape}")
    if w.shape[-1] * groups != c_in:
        raise MiraxError(f"{op}: channel mismatch: the input has {c_in} channels, the weight expects "
                         f"{w.shape[-1]} per group x {groups} groups = {w.shape[-1] * groups}; "
                         f"shapes {x.shape} and {w.shape}")
    padded, kd, out = conv_geometry(x.shape, w.shape, stride, padding_lo, padding_hi, kernel_dilation,
                                    input_dilation)
    for i in range(d):
        if padded[i] < kd[i]:
            raise MiraxError(f"{op}: spatial dim {i}: the padded, dilated input ({padded[i]}) is smaller than "
                             f"the dilated kernel ({kd[i]}); shapes {x.shape} and {w.shape}, "
                             f"padding ({padding_lo[i]}, {padding_hi[i]}), kernel_dilation {kernel_dilation[i]}")
        if x.shape[1 + i] == 0:
            raise MiraxError(f"{op}: spatial dim {i} of the input {x.shape} is empty")
    return Aval((x.shape[0],) + tuple(out) + (c_out,), x.dtype)


# ---- numpy reference -----------------------------------------------------------------

def _dilate_pad_np(x, lo, hi, dil):
    """The input dilated by `dil` and padded by (lo, hi) per spatial dim (negative: cropped)."""
    d = x.ndim - 2
    shape = (x.shape[0],) + tuple((s - 1) * k + 1 for s, k in zip(x.shape[1:-1], dil)) + (x.shape[-1],)
    xd = np.zeros(shape, x.dtype)
    xd[(slice(None),) + tuple(slice(None, None, k) for k in dil)] = x
    xp = np.pad(xd, [(0, 0)] + [(max(a, 0), max(b, 0)) for a, b in zip(lo, hi)] + [(0, 0)])
    crop = tuple(slice(max(-a, 0), xp.shape[1 + i] - max(-b, 0)) for i, (a, b) in enumerate(zip(lo, hi)))
    assert len(crop) == d
    return xp[(slice(None),) + crop]


def _conv_ref(x, w, stride, padding_lo, padding_hi, kernel_dilation, input_dilation, groups, flip):
    acc_t = np.float64 if x.dtype.kind == "f" else np.int64
    xp = _dilate_pad_np(x.astype(acc_t), padding_lo, padding_hi, input_dilation)
    w = w.astype(acc_t)
    d = x.ndim - 2
    if flip:
        w = w[(slice(None),) + (slice(None, None, -1),) * d]
    _, _, out = conv_geometry(x.shape, w.shape, stride, padding_lo, padding_hi, kernel_dilation, input_dilation)
    n, c_in, c_out = x.shape[0], x.shape[-1], w.shape[0]
    g = int(groups)
    res = np.zeros((n,) + tuple(out) + (g, c_out // g), acc_t)
    for k in itertools.product(*[range(s) for s in w.shape[1:-1]]):
        win = xp[(slice(None),) + tuple(slice(k[i] * kernel_dilation[i],
                                              k[i] * kernel_dilation[i] + (out[i] - 1) * stride[i] + 1, stride[i])
                                        for i in range(d))]
        win = win.reshape(win.shape[:-1] + (g, c_in // g))
        wk = w[(slice(None),) + k].reshape(g, c_out // g, c_in // g)
        res += np.einsum("...gc,gfc->...gf", win, wk)
    return res.reshape((n,) + tuple(out) + (c_out,)).astype(x.dtype)


# ---- lowering ------------------------------------------------------------------------

def _lst(v):
    return ", ".join(str(int(x)) for x in v)


def _dilate_pad(e, x, a: Aval, lo, hi, dil):
    """The input dilated and padded with zeros (negative padding crops); returns (value, aval)."""
    d = a.ndim - 2
    if any(k != 1 for k in dil):
        dshape = (a.shape[0],) + tuple((s - 1) * k + 1 for s, k in zip(a.shape[1:-1], dil)) + (a.shape[-1],)
        da = Aval(dshape, a.dtype)
        z = e.fill(0, da)
        strides = (1,) + tuple(dil) + (1,)
        x = e.op(f"tensor.insert_slice {x} into {z}[{_lst([0] * a.ndim)}] [{_lst(a.shape)}] [{_lst(strides)}] "
                 f": {ttype(a)} into {ttype(da)}")
        a = da
    plo, phi = [0] + [max(v, 0) for v in lo] + [0], [0] + [max(v, 0) for v in hi] + [0]
    if any(plo) or any(phi):
        pa = Aval(tuple(s + p + q for s, p, q in zip(a.shape, plo, phi)), a.dtype)
        zero = e.const(0, memory_type(a))
        r = e.fresh("pad")
        idx = ", ".join(f"%i{k}_{r[1:]}: index" for k in range(a.ndim))
        e.line(f"{r} = tensor.pad {x} low[{_lst(plo)}] high[{_lst(phi)}] {{")
        e.lines.append(e.indent + f"^bb0({idx}):")
        e.line(f"  tensor.yield {zero} : {memory_type(a)}")
        e.line(f"}} : {ttype(a)} to {ttype(pa)}")
        x, a = r, pa
    clo, chi = [0] + [max(-v, 0) for v in lo] + [0], [0] + [max(-v, 0) for v in hi] + [0]
    if any(clo) or any(chi):
        ca = Aval(tuple(s - p - q for s, p, q in zip(a.shape, clo, chi)), a.dtype)
        x = e.op(f"tensor.extract_slice {x}[{_lst(clo)}] [{_lst(ca.shape)}] [{_lst([1] * a.ndim)}] "
                 f": {ttype(a)} to {ttype(ca)}")
        a = ca
    assert a.ndim == d + 2
    return x, a


def _mul_add(b, x, w, acc, d: dt.Dtype):
    t = d.signless
    f = "f" if d.kind == "f" else "i"
    m = b.op(f"arith.mul{f} {x}, {w} : {t}")
    return b.op(f"arith.add{f} {acc}, {m} : {t}")


def _named_conv(e, x, xa, w, wa, out, stride, kernel_dilation):
    """linalg.conv_1d_nwc_wcf / conv_2d_nhwc_fhwc, or None when there is no named op."""
    d = xa.ndim - 2
    attrs = (f"{{dilations = dense<[{_lst(kernel_dilation)}]> : tensor<{d}xi64>, "
             f"strides = dense<[{_lst(stride)}]> : tensor<{d}xi64>}}")
    if d == 2:
        init = e.fill(0, out)
        return e.op(f"linalg.conv_2d_nhwc_fhwc {attrs} ins({x}, {w} : {ttype(xa)}, {ttype(wa)}) "
                    f"outs({init} : {ttype(out)}) -> {ttype(out)}")
    if d == 1:
        # (F, W, C) -> (W, C, F)
        wt = Aval((wa.shape[1], wa.shape[2], wa.shape[0]), wa.dtype)
        tinit = e.empty(wt)
        w = e.op(f"linalg.transpose ins({w} : {ttype(wa)}) outs({tinit} : {ttype(wt)}) permutation = [1, 2, 0]")
        init = e.fill(0, out)
        return e.op(f"linalg.conv_1d_nwc_wcf {attrs} ins({x}, {w} : {ttype(xa)}, {ttype(wt)}) "
                    f"outs({init} : {ttype(out)}) -> {ttype(out)}")
    return None


def _flip_spatial(e, w, wa):
    """The weights with their spatial axes reversed, as a gather: a map reading in reverse
    (K - 1 - k) is what upstream tiling cannot take (it asserts on the GPU path)."""
    n = wa.ndim
    sizes = wa.shape

    def body(b, _out):
        idx = [b.op(f"linalg.index {i} : index") for i in range(n)]
        for i in range(1, n - 1):
            idx[i] = b.op(f"arith.subi {b.index(sizes[i] - 1)}, {idx[i]} : index")
        return b.op(f"tensor.extract {w}[{', '.join(idx)}] : {ttype(wa)}")
    return e.generic([], [], wa, body, [identity_map(n)], ["parallel"] * n)


def _conv_lower(e, ins, in_avals, out, stride, padding_lo, padding_hi, kernel_dilation, input_dilation,
                groups, flip):
    """On the CPU: the convolution as matrix products (`_products`) that
    mirax-matmul-codegen tiles, a group at a time when the groups are few and wide
    (`_group_products`); many narrow groups (a depthwise convolution) as one linalg.generic."""
    xa, wa = in_avals
    x, w = ins
    if out.size == 0:
        return e.empty(out)
    if xa.size == 0 or wa.size == 0:  # an empty reduction (no input channels)
        return e.fill(0, out)
    if xa.dtype.kind == "f" and xa.dtype.bits == 16:
        # half precision: the products in float32, rounded once (as MLX accumulates; a
        # float16 sum of 100 terms lost digits), on the float32 product code
        t = xa.dtype.signless
        f32 = [Aval(v.shape, dt.float32) for v in (xa, wa, out)]
        x32, w32 = (e.map([v], [a], a32, lambda b, u: b.op(f"arith.extf {u} : {t} to f32"))
                    for v, a, a32 in zip((x, w), (xa, wa), f32))
        r = _conv_lower(e, [x32, w32], f32[:2], f32[2], stride, padding_lo, padding_hi, kernel_dilation,
                        input_dilation, groups, flip)
        return e.map([r], [f32[2]], out, lambda b, u: b.op(f"arith.truncf {u} : f32 to {t}"))
    geo = ([int(v) for v in padding_lo], [int(v) for v in padding_hi], [int(v) for v in stride],
           [int(v) for v in kernel_dilation], [int(v) for v in input_dilation])
    if flip:
        w = _flip_spatial(e, w, wa)
    g = int(groups)
    if g == 1:
        return _products(e, x, xa, w, wa, out, *geo)
    cig, cog = xa.shape[-1] // g, wa.shape[0] // g
    if not _group_products(g, cog):
        x, xa = _dilate_pad(e, x, xa, geo[0], geo[1], geo[4])
        return _conv_generic(e, x, xa, w, wa, out, geo[2], geo[3], g)
    res = e.empty(out)
    d = xa.ndim - 2
    for i in range(g):  # each group's channels: a convolution of its own, into its channels of the result
        xga = Aval(xa.shape[:-1] + (cig,), xa.dtype)
        wga = Aval((cog,) + wa.shape[1:], wa.dtype)
        oga = Aval(out.shape[:-1] + (cog,), out.dtype)
        xg = e.op(f"tensor.extract_slice {x}[{'0, ' * (d + 1)}{i * cig}] [{_lst(xga.shape)}] [{_lst([1] * xa.ndim)}] "
                  f": {ttype(xa)} to {ttype(xga)}")
        wg = e.op(f"tensor.extract_slice {w}[{i * cog}{', 0' * (d + 1)}] [{_lst(wga.shape)}] [{_lst([1] * wa.ndim)}] "
                  f": {ttype(wa)} to {ttype(wga)}")
        r = _products(e, xg, xga, wg, wga, oga, *geo)
        res = e.op(f"tensor.insert_slice {r} into {res}[{'0, ' * (d + 1)}{i * cog}] [{_lst(oga.shape)}] "
                   f"[{_lst([1] * out.ndim)}] : {ttype(oga)} into {ttype(out)}")
    return res


def _group_products(g, cog) -> bool:
    """Whether `g` groups of `cog` output channels each run as a product a group (the tuning
    table's `conv` section). 16x64x64x128, 3x3, 4 groups of 32 channels: as one generic
    624 ms, a product a group 38 (jax.jit 220); 32 groups of 4 and depthwise stay one
    generic (109 and 49 ms; jax.jit 290 and 217)."""
    from ..lowering import tuning
    cfg = tuning.table()["conv"]
    return g <= cfg["max_groups"] and cog >= cfg["group_min_out"]


def _products(e, x, xa: Aval, w, wa: Aval, out: Aval, lo, hi, stride, kdil, idil):
    """One group's convolution as products: by output phases with input dilation
    (`_phases`), else the padded input's window copies (`_im2col_products`)."""
    if any(v > 1 for v in idil) and all(v == 1 for v in stride):
        return _phases(e, x, xa, w, wa, out, lo, kdil, idil)
    windows = not (all(k == 1 for k in wa.shape[1:-1]) and all(v == 1 for v in stride))
    if windows and all(v == 1 for v in idil) and min(lo + hi) >= 0 and max(lo + hi) > 0:
        # zero padding: each chunk pads its own rows (`_im2col_products`' `pad`)
        return _im2col_products(e, x, xa, w, wa, out, stride, kdil, pad=(lo, hi))
    x, xa = _dilate_pad(e, x, xa, lo, hi, idil)
    return _im2col_products(e, x, xa, w, wa, out, stride, kdil)


def _phases(e, x, xa: Aval, w, wa: Aval, out: Aval, lo, kdil, idil):
    """A stride-1 convolution of the input dilated by `idil` (idil - 1 zeros between
    elements), without the zeros: output positions o = idil * j + r of one phase r read
    the input only through the kernel taps k with (r + k * kd - lo) % idil == 0, at
    x[j + (r + k * kd - lo) / idil]. Each phase is a convolution of the undilated input
    with those taps (a strided slice of the kernel, dilation kd / gcd(kd, idil)), its
    result inserted at the phase's positions (a strided `tensor.insert_slice`): idil^d
    times less work than convolving the zeros (a stride-2 2-D convolution's input
    gradient: 4x)."""
    d = xa.ndim - 2
    per_dim = []  # per dim: [(r, first tap, tap step, taps, dilation, lo', hi', outputs)]
    for i in range(d):
        s, kd, k, size, o = idil[i], kdil[i], wa.shape[1 + i], xa.shape[1 + i], out.shape[1 + i]
        step = s // math.gcd(kd, s)
        opts = []
        for r in range(min(s, o)):
            taps = [t for t in range(k) if (r + t * kd - lo[i]) % s == 0]
            if not taps:
                continue
            first, n_taps = taps[0], len(taps)
            kd2 = step * kd // s
            e0 = (r + first * kd - lo[i]) // s
            j = (o - r + s - 1) // s
            lo2 = -e0
            hi2 = j + (n_taps - 1) * kd2 - size - lo2
            opts.append((r, first, step, n_taps, kd2, lo2, hi2, j))
        per_dim.append(opts)
    phases = list(itertools.product(*per_dim))
    covered = sum(math.prod(p[7] for p in ph) for ph in phases) == math.prod(out.shape[1:-1])
    res = e.empty(out) if covered else e.fill(0, out)  # (positions no tap reaches are zeros)
    # the input padded once for every phase (the most any phase pads at each end), each
    # phase's padded input a slice of it
    pad_lo = [max([0] + [p[5] for p in opts]) for opts in per_dim]
    pad_hi = [max([0] + [p[6] for p in opts]) for opts in per_dim]
    xall, xall_a = _dilate_pad(e, x, xa, pad_lo, pad_hi, [1] * d)
    for ph in phases:
        wsub_a = Aval((wa.shape[0],) + tuple(p[3] for p in ph) + (wa.shape[-1],), wa.dtype)
        wsub = e.op(f"tensor.extract_slice {w}[0, {_lst(p[1] for p in ph)}, 0] [{_lst(wsub_a.shape)}] "
                    f"[1, {_lst(p[2] for p in ph)}, 1] : {ttype(wa)} to {ttype(wsub_a)}")
        if wsub_a.shape != wa.shape:  # (a strided slice: a buffer of its own, which reshapes can view)
            wsub = e.op(f"linalg.copy ins({wsub} : {ttype(wsub_a)}) outs({e.empty(wsub_a)} : {ttype(wsub_a)}) "
                        f"-> {ttype(wsub_a)}")
        xpa = Aval((xa.shape[0],) + tuple(xa.shape[1 + i] + p[5] + p[6] for i, p in enumerate(ph)) + (xa.shape[-1],),
                   xa.dtype)
        offs = [pad_lo[i] - p[5] for i, p in enumerate(ph)]
        xp = xall if xpa.shape == xall_a.shape else e.op(
            f"tensor.extract_slice {xall}[0, {_lst(offs)}, 0] [{_lst(xpa.shape)}] [{_lst([1] * xa.ndim)}] "
            f": {ttype(xall_a)} to {ttype(xpa)}")
        sub_a = Aval((out.shape[0],) + tuple(p[7] for p in ph) + (out.shape[-1],), out.dtype)
        sub = _im2col_products(e, xp, xpa, wsub, wsub_a, sub_a, [1] * d, [p[4] for p in ph])
        res = e.op(f"tensor.insert_slice {sub} into {res}[0, {_lst(p[0] for p in ph)}, 0] [{_lst(sub_a.shape)}] "
                   f"[1, {_lst(idil)}, 1] : {ttype(sub_a)} into {ttype(out)}")
    return res


def _divisors(n):
    return [k for k in range(1, n + 1) if n % k == 0]


def im2col_chunks(xa: Aval, wa: Aval, out: Aval, budget_bytes: int, min_rows: int):
    """(nb, ob, kb): a chunk of `_im2col_products` is nb images x ob rows of the first
    output dim (whole images when ob is all of them, else within one image) x kb of the
    kernel's first dim, the largest whose window copy fits `budget_bytes`. The kernel
    is cut first only when `min_rows` rows of its whole window would not fit (a weight
    gradient's window is the output's size)."""
    esize = np.dtype(xa.dtype.storage).itemsize
    n, o0, k0 = xa.shape[0], out.shape[1], wa.shape[1]
    row_unit = math.prod(out.shape[2:-1])  # rows of one (image, first output dim) pair
    col_unit = math.prod(wa.shape[2:])  # columns of one step of the kernel's first dim
    budget = max(1, budget_bytes // esize)
    rows_all = n * o0 * row_unit
    kb = max([k for k in _divisors(k0) if k * col_unit * min(rows_all, min_rows) <= budget] or [1])
    best = (1, 1)
    for nb, ob in [(nb, o0) for nb in _divisors(n)] + [(1, ob) for ob in _divisors(o0)]:
        if nb * ob * row_unit * kb * col_unit <= budget and nb * ob > best[0] * best[1]:
            best = (nb, ob)
    return best[0], best[1], kb


def _barrier(e, v, a: Aval):
    # Reshape propagation would fold the product's reshapes into it, and fusion the window
    # copy after them, back into one convolution generic: a barrier (kept until
    # bufferization, lowering/lower_barriers.py) keeps the product a linalg.matmul.
    return e.op(f'"mirax.optimization_barrier"({v}) : ({ttype(a)}) -> {ttype(a)}', "barrier")


def _mul(e, v, k: int):
    """index `v` (an SSA name or a Python int) times `k`."""
    if isinstance(v, int) or k == 0:
        return v * k
    return v if k == 1 else e.op(f"arith.muli {v}, {e.index(k)} : index")


def _add(e, a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    if a == 0 or b == 0:
        return b if a == 0 else a
    return e.op(f"arith.addi {e.index(a) if isinstance(a, int) else a}, {e.index(b) if isinstance(b, int) else b} "
                f": index")


def _im2col_products(e, x, xa: Aval, w, wa: Aval, out: Aval, stride, kdil, pad=None):
    """The convolution of padded input `x` (N, P..., C) with `w` (C_out, K..., C) as
    matrix products: the windows of a chunk of output rows copied into a matrix (rows:
    output positions, columns: (kernel position, channel)) and multiplied by the weights'
    (K*C, C_out) transpose with a `linalg.matmul` that mirax-matmul-codegen tiles, chunk
    by chunk so the copy stays in cache (`im2col_chunks`: the tuning table's
    `conv.im2col_bytes`, from the host's L2, at least 1 MiB):

        scf.for %r (row chunks)                           [when more than one]
          scf.for %k (chunks of the kernel's first dim)   [when more than one]
            %col = linalg.generic (window copy)   (nb, ob, O..., kb, K..., C)
            %acc = linalg.matmul ins(collapse(%col), slice(wT)) outs(%acc)
          tensor.insert_slice %acc into the result's rows

    With several threads, the kernel whole and the chunks dividing among them, the row
    chunks go to the threads: `scf.forall (%t) in (threads)`, each running its share of
    the chunks in order into its own rows (`scf.for`, then one parallel_insert_slice): a
    product row reads its own window alone, so no chunk waits for another.

    A 1x1 kernel with stride 1 is one product of the input itself.

    With `pad` = (low, high), zero padding of each spatial dim, `x` is the input unpadded
    and each chunk pads the rows it reads (`_padded_rows`) before its window copy, in
    cache, never the whole padded input in memory (written, then read back by the window
    copies; Zen 4, old and new code in one process, medians: forwards 3-12% faster, 3x3
    16x64x64x64 25.97 -> 23.35 ms, 1-d 32x1024x128 width 5 27.75 -> 25.84), unless the
    kernel itself is cut in chunks (then every row chunk reads the whole input again)."""
    from ..lowering import tuning
    unpadded_a = xa
    if pad is not None:
        xa = Aval(tuple(s_ + p + q for s_, p, q in zip(xa.shape, [0] + list(pad[0]) + [0],
                                                        [0] + list(pad[1]) + [0])), xa.dtype)
    d = xa.ndim - 2
    n, psz, c = xa.shape[0], xa.shape[1:-1], xa.shape[-1]
    co, ksz = wa.shape[0], wa.shape[1:-1]
    osz = out.shape[1:-1]
    kc = math.prod(ksz) * c
    m = n * math.prod(osz)
    dt_ = out.dtype
    # the weights as (K*C, C_out): rows in the window copy's (k..., c) order
    w2a, wt_a = Aval((co, kc), dt_), Aval((kc, co), dt_)
    w2 = e.op(f"tensor.collapse_shape {w} [[0], [{_lst(range(1, d + 2))}]] : {ttype(wa)} into {ttype(w2a)}")
    wt = e.op(f"linalg.transpose ins({w2} : {ttype(w2a)}) outs({e.empty(wt_a)} : {ttype(wt_a)}) "
              f"permutation = [1, 0]")
    wt = _barrier(e, wt, wt_a)
    res_a = Aval((m, co), dt_)
    rows_dims = f"[{_lst(range(d + 1))}], [{d + 1}]"
    if all(k == 1 for k in ksz) and all(s == 1 for s in stride):
        col_a = Aval((m, c), dt_)
        col = _barrier(e, e.op(f"tensor.collapse_shape {x} [{rows_dims}] : {ttype(xa)} into {ttype(col_a)}"), col_a)
        r = _barrier(e, _matmul(e, col, col_a, wt, wt_a, e.fill(0, res_a), res_a), res_a)
        return e.op(f"tensor.expand_shape {r} [{rows_dims}] output_shape [{_lst(out.shape)}] "
                    f": {ttype(res_a)} into {ttype(out)}")
    cfg = tuning.table()["conv"]
    threads = tuning.threads()
    nb, ob, kb = im2col_chunks(xa, wa, out, cfg["im2col_bytes"], cfg["min_rows"])
    rows = nb * ob * math.prod(osz[1:])
    kcb = kb * math.prod(ksz[1:]) * c
    n_rows, n_k = m // rows, ksz[0] // kb
    if pad is not None and n_k > 1:
        # the kernel in chunks (a weight gradient's, whose kernel is the output): each row
        # chunk reads the whole input again, so pad it once (a 3x3 convolution's
        # gradient, Zen 4: 10% slower with the rows padded a chunk at a time)
        x, xa = _dilate_pad(e, x, unpadded_a, list(pad[0]), list(pad[1]), [1] * d)
        pad = None
    acc_a, flat_a, wk_a = Aval((rows, co), dt_), Aval((rows, kcb), dt_), Aval((kcb, co), dt_)
    # the window copy: (n, o_0..o_{d-1}, k_0..k_{d-1}, c) <- x[n, o*s + k*kd, c]; with an
    # undilated last kernel dim, (k_{d-1}, c) is one run of the input's last two dims
    # (x[.., (o*s) * C + j], j < K*C): the copy's inner loop runs K*C elements, not C
    # (a 7x7 stem's 3 channels: 21)
    kext = (kb,) + ksz[1:]
    src_a = Aval((nb, (ob - 1) * stride[0] + (kb - 1) * kdil[0] + 1) + psz[1:] + (c,), dt_)
    merge = kdil[-1] == 1
    if merge:
        col_a = Aval((nb, ob) + osz[1:] + kext[:-1] + (kext[-1] * c,), dt_)
        view_a = Aval(src_a.shape[:-2] + (src_a.shape[-2] * c,), dt_)
        nl = col_a.ndim
        x_map = _affine(nl, ["d0"] + [f"d{1 + i} * {stride[i]} + d{d + 1 + i} * {kdil[i]}" for i in range(d - 1)]
                        + [f"d{d} * {stride[-1] * c} + d{nl - 1}"])
    else:
        col_a = Aval((nb, ob) + osz[1:] + kext + (c,), dt_)
        view_a = src_a
        nl = col_a.ndim
        x_map = _affine(nl, ["d0"] + [f"d{1 + i} * {stride[i]} + d{d + 1 + i} * {kdil[i]}" for i in range(d)]
                        + [f"d{nl - 1}"])
    flat = f"[[{_lst(range(d + 1))}], [{_lst(range(d + 1, nl))}]]"

    def chunk(b, n0, row0, kq, acc):
        """The chunk of images from n0, output rows from row0, kernel chunk kq (index SSA
        names or ints): its window copy and product into `acc`; returns the new `acc`."""
        off = _add(b, _mul(b, row0, stride[0]), _mul(b, kq, kb * kdil[0]))
        if pad is not None:
            src = _padded_rows(b, x, unpadded_a, n0, off, src_a, pad)
        else:
            src = x if src_a.shape == xa.shape else b.op(
                f"tensor.extract_slice {x}[{n0}, {off}{', 0' * d}] [{_lst(src_a.shape)}] [{_lst([1] * xa.ndim)}] "
                f": {ttype(xa)} to {ttype(src_a)}")
        if merge:  # (the last two dims as one: [[0], .., [d - 1], [d, d + 1]])
            groups = ", ".join([f"[{i}]" for i in range(d)] + [f"[{d}, {d + 1}]"])
            src = b.op(f"tensor.collapse_shape {src} [{groups}] : {ttype(src_a)} into {ttype(view_a)}")
        col = b.generic([src], [view_a], col_a, lambda bb, v, _o: v, [x_map, identity_map(nl)], ["parallel"] * nl)
        col = _barrier(b, b.op(f"tensor.collapse_shape {col} {flat} : {ttype(col_a)} into {ttype(flat_a)}"), flat_a)
        wk = wt if kcb == kc else b.op(f"tensor.extract_slice {wt}[{_mul(b, kq, kcb)}, 0] [{kcb}, {co}] [1, 1] "
                                       f": {ttype(wt_a)} to {ttype(wk_a)}")
        return _matmul(b, col, flat_a, wk, wk_a, acc, acc_a)

    def row_chunk(b, r):
        """Row chunk `r`'s products over the kernel's first dim; returns its (rows, C_out)."""
        if ob == osz[0]:  # whole images
            n0, row0 = _mul(b, r, nb), 0
        else:  # ob rows of one image
            per = b.index(osz[0] // ob)
            n0 = b.op(f"arith.divui {r}, {per} : index")
            row0 = _mul(b, b.op(f"arith.remui {r}, {per} : index"), ob)
        zero = b.fill(0, acc_a)
        if n_k == 1:
            return chunk(b, n0, row0, 0, zero)
        k, a, res = b.fresh("k"), b.fresh("acc"), b.fresh("kloop")
        b.line(f"{res} = scf.for {k} = {b.index(0)} to {b.index(n_k)} step {b.index(1)} "
               f"iter_args({a} = {zero}) -> ({ttype(acc_a)}) {{")
        bb = b.sub()
        # (the product into the loop's own accumulator: a padded one, say 9 rows of a small
        # weight gradient, is a new tensor, which bufferization refuses to yield)
        acc = bb.op(f"bufferization.materialize_in_destination {chunk(bb, n0, row0, k, a)} in {a} "
                    f": ({ttype(acc_a)}, {ttype(acc_a)}) -> {ttype(acc_a)}")
        bb.line(f"scf.yield {acc} : {ttype(acc_a)}")
        b.lines.extend(bb.lines)
        b.line("}")
        return res

    if n_rows == 1:
        # (one chunk: the product's result is reshaped to the output directly, and without
        # the barrier reshape propagation folds that into it: a generic contraction that
        # mirax-fuse-reductions then ran as a dot product per output element, the weights
        # read a lane at a time — a 56x56x8 3x3 convolution to 16 channels 13 ms, not 0.2)
        r2 = _barrier(e, row_chunk(e, 0), res_a)
    elif threads > 1 and n_rows % threads == 0 and n_k == 1:
        # the chunks on the threads, each thread's serially into its own rows: a product
        # row reads its own window alone, so a thread copies just the windows it multiplies
        # and no chunk waits for another (the products inside run on their thread:
        # matmul_codegen.plan sees them nested in this forall)
        per = n_rows // threads
        own_a = Aval((per * rows, co), dt_)
        t, o, r2 = e.fresh("t"), e.fresh("out"), e.fresh("rloop")
        init = e.empty(res_a)
        e.line(f"{r2} = scf.forall ({t}) in ({threads}) shared_outs({o} = {init}) -> ({ttype(res_a)}) {{")
        b = e.sub()
        start = _mul(b, t, per * rows)
        own = b.op(f"tensor.extract_slice {o}[{start}, 0] [{per * rows}, {co}] [1, 1] "
                   f": {ttype(res_a)} to {ttype(own_a)}")
        j, a, done = b.fresh("j"), b.fresh("acc"), b.fresh("chunks")
        b.line(f"{done} = scf.for {j} = {b.index(0)} to {b.index(per)} step {b.index(1)} "
               f"iter_args({a} = {own}) -> ({ttype(own_a)}) {{")
        bb = b.sub()
        part = row_chunk(bb, _add(bb, _mul(bb, t, per), j))
        ins = bb.op(f"tensor.insert_slice {part} into {a}[{_mul(bb, j, rows)}, 0] [{rows}, {co}] [1, 1] "
                    f": {ttype(acc_a)} into {ttype(own_a)}")
        bb.line(f"scf.yield {ins} : {ttype(own_a)}")
        b.lines.extend(bb.lines)
        b.line("}")
        b.line("scf.forall.in_parallel {")
        b.line(f"  tensor.parallel_insert_slice {done} into {o}[{start}, 0] [{per * rows}, {co}] [1, 1] "
               f": {ttype(own_a)} into {ttype(res_a)}")
        b.line("}")
        e.lines.extend(b.lines)
        e.line("}")
    else:
        r, o, r2 = e.fresh("r"), e.fresh("out"), e.fresh("rloop")
        init = e.empty(res_a)
        e.line(f"{r2} = scf.for {r} = {e.index(0)} to {e.index(n_rows)} step {e.index(1)} "
               f"iter_args({o} = {init}) -> ({ttype(res_a)}) {{")
        b = e.sub()
        part = row_chunk(b, r)
        ins = b.op(f"tensor.insert_slice {part} into {o}[{_mul(b, r, rows)}, 0] [{rows}, {co}] [1, 1] "
                   f": {ttype(acc_a)} into {ttype(res_a)}")
        b.line(f"scf.yield {ins} : {ttype(res_a)}")
        e.lines.extend(b.lines)
        e.line("}")
    return e.op(f"tensor.expand_shape {r2} [{rows_dims}] output_shape [{_lst(out.shape)}] "
                f": {ttype(res_a)} into {ttype(out)}")


def _padded_rows(b, x, xa: Aval, n0, off, src_a: Aval, pad):
    """Rows [off, off + R) of the first spatial dim of unpadded input `x` (of `xa`) padded
    by `pad` = (low, high) with zeros, images n0.. (nb of them), every other dim whole and
    padded: `src_a` = (nb, R, P_2..., C). `off` (an index value or int) counts in padded
    rows; the rows that fall in the padding are zeros (a `tensor.pad` of the slice that
    exists, its low and high amounts computed from `off`: static when `off` is)."""
    d = xa.ndim - 2
    lo, hi = list(pad[0]), list(pad[1])
    nb, rows, p1 = src_a.shape[0], src_a.shape[1], xa.shape[1]
    et = memory_type(xa)
    if isinstance(off, int) and isinstance(n0, int):
        start = off - lo[0]
        first = min(max(start, 0), p1)
        n = max(min(start + rows, p1), first) - first
        low = min(first - start, rows)
        high = rows - low - n
        part_a = Aval((nb, n) + xa.shape[2:], xa.dtype)
        part = x if part_a.shape == xa.shape else b.op(
            f"tensor.extract_slice {x}[{n0}, {first}{', 0' * d}] [{_lst(part_a.shape)}] [{_lst([1] * xa.ndim)}] "
            f": {ttype(xa)} to {ttype(part_a)}")
        part_t, padded_t = ttype(part_a), ttype(src_a)
        low, high = str(low), str(high)
    else:
        idx = lambda v: b.index(v) if isinstance(v, int) else v  # noqa: E731
        start = b.op(f"arith.subi {idx(off)}, {b.index(lo[0])} : index")  # (unpadded; may be < 0)
        first = b.op(f"arith.minsi {b.op(f'arith.maxsi {start}, {b.index(0)} : index')}, {b.index(p1)} : index")
        end = b.op(f"arith.maxsi {b.op(f'arith.minsi {_add(b, start, rows)}, {b.index(p1)} : index')}, "
                   f"{first} : index")
        n = b.op(f"arith.subi {end}, {first} : index")
        low = b.op(f"arith.minsi {b.op(f'arith.subi {first}, {start} : index')}, {b.index(rows)} : index")
        high = b.op(f"arith.subi {b.op(f'arith.subi {b.index(rows)}, {low} : index')}, {n} : index")
        part_t = "tensor<" + "x".join([str(nb), "?"] + [str(v) for v in xa.shape[2:]]) + f"x{et}>"
        padded_t = "tensor<" + "x".join([str(nb), "?"] + [str(v) for v in src_a.shape[2:]]) + f"x{et}>"
        part = b.op(f"tensor.extract_slice {x}[{idx(n0)}, {first}{', 0' * d}] [{nb}, {n}, {_lst(xa.shape[2:])}] "
                    f"[{_lst([1] * xa.ndim)}] : {ttype(xa)} to {part_t}")
    zero = b.const(0, et)
    r = b.fresh("pad")
    ivs = ", ".join(f"%i{k}_{r[1:]}: index" for k in range(xa.ndim))
    lows = ", ".join(["0", low] + [str(v) for v in lo[1:]] + ["0"])
    highs = ", ".join(["0", high] + [str(v) for v in hi[1:]] + ["0"])
    b.line(f"{r} = tensor.pad {part} low[{lows}] high[{highs}] {{")
    b.lines.append(b.indent + f"^bb0({ivs}):")
    b.line(f"  tensor.yield {zero} : {et}")
    b.line(f"}} : {part_t} to {padded_t}")
    return r if padded_t == ttype(src_a) else b.op(f"tensor.cast {r} : {padded_t} to {ttype(src_a)}")


def _matmul(e, a, aa: Aval, b, ba: Aval, acc, acc_a: Aval):
    return e.op(f"linalg.matmul ins({a}, {b} : {ttype(aa)}, {ttype(ba)}) outs({acc} : {ttype(acc_a)}) "
                f"-> {ttype(acc_a)}")


def _conv_lower_gpu(e, ins, in_avals, out, stride, padding_lo, padding_hi, kernel_dilation, input_dilation,
                    groups, flip):
    """On the GPU: the named convolutions, else one linalg.generic (upstream's GPU tiling
    maps its parallel dims to the threads)."""
    xa, wa = in_avals
    x, w = ins
    d = xa.ndim - 2
    if out.size == 0:
        return e.empty(out)
    if xa.size == 0 or wa.size == 0:  # an empty reduction (no input channels)
        return e.fill(0, out)
    x, xa = _dilate_pad(e, x, xa, padding_lo, padding_hi, input_dilation)
    if flip:  # flip the (small) kernel once; the convolution then reads every operand forwards
        w = _flip_spatial(e, w, wa)
    return _conv_generic(e, x, xa, w, wa, out, stride, kernel_dilation, int(groups))


def _conv_generic(e, x, xa, w, wa, out, stride, kernel_dilation, g):
    """The convolution of the padded input `x` (its kernel read forwards) as a named
    linalg op or one linalg.generic."""
    d = xa.ndim - 2
    if g == 1 and d in (1, 2):
        r = _named_conv(e, x, xa, w, wa, out, stride, kernel_dilation)
        if r is not None:
            return r
    cig, cog = xa.shape[-1] // g, wa.shape[0] // g
    # operands with the groups split out
    xg = Aval(xa.shape[:-1] + (g, cig), xa.dtype)
    wg = Aval((g, cog) + wa.shape[1:], wa.dtype)
    og = Aval(out.shape[:-1] + (g, cog), out.dtype)
    x, w = _reshape(e, x, xa, xg), _reshape(e, w, wa, wg)
    # loops: n, o_1..o_d, g, f, k_1..k_d, c
    nl = 2 * d + 4
    N, O = 0, list(range(1, d + 1))
    G, F = d + 1, d + 2
    K = list(range(d + 3, 2 * d + 3))
    C = 2 * d + 3
    sp = [f"d{O[i]} * {int(stride[i])} + d{K[i]} * {int(kernel_dilation[i])}" for i in range(d)]
    x_map = _affine(nl, [f"d{N}"] + sp + [f"d{G}", f"d{C}"])
    w_map = _affine(nl, [f"d{G}", f"d{F}"] + [f"d{k}" for k in K] + [f"d{C}"])
    o_map = _affine(nl, [f"d{N}"] + [f"d{o}" for o in O] + [f"d{G}", f"d{F}"])
    its = ["parallel"] * (d + 3) + ["reduction"] * (d + 1)
    init = e.fill(0, og)
    r = e.generic([x, w], [xg, wg], og, lambda b, xv, wv, acc: _mul_add(b, xv, wv, acc, out.dtype),
                  [x_map, w_map, o_map], its, init=init)
    return _reshape(e, r, og, out)


primitive("conv", ["input", "weight"], _conv_shape, _conv_lower, _conv_ref,
          attrs={"stride": I64Array(), "padding_lo": I64Array(), "padding_hi": I64Array(),
                 "kernel_dilation": I64Array(), "input_dilation": I64Array(), "groups": I64(), "flip": Bool()},
          summary="channels-last convolution (MLX conv_general): (N, S..., C_in) x (C_out, K..., C_in/groups) "
                  "-> (N, O..., C_out)",
          dtypes=CONV_TEST)
register_lowering("conv", _conv_lower_gpu, target="gpu")


# ---- transform rules -----------------------------------------------------------------

def _rules():
    import mirax as mr
    from .rules import defbatch, defjvp, defvjp, move_to_front

    def conv(x, w, **params):
        from mirax.array import apply
        return apply("conv", [x, w], **params)

    def params_of(stride, padding_lo, padding_hi, kernel_dilation, input_dilation, groups, flip):
        return dict(stride=tuple(int(s) for s in stride), padding_lo=tuple(int(s) for s in padding_lo),
                    padding_hi=tuple(int(s) for s in padding_hi),
                    kernel_dilation=tuple(int(s) for s in kernel_dilation),
                    input_dilation=tuple(int(s) for s in input_dilation), groups=int(groups), flip=bool(flip))

    # jvp: bilinear
    defjvp("conv", lambda g, x, w, out, **p: conv(g, w, **p), lambda g, x, w, out, **p: conv(x, g, **p))

    def flip_spatial(a):
        """`a` reversed along its spatial axes (all but the first and last)."""
        for ax in range(1, a.ndim - 1):
            if a.shape[ax] > 1:
                idx = mr.array(np.arange(a.shape[ax] - 1, -1, -1, dtype=np.int32))
                a = mr.take(a, idx, axis=ax)
        return a

    # vjp w.r.t. the input: the transposed convolution (JAX's _conv_general_dilated_transpose_lhs)
    def vjp_input(ct, x, w, out, stride, padding_lo, padding_hi, kernel_dilation, input_dilation, groups,
                  flip):
        d = x.ndim - 2
        g = int(groups)
        c_out, ksz, cig = w.shape[0], w.shape[1:-1], w.shape[-1]
        cog = c_out // g
        # (C_out, K, C_in/g) -> (g, C_out/g, K, C_in/g) -> (g, C_in/g, K, C_out/g) -> (C_in, K, C_out/g)
        wt = mr.reshape(w, (g, cog) + ksz + (cig,))
        wt = mr.transpose(wt, [0, d + 2] + list(range(2, d + 2)) + [1])
        wt = mr.reshape(wt, (g * cig,) + ksz + (cog,))
        _, kd, _ = conv_geometry(x.shape, w.shape, stride, padding_lo, padding_hi, kernel_dilation,
                                 input_dilation)
        lo, hi = [], []
        for i in range(d):
            sd = (x.shape[1 + i] - 1) * input_dilation[i] + 1
            od = (ct.shape[1 + i] - 1) * stride[i] + 1
            b = kd[i] - int(padding_lo[i]) - 1
            lo.append(b)
            hi.append(sd + kd[i] - 1 - od - b)
        return conv(ct, wt, stride=tuple(int(s) for s in input_dilation), padding_lo=tuple(lo),
                    padding_hi=tuple(hi), kernel_dilation=tuple(int(s) for s in kernel_dilation),
                    input_dilation=tuple(int(s) for s in stride), groups=g, flip=not flip)

    # vjp w.r.t. the weights (JAX's _conv_general_dilated_transpose_rhs): a convolution whose
    # "batch" is the input channels of a group, whose contracted channels are (group, N)
    # and whose window slides over the output positions; groups keep the groups apart.
    def vjp_weight(ct, x, w, out, stride, padding_lo, padding_hi, kernel_dilation, input_dilation, groups,
                   flip):
        d = x.ndim - 2
        g = int(groups)
        n, ssz, c_in = x.shape[0], x.shape[1:-1], x.shape[-1]
        cig = c_in // g
        # x (N, S, C_in) -> (N, S, g, C_in/g) -> (C_in/g, S, g, N) -> (C_in/g, S, g*N)
        xt = mr.reshape(x, (n,) + ssz + (g, cig))
        xt = mr.transpose(xt, [d + 2] + list(range(1, d + 1)) + [d + 1, 0])
        xt = mr.reshape(xt, (cig,) + ssz + (g * n,))
        # ct (N, O, C_out) -> (C_out, O, N)
        ctt = mr.transpose(ct, [d + 1] + list(range(1, d + 1)) + [0])
        _, kd, _ = conv_geometry(x.shape, w.shape, stride, padding_lo, padding_hi, kernel_dilation,
                                 input_dilation)
        hi = []
        for i in range(d):
            sd = (x.shape[1 + i] - 1) * input_dilation[i] + 1
            od = (ct.shape[1 + i] - 1) * stride[i] + 1
            hi.append(od - sd + kd[i] - int(padding_lo[i]) - 1)
        r = conv(xt, ctt, stride=tuple(int(s) for s in kernel_dilation),
                 padding_lo=tuple(int(s) for s in padding_lo), padding_hi=tuple(hi),
                 kernel_dilation=tuple(int(s) for s in stride), input_dilation=tuple(int(s) for s in input_dilation),
                 groups=g, flip=False)  # (C_in/g, K, C_out)
        r = mr.transpose(r, [d + 1] + list(range(1, d + 1)) + [0])  # (C_out, K, C_in/g)
        return flip_spatial(r) if flip else r

    defvjp("conv", vjp_input, vjp_weight)

    # batching: a batched input folds into N; batched weights fold into the groups (the
    # input's channels repeated per example when it is unbatched)
    def conv_batch(args, dims, **p):
        p = params_of(**p)
        x, w = args
        dx, dw = dims
        if dw is None:
            x = move_to_front(x, dx)
            b, n = x.shape[:2]
            r = conv(mr.reshape(x, (b * n,) + x.shape[2:]), w, **p)
            return mr.reshape(r, (b, n) + r.shape[1:]), 0
        w = move_to_front(w, dw)
        b = w.shape[0]
        g = p["groups"]
        wf = mr.reshape(w, (b * w.shape[1],) + w.shape[2:])  # (B*C_out, K, C_in/g)
        if dx is None:
            c_in = x.shape[-1]
            xf = mr.broadcast_to(mr.expand_dims(x, -2), x.shape[:-1] + (b, c_in))
        else:
            x = move_to_front(x, dx)  # (B, N, S, C_in)
            c_in = x.shape[-1]
            xf = mr.moveaxis(x, 0, -2)  # (N, S, B, C_in)
        xf = mr.reshape(xf, xf.shape[:-2] + (b * c_in,))
        p["groups"] = b * g
        r = conv(xf, wf, **p)  # (N, O, B*C_out)
        r = mr.reshape(r, r.shape[:-1] + (b, w.shape[1]))
        return mr.moveaxis(r, -2, 0), 0

    defbatch("conv", conv_batch)


_rules()
