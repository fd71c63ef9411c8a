"""The on-disk kernel cache (runtime/disk_cache.py) behind runtime.cpu.compile_module."""
import json
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
import types

import numpy as np
import pytest

from mirax.runtime import cpu, disk_cache


def exp_module(n):
    """An eager-style kernel module: exp over a tensor<n x f32> (n picks a distinct key)."""
    t = f"tensor<{n}xf32>"
    return (f"func.func @kernel(%arg0: {t} {{bufferization.writable = false}}) -> {t} "
            f"attributes {{llvm.emit_c_interface}} {{\n"
            f"  %0 = \"mirax.exp\"(%arg0) : ({t}) -> {t}\n  return %0 : {t}\n}}\n")


def call_exp(k, n):
    """Call exp_module(n)'s kernel `k` on fresh buffers; checks the result against numpy."""
    a = np.linspace(-2, 2, n, dtype=np.float32)
    out = np.empty(n, np.float32)
    k([a], [out])
    np.testing.assert_allclose(out, np.exp(a), rtol=1e-5)


def run_exp(n):
    """compile_module + call_exp."""
    k = cpu.compile_module(exp_module(n), "kernel")
    call_exp(k, n)
    return k


def entries(d):
    sub = d / disk_cache._SUBDIR
    return sorted(p for p in sub.glob("*.so")) if sub.exists() else []


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh cache dir; kernels compile_module holds in memory are forgotten before and after."""
    monkeypatch.setenv("MIRAX_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("MIRAX_DISABLE_DISK_CACHE", raising=False)
    monkeypatch.delenv("MIRAX_CACHE_SIZE_MB", raising=False)
    monkeypatch.setenv("MIRAX_CACHE_SYNC", "1")  # entries written inline: tests look at them at once
    cpu.clear_memory_cache()
    cpu.stats.reset()
    yield tmp_path
    cpu.clear_memory_cache()


def child_env(d, **extra):
    env = dict(os.environ, MIRAX_CACHE_DIR=str(d), **extra)
    env.pop("MIRAX_DISABLE_DISK_CACHE", None)
    return env


CHILD = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    import mirax as mr
    from mirax.runtime import cpu
    if len(sys.argv) > 1:  # start together with the other writers
        while time.time() < float(sys.argv[1]):
            time.sleep(0.001)
    x = mr.array(np.linspace(-1, 1, 37, dtype=np.float32))
    y = np.asarray(mr.tanh(x) * 3.0)
    np.testing.assert_allclose(y, np.tanh(np.linspace(-1, 1, 37, dtype=np.float32)) * 3, rtol=1e-5)
    print(json.dumps(cpu.stats.as_dict()))
""")


def run_child(d, *args):
    r = subprocess.run([sys.executable, "-c", CHILD, *args], env=child_env(d), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_second_process_compiles_nothing(tmp_path):
    first = run_child(tmp_path)
    assert first["compiles"] >= 2
    # entries are written on a thread; interpreter exit waits for them
    assert len(entries(tmp_path)) == first["compiles"]
    second = run_child(tmp_path)
    assert second["compiles"] == 0
    assert second["disk_hits"] == first["compiles"]
    assert len(entries(tmp_path)) == first["compiles"]


def test_background_writes(cache, monkeypatch):
    """By default a miss writes its entry on a thread; flush() (and exit) waits for it."""
    monkeypatch.delenv("MIRAX_CACHE_SYNC")
    for n in (51, 53, 55):
        run_exp(n)
    assert disk_cache.flush(timeout=60)
    assert cpu.stats.disk_writes == 3 and len(entries(cache)) == 3
    cpu.clear_memory_cache()
    run_exp(53)
    assert cpu.stats.disk_hits == 1


def test_memory_then_disk_hits_in_process(cache):
    k1 = run_exp(11)
    assert cpu.stats.compiles == 1 and cpu.stats.disk_writes == 1
    assert run_exp(11) is k1 and cpu.stats.memory_hits == 1
    cpu.clear_memory_cache()
    k2 = run_exp(11)
    assert k2 is not k1 and k2.engine is None  # loaded from the .so
    assert cpu.stats.disk_hits == 1 and cpu.stats.compiles == 1


def _corrupt_truncate(p):
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def _corrupt_garbage(p):
    p.write_bytes(os.urandom(p.stat().st_size))


def _corrupt_empty(p):
    p.write_bytes(b"")


def _corrupt_flip_code_byte(p):
    b = bytearray(p.read_bytes())
    b[len(b) // 3] ^= 0xFF
    p.write_bytes(bytes(b))


def _corrupt_trailer(p):
    b = p.read_bytes()
    p.write_bytes(b[:-12] + b"garbage!" + b[-4:])


@pytest.mark.parametrize("corrupt", [_corrupt_truncate, _corrupt_garbage, _corrupt_empty,
                                     _corrupt_flip_code_byte, _corrupt_trailer])
def test_corrupt_entry_is_recompiled(cache, corrupt):
    run_exp(13)
    (entry,) = entries(cache)
    corrupt(entry)
    cpu.clear_memory_cache()
    run_exp(13)  # correct result, no crash
    assert cpu.stats.disk_corrupt == 1 and cpu.stats.compiles == 2
    assert disk_cache._validate(entry, entry.stem, "_mlir__mlir_ciface_kernel") is not None  # rewritten whole
    cpu.clear_memory_cache()
    run_exp(13)
    assert cpu.stats.disk_hits == 1 and cpu.stats.compiles == 2


def test_entry_of_another_key_is_recompiled(cache):
    run_exp(15)
    run_exp(17)
    a, b = entries(cache)
    b.write_bytes(a.read_bytes())  # a valid entry, but for another key
    cpu.clear_memory_cache()
    run_exp(15)
    run_exp(17)
    assert cpu.stats.disk_corrupt == 1 and cpu.stats.disk_hits == 1 and cpu.stats.compiles == 3


def test_entry_missing_its_symbol_is_recompiled(cache):
    """A well-formed entry (trailer and hash agree) whose code lacks the wrapper: dlopen
    works, the symbol lookup fails, the entry is replaced. (The path must not have been
    dlopened by this process before: glibc hands back a loaded library by name.)"""
    run_exp(45)
    (entry,) = entries(cache)
    meta = disk_cache._validate(entry, entry.stem, "_mlir__mlir_ciface_kernel")
    elf = entry.read_bytes()[:meta["elf_size"]].replace(b"_mlir__mlir_ciface_kernel", b"_mlir__mlir_ciface_kernex")
    disk_cache._write_atomic(entry.parent, entry.stem, str(entry) + ".tmp", elf,
                             {"symbol": "_mlir__mlir_ciface_kernel", "needs": []})
    cpu.clear_memory_cache()
    run_exp(45)
    assert cpu.stats.disk_corrupt == 1 and cpu.stats.compiles == 2 and cpu.stats.disk_writes == 2


def test_concurrent_writers_in_threads(cache):
    """Many writers of one key at once: every store succeeds and the entry stays valid."""
    run_exp(19)
    (entry,) = entries(cache)
    key = entry.stem
    meta = disk_cache._validate(entry, key, "_mlir__mlir_ciface_kernel")
    elf = entry.read_bytes()[:meta["elf_size"]]
    results = []
    threads = [threading.Thread(target=lambda: results.append(disk_cache.store_elf(elf, key, "kernel")))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 8
    assert disk_cache._validate(entry, key, "_mlir__mlir_ciface_kernel") is not None
    assert [p.name for p in (cache / disk_cache._SUBDIR).iterdir()] == [entry.name]  # no temp files left


def test_concurrent_writer_processes(tmp_path):
    start = time.time() + 3.0  # all import first, then compile the same kernels together
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(start)], env=child_env(tmp_path),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    stats = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    assert all(s["disk_corrupt"] == 0 for s in stats)
    for e in entries(tmp_path):
        assert disk_cache._validate(e, e.stem, "_mlir__mlir_ciface_kernel") is not None
    assert run_child(tmp_path)["compiles"] == 0


def test_cache_dir_override_and_defaults(tmp_path, monkeypatch):
    monkeypatch.delenv("MIRAX_DISABLE_DISK_CACHE", raising=False)
    monkeypatch.setenv("MIRAX_CACHE_DIR", str(tmp_path / "mine"))
    assert disk_cache.cache_root() == tmp_path / "mine"
    monkeypatch.delenv("MIRAX_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert disk_cache.cache_root() == tmp_path / "xdg" / "mirax"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert disk_cache.cache_root() == tmp_path / "home" / ".cache" / "mirax"


@pytest.mark.parametrize("env", [{"MIRAX_CACHE_DIR": ""}, {"MIRAX_DISABLE_DISK_CACHE": "1"}])
def test_disabled(cache, monkeypatch, env):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert disk_cache.cache_dir() is None
    run_exp(21)
    assert cpu.stats.compiles == 1 and cpu.stats.disk_writes == 0 and cpu.stats.disk_misses == 0
    assert entries(cache) == []


def test_no_linker_falls_back_to_memory(cache, monkeypatch, caplog):
    monkeypatch.setenv("PATH", str(cache / "empty"))
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr(disk_cache, "_warned", set())
    monkeypatch.setattr(disk_cache, "_linkers", None)
    with caplog.at_level(logging.WARNING, logger="mirax.cache"):
        run_exp(23)
        run_exp(25)
    assert cpu.stats.compiles == 2 and cpu.stats.disk_writes == 0
    assert sum("linker" in r.getMessage() for r in caplog.records) == 1  # logged once
    assert entries(cache) == []


def test_failing_linker_falls_back_to_cc_then_memory(cache, monkeypatch, caplog):
    bad = cache / "bin"
    bad.mkdir()
    for tool in ("ld", "cc"):
        (bad / tool).write_text("#!/bin/sh\necho broken >&2\nexit 1\n")
        (bad / tool).chmod(0o755)
    monkeypatch.setenv("PATH", str(bad))
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr(disk_cache, "_warned", set())
    monkeypatch.setattr(disk_cache, "_linkers", None)
    with caplog.at_level(logging.WARNING, logger="mirax.cache"):
        run_exp(57)
    assert cpu.stats.compiles == 1 and cpu.stats.disk_writes == 0 and entries(cache) == []
    assert any("broken" in r.getMessage() for r in caplog.records)
    assert [p.name for p in (cache / disk_cache._SUBDIR).iterdir()] == []  # no temp files left


def test_cc_links_when_ld_is_missing(cache, monkeypatch):
    import shutil
    binDir = cache / "bin"
    binDir.mkdir()
    (binDir / "cc").symlink_to(shutil.which("cc"))
    monkeypatch.setenv("PATH", f"{binDir}:{os.path.dirname(shutil.which('cc'))}")  # cc needs its tools
    monkeypatch.setattr(disk_cache.shutil, "which", lambda n, _w=shutil.which: None if n == "ld" else _w(n))
    monkeypatch.setattr(disk_cache, "_linkers", None)
    run_exp(59)
    assert cpu.stats.disk_writes == 1
    cpu.clear_memory_cache()
    run_exp(59)
    assert cpu.stats.disk_hits == 1
    monkeypatch.setattr(disk_cache, "_linkers", None)


def test_macos_links_leave_the_runtimes_symbols_to_the_loader(monkeypatch):
    """On macOS `cc -shared` (ld64) refuses undefined symbols unless told otherwise: a
    threaded kernel's `__kmpc_*` then never linked (every kernel fell back to the
    ExecutionEngine). (The command only: nothing here runs macOS.)"""
    import shutil
    monkeypatch.setattr(disk_cache.sys, "platform", "darwin")
    monkeypatch.setattr(disk_cache.shutil, "which", lambda n, _w=shutil.which: "/usr/bin/" + n)
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr(disk_cache, "_linkers", None)
    cmds = [c("k.so", ["k.o"]) for c in disk_cache._link_commands()]
    monkeypatch.setattr(disk_cache, "_linkers", None)
    assert cmds == [["/usr/bin/cc", "-shared", "-undefined", "dynamic_lookup", "-o", "k.so", "k.o"]]


def test_unwritable_dir_falls_back(cache, monkeypatch):
    blocker = cache / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("MIRAX_CACHE_DIR", str(blocker))
    monkeypatch.setattr(disk_cache, "_warned", set())
    run_exp(27)
    assert cpu.stats.compiles == 1 and cpu.stats.disk_writes == 0


def test_eviction_keeps_most_recent(cache, monkeypatch):
    d = cache / disk_cache._SUBDIR
    d.mkdir(parents=True)
    now = time.time()
    for i in range(10):
        p = d / f"{i:064x}.so"
        p.write_bytes(b"x" * 100_000)
        os.utime(p, (now - 1000 + i, now - 1000 + i))  # entry 9 is the most recent
    stale = d / ".abc.tmp"
    stale.write_bytes(b"partial")
    os.utime(stale, (now - 7200, now - 7200))
    fresh_tmp = d / ".def.tmp"  # a writer at work right now: left alone
    fresh_tmp.write_bytes(b"partial")
    monkeypatch.setenv("MIRAX_CACHE_SIZE_MB", str(0.5))  # ~5 entries
    freed = disk_cache.evict()
    left = sorted(p.name for p in d.glob("*.so"))
    assert freed > 0 and sum((d / n).stat().st_size for n in left) <= 0.5 * 2**20
    assert left == [f"{i:064x}.so" for i in range(10 - len(left), 10)]
    assert not stale.exists() and fresh_tmp.exists()


def test_store_evicts_and_hits_refresh(cache, monkeypatch):
    monkeypatch.setenv("MIRAX_CACHE_SIZE_MB", str(40_000 / 2**20))  # about two entries
    monkeypatch.setattr(disk_cache, "_scan_state", {"dir": None, "since_scan": 0})
    for n in (31, 33, 35, 37):
        run_exp(n)
    total = sum(p.stat().st_size for p in entries(cache))
    assert 0 < total <= 40_000 and len(entries(cache)) < 4
    cpu.clear_memory_cache()
    run_exp(37)  # the newest survived
    assert cpu.stats.disk_hits == 1


def test_key_covers_inputs_and_pipeline(monkeypatch):
    libs = cpu._shared_libs()
    text = exp_module(3)
    base = disk_cache.cache_key(text, "kernel", 3, libs)
    assert base == disk_cache.cache_key(text, "kernel", 3, libs)
    others = {disk_cache.cache_key(text + " ", "kernel", 3, libs),
              disk_cache.cache_key(text, "main", 3, libs),
              disk_cache.cache_key(text, "kernel", 2, libs),
              disk_cache.cache_key(text, "kernel", 3, libs + ["/x/libomp.so"])}
    assert base not in others and len(others) == 4
    from mirax.lowering import cpu_pipeline
    monkeypatch.setattr(cpu_pipeline, "TO_LLVM", list(cpu_pipeline.TO_LLVM) + ["some-new-pass"])
    monkeypatch.setattr(disk_cache, "_fingerprint", None)
    assert disk_cache.cache_key(text, "kernel", 3, libs) != base
    monkeypatch.setattr(disk_cache, "_fingerprint", None)


def test_sources_hash_is_remembered_until_a_source_changes(cache, monkeypatch):
    """The sources' hash is kept in the cache root with their (name, size, mtime) list: a
    second process reads no source back; a source whose size or mtime changed (an edit)
    is hashed again, and to another value when its bytes changed."""
    from pathlib import Path
    first = disk_cache._sources_hash()
    assert json.loads((cache / "sources-memo.json").read_text())["hash"] == first
    reads = []
    real = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda p: reads.append(p) or real(p))
    assert disk_cache._sources_hash() == first and reads == []  # (the memo)
    files = disk_cache._source_files()
    edited, st = files[-1]
    assert {p.name for p, _ in files} >= {"cpu.py", "disk_cache.py", "approx.py", "cpu_pipeline.py"}
    text = real(edited)
    # an edit: the same bytes plus a comment, its mtime moved (the file itself untouched)
    monkeypatch.setattr(Path, "read_bytes", lambda p: text + b"# edited\n" if p == edited else real(p))
    after = types.SimpleNamespace(st_size=st.st_size + 9, st_mtime_ns=st.st_mtime_ns + 10**9)
    moved = [(p, after if p == edited else s) for p, s in files]
    monkeypatch.setattr(disk_cache, "_source_files", lambda: moved)
    assert disk_cache._sources_hash() != first
    monkeypatch.setattr(disk_cache, "_source_files", lambda: files)
    monkeypatch.setattr(Path, "read_bytes", real)
    assert disk_cache._sources_hash() == first


def test_reused_descriptors_follow_new_buffers_and_threads(cache):
    k = run_exp(41)
    cpu.clear_memory_cache()
    k = run_exp(41)  # the .so kernel
    for a in (np.linspace(0, 1, 41, dtype=np.float32), np.zeros(41, np.float32)):  # new buffers
        out = np.empty(41, np.float32)
        k([a], [out])
        np.testing.assert_allclose(out, np.exp(a), rtol=1e-5)
    errors = []

    def worker(seed):
        r = np.random.default_rng(seed)
        for _ in range(200):
            x = r.standard_normal(41).astype(np.float32)
            y = np.empty(41, np.float32)
            k([x], [y])
            if not np.allclose(y, np.exp(x), rtol=1e-5):
                errors.append(seed)
    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_entries_record_the_runtime_libraries_they_need(cache):
    run_exp(43)
    (entry,) = entries(cache)
    meta = disk_cache._validate(entry, entry.stem, "_mlir__mlir_ciface_kernel")
    assert isinstance(meta["needs"], list) and set(meta["needs"]) <= set(cpu._shared_libs())
    elf = entry.read_bytes()[:meta["elf_size"]]
    assert "_mlir__mlir_ciface_kernel" in disk_cache._dynamic_symbols(elf, undefined=False)
    runner = cpu._shared_libs()[0]
    assert disk_cache._needed_libs(elf, [runner]) == []  # exp needs no runner utils



def test_compile_many_builds_each_and_hands_back_a_failure_in_its_place(cache):
    """compile_many: MLIR here, LLVM and the link on worker threads; every kernel works,
    a module that cannot compile is its exception in the list (not raised), and the
    disk cache has the others afterwards."""
    bad = exp_module(67).replace("mirax.exp", "mirax.no_such_op")
    out = cpu.compile_many([exp_module(61), bad, exp_module(63), exp_module(65)])
    assert isinstance(out[1], Exception) and "no_such_op" in str(out[1])
    for k, n in zip([out[0], out[2], out[3]], (61, 63, 65)):
        assert isinstance(k, cpu.CpuKernel) and k.engine is None  # linked .so's
        call_exp(k, n)
    assert cpu.stats.compiles == 3
    assert disk_cache.flush(timeout=60) and len(entries(cache)) == 3
    cpu.clear_memory_cache()
    again = cpu.compile_many([exp_module(63), exp_module(61)])  # now disk hits, in order
    assert cpu.stats.disk_hits == 2 and cpu.stats.compiles == 3
    call_exp(again[0], 63)
    call_exp(again[1], 61)


def _compile_many_in_child(conn):
    out = cpu.compile_many([exp_module(71), exp_module(73)])
    for k, n in zip(out, (71, 73)):
        call_exp(k, n)
    conn.send(len(out))


def test_a_forked_child_finishes_kernels_on_threads_of_its_own(cache):
    from forked import run_forked
    cpu.compile_many([exp_module(75), exp_module(77)])  # the parent's finishing threads exist
    assert run_forked(_compile_many_in_child) == 2
