"""Source locations (issue 11): traced ops carry the user's file:line; the transform
passes give what they generate the location of the op it came from; errors raised while
transforming or lowering name the user's line; mirax-opt locates generated ops in its
input file."""
import os
import re
import subprocess
import sys

import pytest

import mirax as mr
from mirax.dialect import PRIMITIVES
from mirax.dialect.core import MiraxError
from mirax.transforms.api import Traced
from mirax.transforms.mirax_jvp import MiraxJvp
from mirax.transforms.mirax_vjp import MiraxGrad
from mirax.transforms.mirax_vmap import MiraxVmap

HERE = os.path.abspath(__file__)
LIT = os.path.join(os.path.dirname(HERE), "..", "lit")


def model(x):
    y = mr.exp(x)  # LINE_EXP
    z = mr.sin(y) * 2.0  # LINE_SIN
    return z.sum()  # LINE_SUM


def line_of(tag):
    with open(HERE) as f:
        return next(i for i, l in enumerate(f, 1) if l.rstrip().endswith("# " + tag))


def op_locations(module, func):
    """{op name: set of 'file:line'} of the ops of @func, from the printed debug info."""
    text = module.operation.get_asm(enable_debug_info=True)
    aliases = dict(re.findall(r'^(#loc\d*) = loc\((.*)\)$', text, re.M))
    body = text.split(f"func.func @{func}(", 1)[1].split("\n  }", 1)[0]
    out = {}
    for name, loc in re.findall(r'"(mirax\.\w+)"\(.*loc\((#loc\d*|"[^)]*)\)$', body, re.M):
        loc = aliases.get(loc, loc)
        m = re.search(r'"([^"]+)":(\d+):\d+', loc)
        out.setdefault(name, set()).add(f"{m.group(1)}:{m.group(2)}" if m else loc)
    return out


@pytest.mark.parametrize("make_pass, new", [
    (lambda: MiraxGrad(function="main", argnums="0", value=True, result="t"), "t"),
    (lambda: MiraxJvp(function="main", argnums="0", result="t"), "t"),
    (lambda: MiraxVmap(function="main", **{"in-axes": "0", "batch-size": "4"}, result="t"), "t"),
])
def test_transformed_ops_keep_the_user_lines(make_pass, new):
    t = Traced(model, [mr.ones((3,))])
    t.run_pass(make_pass())
    locs = op_locations(t.module, new)
    assert locs, "no mirax op found"
    for name, where in locs.items():
        for w in where:
            assert w.startswith(HERE + ":"), f"{name} located at {w}"  # never generated text or mirax
    assert f"{HERE}:{line_of('LINE_EXP')}" in locs["mirax.exp"]
    assert f"{HERE}:{line_of('LINE_SIN')}" in locs["mirax.sin"]


def test_an_error_in_a_rule_names_the_users_line(monkeypatch):
    def broken(*args, **kw):
        raise MiraxError("mirax.sin: this rule is broken")
    monkeypatch.setattr(PRIMITIVES["sin"], "vjp", broken)
    with pytest.raises(MiraxError) as info:
        mr.grad(model)(mr.ones((3,)))
    assert f"{HERE}:{line_of('LINE_SIN')}" in str(info.value)


def test_a_lowering_error_names_the_users_line():
    def f(x):
        return mr.sin(x.astype(mr.float64)).sum()  # LINE_F64
    with pytest.raises(MiraxError) as info:
        with mr.stream(mr.gpu):
            mr.eval(mr.compile(f)(mr.ones((3,))))
    assert f"{HERE}\":{line_of('LINE_F64')}" in str(info.value) or f"{HERE}:{line_of('LINE_F64')}" in str(info.value)


def test_mirax_opt_locates_generated_ops_in_its_input():
    src = os.path.normpath(os.path.join(LIT, "mirax-grad.mlir"))
    r = subprocess.run([sys.executable, "-m", "mirax.opt", src, "--mirax-grad=function=loss",
                        "--mlir-print-debuginfo"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    body = r.stdout.split("@loss_grad(", 1)[1]
    aliases = dict(re.findall(r'^(#loc\d*) = loc\((.*)\)$', r.stdout, re.M))
    locs = [aliases.get(l, l) for l in re.findall(r'loc\((#loc\d*|"[^)]*)\)', body.split("\n  }", 1)[0])]
    assert locs and all(src in l for l in locs), locs  # not "-", not the mirax-opt script
    with open(src) as f:
        lines = f.read().splitlines()
    for l in locs:
        line = int(re.search(r":(\d+):", l).group(1))
        assert "@loss" in lines[line - 1] or "mirax." in lines[line - 1]


def test_lowered_ops_carry_the_lowered_ops_location():
    """convert-mirax-to-linalg locates every op it writes for a mirax op, the ones nested
    in a linalg body too, at that op (never at the lowering rule's generated text)."""
    from mlir import ir
    from mlir.passmanager import PassManager
    from mirax.lowering.convert_mirax_to_linalg import ConvertMiraxToLinalg
    from mirax.runtime.context import context
    src = """func.func @f(%x: tensor<4x8xf32>) -> tensor<4xf32> {
      %e = "mirax.exp"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32> loc("user.py":7:3)
      %s = "mirax.sum"(%e) {axes = array<i64: 1>, keepdims = false} : (tensor<4x8xf32>) -> tensor<4xf32> loc("user.py":9:5)
      return %s : tensor<4xf32>
    }"""
    with context(), ir.Location.unknown():
        module = ir.Module.parse(src)
        pm = PassManager("builtin.module")
        ConvertMiraxToLinalg().add_to(pm)
        pm.run(module.operation)
        fn = module.body.operations[0]
        seen = []

        def visit(op):
            if op.name not in ("func.func", "func.return"):
                seen.append((op.name, str(op.location)))
            return ir.WalkResult.ADVANCE
        fn.operation.walk(visit)
    assert any(n == "math.exp" for n, _ in seen) and any(n == "arith.addf" for n, _ in seen), seen
    for name, loc in seen:
        assert loc in ('loc("user.py":7:3)', 'loc("user.py":9:5)'), (name, loc)
    assert ("math.exp", 'loc("user.py":7:3)') in seen and ("arith.addf", 'loc("user.py":9:5)') in seen
