"""Discrete Fourier transforms with MLX's API (`mx.fft`).

    import mirax as mr
    x = mr.array([1.0, 2.0, 3.0, 4.0])
    X = mr.fft.fft(x)                        # complex64: [10, -2+2j, -2, -2-2j]
    y = mr.fft.irfft(mr.fft.rfft(x), n=4)    # float32: x again
    mr.fft.fft2(img, s=(64, 64))             # padded or cropped to s

Every transform is a composition of mirax ops, so grad, jvp, vmap and compile come from
the ops' own rules. Inside, a complex array is a real float32 array with a trailing axis
of 2 (re, im) -- `matmul` refuses complex operands and the GPU has no complex type --
and a DFT of length n along an axis is:
  - n <= 64 (or a prime up to 128): one real matmul with the (2n, 2n) matrix of the DFT;
  - composite n = n1 * n2: Cooley-Tukey in four steps (n2 DFTs of length n1, twiddles,
    n1 DFTs of length n2, a transpose), recursively, O(n * (n1 + n2 + ...));
  - a larger prime: Bluestein's chirp-z, a circular convolution done with DFTs of a
    power-of-two length m >= 2n - 1.
The inverse is conj(DFT(conj(x))) scaled; real transforms drop or rebuild the
Hermitian half. Eagerly, each transform runs as one `mr.compile`d kernel per plan and
input shape (inside grad, vmap or compile its ops are inlined into the caller's trace).
Only the conversions from and to complex64 use complex ops: on the GPU they run on the
CPU (the copy at the edge) and the transform on the GPU; a traced function on the GPU
cannot split them, and says so.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from . import device as _device
from . import ops as _ops
from .array import STATE, Array, array, where_text
from .dialect import dtypes as dt
from .dialect.core import MiraxError

__all__ = ["fft", "ifft", "fft2", "ifft2", "fftn", "ifftn", "rfft", "irfft", "rfft2", "irfft2",
           "rfftn", "irfftn", "fftshift", "ifftshift", "fftfreq", "rfftfreq"]

_DIRECT_MAX = 64          # lengths done as one DFT matrix product
_PRIME_DIRECT_MAX = 128   # primes up to this too; larger ones use Bluestein

_NORMS = ("backward", "ortho", "forward")


# ---- constant tables (float64 math, stored as float32) ---------------------------------

def _unit(num, n):
    """exp(-2*pi*i*num/n) for integer arrays `num`, reduced mod n first for accuracy."""
    ang = -2.0 * np.pi * (np.asarray(num, np.int64) % n) / n
    return np.cos(ang), np.sin(ang)


@functools.lru_cache(maxsize=64)
def _dft_matrix(n):
    """The (2n, 2n) real matrix M with (x as interleaved re, im) @ M = DFT(x) interleaved."""
    jk = np.outer(np.arange(n), np.arange(n))
    c, s = _unit(jk, n)
    m = np.empty((n, 2, n, 2))
    m[:, 0, :, 0], m[:, 0, :, 1] = c, s      # re_j contributes re c, im s
    m[:, 1, :, 0], m[:, 1, :, 1] = -s, c     # im_j contributes re -s, im c
    return m.reshape(2 * n, 2 * n).astype(np.float32)


def _cmul_tables(re, im, conj_x):
    """(P, Q) with x * P + swap(x) * Q = x * (re + i im), or conj(x) * (re + i im):
    swap(x) = x[..., ::-1] exchanges the real and imaginary parts."""
    if conj_x:
        p, q = np.stack([re, -re], -1), np.stack([im, im], -1)
    else:
        p, q = np.stack([re, re], -1), np.stack([-im, im], -1)
    return p.astype(np.float32), q.astype(np.float32)


@functools.lru_cache(maxsize=64)
def _twiddles(n1, n2):
    """exp(-2*pi*i*j2*k1/n) laid out (n2, n1), as _cmul tables."""
    return _cmul_tables(*_unit(np.outer(np.arange(n2), np.arange(n1)), n1 * n2), conj_x=False)


def _bluestein_size(n):
    return 1 << (2 * n - 2).bit_length()  # the power of two >= 2n - 1


@functools.lru_cache(maxsize=32)
def _bluestein_tables(n):
    """Tables of Bluestein's algorithm for length n: the chirp w_j = exp(-i*pi*j^2/n)
    (as x * w and conj(x) * w), and conj(DFT_m(b)) / m for b_l = conj(w_l) wrapped
    circularly into length m (the 1/m and conjugates fold the inverse DFT of the
    convolution into a forward one)."""
    m = _bluestein_size(n)
    j = np.arange(n, dtype=np.int64)
    wr, wi = _unit(j * j, 2 * n)              # exp(-2*pi*i*j^2/(2n))
    b = np.zeros(m, np.complex128)
    b[:n] = wr - 1j * wi
    b[m - n + 1:] = b[1:n][::-1]
    # a constant of the algorithm, like the cos/sin tables: numpy only builds the table
    bh = np.conj(np.fft.fft(b)) / m
    return (_cmul_tables(wr, wi, conj_x=False), _cmul_tables(bh.real, bh.imag, conj_x=True),
            _cmul_tables(wr, wi, conj_x=True))


def _split(n):
    """The largest factor of n up to sqrt(n) (1 for a prime)."""
    for f in range(math.isqrt(n), 1, -1):
        if n % f == 0:
            return f
    return 1


# ---- the transform on interleaved (rows, n, 2) float32 arrays ----------------------------

def _cmul(x, tables):
    """x * t (or conj(x) * t) elementwise, for t given as _cmul tables."""
    p, q = tables
    return x * array(p) + x[..., ::-1] * array(q)


def _conj(x):
    return x * array(np.array([1.0, -1.0], np.float32))


def _dft(x):
    """The forward DFT of x (rows, n, 2) along axis 1, unnormalized."""
    rows, n, _ = x.shape
    if n == 1:
        return x
    n1 = _split(n)
    if n <= _DIRECT_MAX or (n1 == 1 and n <= _PRIME_DIRECT_MAX):
        y = _ops.matmul(_ops.reshape(x, (rows, 2 * n)), array(_dft_matrix(n)))
        return _ops.reshape(y, (rows, n, 2))
    if n1 == 1:
        return _bluestein(x)
    n2 = n // n1
    # index j = n2*j1 + j2 in, k = k1 + n1*k2 out
    y = _ops.transpose(_ops.reshape(x, (rows, n1, n2, 2)), (0, 2, 1, 3))
    y = _dft(_ops.reshape(y, (rows * n2, n1, 2)))
    y = _cmul(_ops.reshape(y, (rows, n2, n1, 2)), _twiddles(n1, n2))
    y = _ops.transpose(y, (0, 2, 1, 3))
    y = _dft(_ops.reshape(y, (rows * n1, n2, 2)))
    y = _ops.transpose(_ops.reshape(y, (rows, n1, n2, 2)), (0, 2, 1, 3))
    return _ops.reshape(y, (rows, n, 2))


def _bluestein(x):
    """DFT of a prime length n as a convolution with a chirp (jk = (j^2 + k^2 - (k-j)^2)/2)."""
    n = x.shape[1]
    m = _bluestein_size(n)
    chirp, kernel, chirp_conj = _bluestein_tables(n)
    a = _ops.pad(_cmul(x, chirp), [(0, 0), (0, m - n), (0, 0)])
    y = _dft(_cmul(_dft(a), kernel))          # conj of the circular convolution
    return _cmul(y[:, :n], chirp_conj)


def _dft_axis(x, axis):
    """The forward DFT of interleaved x (..., 2) along `axis` (a non-negative axis of the
    complex shape)."""
    n = x.shape[axis]
    if n == 1:
        return x
    moved = _ops.moveaxis(x, axis, -2)
    rows = math.prod(moved.shape[:-2])
    y = _dft_centered(_ops.reshape(moved, (rows, n, 2)))
    return _ops.moveaxis(_ops.reshape(y, moved.shape), -2, axis)


def _dft_centered(x):
    """_dft(x), with the mean of x taken out first and put back at frequency 0: float32
    rounding then scales with how much x varies, not with its offset (a large constant
    part leaks ~eps * n * |mean| into every frequency of a multi-stage transform)."""
    rows, n, _ = x.shape
    if n <= _DIRECT_MAX:
        return _dft(x)
    mean = _ops.mean(x, axis=1, keepdims=True)
    first = np.zeros((1, n, 1), np.float32)
    first[0, 0, 0] = n
    return _dft(x - mean) + mean * array(first)


# ---- complex64 <-> interleaved -------------------------------------------------------------

def _to_pairs(a):
    """complex64 a as interleaved float32 (..., 2): Re(a * [1, -i]) = [Re a, Im a]."""
    return _ops.real(_ops.expand_dims(a, -1) * array(np.array([1, -1j], np.complex64)))


def _from_pairs(x):
    """interleaved x (..., 2) as complex64: x . [1, i]."""
    return _ops.sum(_ops.astype(x, dt.complex64) * array(np.array([1, 1j], np.complex64)), axis=-1)


def _real_to_pairs(x):
    return _ops.pad(_ops.expand_dims(x, -1), [(0, 0)] * x.ndim + [(0, 1)])


def _on_gpu():
    return _device.current_device().type is _device.DeviceType.gpu


# ---- argument handling, as MLX's fft_impl ----------------------------------------------------

def _arr(a):
    return a if isinstance(a, Array) else array(a)


def _check_norm(norm, op):
    if norm not in _NORMS:
        raise ValueError(f"[{op}] Invalid norm. Expected one of {{'backward', 'ortho', 'forward'}}.")


def _axis_size(a, ax, op):
    """a.shape[ax], where MLX reads the size of an axis to default `n` (IndexError)."""
    if not -a.ndim <= ax < a.ndim:
        raise IndexError(f"[{op}] Invalid axis {ax} for array with {a.ndim} dimensions{where_text()}")
    return a.shape[ax]


def _default_sizes(a, axes, real, inverse, op):
    n = [_axis_size(a, ax, op) for ax in axes]
    if real and inverse and n:
        n[-1] = (n[-1] - 1) * 2
    return n


def _scale(n, norm, inverse):
    """The factor on the unnormalized transform (MLX's fft_scale_factor times the inverse's 1/n)."""
    total = float(math.prod(n))
    if norm == "ortho":
        return 1.0 / math.sqrt(total)
    if (norm == "backward") == inverse:
        return 1.0 / total
    return 1.0


def _fft_impl(a, n, axes, real, inverse, norm, op):
    """The transform of `a` over `axes` (sizes `n`), with MLX's checks (fft_impl)."""
    if a.ndim < 1:
        raise ValueError(f"[{op}] Requires array with at least one dimension.{where_text()}")
    n, axes = [int(v) for v in n], [int(v) for v in axes]
    if len(n) != len(axes):
        raise ValueError(f"[{op}] Shape and axes have different sizes: {n} and {axes}.{where_text()}")
    if not axes:
        return a
    valid = [ax + a.ndim if ax < 0 else ax for ax in axes]
    if len(set(valid)) != len(valid):
        raise ValueError(f"[{op}] Duplicated axis received {axes}.{where_text()}")
    if min(valid) < 0 or max(valid) >= a.ndim:
        raise ValueError(f"[{op}] Invalid axis received for array with {a.ndim} dimensions: {axes}.{where_text()}")
    if any(v <= 0 for v in n):
        raise ValueError(f"[{op}] Invalid FFT output size requested {n}.{where_text()}")
    plan = (tuple(n), tuple(valid), real, inverse, norm)
    if not _on_gpu():
        return _compiled(plan, True)(a)
    # SPIR-V has no complex type: eagerly, the complex64 conversions run on the CPU and the
    # transform here; a traced function runs on one device, so it cannot split them
    if STATE.tracing and (a.dtype.kind == "c" or not (real and inverse)):
        raise MiraxError(f"[{op}] complex64 values cannot be computed on the GPU inside a transform or "
                         f"compile (SPIR-V has no complex type); run it on mr.cpu{where_text()}")
    if real and not inverse:
        if a.dtype.kind == "c":
            with _device.stream(_device.cpu):
                a = _ops.astype(a, dt.float32)
    elif a.dtype.kind == "c":
        with _device.stream(_device.cpu):
            a = _to_pairs(a)
    else:
        a = _real_to_pairs(_ops.astype(a, dt.float32))
    out = _compiled(plan, False)(a)
    if real and inverse:
        return out
    with _device.stream(_device.cpu):
        return _from_pairs(out)


@functools.lru_cache(maxsize=256)
def _compiled(plan, complex_io):
    """The transform for one plan as a compiled function: in eager mode one fused kernel
    per input shape; inside a trace (grad, vmap, compile) its ops are inlined."""
    from .compile import compile as _compile
    return _compile(lambda a: _transform(a, plan, complex_io))


def _transform(a, plan, complex_io):
    """The transform itself. With `complex_io`, `a` is of any dtype and a complex result
    is complex64; without, `a` and the result are float32, interleaved (..., 2) except
    the real side of rfft and irfft."""
    n, valid, real, inverse, norm = plan
    r2c = real and not inverse
    pairs_in = not complex_io and not r2c
    in_shape = list(a.shape[:-1] if pairs_in else a.shape)
    for ax, v in zip(valid, n):
        in_shape[ax] = v
    if real and inverse:
        in_shape[valid[-1]] = n[-1] // 2 + 1

    if pairs_in:
        x = _fit(a, in_shape + [2])
    elif a.dtype.kind == "c" and not r2c:
        x = _fit(_to_pairs(a), in_shape + [2])
    else:
        a = _ops.astype(a, dt.float32)  # MLX: rfft silently makes a complex input real
        x = _real_to_pairs(_fit(a, in_shape))

    last = valid[-1]
    if r2c:
        # the real axis first, then only its n//2 + 1 kept frequencies go through the rest
        x = _take_first(_dft_axis(x, last), last, n[-1] // 2 + 1)
        rest = valid[:-1]
    elif real:
        rest = valid[:-1]
    else:
        rest = valid
    if inverse:
        x = _conj(x)  # inverse DFT = conj(DFT(conj(x))) / n
    for ax in rest:
        x = _dft_axis(x, ax)
    if real and inverse:
        # x = conj(v), v the inverse over `rest`: Re(IDFT(H(v))) = Re(conj(DFT(H(conj v)))) = Re(DFT(H(x)))
        out = _dft_axis(_hermitian_full(x, last, n[-1]), last)[..., 0]
    elif inverse:
        out = _conj(x)
    else:
        out = x
    scale = _scale(n, norm, inverse)
    if scale != 1.0:
        out = out * array(scale, dt.float32)
    return out if (real and inverse) or not complex_io else _from_pairs(out)


def _fit(x, shape):
    """x cropped and zero padded to `shape` (MLX: slice, then pad)."""
    shape = tuple(shape)
    if any(t < s for s, t in zip(x.shape, shape)):
        x = x[tuple(slice(0, min(s, t)) for s, t in zip(x.shape, shape))]
    if any(t > s for s, t in zip(x.shape, shape)):
        x = _ops.pad(x, [(0, t - s) for s, t in zip(x.shape, shape)])
    return x


def _take_first(x, axis, k):
    key = [slice(None)] * x.ndim
    key[axis] = slice(0, k)
    return x[tuple(key)]


def _hermitian_full(x, axis, n):
    """x (its first n//2 + 1 entries along `axis`) extended to length n by x[n-k] =
    conj(x[k]), the spectrum of a real signal. The real part of its DFT ignores the
    imaginary parts at 0 and n/2, as numpy's irfft does."""
    m = x.shape[axis]
    if n == m:
        return x
    tail = [slice(None)] * x.ndim
    tail[axis] = slice(n - m, 0, -1)  # x[n-m], ..., x[1]
    return _ops.concatenate([x, _conj(x[tuple(tail)])], axis=axis)


def _one_axis(a, n, axis, real, inverse, norm, op):
    _check_norm(norm, op)
    a = _arr(a)
    if n is None:
        n = _default_sizes(a, [axis], real, inverse, op)[0]
    return _fft_impl(a, [n], [axis], real, inverse, norm, op)


def _many_axes(a, s, axes, real, inverse, norm, op):
    _check_norm(norm, op)
    a = _arr(a)
    if axes is None:
        if s is not None:
            raise ValueError(f"[{op}] `axes` should not be `None` if `s` is not `None`.")
        axes = list(range(a.ndim))
    axes = [int(ax) for ax in axes]
    if s is None:
        s = _default_sizes(a, axes, real, inverse, op)
    return _fft_impl(a, list(s), axes, real, inverse, norm, op)


# ---- the API ---------------------------------------------------------------------------------

def fft(a, n=None, axis=-1, norm="backward"):
    """One dimensional DFT along `axis`, cropped or zero padded to `n`; complex64.

        mr.fft.fft(mr.array([1.0, 0.0, 0.0, 0.0]))   # [1, 1, 1, 1]
    """
    return _one_axis(a, n, axis, False, False, norm, "fft")


def ifft(a, n=None, axis=-1, norm="backward"):
    """One dimensional inverse DFT: `ifft(fft(x))` is `x` (complex64)."""
    return _one_axis(a, n, axis, False, True, norm, "ifft")


def rfft(a, n=None, axis=-1, norm="backward"):
    """DFT of a real input: the `n // 2 + 1` non-negative frequencies (complex64).

        mr.fft.rfft(mr.array([1.0, 2.0, 3.0, 4.0]))  # [10, -2+2j, -2]
    """
    return _one_axis(a, n, axis, True, False, norm, "rfft")


def irfft(a, n=None, axis=-1, norm="backward"):
    """The inverse of `rfft`: a float32 signal of length `n` (default 2 * (size - 1))."""
    return _one_axis(a, n, axis, True, True, norm, "irfft")


def fft2(a, s=None, axes=(-2, -1), norm="backward"):
    """Two dimensional DFT over `axes` (default the last two), padded or cropped to `s`."""
    return _many_axes(a, s, axes, False, False, norm, "fft2")


def ifft2(a, s=None, axes=(-2, -1), norm="backward"):
    """Two dimensional inverse DFT over `axes`."""
    return _many_axes(a, s, axes, False, True, norm, "ifft2")


def fftn(a, s=None, axes=None, norm="backward"):
    """n-dimensional DFT over `axes` (all axes when None; `s` then needs `axes`).

        mr.fft.fftn(x, s=(8, 8), axes=(0, 1))
    """
    return _many_axes(a, s, axes, False, False, norm, "fftn")


def ifftn(a, s=None, axes=None, norm="backward"):
    """n-dimensional inverse DFT over `axes`."""
    return _many_axes(a, s, axes, False, True, norm, "ifftn")


def rfft2(a, s=None, axes=(-2, -1), norm="backward"):
    """Two dimensional DFT of a real input; the last axis keeps `s[-1] // 2 + 1` frequencies."""
    return _many_axes(a, s, axes, True, False, norm, "rfft2")


def irfft2(a, s=None, axes=(-2, -1), norm="backward"):
    """The inverse of `rfft2` (float32)."""
    return _many_axes(a, s, axes, True, True, norm, "irfft2")


def rfftn(a, s=None, axes=None, norm="backward"):
    """n-dimensional DFT of a real input; the last of `axes` is the halved one."""
    return _many_axes(a, s, axes, True, False, norm, "rfftn")


def irfftn(a, s=None, axes=None, norm="backward"):
    """The inverse of `rfftn` (float32); `s[-1]` is the length of the real axis."""
    return _many_axes(a, s, axes, True, True, norm, "irfftn")


def _shift(a, axes, inverse, op):
    a = _arr(a)
    if axes is None:
        axes = list(range(a.ndim))
    elif isinstance(axes, (int, np.integer)):
        axes = [int(axes)]
    axes = [int(ax) for ax in axes]
    if not axes:
        return a
    shifts = []
    for ax in axes:
        if not -a.ndim <= ax < a.ndim:
            raise ValueError(f"[{op}] Invalid axis {ax} for array with {a.ndim} dimensions.{where_text()}")
        half = a.shape[ax] // 2  # numpy's choice for odd lengths
        shifts.append(-half if inverse else half)
    return _ops.roll(a, shifts, axes)


def fftshift(a, axes=None):
    """The zero frequency moved to the centre of `axes` (all when None).

        mr.fft.fftshift(mr.fft.fftfreq(4))   # [-0.5, -0.25, 0, 0.25]
    """
    return _shift(a, axes, False, "fftshift")


def ifftshift(a, axes=None):
    """The inverse of `fftshift` (they differ on odd lengths)."""
    return _shift(a, axes, True, "ifftshift")


def _check_freq_args(n, d, op):
    if n <= 0:
        raise ValueError(f"[{op}] `n` must be greater than 0.")
    if d == 0.0:
        raise ValueError(f"[{op}] `d` must be non-zero.")


def fftfreq(n, d=1.0):
    """The sample frequencies of an `fft` of length n and spacing d (float32).

        mr.fft.fftfreq(4)   # [0, 0.25, -0.5, -0.25]
    """
    _check_freq_args(n, d, "fftfreq")
    k = _ops.concatenate([_ops.arange(0, (n + 1) // 2, dtype=dt.float32),
                          _ops.arange(-(n // 2), 0, dtype=dt.float32)])
    return k * array(np.float32(1.0 / (n * d)))


def rfftfreq(n, d=1.0):
    """The sample frequencies of an `rfft` of length n: [0, n // 2] / (n * d) (float32)."""
    _check_freq_args(n, d, "rfftfreq")
    return _ops.arange(0, n // 2 + 1, dtype=dt.float32) * array(np.float32(1.0 / (n * d)))


# ---- short-time transforms -----------------------------------------------------------------

_PAD_MODES = ("reflect", "constant", "edge")


def _stft_window(window, win_length, n_fft, op):
    """The window, zero padded on both sides to n_fft (a box of win_length ones if None)."""
    if window is None:
        if win_length > n_fft:
            raise ValueError(f"[{op}] window length must not exceed n_fft.")
        w = _ops.ones((win_length,), dtype=dt.float32)
    else:
        w = _arr(window)
        if w.ndim != 1:
            raise ValueError(f"[{op}] window must be a one-dimensional array.")
        if w.shape[0] > n_fft:
            raise ValueError(f"[{op}] window length must not exceed n_fft.")
    left = (n_fft - w.shape[0]) // 2
    return _ops.pad(w, [(left, n_fft - w.shape[0] - left)]) if w.shape[0] < n_fft else w


def _stft_args(n_fft, hop_length, win_length, norm, op):
    if n_fft <= 0:
        raise ValueError(f"[{op}] n_fft must be positive.")
    hop = n_fft // 4 if hop_length is None else hop_length
    if hop <= 0:
        raise ValueError(f"[{op}] hop_length must be positive.")
    if norm not in _NORMS:
        raise ValueError(f"[{op}] Invalid norm. Expected one of {{'backward', 'ortho', 'forward'}}.")
    return hop, n_fft if win_length is None else win_length


def stft(x, n_fft=2048, hop_length=None, win_length=None, window=None, center=True, pad_mode="reflect",
         norm="backward", onesided=None):
    """Short-time Fourier transform of the last axis: frames of `n_fft` samples every
    `hop_length` (default n_fft // 4), times `window` (default a box of `win_length`
    ones, centered in n_fft), each transformed; complex64 of shape (..., n_freq, n_frames).

        mr.fft.stft(signal, n_fft=256, window=mr.hanning(256))   # (129, frames)

    `center` pads n_fft // 2 samples at both ends with `pad_mode` ("reflect", "constant",
    "edge"); `onesided` (default: for real input) keeps the n_fft // 2 + 1 non-negative
    frequencies (of the real part, as MLX)."""
    x = _arr(x)
    if x.ndim == 0:
        raise ValueError("[stft] Input must have at least one dimension.")
    hop, win_length = _stft_args(n_fft, hop_length, win_length, norm, "stft")
    if pad_mode not in _PAD_MODES:
        raise ValueError(f"[stft] Invalid pad_mode {pad_mode!r}: expected one of {', '.join(_PAD_MODES)}.")
    w = _stft_window(window, win_length, n_fft, "stft")
    if onesided is None:
        onesided = x.dtype.kind != "c"
    if center:
        half = n_fft // 2
        x = _ops.pad(x, [(0, 0)] * (x.ndim - 1) + [(half, half)], mode=pad_mode)
    if x.shape[-1] < n_fft:
        raise ValueError("[stft] Input is too short for the given n_fft.")
    n_frames = 1 + (x.shape[-1] - n_fft) // hop
    idx = np.arange(n_frames)[:, None] * hop + np.arange(n_fft)[None, :]
    frames = _ops.take(x, array(idx.astype(np.int32)), axis=-1) * w   # (..., n_frames, n_fft)
    spec = rfft(frames, axis=-1, norm=norm) if onesided else fft(frames, axis=-1, norm=norm)
    return _ops.swapaxes(spec, -1, -2)


def istft(stft_matrix, n_fft=None, hop_length=None, win_length=None, window=None, center=True, norm="backward",
          onesided=None, length=None):
    """The inverse of `stft`: each frame's inverse transform times the window, added
    where it overlaps the others and divided by the sum of the squared windows there (0
    where no window reaches); float32 of shape (..., samples).

        y = mr.fft.istft(mr.fft.stft(x, 16), length=x.shape[-1])   # x again

    `n_fft` defaults to 2 * (n_freq - 1) when `onesided` (the default), else n_freq;
    `length` trims or zero pads the result."""
    spec = _arr(stft_matrix)
    if spec.ndim < 2:
        raise ValueError("[istft] Input must have at least two dimensions (freq, frames).")
    if onesided is None:
        onesided = True
    n_freq, n_frames = spec.shape[-2], spec.shape[-1]
    if n_fft is None:
        n_fft = 2 * (n_freq - 1) if onesided else n_freq
    hop, win_length = _stft_args(n_fft, hop_length, win_length, norm, "istft")
    w = _stft_window(window, win_length, n_fft, "istft")
    w = _ops.real(w) if w.dtype.kind == "c" else _ops.astype(w, dt.float32)
    f = _ops.swapaxes(spec, -1, -2)   # (..., n_frames, n_freq)
    frames = irfft(f, n=n_fft, axis=-1, norm=norm) if onesided else _ops.real(ifft(f, n=n_fft, axis=-1, norm=norm))
    total = n_fft + hop * (n_frames - 1)
    idx = array((np.arange(n_frames)[:, None] * hop + np.arange(n_fft)[None, :]).astype(np.int32))
    y = _ops.scatter_add(_ops.zeros(frames.shape[:-2] + (total,), dt.float32), idx, frames * w, axis=-1)
    envelope = _ops.scatter_add(_ops.zeros((total,), dt.float32), idx, _ops.broadcast_to(w * w, idx.shape), axis=0)
    y = y / _ops.where(envelope > 1e-11, envelope, 1.0)   # no window reaches: y is 0 there already
    start = n_fft // 2 if center else 0
    if length is not None:
        length = max(int(length), 0)
        y = y[..., start:start + length]
        if y.shape[-1] < length:
            y = _ops.pad(y, [(0, 0)] * (y.ndim - 1) + [(0, length - y.shape[-1])])
        return y
    return y[..., start:total - start] if center else y


__all__ += ["stft", "istft"]


for _name in __all__:
    globals()[_name] = _ops._with_stream(globals()[_name])
del _name
