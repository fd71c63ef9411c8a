"""The transform passes (`mirax-jvp`, `mirax-vjp`, `mirax-grad`, `mirax-vmap`) on modules,
checked numerically: build a module (traced or from text), run the passes (through an
MLIR PassManager or the `mirax-opt` driver), then interpret the new function on arrays.
Bad options must give clear errors, never a traceback or a crash.
"""
import re
import subprocess
import sys

import numpy as np
import pytest
from mlir import ir
from mlir.passmanager import PassManager

import mirax as mr
from mirax import opt
from mirax.dialect.core import MiraxError
from mirax.lowering import PASSES
from mirax.runtime.context import context
from mirax.transforms.interpret import apply_op, find_function, function_names, interpret

TRANSFORMS = ("mirax-jvp", "mirax-vjp", "mirax-grad", "mirax-vmap")

CUBE = """
func.func @cube(%x: tensor<f32>) -> tensor<f32> {
  %0 = "mirax.multiply"(%x, %x) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %1 = "mirax.multiply"(%0, %x) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %1 : tensor<f32>
}
"""

LOSS = """
func.func @loss(%w: tensor<4xf32>, %x: tensor<4xf32>) -> tensor<f32> {
  %0 = "mirax.multiply"(%w, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = "mirax.sin"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = "mirax.sum"(%1) {axes = array<i64: 0>, keepdims = false} : (tensor<4xf32>) -> tensor<f32>
  return %2 : tensor<f32>
}
"""

F = """
func.func @f(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "mirax.sin"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "mirax.multiply"(%0, %y) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
"""

MIXED = """
func.func @mixed(%x: tensor<3xf32>, %n: tensor<3xi32>) -> tensor<f32> {
  %0 = "mirax.astype"(%n) {dtype = f32} : (tensor<3xi32>) -> tensor<3xf32>
  %1 = "mirax.multiply"(%x, %0) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %2 = "mirax.sum"(%1) {axes = array<i64: 0>, keepdims = false} : (tensor<3xf32>) -> tensor<f32>
  return %2 : tensor<f32>
}
"""


# ---- helpers ----------------------------------------------------------------------------

def parse(text):
    with context(), ir.Location.unknown():
        return ir.Module.parse(text)


def run_passes(module, *passes):
    """Run mirax passes given as (name, options) on `module` with a PassManager."""
    pm = PassManager("builtin.module", context=module.context)
    for name, options in passes:
        PASSES[name](**options).add_to(pm)
    with module.context, ir.Location.unknown():
        pm.run(module.operation)
    return module


def run_pipeline(module, *elements):
    """Run textual pipeline elements (`mirax-grad{function=f}`, `cse`) the way mirax-opt does."""
    pm = opt.build_pass_manager(module.context, list(elements))
    with module.context, ir.Location.unknown():
        pm.run(module.operation)
    return module


def call(module, name, *args):
    """Interpret `@name` on numpy inputs; numpy outputs."""
    outs = interpret(module, name, [mr.array(np.asarray(a)) for a in args], apply_op)
    return [np.asarray(o) for o in outs]


def func_text(module, name):
    return str(find_function(module, name))


def mirax_opt(args, stdin):
    p = subprocess.run([sys.executable, "-m", "mirax.opt", *args], input=stdin,
                       capture_output=True, text=True, timeout=300)
    assert "Traceback" not in p.stderr, p.stderr
    return p


def f32(rng, *shape, low=-1.0, high=1.0):
    return rng.uniform(low, high, size=shape).astype(np.float32)


# ---- registration -----------------------------------------------------------------------

def test_passes_registered():
    for name in TRANSFORMS:
        assert name in PASSES, name


def test_mirax_opt_help_lists_transform_passes():
    p = mirax_opt(["--help"], "")
    assert p.returncode == 0, p.stderr
    for name in TRANSFORMS:
        assert f"--{name}" in p.stdout, name


def test_passes_registered_for_a_driver_that_imports_only_lowering():
    # what mirax-opt does: look names up in mirax.lowering.PASSES
    code = "from mirax.lowering import PASSES; print(' '.join(sorted(PASSES)))"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    for name in TRANSFORMS:
        assert name in p.stdout.split()


# ---- second derivatives -----------------------------------------------------------------

def sum_cube_module(n=5):
    return mr.trace(lambda x: (x ** 3).sum(), mr.zeros((n,), mr.float32), name="f")


def test_grad_of_sum_cube_is_3x2(rng):
    m = run_passes(sum_cube_module(), ("mirax-grad", {"function": "f"}))
    x = f32(rng, 5, low=-2, high=2)
    (g,) = call(m, "f_grad", x)
    np.testing.assert_allclose(g, 3 * x ** 2, rtol=1e-5, atol=1e-6)


def test_second_derivative_of_sum_cube_is_6x_by_jvp_of_grad(rng):
    # d/dx (3x^2) along ones: the diagonal Hessian 6x
    m = run_passes(sum_cube_module(), ("mirax-grad", {"function": "f"}), ("mirax-jvp", {"function": "f_grad"}))
    x = f32(rng, 5, low=-2, high=2)
    g, hv = call(m, "f_grad_jvp", x, np.ones(5, np.float32))
    np.testing.assert_allclose(g, 3 * x ** 2, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(hv, 6 * x, rtol=1e-5, atol=1e-6)


def test_second_derivative_of_sum_cube_is_6x_by_vjp_of_grad(rng):
    m = run_passes(sum_cube_module(), ("mirax-grad", {"function": "f"}), ("mirax-vjp", {"function": "f_grad"}))
    x = f32(rng, 5, low=-2, high=2)
    g, h = call(m, "f_grad_vjp", x, np.ones(5, np.float32))
    np.testing.assert_allclose(g, 3 * x ** 2, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h, 6 * x, rtol=1e-5, atol=1e-6)


def test_second_derivative_of_sum_cube_is_6x_through_a_call(rng):
    # @g(x) = sum(@f_grad(x)): grad of a function calling a transformed one
    m = run_passes(sum_cube_module(), ("mirax-grad", {"function": "f"}))
    extra = parse("""
      func.func private @f_grad(tensor<5xf32>) -> tensor<5xf32>
      func.func @g(%x: tensor<5xf32>) -> tensor<f32> {
        %0 = func.call @f_grad(%x) : (tensor<5xf32>) -> tensor<5xf32>
        %1 = "mirax.sum"(%0) {axes = array<i64: 0>, keepdims = false} : (tensor<5xf32>) -> tensor<f32>
        return %1 : tensor<f32>
      }""")
    g_op = find_function(extra, "g")
    with m.context:
        m.body.append(g_op)
    run_passes(m, ("mirax-grad", {"function": "g"}))
    x = f32(rng, 5, low=-2, high=2)
    (h,) = call(m, "g_grad", x)
    np.testing.assert_allclose(h, 6 * x, rtol=1e-5, atol=1e-6)


def test_second_derivative_grad_grad_vmap_with_pipeline_text(rng):
    m = run_pipeline(parse(CUBE), "mirax-grad{function=cube}", "mirax-grad{function=cube_grad}",
                     "mirax-vmap{function=cube_grad_grad batch-size=7}", "mirax-simplify")
    x = f32(rng, 7, low=-3, high=3)
    (h,) = call(m, "cube_grad_grad_vmap", x)
    np.testing.assert_allclose(h, 6 * x, rtol=1e-5, atol=1e-5)
    (d1,) = call(m, "cube_grad", np.float32(1.5))
    np.testing.assert_allclose(d1, 3 * 1.5 ** 2, rtol=1e-6)


def test_second_derivative_through_mirax_opt(rng):
    p = mirax_opt(["--mirax-grad=function=cube", "--mirax-grad=function=cube_grad", "--mirax-simplify"], CUBE)
    assert p.returncode == 0, p.stderr
    m = parse(p.stdout)
    assert function_names(m) == ["cube", "cube_grad", "cube_grad_grad"]
    for x in (-2.0, 0.0, 0.5, 3.0):
        (h,) = call(m, "cube_grad_grad", np.float32(x))
        np.testing.assert_allclose(h, 6 * x, rtol=1e-6, atol=1e-6)


# ---- first-order rules, numerically -----------------------------------------------------

def test_grad_of_loss(rng):
    m = run_passes(parse(LOSS), ("mirax-grad", {"function": "loss", "argnums": "0,1"}))
    w, x = f32(rng, 4), f32(rng, 4)
    gw, gx = call(m, "loss_grad", w, x)
    np.testing.assert_allclose(gw, np.cos(w * x) * x, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gx, np.cos(w * x) * w, rtol=1e-5, atol=1e-6)


def test_value_and_grad_returns_value_first(rng):
    m = run_passes(parse(LOSS), ("mirax-grad", {"function": "loss", "argnums": 1, "value": True}))
    w, x = f32(rng, 4), f32(rng, 4)
    value, gx = call(m, "loss_grad", w, x)
    assert value.shape == () and gx.shape == (4,)
    np.testing.assert_allclose(value, np.sin(w * x).sum(), rtol=1e-5)
    np.testing.assert_allclose(value, call(m, "loss", w, x)[0], rtol=1e-6)
    np.testing.assert_allclose(gx, np.cos(w * x) * w, rtol=1e-5, atol=1e-6)


def test_grad_matches_finite_differences(rng):
    text = """
    func.func @h(%x: tensor<3xf32>, %y: tensor<3xf32>) -> tensor<f32> {
      %0 = "mirax.exp"(%x) : (tensor<3xf32>) -> tensor<3xf32>
      %1 = "mirax.divide"(%0, %y) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
      %2 = "mirax.tanh"(%1) : (tensor<3xf32>) -> tensor<3xf32>
      %3 = "mirax.multiply"(%2, %x) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
      %4 = "mirax.sum"(%3) {axes = array<i64: 0>, keepdims = false} : (tensor<3xf32>) -> tensor<f32>
      return %4 : tensor<f32>
    }"""
    m = run_passes(parse(text), ("mirax-grad", {"function": "h", "argnums": "0,1"}))
    x = f32(rng, 3, low=-0.5, high=0.5)
    y = f32(rng, 3, low=1.0, high=2.0)
    gx, gy = call(m, "h_grad", x, y)

    def h(x, y):
        x, y = x.astype(np.float64), y.astype(np.float64)
        return float((np.tanh(np.exp(x) / y) * x).sum())

    eps = 1e-4
    for i in range(3):
        e = np.zeros(3)
        e[i] = eps
        np.testing.assert_allclose(gx[i], (h(x + e, y) - h(x - e, y)) / (2 * eps), rtol=2e-3, atol=2e-4)
        np.testing.assert_allclose(gy[i], (h(x, y + e) - h(x, y - e)) / (2 * eps), rtol=2e-3, atol=2e-4)


def test_jvp_product_rule_and_argnums(rng):
    m = run_passes(parse(F), ("mirax-jvp", {"function": "f", "argnums": "0,1"}),
                   ("mirax-jvp", {"function": "f", "argnums": 1, "result": "f_jvp_y"}))
    x, y, tx, ty = (f32(rng, 4) for _ in range(4))
    out, t = call(m, "f_jvp", x, y, tx, ty)
    np.testing.assert_allclose(out, np.sin(x) * y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(t, np.cos(x) * tx * y + np.sin(x) * ty, rtol=1e-5, atol=1e-6)
    out, t = call(m, "f_jvp_y", x, y, ty)
    np.testing.assert_allclose(t, np.sin(x) * ty, rtol=1e-5, atol=1e-6)


def test_jvp_integer_argument_gets_no_tangent(rng):
    m = run_passes(parse(MIXED), ("mirax-jvp", {"function": "mixed"}))
    ins = [a.type for a in find_function(m, "mixed_jvp").regions[0].blocks[0].arguments]
    assert [str(t) for t in ins] == ["tensor<3xf32>", "tensor<3xi32>", "tensor<3xf32>"]
    x, tx = f32(rng, 3), f32(rng, 3)
    n = np.array([1, -2, 3], np.int32)
    y, ty = call(m, "mixed_jvp", x, n, tx)
    np.testing.assert_allclose(ty, (tx * n).sum(), rtol=1e-5, atol=1e-6)


def test_vjp_matmul_and_sum(rng):
    text = """
    func.func @mm(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>) -> (tensor<2x4xf32>, tensor<4xf32>) {
      %0 = "mirax.matmul"(%a, %b) : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
      %1 = "mirax.sum"(%0) {axes = array<i64: 0>, keepdims = false} : (tensor<2x4xf32>) -> tensor<4xf32>
      return %0, %1 : tensor<2x4xf32>, tensor<4xf32>
    }"""
    m = run_passes(parse(text), ("mirax-vjp", {"function": "mm", "argnums": "0,1"}))
    a, b, c0, c1 = f32(rng, 2, 3), f32(rng, 3, 4), f32(rng, 2, 4), f32(rng, 4)
    y, s, ga, gb = call(m, "mm_vjp", a, b, c0, c1)
    np.testing.assert_allclose(y, a @ b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(s, (a @ b).sum(0), rtol=1e-5, atol=1e-6)
    ct = c0 + c1[None, :]  # both outputs' cotangents reach the matmul
    np.testing.assert_allclose(ga, ct @ b.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gb, a.T @ ct, rtol=1e-5, atol=1e-5)


def test_vmap_in_axes_none_out_axes_1(rng):
    m = run_passes(parse(F), ("mirax-vmap", {"function": "f", "in-axes": "0,none", "out-axes": 1,
                                             "batch-size": 3}))
    xs, y = f32(rng, 3, 4), f32(rng, 4)
    (out,) = call(m, "f_vmap", xs, y)
    assert out.shape == (4, 3)
    expected = np.stack([call(m, "f", x, y)[0] for x in xs], axis=1)
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)


def test_vmap_in_axis_1(rng):
    m = run_passes(parse(F), ("mirax-vmap", {"function": "f", "in-axes": "1,0", "batch-size": 2}))
    xs, ys = f32(rng, 4, 2), f32(rng, 2, 4)
    (out,) = call(m, "f_vmap", xs, ys)
    np.testing.assert_allclose(out, np.sin(xs.T) * ys, rtol=1e-6, atol=1e-6)


def test_per_example_gradients(rng):
    m = run_passes(parse(LOSS), ("mirax-grad", {"function": "loss"}),
                   ("mirax-vmap", {"function": "loss_grad", "in-axes": "none,0", "batch-size": 8}))
    w, xs = f32(rng, 4), f32(rng, 8, 4)
    (g,) = call(m, "loss_grad_vmap", w, xs)
    assert g.shape == (8, 4)
    loop = np.stack([call(m, "loss_grad", w, x)[0] for x in xs])
    np.testing.assert_allclose(g, loop, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g, np.cos(w * xs) * xs, rtol=1e-5, atol=1e-6)


def test_pass_results_agree_with_python_api(rng):
    x = f32(rng, 5, low=-2, high=2)
    api = np.asarray(mr.grad(lambda v: (v ** 3).sum())(mr.array(x)))
    m = run_passes(sum_cube_module(), ("mirax-grad", {"function": "f"}))
    np.testing.assert_allclose(call(m, "f_grad", x)[0], api, rtol=1e-6)


# ---- jvp and vjp agree, for representative primitives -----------------------------------

RULE_CASES = {
    "transpose": ("(%x: tensor<2x3x4xf32>) -> tensor<4x2x3xf32>",
                  '"mirax.transpose"(%x) {permutation = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>'),
    "reshape": ("(%x: tensor<2x3xf32>) -> tensor<3x2xf32>",
                '"mirax.reshape"(%x) {shape = array<i64: 3, 2>} : (tensor<2x3xf32>) -> tensor<3x2xf32>'),
    "broadcast_to": ("(%x: tensor<3xf32>) -> tensor<2x3xf32>",
                     '"mirax.broadcast_to"(%x) {shape = array<i64: 2, 3>} : (tensor<3xf32>) -> tensor<2x3xf32>'),
    "slice": ("(%x: tensor<4x6xf32>) -> tensor<2x3xf32>",
              '"mirax.slice"(%x) {start = array<i64: 1, 0>, stop = array<i64: 3, 5>, strides = array<i64: 1, 2>} '
              ': (tensor<4x6xf32>) -> tensor<2x3xf32>'),
    "take": ("(%x: tensor<4x6xf32>, %i: tensor<3xi32>) -> tensor<3x6xf32>",
             '"mirax.take"(%x, %i) {axis = 0 : i64} : (tensor<4x6xf32>, tensor<3xi32>) -> tensor<3x6xf32>'),
    "concatenate": ("(%x: tensor<4x2xf32>, %y: tensor<4x3xf32>) -> tensor<4x5xf32>",
                    '"mirax.concatenate"(%x, %y) {axis = 1 : i64} : (tensor<4x2xf32>, tensor<4x3xf32>) -> tensor<4x5xf32>'),
    "sum": ("(%x: tensor<2x3xf32>) -> tensor<2xf32>",
            '"mirax.sum"(%x) {axes = array<i64: 1>, keepdims = false} : (tensor<2x3xf32>) -> tensor<2xf32>'),
    "max": ("(%x: tensor<2x3xf32>) -> tensor<3xf32>",
            '"mirax.max"(%x) {axes = array<i64: 0>, keepdims = false} : (tensor<2x3xf32>) -> tensor<3xf32>'),
    "matmul": ("(%x: tensor<2x3xf32>, %y: tensor<3x4xf32>) -> tensor<2x4xf32>",
               '"mirax.matmul"(%x, %y) : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>'),
    "divide": ("(%x: tensor<3xf32>, %y: tensor<3xf32>) -> tensor<3xf32>",
               '"mirax.divide"(%x, %y) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>'),
    "tanh": ("(%x: tensor<3xf32>) -> tensor<3xf32>", '"mirax.tanh"(%x) : (tensor<3xf32>) -> tensor<3xf32>'),
}


def rule_module(name):
    sig, op = RULE_CASES[name]
    result_type = sig.rsplit("-> ", 1)[1]
    return parse(f"func.func @f{sig} {{\n  %0 = {op}\n  return %0 : {result_type}\n}}\n")


@pytest.mark.parametrize("name", sorted(RULE_CASES))
def test_jvp_vjp_consistent_and_match_finite_differences(name, rng):
    m = rule_module(name)
    fn = find_function(m, "f")
    args = fn.regions[0].blocks[0].arguments
    avals = [(tuple(ir.RankedTensorType(a.type).shape), str(ir.RankedTensorType(a.type).element_type)) for a in args]
    floats = [i for i, (_, t) in enumerate(avals) if t == "f32"]
    nums = ",".join(map(str, floats))
    run_passes(m, ("mirax-jvp", {"function": "f", "argnums": nums}), ("mirax-vjp", {"function": "f", "argnums": nums}))
    xs = []
    for shape, t in avals:
        if t == "f32":
            xs.append(f32(rng, *shape, low=0.5, high=1.5))
        else:
            xs.append(rng.integers(0, 4, size=shape).astype(np.int32))
    ts = [f32(rng, *xs[i].shape) for i in floats]
    (y,) = call(m, "f", *xs)
    c = f32(rng, *y.shape)
    y_jvp, ty = call(m, "f_jvp", *xs, *ts)
    y_vjp, *gs = call(m, "f_vjp", *xs, c)
    np.testing.assert_allclose(y_jvp, y, rtol=1e-6)
    np.testing.assert_allclose(y_vjp, y, rtol=1e-6)
    # <c, J t> == <J^T c, t>
    lhs = float((c.astype(np.float64) * ty).sum())
    rhs = float(sum((g.astype(np.float64) * t).sum() for g, t in zip(gs, ts)))
    np.testing.assert_allclose(lhs, rhs, rtol=1e-4, atol=1e-5)
    # J t against central differences
    eps = 1e-2

    def shifted(sign):
        moved = list(xs)
        for i, t in zip(floats, ts):
            moved[i] = (xs[i] + sign * eps * t).astype(np.float32)
        return call(m, "f", *moved)[0].astype(np.float64)

    np.testing.assert_allclose(ty, (shifted(1) - shifted(-1)) / (2 * eps), rtol=2e-2, atol=2e-3)


# ---- the original function is left intact ---------------------------------------------

@pytest.mark.parametrize("passes", [
    [("mirax-jvp", {"function": "f", "argnums": "0,1"})],
    [("mirax-vjp", {"function": "f"})],
    [("mirax-vmap", {"function": "f", "in-axes": "0,none", "batch-size": 2})],
    [("mirax-jvp", {"function": "f"}), ("mirax-vmap", {"function": "f_jvp", "batch-size": 3})],
])
def test_original_function_unchanged(passes):
    m = parse(F)
    before = func_text(m, "f")
    run_passes(m, *passes)
    assert func_text(m, "f") == before
    assert function_names(m)[0] == "f"
    assert len(function_names(m)) == 1 + len(passes)
    m.operation.verify()


def test_new_function_names():
    m = run_passes(parse(F), ("mirax-jvp", {"function": "f"}), ("mirax-jvp", {"function": "f"}),
                   ("mirax-jvp", {"function": "f", "result": "tangent_of_f"}))
    assert function_names(m) == ["f", "f_jvp", "f_jvp_1", "tangent_of_f"]


# ---- errors -----------------------------------------------------------------------------

@pytest.mark.parametrize("text, passes, message", [
    (F, [("mirax-grad", {"function": "f"})], "mirax-grad: @f must return a floating-point scalar first"),
    (MIXED, [("mirax-grad", {"function": "mixed", "argnums": 1})],
     "mirax-grad: argument 1 of @mixed has dtype int32"),
    (MIXED, [("mirax-vjp", {"function": "mixed", "argnums": 1})],
     "mirax-vjp: argument 1 of @mixed has dtype int32"),
    (F, [("mirax-jvp", {"function": "nope"})], "no function @nope in the module"),
    (F, [("mirax-jvp", {"function": "f", "argnums": 2})], "argnum 2 out of range for @f with 2 arguments"),
    (F, [("mirax-vmap", {"function": "f"})], "mirax-vmap: needs batch-size=<n>"),
    (F, [("mirax-vmap", {"function": "f", "in-axes": "0,0,0", "batch-size": 2})], "3 in-axes for @f with 2 arguments"),
    (F, [("mirax-vmap", {"function": "f", "in-axes": "2,0", "batch-size": 2})], "in-axis 2 out of range"),
])
def test_pass_manager_errors(text, passes, message):
    m = parse(text)
    before = str(m)
    with pytest.raises(MiraxError, match=re.escape(message)):
        run_passes(m, *passes)
    assert str(m) == before  # nothing half-added


def test_missing_function_option():
    with pytest.raises(ValueError, match="needs the option function=<name>"):
        run_passes(parse(F), ("mirax-grad", {}))


def test_unknown_option():
    with pytest.raises(ValueError, match="has no option bogus"):
        PASSES["mirax-vmap"](function="f", bogus=1)


@pytest.mark.parametrize("args, text, message", [
    (["--mirax-grad=function=f"], F, "mirax-grad: @f must return a floating-point scalar first, got float32[4]"),
    (["--mirax-grad=function=mixed argnums=1"], MIXED,
     "argument 1 of @mixed has dtype int32; only floating-point and complex arguments can be differentiated"),
    (["--mirax-grad=function=nope"], F, "no function @nope in the module"),
    (["--mirax-jvp=function=f argnums=3"], F, "mirax-jvp: argnum 3 out of range for @f with 2 arguments"),
    (["--mirax-vmap=function=f"], F, "mirax-vmap: needs batch-size=<n> (a positive size)"),
    (["--mirax-vmap=function=f batch-size=-4"], F, "mirax-vmap: needs batch-size=<n> (a positive size)"),
    (["--mirax-grad"], F, "'mirax-grad' needs the option function=<name>"),
    (["--mirax-grad=function=f bogus=1"], F, "pass 'mirax-grad' has no option bogus"),
    (["--pass-pipeline=builtin.module(mirax-vjp{function=f foo=2})"], F, "pass 'mirax-vjp' has no option foo"),
])
def test_mirax_opt_errors_are_diagnostics(args, text, message):
    p = mirax_opt(["-", *args], text)
    assert p.returncode != 0
    assert message in p.stderr
    assert "error" in p.stderr
    assert p.stdout == ""


@pytest.mark.parametrize("args", [
    ["--mirax-jvp=function=f argnums=x"],
    ["--mirax-vmap=function=f in-axes=zero batch-size=2"],
    ["--mirax-vmap=function=f batch-size=two"],
])
def test_malformed_option_values_do_not_crash(args):
    p = mirax_opt(["-", *args], F)
    assert p.returncode != 0
    assert "error" in p.stderr
    assert p.stdout == ""


@pytest.mark.parametrize("args, option", [
    (["--mirax-jvp=function=f argnums=x"], "argnums"),
    (["--mirax-vmap=function=f in-axes=zero batch-size=2"], "in-axes"),
    (["--mirax-vmap=function=f batch-size=two"], "batch-size"),
])
def test_malformed_option_values_name_the_option(args, option):
    p = mirax_opt(["-", *args], F)
    assert option in p.stderr and "internal error" not in p.stderr, p.stderr


def test_user_errors_are_not_internal_errors():
    p = mirax_opt(["-", "--mirax-grad=function=f"], F)
    assert "internal error" not in p.stderr, p.stderr


def test_vmap_out_axis_out_of_range_is_an_error():
    with pytest.raises(MiraxError, match="out-axis"):
        run_passes(parse(F), ("mirax-vmap", {"function": "f", "out-axes": 5, "batch-size": 2}))


def test_vmap_out_axes_count_mismatch_is_an_error():
    with pytest.raises(MiraxError, match="out-axes"):
        run_passes(parse(F), ("mirax-vmap", {"function": "f", "out-axes": "0,1,1", "batch-size": 2}))


def test_jvp_repeated_argnum_is_an_error():
    with pytest.raises(MiraxError, match="argnum"):
        run_passes(parse(F), ("mirax-jvp", {"function": "f", "argnums": "0,0"}))


def _breaks(op, *_):  # an i32 add whose result claims to be f32
    fn = op.regions[0].blocks[0].operations[0]
    entry = fn.regions[0].blocks[0]
    with ir.InsertionPoint.at_block_begin(entry), ir.Location.unknown():
        ir.Operation.create("arith.addi", results=[ir.F32Type.get()],
                            operands=[entry.arguments[0], entry.arguments[0]])


def test_a_python_pass_that_breaks_the_ir_fails_before_an_upstream_pass_reads_it():
    """The CPU compile path verifies what our Python passes wrote before the next upstream
    pass (and at the end), not after every pass: a pass that leaves invalid IR is named
    in the error, and no pass after the check runs."""
    from mirax.lowering.pass_base import PassError, run_verifying_ours, verified_pass_manager
    from mirax.runtime.context import context
    ran = []

    def build(pm):
        pm.add(_breaks, name="breaks-the-ir")
        pm.add("canonicalize")
        pm.add(lambda *_: ran.append(True), name="reads-it")
    with context() as ctx, ir.Location.unknown():
        module = ir.Module.parse("func.func @f(%a: i32) -> i32 { return %a : i32 }")
        with pytest.raises(PassError, match="pass 'breaks-the-ir' produced invalid IR"):
            run_verifying_ours(verified_pass_manager(build, ctx), module.operation)
        assert not ran


def test_consecutive_python_passes_are_verified_together_or_each(monkeypatch):
    """Python passes one after another are verified together (the error names them all)
    unless MIRAX_VERIFY_EACH_PASS=1, which verifies after each and stops at the first."""
    from mirax.lowering.pass_base import PassError, run_verifying_ours
    from mirax.runtime.context import context
    ran = []

    def after(op, *_):
        ran.append(True)
    with context(), ir.Location.unknown():
        pm = PassManager("builtin.module")
        pm.add(_breaks, name="breaks-the-ir")
        pm.add(after, name="reads-it")
        module = ir.Module.parse("func.func @f(%a: i32) -> i32 { return %a : i32 }")
        with pytest.raises(PassError, match="one of the passes 'breaks-the-ir', 'reads-it' .*MIRAX_VERIFY_EACH_PASS"):
            run_verifying_ours(pm, module.operation)
        assert ran == [True]
        monkeypatch.setenv("MIRAX_VERIFY_EACH_PASS", "1")
        module = ir.Module.parse("func.func @f(%a: i32) -> i32 { return %a : i32 }")
        with pytest.raises(PassError, match="pass 'breaks-the-ir' produced invalid IR"):
            run_verifying_ours(pm, module.operation)
        assert ran == [True]
