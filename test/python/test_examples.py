"""The scripts in examples/ run (at small sizes) and reach what their docstrings promise.

Each example's `main(argv)` is called in-process with a fixed seed; it prints its progress,
returns its measurements and raises SystemExit when its own threshold is missed. Most of
the time here is the one-time compilation of each training step (cold: ~5-30 s for the
transformer on a loaded 2-core machine; warm disk cache: well under a second).
"""
import importlib.util
import math
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"mirax_example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_linear_model_compiled_matches_uncompiled(capsys):
    out = _load("linear_model").main(["--steps", "10", "--seed", "0"])
    plain, compiled = out["uncompiled"], out["compiled"]
    assert len(plain) == len(compiled) == 10
    for a, b in zip(plain, compiled):
        assert math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6)
    assert plain[-1] < plain[0]
    assert "match at every step" in capsys.readouterr().out


def test_mlp_classifier_small(capsys):
    # 900 training points, 720 compiled steps; seeds 0-3 measured 0.977-0.997 test accuracy
    out = _load("mlp_classifier").main(["--points", "1200", "--epochs", "40", "--batch", "50", "--turns", "1.5",
                                        "--layers", "2", "--seed", "0", "--threshold", "0.9"])
    assert out["test_acc"] >= 0.9 and out["train_acc"] >= 0.9
    assert len(out["history"]) == 40
    assert out["history"][-1][0] < out["history"][0][0]  # the training loss went down
    printed = capsys.readouterr().out
    assert "epoch  40:" in printed and "steps/s" in printed


def test_mlp_classifier_threshold_exits_nonzero():
    with pytest.raises(SystemExit) as e:
        # the shapes of test_mlp_classifier_small: its kernels are reused, nothing compiles again
        _load("mlp_classifier").main(["--points", "1200", "--epochs", "1", "--batch", "50", "--turns", "1.5",
                                      "--layers", "2", "--seed", "0", "--threshold", "1.01", "--quiet"])
    assert e.value.code not in (0, None)


def test_transformer_lm_small(capsys):
    # 1 block, dims 32, context 16: 150 compiled AdamW steps take the held-out loss from
    # ~3.5 (ln 24 = 3.18) to ~0.66 nats/char at seed 0
    out = _load("transformer_lm").main(["--layers", "1", "--dims", "32", "--context", "16", "--batch", "16",
                                        "--steps", "150", "--warmup", "10", "--chars", "20000",
                                        "--log-every", "50", "--sample", "16", "--seed", "0",
                                        "--threshold", "1.2"])
    assert out["initial_loss"] > 0.9 * math.log(out["vocab_size"])
    assert out["final_loss"] < 1.2
    assert out["final_loss"] < 0.5 * out["initial_loss"]
    printed = capsys.readouterr().out
    assert "step  150:" in printed and "sample:" in printed
