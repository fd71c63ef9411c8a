"""mirax-opt as a user meets it: bad input gives MLIR-style diagnostics, never a traceback."""
import subprocess
import sys

import pytest

from mirax import opt
from mirax.lowering import PASSES

GOOD = """func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "mirax.exp"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "mirax.exp"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = "mirax.add"(%0, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %2 : tensor<4xf32>
}
"""


def run_opt(args, stdin):
    p = subprocess.run([sys.executable, "-m", "mirax.opt", *args], input=stdin,
                       capture_output=True, text=True, timeout=120)
    assert "Traceback" not in p.stderr, p.stderr
    return p


@pytest.mark.parametrize("text, message", [
    ("func.func @f(", "<stdin>:1:"),
    ("this is not mlir", "<stdin>:1:1: error:"),
    ('func.func @f(%a: tensor<4xf32>, %b: tensor<3xf32>) -> tensor<4xf32> {\n'
     '  %0 = "mirax.add"(%a, %b) : (tensor<4xf32>, tensor<3xf32>) -> tensor<4xf32>\n'
     '  return %0 : tensor<4xf32>\n}\n', "<stdin>:2:8: error: mirax.add: operand shapes differ"),
    ('func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n'
     '  %0 = "mirax.nope"(%a) : (tensor<4xf32>) -> tensor<4xf32>\n'
     '  return %0 : tensor<4xf32>\n}\n', "<stdin>:2:8: error: unregistered operation 'mirax.nope'"),
    ("\xff\x00garbage", "error:"),
])
def test_bad_input_is_a_diagnostic(text, message):
    p = run_opt(["-", "--mirax-simplify"], text)
    assert p.returncode != 0
    assert message in p.stderr
    assert p.stdout == ""


def test_good_input_round_trips_and_simplifies():
    p = run_opt(["--mirax-simplify", "--canonicalize"], GOOD)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count('"mirax.exp"') == 1


def test_unknown_pass_is_a_clear_error(capsys):
    assert opt.main(["--no-such-pass", "-"]) != 0
    err = capsys.readouterr().err
    assert "'no-such-pass' is neither a mirax pass nor an upstream MLIR pass" in err


def test_bad_pass_option(capsys):
    assert opt.main(["--mirax-simplify=bogus=1", "-"]) != 0
    assert "has no option bogus" in capsys.readouterr().err


def test_help_lists_mirax_passes(capsys):
    assert opt.main(["--help"]) == 0
    out = capsys.readouterr().out
    for name, cls in PASSES.items():
        assert f"--{name}" in out
        assert cls.summary in out


def test_missing_input_file(capsys, tmp_path):
    assert opt.main([str(tmp_path / "absent.mlir")]) != 0
    assert "could not open input file" in capsys.readouterr().err


def test_pipeline_mixes_mirax_and_upstream(tmp_path):
    src = tmp_path / "in.mlir"
    src.write_text(GOOD)
    out = tmp_path / "out.mlir"
    rc = opt.main([str(src), "-o", str(out),
                   "--pass-pipeline=builtin.module(mirax-simplify, convert-mirax-to-linalg, func.func(canonicalize))"])
    assert rc == 0
    text = out.read_text()
    assert "mirax." not in text and "math.exp" in text


def test_split_input_file_and_verify_diagnostics(tmp_path, capsys):
    src = tmp_path / "bad.mlir"
    src.write_text(GOOD + "\n// -----\n\n"
                   'func.func @g(%a: tensor<2x3xf32>) -> tensor<3x2xf32> {\n'
                   '  // expected-error @+1 {{not a permutation}}\n'
                   '  %0 = "mirax.transpose"(%a) {permutation = array<i64: 1, 1>} : (tensor<2x3xf32>) -> tensor<3x2xf32>\n'
                   '  return %0 : tensor<3x2xf32>\n}\n')
    assert opt.main([str(src), "-split-input-file", "-verify-diagnostics"]) == 0
    # an expectation that is not met fails, naming the line
    src.write_text(src.read_text().replace("not a permutation", "something else"))
    assert opt.main([str(src), "-split-input-file", "-verify-diagnostics"]) == 1
    err = capsys.readouterr().err
    assert "expected error \"something else\" was not produced" in err
    assert "unexpected error" in err


def test_passes_run_without_a_default_location():
    """A user's own PassManager over mirax IR, with no `with ir.Location` around it: our
    passes set one for the bindings' builders (a 0-d unsigned constant failed to lower)."""
    from mlir import ir
    from mirax.runtime import cpu
    from mirax.runtime.context import new_context
    with new_context():
        m = ir.Module.parse('func.func @main() -> tensor<ui64> {\n'
                            '  %0 = "mirax.constant"() {value = dense<7> : tensor<ui64>} : () -> tensor<ui64>\n'
                            '  return %0 : tensor<ui64>\n}')
        cpu.lower_to_llvm(m)
        assert "llvm.func @main" in str(m) and "mirax." not in str(m)
