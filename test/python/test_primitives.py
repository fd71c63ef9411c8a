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


def _rule_row(name):
    """A representative row of `name`: non-empty operands, float64 where the op takes it."""
    cand = [r for r in ROWS if r[0] == name and all(np.prod(sh) > 0 for sh in r[1])]
    if not cand:
        return None
    for d in (dt.float64, dt.float32):
        for r in cand:
            if r[3] is d:
                return r
    return cand[0]


def _as64(name, shapes, params, dtype):
    """The row in float64 when the primitive accepts it (finite differences need it)."""
    if dtype.kind != "f":
        return dtype
    p = PRIMITIVES[name]
    try:
        p.check([mr.array(np.zeros(sh), dt.float64 if dtype.kind == "f" else dtype).aval
                 if i not in _int_operands(name) else mr.array(np.zeros(sh, np.int32)).aval
                 for i, sh in enumerate(shapes)], params)
        return dt.float64
    except Exception:  # noqa: BLE001 - the op has no float64 form: keep the row's dtype
        return dtype


def _int_operands(name):
    from primitive_table import INDEX_OPERANDS
    return {INDEX_OPERANDS[name]} if name in INDEX_OPERANDS else ({0} if name == "random_bits" else set())


RULE_OPS = [n for n in _irdl_ops() if _rule_row(n) is not None]
# ops whose jvp/vjp rules raise a clear error instead (MLX does not differentiate them
# either; test_linalg.py checks the error)
NO_DERIVATIVES = {"eig"}


@pytest.mark.parametrize("name", RULE_OPS)
def test_every_rule_does_something(name, rng):
    """Each primitive's rules checked numerically on a representative row: batching
    against a loop, jvp against central finite differences of the numpy reference in
    float64 (zero where the op is piecewise constant), vjp against the jvp
    (<ct, J t> = <J^T ct, t>)."""
    _, shapes, params, dtype = _rule_row(name)
    dtype = _as64(name, shapes, params, dtype)
    p = PRIMITIVES[name]
    xs, ins = make_inputs(name, shapes, dtype, rng)
    if name == "where":
        ins = [ins[0]] + [mr.array(x.astype(dtype.storage), dtype) for x in xs[1:]]

    def f(*args):
        return apply(name, list(args), **params)

    # batching: vmap over a batch of two for each operand in turn, against a loop
    for k in range(len(ins)):
        x2, _ = make_inputs(name, shapes, dtype, rng)
        batch = mr.stack([ins[k], mr.array(x2[k], ins[k].dtype)])

        def fk(b, k=k):
            return f(*[b if j == k else a for j, a in enumerate(ins)])
        got = np.asarray(mr.vmap(fk)(batch))
        want = np.stack([np.asarray(fk(batch[i])) for i in range(2)])
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=f"batch rule, operand {k}")
    # derivatives with respect to the float operands
    diff = [k for k in range(len(ins)) if ins[k].dtype.kind == "f" and k not in _int_operands(name)
            and not (name == "where" and k == 0)]
    out = f(*ins)
    if not diff or out.dtype.kind not in "fc" or name in NO_DERIVATIVES:
        return
    for k in diff:
        t = rng.uniform(-1, 1, shapes[k]).astype(ins[k].dtype.storage)

        def fk(a, k=k):
            return f(*[a if j == k else b for j, b in enumerate(ins)])
        primal, tangent = mr.jvp(fk, [ins[k]], [mr.array(t, ins[k].dtype)])
        tangent = np.asarray(tangent[0] if isinstance(tangent, (list, tuple)) else tangent)
        if dtype is dt.float64 and out.dtype is dt.float64:  # finite differences need float64 both ways
            eps = 1e-6
            hi = [x.astype(np.float64) for x in xs]
            lo = [x.astype(np.float64) for x in xs]
            hi[k] = hi[k] + eps * t
            lo[k] = lo[k] - eps * t
            fd = (np.asarray(p.reference(*hi, **params), np.float64)
                  - np.asarray(p.reference(*lo, **params), np.float64)) / (2 * eps)
            if name == "stop_gradient":  # the identity, with a derivative of zero by definition
                fd = np.zeros_like(fd)
            np.testing.assert_allclose(tangent, fd, rtol=1e-5, atol=1e-6, err_msg=f"jvp rule, operand {k}")
        ct = rng.uniform(-1, 1, out.shape).astype(out.dtype.storage)
        _, vj = mr.vjp(fk, [ins[k]], [mr.array(ct, out.dtype)])
        vj = np.asarray(vj[0] if isinstance(vj, (list, tuple)) else vj)
        lhs = float(np.sum(ct.astype(np.float64) * tangent))
        rhs = float(np.sum(vj.astype(np.float64) * t))
        tol = 1e-9 if dtype is dt.float64 else 1e-3
        assert abs(lhs - rhs) <= tol * (1 + abs(lhs)), f"vjp rule, operand {k}: <ct, Jt> {lhs} != <J^T ct, t> {rhs}"


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


@pytest.mark.parametrize("src", ["float32", "float64", "float16"])
def test_float_to_int_conversions_saturate(src):
    """Out-of-range floats convert to the integer type's nearest end and NaN to 0 (as in
    XLA), the same on every host: an unclamped `fptosi` is poison, and gave x86's wrapped
    values on x86-64 and saturated ones on AArch64."""
    x = np.array([-1.5, 2.5, 300.0, -300.0, 6e4, -6e4, np.inf, -np.inf, np.nan], getattr(np, src))
    want = {"uint8": [0, 2, 255, 0, 255, 0, 255, 0, 0],
            "int8": [-1, 2, 127, -128, 127, -128, 127, -128, 0],
            "int32": [-1, 2, 300, -300, 60000, -60000, 2**31 - 1, -2**31, 0],
            "uint32": [0, 2, 300, 0, 60000, 0, 2**32 - 1, 0, 0],
            "int64": [-1, 2, 300, -300, 60000, -60000, 2**63 - 1, -2**63, 0]}
    a = mr.array(x, dtype=getattr(mr, src))
    for d, w in want.items():
        w = np.array(w, getattr(np, d))
        np.testing.assert_array_equal(np.asarray(a.astype(getattr(mr, d))), w, err_msg=d)
        # compiled (fused with the arithmetic around it) and as a constant folded at compile time
        np.testing.assert_array_equal(np.asarray(mr.compile(lambda a: (a * 1).astype(getattr(mr, d)))(a)), w, err_msg=d)
        np.testing.assert_array_equal(np.asarray(mr.compile(lambda: mr.array(x).astype(getattr(mr, d)))()),
                                      np.array(PRIMITIVES["astype"].reference(x.astype(np.float32), d)), err_msg=d)
