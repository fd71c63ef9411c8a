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


def test_outside_values_as_the_python_walk_finds_them(lowered, monkeypatch):
    """The values a loop nest reads from outside it, in first-use order: the same in C."""
    from mirax.lowering.pass_base import outside_values
    with context(), ir.Location.unknown():
        module = ir.Module.parse(lowered)
        loops = walk_ops(module, lambda n: n in ("scf.for", "llvm.func", "scf.if"))
        assert len(loops) > 2
        for group in [[op] for op in loops] + [loops[1:3]]:
            fast = outside_values(group)
            monkeypatch.setattr(native_walk, "outside_values", lambda *_: None)
            slow = outside_values(group)
            monkeypatch.undo()
            assert [list(map(str, f)) for f in fast] == [list(map(str, s)) for s in slow]
            assert all(a == b for f, s in zip(fast, slow) for a, b in zip(f, s))


def test_a_clone_reads_the_mapped_values_in_its_regions_too():
    """clone_mapped re-points the clone's operands, nested ones too, at the mapped values."""
    from mirax.lowering.pass_base import clone_mapped
    src = """func.func @f(%a: f32, %b: f32, %n: index) -> f32 {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %a) -> f32 {
        %s = arith.addf %acc, %b : f32
        %t = arith.mulf %s, %a : f32
        scf.yield %t : f32
      }
      return %r : f32
    }"""
    with context(), ir.Location.unknown():
        module = ir.Module.parse(src)
        fn = module.body.operations[0]
        a, b, n = fn.regions[0].blocks[0].arguments
        loop = walk_ops(module, lambda name: name == "scf.for")[0]
        ret = walk_ops(module, lambda name: name == "func.return")[0]
        mapping = {a: b, b: a}
        new = clone_mapped(loop, mapping, ir.InsertionPoint(ret))
        ret.operands[0] = new.results[0]
        assert mapping[loop.results[0]] == new.results[0]
        assert new.operands[3] == b and loop.operands[3] == a  # (lower, upper, step, init)
        for op, other in ((new, a), (loop, b)):  # the clone adds %a and multiplies by %b
            add = walk_ops(op, lambda name: name == "arith.addf")[0]
            mul = walk_ops(op, lambda name: name == "arith.mulf")[0]
            assert add.operands[1] == other and mul.operands[1] == (b if other == a else a)
        module.operation.verify()


def test_distinct_names_and_op_counts_as_the_python_walk_finds_them(lowered, monkeypatch):
    from mirax.lowering.pass_base import count_ops, distinct_names
    with context(), ir.Location.unknown():
        module = ir.Module.parse(lowered)
        funcs = [f for f in walk_ops(module, lambda n: n == "llvm.func") if len(f.regions[0].blocks)]
        assert funcs
        for root in [module.operation] + funcs:
            fast = distinct_names(root), count_ops(root)
            monkeypatch.setattr(native_walk, "names", lambda *_: None)
            monkeypatch.setattr(native_walk, "count", lambda *_: None)
            monkeypatch.setattr(native_walk, "ops", lambda *_: None)
            slow = distinct_names(root), count_ops(root)
            monkeypatch.undo()
            assert fast == slow and fast[1] > 0 and len(fast[0]) > 0


def test_a_library_that_cannot_build_leaves_walks_in_python(monkeypatch, tmp_path):
    """No C compiler (here: one that fails): no library, no error, walks in Python."""
    monkeypatch.setattr(native_walk, "_lib", None)
    monkeypatch.setattr(native_walk, "_candidates", lambda: [tmp_path / "native_walk-x.so"])
    monkeypatch.setenv("CC", "false")
    assert not native_walk.available() and not (tmp_path / "native_walk-x.so").exists()
    with context(), ir.Location.unknown():
        module = ir.Module.parse("func.func @f() { return }")
        assert [o.name for o in walk_ops(module, lambda n: n.startswith("func."))] == ["func.func", "func.return"]


def test_a_new_build_removes_only_this_machines_older_builds(monkeypatch, tmp_path):
    """A checkout shared by an x86-64 and an arm64 system keeps a build for each: a new
    build removes this machine's earlier ones (and those named before builds carried the
    machine), not the other machine's."""
    if not native_walk.available():
        pytest.skip("no C compiler here")
    monkeypatch.setattr(native_walk.platform, "machine", lambda: "x86_64")
    names = ["native_walk-x86_64-0000000000000000.so", "native_walk-aarch64-0000000000000000.so",
             "native_walk-0000000000000000.so"]
    for n in names:
        (tmp_path / n).write_bytes(b"")
    new = native_walk.build(tmp_path / f"{native_walk._prefix()}{native_walk._key()}.so")
    assert new.name.startswith("native_walk-x86_64-") and new.stat().st_size > 0
    assert sorted(p.name for p in tmp_path.glob("*.so")) == sorted([new.name, names[1]])
