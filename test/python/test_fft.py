"""mirax.fft against numpy.fft: every transform for several sizes (powers of two,
composite, primes up to Bluestein's, 1), axes, n/s padding and cropping, norms, dtypes
and errors as MLX; the rules it gets from its ops (grad, vjp, jvp, vmap, compile); the
GPU; and that large lengths are never done with one quadratic DFT matrix."""
import math
import re

import numpy as np
import pytest

import mirax as mr
import mirax.fft

RTOL = 1e-4  # float32 transforms, relative to the largest output


def cplx(rng, *shape):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)


def real(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def close(got, want, dtype=None, rtol=RTOL):
    """`got` (a mirax array) equals numpy's `want` up to float32 rounding."""
    got_np = np.asarray(got)
    want = np.asarray(want)
    assert got_np.shape == want.shape
    if dtype is not None:
        assert got.dtype == dtype
    scale = max(float(np.abs(want).max(initial=0.0)), 1.0)
    np.testing.assert_allclose(got_np, want, rtol=0, atol=rtol * scale)


def test_module_is_importable_both_ways():
    assert mr.fft is mirax.fft
    assert callable(mr.fft.fftn) and callable(mirax.fft.irfft2)


# ---- one axis --------------------------------------------------------------------------------

# 1; one DFT matrix (up to 64, primes up to 128); four-step (100 = 10 * 10, 256 = 16 * 16);
# Bluestein (131, with four-step DFTs of 512); larger ones in test_large_transform_matches_numpy
SIZES = [1, 2, 17, 100, 131, 256]


@pytest.mark.parametrize("n", SIZES)
def test_fft_and_ifft_match_numpy(n, rng):
    x = cplx(rng, 2, n)
    close(mr.fft.fft(mr.array(x)), np.fft.fft(x), mr.complex64)
    close(mr.fft.ifft(mr.array(x)), np.fft.ifft(x), mr.complex64)


@pytest.mark.parametrize("n", [1, 2, 9, 100])
def test_rfft_and_irfft_match_numpy(n, rng):
    x = real(rng, 3, n)
    close(mr.fft.rfft(mr.array(x)), np.fft.rfft(x), mr.complex64)
    spec = np.fft.rfft(x).astype(np.complex64)
    close(mr.fft.irfft(mr.array(spec), n=n), np.fft.irfft(spec, n=n), mr.float32)
    if n > 1:  # the default n is 2 * (size - 1)
        close(mr.fft.irfft(mr.array(spec)), np.fft.irfft(spec), mr.float32)


def test_irfft_ignores_imaginary_parts_at_zero_and_nyquist(rng):
    spec = cplx(rng, 5)  # imaginary parts at 0 and n/2 that no real signal has
    close(mr.fft.irfft(mr.array(spec)), np.fft.irfft(spec), mr.float32)
    close(mr.fft.irfft(mr.array(spec), n=9), np.fft.irfft(spec, n=9), mr.float32)


@pytest.mark.parametrize("n", [3, 10])
def test_n_crops_or_zero_pads(n, rng):
    x = cplx(rng, 2, 6)
    close(mr.fft.fft(mr.array(x), n=n), np.fft.fft(x, n=n))
    close(mr.fft.ifft(mr.array(x), n=n), np.fft.ifft(x, n=n))
    xr = x.real.copy()
    close(mr.fft.rfft(mr.array(xr), n=n), np.fft.rfft(xr, n=n))
    close(mr.fft.irfft(mr.array(x), n=n), np.fft.irfft(x, n=n))


@pytest.mark.parametrize("axis", [0, -2])
def test_axis(axis, rng):
    x = cplx(rng, 4, 3, 5)
    close(mr.fft.fft(mr.array(x), axis=axis), np.fft.fft(x, axis=axis))
    close(mr.fft.rfft(mr.array(x.real.copy()), axis=axis), np.fft.rfft(x.real, axis=axis))
    close(mr.fft.irfft(mr.array(x), axis=axis), np.fft.irfft(x, axis=axis))


@pytest.mark.parametrize("norm", ["backward", "ortho", "forward"])
def test_norms(norm, rng):
    x = cplx(rng, 3, 6)
    close(mr.fft.fft(mr.array(x), norm=norm), np.fft.fft(x, norm=norm))
    close(mr.fft.ifft(mr.array(x), norm=norm), np.fft.ifft(x, norm=norm))
    close(mr.fft.rfft(mr.array(x.real.copy()), norm=norm), np.fft.rfft(x.real, norm=norm))
    close(mr.fft.irfftn(mr.array(x), norm=norm), np.fft.irfftn(x, norm=norm))


def test_input_dtypes(rng):
    x = real(rng, 8)
    # real and integer inputs become complex64 (MLX casts), float64 too
    close(mr.fft.fft(mr.array(x)), np.fft.fft(x), mr.complex64)
    close(mr.fft.fft(mr.array(np.arange(6, dtype=np.int32))), np.fft.fft(np.arange(6)), mr.complex64)
    close(mr.fft.fft(mr.array(x.astype(np.float64))), np.fft.fft(x), mr.complex64)
    # rfft silently takes the real part of a complex input
    c = cplx(rng, 8)
    close(mr.fft.rfft(mr.array(c)), np.fft.rfft(c.real), mr.complex64)
    # irfft of a real input is that of the complex one with zero imaginary parts
    close(mr.fft.irfft(mr.array(x)), np.fft.irfft(x), mr.float32)
    # a Python list works as an array
    close(mr.fft.fft([1.0, 0.0, 0.0, 0.0]), np.ones(4))


def test_uncompiled_composition(rng):
    # mr.disable_compile(): the same ops run one by one
    x = cplx(rng, 2, 12)
    mr.disable_compile()
    try:
        close(mr.fft.fft(mr.array(x)), np.fft.fft(x), mr.complex64)
        close(mr.fft.irfft(mr.array(x)), np.fft.irfft(x), mr.float32)
    finally:
        mr.enable_compile()


def test_stream_keyword(rng):
    x = cplx(rng, 4)
    close(mr.fft.fft(mr.array(x), stream=mr.cpu), np.fft.fft(x))
    close(mr.fft.fftshift(mr.array(x), stream=mr.cpu), np.fft.fftshift(x))


# ---- several axes ----------------------------------------------------------------------------

ND_CASES = [(None, None), (None, (2, 1)), ((3, 6), (2, 0)), ((2, 7, 4), (0, 1, 2))]  # (s, axes)


@pytest.mark.parametrize("s,axes", ND_CASES)
def test_fftn_family_matches_numpy(s, axes, rng):
    x = cplx(rng, 3, 4, 5)
    xr = x.real.copy()
    kw = {} if axes is None else {"axes": axes, "s": s}
    close(mr.fft.fftn(mr.array(x), **kw), np.fft.fftn(x, **kw), mr.complex64)
    close(mr.fft.ifftn(mr.array(x), **kw), np.fft.ifftn(x, **kw), mr.complex64)
    close(mr.fft.rfftn(mr.array(xr), **kw), np.fft.rfftn(xr, **kw), mr.complex64)
    spec = np.fft.rfftn(xr, **kw).astype(np.complex64)
    kw_inv = {} if axes is None else {"axes": axes, "s": s}
    close(mr.fft.irfftn(mr.array(spec), **kw_inv), np.fft.irfftn(spec, **kw_inv), mr.float32)


@pytest.mark.parametrize("s,axes", [((4, 6), (-2, -1)), (None, (2, 0))])
def test_fft2_family_matches_numpy(s, axes, rng):
    x = cplx(rng, 3, 4, 5)
    xr = x.real.copy()
    kw = {"s": s, "axes": axes}
    close(mr.fft.fft2(mr.array(x), **kw), np.fft.fft2(x, **kw), mr.complex64)
    close(mr.fft.ifft2(mr.array(x), **kw), np.fft.ifft2(x, **kw), mr.complex64)
    close(mr.fft.rfft2(mr.array(xr), **kw), np.fft.rfft2(xr, **kw), mr.complex64)
    spec = np.fft.rfft2(xr, **kw).astype(np.complex64)
    close(mr.fft.irfft2(mr.array(spec), **kw), np.fft.irfft2(spec, **kw), mr.float32)


def test_fft2_defaults_to_the_last_two_axes_and_axes_none_to_all(rng):
    x = cplx(rng, 2, 3, 4)
    close(mr.fft.fft2(mr.array(x)), np.fft.fft2(x))
    close(mr.fft.fft2(mr.array(x), axes=None), np.fft.fftn(x))


def test_empty_axes_return_the_input(rng):
    x = mr.array(real(rng, 3))
    assert mr.fft.fftn(x, axes=[]) is x


# ---- shifts and frequencies --------------------------------------------------------------------

@pytest.mark.parametrize("shape,axes", [((7,), None), ((4, 6), 0), ((4, 6), [1]), ((5, 7), [0, 1]),
                                        ((5, 7), -1), ((5, 7), None), ((0,), None)])
def test_fftshift_and_ifftshift(shape, axes, rng):
    x = cplx(rng, *shape) if len(shape) == 2 else real(rng, *shape)
    close(mr.fft.fftshift(mr.array(x), axes=axes), np.fft.fftshift(x, axes=axes))
    close(mr.fft.ifftshift(mr.array(x), axes=axes), np.fft.ifftshift(x, axes=axes))
    back = mr.fft.ifftshift(mr.fft.fftshift(mr.array(x), axes=axes), axes=axes)
    np.testing.assert_array_equal(np.asarray(back), x)


@pytest.mark.parametrize("n,d", [(1, 1.0), (5, 0.25), (8, -0.5)])
def test_fftfreq_and_rfftfreq(n, d):
    out = mr.fft.fftfreq(n, d)
    assert out.dtype == mr.float32
    np.testing.assert_array_equal(np.asarray(out), np.fft.fftfreq(n, d).astype(np.float32))
    out = mr.fft.rfftfreq(n, d=d)
    assert out.dtype == mr.float32
    np.testing.assert_array_equal(np.asarray(out), np.fft.rfftfreq(n, d).astype(np.float32))


# ---- errors, as MLX -----------------------------------------------------------------------------

def test_errors(rng):
    x = mr.array(real(rng, 4, 4))
    with pytest.raises(ValueError, match=r"\[irfftn\] Requires array with at least one dimension"):
        mr.fft.irfftn(mr.array(3.0))
    with pytest.raises(ValueError, match=r"\[fft\] Invalid norm"):
        mr.fft.fft(x, norm="invalid")
    with pytest.raises(ValueError, match="Duplicated axis"):
        mr.fft.fftn(x, axes=[0, -2])
    with pytest.raises(ValueError, match="Invalid axis"):
        mr.fft.fft(x, n=4, axis=2)
    with pytest.raises(IndexError, match="Invalid axis"):  # MLX reads the size of the axis first
        mr.fft.fft(x, axis=-3)
    with pytest.raises(ValueError, match="Invalid FFT output size"):
        mr.fft.fft(x, n=0)
    with pytest.raises(ValueError, match="Invalid FFT output size"):
        mr.fft.irfft(mr.array(cplx(rng, 3, 1)))  # default n = 2 * (1 - 1)
    with pytest.raises(ValueError, match=r"\[fft2\] `axes` should not be `None`"):
        mr.fft.fft2(x, s=(2, 2), axes=None)
    with pytest.raises(ValueError, match=r"\[rfftn\] `axes` should not be `None`"):
        mr.fft.rfftn(x, s=(2, 2))
    with pytest.raises(ValueError, match="different sizes"):
        mr.fft.fftn(x, s=(2, 2, 2), axes=(0, 1))
    with pytest.raises(ValueError, match=r"\[fftshift\] Invalid axis 2"):
        mr.fft.fftshift(x, axes=[2])
    with pytest.raises(ValueError, match=r"\[ifftshift\] Invalid axis -3"):
        mr.fft.ifftshift(x, axes=-3)
    with pytest.raises(ValueError, match=r"\[fftfreq\] `n` must be greater than 0"):
        mr.fft.fftfreq(0)
    with pytest.raises(ValueError, match=r"\[rfftfreq\] `d` must be non-zero"):
        mr.fft.rfftfreq(4, d=0.0)


# ---- transforms of the transforms ------------------------------------------------------------

def test_grad_of_parseval(rng):
    # sum |fft(x)|^2 = n * sum |x|^2: the gradient is 2 n x (real) or 2 n x (complex, MLX's convention)
    x = real(rng, 3, 12)
    g = mr.grad(lambda v: (mr.abs(mr.fft.fft(v)) ** 2).sum())(mr.array(x))
    close(g, 24 * x, mr.float32)
    c = cplx(rng, 2, 6)
    g = mr.compile(mr.grad(lambda v: (mr.abs(mr.fft.fft2(v)) ** 2).sum()))(mr.array(c))
    close(g, 24 * c, mr.complex64)


def test_vjps_are_mlxs(rng):
    # MLX's rules: fft -> n * ifft(ct); ifft -> fft(ct) / n; rfft -> n * irfft(ct * [1, .5, ..., .5, 1]);
    # irfft -> rfft(ct) * [1, 2, ..., 2, 1] / n
    n = 8
    ct = cplx(rng, 3, n)
    x = cplx(rng, 3, n)

    def vjp(f, x, ct):  # eager for the first, compiled (one kernel) for the others
        run = lambda x, ct: mr.vjp(f, [x], [ct])[1][0]  # noqa: E731
        return (run if f is mr.fft.fft else mr.compile(run))(mr.array(x), mr.array(ct))
    close(vjp(mr.fft.fft, x, ct), n * np.fft.ifft(ct), mr.complex64)
    close(vjp(mr.fft.ifft, x, ct), np.fft.fft(ct) / n, mr.complex64)
    half = np.array([1, .5, .5, .5, 1])
    close(vjp(mr.fft.rfft, x.real.copy(), ct[:, :5]), n * np.fft.irfft(ct[:, :5] * half, n=n), mr.float32)
    ctr = ct.real.copy()
    close(vjp(mr.fft.irfft, x[:, :5], ctr), np.fft.rfft(ctr) * np.array([1, 2, 2, 2, 1]) / n, mr.complex64)


def test_grad_matches_finite_differences(rng):
    # a non-linear loss through rfft, irfft of an odd length, a padded 2-D transform
    def loss(v):
        y = mr.fft.irfft(mr.fft.rfft(v, n=10) * mr.fft.rfft(mr.sin(v), n=10), n=7)
        return (y ** 2).sum() + (mr.abs(mr.fft.fft2(v, s=(4, 5), axes=(0, 1))) ** 3).sum() / 50

    x = real(rng, 3, 6)
    g = np.asarray(mr.compile(mr.grad(loss))(mr.array(x)))  # compiled: one kernel each
    f = mr.compile(loss)
    h = 1e-2
    for idx in [(0, 0), (1, 3), (2, 5)]:
        e = np.zeros_like(x)
        e[idx] = h
        fd = (float(f(mr.array(x + e))) - float(f(mr.array(x - e)))) / (2 * h)
        assert abs(g[idx] - fd) <= 2e-2 * max(1.0, abs(fd)), (idx, g[idx], fd)


def test_jvp_is_the_transform_of_the_tangent(rng):
    x, t = cplx(rng, 3, 6), cplx(rng, 3, 6)
    for f in [mr.fft.ifftn, lambda v: mr.fft.irfftn(v, axes=(0, 1))]:
        run = mr.compile(lambda x, t: mr.jvp(f, [x], [t])[1][0])  # noqa: B023
        close(run(mr.array(x), mr.array(t)), np.asarray(f(mr.array(t))))
    _, (out,) = mr.jvp(mr.fft.rfft, [mr.array(x.real.copy())], [mr.array(t.real.copy())])  # eager
    close(out, np.fft.rfft(t.real))


@pytest.mark.parametrize("name,axes", [("fftn", (-1,)), ("ifftn", (0,)), ("rfftn", (-2, -1)),
                                       ("irfftn", (-1, -2))])
def test_vmap_matches_numpy(name, axes, rng):
    a = cplx(rng, 3, 4, 6)
    if name == "rfftn":
        a = a.real.copy()
    f = lambda v: getattr(mr.fft, name)(v, axes=axes)  # noqa: E731
    want = getattr(np.fft, name)(a, axes=[ax if ax < 0 else ax + 1 for ax in axes])
    # compiled (one kernel), and eager once
    close((mr.vmap(f) if name == "fftn" else mr.compile(mr.vmap(f)))(mr.array(a)), want)
    # batched along another axis
    close(mr.compile(mr.vmap(f, in_axes=2, out_axes=0))(mr.array(np.moveaxis(a, 0, 2).copy())), want)


def test_compile_matches_eager_and_numpy(rng):
    x = cplx(rng, 2, 12)
    f = mr.compile(lambda v: mr.fft.ifft(mr.fft.fft(v, n=16) * 2, n=12))
    close(f(mr.array(x)), np.fft.ifft(np.fft.fft(x, n=16) * 2, n=12))
    g = mr.compile(lambda v: mr.fft.irfft2(mr.fft.rfft2(v), s=v.shape))
    close(g(mr.array(x.real.copy())), x.real, mr.float32)
    h = mr.compile(mr.grad(lambda v: (mr.fft.rfft(v).real ** 2).sum()))
    cos = np.cos(2 * np.pi * np.outer(np.arange(7), np.arange(12)) / 12)  # Re(rfft(v)) = cos @ v
    close(h(mr.array(x.real.copy())), 2 * (x.real @ cos.T) @ cos)


# ---- cost: no quadratic DFT matrix for a large length -----------------------------------------

def _matmuls(n, rows=2):
    """(lhs shape, rhs shape) of every matmul in the traced fft of a (rows, n) input."""
    text = mr.compile(mr.fft.fft).lower(mr.array(np.zeros((rows, n), np.complex64))).as_text("mirax")
    found = re.findall(r"mirax\.matmul.*?: \(tensor<([0-9x]+)xf32>, tensor<([0-9x]+)xf32>\)", text)
    return [tuple(tuple(int(d) for d in t.split("x")) for t in pair) for pair in found]


def _work(n):
    """Multiply-adds of all the matmuls of fft(n), per row."""
    return sum(math.prod(a) * b[-1] for a, b in _matmuls(n, rows=1))


@pytest.mark.parametrize("n", [4096, 3 * 5 * 7 * 11, 1031])
def test_large_lengths_use_small_dft_matrices(n):
    # composite: four-step with factors <= 64, whose matrices are (2f, 2f); a prime above
    # 128: Bluestein, DFTs of a power of two; never the (2n, 2n) matrix
    shapes = _matmuls(n)
    assert shapes and max(max(b) for _, b in shapes) <= 2 * 64
    if n != 1031:  # Bluestein pays ~4x in length for n ~ 1000: it wins in growth (below)
        assert _work(n) < (2 * n) ** 2 / 8


def test_cost_grows_subquadratically():
    assert _work(4096) < (2 * 4096) ** 2 / 16
    assert _work(16384) < 6 * _work(4096)  # a quadratic cost would grow 16 times
    assert _work(4099) < 6 * _work(1031)   # primes (Bluestein)


def test_large_transform_matches_numpy(rng):
    x = cplx(rng, 1, 4620)  # four-step 66 * 70, each again four-step (6 * 11, 7 * 10)
    close(mr.fft.fft(mr.array(x)), np.fft.fft(x), rtol=2e-4)


def test_offset_does_not_swamp_the_other_frequencies(rng):
    # a large constant part would leak ~eps * n * offset into every frequency: the mean is
    # taken out before the multi-stage transform and put back at frequency 0
    x = (1000 + cplx(rng, 1, 4096)).astype(np.complex64)
    got, want = np.asarray(mr.fft.fft(mr.array(x))), np.fft.fft(x.astype(np.complex128))
    close(mr.array(got[:, :1]), want[:, :1])
    np.testing.assert_allclose(got[:, 1:], want[:, 1:], rtol=0, atol=1e-4 * np.abs(want[:, 1:]).max())


# ---- the GPU -------------------------------------------------------------------------------------

def test_on_the_gpu(rng):
    if not mr.is_available(mr.gpu):
        pytest.fail("no Vulkan device for mr.gpu")
    x = cplx(rng, 2, 24)
    with mr.stream(mr.gpu):
        y = mr.fft.fft(mr.array(x))
        r = mr.fft.irfft(mr.array(x), n=20)
    close(y, np.fft.fft(x), mr.complex64)
    assert r.device == mr.gpu  # the real result stays where it was computed
    close(r, np.fft.irfft(x, n=20), mr.float32)
    close(mr.fft.rfft2(mr.array(x.real.copy()), stream=mr.gpu), np.fft.rfft2(x.real))
    # a traced function runs on one device, and SPIR-V has no complex type: a clear error
    with mr.stream(mr.gpu), pytest.raises(mr.MiraxError, match=r"\[rfft\] complex64 .* on the GPU"):
        mr.grad(lambda v: mr.fft.irfft(mr.fft.rfft(v)).sum())(mr.array(x.real.copy()))
