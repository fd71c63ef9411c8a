"""The table of primitive test cases: one row per primitive of the dialect.

Elementwise primitives get rows generated from their declarations (dtypes, domain);
the others list (operand shapes, parameters) cases here. `test_every_op_has_a_row`
fails when an op of dialect/mirax.irdl.mlir has no row.
"""
import numpy as np

from mirax.dialect import PRIMITIVES, dtypes as dt
from mirax.dialect.elementwise import BINARY, UNARY

SHAPES = [(), (5,), (2, 3), (0, 4)]

# name -> list of (operand shapes, params, dtype-or-None); None uses the declared dtypes
CASES = {
    "astype": [([s], {"dtype": d}, None) for s in [(3,), (2, 2)] for d in ["float32", "int32", "bool", "float16",
                                                                            "uint8", "float64", "complex64"]],
    "where": [([s, s, s], {}, None) for s in SHAPES],
    "reshape": [([(2, 3)], {"shape": (3, 2)}, None), ([(2, 3)], {"shape": (-1, 2)}, None), ([(6,)], {"shape": (1, 2, 3)}, None),
                ([()], {"shape": (1,)}, None), ([(1,)], {"shape": ()}, None), ([(0, 3)], {"shape": (3, 0)}, None)],
    "flatten": [([(2, 3, 4)], {"start_axis": 0, "end_axis": 1}, None), ([(2, 3, 4)], {"start_axis": 1, "end_axis": 2}, None),
                ([(2, 0, 3)], {"start_axis": 0, "end_axis": 2}, None)],
    "broadcast_to": [([(3,)], {"shape": (2, 3)}, None), ([(2, 1)], {"shape": (2, 4)}, None),
                     ([()], {"shape": (2, 2)}, None), ([(1, 1)], {"shape": (3, 1, 2)}, None)],
    "transpose": [([(2, 3)], {"permutation": (1, 0)}, None), ([(2, 3, 4)], {"permutation": (2, 0, 1)}, None),
                  ([()], {"permutation": ()}, None)],
}

R = lambda axes, kd: {"axes": axes, "keepdims": kd}  # noqa: E731
CASES.update({
    "sum": [([(2, 3)], R((1,), False), None), ([(2, 3, 4)], R((0, 2), True), None),
            ([(0, 4)], R((0,), False), None), ([()], R((), False), None)],
    "prod": [([(2, 3)], R((1,), False), None), ([(2, 3, 4)], R((0, 2), True), None), ([(0, 4)], R((0,), False), None)],
    "max": [([(2, 3)], R((1,), False), None), ([(2, 3, 4)], R((0, 2), True), None), ([(0, 4)], R((1,), False), None)],
    "min": [([(2, 3)], R((0,), True), None), ([(2, 3, 4)], R((1,), False), None), ([(5,)], R((0,), False), None)],
    "argmax": [([(2, 3)], R((1,), False), None), ([(2, 3, 4)], R((0,), True), None)],
    "argmin": [([(2, 3)], R((0,), False), None), ([(2, 3, 4)], R((2,), True), None)],
    "cumsum": [([(5,)], {"axis": 0, "reverse": False, "inclusive": True}, None),
               ([(2, 3)], {"axis": 1, "reverse": True, "inclusive": False}, None),
               ([(2, 3, 4)], {"axis": 0, "reverse": True, "inclusive": True}, None)],
    **{name: [([(5,)], {"axis": 0, "reverse": False, "inclusive": True}, None),
              ([(2, 3)], {"axis": 1, "reverse": True, "inclusive": False}, None),
              ([(2, 3, 4)], {"axis": 0, "reverse": True, "inclusive": True}, None),
              ([(3, 20)], {"axis": 1, "reverse": False, "inclusive": False}, None)]
       for name in ("cummax", "cummin", "cumprod")},
    "argsort": [([(9,)], {"axis": 0}, None), ([(2, 3, 4)], {"axis": 1}, None), ([(3, 17)], {"axis": 1}, None),
                ([(0, 4)], {"axis": 1}, None), ([(4, 1)], {"axis": 1}, None)],
    "sort": [([(9,)], {"axis": 0}, None), ([(2, 3, 4)], {"axis": 1}, None), ([(3, 17)], {"axis": 1}, None),
             ([(0, 4)], {"axis": 1}, None), ([(4, 1)], {"axis": 1}, None), ([(2, 40)], {"axis": 1}, None)],
    "argtopk": [([(9,)], {"axis": 0, "k": 3}, None), ([(2, 30, 4)], {"axis": 1, "k": 2}, None),
                ([(3, 17)], {"axis": 1, "k": 17}, None), ([(3, 17)], {"axis": 1, "k": 0}, None),
                ([(40, 5)], {"axis": 0, "k": 1}, None)],
    "matmul": [([(3, 4), (4, 5)], {}, None), ([(2, 3, 4), (2, 4, 5)], {}, None),
               ([(2, 2, 3, 4), (2, 2, 4, 5)], {}, None), ([(3, 0), (0, 2)], {}, None)],
    "slice": [([(4, 5)], {"start": (1, 0), "stop": (4, 5), "strides": (2, 2)}, None),
              ([(6,)], {"start": (2,), "stop": (2,), "strides": (1,)}, None)],
    "concatenate": [([(2, 3), (1, 3)], {"axis": 0}, None), ([(2, 1), (2, 2)], {"axis": 1}, None)],
    "pad": [([(2, 3), ()], {"low": (1, 0), "high": (0, 2)}, None), ([(0,), ()], {"low": (2,), "high": (1,)}, None)],
    "take": [([(4, 3), (2,)], {"axis": 0}, None), ([(4, 3), (2, 2)], {"axis": 1}, None)],
    "take_along_axis": [([(3, 4), (3, 2)], {"axis": 1}, None)],
    "random_bits": [([(2,)], {"shape": (3, 4)}, None), ([(5, 2)], {"shape": (3,)}, None),
                    ([(2, 3, 2)], {"shape": ()}, None)],
    "scatter_add": [([(4, 3), (5,), (5, 3)], {"axis": 0}, None), ([(2, 4), (3,), (2, 3)], {"axis": 1}, None)],
    "scatter": [([(4, 3), (5,), (5, 3)], {"axis": 0}, None), ([(2, 4), (3,), (2, 3)], {"axis": 1}, None)],
    **{f"scatter_{m}": [([(4, 3), (5,), (5, 3)], {"axis": 0}, None), ([(2, 4), (3,), (2, 3)], {"axis": 1}, None)]
       for m in ("prod", "max", "min")},
})

# bitcast (MLX's view): equal widths, narrower (the last axis grows) and wider; float
# operands only to integer dtypes, since views have no derivative to check
CASES["bitcast"] = ([([s], {"dtype": d}, dt.float32) for s in [(2,), (2, 4)] for d in ["int32", "uint8", "int16", "uint64"]]
                    + [([s], {"dtype": d}, dt.uint8) for s in [(8,), (2, 8)] for d in ["int8", "int16", "float32", "float64",
                                                                                        "complex64"]]
                    + [([()], {"dtype": "uint32"}, dt.float32), ([(0, 4)], {"dtype": "uint16"}, dt.int32)]
                    + [([(2, 4)], {"dtype": "int32"}, dt.float64), ([(3,)], {"dtype": "uint8"}, dt.bool_)])
CASES["depends"] = [([(3,), (2,)], {}, None), ([(2, 3), ()], {}, None)]
CASES["optimization_barrier"] = [([(3,)], {}, None), ([(2, 3)], {}, None), ([()], {}, None)]

# operands that are indices: drawn as int32 in [-2, 2] (negative indices wrap)
INDEX_OPERANDS = {"take": 1, "take_along_axis": 1, "scatter_add": 1, "scatter": 1, "scatter_prod": 1,
                  "scatter_max": 1, "scatter_min": 1}

# primitives whose result type is given rather than inferred have their own tests
TYPED = {"constant", "arange"}


def rows():
    """(name, operand shapes, params, dtype) for every case in the table."""
    out = []
    for name, p in sorted(PRIMITIVES.items()):
        if name in TYPED:
            continue
        dtypes = p.test.get("dtypes", [dt.float32])
        if name in UNARY:
            out += [(name, [s], {}, d) for d in dtypes for s in SHAPES]
        elif name in BINARY:
            out += [(name, [s, s], {}, d) for d in dtypes for s in SHAPES]
        for shapes, params, d in CASES.get(name, []):
            out += [(name, shapes, params, dd) for dd in ([d] if d else dtypes)]
    return out


def random_input(rng, shape, d, domain=None):
    lo, hi = domain or (-3, 3)
    if d.kind == "b":
        return rng.random(shape) < 0.5
    if d.kind in "iu":
        lo, hi = (max(lo, 0), hi) if d.kind == "u" else (lo, hi)
        return rng.integers(int(np.floor(lo)), int(np.ceil(hi)) + 1, size=shape).astype(d.storage)
    x = rng.uniform(lo, hi, size=shape)
    if d.kind == "c":
        x = x + 1j * rng.uniform(lo, hi, size=shape)
    return np.asarray(x).astype(d.storage)


def make_inputs(name, shapes, dtype, rng):
    """(numpy inputs, mirax arrays) for one row: random values in the op's domain, a bool
    condition for `where`, in-range-or-negative integer indices for the indexing ops."""
    from mirax.dialect import PRIMITIVES
    import mirax as mr
    domain = PRIMITIVES[name].test.get("domain")
    if name == "where":
        xs = [rng.random(shapes[0]) < 0.5] + [random_input(rng, s, dtype, domain) for s in shapes[1:]]
        return xs, [mr.array(xs[0])] + [mr.array(x, dtype) for x in xs[1:]]
    xs = [random_input(rng, s, dtype, domain) for s in shapes]
    prepare = PRIMITIVES[name].test.get("prepare")  # operands with structure (positive definite, ...)
    if prepare is not None:
        xs = [np.asarray(x).astype(dtype.storage) for x in prepare(xs)]
    ins = [mr.array(x, dtype) for x in xs]
    if name in INDEX_OPERANDS:
        i = INDEX_OPERANDS[name]
        xs[i] = rng.integers(-2, 3, size=shapes[i]).astype(np.int32)
        ins[i] = mr.array(xs[i])
    return xs, ins


def tolerance(d):
    return {"float16": (2e-3, 2e-3), "bfloat16": (1e-2, 1e-2), "float32": (2e-5, 2e-6),
            "float64": (1e-12, 1e-12), "complex64": (2e-5, 2e-6)}.get(d.name, (0, 0))

CV = lambda s, lo, hi, kd, idl, g, flip: {"stride": s, "padding_lo": lo, "padding_hi": hi,  # noqa: E731
                                          "kernel_dilation": kd, "input_dilation": idl, "groups": g, "flip": flip}
CASES["conv"] = [
    ([(2, 7, 3), (4, 3, 3)], CV((1,), (0,), (0,), (1,), (1,), 1, False), None),
    ([(2, 9, 4), (6, 3, 2)], CV((2,), (1,), (2,), (2,), (1,), 2, True), None),
    ([(1, 5, 4), (4, 2, 1)], CV((2,), (-1,), (1,), (1,), (2,), 4, False), None),
    ([(1, 6, 5, 3), (4, 3, 2, 3)], CV((2, 1), (1, 0), (1, 1), (1, 1), (1, 1), 1, False), None),
    ([(1, 5, 4, 4), (2, 2, 2, 2)], CV((1, 2), (0, 1), (1, 0), (2, 1), (2, 1), 2, True), None),
]

# the matrix decompositions (dialect/decomp.py): host primitives, one op per result
SVD = lambda o, full=True, uv=True: {"output": o, "full": full, "compute_uv": uv}  # noqa: E731
CASES.update({
    "inv": [([(3, 3)], {"tri": False, "upper": False}, None), ([(2, 3, 3)], {"tri": True, "upper": True}, None),
            ([(3, 3)], {"tri": True, "upper": False}, None)],
    "cholesky": [([(3, 3)], {"upper": False}, None), ([(2, 3, 3)], {"upper": True}, None)],
    "qr": [([(4, 3)], {"output": 0}, None), ([(4, 3)], {"output": 1}, None), ([(2, 3, 4)], {"output": 0}, None)],
    "svd": [([(3, 3)], SVD(0), None), ([(4, 3)], SVD(1), None), ([(3, 4)], SVD(2, full=False), None),
            ([(2, 3, 3)], SVD(1, uv=False), None), ([(4, 3)], SVD(0, full=False), None)],
    "eigh": [([(3, 3)], {"output": 1, "upper": False, "vectors": True}, None),
             ([(2, 3, 3)], {"output": 0, "upper": True, "vectors": False}, None)],
    "eig": [([(3, 3)], {"output": 0, "vectors": True}, None), ([(2, 3, 3)], {"output": 1, "vectors": True}, None)],
    "lu": [([(3, 3)], {"output": 0}, None), ([(3, 4)], {"output": 1}, None), ([(2, 4, 3)], {"output": 2}, None)],
    "solve": [([(3, 3), (3, 2)], {}, None), ([(2, 3, 3), (2, 3, 1)], {}, None)],
})

# the collectives (dialect/distributed.py) on the test process's world, a group of one
# process; test_distributed.py runs them on 2 and 4 processes
G0 = {"group": 0}
CASES.update({name: [([(3,)], G0, None), ([(2, 3)], G0, None), ([()], G0, None)]
              for name in ("all_sum", "all_max", "all_min", "all_gather")})
CASES["sum_scatter"] = [([(3,)], G0, None), ([(2, 3)], G0, None)]
# send/recv need a second process: tested in test_distributed.py
TYPED |= {"send", "recv"}
