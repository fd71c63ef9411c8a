"""Compile time of the transformer LM training step (examples/transformer_lm.py: forward,
backward and AdamW in one mr.compile), each in a fresh process with a cold cache.

    .venv/bin/python bench/compile_time.py [--layers 2 4] [--repeat 3] [--device gpu]

For each layer count it prints the medians over `--repeat` processes (run in turn, the
layer counts interleaved) of: the step's mirax ops, the MLIR pipeline time
(runtime.cpu.lower_to_llvm: mirax -> LLVM dialect), the LLVM time (translation, -O2 and
code generation: runtime.llvm_codegen.compile_objects on its threads, or the
ExecutionEngine; plus runtime.disk_cache.link_and_load: `ld`, `dlopen`), the LLVM IR size (`mlir-translate --mlir-to-llvmir` of the lowered module, when
the wheel ships it) and the step time after compiling. Only the step's own module counts
(the eager ops of the set-up compile kernels of their own). Target: LLVM under 1 s for the
default 2-layer step, growing linearly with the layers.

With `--device gpu` the step runs on `mr.gpu` (Vulkan; lavapipe without a GPU): "MLIR s"
is then the GPU pipeline (gpu_pipeline.lower_to_spirv: mirax -> SPIR-V), and the step
time is a median of 3 (lavapipe runs the kernels on the CPU: it says nothing of a GPU).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from _host import describe

CHILD = r"""
import json, os, re, subprocess, sys, tempfile, time
sys.path.insert(0, sys.argv[2])
import numpy as np
import mirax as mr
import mirax.optimizers as optim
from mirax.runtime import cpu, disk_cache, llvm_codegen
from mirax.lowering import gpu_pipeline
from transformer_lm import TransformerLM, make_step
layers, gpu = int(sys.argv[1]), sys.argv[3] == "gpu"
R = []  # one record per module compiled
lower, engine, link = cpu.lower_to_llvm, cpu.ExecutionEngine, disk_cache.link_and_load
objects = llvm_codegen.compile_objects
def timed_lower(m):
    rec = {"mirax_chars": len(str(m))}
    t = time.perf_counter(); lower(m); rec["mlir"] = time.perf_counter() - t
    rec["text"] = str(m)
    R.append(rec)
def timed_engine(*a, **k):
    t = time.perf_counter(); e = engine(*a, **k)
    if R: R[-1]["llvm"] = R[-1].get("llvm", 0) + time.perf_counter() - t
    return e
def timed_objects(*a, **k):
    t = time.perf_counter(); r = objects(*a, **k)
    if R: R[-1]["llvm"] = R[-1].get("llvm", 0) + time.perf_counter() - t
    return r
def timed_link(*a, **k):
    t = time.perf_counter(); r = link(*a, **k)
    if R: R[-1]["llvm"] = R[-1].get("llvm", 0) + time.perf_counter() - t
    return r
cpu.lower_to_llvm, cpu.ExecutionEngine, disk_cache.link_and_load = timed_lower, timed_engine, timed_link
llvm_codegen.compile_objects = timed_objects
spirv = gpu_pipeline.lower_to_spirv
def timed_spirv(m, *a, **k):
    rec = {"mirax_chars": len(str(m)), "text": None}
    t = time.perf_counter(); p = spirv(m, *a, **k); rec["mlir"] = time.perf_counter() - t
    R.append(rec)
    return p
gpu_pipeline.lower_to_spirv = timed_spirv
if gpu:
    mr.set_default_device(mr.gpu)
mr.random.seed(0)
vocab, context, dims, heads, batch = 24, 48, 64, 4, 32  # examples/transformer_lm.py's defaults
model = TransformerLM(vocab, context, dims, heads, layers)
optimizer = optim.AdamW(learning_rate=3e-3, weight_decay=0.01)
step = make_step(model, optimizer)
state = [model.state, optimizer.state]
rng = np.random.default_rng(0)
x = mr.array(rng.integers(0, vocab, (batch, context)).astype(np.int32))
y = mr.array(rng.integers(0, vocab, (batch, context)).astype(np.int32))
mr.eval(x, y, state)
n_mirax = len(re.findall(r'"mirax\.', step.lower(x, y).as_text("simplified")))
R.clear()
t = time.perf_counter(); mr.eval(step(x, y), state); first = time.perf_counter() - t
big = max(R, key=lambda r: r["mirax_chars"])
out = {"mirax ops": n_mirax, "first call s": first, "MLIR s": big["mlir"], "LLVM s": big.get("llvm", 0)}
tool = os.path.join(os.path.dirname(cpu.ir.__file__), "bin", "mlir-translate")
if os.path.exists(tool) and not gpu:
    with tempfile.NamedTemporaryFile("w", suffix=".mlir") as f:
        f.write(big["text"]); f.flush()
        ll = subprocess.run([tool, "--mlir-to-llvmir", f.name], capture_output=True, text=True).stdout
    out["LLVM IR KB"] = len(ll) / 1e3
ts = []
for _ in range(3 if gpu else 20):
    t = time.perf_counter(); mr.eval(step(x, y), state); ts.append(time.perf_counter() - t)
out["step ms"] = 1e3 * sorted(ts)[len(ts) // 2]
print(json.dumps(out))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    a = ap.parse_args()
    print(describe())
    examples = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")
    runs = {n: [] for n in a.layers}
    for _ in range(a.repeat):
        for n in a.layers:
            with tempfile.TemporaryDirectory() as cache:
                env = dict(os.environ, MIRAX_CACHE_DIR=cache)  # a cold cache each time
                r = subprocess.run([sys.executable, "-c", CHILD, str(n), examples, a.device], env=env,
                                   capture_output=True, text=True)
            if r.returncode:
                sys.exit(r.stderr)
            runs[n].append(json.loads(r.stdout.strip().splitlines()[-1]))
    keys = list(runs[a.layers[0]][0])
    print(f"transformer LM training step (dims 64, 4 heads, context 48, batch 32) on the {a.device.upper()}, "
          f"medians of {a.repeat} fresh processes each:")
    print(f"{'':16}" + "".join(f"{f'{n} layers':>12}" for n in a.layers))
    for k in keys:
        vals = [statistics.median(r[k] for r in runs[n]) for n in a.layers]
        print(f"{k:16}" + "".join(f"{v:12.0f}" if k == "mirax ops" else f"{v:12.2f}" for v in vals))
    lo, hi = a.layers[0], a.layers[-1]
    if hi != lo and a.device == "cpu":
        llvm = [statistics.median(r["LLVM s"] for r in runs[n]) for n in (lo, hi)]
        print(f"LLVM time {hi} vs {lo} layers: {llvm[1] / max(llvm[0], 1e-9):.2f}x "
              f"(the program grows {statistics.median(r['mirax ops'] for r in runs[hi]) / statistics.median(r['mirax ops'] for r in runs[lo]):.2f}x)")


if __name__ == "__main__":
    main()
