"""mirax-streaming-stores (lowering/streaming_stores.py): large elementwise kernels write
with non-temporal stores behind a masked head and tail; every output alignment, length
and body must give the same values as the kernel without them."""
import contextlib
import math
import re

import numpy as np
import pytest

import mirax as mr
from mirax.lowering import host_cpu, tuning
from mirax.lowering.cpu_pipeline import MiraxCpuPipeline
from mirax.runtime import cpu


def _kernel(fun, *avals, stream_bytes=1, threads=0):
    """fun traced on `avals` ((shape, dtype) pairs), lowered with streaming stores from
    `stream_bytes` (-1: none)."""
    text = str(mr.trace(fun, *[mr.zeros(s, dtype=d) for s, d in avals]))
    text = re.sub(r"(func\.func @main\([^)]*\) -> [^{]*)\{", r"\1attributes {llvm.emit_c_interface} {", text, count=1)
    opts = {"stream-bytes": stream_bytes, "threads": threads}
    tag = f"mirax-cpu-pipeline stream-bytes={stream_bytes} threads={threads}"
    return cpu.compile_module(text, "main", lower=(tag, lambda pm: MiraxCpuPipeline(**opts).add_to(pm)))


def _out_at(shape, dtype, byte_offset, boundary=64):
    """An uninitialised C-contiguous array whose data starts `byte_offset` bytes past a
    `boundary`-byte boundary (a view of a larger buffer)."""
    dtype = np.dtype(dtype)
    n = math.prod(shape) * dtype.itemsize
    raw = np.empty(n + boundary + byte_offset, np.uint8)
    start = (-raw.ctypes.data) % boundary + byte_offset
    return raw[start:start + n].view(dtype).reshape(shape)


def gelu(x):
    return x * (1 + mr.erf(x / math.sqrt(2))) / 2


@pytest.fixture(scope="module")
def gelu_kernels():
    shape = (3, 1001)  # 3003 elements: not a multiple of 16
    return _kernel(gelu, (shape, mr.float32)), _kernel(gelu, (shape, mr.float32), stream_bytes=-1)


@pytest.mark.parametrize("offset", [0, 4, 16, 60])
def test_gelu_same_values_at_every_alignment(gelu_kernels, offset):
    streamed, plain = gelu_kernels
    x = np.random.default_rng(0).standard_normal((3, 1001)).astype(np.float32) * 3
    want = np.empty_like(x)
    plain([x], [want])
    got = _out_at(x.shape, np.float32, offset)
    got[...] = np.nan
    streamed([x], [got])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("behind", [-16, 0, 16, 48, 112, 2048])
def test_input_near_the_output_in_page_offset(gelu_kernels, behind):
    """Inputs whose page offset is a little behind the output's run the body backward
    (4K aliasing); every relation gives the same values."""
    streamed, plain = gelu_kernels
    x0 = np.random.default_rng(3).standard_normal((3, 1001)).astype(np.float32)
    x = _out_at(x0.shape, np.float32, (64 - behind) % 4096, boundary=4096)
    x[...] = x0
    want = np.empty_like(x0)
    plain([x0], [want])
    out = _out_at(x0.shape, np.float32, 64, boundary=4096)
    streamed([x], [out])
    np.testing.assert_array_equal(out, want)


def test_output_not_aligned_to_its_element_size(gelu_kernels):
    """An f32 output at an odd address (a view of bytes): every element through the
    masked head, none with an aligned store."""
    streamed, plain = gelu_kernels
    x = np.random.default_rng(1).standard_normal((3, 1001)).astype(np.float32)
    want = np.empty_like(x)
    plain([x], [want])
    raw = np.empty(x.nbytes + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + 1
    got = raw[start:start + x.nbytes].view(np.float32).reshape(x.shape)
    assert got.ctypes.data % 4 == 1
    streamed([x], [got])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n", [1, 15, 16, 17, 40])
def test_short_outputs(n):
    k = _kernel(lambda x: x * 2 + 1, ((n,), mr.float32))
    x = np.arange(n, dtype=np.float32)
    for offset in (0, 8):
        out = _out_at((n,), np.float32, offset)
        k([x], [out])
        np.testing.assert_array_equal(out, x * 2 + 1)


@pytest.mark.parametrize("dtype", [mr.float64, mr.int32, mr.float16])
def test_other_element_types(dtype):
    npt = np.dtype(str(dtype).split(".")[-1])
    k = _kernel(lambda x, y: x * y + x, ((5, 77), dtype), ((5, 77), dtype))
    x = (np.arange(385).reshape(5, 77) % 13).astype(npt)
    y = (np.arange(385).reshape(5, 77) % 7).astype(npt)
    out = _out_at((5, 77), npt, 8)
    k([x, y], [out])
    np.testing.assert_array_equal(out, x * y + x)


def test_two_outputs_and_threads():
    k = _kernel(lambda x: (x + 1, mr.maximum(x, 0.5)), ((4, 5000), mr.float32), threads=2)
    x = np.random.default_rng(2).standard_normal((4, 5000)).astype(np.float32)
    a, b = _out_at(x.shape, np.float32, 12), _out_at(x.shape, np.float32, 0)
    k([x], [a, b])
    np.testing.assert_array_equal(a, x + 1)
    np.testing.assert_array_equal(b, np.maximum(x, 0.5))


def test_stores_are_nontemporal_only_past_the_threshold():
    text = str(mr.trace(gelu, mr.zeros((8, 1024))))
    from mirax.lowering.pass_base import PassManager  # noqa: F401 - (patched PassManager)
    from mlir import ir
    from mlir.passmanager import PassManager as PM
    with cpu.context():
        for stream_bytes, want in ((1, True), (8 * 1024 * 4 + 1, False), (-1, False)):
            m = ir.Module.parse(text)
            pm = PM("builtin.module")
            MiraxCpuPipeline(**{"stream-bytes": stream_bytes, "threads": 1}).add_to(pm)
            pm.run(m.operation)
            assert ("nontemporal" in str(m)) == want, stream_bytes


def test_threshold_is_the_hosts_last_level_cache():
    for name, h in host_cpu.PRESETS.items():
        ew = tuning.derive(h)["elementwise"]
        assert ew["streaming_store_bytes"] == (h.l3 or h.l2 * h.cores), name
        assert ew["line_bytes"] == (128 if name == "neon" else 64)


@contextlib.contextmanager
def _elementwise(**entries):
    """This host's derived elementwise entries replaced by `entries` while inside (the
    kernel cache's key follows: tuning.fingerprint hashes the table)."""
    ew = tuning._derived()["elementwise"]
    old = dict(ew)
    ew.update(entries)
    try:
        yield
    finally:
        ew.clear()
        ew.update(old)


def _lowered(fun, shape, dtype, stream_bytes, threads=1):
    from mirax.lowering.pass_base import PassManager  # noqa: F401 - (patched PassManager)
    from mlir import ir
    from mlir.passmanager import PassManager as PM
    text = str(mr.trace(fun, mr.zeros(shape, dtype=dtype)))
    with cpu.context():
        m = ir.Module.parse(text)
        pm = PM("builtin.module")
        MiraxCpuPipeline(**{"stream-bytes": stream_bytes, "threads": threads}).add_to(pm)
        pm.run(m.operation)
        return str(m)


x86_only = pytest.mark.skipif(host_cpu.host().arch not in ("x86_64", "AMD64"),
                              reason="the pinned constants' inline asm is x86's ('=x': a vector register)")


def poly(x):
    """Nine constants, no math: a Horner polynomial."""
    acc = x * 0.5 + 1.25
    for c in (-0.75, 2.5, 0.125, -3.0, 1.5, 0.0625, -0.3125):
        acc = acc * x + c
    return acc


@x86_only
@pytest.mark.parametrize("fun,dtype", [(gelu, mr.float32), (poly, mr.float32), (poly, mr.float64)],
                         ids=["gelu-f32", "poly-f32", "poly-f64"])
@pytest.mark.parametrize("stream_bytes,min_constants", [(1, 0), (1 << 30, 8)], ids=["streamed", "small"])
@pytest.mark.parametrize("loop_bytes", [32, 64], ids=["register", "line"])
def test_pinned_constants_give_the_same_values(fun, dtype, stream_bytes, min_constants, loop_bytes):
    """Constants behind the empty inline asm (x86 without AVX-512: one 32-byte register,
    8 f32 or 4 f64 lanes, at a time) and the vector loop of a small op with many constants,
    an iteration one register or one line, compute what LLVM's own loop computes, bit for
    bit, at every alignment; the constants are no longer in the loop."""
    shape = (3, 1001)
    npt = np.dtype(str(dtype).split(".")[-1])
    plain = _kernel(fun, (shape, dtype), stream_bytes=-1)
    with _elementwise(pin_bytes=32, vector_min_constants=min_constants, loop_vector_bytes=loop_bytes):
        pinned = _kernel(fun, (shape, dtype), stream_bytes=stream_bytes)
        text = _lowered(fun, shape, dtype, stream_bytes)
    assert text.count('llvm.inline_asm "", "=x,0"') >= 8, text
    assert ("nontemporal" in text) == (stream_bytes == 1)
    lanes = loop_bytes // npt.itemsize
    assert re.search(rf"llvm.load .*: !llvm.ptr -> vector<{lanes}x{'f32' if npt.itemsize == 4 else 'f64'}>", text)
    x = np.random.default_rng(5).standard_normal(shape).astype(npt) * 3
    x[0, :4] = [np.nan, np.inf, -np.inf, 0.0]
    want = np.empty_like(x)
    plain([x], [want])
    for offset in (0, 4, 24):
        got = _out_at(shape, npt, offset)
        got[...] = -7
        pinned([x], [got])
        np.testing.assert_array_equal(got, want)


@x86_only
def test_constants_are_pinned_in_each_task_of_a_parallel_loop():
    """A streamed gelu split over two threads: each task pins the constants before its
    loops (inside the OpenMP loop's body), and the values are LLVM's own loop's, bit for
    bit."""
    shape = (64, 4099)  # split over the threads, 4099 columns: a head and a masked tail
    plain = _kernel(gelu, (shape, mr.float32), stream_bytes=-1, threads=2)
    with _elementwise(pin_bytes=32, vector_min_constants=8, loop_vector_bytes=32, parallel_min_elements=4096):
        pinned = _kernel(gelu, (shape, mr.float32), stream_bytes=1, threads=2)
        text = _lowered(gelu, shape, mr.float32, 1, threads=2)
    task = text[text.index("omp.parallel"):]  # (its loop: mirax-task-counter's, dynamic)
    assert task.count('llvm.inline_asm "", "=x,0"') >= 8 and "nontemporal" in task, text
    x = np.random.default_rng(6).standard_normal(shape).astype(np.float32) * 3
    x[0, :4] = [np.nan, np.inf, -np.inf, 0.0]
    _same_values_at_offsets(pinned, plain, x)


def _same_values_at_offsets(kernel, plain, x):
    """`kernel` writes what `plain` does, bit for bit, into outputs 0 and 4 bytes past a
    cache line."""
    want = np.empty_like(x)
    plain([x], [want])
    for offset in (0, 4):
        got = _out_at(x.shape, x.dtype, offset)
        kernel([x], [got])
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("rows,tasks", [(64, 16), (6, 6), (2, 2)])
def test_streamed_ops_are_split_into_dynamic_tasks(rows, tasks):
    """A streamed elementwise op over two threads is split into up to 8 tasks a thread on
    its outermost dim (as many as divide it), handed out dynamically, with the values of
    the unsplit, unstreamed kernel bit for bit; without streaming, one static task a
    thread (its block from the thread number)."""
    shape = (rows, 4099)  # 4099 columns: each task has a head and a masked tail
    plain = _kernel(gelu, (shape, mr.float32), stream_bytes=-1, threads=2)
    with _elementwise(parallel_min_elements=4096):
        split = _kernel(gelu, (shape, mr.float32), stream_bytes=1, threads=2)
        text = _lowered(gelu, shape, mr.float32, 1, threads=2)
        unstreamed = _lowered(gelu, shape, mr.float32, -1, threads=2)
    # (dynamic: mirax-task-counter's loop, each thread taking the next task by an atomic add)
    assert "omp.wsloop" not in text and "nontemporal" in text
    upper = re.search(r"llvm\.atomicrmw add [^\n]*\n\s*%\w+ = llvm\.icmp \"slt\" %\w+, (%\w+) : i64", text).group(1)
    assert f"{upper} = llvm.mlir.constant({tasks} : index)" in text
    # (static: mirax-static-partition's block a thread, by thread number)
    assert "llvm.call @omp_get_thread_num()" in unstreamed and "llvm.atomicrmw" not in unstreamed
    _same_values_at_offsets(split, plain, np.random.default_rng(7).standard_normal(shape).astype(np.float32) * 3)


def test_small_ops_with_few_constants_stay_with_llvm():
    with _elementwise(pin_bytes=0, vector_min_constants=3):
        few = _lowered(lambda x: x * 2 + 1, (3, 1001), mr.float32, 1 << 30)
        many = _lowered(gelu, (3, 1001), mr.float32, 1 << 30)
    assert "vector.maskedstore" not in few and "llvm.intr.masked.store" not in few
    assert "llvm.intr.masked.store" in many and "nontemporal" not in many and "inline_asm" not in many


def test_pinning_is_derived_for_x86_without_avx512():
    for name, h in host_cpu.PRESETS.items():
        ew = tuning.derive(h)["elementwise"]
        pinned = name == "avx2"  # 16 vector registers, no embedded broadcast
        assert ew["pin_bytes"] == (32 if pinned else 0), name
        # an iteration of the vector loops: one register there, a cache line elsewhere
        assert ew["loop_vector_bytes"] == (32 if pinned else 128 if name == "neon" else 64), name
        assert ew["vector_min_constants"] == (8 if pinned else 0), name
