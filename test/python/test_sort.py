"""Sorting (python/mirax/ops/sorting.py): argsort, sort, partition, argpartition, topk,
median against numpy (stable, NaN last), on both devices, compiled, under grad and vmap."""
import numpy as np
import pytest

import mirax as mr
from arrays import A
from mirax.array import apply

CASES = [((7,), -1), ((3, 5), 0), ((3, 5), 1), ((2, 3, 4), 1), ((2, 3, 4), -3), ((0, 3), 1), ((4, 1), 1), ((5,), None)]


@pytest.mark.parametrize("dtype", ["float32", "int32", "uint8", "bool", "float16"])
@pytest.mark.parametrize("shape,axis", CASES)
def test_argsort_and_sort_match_numpy(shape, axis, dtype, rng):
    x = rng.integers(0, 4, shape).astype(dtype)  # many ties: stability matters
    if dtype.startswith("float") and x.size:
        x.flat[0] = np.nan
        x.flat[-1] = -np.inf
    want_i = np.argsort(x, axis=axis, kind="stable")
    np.testing.assert_array_equal(np.asarray(mr.argsort(A(x), axis=axis)), want_i)
    got = np.asarray(mr.sort(A(x), axis=axis))
    np.testing.assert_array_equal(got, np.sort(x, axis=axis))
    assert mr.argsort(A(x), axis=axis).dtype == mr.uint32  # as MLX


def test_partition_topk_median(rng):
    x = rng.standard_normal((4, 9)).astype(np.float32)
    for kth in (0, 4, -1):
        p = np.asarray(mr.partition(A(x), kth, axis=1))
        k = kth % 9
        assert np.all(p[:, :k] <= p[:, k:k + 1]) and np.all(p[:, k + 1:] >= p[:, k:k + 1])
        np.testing.assert_array_equal(np.sort(x, 1)[:, k], p[:, k])
        ip = np.asarray(mr.argpartition(A(x), kth, axis=1))
        np.testing.assert_array_equal(np.take_along_axis(x, ip, 1)[:, k], np.sort(x, 1)[:, k])
    t = np.asarray(mr.topk(A(x), 3, axis=1))
    np.testing.assert_array_equal(np.sort(t, 1), np.sort(x, 1)[:, -3:])
    np.testing.assert_allclose(float(mr.median(A(x))), np.median(x), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(mr.median(A(x), axis=1)), np.median(x, axis=1), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(mr.median(A(x[:, :8]), axis=1, keepdims=True)),
                               np.median(x[:, :8], axis=1, keepdims=True), rtol=1e-6)
    assert float(mr.median(A([1, 2, 3, 4]))) == 2.5
    with pytest.raises(mr.MiraxError, match="topk"):
        mr.topk(A(x), 10, axis=1)
    with pytest.raises(mr.MiraxError, match="axis"):
        mr.sort(A(x), axis=2)


def test_sort_under_transforms_and_devices(rng):
    x = rng.standard_normal((2, 6))
    g = mr.grad(lambda v: (mr.sort(v, axis=1) * mr.arange(6.0)).sum())(A(x))
    np.testing.assert_array_equal(np.asarray(g), np.argsort(np.argsort(x, 1), 1))  # each element's rank
    np.testing.assert_array_equal(np.asarray(mr.vmap(mr.sort)(A(x))), np.sort(x, 1))
    np.testing.assert_array_equal(np.asarray(mr.compile(lambda v: mr.argsort(v, 0))(A(x))),
                                  np.argsort(x, 0, kind="stable"))
    with mr.stream(mr.gpu):
        f = x.astype(np.float32)
        np.testing.assert_array_equal(np.asarray(mr.sort(A(f))), np.sort(f))
    np.testing.assert_array_equal(np.asarray(A(x).sort()), np.sort(x))


def test_long_rows_and_many_rows_sort_on_the_threads(rng):
    """Rows the pairwise comparison refused (over 16384 elements, over 2^31 pairs) sort
    now, along the last axis and a middle one (rows strided in memory), on the threads
    (arrays of 65536 elements or more: dialect/sort.py); a row that is mostly ties keeps
    its order (stable)."""
    x = rng.standard_normal(20000).astype(np.float32)
    x[::7] = 0.5  # ties
    x[3] = np.nan
    np.testing.assert_array_equal(np.asarray(mr.argsort(A(x))), np.argsort(x, kind="stable"))
    y = rng.integers(0, 50, (3000, 700)).astype(np.int32)
    np.testing.assert_array_equal(np.asarray(mr.compile(lambda v: mr.argsort(v, 1))(A(y))),
                                  np.argsort(y, 1, kind="stable"))
    z = rng.standard_normal((6, 129, 100)).astype(np.float64)
    np.testing.assert_array_equal(np.asarray(mr.sort(A(z), axis=1)), np.sort(z, axis=1))
    np.testing.assert_array_equal(np.asarray(mr.argsort(A(z), axis=1)), np.argsort(z, axis=1, kind="stable"))


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "uint8", "bool", "float64"])
def test_one_long_row_sorts_in_two_chunks_with_the_padding_last(dtype, rng):
    """One row of 65536 elements or more: padded with keys that sort last (NaN, the
    largest integer, true) to two chunks sorted on two threads, then merged; elements equal
    to the padding (NaN, the dtype's maximum) stay before it, in their order."""
    n = 65537 + 3  # not a power of two: padded to 2 x 65536
    if dtype == "bool":
        x = rng.integers(0, 2, n).astype(bool)
    elif dtype.startswith("float"):
        x = rng.integers(-50, 50, n).astype(dtype)
        x[rng.integers(0, n, 300)] = np.nan
    else:
        info = np.iinfo(dtype)
        x = rng.integers(max(info.min, -50), 50, n).astype(dtype)
        x[rng.integers(0, n, 300)] = info.max
    np.testing.assert_array_equal(np.asarray(mr.argsort(A(x))), np.argsort(x, kind="stable"))


@pytest.mark.parametrize("segments", [2, 8])
def test_one_long_row_merges_its_halves_in_parts_on_the_threads(segments, monkeypatch, rng):
    """The last merge of one long row of 64-bit argsort runs as `segments` equal parts of
    the output, each from its halves' split points (co-ranks, by bisection): halves wholly
    before one another (a part's run from one half empty), all keys equal (ties: the
    first half's first), NaNs and repeated values; stable, as numpy's."""
    from mirax.dialect import sort
    monkeypatch.setattr(sort, "_last_merge_segments", lambda P: segments)
    n = 2 * 65536 + 5 + segments  # (a shape of its own: kernels cached by text)
    rows = [np.arange(n, dtype=np.float64), -np.arange(n, dtype=np.float64), np.full(n, 3.0),
            np.concatenate([np.arange(n // 2, n), np.arange(n // 2)]).astype(np.float64),
            rng.integers(-40, 40, n).astype(np.float64)]
    rows[4][rng.integers(0, n, 500)] = np.nan
    f = mr.compile(lambda v: mr.argsort(v))
    for x in rows + [r.astype(np.int64) for r in rows[:4]]:
        np.testing.assert_array_equal(np.asarray(f(A(x))), np.argsort(x, kind="stable"))


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_signed_zeros_tie_and_every_nan_sorts_last(dtype):
    """The CPU merge compares float keys as integers in the same order: -0.0 and 0.0 tie
    (their order kept), NaNs of either sign come after +inf in their order. `sort` orders
    the values totally, as jax's: -0.0 before 0.0, every NaN last (as the quiet NaN)."""
    x = np.array([0.0, -0.0, np.inf, -np.nan, 1.0, -0.0, np.nan, -np.inf, 0.0, -1.0], dtype)
    x[3] = -np.abs(x[3])  # a NaN with the sign bit set
    np.testing.assert_array_equal(np.asarray(mr.argsort(A(x))), np.argsort(x, kind="stable"))
    got = np.asarray(mr.sort(A(x)))
    np.testing.assert_array_equal(got, np.sort(x))
    np.testing.assert_array_equal(np.signbit(got), [True, True, True, True, False, False, False, False, False, False])


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_the_gpu_sorts_long_rows_with_a_bitonic_network(dtype, monkeypatch, rng):
    """On the GPU, rows of more than GPU_MAX_PAIRS pairs in all run a bitonic network
    (padded to a power of two with keys that sort last; pairs compared by key, then
    index: the stable order), along the last axis and an inner one."""
    from mirax.dialect import sort as sort_op
    monkeypatch.setattr(sort_op, "GPU_MAX_PAIRS", 1000)
    x = rng.integers(-5, 5, (3, 37)).astype(dtype)  # ties
    if dtype == "float32":
        x[0, 3] = x[2, 0] = np.nan
    with mr.stream(mr.gpu):
        np.testing.assert_array_equal(np.asarray(mr.argsort(A(x), axis=1)), np.argsort(x, 1, kind="stable"))
        np.testing.assert_array_equal(np.asarray(mr.sort(A(x.T), axis=0)), np.sort(x.T, axis=0))


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("inclusive", [True, False])
def test_scans_match_numpy(reverse, inclusive, rng):
    """cumprod, cummax, cummin, logcumsumexp (python/mirax/ops/composite.py)."""
    x = rng.uniform(-2, 2, (3, 6)).astype(np.float32)

    def ref(op, v, ident, axis):
        w = np.flip(v, axis) if reverse else v
        acc = op.accumulate(w, axis=axis)
        if not inclusive:
            pad = np.full_like(np.take(acc, [0], axis=axis), ident)
            acc = np.concatenate([pad, np.delete(acc, -1, axis=axis)], axis=axis)
        return np.flip(acc, axis) if reverse else acc
    kw = dict(reverse=reverse, inclusive=inclusive)
    for axis in (0, 1):
        np.testing.assert_allclose(np.asarray(mr.cumprod(A(x), axis, **kw)), ref(np.multiply, x, 1, axis),
                                   rtol=1e-5)
        np.testing.assert_array_equal(np.asarray(mr.cummax(A(x), axis, **kw)), ref(np.maximum, x, -np.inf, axis))
        np.testing.assert_array_equal(np.asarray(mr.cummin(A(x), axis, **kw)), ref(np.minimum, x, np.inf, axis))
        np.testing.assert_allclose(np.asarray(mr.logcumsumexp(A(x), axis, **kw)),
                                   ref(np.logaddexp, x, -np.inf, axis), rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(mr.cummax(A([3, 1, 4], mr.int32))), [3, 3, 4])
    # (a log-depth scan: its products in tree order, within an ulp or two of numpy's sequential ones)
    np.testing.assert_allclose(np.asarray(A(x).cumprod(1)), np.cumprod(x, 1).astype(np.float32), rtol=1e-6)


def test_long_scans_run_in_log_depth(rng):
    """cumprod, cummax, cummin and logcumsumexp over rows the pairwise form refused (over
    2^31 pairs): log2(n) combining steps (python/mirax/ops/composite.py `_scan`)."""
    x = rng.uniform(-1, 1, (3, 40000)).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(mr.cummax(A(x), 1)), np.maximum.accumulate(x, 1))
    np.testing.assert_array_equal(np.asarray(mr.cummin(A(x), 1, reverse=True)),
                                  np.flip(np.minimum.accumulate(np.flip(x, 1), 1), 1))
    np.testing.assert_allclose(np.asarray(mr.logcumsumexp(A(x), 1)), np.logaddexp.accumulate(x.astype(np.float64), 1),
                               rtol=2e-5)
    y = (1 + x / 40000).astype(np.float32)
    ref = np.cumprod(y.astype(np.float64), 1)
    err = np.abs(np.asarray(mr.compile(lambda v: mr.cumprod(v, 1))(A(y))) - ref) / ref
    assert err.max() <= np.max(np.abs(np.cumprod(y, 1) - ref) / ref)  # numpy's float32 product: 4.4e-4


def test_complex_logcumsumexp_matches_log_of_the_running_sum():
    z = np.array([[1 + 1j, 2 - 0.5j, -3 + 2j, 0.5j], [10 + 0j, -np.inf, 10.5 + 1j, 0]], np.complex64)
    want = np.log(np.cumsum(np.exp(z.astype(np.complex128)), axis=1))
    np.testing.assert_allclose(np.asarray(mr.logcumsumexp(A(z), axis=1)), want, rtol=1e-5)


def test_scan_gradients():
    g = mr.grad(lambda v: mr.cumprod(v).sum())(A([1.0, 2.0, 0.0, 3.0]))
    np.testing.assert_array_equal(np.asarray(g), [3, 1, 8, 0])  # a zero handled exactly
    x = np.array([0.5, -1.0, 2.0, 0.3])
    g = np.asarray(mr.grad(lambda v: mr.logcumsumexp(v).sum())(A(x)))
    eps = 1e-6
    f = lambda v: np.logaddexp.accumulate(v).sum()  # noqa: E731
    fd = [(f(x + eps * np.eye(4)[k]) - f(x - eps * np.eye(4)[k])) / (2 * eps) for k in range(4)]
    np.testing.assert_allclose(g, fd, rtol=1e-6)


def test_complex_sorts_by_real_then_imaginary_part():
    nan = np.nan
    # numpy's order: R + Rj < R + nanj < nan + Rj < nan + nanj
    z = np.array([1 + 2j, complex(nan, 1), 1 - 1j, complex(2, nan), 0 + 5j, complex(nan, nan), 1 + 2j,
                  complex(nan, -1), complex(1, nan), -1 + 0j], np.complex64)
    np.testing.assert_array_equal(np.array(mr.sort(A(z))), np.sort(z))
    np.testing.assert_array_equal(np.array(mr.argsort(A(z))), np.argsort(z, kind="stable"))


# ---- topk: mirax.argtopk (the k largest by insertion, or argsort's last k) ---------------

def _top(x, k, axis):
    n = x.shape[axis]
    return np.take(np.argsort(x, axis=axis, kind="stable"), np.arange(n - k, n), axis=axis)


@pytest.mark.parametrize("shape,axis,k,insertion", [
    ((6, 1000), 1, 8, True), ((1000, 5), 0, 3, True), ((3, 200, 4), 1, 1, True), ((2, 40000), 1, 20, True),
    ((7, 64), 1, 64, False), ((5, 300), 1, 150, False)])
def test_argtopk_is_argsorts_last_k(shape, axis, k, insertion, rng):
    """Exactly the stable argsort's last k (ties: the later indices), by insertion or,
    where k is large for the row (select_by_insertion), by argsort (vectors for 32-bit
    values, the merge sort for float64)."""
    from mirax.dialect.sort import select_by_insertion
    n = shape[axis]
    x = rng.standard_normal(shape).astype(np.float32)
    x.flat[::7] = 0.0  # ties, and -0.0 equal to 0.0
    x.flat[::11] = -0.0
    x.flat[::13] = np.nan  # NaN sorts last: the largest
    xi = rng.integers(-4, 5, shape).astype(np.int32)  # many ties
    xu = rng.integers(0, 3, shape).astype(np.uint8)
    for v in (x, x.astype(np.float64), x.astype(np.float16), xi, xu, xu > 0):
        got = np.asarray(apply("argtopk", [A(v)], axis=axis, k=k))
        np.testing.assert_array_equal(got, _top(v, k, axis), err_msg=f"{v.dtype}")
    assert select_by_insertion(n, k, 32) == insertion  # (both paths are tested)
    assert select_by_insertion(n, k, 64) == insertion


def test_topk_values_gradient_and_vmap(rng):
    x = rng.standard_normal((4, 50))
    t = mr.topk(A(x), 5, axis=1)
    np.testing.assert_array_equal(np.asarray(t), np.sort(x, 1)[:, -5:])
    # the gradient flows through the gather to the k largest
    g = np.asarray(mr.grad(lambda v: (mr.topk(v, 5, axis=1) * mr.arange(5.0)).sum())(A(x)))
    want = np.zeros_like(x)
    np.put_along_axis(want, _top(x, 5, 1), np.broadcast_to(np.arange(5.0), (4, 5)), 1)
    np.testing.assert_array_equal(g, want)
    v = np.asarray(mr.vmap(lambda r: mr.topk(r, 3, axis=0))(A(x)))
    np.testing.assert_array_equal(v, np.sort(x, 1)[:, -3:])
    c = (x + 1j * rng.standard_normal((4, 50))).astype(np.complex64)  # complex: the full sort's last k
    np.testing.assert_array_equal(np.asarray(mr.topk(A(c), 4, axis=1)), np.sort(c, 1)[:, -4:])


def test_argtopk_on_rows_of_the_threads(rng):
    """Enough rows for an scf.forall over the threads (SORT_PARALLEL_MIN elements)."""
    x = rng.standard_normal((64, 2048)).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(apply("argtopk", [A(x)], axis=1, k=5)), _top(x, 5, 1))
    np.testing.assert_array_equal(np.asarray(mr.compile(lambda v: mr.topk(v, 5, axis=0))(A(x))),
                                  np.sort(x, 0)[-5:])


# ---- sort: mirax.sort, the values by vectors (bitonic blocks, vector merges) --------------

SORT_DTYPES = ["float32", "float64", "float16", "int8", "int16", "int32", "int64",
               "uint8", "uint16", "uint32", "uint64", "bool"]


def _values(rng, dtype, shape):
    """Random values of `dtype` over its whole range (extremes and, for floats, NaN,
    +-inf, +-0 included): the keys' sign bits and flips matter at the ends."""
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.startswith("float"):
        x = (rng.standard_normal(shape) * 1e3).astype(dtype)
        specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, np.finfo(dtype).max, np.finfo(dtype).min], dtype)
    else:
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
        specials = np.array([info.min, info.max, 0, 1], dtype)
    flat = x.reshape(-1)
    flat[rng.integers(0, flat.size, min(flat.size, 3 * specials.size))] = np.resize(specials, min(flat.size, 3 * specials.size))
    return x


@pytest.mark.parametrize("dtype", SORT_DTYPES)
def test_sort_every_dtype_through_blocks_and_merges(dtype, rng):
    """Blocks of 64 bytes (raised to two vectors, the smallest allowed) so rows of 1 to
    300 elements go through the in-register network, the steps across vectors, vector
    merges of whole blocks and of a shorter last block (merged, or copied when it has no
    partner); the padding (the largest key) never shows. argsort of values of 32 bits or
    fewer sorts (key, index) int64 pairs by the same code: stable, as numpy's."""
    from mirax.lowering import tuning
    with tuning.override(sort={"block_bytes": 64}):
        for n in (1, 3, 16, 17, 100, 300):
            x = _values(rng, dtype, (3, n))
            got = np.asarray(apply("sort", [A(x)], axis=1))
            np.testing.assert_array_equal(got, np.sort(x, axis=1))
            # argsort: (key, index) pairs as int64 by the same code for 32 bits or fewer
            idx = np.asarray(mr.argsort(A(x), axis=1))
            np.testing.assert_array_equal(idx, np.argsort(x, axis=1, kind="stable"))


@pytest.mark.parametrize("dtype", ["float32", "int64", "uint16"])
def test_sort_one_long_row_in_two_halves(dtype, rng):
    """One row of 65536+ elements: two padded halves sorted on two threads, then one
    vector merge of the halves (and, along axis 0 of a 2-d array, rows on the threads)."""
    x = _values(rng, dtype, (70001,))
    np.testing.assert_array_equal(np.asarray(apply("sort", [A(x)], axis=0)), np.sort(x))
    y = _values(rng, dtype, (700, 97))
    np.testing.assert_array_equal(np.asarray(mr.compile(lambda v: mr.sort(v, 0))(A(y))), np.sort(y, 0))


@pytest.mark.parametrize("dtype", SORT_DTYPES)
def test_radix_sort_every_dtype(dtype, rng):
    """The LSD radix sort (dialect/sort.py `_radix_keys_row`) on every row length: one
    (no key moves), two, odd lengths (the middle key, placed after both halves' passes),
    rows on the threads, one long row (two halves on two threads, then the vector merge;
    64-bit argsort: chunks whose keys and indices fit L2, then merge passes);
    sort's keys of 8 to 64 bits (one to eight passes, the top digit's sign flipped),
    argsort's (key, index) pairs sorted by their key half alone, and 64-bit values'
    argsort with their indices moving beside the keys: stable, as numpy's."""
    from mirax.lowering import tuning
    cases = [((3, 1), 1), ((3, 17), 1), ((301, 4), 0)]
    if dtype in ("float32", "float64", "uint16", "int8", "uint64"):  # (the halves' path: by key width)
        cases.append(((70001,), 0))
    # (one long row of 64-bit keys in chunks of 4096, merged in five passes)
    with tuning.override(sort={"radix_bytes": 1, "radix_wide": 1, "radix_payload": 1, "long_chunk_bytes": 12 * 4096}):
        for shape, axis in cases:
            x = _values(rng, dtype, shape)
            np.testing.assert_array_equal(np.asarray(apply("sort", [A(x)], axis=axis)), np.sort(x, axis=axis))
            idx = np.asarray(mr.argsort(A(x), axis=axis))
            np.testing.assert_array_equal(idx, np.argsort(x, axis=axis, kind="stable"))


def test_radix_sort_keeps_ties_in_order_and_chooses_by_row_length(rng):
    """Many equal keys (four values, so every pass has long runs of one digit: the front
    and back halves meet inside a value's places) keep their order in argsort; and the
    lowering takes the radix sort from tuning.py's row lengths on, the bitonic blocks
    below them."""
    from mirax.dialect.core import PRIMITIVES, Aval
    from mirax.dialect import dtypes as dt
    from mirax.lowering import tuning
    from mirax.lowering.emit import kernel_function
    x = rng.integers(-2, 2, (5, 4099)).astype(np.float32)
    x[1] = 7.0  # every key equal: each pass's front and back meet in one value's places
    x[2] = np.arange(4099)  # sorted, and reversed
    x[3] = -np.arange(4099)
    with tuning.override(sort={"radix_wide": 1024, "radix_bytes": 4 * 1024, "radix_payload": 1024}):
        for v in (x, x.astype(np.float64), x.astype(np.int64)):  # (64-bit: indices beside the keys)
            np.testing.assert_array_equal(np.asarray(mr.argsort(A(v), axis=1)), np.argsort(v, axis=1, kind="stable"))
        np.testing.assert_array_equal(np.asarray(mr.sort(A(x), axis=1)), np.sort(x, axis=1))

    def text(n, op="sort", dtype=dt.float32, **sort):
        with tuning.override(sort=sort):
            out = Aval((2, n), dtype if op == "sort" else dt.uint32)
            return kernel_function("k", PRIMITIVES[op], {"axis": 1}, [Aval((2, n), dtype)], out)
    assert "arith.shrui" in text(4096, radix_bytes=4 * 4096) and "vector.shuffle" not in text(4096, radix_bytes=4 * 4096)
    assert "arith.shrui" not in text(4095, radix_bytes=4 * 4096) and "vector.shuffle" in text(4095, radix_bytes=4 * 4096)
    # 64-bit argsort: the radix sort from radix_payload keys, else the merge sort (no digits)
    assert "arith.shrui" in text(256, "argsort", dt.float64, radix_payload=256)
    assert "arith.shrui" not in text(255, "argsort", dt.float64, radix_payload=256)


def test_sort_keeps_signed_zeros_infinities_and_puts_nan_last(rng):
    """Every value comes back bit for bit (a one-to-one key), but NaNs (any sign or
    payload: the quiet NaN, last)."""
    x = np.array([3.0, -0.0, np.nan, 0.0, -np.inf, -np.nan, 1e-45, -1e-45, np.inf, -3.0], np.float32)
    got = np.asarray(mr.sort(A(x)))
    want = np.array([-np.inf, -3.0, -1e-45, -0.0, 0.0, 1e-45, 3.0, np.inf, np.nan, np.nan], np.float32)
    np.testing.assert_array_equal(got.view(np.uint32)[:8], want.view(np.uint32)[:8])
    assert np.isnan(got[8:]).all()


def test_sort_lowers_to_vector_min_max_on_the_cpu():
    """Below the radix sort's rows the CPU lowering is vector code (min/max of vectors,
    shuffles), not a scalar merge of keys and indices (rows longer than a block: vector
    merges, which read the next run's head); complex values keep the merge sort (no
    integer keys)."""
    from mirax.dialect.core import PRIMITIVES, Aval
    from mirax.dialect import dtypes as dt
    from mirax.lowering import tuning
    from mirax.lowering.emit import kernel_function
    with tuning.override(sort={"radix_bytes": 1 << 40}):
        text = kernel_function("k", PRIMITIVES["sort"], {"axis": 1}, [Aval((8, 100000), dt.float32)],
                               Aval((8, 100000), dt.float32))
    assert "arith.minsi" in text and "vector.shuffle" in text and "tensor.extract %" in text
    assert "ui32" not in text and "index_cast" not in text  # no indices
    assert "arith.shrui" not in text  # (no digits)
    ctext = kernel_function("k", PRIMITIVES["sort"], {"axis": 0}, [Aval((9,), dt.complex64)], Aval((9,), dt.complex64))
    assert "vector.shuffle" not in ctext


def test_sort_of_complex_and_its_rules(rng):
    z = (rng.integers(-2, 3, (3, 11)) + 1j * rng.integers(-2, 3, (3, 11))).astype(np.complex64)
    np.testing.assert_array_equal(np.asarray(mr.sort(A(z), axis=1)), np.sort(z, axis=1))
    x = rng.standard_normal((4, 40)).astype(np.float32)
    t = rng.standard_normal((4, 40)).astype(np.float32)
    order = np.argsort(x, 1)
    _, (jt,) = mr.jvp(lambda v: mr.sort(v, axis=1), [A(x)], [A(t)])
    np.testing.assert_array_equal(np.asarray(jt), np.take_along_axis(t, order, 1))
    g = mr.grad(lambda v: (mr.sort(v, axis=1) * A(t)).sum())(A(x))
    want = np.zeros_like(x)
    np.put_along_axis(want, order, t, 1)
    np.testing.assert_array_equal(np.asarray(g), want)
    np.testing.assert_array_equal(np.asarray(mr.vmap(lambda v: mr.sort(v, 0), in_axes=1)(A(x))), np.sort(x, 0).T)
    with pytest.raises(mr.MiraxError, match="mirax.sort: axis 2 is out of bounds"):
        apply("sort", [A(x)], axis=2)
