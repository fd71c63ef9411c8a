"""Every primitive against its numpy reference, run through its real lowering and JIT."""
import numpy as np
import pytest

import mirax as mr
from mirax.array import apply
from mirax.dialect import IRDL_PATH, PRIMITIVES, dtypes as dt, irdl_text

from primitive_table import CASES, TYPED, make_inputs, rows, tolerance

ROWS = rows()


@pytest.mark.parametrize("name,shapes,params,dtype", ROWS,
                         ids=[f"{r[0]}-{r[3].name}-{'x'.join(map(str, r[1][0])) or 'scalar'}-{i}"
                              for i, r in enumerate(ROWS)])
def test_primitive_matches_numpy(name, shapes, params, dtype, rng):
    p = PRIMITIVES[name]
    xs, ins = make_inputs(name, shapes, dtype, rng)
    out = apply(name, ins, **params)
    got = np.asarray(out)
    with np.errstate(all="ignore"):
        want = np.asarray(p.reference(*xs, **params))
    assert got.shape == want.shape, (got.shape, want.shape)
    assert out.dtype.storage == got.dtype
    rtol, atol = tolerance(out.dtype)
    if out.dtype.kind in "fc":
        np.testing.assert_allclose(got, want.astype(got.dtype), rtol=rtol, atol=atol, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want.astype(got.dtype))


def test_irdl_file_is_generated_from_the_declarations():
    assert IRDL_PATH.read_text() == irdl_text(), "run `python -m mirax.dialect > dialect/mirax.irdl.mlir`"


def _irdl_ops():
    import re
    return re.findall(r"irdl.operation @(\w+)", IRDL_PATH.read_text())


@pytest.mark.parametrize("name", _irdl_ops())
def test_every_op_has_its_rules_and_a_test_row(name):
    p = PRIMITIVES.get(name)
    assert p is not None, f"mirax.{name} is in the IRDL file but not declared"
    assert callable(p.shape), f"mirax.{name} has no shape rule"
    assert callable(p.lower), f"mirax.{name} has no lowering"
    assert callable(p.reference), f"mirax.{name} has no numpy reference"
    assert callable(p.jvp), f"mirax.{name} has no jvp rule"
    assert callable(p.vjp), f"mirax.{name} has no vjp rule"
    assert callable(p.batch), f"mirax.{name} has no batching rule"
    tested = name in TYPED or name in CASES or any(r[0] == name for r in ROWS)
    assert tested, f"mirax.{name} has no row in test/python/primitive_table.py"


def test_constant_and_arange():
    np.testing.assert_array_equal(np.asarray(mr.arange(5)), np.arange(5))
    np.testing.assert_allclose(np.asarray(mr.arange(1, 2, 0.25)), np.arange(1, 2, 0.25))
    np.testing.assert_allclose(np.asarray(mr.arange(0, 1, 0.1, dtype=mr.float64)), np.arange(0, 1, 0.1))
    assert mr.arange(0).shape == (0,)
    np.testing.assert_allclose(np.asarray(mr.linspace(0, 1, 5)), np.linspace(0, 1, 5), rtol=1e-6)
    from mirax.ops.creation import constant
    for d, v in [(mr.float32, np.arange(6.0).reshape(2, 3)), (mr.int32, np.array([1, -2, 3])),
                 (mr.bool_, np.array([True, False])), (mr.uint8, np.array([0, 255])),
                 (mr.float32, np.array(2.5)), (mr.complex64, np.array([1 + 2j, 3j]))]:
        c = constant(v.astype(d.storage), d)
        # force the constant through a kernel: add zero
        np.testing.assert_array_equal(np.asarray(c + mr.zeros(v.shape, d) if d.kind != "b" else c | False), v)
