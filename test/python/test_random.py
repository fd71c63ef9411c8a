"""mirax.random: the Threefry `random_bits` primitive and the MLX-style samplers."""
import numpy as np
import pytest

import mirax as mr
from mirax.array import apply
from mirax.dialect import PRIMITIVES, dtypes as dt
from mirax.dialect.random import random_bits_ref, threefry2x32_np

from primitive_table import random_input

N = 100_000


def npa(x):
    return np.asarray(x)


# ---- the primitive ---------------------------------------------------------------------------

@pytest.mark.parametrize("k,x,want", [
    ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
])
def test_threefry_known_answers(k, x, want):
    # the Threefry-2x32 (20 rounds) test vectors of Random123, also in JAX's random tests
    y = threefry2x32_np(np.uint32(k[0]), np.uint32(k[1]), np.uint32(x[0]), np.uint32(x[1]))
    assert tuple(int(v) for v in y) == want


@pytest.mark.parametrize("key_shape,shape", [((2,), (3, 4)), ((5, 2), (3,)), ((2,), ()), ((3, 2, 2), (2, 0)),
                                             ((2,), (7,)), ((4, 2), (1000,))])
def test_kernel_matches_reference_bit_exactly(key_shape, shape):
    k = np.random.default_rng(1).integers(0, 2 ** 32, size=key_shape, dtype=np.uint64).astype(np.uint32)
    out = apply("random_bits", [mr.array(k, mr.uint32)], shape=shape)
    assert out.shape == key_shape[:-1] + shape and out.dtype is mr.uint32
    np.testing.assert_array_equal(npa(out), random_bits_ref(k, shape))


# the row the lead adds to primitive_table.CASES, checked here with the table's comparison
CASES_ROW = {"random_bits": [([(2,)], {"shape": (3, 4)}, None), ([(5, 2)], {"shape": (3,)}, None),
                             ([(2, 3, 2)], {"shape": ()}, None)]}


@pytest.mark.parametrize("shapes,params,d", CASES_ROW["random_bits"])
def test_table_row(shapes, params, d, rng):
    p = PRIMITIVES["random_bits"]
    for dtype in ([d] if d else p.test.get("dtypes", [dt.float32])):
        xs = [random_input(rng, s, dtype, p.test.get("domain")) for s in shapes]
        out = apply("random_bits", [mr.array(x, dtype) for x in xs], **params)
        got, want = npa(out), np.asarray(p.reference(*xs, **params))
        assert got.shape == want.shape and out.dtype.storage == got.dtype
        np.testing.assert_array_equal(got, want.astype(got.dtype))


def test_shape_errors():
    with pytest.raises(mr.MiraxError, match="random_bits"):
        apply("random_bits", [mr.array([1, 2])], shape=(3,))  # int32 key
    with pytest.raises(mr.MiraxError, match="random_bits"):
        apply("random_bits", [mr.array(np.zeros(3, np.uint32))], shape=(3,))


def test_rules_declared():
    p = PRIMITIVES["random_bits"]
    keys = mr.random.split(mr.random.key(0), 3)
    bits = mr.vmap(lambda k: apply("random_bits", [k], shape=(2,)))(keys)  # the batch rule: one draw per key
    for i in range(3):
        np.testing.assert_array_equal(npa(bits[i]), npa(apply("random_bits", [keys[i]], shape=(2,))))
    assert p.vjp([mr.random.key(0)], None, None, shape=(2,)) == [None]


# ---- keys --------------------------------------------------------------------------------------

def test_key_and_split():
    np.testing.assert_array_equal(npa(mr.random.key(0)), [0, 0])
    np.testing.assert_array_equal(npa(mr.random.key(2 ** 32 + 5)), [1, 5])
    ks = mr.random.split(mr.random.key(0), 3)
    assert ks.shape == (3, 2) and ks.dtype is mr.uint32
    a, b = mr.random.split(mr.random.key(0))
    assert a.shape == (2,)
    x, y = npa(mr.random.uniform(shape=(1000,), key=a)), npa(mr.random.uniform(shape=(1000,), key=b))
    assert not np.array_equal(x, y)
    assert abs(np.corrcoef(x, y)[0, 1]) < 0.1  # independent streams


def test_determinism():
    k = mr.random.key(7)
    a = npa(mr.random.normal((50,), key=k))
    b = npa(mr.random.normal((50,), key=mr.random.key(7)))
    np.testing.assert_array_equal(a, b)
    c = npa(mr.random.normal((50,), key=mr.random.key(8)))
    assert not np.array_equal(a, c)
    bits = npa(mr.random.bits((1000,), key=k))
    assert bits.dtype == np.uint32 and len(np.unique(bits)) > 990
    assert npa(mr.random.bits((4,), width=2, key=k)).dtype == np.uint16
    assert npa(mr.random.bits((4,), width=1, key=k)).dtype == np.uint8


def test_global_seed():
    mr.random.seed(0)
    a = npa(mr.random.uniform(shape=(5,)))
    a2 = npa(mr.random.uniform(shape=(5,)))
    mr.random.seed(0)
    b = npa(mr.random.uniform(shape=(5,)))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, a2)  # the state advances
    assert isinstance(mr.random.state, list) and mr.random.state[0].shape == (2,)


# ---- distributions ---------------------------------------------------------------------------------

def test_uniform():
    u = npa(mr.random.uniform(shape=(N,), key=mr.random.key(1)))
    assert u.dtype == np.float32 and u.min() >= 0 and u.max() < 1
    assert abs(u.mean() - 0.5) < 0.005 and abs(u.var() - 1 / 12) < 0.002
    v = npa(mr.random.uniform(-2, 3, (N,), key=mr.random.key(2)))
    assert v.min() >= -2 and v.max() < 3 and abs(v.mean() - 0.5) < 0.03
    lo = mr.array([0.0, 10.0])
    w = npa(mr.random.uniform(lo, lo + 1, (1000, 2), key=mr.random.key(3)))
    assert (w[:, 0] < 1).all() and (w[:, 1] >= 10).all()
    h = npa(mr.random.uniform(shape=(1000,), dtype=mr.float16, key=mr.random.key(4)))
    assert h.dtype == np.float16 and h.max() < 1


def test_normal():
    z = npa(mr.random.normal((N,), key=mr.random.key(5)))
    assert np.isfinite(z).all()
    assert abs(z.mean()) < 0.02 and abs(z.std() - 1) < 0.02
    y = npa(mr.random.normal((N,), loc=3.0, scale=2.0, key=mr.random.key(5)))
    np.testing.assert_allclose(y, 3 + 2 * z, rtol=1e-5, atol=1e-5)


def test_bernoulli():
    b = npa(mr.random.bernoulli(0.3, (N,), key=mr.random.key(6)))
    assert b.dtype == np.bool_ and abs(b.mean() - 0.3) < 0.01
    p = mr.array([0.1, 0.9])
    assert mr.random.bernoulli(p, key=mr.random.key(6)).shape == (2,)


def test_randint():
    r = npa(mr.random.randint(-3, 5, (N,), key=mr.random.key(9)))
    assert r.dtype == np.int32 and r.min() == -3 and r.max() == 4
    np.testing.assert_allclose(np.bincount(r + 3) / N, 1 / 8, atol=0.01)
    big = npa(mr.random.randint(-2 ** 31, 2 ** 31 - 1, (1000,), key=mr.random.key(9)))
    assert big.min() < -2 ** 29 and big.max() > 2 ** 29


def test_categorical():
    p = np.array([0.1, 0.2, 0.7])
    logits = mr.array(np.log(p).astype(np.float32))
    c = npa(mr.random.categorical(logits, num_samples=50_000, key=mr.random.key(10)))
    assert c.shape == (50_000,) and c.max() <= 2
    np.testing.assert_allclose(np.bincount(c, minlength=3) / c.size, p, atol=0.01)
    lg = mr.array(np.log(np.array([[0.5, 0.5, 0.0 + 1e-9], [1e-9, 1e-9, 1.0]])).astype(np.float32))
    s = npa(mr.random.categorical(lg, shape=(100, 2), key=mr.random.key(11)))
    assert s.shape == (100, 2) and (s[:, 0] < 2).all() and (s[:, 1] == 2).all()
    t = npa(mr.random.categorical(mr.transpose(lg), axis=0, key=mr.random.key(12)))
    assert t.shape == (2,) and t[1] == 2


def test_truncated_normal():
    t = npa(mr.random.truncated_normal(-1.0, 0.5, (N,), key=mr.random.key(13)))
    assert t.min() >= -1 and t.max() <= 0.5
    from math import erf, exp, pi, sqrt
    pdf = lambda x: exp(-x * x / 2) / sqrt(2 * pi)  # noqa: E731
    cdf = lambda x: 0.5 * (1 + erf(x / sqrt(2)))  # noqa: E731
    want = (pdf(-1) - pdf(0.5)) / (cdf(0.5) - cdf(-1))
    assert abs(t.mean() - want) < 0.01


def test_a_sampler_is_one_kernel():
    """uniform, normal and bernoulli compile their arithmetic as one kernel (random bits
    to floats, scale, clamp, compare), shared by every bound of the same shape and dtype
    (Linear's initializations); their values are those of the ops one by one."""
    from mirax.runtime import cpu
    k = mr.random.key(3)

    def compiles(fn):
        before = cpu.stats.compiles
        out = npa(fn())
        return cpu.stats.compiles - before, out
    n, u = compiles(lambda: mr.random.uniform(-0.25, 0.25, (37, 5), key=k))
    assert n == 1 and u.min() >= -0.25 and u.max() < 0.25
    assert compiles(lambda: mr.random.uniform(-0.5, 0.5, (37, 5), key=k))[0] == 0
    assert compiles(lambda: mr.random.normal((37, 5), scale=2.0, key=k))[0] == 1
    assert compiles(lambda: mr.random.bernoulli(0.25, (37, 5), key=k))[0] == 1
    bits = npa(mr.random.bits((37, 5), key=k)).astype(np.float64)
    want = -0.25 + 0.5 * ((bits - bits % 256) * 2.0 ** -32)  # (float32 ops: within an ulp)
    np.testing.assert_allclose(u, want, rtol=0, atol=1e-7)


def test_gumbel_and_permutation():
    g = npa(mr.random.gumbel((N,), key=mr.random.key(14)))
    assert abs(g.mean() - 0.5772) < 0.02
    p = npa(mr.random.permutation(20, key=mr.random.key(15)))
    assert sorted(p.tolist()) == list(range(20)) and p.tolist() != list(range(20))
    x = np.arange(12.0).reshape(3, 4)
    q = npa(mr.random.permutation(mr.array(x), axis=1, key=mr.random.key(15)))
    assert sorted(q[0].tolist()) == [0, 1, 2, 3] and (q[1] == q[0] + 4).all()
    # n log n: the ranks of every pair of 2^17 words would be 2^34 comparisons and bytes
    big = npa(mr.random.permutation(1 << 17, key=mr.random.key(16)))
    assert big.dtype == np.int32 and np.array_equal(np.sort(big), np.arange(1 << 17))


# ---- transforms ----------------------------------------------------------------------------------------

def test_vmap_over_keys():
    ks = mr.random.split(mr.random.key(42), 4)
    got = npa(mr.vmap(lambda k: mr.random.uniform(shape=(3,), key=k))(ks))
    want = np.stack([npa(mr.random.uniform(shape=(3,), key=ks[i])) for i in range(4)])
    np.testing.assert_array_equal(got, want)
    got = npa(mr.vmap(lambda k: mr.random.uniform(shape=(3,), key=k), in_axes=1)(mr.transpose(ks)))
    np.testing.assert_array_equal(got, want)  # the key's batch dim moved to the front


def test_grad_through_noise():
    k = mr.random.key(3)
    g = npa(mr.grad(lambda x: mr.sum(x * mr.random.normal((3,), key=k)))(mr.ones((3,))))
    np.testing.assert_array_equal(g, npa(mr.random.normal((3,), key=k)))
