"""lowering/native_walk.py: the walks of our Python passes in C give the same ops, in the
same order, as the walk through the bindings; without the library, walks stay in Python."""
import pytest
from mlir import ir

from mirax.lowering import native_walk, pass_base
from mirax.lowering.pass_base import walk_ops
from mirax.runtime import cpu
from mirax.runtime.context import context

pytestmark = pytest.mark.skipif(not native_walk.available(), reason="no C compiler: walks run in Python")


def _python_walk(root, keep, monkeypatch):
    monkeypatch.setattr(native_walk, "ops", lambda *_: None)
    try:
        return walk_ops(root, keep)
    finally:
        monkeypatch.undo()


PROGRAM = """func.func @main(%x: tensor<64x32xf32>, %w: tensor<32x48xf32>) -> tensor<64x1xf32> attributes {llvm.emit_c_interface} {
  %y = "mirax.matmul"(%x, %w) : (tensor<64x32xf32>, tensor<32x48xf32>) -> tensor<64x48xf32>
  %t = "mirax.tanh"(%y) : (tensor<64x48xf32>) -> tensor<64x48xf32>
  %m = "mirax.max"(%t) {axes = array<i64: 1>, keepdims = true} : (tensor<64x48xf32>) -> tensor<64x1xf32>
  %b = "mirax.broadcast_to"(%m) {shape = array<i64: 64, 48>} : (tensor<64x1xf32>) -> tensor<64x48xf32>
  %d = "mirax.subtract"(%t, %b) : (tensor<64x48xf32>, tensor<64x48xf32>) -> tensor<64x48xf32>
  %e = "mirax.exp"(%d) : (tensor<64x48xf32>) -> tensor<64x48xf32>
  %s = "mirax.sum"(%e) {axes = array<i64: 1>, keepdims = true} : (tensor<64x48xf32>) -> tensor<64x1xf32>
  return %s : tensor<64x1xf32>
}"""


@pytest.fixture(scope="module")
def lowered():
    """A lowered program (matmul tiles, a fused row reduction: nested loops, vector and
    LLVM ops), as text."""
    with context(), ir.Location.unknown():
        module = ir.Module.parse(PROGRAM)
        cpu.lower_to_llvm(module)
        return str(module)


@pytest.mark.parametrize("keep", [
    lambda n: n == "llvm.func",
    lambda n: n.startswith("llvm.") and n != "llvm.mlir.constant",
    lambda n: n in ("llvm.br", "llvm.cond_br", "llvm.return"),
    lambda n: True,
    lambda n: False,
])
def test_the_same_ops_in_the_same_order(lowered, keep, monkeypatch):
    with context(), ir.Location.unknown():
        module = ir.Module.parse(lowered)
        for root in [module.operation] + walk_ops(module, lambda n: n == "llvm.func")[:3]:
            fast = native_walk.ops(root, keep)
            slow = _python_walk(root, keep, monkeypatch)
            assert fast is not None and len(fast) == len(slow)
            assert all(a == b for a, b in zip(fast, slow))
            assert root not in fast  # (the root itself is never among them)


def test_ops_found_in_c_are_the_bindings_objects():
    """Ops found in C are usable like any other: renamed through one, seen through another."""
    with context(), ir.Location.unknown():
        module = ir.Module.parse("func.func @f(%a: f32) -> f32 {\n"
                                 "  %b = arith.addf %a, %a : f32\n  %c = arith.mulf %b, %b : f32\n"
                                 "  return %c : f32\n}")
        adds = walk_ops(module, lambda n: n == "arith.addf")
        assert [o.name for o in adds] == ["arith.addf"]
        adds[0].attributes["mark"] = ir.UnitAttr.get()
        mul = walk_ops(module, lambda n: n.endswith("mulf"))[0]
        assert mul.operands[0].owner == adds[0] and "mark" in str(module)


def test_a_failing_keep_raises_as_itself():
    def keep(name):
        raise KeyError(name)
    with context(), ir.Location.unknown():
        module = ir.Module.parse("func.func @f() { return }")
        with pytest.raises(KeyError):
            walk_ops(module, keep)


def test_without_the_library_walks_stay_in_python(monkeypatch):
    monkeypatch.setattr(native_walk, "_lib", None)
    monkeypatch.setenv("MIRAX_NATIVE_WALK", "0")
    assert not native_walk.available()
    with context(), ir.Location.unknown():
        module = ir.Module.parse("func.func @f() { return }")
        assert native_walk.ops(module.operation, lambda n: True) is None
        assert [o.name for o in pass_base.walk_ops(module, lambda n: True)] == ["func.func", "func.return"]


def test_the_library_builds_where_it_is_asked(tmp_path):
    path = native_walk.build(tmp_path / "walk.so")
    assert path.exists() and path.stat().st_size > 0
