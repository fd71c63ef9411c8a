"""optimize_matmuls (lowering/matmul_codegen.py): the tiled, vectorized, two-thread matmul
against numpy, through the standalone driver (optimize_matmuls + PASSES_AFTER + JIT)."""
import math
import re

import numpy as np
import pytest
from mlir import ir
from mlir.passmanager import PassManager

from mirax import tune
from mirax.lowering import host_cpu, matmul_codegen as mc, tuning


def _t(shape, dt):
    return "tensor<" + "x".join(map(str, shape)) + "x" + dt + ">"


def matmul_text(m, n, k, batch=None, dt="f32", transpose_a=False):
    """`@mm(A, B) = A @ B` from zeros; `transpose_a`: A stored K x M, read transposed."""
    lead = (batch,) if batch else ()
    a = _t(lead + ((k, m) if transpose_a else (m, k)), dt)
    b, c = _t(lead + (k, n), dt), _t(lead + (m, n), dt)
    zero = "0.0" if dt.startswith(("f", "bf")) else "0"
    op = "linalg.batch_matmul" if batch else "linalg.matmul"
    maps = ("indexing_maps = [affine_map<(m, n, k) -> (k, m)>, affine_map<(m, n, k) -> (k, n)>, "
            "affine_map<(m, n, k) -> (m, n)>] ") if transpose_a else ""
    return f"""
func.func @mm(%a: {a}, %b: {b}) -> {c} attributes {{llvm.emit_c_interface}} {{
  %z = arith.constant {zero} : {dt}
  %e = tensor.empty() : {c}
  %f = linalg.fill ins(%z : {dt}) outs(%e : {c}) -> {c}
  %r = {op} {maps}ins(%a, %b : {a}, {b}) outs(%f : {c}) -> {c}
  return %r : {c}
}}"""


def transformed(text, config=None):
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        script = mc.optimize_matmuls(module, return_script=True, config=config)
        return script, str(module)


needs_openmp = pytest.mark.skipif(mc.openmp_library() is None,
                                  reason="no LLVM OpenMP runtime (apt-get install libomp5 or pip install intel-openmp)")


def run(text, a, b, out_shape, dtype=np.float32, optimize=True):
    mm = mc.compile_standalone(text, "mm", optimize=optimize)
    out = np.full(out_shape, -7, dtype)  # every element must be written
    mm([a, b], [out])
    return out


def check(out, a, b):
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    # rtol 1e-4 on the products' scale: f32 sums of K terms of mixed signs
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


SHAPES = [  # (batch, M, N, K)
    (None, 1024, 1024, 1024),
    (None, 1000, 1030, 999),   # nothing divides: padded
    (None, 2048, 64, 512),     # tall
    (None, 64, 2048, 512),     # wide
    (None, 128, 128, 4096),    # long K (partial k cache tiles)
    (None, 96, 544, 300),      # N divides the register tile but not the cache tile
    (8, 256, 256, 256),
    (3, 100, 130, 70),         # batched and padded
    (None, 1536, 24, 64),      # the transformer's logits: rows and columns padded, ragged tasks
]


@needs_openmp
@pytest.mark.parametrize("batch,m,n,k", SHAPES)
def test_matches_numpy(rng, batch, m, n, k):
    lead = (batch,) if batch else ()
    a = rng.standard_normal(lead + (m, k), dtype=np.float32)
    b = rng.standard_normal(lead + (k, n), dtype=np.float32)
    text = matmul_text(m, n, k, batch)
    # (the tiled outer products: the skinny shapes would be dot products, test_matmul_dot.py)
    with tuning.override(matmul_dot={"max_vectors": 0}):
        script, ir_text = transformed(text)
        assert script is not None, "this shape should be transformed"
        assert "scf.forall" in ir_text and "vector.fma" in ir_text
        # (only a split product's corner piece, too small for tiles, is left to the generic lowering)
        min_flops = mc.tuning.table()["matmul"][("linalg.matmul", "f32")]["min_flops"]
        assert all(2 * math.prod(int(x) for x in shape.split("x")) * k < min_flops
                   for shape in re.findall(r"linalg\.(?:batch_)?matmul .*outs\(%\S+ : tensor<(\S+)xf32>\)", ir_text))
        check(run(text, a, b, lead + (m, n)), a, b)


def test_padding_only_when_needed():
    tile = dict(mr=8, nr=32, pack_b=0)  # the register tile differs by host: fix one
    assert "structured.pad" not in transformed(matmul_text(1024, 1024, 1024), tile)[0]
    assert "structured.pad" in transformed(matmul_text(1000, 1030, 999), tile)[0]
    assert "structured.pad" not in transformed(matmul_text(512, 512, 999), tile)[0]  # any K works


@pytest.mark.parametrize("text", [
    matmul_text(16, 16, 16),                   # small: not worth it
    matmul_text(256, 256, 256, dt="f64"),      # other dtypes: generic lowering
    matmul_text(256, 256, 256, dt="i32"),
])
def test_skipped_ops_are_left_alone(text):
    script, ir_text = transformed(text)
    assert script is None
    assert ("linalg.matmul" in ir_text) and "scf.forall" not in ir_text and mc.MARK not in ir_text


def test_matrix_vector_products_are_tiled_only_when_padding_is_bounded(rng):
    """A matrix times one column pads N to the host's narrowest register tile: tiled when
    that wastes at most `max_pad_skinny` (AVX2's 4-wide half-register tile: 4x; tiled, the
    padded product of 4096x256 by one column ran 2.5-3x faster than the generic lowering,
    Emerald Rapids under MIRAX_CPU_MAX_ISA=avx2), left alone when it wastes more (AVX-512's
    8-wide half tile); the product is right either way. Where lowering/matmul_dot.py makes
    it dot products along K (a native AVX2 host), no tile is planned at all."""
    cfg = mc.tuning.table()["matmul"][("linalg.matmul", "f32")]
    narrowest = min(nr for _, nr in mc.tuning.register_tiles(host_cpu.host(), every=True))
    text = matmul_text(4096, 1, 256)
    script, ir_text = transformed(text)
    dots = "linalg.matmul" not in ir_text and "vector.reduction <add>" in ir_text
    if not dots:
        assert (script is None) == (narrowest > cfg["max_pad_skinny"]), (narrowest, script)
    a = rng.standard_normal((4096, 256), dtype=np.float32)
    b = rng.standard_normal((256, 1), dtype=np.float32)
    check(run(text, a, b, (4096, 1)), a, b)


def test_dynamic_shapes_are_left_alone():
    text = """
func.func @mm(%a: tensor<?x256xf32>, %b: tensor<256x256xf32>, %c: tensor<?x256xf32>) -> tensor<?x256xf32> {
  %r = linalg.matmul ins(%a, %b : tensor<?x256xf32>, tensor<256x256xf32>) outs(%c : tensor<?x256xf32>) -> tensor<?x256xf32>
  return %r : tensor<?x256xf32>
}"""
    script, ir_text = transformed(text)
    assert script is None and "linalg.matmul" in ir_text


@needs_openmp
@pytest.mark.parametrize("dt,np_dt", [("f64", np.float64), ("i32", np.int32)])
def test_skipped_dtypes_still_compute(rng, dt, np_dt):
    a = (rng.standard_normal((96, 80)) * 4).astype(np_dt)
    b = (rng.standard_normal((80, 112)) * 4).astype(np_dt)
    out = run(matmul_text(96, 112, 80, dt=dt), a, b, (96, 112), np_dt)
    np.testing.assert_allclose(out, np.matmul(a, b), rtol=1e-10)


def test_failed_script_restores_the_module(monkeypatch):
    text = matmul_text(256, 256, 256)
    # a script that tiles, then fails: tiling a loop is an error
    monkeypatch.setattr(mc, "op_script", lambda i, name, p: [
        f"%t, %l = transform.structured.tile_using_forall %m{i} tile_sizes [64, 0] : "
        "(!transform.any_op) -> (!transform.any_op, !transform.any_op)",
        "%t2, %l2 = transform.structured.tile_using_for %l tile_sizes [8] : "
        "(!transform.any_op) -> (!transform.any_op, !transform.any_op)"])
    with pytest.warns(UserWarning, match="transform failed"):
        script, ir_text = transformed(text)
    assert script is None
    assert "linalg.matmul" in ir_text and "scf.forall" not in ir_text and mc.MARK not in ir_text


@needs_openmp
def test_after_convert_mirax_to_linalg(rng):
    """The hook's real input: a mirax function lowered by convert-mirax-to-linalg."""
    from mlir.passmanager import PassManager
    from mirax.lowering import ConvertMiraxToLinalg
    from mirax.runtime.context import new_context

    text = """
func.func @mm(%a: tensor<2x192x320xf32>, %b: tensor<2x320x256xf32>) -> tensor<2x192x256xf32> attributes {llvm.emit_c_interface} {
  %0 = "mirax.matmul"(%a, %b) : (tensor<2x192x320xf32>, tensor<2x320x256xf32>) -> tensor<2x192x256xf32>
  return %0 : tensor<2x192x256xf32>
}"""
    ctx = new_context()
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(text)
        pm = PassManager("builtin.module")
        ConvertMiraxToLinalg().add_to(pm)
        pm.run(module.operation)
        linalg_text = str(module)
    assert "linalg.batch_matmul" in linalg_text
    script, ir_text = transformed(linalg_text)
    assert script is not None and "scf.forall" in ir_text
    a = rng.standard_normal((2, 192, 320), dtype=np.float32)
    b = rng.standard_normal((2, 320, 256), dtype=np.float32)
    check(run(linalg_text, a, b, (2, 192, 256)), a, b)


CHAIN = """
func.func @mm(%a: tensor<256x256xf32>, %b: tensor<256x256xf32>) -> (tensor<256x256xf32>, tensor<256x256xf32>) attributes {llvm.emit_c_interface} {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<256x256xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<256x256xf32>) -> tensor<256x256xf32>
  %x = linalg.matmul ins(%a, %b : tensor<256x256xf32>, tensor<256x256xf32>) outs(%f : tensor<256x256xf32>) -> tensor<256x256xf32>
  %y = linalg.matmul ins(%x, %b : tensor<256x256xf32>, tensor<256x256xf32>) outs(%f : tensor<256x256xf32>) -> tensor<256x256xf32>
  %w = linalg.matmul ins(%y, %a : tensor<256x256xf32>, tensor<256x256xf32>) outs(%f : tensor<256x256xf32>) -> tensor<256x256xf32>
  %v = linalg.add ins(%x, %w : tensor<256x256xf32>, tensor<256x256xf32>) outs(%e : tensor<256x256xf32>) -> tensor<256x256xf32>
  return %v, %y : tensor<256x256xf32>, tensor<256x256xf32>
}"""


def test_each_product_is_tiled_in_a_function_of_its_own(monkeypatch):
    """The script's transforms cost the size of the function around their target
    (`fuse_into_containing_op` verifies and numbers it for a diagnostic, canonicalization
    and CSE walk it): run in the program's one function, a training step with ~25
    matmuls a layer cost (matmuls x program) to compile. Each product (and its zero
    fill) is moved into a small function for it, then put back."""
    seen = []
    apply = mc.apply_transform

    def spy(root, script, backup=None):
        if not seen:  # the tiling script: the ops of every function, by function
            funcs = [op for op in mc.walk_ops(root, lambda n: n == "func.func")]
            seen.append({ir.StringAttr(f.attributes["sym_name"]).value:
                         [op.name for op in mc.walk_ops(f, lambda n: True)] for f in funcs})
        return apply(root, script, backup)

    monkeypatch.setattr(mc, "apply_transform", spy)
    # a register tile that divides 256 on every host (AVX2's derived 6x16 would split each
    # product into two pieces, each in a function of its own)
    lanes = host_cpu.host().f32_lanes
    script, text = transformed(CHAIN, config=dict(min_flops=0, mr=4, nr=2 * lanes))
    assert script is not None and text.count("vector.fma") and "linalg.matmul" not in text
    assert mc.KERNEL not in text and mc.CLEAN not in text
    (funcs,) = seen
    kernels = {k: v for k, v in funcs.items() if k.startswith(mc.KERNEL)}
    assert len(kernels) == 3
    for ops in kernels.values():  # a product, its fill, their constants and bodies
        assert ops.count("linalg.matmul") == 1 and len(ops) <= 10, ops
    assert "linalg.matmul" not in funcs["mm"] and funcs["mm"].count("func.call") == 3
    assert text.count("tensor.empty") == 1  # the copies merged again: one buffer


@needs_openmp
def test_products_sharing_a_fill(rng):
    a = rng.standard_normal((256, 256), dtype=np.float32)
    b = rng.standard_normal((256, 256), dtype=np.float32)
    mm = mc.compile_standalone(CHAIN, "mm")
    v, y = np.full((256, 256), -7, np.float32), np.full((256, 256), -7, np.float32)
    mm([a, b], [v, y])
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    x = a64 @ b64
    np.testing.assert_allclose(y, x @ b64, rtol=1e-3, atol=1e-3 * np.abs(x @ b64).max())
    w = (x @ b64) @ a64
    np.testing.assert_allclose(v, x + w, rtol=1e-3, atol=1e-3 * np.abs(w).max())


def test_tiles_come_from_the_tuning_table():
    from mirax.lowering import tuning
    for name in ("linalg.matmul", "linalg.batch_matmul"):
        cfg = tuning.matmul_config(name, "f32", 2 if "batch" in name else None, 512, 512, 512)
        assert cfg["forall_m"] % cfg["mr"] == 0 and cfg["nc"] % cfg["nr"] == 0
        assert {"forall_m", "nc", "kc", "mr", "nr", "min_flops", "max_pad"} <= set(cfg)
    assert tuning.matmul_config("linalg.matmul", "f64", None, 512, 512, 512) is None


def test_runs_as_a_python_pass_in_a_pipeline():
    """How the CPU pipeline calls it: a Python pass between upstream passes."""
    from mlir.passmanager import PassManager
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(matmul_text(512, 512, 512))
        pm = PassManager.parse("builtin.module(canonicalize)")
        pm.add(lambda op, *_: mc.optimize_matmuls(op))
        pm.add("cse")
        pm.run(module.operation)
        text = str(module)
    assert "scf.forall" in text and "vector.fma" in text and "linalg.matmul" not in text


def test_lowering_helpers(rng):
    """openmp_dynamic_schedule and strided_copies_to_linalg change what they should."""
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(matmul_text(1000, 1030, 999))
        mc.optimize_matmuls(module, config=dict(threads=1))  # (with threads, the padding copies are linalg.copy)
        from mlir.passmanager import PassManager
        PassManager.parse("builtin.module(" + ",".join(["canonicalize", "cse"] + mc.BUFFERIZE) + ")").run(
            module.operation)
        assert "memref.copy" in str(module)
        from mirax.lowering.strided_copies import strided_copies_to_linalg
        strided_copies_to_linalg(module)
        text = str(module)  # (a copy of short runs is vectorized whole: no linalg.copy is left)
        assert "memref.copy" not in text and ("linalg.copy" in text or "vector.transfer_read" in text)
        PassManager.parse("builtin.module(scf-forall-to-parallel,convert-scf-to-openmp)").run(module.operation)
        mc.openmp_dynamic_schedule(module, min_task_macs=1000 * 1030 * 999 + 1)  # (tasks smaller: static)
        assert "schedule(dynamic)" not in str(module)
        mc.openmp_dynamic_schedule(module)
        assert "schedule(dynamic)" in str(module)
        loops = mc._walk(module.operation, "omp.wsloop")
        least = tuning.table()["matmul"][("linalg.matmul", "f32")]["dynamic_min_task_macs"]
        big = [any(mc._task_macs(f) >= least for f in mc._walk(w, "vector.fma")) for w in loops]
        assert [("schedule_kind" in w.attributes) for w in loops] == big


def test_only_matmul_tasks_are_dynamically_scheduled():
    """In a compiled program, the matmul's tasks are handed out dynamically (schedule
    dynamic, then mirax-task-counter: an atomic counter in place of the OpenMP loop); the
    row loop of a softmax beside it stays static (one dispatch call an iteration
    otherwise): mirax-static-partition's block a thread by thread number."""
    import mirax as mr
    from mirax.lowering import tuning
    if tuning.threads() < 2:
        pytest.skip("one thread: no OpenMP loops")
    x = mr.array(np.ones((256, 512), np.float32))
    w = mr.array(np.ones((512, 512), np.float32))
    text = mr.compile(lambda x, w: mr.softmax(x @ w, axis=-1)).lower(x, w).as_text("llvm")
    static = text.count("llvm.call @omp_get_thread_num()")
    assert "omp.wsloop" not in text and static >= 1
    assert text.count("omp.parallel") == static + 1 and text.count("llvm.atomicrmw add") == 1


def test_small_matmul_tasks_stay_static():
    """Products of tiny matrices in a batch (a transformer's attention scores: a task a
    product, ~37k multiply-adds) keep the static schedule: a dispatch call a task cost
    more than it balanced."""
    import mirax as mr
    from mirax.lowering import tuning
    if tuning.threads() < 2:
        pytest.skip("one thread: no OpenMP loops")
    q = mr.array(np.ones((128, 48, 16), np.float32))
    k = mr.array(np.ones((128, 16, 48), np.float32))
    text = mr.compile(lambda q, k: q @ k).lower(q, k).as_text("llvm")
    assert "llvm.call @omp_get_thread_num()" in text and "llvm.atomicrmw" not in text  # (static blocks)
    np.testing.assert_allclose(np.asarray(mr.compile(lambda q, k: q @ k)(q, k)), np.full((128, 48, 48), 16.0))


@pytest.mark.parametrize("m,k,form", [(4096, 256, "vector"), (256, 4096, "column"), (7, 3, "vector"),
                                      (1000, 999, "column"), (512, 1024, "row.T"), (512, 1024, "row.reshape")])
def test_matrix_times_vector_is_a_vectorized_row_reduction(rng, m, k, form):
    """x @ v compiles to a row reduction, not a linalg.matmul left to the generic lowering
    (a strict in-order sum an element at a time, on one thread: 4096x4096 by a vector 16
    ms, numpy 1.5), vectorized with partial sums (mirax-fuse-reductions: 1.9 ms), whatever
    v's form: (K,), a (K, 1) column, a (1, K) row transposed or reshaped to (K,) (their
    loops of extent 1 dropped first: they were left scalar, 6.5-9.4 ms); the result is
    numpy's to f32 rounding."""
    import mirax as mr
    x = rng.standard_normal((m, k), dtype=np.float32)
    v = rng.standard_normal({"vector": (k,), "column": (k, 1)}.get(form, (1, k)), dtype=np.float32)
    fn = {"row.T": lambda a, b: a @ b.T, "row.reshape": lambda a, b: a @ b.reshape(-1)}.get(form, lambda a, b: a @ b)
    f = mr.compile(fn)
    low = f.lower(mr.array(x), mr.array(v))
    assert "linalg.matmul" not in low.as_text("linalg")
    if m * k >= 1 << 16:
        assert re.search(r"vector<\d+xf32>", low.as_text("llvm"))
        assert re.search(r"vector\.reduction <add>", low.as_text("optimized"))
    out = np.asarray(f(mr.array(x), mr.array(v)))
    ref = fn(x.astype(np.float64), v.astype(np.float64))
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
    np.testing.assert_allclose(np.asarray(fn(mr.array(x), mr.array(v))), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


@pytest.mark.parametrize("m,n,k", [(784, 512, 256), (100, 130, 70), (64, 96, 33)])
def test_transposed_first_operand_is_folded(rng, m, n, k):
    """x.T @ g through mr.compile: the transpose folds into the matmul (no copy)."""
    import mirax as mr
    x = rng.standard_normal((k, m), dtype=np.float32)
    g = rng.standard_normal((k, n), dtype=np.float32)
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(f"""
func.func @f(%x: tensor<{k}x{m}xf32>, %g: tensor<{k}x{n}xf32>, %c: tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32> {{
  %e = tensor.empty() : tensor<{m}x{k}xf32>
  %t = linalg.transpose ins(%x : tensor<{k}x{m}xf32>) outs(%e : tensor<{m}x{k}xf32>) permutation = [1, 0]
  %r = linalg.matmul ins(%t, %g : tensor<{m}x{k}xf32>, tensor<{k}x{n}xf32>) outs(%c : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  return %r : tensor<{m}x{n}xf32>
}}""")
        assert mc.fold_transposed_a(module.operation, dict(min_flops=0)) == 1
        assert "linalg.transpose" not in str(module)
    out = mr.compile(lambda a, b: a.T @ b)(mr.array(x), mr.array(g))
    check(np.asarray(out), x.T.copy(), g)


@pytest.mark.parametrize("m,n,k", [(784, 512, 256), (100, 130, 70)])
def test_transposed_weight_gradient_is_the_product_of_the_swapped_operands(rng, m, n, k):
    """(x.T @ g).T -- a weight's gradient through x @ W.T -- becomes g.T @ x with both
    read in place: no transpose is left, and the values are those of numpy."""
    import mirax as mr
    x = rng.standard_normal((k, m), dtype=np.float32)
    g = rng.standard_normal((k, n), dtype=np.float32)
    text = f"""
func.func @f(%x: tensor<{k}x{m}xf32>, %g: tensor<{k}x{n}xf32>) -> tensor<{n}x{m}xf32> {{
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<{m}x{k}xf32>
  %t = linalg.transpose ins(%x : tensor<{k}x{m}xf32>) outs(%e : tensor<{m}x{k}xf32>) permutation = [1, 0]
  %c0 = tensor.empty() : tensor<{m}x{n}xf32>
  %c = linalg.fill ins(%z : f32) outs(%c0 : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  %r = linalg.matmul ins(%t, %g : tensor<{m}x{k}xf32>, tensor<{k}x{n}xf32>) outs(%c : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  %e2 = tensor.empty() : tensor<{n}x{m}xf32>
  %w = linalg.transpose ins(%r : tensor<{m}x{n}xf32>) outs(%e2 : tensor<{n}x{m}xf32>) permutation = [1, 0]
  return %w : tensor<{n}x{m}xf32>
}}"""
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        assert mc.fold_transposed_a(module.operation, dict(min_flops=0)) == 1
        assert mc.fold_transposed_products(module.operation, dict(min_flops=0)) == 1
        assert "linalg.transpose" not in str(module)
        assert "ins(%arg1, %arg0" in str(module)  # g read transposed, x as it is
    out = mr.compile(lambda a, b: (a.T @ b).T)(mr.array(x), mr.array(g))
    check(np.asarray(out), g.T.copy(), x)
    # ...also with an elementwise user (an SGD update): mirax-fuse leaves that transpose for
    # the fold instead of fusing it into the update as strided reads
    w = rng.standard_normal((n, m), dtype=np.float32)
    step = mr.compile(lambda a, b, v: v - 0.5 * (a.T @ b).T)
    low = step.lower(mr.array(x), mr.array(g), mr.array(w)).as_text("optimized")
    assert "linalg.transpose" not in low and f"tensor<{m}x{n}xf32>" not in low  # (no x.T @ g product)
    np.testing.assert_allclose(np.asarray(step(mr.array(x), mr.array(g), mr.array(w))),
                               w - 0.5 * (g.T.astype(np.float64) @ x), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("m,n,k", [(256, 512, 784), (100, 70, 130), (33, 65, 257)])
@pytest.mark.parametrize("pack_a", [0, 1])
def test_transposed_second_operand_is_repacked_in_place(rng, m, n, k, pack_a):
    """x @ W.T (MLX's Linear) -- linalg.matmul(x, linalg.transpose(W)) -- becomes one
    matmul reading W (N x K) transposed: B's panels are repacked from W's layout (no
    transpose of W of its own), padded where the tile does not divide N; the values are
    numpy's. With C not zero-filled (an accumulating product) it is left as it was."""
    import mirax as mr
    x = rng.standard_normal((m, k), dtype=np.float32)
    w = rng.standard_normal((n, k), dtype=np.float32)
    text = f"""
func.func @f(%x: tensor<{m}x{k}xf32>, %w: tensor<{n}x{k}xf32>, %acc: tensor<{m}x{n}xf32>) -> (tensor<{m}x{n}xf32>, tensor<{m}x{n}xf32>) {{
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<{k}x{n}xf32>
  %t = linalg.transpose ins(%w : tensor<{n}x{k}xf32>) outs(%e : tensor<{k}x{n}xf32>) permutation = [1, 0]
  %c0 = tensor.empty() : tensor<{m}x{n}xf32>
  %c = linalg.fill ins(%z : f32) outs(%c0 : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  %r = linalg.matmul ins(%x, %t : tensor<{m}x{k}xf32>, tensor<{k}x{n}xf32>) outs(%c : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  %e2 = tensor.empty() : tensor<{k}x{n}xf32>
  %t2 = linalg.transpose ins(%w : tensor<{n}x{k}xf32>) outs(%e2 : tensor<{k}x{n}xf32>) permutation = [1, 0]
  %s = linalg.matmul ins(%x, %t2 : tensor<{m}x{k}xf32>, tensor<{k}x{n}xf32>) outs(%acc : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  return %r, %s : tensor<{m}x{n}xf32>, tensor<{m}x{n}xf32>
}}"""
    cfg = dict(min_flops=0, max_pad=4, pack_a=pack_a, rows_outer=0)
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        assert mc.fold_transposed_b(module.operation, cfg) == 1  # (not the accumulating one)
        assert str(module).count("linalg.transpose") == 1 and mc.TRANSPOSED_B.split(", ")[1] in str(module)
    f = mr.compile(lambda a, b: a @ b.T)
    out = f(mr.array(x), mr.array(w))
    check(np.asarray(out), x, w.T.copy())


@pytest.mark.parametrize("pack_a,rows_outer", [(0, 0), (1, 0), (1, 1)])
@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("m,n,k,split", [(256, 1024, 96, 0), (100, 130, 70, 0), (100, 130, 70, 1)])
def test_repacked_b_matches_numpy(rng, pack_a, rows_outer, transpose_a, m, n, k, split):
    """pack_b: B as nr-wide panels, GotoBLAS loop order, padded M and N (or split), A read
    transposed in place; pack_a: A as mr-row panels too (from either layout); rows_outer:
    the threads' rows outermost, each task zero-filling its own rows."""
    a = rng.standard_normal((k, m) if transpose_a else (m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    text = matmul_text(m, n, k, transpose_a=transpose_a)
    cfg = dict(mr=8, nr=32, kc=64, nc=64, forall_m=32, min_flops=0, max_pad=4, pack_b=1, pack_a=pack_a,
               rows_outer=rows_outer, split=split)
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        script = mc.optimize_matmuls(module, config=cfg, return_script=True)
        # the packed product's script: its rows (dim 1 of the contraction: row panels of
        # mr when A is packed) split over the threads
        forall = r"\[0, \d+, 0, 0, 0\]" if pack_a else r"\[0, \d+, 0, 0\]"
        assert script is not None and re.search(r"tile_using_forall \S+ tile_sizes " + forall, script)
        assert "permutation = [1, 0, 2]" in str(module)
        if pack_a:  # A's panels: [M/mr][K][mr]
            assert ("permutation = [1, 0, 2]" if transpose_a else "permutation = [0, 2, 1]") in str(module)
            assert re.search(r"tensor<\d+x%dx8xf32>" % k, str(module))
        # the repackings and the zero fill are split over the threads too (mirax-parallelize)
        if rows_outer:  # C's fill and A's repacking moved into the tasks: each its own rows
            assert re.search(r"fuse_into_containing_op %fill\d+ into %forall", script)
            assert re.search(r"fuse_into_containing_op %pa\d+ into %forall", script)
            a_perm = "[1, 0, 2]" if transpose_a else "[0, 2, 1]"
            a_packs = [op for op in mc._walk(module.operation, "linalg.transpose")
                       if f"permutation = {a_perm}" in str(op) and re.search(r"x%dx8xf32>" % k, str(op))]
            assert a_packs and all(op.parent.name == "scf.forall" for op in a_packs)
        # (C's zero fill is gone: its tiles start from zeros in K's first slice)
        marked = (2 if pack_a else 1) - rows_outer
        assert ("linalg.fill" in str(module)) == bool(split)  # (split: the remainders' own products)
        assert str(module).count("{mirax.parallel}") == (marked if mc.tuning.threads() > 1 else 0)
    fn = mc.compile_standalone(text, "mm", config=cfg)
    out = np.full((m, n), np.nan, np.float32)
    fn([a, b], [out])
    check(out, a.T.copy() if transpose_a else a, b)


@pytest.mark.parametrize("n,nr", [(32, 32), (16, 16), (64, 32)])
def test_register_tile_leaves_the_k_loop(rng, n, nr):
    """A batched product whose register tile spans all (or part) of a task's columns, as a
    transformer's attention weights times its values: C's tile is carried through the k
    loop as a vector, not read and written every step (when the tile covered the
    columns, canonicalization replaced the k loop under its handle and the hoisting
    missed it: 12 stores an FMA step), and the values are numpy's."""
    batch, m, k = 6, 48, 48
    text = matmul_text(m, n, k, batch=batch)
    cfg = dict(mr=8, nr=nr, kc=256, nc=512, forall_m=64, min_flops=0, pack_b=0, split=0)
    _, out = transformed(text, cfg)
    inner = [blk for blk in out.split("scf.for ")[1:] if "vector.fma" in blk.split("scf.yield")[0]]
    assert inner and all("vector.transfer_write" not in blk.split("scf.yield")[0] for blk in inner), out
    assert re.search(rf"iter_args\(.+\) -> \(tensor<1x{m}x{n}xf32>, vector<8x{nr}xf32>\)", out), out
    a = rng.standard_normal((batch, m, k), dtype=np.float32)
    b = rng.standard_normal((batch, k, n), dtype=np.float32)
    with mc.tuning.override(matmul={mc.tuning.shape_class("linalg.batch_matmul", batch, m, n, k):
                                    dict(cfg, dtype="f32")}):
        check(run(text, a, b, (batch, m, n)), a, b)


PACKED = dict(mr=8, nr=32, kc=64, nc=64, forall_m=32, min_flops=0, max_pad=4, pack_b=1)


@pytest.mark.parametrize("shape,cfg", [
    ((256, 1024, 96, None), dict(PACKED, pack_a=0, rows_outer=0, split=0)),
    ((256, 1024, 96, None), dict(PACKED, pack_a=1, rows_outer=1, split=0)),
    ((100, 130, 70, None), dict(PACKED, pack_a=1, rows_outer=0, split=1)),
    ((64, 96, 70, 5), dict(PACKED, split=0)),
    ((48, 32, 48, 16), dict(PACKED, kc=256, nc=512, forall_m=64, split=0)),
    ((1000, 1000, 1000, None), dict(mr=6, nr=16, kc=1024, nc=128, pack_a=1, pack_b=1, rows_outer=1,
                                    forall_m=192, split=1, min_flops=0)),
    ((256, 512, 784, None), dict(mr=6, nr=16, kc=128, nc=1024, pack_b=0, forall_m=48, split=1, min_flops=0))],
    ids=["packed", "packed_a_rows", "packed_split", "packed_batched", "packed_small", "1000", "mlp"])
def test_every_fma_loop_carries_c_in_registers(shape, cfg):
    """Packed or not, split or not: no loop of FMAs writes C (its tile is hoisted out, read
    before and written after; test_register_tile_leaves_the_k_loop's bug, checked on the
    other code paths)."""
    m, n, k, batch = shape
    _, out = transformed(matmul_text(m, n, k, batch=batch), cfg)
    inner = [blk.split("scf.yield")[0] for blk in out.split("scf.for ")[1:] if "vector.fma" in blk.split("scf.yield")[0]]
    assert inner and not any("vector.transfer_write" in blk for blk in inner), out


@pytest.mark.parametrize("m,n,k,kc", [(64, 96, 70, 64), (64, 96, 70, 128), (30, 100, 50, 64)])
def test_repacked_batched_b_matches_numpy(rng, m, n, k, kc):
    """A batched product with pack_b: the threads split the batch, each task repacking its
    own B into nr-wide panels (a buffer of the task's size, not of the batch's) and
    zero-filling its own C inside the parallel loop (no
    repacking of the whole batch before it); with K in one slice its register tiles start
    from zeros (no fill). Padded M and N (30 x 100 on 8 x 32 tiles) too."""
    batch = 5
    a = rng.standard_normal((batch, m, k), dtype=np.float32)
    b = rng.standard_normal((batch, k, n), dtype=np.float32)
    at, bt, ct = _t(a.shape, "f32"), _t(b.shape, "f32"), _t((batch, m, n), "f32")
    text = f"""
func.func @mm(%a: {at}, %b: {bt}) -> {ct} attributes {{llvm.emit_c_interface}} {{
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : {ct}
  %f = linalg.fill ins(%z : f32) outs(%e : {ct}) -> {ct}
  %r = linalg.batch_matmul ins(%a, %b : {at}, {bt}) outs(%f : {ct}) -> {ct}
  return %r : {ct}
}}"""
    cfg = dict(mr=8, nr=32, kc=kc, nc=64, forall_m=32, min_flops=0, max_pad=4, pack_b=1, split=0)
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        script = mc.optimize_matmuls(module, config=cfg, return_script=True)
        assert re.search(r"tile_using_forall \S+ tile_sizes \[1, 0, 0, 0, 0\]", script)
        assert re.search(r"fuse_into_containing_op %pb\d+ into %forall", script)
        packs = [op for op in mc._walk(module.operation, "linalg.transpose")
                 if "permutation = [0, 2, 1, 3]" in str(op)]
        assert packs and all(op.parent.name == "scf.forall" for op in packs)  # each task its own B,
        panels = [mc.defining_op(op.operands[1]) for op in packs]  # in a buffer of its own
        assert all(e.name == "tensor.empty" and e.parent.name == "scf.forall" for e in panels)
        assert "{mirax.parallel}" not in str(module)  # nothing left to split over the threads
        fills = list(mc._walk(module.operation, "linalg.fill"))
        assert not fills if kc >= k and (m, n) == (64, 96) else True  # C written once
    fn = mc.compile_standalone(text, "mm", config=cfg)
    out = np.full((batch, m, n), np.nan, np.float32)
    fn([a, b], [out])
    check(out, a, b)


def _bufferized(text, cfg):
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        mc.optimize_matmuls(module, config=cfg)
        PassManager.parse("builtin.module(" + ",".join(["canonicalize", "cse"] + mc.BUFFERIZE) + ")").run(module.operation)
        return str(module)


@pytest.mark.parametrize("batch,m,n,k,transpose_a,accumulate,pack_b", [
    (None, 1000, 1030, 999, False, False, 0),  # columns: 1024 + 6 (rows divide)
    (None, 100, 130, 70, False, False, 0),     # rows 96 + 4, columns 128 + 2, a corner
    (None, 100, 130, 70, True, False, 0),      # A read transposed in place
    (None, 100, 130, 70, False, True, 0),      # C accumulated (not a zero fill): slices of C
    (None, 100, 130, 70, False, False, 1),     # the divisible part repacked
    (3, 100, 130, 70, False, False, 0),        # batched
    (3, 100, 130, 70, False, False, 1),        # batched, each product's B repacked
])
def test_split_products_match_numpy(rng, batch, m, n, k, transpose_a, accumulate, pack_b):
    """split: the part the tile divides is a product of slices, read and written in place
    (no operand copied, C not sliced out of a padded product); the remainders are padded."""
    lead = (batch,) if batch else ()
    a = rng.standard_normal(lead + ((k, m) if transpose_a else (m, k)), dtype=np.float32)
    b = rng.standard_normal(lead + (k, n), dtype=np.float32)
    c0 = rng.standard_normal(lead + (m, n), dtype=np.float32)
    at, bt, ct = _t(a.shape, "f32"), _t(b.shape, "f32"), _t(c0.shape, "f32")
    op = "linalg.batch_matmul" if batch else "linalg.matmul"
    maps = ("indexing_maps = [affine_map<(m, n, k) -> (k, m)>, affine_map<(m, n, k) -> (k, n)>, "
            "affine_map<(m, n, k) -> (m, n)>] ") if transpose_a else ""
    init = "%c" if accumulate else "%f"
    text = f"""
func.func @mm(%a: {at}, %b: {bt}, %c: {ct}) -> {ct} attributes {{llvm.emit_c_interface}} {{
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : {ct}
  %f = linalg.fill ins(%z : f32) outs(%e : {ct}) -> {ct}
  %r = {op} {maps}ins(%a, %b : {at}, {bt}) outs({init} : {ct}) -> {ct}
  return %r : {ct}
}}"""
    cfg = dict(mr=8, nr=32, kc=64, nc=64, forall_m=32, min_flops=0, pack_b=pack_b, split=1)
    mm, mn = (m - m % 8, n - n % 32)
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        mc.optimize_matmuls(module, config=cfg)
        ir_text = str(module)
    main = "x".join(map(str, lead + (mm, mn)))
    assert f"{mm}, {mn}] [1, 1" in ir_text and f"tensor<{main}xf32>" in ir_text
    assert mc.REMAINDER not in ir_text
    buffers = _bufferized(text, cfg)
    # the divisible part's C is a view of the caller's: no buffer or copy of its size
    assert not re.search(rf"memref\.(alloc|copy).*memref<{main}xf32", buffers)
    fn = mc.compile_standalone(text, "mm", config=cfg)
    out = np.full(lead + (m, n), np.nan, np.float32)
    fn([a, b, c0.copy()], [out])  # (the product writes its C in place)
    a2 = np.swapaxes(a, -1, -2) if transpose_a else a
    ref = np.matmul(a2.astype(np.float64), b) + (c0 if accumulate else 0)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


@pytest.mark.parametrize("m,n,k,transpose_a,pack_a", [
    (1004, 256, 300, False, 0),  # rows 1000 + 4 (a remainder large enough to be tiled)
    (1003, 128, 700, False, 0),  # rows 1000 + 3 (the remainder padded to its tile)
    (1004, 256, 300, True, 0),   # A read transposed in place
    (1004, 256, 300, False, 1),  # A repacked too, the threads' rows outermost
])
def test_row_remainder_reads_the_repacked_b(rng, m, n, k, transpose_a, pack_a):
    """A split product's row remainder reads the B panels its divisible part repacked
    (one repacking of B), the threads splitting the panels, each filling its columns."""
    a = rng.standard_normal((k, m) if transpose_a else (m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    text = matmul_text(m, n, k, transpose_a=transpose_a)
    # panels as wide as a register tile of this host has (the remainder's tile must match
    # them to share them: NEON's widest is 16, four 4-lane vectors)
    widths = {t[1] for t in tuning.register_tiles(host_cpu.host(), every=True)}
    nr = 32 if 32 in widths else max(widths)
    cfg = dict(mr=8, nr=nr, kc=64, nc=64, forall_m=32, min_flops=0, pack_b=1, pack_a=pack_a,
               rows_outer=pack_a, split=1, threads=2)
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        script = mc.optimize_matmuls(module, config=cfg, return_script=True)
        b_packs = [op for op in mc._walk(module.operation, "linalg.transpose") if "permutation = [1, 0, 2]" in str(op)]
        assert len(b_packs) == 1  # (the remainder's own would be a second)
        assert not mc.matmul_ops(module)
    if tuning.threads() > 1:  # the remainder: the threads split B's panels
        assert re.search(r"tile_using_forall \S+ tile_sizes \[\d+, 0, 0, 0\]", script)
    fn = mc.compile_standalone(text, "mm", config=cfg)
    out = np.full((m, n), np.nan, np.float32)
    fn([a, b], [out])
    ref = (a.T if transpose_a else a).astype(np.float64) @ b
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def test_split_only_where_the_tile_fits():
    cfg = dict(mr=8, nr=32, kc=64, nc=64, forall_m=32, min_flops=0, max_pad=8, pack_b=0, split=1)
    for (m, n), split in (((1536, 24), False), ((4, 1000), False), ((1024, 1024), False), ((1000, 1000), True)):
        with ir.Context(), ir.Location.unknown():  # N or M under one tile, or nothing to cut: padded
            module = ir.Module.parse(matmul_text(m, n, 64))
            assert mc.plan(mc.matmul_ops(module)[0], cfg)["split"] == split


@pytest.mark.parametrize("threads,threshold,parallel", [(2, 1 << 16, True), (1, 1 << 16, False), (2, 1 << 21, False)])
def test_padding_copies_split_over_threads_only_when_large(threads, threshold, parallel):
    """With threads, a padded product's operand padding becomes a linalg.copy marked for
    mirax-parallelize when it has the tuning table's `other.parallel_min_elements` (999 x
    1056 here); a small tensor.pad elsewhere in the module stays as it is."""
    small = """
func.func @small(%x: tensor<4x4xf32>) -> tensor<4x8xf32> {
  %z = arith.constant 0.0 : f32
  %p = tensor.pad %x low[0, 0] high[0, 4] {
  ^bb0(%i: index, %j: index):
    tensor.yield %z : f32
  } : tensor<4x4xf32> to tensor<4x8xf32>
  return %p : tensor<4x8xf32>
}"""
    with tuning.override(parallel={"other": {"parallel_min_elements": threshold}}), \
            ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(matmul_text(1000, 1030, 999) + small)
        mc.optimize_matmuls(module, config=dict(threads=threads, split=0, pack_b=0))  # (a repacking: always split)
        text = str(module)
    mm, rest = text.split("func.func @small")
    assert ("mirax.parallel" in mm) == parallel and ("tensor.pad" in mm) != parallel
    assert "tensor.pad" in rest and "mirax.parallel" not in rest


@pytest.mark.parametrize("packing", ["rows_outer", "packed", "unpacked"])
@pytest.mark.parametrize("m,n,k,kc", [(100, 130, 70, 128), (64, 96, 96, 96), (100, 130, 70, 32), (64, 128, 128, 64)])
def test_tiles_start_from_zeros(rng, m, n, k, kc, packing):
    """The register tiles start from zeros and C's zero fill goes, whatever the loop
    order: with K in one slice every C tile is computed in one pass (C written once,
    never read); with K split into slices a tile starts from zeros in the first slice
    only (an scf.if on the slice loop's index) and adds to what the earlier slices wrote
    in the others. 64x128x128 in 64-wide n-blocks and 64-deep slices: the n-block loop
    has the slice loop's bounds (0 to 128 step 64) and must not be taken for it."""
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    pack = dict(rows_outer=dict(pack_b=1, pack_a=1, rows_outer=1), packed=dict(pack_b=1, pack_a=0, rows_outer=0),
                unpacked=dict(pack_b=0, pack_a=0, rows_outer=0))[packing]
    cfg = dict(mr=8, nr=32, kc=kc, nc=64, forall_m=32, min_flops=0, max_pad=4, split=0, **pack)
    text = tune.matmul_text(None, m, n, k)
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        mc.optimize_matmuls(module, config=cfg)
        fills, firsts = str(module).count("linalg.fill"), len(re.findall(r"scf\.if .* -> \(vector<8x(?:1x)?32xf32>\)", str(module)))
    # (padded M or N: the padding values of A and B are tensor.pad, not fills; unpacked,
    # a padded C is a tensor.pad of its fill, which stays)
    padded_c = packing == "unpacked" and (m % 8 or n % 32)
    assert fills == (1 if padded_c else 0)
    assert firsts == (1 if kc < k and not padded_c else 0)
    fn = mc.compile_standalone(text, "mm", config=cfg)
    out = np.full((m, n), np.nan, np.float32)
    fn([a, b], [out])
    check(out, a, b)


@pytest.mark.parametrize("m,threads,rows", [(1026, 2, 54), (1026, 1, 114), (1020, 2, 102), (1026, 3, 114)])
def test_tasks_that_share_unevenly_leave_the_least_to_the_slowest_thread(m, threads, rows):
    """With no task count the threads share evenly, the task height whose slowest thread
    runs the fewest rows, down to a quarter of the tile's forall_m: 1026 rows (1024 padded
    to 6-row tiles) on 2 threads as 19 tasks of 54 (540 rows on the slower thread), not 9
    of 114 (570); 3 threads share 9 tasks of 114 evenly."""
    cfg = dict(mr=6, nr=16, kc=64, nc=64, forall_m=192, min_flops=0, pack_b=0, threads=threads)
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(tune.matmul_text(None, m, 64, 64))
        script = mc.optimize_matmuls(module, config=cfg, return_script=True)
    assert re.search(rf"tile_using_forall \S+ tile_sizes \[{rows}, 0\]", script)


@pytest.mark.parametrize("m,threads,rows", [(1200, 2, 200), (1200, 1, 240), (1000, 2, 200), (1200, 3, 200), (1000, 3, 200)])
def test_tasks_the_threads_share_evenly(m, threads, rows):
    """forall_m: the largest multiple of mr dividing M (at most the tile's forall_m), unless
    a task count the threads share evenly comes with tasks down to a quarter of its rows
    (1200 rows: 5 tasks of 240 -> 6 of 200 on 2 threads; 1000 rows in 8-row tiles have
    no even count)."""
    cfg = dict(mr=8, nr=32, kc=64, nc=64, forall_m=256, min_flops=0, pack_b=0, threads=threads)
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(tune.matmul_text(None, m, 64, 64))
        script = mc.optimize_matmuls(module, config=cfg, return_script=True)
    assert re.search(rf"tile_using_forall \S+ tile_sizes \[{rows}, 0\]", script)


@pytest.mark.parametrize("k,pack,rows", [
    (64, dict(pack_b=1), 16),                           # B's 64 x 512 slice stays in L2: 16 tasks
    (64, dict(pack_b=1, pack_a=1, rows_outer=1), 16),   # all of B stays in L2 (rows outermost)
    (64, dict(pack_b=0), 16),
    (8192, dict(pack_b=1, kc=8192), 128)])              # a 16 MiB slice of B: one task a thread
def test_rows_balance_threads_when_b_stays_in_cache(rng, k, pack, rows):
    """A product of one n-block whose slice of B each core keeps in L2 from one task to
    the next is cut into `tasks_per_thread` row tasks a thread (two register tiles at
    least): on two vCPUs of unequal speed the faster thread takes over the slower one's
    rows. A slice of B beyond L2 keeps one task a thread (a task refetches it from L3).
    The product is right either way."""
    cfg = dict(dict(mr=8, nr=32, kc=64, nc=512, min_flops=0, split=0, threads=2), **pack)
    with ir.Context(), ir.Location.unknown():
        script = mc.optimize_matmuls(ir.Module.parse(matmul_text(256, 512, k)), config=cfg, return_script=True)
    per_task = rows // 8 if pack.get("pack_a") else rows  # (A's panels: mr rows each)
    assert re.search(rf"tile_using_forall \S+ tile_sizes \[0, {per_task}, 0, 0(, 0)?\]"
                     rf"|tile_using_forall \S+ tile_sizes \[{per_task}, 0\]", script), script
    if k == 64:
        a = rng.standard_normal((256, k), dtype=np.float32)
        b = rng.standard_normal((k, 512), dtype=np.float32)
        out = np.full((256, 512), np.nan, np.float32)
        mc.compile_standalone(matmul_text(256, 512, k), "mm", config=cfg)([a, b], [out])
        check(out, a, b)


SHARED_EMPTY = """
func.func @mm(%a: tensor<256x784xf32>, %b: tensor<784x512xf32>, %c: tensor<784x512xf32>)
    -> (tensor<256x512xf32>, tensor<256x512xf32>) attributes {llvm.emit_c_interface} {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<256x512xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<256x512xf32>) -> tensor<256x512xf32>
  %x = linalg.matmul ins(%a, %b : tensor<256x784xf32>, tensor<784x512xf32>) outs(%f : tensor<256x512xf32>) -> tensor<256x512xf32>
  %g = linalg.fill ins(%z : f32) outs(%e : tensor<256x512xf32>) -> tensor<256x512xf32>
  %y = linalg.matmul ins(%a, %c : tensor<256x784xf32>, tensor<784x512xf32>) outs(%g : tensor<256x512xf32>) -> tensor<256x512xf32>
  return %x, %y : tensor<256x512xf32>, tensor<256x512xf32>
}"""


@pytest.mark.parametrize("pack_b", [0, 1])
def test_split_products_write_buffers_of_their_own(rng, pack_b):
    """Two split products whose C came from one (CSE-merged) empty tensor: each piece
    writes a slice of its product's own buffer, so bufferization copies no slice of C
    (it copied the 252-row piece of the second product, serially, before)."""
    cfg = dict(mr=6, nr=16, kc=256, nc=256, forall_m=42, split=1, pack_b=pack_b, threads=2)
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(SHARED_EMPTY)
        mc.optimize_matmuls(module, config=cfg)
        assert str(module).count(mc.OWN) == 2
        PassManager.parse("builtin.module(" + ",".join(["canonicalize", "cse"] + mc.BUFFERIZE + ["canonicalize"])
                          + ")").run(module.operation)
        copies = [line for line in str(module).splitlines() if "memref.copy" in line]
    assert not [c for c in copies if "252x512" in c], copies
    a = rng.standard_normal((256, 784), dtype=np.float32)
    b, c = (rng.standard_normal((784, 512), dtype=np.float32) for _ in range(2))
    from mirax.lowering import tuning
    key = tuning.shape_class("linalg.matmul", None, 256, 512, 784)
    with tuning.override(matmul={key: dict(cfg, dtype="f32", shape="256x512x784")}):
        mm = mc.compile_standalone(SHARED_EMPTY, "mm")
    x, y = np.full((256, 512), -7, np.float32), np.full((256, 512), -7, np.float32)
    mm([a, b, c], [x, y])
    check(x, a, b)
    check(y, a, c)


def test_repacked_panels_are_copied_with_vector_stores():
    """B repacked into nr-wide panels ([K][N/nr][nr] -> [N/nr][K][nr]) keeps its innermost
    dim: mirax-vectorize-transposes cuts it into runs of nr that bufferize to vector
    copies. Left to LLVM, each run was 16 scalar load/store pairs (8% of a 1024^3
    product on AVX2): no f32 is stored as it was loaded."""
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(matmul_text(256, 256, 256))
        mc.optimize_matmuls(module, config=dict(mr=6, nr=16, kc=256, nc=256, pack_b=1, pack_a=0, split=1, threads=2))
        assert "permutation = [1, 0, 2]" in str(module)
        mc.lower_to_llvm(module)
        text = str(module)
    copied = []  # f32 values stored as they were loaded, per function (SSA names are local)
    for fn in text.split("llvm.func ")[1:]:
        loaded = set(re.findall(r"(%\d+) = llvm\.load [^\n]*-> f32\n", fn))
        copied += [v for v in re.findall(r"llvm\.store (%\d+), [^\n]*: f32, !llvm\.ptr", fn) if v in loaded]
    assert not copied
    assert re.search(r"llvm\.store [^\n]*: vector<16xf32>, !llvm\.ptr", text)


def test_a_remainder_takes_the_tile_that_fits_and_both_threads(rng):
    """A split product's remainder rows (256 = 42 x 6 + 4) get the host tile that pads
    them least (4 rows, not 6 with two of zeros), and the threads split its columns
    (one task of rows would leave a thread idle)."""
    from mirax.lowering import tuning
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(matmul_text(4, 512, 784))
        op = mc.matmul_ops(module.operation)[0]
        op.attributes[mc.REMAINDER] = ir.UnitAttr.get()
        p = mc.plan(op)
    lanes = host_cpu.host().f32_lanes
    assert p["pad"] == (4, 512) and p["mr"] <= 4
    if tuning.threads() > 1:
        assert p["forall_n"] and 512 % p["forall_n"] == 0 and p["forall_n"] % p["nr"] == 0 and p["nr"] % lanes == 0
    cfg = dict(mr=6, nr=16, kc=256, nc=256, forall_m=42, split=1, pack_b=0, threads=2)
    key = tuning.shape_class("linalg.matmul", None, 256, 512, 784)
    with tuning.override(matmul={key: dict(cfg, dtype="f32", shape="256x512x784")}):
        with ir.Context(), ir.Location.unknown():
            script = mc.optimize_matmuls(ir.Module.parse(matmul_text(256, 512, 784)), return_script=True)
        assert "tile_sizes [0, 256]" in script or tuning.threads() == 1  # the remainder's columns
        a = rng.standard_normal((256, 784), dtype=np.float32)
        b = rng.standard_normal((784, 512), dtype=np.float32)
        check(run(matmul_text(256, 512, 784), a, b, (256, 512)), a, b)


def test_an_eight_column_remainder_takes_eight_wide_tiles(rng):
    """The last 8 columns of a split product (1000 = 31 x 32 + 8) run in 8-wide tiles:
    on a 16-lane host half-register vectors (`register_tiles(every=True)`), not 16-wide
    ones half zeros; on an 8-lane host one vector. The product is right either way, with
    the rows' remainder too."""
    from mirax.lowering import tuning
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(matmul_text(120, 8, 512))
        op = mc.matmul_ops(module.operation)[0]
        op.attributes[mc.REMAINDER] = ir.UnitAttr.get()
        p = mc.plan(op)
    assert p["pad"] == (120, 8) and p["nr"] == 8
    m, n, k = 126, 72, 512  # 72 = 2 x 32 + 8 columns; 126 = 12 x 10 + 6 rows
    cfg = dict(mr=10, nr=32, kc=64, nc=64, forall_m=40, split=1, pack_b=1, threads=2)
    key = tuning.shape_class("linalg.matmul", None, m, n, k)
    with tuning.override(matmul={key: dict(cfg, dtype="f32", shape=f"{m}x{n}x{k}")}):
        with ir.Context(), ir.Location.unknown():
            module = ir.Module.parse(matmul_text(m, n, k))
            mc.optimize_matmuls(module)
            text = str(module)
        assert re.search(r"vector<\d+x8xf32>", text)  # the column remainder's 8-wide tile
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        check(run(matmul_text(m, n, k), a, b, (m, n)), a, b)


# elementwise readers of a product, as the compiled MLP step has them after fusion:
# (the operands besides C and their maps, the body on %g (C's element) and %x0, %x1)
EPILOGUES = {
    "sgd": ([("full", "m,n"), ("scalar", "")], "%s = arith.mulf %x1, %g : f32\n    %y = arith.subf %x0, %s : f32"),
    "bias_relu": ([("cols", "n")], "%s = arith.addf %g, %x0 : f32\n    %y = arith.maximumf %s, %zero : f32"),
    "relu_mask": ([("full", "m,n")], "%p = arith.cmpf ogt, %x0, %zero : f32\n    %f = arith.uitofp %p : i1 to f32\n"
                                      "    %y = arith.mulf %g, %f : f32"),
    "row_scale": ([("rows", "m")], "%y = arith.mulf %g, %x0 : f32"),
    # a constant defined in the body (linalg text, not a traced step): broadcast in the tile
    "sgd_constant_lr": ([("full", "m,n")], "%lr = arith.constant 0.01 : f32\n    %s = arith.mulf %lr, %g : f32\n"
                                             "    %y = arith.subf %x0, %s : f32"),
}


def epilogue_text(kind, m, n, k):
    """`@mm(A, B, X0[, X1])`: A @ B read by EPILOGUES[kind]'s generic."""
    operands, body = EPILOGUES[kind]
    shapes = {"full": [m, n], "cols": [n], "rows": [m], "scalar": []}
    maps = {"full": "(d0, d1)", "cols": "(d1)", "rows": "(d0)", "scalar": "()"}
    types = [_t(shapes[o], "f32") if shapes[o] else "tensor<f32>" for o, _ in operands]
    args = "".join(f", %x{i}in: {t}" for i, t in enumerate(types))
    ins = ", ".join(f"%x{i}in" for i in range(len(types)))
    c = _t((m, n), "f32")
    amap = ", ".join(f"affine_map<(d0, d1) -> {maps[o]}>" for o, _ in operands)
    blk = ", ".join(f"%x{i}: f32" for i in range(len(types)))
    return f"""
func.func @mm(%a: {_t((m, k), "f32")}, %b: {_t((k, n), "f32")}{args}) -> {c} attributes {{llvm.emit_c_interface}} {{
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : {c}
  %zeros = linalg.fill ins(%zero : f32) outs(%e : {c}) -> {c}
  %c = linalg.matmul ins(%a, %b : {_t((m, k), "f32")}, {_t((k, n), "f32")}) outs(%zeros : {c}) -> {c}
  %r = linalg.generic {{indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, {amap}, affine_map<(d0, d1) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel"]}} ins(%c, {ins} : {c}, {", ".join(types)}) outs(%e : {c}) {{
  ^bb0(%g: f32, {blk}, %o: f32):
    {body}
    linalg.yield %y : f32
  }} -> {c}
  return %r : {c}
}}"""


def _epilogue_reference(kind, c, xs):
    return {"sgd": lambda: xs[0] - xs[1] * c, "bias_relu": lambda: np.maximum(c + xs[0], 0),
            "relu_mask": lambda: c * (xs[0] > 0), "row_scale": lambda: c * xs[0][:, None],
            "sgd_constant_lr": lambda: xs[0] - np.float32(0.01) * c}[kind]()


@needs_openmp
@pytest.mark.parametrize("kind", sorted(EPILOGUES))
@pytest.mark.parametrize("packing", ["rows_outer", "packed", "unpacked"])
@pytest.mark.parametrize("m,n,k,kc,split", [(64, 128, 128, 64, 0), (100, 130, 70, 32, 1), (96, 64, 64, 128, 0),
                                            (100, 130, 70, 128, 0)])
def test_epilogues_run_on_the_register_tiles(rng, kind, packing, m, n, k, kc, split):
    """A product's only reader, an elementwise generic (SGD's update, a bias and relu, the
    relu mask, a per-row scale), runs on each register tile before its store, in K's last
    slice when K is sliced (lowering/matmul_epilogue.py): the generic goes where the
    product's C is tiled unpadded (a split product's divisible piece; a padded remainder
    keeps its own), and the results are the same bits as with the generic run after."""
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    operands, _ = EPILOGUES[kind]
    shapes = {"full": (m, n), "cols": (n,), "rows": (m,), "scalar": ()}
    xs = [np.asarray(rng.standard_normal(shapes[o]), np.float32) for o, _ in operands]
    pack = dict(rows_outer=dict(pack_b=1, pack_a=1, rows_outer=1), packed=dict(pack_b=1, pack_a=0, rows_outer=0),
                unpacked=dict(pack_b=0, pack_a=0, rows_outer=0))[packing]
    cfg = dict(mr=8, nr=32, kc=kc, nc=64, forall_m=32, min_flops=0, max_pad=4, split=split, **pack)
    text = epilogue_text(kind, m, n, k)
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        mc.optimize_matmuls(module, config=cfg)
        generics = str(module).count("linalg.generic")
    ragged = [bool(m % 8), bool(n % 32)]
    if not any(ragged):
        assert generics == 0
    elif not split:  # (padded whole: C's tiles are stores into the padded C)
        assert generics == 1
    else:  # (the divisible piece's goes; a padded remainder may keep its own)
        assert generics <= sum(ragged) + all(ragged)
    outs = []
    for on in (True, False):
        fn = mc.compile_standalone(text, "mm", config=cfg, epilogues=on)
        out = np.full((m, n), np.nan, np.float32)
        fn([a, b] + [np.ascontiguousarray(x) for x in xs], [out])
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])
    ref = _epilogue_reference(kind, np.matmul(a.astype(np.float64), b.astype(np.float64)), xs)
    np.testing.assert_allclose(outs[0], ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def test_epilogue_needs_the_only_reader():
    """A product read twice keeps C: its elementwise reader stays a generic; so does a
    reader that is not elementwise (a row sum)."""
    cfg = dict(mr=8, nr=32, kc=64, nc=64, forall_m=32, min_flops=0, max_pad=4, split=0, pack_b=0)
    with ir.Context(), ir.Location.unknown():
        text = epilogue_text("bias_relu", 64, 128, 128).replace(
            "return %r : tensor<64x128xf32>\n}", "return %r, %c : tensor<64x128xf32>, tensor<64x128xf32>\n}").replace(
            ") -> tensor<64x128xf32> attributes", ") -> (tensor<64x128xf32>, tensor<64x128xf32>) attributes")
        module = ir.Module.parse(text)
        mc.optimize_matmuls(module, config=cfg)
        assert str(module).count("linalg.generic") == 1
        summed = """
func.func @mm(%a: tensor<64x128xf32>, %b: tensor<128x128xf32>) -> tensor<64xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x128xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<64x128xf32>) -> tensor<64x128xf32>
  %c = linalg.matmul ins(%a, %b : tensor<64x128xf32>, tensor<128x128xf32>) outs(%f : tensor<64x128xf32>) -> tensor<64x128xf32>
  %e1 = tensor.empty() : tensor<64xf32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<64xf32>) -> tensor<64xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>],
                       iterator_types = ["parallel", "reduction"]} ins(%c : tensor<64x128xf32>) outs(%f1 : tensor<64xf32>) {
  ^bb0(%g: f32, %o: f32):
    %y = arith.addf %g, %o : f32
    linalg.yield %y : f32
  } -> tensor<64xf32>
  return %r : tensor<64xf32>
}"""
        module = ir.Module.parse(summed)
        mc.optimize_matmuls(module, config=cfg)
        assert str(module).count("linalg.generic") == 1


def test_a_product_inside_a_forall_is_one_task_on_its_thread():
    """A product already on a thread of the threads' scf.forall (a convolution's chunk,
    dialect/conv.py) is planned as one task for one thread: a nested parallel loop of
    tasks would share the outer one's task counter (the tasks of both threads mixed: a
    1-d convolution came out as garbage)."""
    text = """
    func.func @f(%a: tensor<2x256x640xf32>, %b: tensor<640x128xf32>) -> tensor<2x256x128xf32> {
      %e = tensor.empty() : tensor<2x256x128xf32>
      %r = scf.forall (%t) in (2) shared_outs(%o = %e) -> (tensor<2x256x128xf32>) {
        %x = tensor.extract_slice %a[%t, 0, 0] [1, 256, 640] [1, 1, 1] : tensor<2x256x640xf32> to tensor<256x640xf32>
        %c = arith.constant 0.0 : f32
        %z = tensor.empty() : tensor<256x128xf32>
        %f = linalg.fill ins(%c : f32) outs(%z : tensor<256x128xf32>) -> tensor<256x128xf32>
        %m = linalg.matmul ins(%x, %b : tensor<256x640xf32>, tensor<640x128xf32>) outs(%f : tensor<256x128xf32>) -> tensor<256x128xf32>
        scf.forall.in_parallel {
          tensor.parallel_insert_slice %m into %o[%t, 0, 0] [1, 256, 128] [1, 1, 1] : tensor<256x128xf32> into tensor<2x256x128xf32>
        }
      }
      return %r : tensor<2x256x128xf32>
    }"""
    with ir.Context(), ir.Location.unknown():
        inside, plain = ir.Module.parse(text), ir.Module.parse(matmul_text(256, 128, 640))  # (kept: their ops)
        nested = mc.plan(mc.matmul_ops(inside.operation)[0])
        alone = mc.plan(mc.matmul_ops(plain.operation)[0])
    assert nested["threads"] == 1 and nested["forall_m"] == nested["pad"][0] and not nested["forall_n"]
    assert alone["forall_m"] < alone["pad"][0] or alone["forall_n"] or alone["threads"] == 1


@pytest.mark.parametrize("inner", [100, 256])  # (a peeled remainder; whole vectors)
def test_strided_copies_of_one_class_are_all_vectorized(inner):
    """strided_copies_to_linalg tiles the copies of one shape class through one match;
    a class whose rows need a peeled remainder peels each copy in turn (`transform.loop.peel`
    takes one loop: with the whole class it failed and every copy stayed a scalar loop)."""
    import warnings
    from mirax.lowering.strided_copies import strided_copies_to_linalg
    t = f"memref<8x{inner}xf32, strided<[{inner + 28}, 1]>>"
    src = f"""func.func @f(%a: memref<8x{inner + 28}xf32>, %b: memref<8x{inner + 28}xf32>, %x: memref<8x{inner}xf32>, %y: memref<8x{inner}xf32>) {{
      %sa = memref.subview %a[0, 0] [8, {inner}] [1, 1] : memref<8x{inner + 28}xf32> to {t}
      %sb = memref.subview %b[0, 0] [8, {inner}] [1, 1] : memref<8x{inner + 28}xf32> to {t}
      memref.copy %sa, %x : {t} to memref<8x{inner}xf32>
      memref.copy %sb, %y : {t} to memref<8x{inner}xf32>
      return
    }}"""
    with ir.Context(), ir.Location.unknown(), warnings.catch_warnings():
        warnings.simplefilter("error")  # (a failed transform only warns: the copies stay loops)
        module = ir.Module.parse(src)
        strided_copies_to_linalg(module)
        module.operation.verify()
        text = str(module)
    assert "memref.copy" not in text and text.count("vector.transfer_write") >= 2


IDENTICAL = """
func.func @mm(%a: tensor<256x256xf32>, %b: tensor<256x256xf32>, %c: tensor<128x256xf32>)
    -> (tensor<256x256xf32>, tensor<256x256xf32>, tensor<128x256xf32>) attributes {llvm.emit_c_interface} {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<256x256xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<256x256xf32>) -> tensor<256x256xf32>
  %x = linalg.matmul ins(%a, %b : tensor<256x256xf32>, tensor<256x256xf32>) outs(%f : tensor<256x256xf32>) -> tensor<256x256xf32> loc("first")
  %y = linalg.matmul ins(%x, %a : tensor<256x256xf32>, tensor<256x256xf32>) outs(%f : tensor<256x256xf32>) -> tensor<256x256xf32> loc("second")
  %e2 = tensor.empty() : tensor<128x256xf32>
  %f2 = linalg.fill ins(%z : f32) outs(%e2 : tensor<128x256xf32>) -> tensor<128x256xf32>
  %w = linalg.matmul ins(%c, %y : tensor<128x256xf32>, tensor<256x256xf32>) outs(%f2 : tensor<128x256xf32>) -> tensor<128x256xf32> loc("third")
  return %x, %y, %w : tensor<256x256xf32>, tensor<256x256xf32>, tensor<128x256xf32>
}"""


def test_identical_products_are_tiled_once(monkeypatch, rng):
    """Products with the same kernel and plan (a network's layers) are tiled by one
    script; the others take a copy, at their own location. The IR is the one tiling each
    gives, and computes right."""
    texts, handles = {}, {}
    for reuse in ("0", "1"):
        monkeypatch.setenv("MIRAX_MATMUL_REUSE", reuse)
        with ir.Context(), ir.Location.unknown():
            module = ir.Module.parse(IDENTICAL)
            script = mc.optimize_matmuls(module, return_script=True)
            handles[reuse] = len(re.findall(r"%m\d+\b(?=[,\s]*[=,])", script.split("split_handle")[0]))
            texts[reuse] = module.operation.get_asm(enable_debug_info=False)
            located = module.operation.get_asm(enable_debug_info=True)
    assert handles == {"0": 3, "1": 2}
    assert texts["1"] == texts["0"] and texts["1"].count("vector.fma") >= 3
    def uses(name):  # ops printed at loc("name"), through its alias
        alias = re.search(r'#(loc\d+) = loc[(]"' + name + r'"[)]', located)[1]
        return located.count(f"loc(#{alias})")
    assert uses("second") >= uses("first") >= 10  # the copy's ops at its own product's line
    a, b = (rng.standard_normal((256, 256), dtype=np.float32) for _ in range(2))
    c = rng.standard_normal((128, 256), dtype=np.float32)
    outs = [np.full((256, 256), -7, np.float32), np.full((256, 256), -7, np.float32),
            np.full((128, 256), -7, np.float32)]
    mc.compile_standalone(IDENTICAL, "mm")([a, b, c], outs)
    x = a.astype(np.float64) @ b
    y = x @ a
    for got, ref in zip(outs, (x, y, c.astype(np.float64) @ y)):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
