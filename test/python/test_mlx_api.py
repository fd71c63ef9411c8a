"""MLX API parity (issue 10, first part): `mr.array` is the class, the dtype API and
constants, keyword arguments in `compile`, `grad` and `value_and_grad` (`argnames`)."""
import math

import numpy as np
import pytest

import mirax as mr


def test_array_is_the_class():
    x = mr.array([1, 2])
    assert isinstance(x, mr.array) and isinstance(mr.exp(x), mr.array) and isinstance(x + 1, mr.array)
    assert type(x) is mr.array
    assert mr.array(val=[1.0], dtype=mr.float16).dtype == mr.float16
    with pytest.raises(TypeError):
        mr.array(None)


def test_dtype_categories_and_issubdtype():
    assert mr.issubdtype(mr.float16, mr.floating) and mr.issubdtype(mr.bfloat16, mr.inexact)
    assert mr.issubdtype(mr.uint8, mr.unsignedinteger) and mr.issubdtype(mr.int8, mr.signedinteger)
    assert mr.issubdtype(mr.int32, mr.integer) and mr.issubdtype(mr.int32, mr.number)
    assert not mr.issubdtype(mr.int32, mr.floating) and not mr.issubdtype(mr.bool_, mr.number)
    assert mr.issubdtype(mr.bool_, mr.generic) and mr.issubdtype(mr.complex64, mr.complexfloating)
    assert mr.issubdtype(mr.floating, mr.inexact) and not mr.issubdtype(mr.inexact, mr.floating)
    assert mr.issubdtype(mr.float32, mr.float32) and not mr.issubdtype(mr.float32, mr.float16)
    assert mr.isdtype(mr.float32, "real floating") and mr.isdtype(mr.int8, ("bool", "integral"))


def test_finfo_iinfo():
    f = mr.finfo(mr.float32)
    assert f.eps == np.finfo(np.float32).eps and f.max == np.finfo(np.float32).max and f.min == -f.max
    assert mr.finfo(mr.float16).eps == np.finfo(np.float16).eps
    assert mr.finfo(mr.bfloat16).eps == 2.0 ** -7
    i = mr.iinfo(mr.int16)
    assert (i.min, i.max) == (-32768, 32767) and mr.iinfo(mr.uint32).max == 2**32 - 1
    with pytest.raises(ValueError):
        mr.finfo(mr.int32)
    with pytest.raises(ValueError):
        mr.iinfo(mr.float32)


def test_result_type_can_cast_constants():
    assert mr.result_type(mr.array([1]), 2.0) == mr.float32  # a Python float is weak
    assert mr.result_type(mr.array([1], mr.int8), 3) == mr.int8
    assert mr.result_type(mr.int8, mr.uint8) == mr.int16
    assert mr.can_cast(mr.int8, mr.int32) and not mr.can_cast(mr.int32, mr.int8)
    assert mr.pi == math.pi and mr.e == math.e and mr.inf == math.inf and math.isnan(mr.nan)
    assert mr.newaxis is None and abs(mr.euler_gamma - 0.5772156649) < 1e-10
    assert mr.array([1.0, 2.0])[mr.newaxis].shape == (1, 2)


def test_compile_takes_keyword_arguments():
    calls = []

    def f(x, scale=1.0, bias=None):
        calls.append(1)
        return x * scale + (bias if bias is not None else 0)
    c = mr.compile(f)
    x = mr.array([1.0, 2.0])
    np.testing.assert_array_equal(np.asarray(c(x, scale=2.0)), [2, 4])
    np.testing.assert_array_equal(np.asarray(c(x, scale=3.0)), [3, 6])  # a Python scalar: a new trace
    np.testing.assert_array_equal(np.asarray(c(x, scale=2.0)), [2, 4])  # cached
    b = mr.array([10.0, 20.0])
    np.testing.assert_array_equal(np.asarray(c(x, scale=2.0, bias=b)), [12, 24])
    np.testing.assert_array_equal(np.asarray(c(x, scale=2.0, bias=b * 2)), [22, 44])  # an array: traced
    assert len(calls) == 3 and c.trace_count == 3


def test_grad_and_value_and_grad_keywords():
    x = mr.array([1.0, 2.0])
    w = mr.array([3.0, 4.0])
    # keywords not in argnames are constants
    np.testing.assert_array_equal(np.asarray(mr.grad(lambda x, w=None: (x * w).sum())(x, w=w)), [3, 4])
    loss = lambda x, w=None, b=None: (x * w + b).sum()  # noqa: E731
    v, (gpos, gkw) = mr.value_and_grad(loss, argnames=["w", "b"])(x, w=w, b=mr.array([0.5, 0.5]))
    assert float(v) == 12.0 and gpos is None and set(gkw) == {"w", "b"}
    np.testing.assert_array_equal(np.asarray(gkw["w"]), [1, 2])
    np.testing.assert_array_equal(np.asarray(gkw["b"]), [1, 1])
    gpos, gkw = mr.grad(loss, argnums=0, argnames="w")(x, w=w, b=mr.array([0.0, 0.0]))
    np.testing.assert_array_equal(np.asarray(gpos), [3, 4])
    np.testing.assert_array_equal(np.asarray(gkw["w"]), [1, 2])
    with pytest.raises(ValueError, match="'b'"):
        mr.grad(loss, argnames="b")(x, w=w)
