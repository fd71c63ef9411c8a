"""A compiled `checkpoint` lowers peak memory (issue 12).

Reverse mode re-runs a checkpointed block in the backward pass on its inputs passed
through `mirax.optimization_barrier`s, so no CSE merges the recomputation with the
forward values, and `mirax-early-dealloc` frees every temporary after its last use: the
forward activations of a block die in the forward pass.

Compiled kernels allocate their temporaries with malloc inside the JIT code, which
`mr.get_peak_memory()` (the runtime's buffers only) does not see. So the peak is measured
in a fresh process whose malloc/free are counted by a small LD_PRELOAD library (glibc):
the most bytes live at once during one call, the call's results included.
"""
import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import mirax as mr

# counts the bytes malloc'd and not yet freed, and their peak (resettable), for the
# whole process; read through ctypes.CDLL(None)
MALLOC_COUNTER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "malloc_counter.c")

# 32 residual blocks x + tanh(x @ w1) @ w2 (width D, hidden H): without checkpoint the
# backward pass needs each block's tanh (B x H); with it, only each block's input (B x D).
# Sizes stay below the tiled matmul code generator's threshold (compile time).
L, B, D, H = 32, 32, 32, 128

CHILD = textwrap.dedent(r"""
    import ctypes, json, sys
    import numpy as np
    import mirax as mr

    lib = ctypes.CDLL(None)
    lib.mirax_malloc_peak.restype = lib.mirax_malloc_current.restype = ctypes.c_longlong
    L, B, D, H = (int(a) for a in sys.argv[1:5])
    out_dir = sys.argv[5]
    if len(sys.argv) > 6:  # tiles for every product (as the tuner stores them), json
        import contextlib
        from mirax.lowering import tuning
        cfg = json.loads(sys.argv[6])
        key = tuning.shape_class("linalg.matmul", None, B, H, D)
        tiles = contextlib.ExitStack()  # (kept: the override ends when it is collected)
        tiles.enter_context(tuning.override(matmul={key: dict(cfg, dtype="f32", shape=f"{B}x{H}x{D}")}))
    mr.set_cache_limit(0)  # every result is a fresh allocation, in both variants
    rng = np.random.default_rng(0)
    params = [(mr.array(rng.standard_normal((D, H)).astype(np.float32) / np.sqrt(D)),
               mr.array(rng.standard_normal((H, D)).astype(np.float32) / np.sqrt(H))) for _ in range(L)]
    x = mr.array(rng.standard_normal((B, D)).astype(np.float32))

    def block(x, w1, w2):
        return x + mr.tanh(x @ w1) @ w2

    report = {}
    for name, blk in (("plain", block), ("checkpoint", mr.checkpoint(block))):
        def loss(params, x):
            for w1, w2 in params:
                x = blk(x, w1, w2)
            return mr.mean(x * x)
        g = mr.compile(mr.grad(loss))
        mr.eval(g(params, x))  # compiles (or loads) the kernel, warms the threads
        before = lib.mirax_malloc_current()
        lib.mirax_malloc_reset_peak()
        grads = g(params, x)
        mr.eval(grads)
        report[name] = lib.mirax_malloc_peak() - before
        np.savez(f"{out_dir}/{name}.npz", *[np.asarray(w) for pair in grads for w in pair])
        del grads
    print(json.dumps(report))
""")


def _malloc_counter(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if not sys.platform.startswith("linux") or cc is None:
        pytest.skip("counting malloc needs Linux (glibc, LD_PRELOAD) and a C compiler")
    src = MALLOC_COUNTER
    lib = tmp_path / "malloc_count.so"
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return lib


# the tiles the tuner picked on an AVX2 host (znver3) for the MLP products, scaled to this
# model: B and A repacked into panels, C written through a [M/mr][mr][N/nr][nr] view of
# itself. The weight gradients, results of the function, were then computed in buffers
# of their own and copied into the outputs at the end (mirax-results-in-place): the
# checkpointed gradient kept them all twice and saved a quarter of what it should.
PACKED = dict(mr=4, nr=16, kc=128, nc=32, forall_m=16, min_flops=0, max_pad=4, pack_b=1, pack_a=1,
              rows_outer=1, split=0)


@pytest.mark.parametrize("tiles", [None, PACKED], ids=["host-tiles", "packed-tiles"])
def test_compiled_checkpoint_lowers_peak_memory(tmp_path, tiles):
    lib = _malloc_counter(tmp_path)
    env = dict(os.environ, LD_PRELOAD=str(lib))
    extra = [json.dumps(tiles)] if tiles else []
    r = subprocess.run([sys.executable, "-c", CHILD, str(L), str(B), str(D), str(H), str(tmp_path)] + extra,
                       env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    peaks = json.loads(r.stdout.strip().splitlines()[-1])
    plain, ckpt = peaks["plain"], peaks["checkpoint"]
    results = 2 * L * D * H * 4  # the gradients, allocated during the call in both
    activations = L * B * H * 4  # the tanh of every block, kept by the plain version
    assert plain >= results and ckpt >= results, peaks
    # checkpointing keeps only each block's input: it saves most of the activations
    assert plain - ckpt > activations / 2, (
        f"peak during the call: {plain / 2**20:.2f} MB without checkpoint, {ckpt / 2**20:.2f} MB with; "
        f"the activations checkpoint should not keep are {activations / 2**20:.2f} MB")
    want, got = np.load(tmp_path / "plain.npz"), np.load(tmp_path / "checkpoint.npz")
    assert len(want.files) == 2 * L
    for k in want.files:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)


def test_checkpoint_recomputation_survives_simplification():
    """The compiled gradient of a checkpointed function keeps its recomputation behind
    barriers through mirax-simplify, drops them before bufferization, and computes the
    same gradient as without checkpoint (and as eager)."""
    rng = np.random.default_rng(1)
    x = mr.array(rng.standard_normal((4, 8)).astype(np.float32))
    w = mr.array(rng.standard_normal((8, 8)).astype(np.float32))

    def f(x, w):
        return mr.tanh(mr.sin(x) @ w)

    def loss(fn):
        return lambda x, w: mr.sum(fn(fn(x, w), w))

    g = mr.compile(mr.grad(loss(mr.checkpoint(f)), argnums=(0, 1)))
    low = g.lower(x, w)
    simplified = low.as_text("simplified")
    assert simplified.count('"mirax.optimization_barrier"') == 4, simplified  # two inputs, two calls
    # the first call's forward (the second's only feeds the loss) and both recomputations
    assert simplified.count('"mirax.sin"') == 3, simplified
    assert "optimization_barrier" not in low.as_text("llvm")
    want = mr.grad(loss(f), argnums=(0, 1))(x, w)
    got = g(x, w)
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
