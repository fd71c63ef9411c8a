"""The short paths of a cached eager op and a cached compiled call (issue 12), and the
first compile's lazily loaded runtime: each must behave exactly as the general path
it skips. (Their speed is measured in bench/eager_overhead.py and bench/cache.py.)"""
import gc
import importlib.metadata
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import mirax as mr
from mirax.array import TraceError
from mirax.device import cpu as cpu_device, kernel_key
from mirax.dialect import dtypes as dt
from mirax.dialect.core import Aval, MiraxError
from mirax.runtime import buffers, cpu, disk_cache


# ---- the kernel call: data pointers and reused descriptors ----------------------------------

def test_data_pointer_offset_matches_ctypes():
    if cpu._DATA is None:
        pytest.skip("this Python's ndarray layout is not read directly (ctypes is used)")
    base = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    for a in (base, base[1:, ::2, 1:], base.T, np.zeros(()), np.empty(0), base.view(np.uint8)[:, :, 3:]):
        assert cpu._void_at(id(a) + cpu._DATA).value == a.ctypes.data


ADD_2D = """
func.func @kernel(%a: tensor<3x4xf32> {bufferization.writable = false},
                  %b: tensor<3x4xf32> {bufferization.writable = false}) -> tensor<3x4xf32>
    attributes {llvm.emit_c_interface} {
  %0 = "mirax.add"(%a, %b) : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}
"""

# a kernel of dynamic shape (memref<?x?xf32>: it reads the descriptor's sizes; like every
# mirax kernel it takes row-major buffers, its layout being the identity)
SCALE_DYN = """
func.func @kernel(%a: memref<?x?xf32>, %b: memref<?x?xf32>) attributes {llvm.emit_c_interface} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %two = arith.constant 2.0 : f32
  %n = memref.dim %a, %c0 : memref<?x?xf32>
  %m = memref.dim %a, %c1 : memref<?x?xf32>
  scf.for %i = %c0 to %n step %c1 {
    scf.for %j = %c0 to %m step %c1 {
      %v = memref.load %a[%i, %j] : memref<?x?xf32>
      %w = arith.mulf %v, %two : f32
      memref.store %w, %b[%i, %j] : memref<?x?xf32>
    }
  }
  return
}
"""


def test_kernel_descriptors_follow_each_calls_arguments():
    k = cpu.compile_module(ADD_2D, "kernel")
    flat = np.arange(40, dtype=np.float32)
    c = flat[:12].reshape(3, 4).copy()
    # contiguous buffers at other addresses (offset views of one buffer, fresh arrays)
    for x in (c, flat[4:16].reshape(3, 4), flat[28:].reshape(3, 4), c.copy(), c):
        out = np.empty((3, 4), np.float32)
        k([x, c], [out])
        np.testing.assert_array_equal(out, x + c)
    d = cpu.compile_module(SCALE_DYN, "kernel")
    big = np.arange(48, dtype=np.float32).reshape(6, 8)
    # the same kernel on other shapes: each call's descriptor is refilled when they change
    for x in (big, big[:2], big.reshape(8, 6), big.reshape(8, 6), np.ones((1, 5), np.float32), big[1:4],
              np.zeros((0, 3), np.float32), big):
        out = np.full(x.shape, -1, np.float32)
        d([x], [out])
        np.testing.assert_array_equal(out, 2 * x)


def test_kernel_accepts_ndarray_subclasses():
    class Tagged(np.ndarray):
        pass

    k = cpu.compile_module(ADD_2D, "kernel")
    a = np.arange(12, dtype=np.float32).reshape(3, 4).view(Tagged)
    out = np.empty((3, 4), np.float32)
    k([a, a], [out])
    np.testing.assert_array_equal(out, 2 * np.asarray(a))


def test_kernel_slots_are_not_shared_between_threads():
    import threading
    k = cpu.compile_module(ADD_2D, "kernel")
    errors = []

    def work(t):
        try:
            a = np.full((3, 4), t, np.float32)
            for _ in range(300):
                out = np.empty((3, 4), np.float32)
                k([a, a], [out])
                if not (out == 2 * t).all():
                    errors.append(t)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


# ---- eager ops: the kernel key, the binary short path, eval ----------------------------------

def test_kernel_key_tells_ops_apart():
    f32, i32 = dt.float32, dt.int32
    a, b = Aval((4,), f32), Aval((4,), i32)
    keys = {kernel_key("add", {}, [a, a], a), kernel_key("add", {}, [b, b], b),
            kernel_key("subtract", {}, [a, a], a), kernel_key("exp", {}, [a], a),
            kernel_key("sum", {"axes": (0,)}, [a], Aval((), f32)),
            kernel_key("sum", {"axes": (0,), "keepdims": True}, [a], Aval((1,), f32)),
            kernel_key("where", {}, [Aval((4,), dt.bool_), a, a], a),
            kernel_key("add", {}, [Aval((2, 2), f32)] * 2, Aval((2, 2), f32))}
    assert len(keys) == 8
    # equal avals made separately give the same key (a cache hit), made of plain values
    assert kernel_key("add", {}, [Aval((4,), f32)] * 2, Aval((4,), f32)) == kernel_key("add", {}, [a, a], a)
    assert kernel_key("constant", {"value": np.float32(2)}, [], a) == kernel_key("constant", {"value": 2.0}, [], a)


def test_cached_eager_op_compiles_once_per_signature():
    x = mr.array(np.arange(23, dtype=np.float32))
    y = mr.array(np.ones(23, np.float32))
    mr.eval(x * y)
    before = cpu_device.kernels.compiles
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(x * y), np.arange(23, dtype=np.float32))
    assert cpu_device.kernels.compiles == before
    z = mr.array(np.ones(23, np.int32))
    np.testing.assert_array_equal(np.asarray(z * z), np.ones(23, np.int32))  # another dtype: its own kernel
    assert cpu_device.kernels.compiles == before + 1


@pytest.mark.parametrize("op, a, b, want", [
    (mr.add, np.arange(6, dtype=np.float32), np.ones(6, np.float32), None),
    (mr.divide, np.arange(1, 7, dtype=np.int32), np.full(6, 2, np.int32), np.arange(1, 7) / 2),  # float result
    (mr.logical_and, np.array([0., 1., 2.], np.float32), np.array([1., 0., 3.], np.float32), [False, False, True]),
    (mr.left_shift, np.array([True, False]), np.array([True, True]), np.array([2, 0], np.uint8)),
    (mr.maximum, np.arange(6, dtype=np.int64).reshape(2, 3), np.full((2, 3), 2, np.int64), None),
    (mr.equal, np.array([1, 2], np.uint8), np.array([1, 3], np.uint8), [True, False]),
])
def test_binary_ops_on_equal_operands(op, a, b, want):
    # same dtype and shape: no promotion or broadcast op is recorded, the result is the same
    x, y = mr.array(a), mr.array(b)
    out = op(x, y)
    ref = getattr(np, op.__name__)(a, b) if want is None else np.asarray(want)
    assert out.shape == ref.shape
    np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-6)
    assert out.dtype == dt.from_numpy(np.asarray(ref).dtype) or op is mr.divide
    if op is mr.divide:
        assert out.dtype is dt.float32


def test_binary_ops_still_refuse_and_broadcast():
    f = mr.array(np.ones(3, np.float32))
    with pytest.raises(MiraxError, match="bitwise_and"):
        mr.bitwise_and(f, f)
    with pytest.raises(MiraxError, match="broadcast"):
        mr.add(mr.ones((2, 3)), mr.ones((4, 3)))
    np.testing.assert_array_equal(np.asarray(mr.add(mr.ones((2, 3)), mr.ones((3,)))), np.full((2, 3), 2.0))


def test_shapeless_compile_keeps_its_implicit_broadcasts():
    f = mr.compile(lambda x, y: x * y + x, shapeless=True)
    a = np.arange(6, dtype=np.float32)
    np.testing.assert_allclose(np.asarray(f(mr.array(a), mr.array(a))), a * a + a)
    b = np.arange(10, dtype=np.float32)
    np.testing.assert_allclose(np.asarray(f(mr.array(b), mr.array(b))), b * b + b)  # new shape, no retrace
    assert f.trace_count == 1


def test_eval_takes_arrays_and_trees_alike():
    a = mr.array(np.arange(4, dtype=np.float32))
    xs = [a + 1, {"k": (a * 2, None)}, 3, "text", a - 1]
    mr.eval(*xs)
    assert all(x._data is not None for x in (xs[0], xs[1]["k"][0], xs[4]))
    lone = mr.exp(a)
    mr.eval(lone, lone)  # the same array twice
    np.testing.assert_allclose(np.asarray(lone), np.exp(np.arange(4)), rtol=1e-6)
    chain = mr.sqrt(mr.exp(a) + 1)  # pending inputs: the whole graph runs
    mr.eval(chain)
    np.testing.assert_allclose(np.asarray(chain), np.sqrt(np.exp(np.arange(4)) + 1), rtol=1e-6)
    mr.eval()
    mr.eval(a)  # evaluated already: nothing to do


def test_eval_inside_a_trace_still_raises():
    @mr.compile
    def f(x):
        y = x + 1
        mr.eval(y)
        return y
    with pytest.raises(TraceError, match="cannot evaluate"):
        f(mr.array([1.0]))


def test_eager_outputs_are_counted_and_released():
    gc.collect()
    before = buffers.active_bytes()
    a = mr.array(np.ones(1000, np.float32))
    ys = [mr.exp(a) for _ in range(5)]
    mr.eval(*ys)
    assert buffers.active_bytes() >= before + 5 * 4000
    del ys
    gc.collect()
    assert buffers.active_bytes() <= before + 4000  # `a` itself (made by mr.array: not counted)


def test_buffers_start_at_a_cache_line():
    """Outputs, pooled or not, and mr.array's copies start at a 64-byte line (a vector 16
    bytes off one spans two lines: a compiled 256x784 @ 784x512 ran ~20% slower), whatever
    the caller's array; the smallest come straight from numpy."""
    line = lambda a: np.asarray(a).ctypes.data % buffers.ALIGN  # noqa: E731
    for n in (buffers.ALIGN_MIN // 4, 128 * 1024, buffers.MIN_BYTES // 4 + 16):  # floats
        out = buffers.empty((n,), np.float32)
        assert out.shape == (n,) and out.flags.c_contiguous and line(out) == 0
        assert buffers.aligned((2, n // 2), np.float32).ctypes.data % buffers.ALIGN == 0
    raw = np.zeros(512 * 1024 + 64, np.uint8)
    start = -raw.ctypes.data % 64 + 16  # numpy's heap arrays often start 16 bytes off a line
    off = raw[start:start + 512 * 1024].view(np.float32).reshape(256, 512)
    off[...] = (np.arange(off.size) % 1000).astype(np.float32).reshape(off.shape)
    a = mr.array(off)
    assert line(a) == 0
    np.testing.assert_array_equal(np.asarray(a), off)
    b = mr.array(off, mr.float16)  # a cast copy too
    assert line(b) == 0 and b.dtype == mr.float16
    np.testing.assert_array_equal(np.asarray(b), off.astype(np.float16))
    f = mr.compile(lambda x, w: x @ w)
    c = f(a, mr.array(np.ones((512, 64), np.float32)))
    assert line(c) == 0
    np.testing.assert_allclose(np.asarray(c), off.sum(1, keepdims=True).repeat(64, 1), rtol=1e-5)
    assert isinstance(mr.array(np.float32(2)).item(), float)  # 0-d and tiny: numpy's own


def test_data_pointer_reads_what_ctypes_reads():
    """buffers.data_pointer (the address every kernel call and aligned output reads from
    the array object) is `a.ctypes.data` for views, transposes, empty and 0-d arrays,
    other dtypes and ndarray subclasses (those take the slow path)."""
    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    arrays = [base, base[1:, 2:], base.T, base[::2], base.view(np.uint8), np.empty(0, np.int8),
              np.zeros((), np.int32), np.ma.masked_array(base), buffers.empty((64, 64), np.float32)]
    for a in arrays:
        assert buffers.data_pointer(a) == a.ctypes.data


# ---- compiled calls: the specialization found by shapes and dtypes ---------------------------

def test_compiled_call_cache_hits_and_new_specializations():
    calls = []

    def fun(x, y):
        calls.append(1)
        return mr.exp(-x) + y, x * y

    f = mr.compile(fun)
    a, b = np.arange(4, dtype=np.float32), np.ones(4, np.float32)
    for _ in range(3):
        out = f(mr.array(a), mr.array(b))
        assert isinstance(out, tuple) and len(out) == 2
        np.testing.assert_allclose(np.asarray(out[0]), np.exp(-a) + b, rtol=1e-6)
        np.testing.assert_allclose(np.asarray(out[1]), a * b)
    assert f.trace_count == 1
    f(mr.array(a.reshape(2, 2)), mr.array(b.reshape(2, 2)))  # new shapes
    f(mr.array(a.astype(np.int32)), mr.array(b.astype(np.int32)))  # new dtypes
    assert f.trace_count == 3
    out = f(mr.array(a) + 0, mr.array(b))  # a pending input is evaluated first
    np.testing.assert_allclose(np.asarray(out[1]), a * b)
    f(a, b)  # numpy arguments, keywords: the general path, same specialization
    f(x=mr.array(a), y=mr.array(b))
    assert f.trace_count == 5  # numpy leaves and keywords key traces of their own (as before)


def test_compiled_call_output_trees_and_results():
    f = mr.compile(lambda x: {"a": x + 1, "b": [x * 2]})
    x = mr.array(np.arange(3, dtype=np.float32))
    for _ in range(2):
        out = f(x)
        assert set(out) == {"a", "b"} and isinstance(out["b"], list)
        np.testing.assert_array_equal(np.asarray(out["b"][0]), [0, 2, 4])
    y = f(x)["a"]
    assert y.shape == (3,) and y.dtype is dt.float32 and y.device == mr.cpu
    y2 = y + 1  # the result is an ordinary array
    np.testing.assert_array_equal(np.asarray(y2), [2, 3, 4])


def test_compiled_call_respects_disable_and_traces():
    calls = []

    def fun(x):
        calls.append(1)
        return x * 3

    f = mr.compile(fun)
    x = mr.array(np.ones(2, np.float32))
    f(x)
    f(x)
    n = len(calls)
    mr.disable_compile()
    try:
        np.testing.assert_array_equal(np.asarray(f(x)), [3, 3])
        assert len(calls) == n + 1  # ran as Python
    finally:
        mr.enable_compile()
    g = mr.grad(lambda x: f(x).sum())(x)  # called on traced values: inlined
    np.testing.assert_array_equal(np.asarray(g), [3, 3])


def test_compiled_state_is_still_captured():
    state = [mr.array(np.zeros(2, np.float32))]

    def step(x):
        state[0] = state[0] + x
        return state[0]

    step_c = mr.compile(step, inputs=state, outputs=state)
    x = mr.array(np.ones(2, np.float32))
    for _ in range(3):
        step_c(x)
    np.testing.assert_array_equal(np.asarray(state[0]), [3, 3])
    assert step_c.trace_count == 1


# ---- the first compile: runtime libraries loaded only when a kernel calls them ---------------

def _child(code, tmp_path):
    r = subprocess.run([sys.executable, "-c", code], env={**os.environ, "MIRAX_CACHE_DIR": str(tmp_path)},
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


RUNNER_CHILD = textwrap.dedent("""
    import json, math
    import numpy as np
    import mirax as mr
    from mirax.runtime import cpu

    def runner_loaded():
        with open("/proc/self/maps") as f:
            return "libmlir_c_runner_utils" in f.read()

    out = {}
    x = np.linspace(-3, 3, 64, dtype=np.float32).reshape(8, 8)
    gelu = mr.compile(lambda x: x * (1 + mr.erf(x / math.sqrt(2))) / 2)
    # the first compile on the threads (OpenMP's __kmpc_* calls, which do not resolve
    # before libomp is loaded): the linked kernel's undefined symbols decide
    big = np.linspace(-3, 3, 64 * 4096, dtype=np.float32).reshape(64, 4096)
    g = np.asarray(gelu(mr.array(big)))[::97]
    ref = big[::97] * (1 + np.vectorize(math.erf)(big[::97] / math.sqrt(2))) / 2
    out["gelu_threads_ok"] = bool(np.allclose(g, ref, atol=1e-5))
    out["after_gelu_threads"] = runner_loaded()
    g = np.asarray(gelu(mr.array(x)))
    ref = x * (1 + np.vectorize(math.erf)(x / math.sqrt(2))) / 2
    out["gelu_ok"] = bool(np.allclose(g, ref, atol=1e-5))
    out["after_gelu"] = runner_loaded()
    y = np.asarray(mr.tanh(mr.array(x)) * 2 + mr.sum(mr.array(x), axis=1, keepdims=True))
    out["eager_ok"] = bool(np.allclose(y, np.tanh(x) * 2 + x.sum(1, keepdims=True), atol=1e-5))
    out["after_eager"] = runner_loaded()
    # a kernel calling the runner utilities (rtclock) loads them and runs
    k = cpu.compile_module('''
    func.func private @rtclock() -> f64
    func.func @kernel(%b: memref<1xf64>) attributes {llvm.emit_c_interface} {
      %t = func.call @rtclock() : () -> f64
      %c0 = arith.constant 0 : index
      memref.store %t, %b[%c0] : memref<1xf64>
      return
    }''', "kernel")
    b = np.zeros(1, np.float64)
    k([], [b])
    out["rtclock_ok"] = bool(b[0] > 0)
    out["after_rtclock"] = runner_loaded()
    # half floats keep every library (their conversions may call the runner's helpers)
    h = np.asarray(mr.array(x).astype(mr.bfloat16) * 2)
    out["bf16_ok"] = bool(np.allclose(h, x * 2, rtol=1e-2, atol=1e-2))
    print(json.dumps(out))
""")


def test_runner_utils_load_only_for_kernels_that_call_them(tmp_path):
    for run in ("cold", "warm"):  # compiled, then loaded from the disk cache by a new process
        out = _child(RUNNER_CHILD, tmp_path)
        assert out == {"gelu_ok": True, "after_gelu": False, "gelu_threads_ok": True,
                       "after_gelu_threads": False, "eager_ok": True, "after_eager": False,
                       "rtclock_ok": True, "after_rtclock": True, "bf16_ok": True}, (run, out)


def test_jit_libs_keeps_every_library_when_unsure(monkeypatch):
    from mlir import ir
    from mirax.runtime.context import context
    libs = cpu._shared_libs()
    runner = [p for p in libs if cpu._is_runner_utils(p)]
    assert runner
    # as in a process that has not loaded them yet
    monkeypatch.setattr(cpu, "_jit_loaded", set())
    monkeypatch.setattr(disk_cache, "_preloaded", {})
    with context(), ir.Location.unknown():
        plain = ir.Module.parse("llvm.func @f() {\n llvm.return\n}")
        unknown = ir.Module.parse("llvm.func @mirax_no_such_symbol()\nllvm.func @f() {\n llvm.return\n}")
        libc = ir.Module.parse("llvm.func @malloc(i64) -> !llvm.ptr\nllvm.func @f() {\n llvm.return\n}")
        ext = ir.Module.parse("llvm.mlir.global external @g() : i32")
    assert cpu._jit_libs(plain, "", libs) == [p for p in libs if p not in runner]
    assert cpu._jit_libs(libc, "", libs) == [p for p in libs if p not in runner]
    assert cpu._jit_libs(unknown, "", libs) == libs
    assert cpu._jit_libs(ext, "", libs) == libs
    assert cpu._jit_libs(plain, "tensor<4xbf16>", libs) == libs
    assert cpu._jit_libs(plain, "complex<f32>", libs) == libs
    monkeypatch.setattr(cpu, "_jit_loaded", set(runner))  # loaded already: nothing to save
    assert cpu._jit_libs(plain, "", libs) == libs


def test_tool_versions_match_the_installed_distributions():
    for dist, version in disk_cache._tool_versions().items():
        try:
            assert version == importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            assert version is None


def test_scalar_broadcasts_fold_without_kernels():
    """`x * 2` on a small array: mirax-simplify folds the broadcast of the splat 2 as a
    splat of the new shape (no eager kernel built); the values and the IR stay as before."""
    import math
    f = mr.compile(lambda x: x * (1 + mr.erf(x / math.sqrt(2))) / 2 + mr.where(x > 0, 1, -7))
    shape = (3, 17)  # a shape no other test uses: its broadcast kernels would be new
    x = np.linspace(-2, 2, 51, dtype=np.float32).reshape(shape)
    before = cpu_device.kernels.compiles
    text = f.lower(mr.array(x)).as_text("simplified")
    assert cpu_device.kernels.compiles == before  # folded as splats: nothing compiled
    # (`/ 2` is `* 0.5` there: mirax-simplify multiplies by a constant's reciprocal)
    assert "dense<5.000000e-01> : tensor<3x17xf32>" in text and "dense<-7> : tensor<3x17xi32>" in text
    assert "mirax.broadcast_to" not in text
    ref = x * (1 + np.vectorize(math.erf)(x / math.sqrt(2))) / 2 + np.where(x > 0, 1, -7)
    np.testing.assert_allclose(np.asarray(f(mr.array(x))), ref, rtol=1e-5, atol=1e-5)
    # a broadcast of a constant that is not a splat folds too (numpy's broadcast_to: exact)
    g = mr.compile(lambda x: x + mr.array(np.arange(17, dtype=np.float32)))
    np.testing.assert_array_equal(np.asarray(g(mr.array(x))), x + np.arange(17, dtype=np.float32))


def _fold_cases():
    """(primitive, params, inputs, out dtype) for each primitive mirax-simplify folds in
    numpy, on the values where C and numpy are most likely to part: NaN, infinities,
    signed zeros, subnormals, the integers' extremes."""
    f = np.array([np.nan, -np.inf, np.inf, -0.0, 0.0, 1e-45, -3.5, 2.5, 3e38, -7.0], np.float32)
    g = np.array([1.0, np.nan, -np.inf, 0.0, -0.0, 3.0, 2.0, -2.5, 3e38, 1e-45], np.float32)
    i32 = np.array([-2**31, 2**31 - 1, -1, 0, 1, 7, -7, 2**30, 5, -5], np.int32)
    j32 = np.array([-1, 1, 2**31 - 1, -2**31, 3, -7, 7, 2**30, 0, 5], np.int32)
    i64 = i32.astype(np.int64) * (2**33 + 1)
    b = np.array([True, False] * 5)
    c = np.array([False, False, True, True, False, True, True, False, True, False])
    cases = []
    for name in ("add", "subtract", "multiply", "divide"):
        cases += [(name, {}, [f, g], dt.float32), (name, {}, [f.astype(np.float64), g.astype(np.float64)], dt.float64)]
    for name in ("negative", "abs"):
        cases += [(name, {}, [f], dt.float32), (name, {}, [i32], dt.int32), (name, {}, [i64], dt.int64)]
    for name in ("add", "subtract", "multiply", "maximum", "minimum"):
        cases += [(name, {}, [i32, j32], dt.int32), (name, {}, [i64, i64[::-1].copy()], dt.int64)]
    for name in ("less", "less_equal", "greater", "greater_equal", "equal", "not_equal"):
        cases += [(name, {}, [i32, j32], dt.bool_), (name, {}, [b, c], dt.bool_)]
    for name in ("logical_and", "logical_or"):
        cases.append((name, {}, [b, c], dt.bool_))
    cases.append(("logical_not", {}, [b], dt.bool_))
    cases += [("astype", {"dtype": "int64"}, [i32], dt.int64), ("astype", {"dtype": "int32"}, [i64], dt.int32),
              ("astype", {"dtype": "int32"}, [b], dt.int32)]
    cases += [("arange", {"start": -3.0, "step": 4.0}, [], dt.int32)]
    cases += [("where", {}, [b, f, g], dt.float32), ("reshape", {"shape": (2, 5)}, [f], dt.float32),
              ("broadcast_to", {"shape": (3, 10)}, [i32], dt.int32), ("transpose", {"permutation": (1, 0)}, [f.reshape(2, 5)], dt.float32),
              ("slice", {"start": (1,), "stop": (9,), "strides": (3,)}, [f], dt.float32),
              ("concatenate", {"axis": 0}, [i32, j32], dt.int32)]
    return cases


@pytest.mark.parametrize("case", _fold_cases(), ids=lambda c: f"{c[0]}-{c[3].name}")
def test_folds_in_numpy_equal_the_kernels_bit_for_bit(case):
    """What mirax-simplify folds with a primitive's numpy reference (EXACT_IN_NUMPY) is
    what the primitive's kernel computes, bit for bit: a fold never changes a value."""
    from mirax.dialect import PRIMITIVES
    from mirax.lowering import mirax_simplify
    name, params, inputs, out_dtype = case
    prim = PRIMITIVES[name]
    ins = [Aval(x.shape, dt.from_numpy(x.dtype)) for x in inputs]
    shape = {"reshape": (2, 5), "broadcast_to": (3, 10), "transpose": (5, 2), "slice": (3,), "concatenate": (20,),
             "arange": (10,)}.get(name, inputs[-1].shape if inputs else ())
    out = Aval(shape, out_dtype)
    folded = mirax_simplify._numpy_fold(prim, params, inputs, ins, out)
    assert folded is not None, f"{name} is not folded in numpy"
    kernel = np.asarray(cpu_device.run(prim, params, ins, out, inputs))
    assert folded.dtype == kernel.dtype and folded.shape == kernel.shape
    assert folded.tobytes() == kernel.tobytes(), (folded, kernel)


def test_folds_outside_numpys_exact_set_use_the_kernel():
    """exp's numpy and kernel results may differ in the last bit: it folds through its
    kernel (and float maximum, integer division likewise)."""
    from mirax.dialect import PRIMITIVES
    from mirax.lowering import mirax_simplify
    x = np.array([0.5, 1.5], np.float32)
    a = Aval((2,), dt.float32)
    assert mirax_simplify._numpy_fold(PRIMITIVES["exp"], {}, [x], [a], a) is None
    assert mirax_simplify._numpy_fold(PRIMITIVES["maximum"], {}, [x, x], [a, a], a) is None
    i = Aval((2,), dt.int32)
    assert mirax_simplify._numpy_fold(PRIMITIVES["floor_divide"], {}, [x.astype(np.int32)] * 2, [i, i], i) is None
    # (an integer's conversion to float rounds: numpy's and the kernel's may differ)
    assert mirax_simplify._numpy_fold(PRIMITIVES["astype"], {"dtype": "float32"}, [x.astype(np.int32)], [i], a) is None


def test_a_causal_mask_folds_without_compiling_a_kernel():
    """The positions and causal mask of a transformer (arange, broadcasts, comparisons,
    where) fold in numpy: compiling the function builds no eager kernel for them."""
    def f(x):
        i = mr.arange(31)
        mask = mr.where(i[:, None] < i[None, :], -1e9, 0.0)
        return x + mask
    x = np.linspace(-1, 1, 31 * 31, dtype=np.float32).reshape(31, 31)  # (a shape no other test folds)
    before = cpu_device.kernels.compiles
    text = mr.compile(f).lower(mr.array(x)).as_text("simplified")
    assert cpu_device.kernels.compiles == before
    # (the mask, 961 booleans, is an i1 attribute MLIR would print as hex: written as text)
    assert "mirax.arange" not in text and "mirax.less" not in text and "mirax.where" not in text
    i = np.arange(31)
    np.testing.assert_array_equal(np.asarray(mr.compile(f)(mr.array(x))), x + np.where(i[:, None] < i[None, :], -1e9, 0.0).astype(np.float32))


def test_walk_ops_order_and_errors():
    """pass_base.walk_ops (MLIR's walk, plain operations): the nested ops in program
    order, the root left out, an error of `keep` raised as it is."""
    from mlir import ir
    from mirax.lowering.pass_base import walk_ops
    from mirax.runtime.context import context
    src = """
    func.func @f(%a: f32, %n: index) -> f32 {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %r = scf.for %i = %c0 to %n step %c1 iter_args(%x = %a) -> (f32) {
        %y = arith.addf %x, %a : f32
        %z = arith.mulf %y, %y : f32
        scf.yield %z : f32
      }
      %s = arith.subf %r, %a : f32
      return %s : f32
    }
    func.func @g() {
      return
    }"""

    def recursive(op, keep, out):
        for region in op.regions:
            for block in region.blocks:
                for child in block.operations:
                    if keep(child.operation.name):
                        out.append(child.operation.name)
                    recursive(child.operation, keep, out)
        return out

    with context(), ir.Location.unknown():
        m = ir.Module.parse(src)
        for keep in (lambda n: True, lambda n: n.startswith("arith."), lambda n: n == "func.return"):
            assert [o.name for o in walk_ops(m.operation, keep)] == recursive(m.operation, keep, [])
        loop = walk_ops(m.operation, lambda n: n == "scf.for")[0]
        assert [o.name for o in walk_ops(loop, lambda n: True)] == ["arith.addf", "arith.mulf", "scf.yield"]
        assert walk_ops(walk_ops(m.operation, lambda n: n == "func.func")[1], lambda n: n == "arith.addf") == []
        ops = walk_ops(m.operation, lambda n: n == "arith.subf")
        assert isinstance(ops[0], ir.Operation) and str(ops[0]).startswith("%")  # usable after the walk

        def bad(name):
            if name == "arith.mulf":
                raise KeyError("mulf")
            return False
        with pytest.raises(KeyError, match="mulf"):
            walk_ops(m.operation, bad)
