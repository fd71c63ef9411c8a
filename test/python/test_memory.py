"""Bounded memory (issue 11): kernels run from shared objects, in-memory caches are
bounded LRUs, evicted kernels unload, compiled calls do not leak, `mr.clear_cache`."""
import gc
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import mirax as mr
from mirax.runtime import cpu, disk_cache
from mirax.runtime.kernel_cache import LRU
from test_disk_cache import exp_module, run_exp  # the eager exp kernel those tests compile


def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("MIRAX_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("MIRAX_CACHE_SYNC", "1")
    cpu.clear_memory_cache()
    cpu.stats.reset()
    yield tmp_path
    cpu.clear_memory_cache()


@pytest.mark.parametrize("disk", [True, False])
def test_compiled_kernel_runs_from_a_shared_object(fresh, monkeypatch, disk):
    if not disk:
        monkeypatch.setenv("MIRAX_CACHE_DIR", "")
    k = run_exp(3001 + disk)
    assert cpu.stats.compiles == 1
    assert k.engine is None and k.owner is not None  # no ExecutionEngine kept
    assert 0 < k.nbytes < 200_000


def _mapped(fragment):
    with open("/proc/self/maps") as f:
        return fragment in f.read()


def test_evicted_kernel_is_unloaded(fresh):
    run_exp(3003)
    cpu.clear_memory_cache()
    k = run_exp(3003)  # loaded from the disk entry
    assert cpu.stats.disk_hits == 1
    entry = [p for p in (fresh / disk_cache._SUBDIR).glob("*.so")][0]
    assert _mapped(entry.name)
    del k
    cpu.clear_memory_cache()
    gc.collect()
    assert not _mapped(entry.name)  # dlclose'd once nothing references it


def test_distinct_kernels_grow_memory_little(fresh):
    for n in range(3100, 3105):  # the first kernels load LLVM's and MLIR's own state
        run_exp(n)
    gc.collect()
    before = rss_mb()
    for n in range(3200, 3240):
        run_exp(n)
    grew = rss_mb() - before
    # an ExecutionEngine per kernel kept ~2.4 MB each: 96 MB for these 40
    assert grew < 30, f"40 kernels grew RSS by {grew:.1f} MB"


def test_memory_cache_bounded_in_entries_and_bytes(fresh, monkeypatch):
    monkeypatch.setattr(cpu, "_loaded", LRU(3))
    for n in range(3300, 3306):
        run_exp(n)
    assert cpu.memory_cache_info()[0] == 3
    monkeypatch.setattr(cpu, "_loaded", LRU(100, max_bytes=1))  # every kernel is bigger
    run_exp(3310)
    run_exp(3311)
    assert cpu.memory_cache_info()[0] == 1  # the newest stays, the rest goes


def test_lru_order_and_bytes():
    class Item:
        def __init__(self, nbytes):
            self.nbytes = nbytes
    c = LRU(3, max_bytes=10)
    a, b, d = Item(4), Item(4), Item(4)
    c.put("a", a), c.put("b", b)
    assert c.get("a") is a  # "a" is now the most recent
    c.put("d", d)  # 12 bytes > 10: "b", the least recently used, goes
    assert "b" not in c and "a" in c and "d" in c and c.nbytes == 8
    for i in range(5):
        c.put(i, Item(0))
    assert len(c) == 3


def test_compiled_calls_do_not_leak():
    f = mr.compile(lambda x, w: mr.maximum(x @ w, 0.0).sum(axis=1))
    x = mr.array(np.random.rand(16, 32).astype(np.float32))
    w = mr.array(np.random.rand(32, 32).astype(np.float32))
    # a leak grows with the calls; one-time growth (OpenMP's threads and their malloc
    # arenas start when the machine is busy) must not count: two equal windows, the
    # second may not grow
    for _ in range(200):
        mr.eval(f(x, w))
    disk_cache.flush()  # the kernel's write to the disk cache (and its eviction scan) is done
    gc.collect()
    grown = []
    for _ in range(2):
        before = rss_mb()
        for _ in range(3000):
            mr.eval(f(x, w))
        gc.collect()
        grown.append(rss_mb() - before)
    assert min(grown) < 3, grown


def test_clear_cache_keeps_arrays_valid(fresh):
    x = mr.array(np.arange(1 << 19, dtype=np.float32))
    y = mr.exp(x * 0)
    mr.eval(y)
    del y
    gc.collect()
    assert mr.get_cache_memory() >= (1 << 21)  # the freed 2 MB output is pooled for reuse
    mr.clear_cache()
    assert mr.get_cache_memory() == 0
    assert cpu.memory_cache_info() == (0, 0)
    np.testing.assert_array_equal(np.asarray(mr.exp(x * 0)), np.ones(1 << 19, np.float32))
    assert float(x[3]) == 3.0
    mr.clear_cache(disk=True)
    assert list((fresh / disk_cache._SUBDIR).glob("*.so")) == []


def test_cache_max_bytes_caps_the_directory(fresh, monkeypatch):
    monkeypatch.setenv("MIRAX_CACHE_MAX_BYTES", "40000")  # about two entries
    assert disk_cache.size_limit() == 40000
    for n in range(3400, 3410):
        run_exp(n)
    disk_cache.evict()
    total = sum(p.stat().st_size for p in (fresh / disk_cache._SUBDIR).iterdir())
    assert total <= 40000


def test_corrupt_gpu_program_entry_is_rebuilt(fresh):
    from mirax.runtime import vulkan
    if not vulkan.is_available():
        pytest.skip("no Vulkan device: " + vulkan.VulkanDevice.why_unavailable())
    text = "module {\n" + exp_module(3500).replace(" attributes {llvm.emit_c_interface}", "") + "}\n"
    vulkan.compile_program(text, "kernel")
    (entry,) = (fresh / disk_cache._SUBDIR).glob("gpu-*.json")
    digest, body = entry.read_text().split("\n", 1)
    entry.write_text(digest + "\n" + body.replace("0", "1", 1))  # still JSON, altered
    vulkan._programs.clear()
    cpu.stats.reset()
    p = vulkan.compile_program(text, "kernel")
    assert cpu.stats.disk_corrupt == 1 and p.kernels
    assert entry.read_text() == digest + "\n" + body  # rewritten whole


def test_gpu_pipelines_are_bounded_and_destroyed(monkeypatch):
    """The device's compute pipelines sit in an LRU; an evicted one is destroyed after the
    submit that may still use it, and is rebuilt (from the pipeline cache) when needed."""
    from mirax.runtime import vulkan
    if not vulkan.is_available():
        pytest.skip("no Vulkan device: " + vulkan.VulkanDevice.why_unavailable())
    dev = vulkan.VulkanDevice.get()
    monkeypatch.setattr(dev.kernels, "capacity", 2)
    destroyed = []
    monkeypatch.setattr(vulkan.Kernel, "destroy", lambda self, d, real=vulkan.Kernel.destroy:
                        (destroyed.append(self), real(self, d)))
    with mr.stream(mr.gpu):
        for n in (3, 5, 7, 9, 3):  # distinct kernels, then the first one again
            x = np.linspace(-1, 1, n, dtype=np.float32)
            np.testing.assert_allclose(np.asarray(mr.exp(mr.array(x)) * 2), np.exp(x) * 2, rtol=1e-5)
    assert len(dev.kernels) <= 2 and destroyed and dev._retired == []
