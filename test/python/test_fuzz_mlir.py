"""Mutated .mlir inputs through mirax-opt (mlir_fuzz.py): diagnostics and non-zero
exits only, never a signal or a Python traceback. CI runs a small reproducible budget
(MIRAX_FUZZ_MLIR_CASES, default 300, seed 0); `make fuzz` runs a long random campaign."""
import os

import mlir_fuzz


def test_corpus_has_run_lines():
    files = mlir_fuzz.corpus()
    assert len(files) >= 10 and all(runs for _, _, runs in files)


def test_mutated_inputs_never_crash_mirax_opt():
    n = int(os.environ.get("MIRAX_FUZZ_MLIR_CASES", "300"))
    seed = int(os.environ.get("MIRAX_FUZZ_SEED", "0"))
    done, failures = mlir_fuzz.run_cases(mlir_fuzz.cases(n, seed))
    assert done == n
    assert mlir_fuzz.run_cases.outcomes["diagnosed"] > 0  # the mutations do reach the error paths
    assert not failures, "\n\n".join(f"{f['id']} mirax-opt {' '.join(f['args'])}\n{f['why'][-1500:]}"
                                     for f in failures[:3])


def test_translate_refuses_what_would_abort_the_parser(tmp_path):
    """Found by the fuzzer: `array<index: ...>` aborts MLIR's parser (an assertion)."""
    import subprocess
    import sys
    f = tmp_path / "bad.mlir"
    f.write_text('func.func @f(%x: tensor<2x3xf32>) -> tensor<3xf32> {\n'
                 '  %0 = "mirax.sum"(%x) {axes = array<index: 0>, keepdims = false} : (tensor<2x3xf32>) -> tensor<3xf32>\n'
                 '  return %0 : tensor<3xf32>\n}\n')
    r = subprocess.run([sys.executable, "-m", "mirax.translate", "--mirax-to-spirv", str(f)],
                       capture_output=True, text=True)
    assert r.returncode == 1 and f"{f}:2:" in r.stderr and "integer or float type, got 'index'" in r.stderr


def test_opt_refuses_malformed_linalg_lists(tmp_path):
    """Found by the fuzzer: a malformed list after linalg.transpose's `permutation =` (or
    linalg.broadcast's and linalg.reduce's `dimensions =`) aborts MLIR's parser (it sets a
    null attribute); mirax-opt reports it with its location instead."""
    import subprocess
    import sys
    f = tmp_path / "bad.mlir"
    for attr in ("permutation =  2, 1]", "permutation = [0, 2 1]"):
        f.write_text('func.func @t(%a: tensor<4x6x8xf32>, %e: tensor<4x8x6xf32>) -> tensor<4x8x6xf32> {\n'
                     '  %t = linalg.transpose ins(%a : tensor<4x6x8xf32>) outs(%e : tensor<4x8x6xf32>) '
                     f'{attr}\n  return %t : tensor<4x8x6xf32>\n}}\n')
        r = subprocess.run([sys.executable, "-m", "mirax.opt", str(f)], capture_output=True, text=True)
        assert r.returncode == 1 and f"{f}:2:" in r.stderr and "expected a list of integers" in r.stderr, r.stderr
