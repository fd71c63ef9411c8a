"""Host-aware tuning (lowering/host_cpu.py, lowering/tuning.py) and the tuner (mirax.tune):
the table derived for each ISA family, every candidate the tuner may pick computing the
right product, measurements stored per host and used by later compiles."""
import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from mlir import ir

from mirax import tune
from mirax.lowering import host_cpu, matmul_codegen as mc, tuning

FAMILIES = sorted(host_cpu.PRESETS)


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A private cache directory: measurements written here touch no other test."""
    monkeypatch.setenv("MIRAX_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("MIRAX_TUNING", raising=False)
    tuning._read.cache_clear()
    yield tmp_path
    tuning._read.cache_clear()


def test_host_is_detected():
    h = host_cpu.host()
    assert h.isa in ("avx512", "avx2", "sse", "neon", "sve", "scalar")
    assert h.vector_bits in (64, 128, 256, 512) and h.f32_lanes == h.vector_bits // 32
    assert h.cores >= 1 and h.l1d > 0 and h.l2 > 0 and h.line in (32, 64, 128, 256)
    assert h.name and h.name in h.describe() and h.key().startswith(h.arch)
    assert host_cpu.HostCPU.from_json(json.loads(json.dumps(h.to_json()))) == h


@pytest.mark.skipif(not os.path.exists("/proc/cpuinfo"), reason="Linux only")
def test_llvm_features_agree_with_the_kernel():
    flags = open("/proc/cpuinfo").read().split("\n\n")[0]
    h = host_cpu.detect()
    if " avx512f" in flags:
        assert h.isa == "avx512"
    elif " avx2" in flags and " fma" in flags:
        assert h.isa == "avx2"
    elif "asimd" in flags:
        assert h.isa in ("neon", "sve")


LINE_FILE = "/sys/devices/system/cpu/cpu0/cache/index0/coherency_line_size"


@pytest.mark.skipif(not os.path.exists(LINE_FILE), reason="Linux sysfs caches only")
def test_cache_line_is_the_os_figure():
    # the line size decides tile shapes (mirax-vectorize-transposes, streaming stores):
    # read from the host, not assumed to be 64 bytes
    assert host_cpu.detect().line == int(open(LINE_FILE).read())
    assert tuning.derive(host_cpu.detect())["elementwise"]["line_bytes"] == host_cpu.detect().line
    assert tuning.derive(host_cpu.PRESETS["neon"])["elementwise"]["line_bytes"] == 128


def test_reading_the_caches_closes_its_files(monkeypatch):
    """host_cpu._caches reads ~20 sysfs files: each closed at once (left to the garbage
    collector, each was a ResourceWarning under `python -W error` or `-X dev`)."""
    import builtins
    opened, real_open = [], builtins.open

    def spy(*a, **k):
        f = real_open(*a, **k)
        opened.append(f)
        return f
    monkeypatch.setattr(builtins, "open", spy)
    l1, *_ = host_cpu._caches()
    monkeypatch.undo()
    if sys.platform.startswith("linux") and os.path.isdir("/sys/devices/system/cpu/cpu0/cache"):
        assert l1 > 0 and opened
    assert all(f.closed for f in opened)


WAYS_FILE = "/sys/devices/system/cpu/cpu0/cache/index0/ways_of_associativity"


@pytest.mark.skipif(not os.path.exists(WAYS_FILE), reason="Linux sysfs caches only")
def test_l1d_ways_are_the_os_figure():
    # a transpose that keeps the innermost dim copies as many source rows' runs at once as
    # the L1d's ways hold (rows 4 KiB apart share one set): read from the host
    if open(os.path.dirname(WAYS_FILE) + "/type").read().strip() != "Data":
        pytest.skip("index0 is not the L1d here")
    ways = int(open(WAYS_FILE).read())
    assert host_cpu.detect().l1d_ways == ways
    assert tuning.derive(host_cpu.detect())["other"]["transpose_run_block"] == max(2, ways)
    assert tuning.derive(dataclasses.replace(host_cpu.PRESETS["avx2"], l1d_ways=12))["other"]["transpose_run_block"] == 12


def test_host_is_remembered_on_disk(store):
    host_cpu.forget()
    try:
        first = host_cpu.host()
        files = list((store / "host").glob("*.json"))
        assert len(files) == 1
        host_cpu.forget()
        assert host_cpu.host() == first  # read back, not detected again
    finally:
        host_cpu.forget()


@pytest.mark.parametrize("family", FAMILIES)
def test_derived_table_fits_the_family(family):
    h = host_cpu.PRESETS[family]
    t = tuning.derive(h)
    lanes, regs = h.f32_lanes, h.vector_registers
    assert {"avx2": 8, "avx512": 16, "neon": 4, "sve": 4}[family] == lanes
    for (mr, nr) in tuning.register_tiles(h):
        v = nr // lanes
        assert nr % lanes == 0 and mr * v + v + 1 <= regs  # accumulators + B + A broadcast
    for cfg in t["matmul"].values():
        assert (cfg["mr"], cfg["nr"]) == tuning.register_tiles(h)[0]
        assert cfg["kc"] * cfg["nr"] * 4 <= h.l1d // 2 or cfg["kc"] == 32
        assert cfg["kc"] * cfg["nc"] * 4 <= h.l2 // 2 or cfg["nc"] == cfg["nr"]
        assert cfg["nc"] % cfg["nr"] == 0 and cfg["forall_m"] % cfg["mr"] == 0
    assert t["row_fusion"]["partial_sums"] % lanes == 0
    assert t["elementwise"]["parallel_min_elements"] == max(1 << 14, h.l2 // 8)  # (in + out beyond L2)
    # loops (and vector math: sin, pow...) at the registers' full width: 16 lanes on AVX-512
    assert t["elementwise"]["loop_vector_bits"] == {"avx2": 256, "avx512": 512, "neon": 128, "sve": 128}[family]


def test_isa_cap_switches_off_the_features_above_it():
    h = host_cpu.PRESETS["avx512"]
    capped = host_cpu.capped(h, "avx2")
    assert capped.isa == "avx2" and capped.f32_lanes == 8 and capped.vector_registers == 16
    assert "avx512f" not in capped.features and {"avx2", "fma"} <= capped.features
    assert capped.key() != h.key()  # its own tuning table and kernels
    assert host_cpu.capped(h, "sse").isa == "sse"
    assert host_cpu.capped(host_cpu.PRESETS["avx2"], "avx2") == host_cpu.PRESETS["avx2"]  # a cap above: no change
    assert host_cpu.capped(host_cpu.PRESETS["sve"], "neon").isa == "neon"
    assert host_cpu.capped(h, None) == h
    with pytest.raises(ValueError, match="MIRAX_CPU_MAX_ISA='avx3': expected one of avx2, neon, sse"):
        host_cpu.capped(h, "avx3")
    with pytest.raises(ValueError, match="ISA of aarch64, not of this x86_64 host"):
        host_cpu.capped(h, "neon")


def test_isa_cap_reaches_llvms_target(monkeypatch):
    from mirax.runtime import llvm_codegen
    arch = {"x86_64": "avx2", "AMD64": "avx2", "aarch64": "neon", "arm64": "neon"}.get(os.uname().machine)
    if arch is None:
        pytest.skip("no cap for this architecture")
    monkeypatch.setenv("MIRAX_CPU_MAX_ISA", arch)
    above = "+avx512f,+evex512" if arch == "avx2" else "+sve,+sve2"
    out = llvm_codegen.target_features(f"+fma,{above},-amx-tile").decode()
    assert out.startswith("+fma,-") and "+avx512" not in out and "+sve" not in out and out.endswith(",-amx-tile")


CAPPED_CHILD = r"""
import json, math, shutil, subprocess, sys, tempfile
import numpy as np
import mirax as mr
from mirax.lowering import host_cpu, tuning
from mirax.runtime import cpu
rng = np.random.default_rng(0)
a, b = rng.standard_normal((96, 200), np.float32), rng.standard_normal((200, 130), np.float32)
f = mr.compile(lambda a, b: mr.erf(a @ b))
np.testing.assert_allclose(np.array(f(mr.array(a), mr.array(b))), [[math.erf(v) for v in r] for r in a @ b],
                           rtol=2e-4, atol=2e-4)
# the tuner's candidates come from the same code generation (it raced AVX-512 code for the
# AVX2 table while it compiled through MLIR's ExecutionEngine, which ignores the cap)
from mirax import tune
from mirax.lowering import matmul_codegen as mc
before = cpu.stats.compiles + cpu.stats.disk_hits
mm = mc.compile_standalone(tune.matmul_text(None, 96, 130, 200), "mm")
assert cpu.stats.compiles + cpu.stats.disk_hits == before + 1, "compile_standalone bypassed compile_module"
c = np.full((96, 130), np.nan, np.float32)
mm([a, b], [c])
np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
from mirax.runtime import disk_cache
disk_cache.flush()
libs = [str(p) for p in disk_cache.cache_dir().rglob("*.so")]
wide = None  # whether the kernels' machine code names the registers the cap excludes (argv[1])
if shutil.which("objdump") and libs:
    wide = sys.argv[1] in subprocess.run(["objdump", "-d", *libs], capture_output=True, text=True).stdout
h = host_cpu.host()
print(json.dumps(dict(isa=h.isa, lanes=h.f32_lanes, tile=tuning.register_tiles(h)[0], wide=wide, libs=len(libs))))
"""


# the ISA a cap below this host's takes, and the registers its code must not name
LOWER = {"avx512": ("avx2", "zmm", 8), "avx2": ("sse", "ymm", 4)}


@pytest.mark.skipif(host_cpu.detected().isa not in LOWER, reason="needs an AVX-512 or AVX2 host to cap")
@pytest.mark.parametrize("codegen", ["llvm", "engine"])
def test_code_for_a_lesser_isa_runs_on_this_host(store, codegen):
    """AVX2 code on an AVX-512 host (SSE code on an AVX2 one): right values, the lesser
    family's tile, and none of the wider registers in the kernels' machine code, from
    runtime/llvm_codegen.py and from MLIR's ExecutionEngine (its fallback, whose
    functions carry the cap as target features)."""
    cap, wide, lanes = LOWER[host_cpu.detected().isa]
    env = dict(os.environ, MIRAX_CPU_MAX_ISA=cap)
    if codegen == "engine":
        env["MIRAX_LLVM_CODEGEN"] = "engine"
    env.pop("MIRAX_DISABLE_DISK_CACHE", None)
    r = subprocess.run([sys.executable, "-c", CAPPED_CHILD, wide], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["isa"] == cap and got["lanes"] == lanes
    assert tuple(got["tile"]) == tuning.register_tiles(host_cpu.capped(host_cpu.detected(), cap))[0]
    assert got["libs"] and got["wide"] in (False, None)


def test_families_get_different_tiles():
    tiles = {f: tuning.register_tiles(host_cpu.PRESETS[f])[0] for f in FAMILIES}
    assert tiles["avx2"] == (6, 16)          # the classic AVX2 kernel: 12 ymm accumulators
    assert tiles["avx512"][1] % 16 == 0 and tiles["neon"][1] % 4 == 0
    assert tiles["avx2"] != tiles["avx512"]


def _all_candidates():
    """Every tiling without repacking, and each repacked form (B; A and B) and split form
    (the product cut into its divisible part and remainders; B as it is or repacked) once
    per register tile (its structure depends on mr and nr, not on the cache tiles)."""
    seen, packed = {}, set()
    for f in FAMILIES:
        # (1000 x 1000: the two tiles that pad it least join the candidates, and the
        # tiles that pad it come split too)
        for c in tune.matmul_candidates(host_cpu.PRESETS[f], m=1000, n=1000):
            if c.get("split"):  # (A packed too and rows outermost, split: test_matmul_codegen)
                if ("split", c["mr"], c["nr"], c["pack_b"]) in packed:
                    continue
                packed.add(("split", c["mr"], c["nr"], c["pack_b"]))
            elif c["pack_b"]:
                if (c["mr"], c["nr"], c["pack_a"], c["rows_outer"]) in packed:
                    continue
                packed.add((c["mr"], c["nr"], c["pack_a"], c["rows_outer"]))
            seen.setdefault(tuple(sorted(c.items())), c)
    return list(seen.values())


@pytest.mark.parametrize("cand", _all_candidates(), ids=lambda c: "{mr}x{nr}k{kc}n{nc}m{forall_m}p{pack_b}{pack_a}{rows_outer}s{split}".format(**{"split": "-", **c}))
def test_every_candidate_computes_the_product(cand, rng):
    """Whatever the tuner picks on any family is correct here: padded M and N, K not a
    multiple of kc, several nc blocks (the tiling is IR; LLVM targets this host)."""
    m, n, k = 2 * cand["forall_m"] + 3, 2 * cand["nr"] + 5, cand["kc"] + 37
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    cfg = dict(cand, min_flops=0, max_pad=100, nc=min(cand["nc"], cand["nr"]))
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(tune.matmul_text(None, m, n, k))
        assert mc.optimize_matmuls(module, config=cfg, return_script=True) is not None
    fn = mc.compile_standalone(tune.matmul_text(None, m, n, k), "mm", config=cfg)
    out = np.full((m, n), np.nan, np.float32)
    fn([a, b], [out])
    ref = a.astype(np.float64) @ b
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


@pytest.mark.parametrize("pack_b", [0, 1])
@pytest.mark.parametrize("family", FAMILIES)
def test_batched_candidate_of_each_family(family, pack_b, rng):
    """A batched product's candidates: B as it is, or repacked by each task (the tuner
    measures both for batched products too)."""
    cand = next(c for c in tune.matmul_candidates(host_cpu.PRESETS[family]) if c["pack_b"] == pack_b)
    m, n, k = cand["mr"] * 3 + 1, cand["nr"] + 3, 70
    a = rng.standard_normal((3, m, k), dtype=np.float32)
    b = rng.standard_normal((3, k, n), dtype=np.float32)
    fn = mc.compile_standalone(tune.matmul_text(3, m, n, k), "mm", config=dict(cand, min_flops=0, max_pad=100))
    out = np.full((3, m, n), np.nan, np.float32)
    fn([a, b], [out])
    np.testing.assert_allclose(out, np.matmul(a.astype(np.float64), b), rtol=1e-4, atol=1e-3)


def test_padded_shapes_get_split_candidates():
    h = host_cpu.PRESETS["avx512"]
    for m, n in ((1000, 1000), (1024, 1024), (1008, 1024)):
        for c in tune.matmul_candidates(h, m=m, n=n):
            pads = bool(m % c["mr"] or n % c["nr"])
            assert c.get("split") in ((0, 1) if pads else (None,))  # (no choice where nothing pads)
        splits = {(c["mr"], c["nr"], c["kc"], c["pack_b"], c.get("split")) for c in tune.matmul_candidates(h, m=m, n=n)}
        assert all((t[:4] + (1 - t[4],)) in splits for t in splits if m % t[0] or n % t[1])  # both forms


def test_split_default():
    # the divisible part holds 7/8 of M x N: split; else (or a tile wider than M or N) padded
    assert tuning.split_default(1000, 1000, 1000, 14, 16)      # 994 x 992
    assert not tuning.split_default(100, 40, 64, 8, 32)         # 96 x 32 of 100 x 40
    assert not tuning.split_default(1536, 24, 64, 14, 32)       # N under one tile
    assert not tuning.split_default(6, 1000, 64, 14, 16)        # M under one tile


def test_shapes_the_best_tiles_pad_get_leaner_ones():
    h = host_cpu.PRESETS["avx512"]
    tiles = lambda **s: {(c["mr"], c["nr"]) for c in tune.matmul_candidates(h, **s)}  # noqa: E731
    plain = tiles()
    assert all(nr % 32 == 0 for _, nr in plain)  # 1000 columns padded to 1024
    lean = tiles(m=1000, n=1000) - plain
    assert lean == {(16, 16), (14, 16)}  # 1008 x 1008, the most accumulators
    assert tiles(m=1024, n=1024) == plain  # nothing pads less than no padding


def test_shape_classes():
    mm = lambda *s: tuning.shape_class("linalg.matmul", None, *s)  # noqa: E731
    assert mm(1000, 1000, 900) == mm(1000, 1000, 1000)
    assert mm(1024, 1024, 1000) == mm(1024, 1024, 1024)
    # same powers of two, other divisibility: a tile best for one pads the other
    assert mm(1000, 1000, 1000) != mm(1024, 1024, 1024)
    assert mm(1024, 1024, 1024) != mm(4096, 4096, 1024)
    assert tuning.shape_class("linalg.batch_matmul", 64, 256, 256, 256).startswith("batch_matmul:b6:")


def test_a_neighbour_whose_tile_pads_this_shape_is_not_used(store):
    lanes = host_cpu.host().f32_lanes
    derived = tuning.matmul_config("linalg.matmul", "f32", None, 1024, 1024, 1024)
    # measured on 1000^3: 10 rows divide 1000, but pad 1024 (to 1030)
    tuning.save("matmul", tuning.shape_class("linalg.matmul", None, 1000, 1000, 1000),
                dict(mr=10, nr=2 * lanes, kc=96, nc=4 * lanes, forall_m=80, dtype="f32", shape="1000x1000x1000"))
    assert tuning.matmul_config("linalg.matmul", "f32", None, 1000, 1000, 1000)["kc"] == 96
    assert tuning.matmul_config("linalg.matmul", "f32", None, 2000, 1000, 1000)["kc"] == 96
    cfg = tuning.matmul_config("linalg.matmul", "f32", None, 1024, 1024, 1024)
    assert (cfg["mr"], cfg["kc"]) == (derived["mr"], derived["kc"])
    # a tile that pads neither: 1024^3 takes it, until 1024^3 has an entry of its own
    tuning.save("matmul", tuning.shape_class("linalg.matmul", None, 1000, 1000, 1000),
                dict(mr=8, nr=2 * lanes, kc=96, nc=4 * lanes, forall_m=80, dtype="f32", shape="1000x1000x1000"))
    assert tuning.matmul_config("linalg.matmul", "f32", None, 1024, 1024, 1024)["kc"] == 96
    tuning.save("matmul", tuning.shape_class("linalg.matmul", None, 1024, 1024, 1024),
                dict(mr=8, nr=2 * lanes, kc=160, nc=4 * lanes, forall_m=80, dtype="f32", shape="1024x1024x1024"))
    assert tuning.matmul_config("linalg.matmul", "f32", None, 1024, 1024, 1024)["kc"] == 160
    assert tuning.matmul_config("linalg.matmul", "f32", None, 1000, 1000, 1000)["kc"] == 96


def test_a_neighbour_that_left_b_alone_is_not_used_on_page_strided_rows(store):
    lanes = host_cpu.host().f32_lanes
    derived = tuning.matmul_config("linalg.matmul", "f32", None, 1024, 1024, 1024)
    # 8 x 2*lanes divides both; B plain suited 1000 columns (4000-byte rows), not 1024's 4 KiB
    tuning.save("matmul", tuning.shape_class("linalg.matmul", None, 1000, 1000, 1000),
                dict(mr=8, nr=2 * lanes, kc=96, nc=4 * lanes, forall_m=80, pack_b=0, dtype="f32", shape="1000x1000x1000"))
    assert tuning.matmul_config("linalg.matmul", "f32", None, 1000, 1000, 1000)["kc"] == 96
    assert tuning.matmul_config("linalg.matmul", "f32", None, 1024, 1024, 1024)["kc"] == derived["kc"]
    assert tuning.matmul_config("linalg.matmul", "f32", None, 1024, 1000, 1024)["kc"] == 96  # 1000 columns again


def test_a_neighbours_padding_choice_is_not_inherited(store):
    """`split` (pad the product whole or split off its remainders) was measured for the
    entry's own shape: a neighbouring class takes the tiles but leaves that to the
    host's rule (a 1-d convolution's 256x128x640 window products padded whole as
    256x512x784 was ran 0.66x jax.jit, split 0.83-0.85x)."""
    lanes = host_cpu.host().f32_lanes
    entry = dict(mr=6, nr=2 * lanes, kc=64, nc=4 * lanes, forall_m=48, dtype="f32", pack_b=1, split=0,
                 shape="256x512x784")
    tuning.save("matmul", tuning.shape_class("linalg.matmul", None, 256, 512, 784), entry)
    own = tuning.matmul_config("linalg.matmul", "f32", None, 256, 512, 784)
    assert (own["mr"], own["kc"], own["split"]) == (6, 64, 0)
    near = tuning.matmul_config("linalg.matmul", "f32", None, 256, 128, 640)
    assert (near["mr"], near["kc"]) == (6, 64) and "split" not in near
    with ir.Context(), ir.Location.unknown():  # planned by the rule: split
        module = ir.Module.parse(tune.matmul_text(None, 256, 128, 640))
        assert mc.plan(mc.matmul_ops(module)[0])["split"]
        module = ir.Module.parse(tune.matmul_text(None, 256, 512, 784))
        assert not mc.plan(mc.matmul_ops(module)[0])["split"]  # (its own entry: padded)


def test_a_window_copy_is_not_repacked(store):
    """A product whose A was just copied into rows of its own (a convolution's window
    copy) reads it in place even where the measured entry repacks A; A from memory is
    repacked as measured."""
    lanes = host_cpu.host().f32_lanes
    entry = dict(mr=6, nr=2 * lanes, kc=1024, nc=4 * lanes, forall_m=48, dtype="f32", pack_b=1, pack_a=1,
                 rows_outer=0, shape="252x128x640")
    tuning.save("matmul", tuning.shape_class("linalg.matmul", None, 252, 128, 640), entry)
    t = "tensor<252x128xf32>"
    text = f"""
#src = affine_map<(d0, d1, d2) -> (d0, d1 * 128 + d2)>
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
func.func @mm(%x: tensor<1x32768xf32>, %a: tensor<252x640xf32>, %b: tensor<640x128xf32>) -> ({t}, {t}) {{
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x252x640xf32>
  %w = linalg.generic {{indexing_maps = [#src, #id], iterator_types = ["parallel", "parallel", "parallel"]}}
      ins(%x : tensor<1x32768xf32>) outs(%e : tensor<1x252x640xf32>) {{
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
  }} -> tensor<1x252x640xf32>
  %col = tensor.collapse_shape %w [[0, 1], [2]] : tensor<1x252x640xf32> into tensor<252x640xf32>
  %c = tensor.empty() : {t}
  %f = linalg.fill ins(%z : f32) outs(%c : {t}) -> {t}
  %r = linalg.matmul ins(%col, %b : tensor<252x640xf32>, tensor<640x128xf32>) outs(%f : {t}) -> {t}
  %c2 = tensor.empty() : {t}
  %f2 = linalg.fill ins(%z : f32) outs(%c2 : {t}) -> {t}
  %r2 = linalg.matmul ins(%a, %b : tensor<252x640xf32>, tensor<640x128xf32>) outs(%f2 : {t}) -> {t}
  return %r, %r2 : {t}, {t}
}}"""
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        window, memory = (mc.plan(op) for op in mc.matmul_ops(module))
    assert (window["pack"], window["pack_a"]) == (True, False)
    assert (memory["pack"], memory["pack_a"]) == (True, True)


def test_measurements_are_used_by_later_compiles(store):
    before = tuning.fingerprint()
    derived = tuning.matmul_config("linalg.matmul", "f32", None, 1024, 1024, 1024)
    entry = dict(mr=4, nr=2 * host_cpu.host().f32_lanes, kc=64, nc=4 * host_cpu.host().f32_lanes,
                 forall_m=16, dtype="f32", pack_b=0)
    tuning.save("matmul", tuning.shape_class("linalg.matmul", None, 1024, 1024, 1024), entry)
    assert tuning.store_path().exists()
    assert tuning.fingerprint() != before  # the kernel cache keys change with it
    for shape in ((1024, 1024, 1024), (1000, 1000, 900), (2048, 1024, 1024)):  # same or nearest class
        cfg = tuning.matmul_config("linalg.matmul", "f32", None, *shape)
        assert (cfg["mr"], cfg["kc"]) == (4, 64)
    far = tuning.matmul_config("linalg.matmul", "f32", None, 64, 64, 64)
    assert (far["mr"], far["kc"]) == (derived["mr"], derived["kc"])
    assert tuning.matmul_config("linalg.batch_matmul", "f32", 8, 1024, 1024, 1024)["kc"] == derived["kc"]
    script, _ = _transformed(1024, 1024, 1024)
    assert "tile_sizes [0, %d, 64]" % entry["nc"] in script and "tile_sizes [4, %d, 1]" % entry["nr"] in script
    os.environ["MIRAX_TUNING"] = "off"
    try:
        assert tuning.matmul_config("linalg.matmul", "f32", None, 1024, 1024, 1024)["kc"] == derived["kc"]
    finally:
        del os.environ["MIRAX_TUNING"]


def test_measurements_stay_in_use_with_the_kernel_cache_off(store, monkeypatch):
    """MIRAX_DISABLE_DISK_CACHE turns off the kernel cache, not the tuner's memory (its
    switch is MIRAX_TUNING): a debugging session with kernels rebuilt compiles the tiles
    the cached ones had."""
    entry = dict(mr=4, nr=2 * host_cpu.host().f32_lanes, kc=64, nc=4 * host_cpu.host().f32_lanes,
                 forall_m=16, dtype="f32", pack_b=0)
    tuning.save("matmul", tuning.shape_class("linalg.matmul", None, 1024, 1024, 1024), entry)
    monkeypatch.setenv("MIRAX_DISABLE_DISK_CACHE", "1")
    cfg = tuning.matmul_config("linalg.matmul", "f32", None, 1024, 1024, 1024)
    assert (cfg["mr"], cfg["kc"]) == (4, 64) and tuning.store_path() is not None


def _transformed(m, n, k):
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(tune.matmul_text(None, m, n, k))
        return mc.optimize_matmuls(module, return_script=True), str(module)


def test_a_measured_tile_that_pads_too_much_falls_back(store):
    lanes = host_cpu.host().f32_lanes
    tuning.save("matmul", tuning.shape_class("linalg.matmul", None, 256, 64, 256),
                dict(mr=4, nr=4 * lanes, kc=64, nc=4 * lanes, forall_m=16, dtype="f32"))
    # N = 40 would pad to 4 vectors (>1.5x): a narrower register tile is used instead
    p = None
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(tune.matmul_text(None, 256, 40, 256))
        for op in mc.matmul_ops(module.operation):
            p = mc.plan(op)
    assert p is not None and p["pad"][1] <= 1.5 * 40


def test_row_fusion_measurements(store):
    assert tuning.row_fusion_config(4096)["partial_sums"] == tuning.derive()["row_fusion"]["partial_sums"]
    tuning.save("row_fusion", "4096", {"partial_sums": 8})
    assert tuning.row_fusion_config(4000)["partial_sums"] == 8
    assert tuning.row_fusion_config(64)["partial_sums"] != 8 or tuning.derive()["row_fusion"]["partial_sums"] == 8
    with tuning.override(row_fusion={"4096": {"partial_sums": 16}}):
        assert tuning.row_fusion_config(4096)["partial_sums"] == 16
    assert tuning.row_fusion_config(4096)["partial_sums"] == 8


def test_tuner_picks_a_correct_winner(store):
    entry = tune.tune_matmul("96x128x64", budget=30, log=lambda *_: None)
    assert entry is not None and entry["gflops"] > 0
    cls = tuning.shape_class("linalg.matmul", None, 96, 128, 64)
    assert tuning.measured()["matmul"][cls]["mr"] == entry["mr"]
    cands = [(c["mr"], c["nr"], c["kc"]) for c in tune.matmul_candidates()]
    assert (entry["mr"], entry["nr"], entry["kc"]) in cands


def test_a_retune_races_the_stored_choice(store, monkeypatch):
    """The class's stored tiling (here one no candidate has) runs in the final race of a
    re-tune, so noise in one run cannot replace it by a slower candidate unmeasured."""
    cls = tuning.shape_class("linalg.matmul", None, 96, 128, 64)
    lanes = host_cpu.host().f32_lanes
    stored = dict(mr=2, nr=lanes, kc=48, nc=lanes, forall_m=8, pack_b=0)
    tuning.save("matmul", cls, dict(stored, dtype="f32", shape="96x128x64"))
    raced, race = [], tune._race

    def spy(fns, rounds, calls):
        raced.append(set(fns))
        return race(fns, rounds, calls)
    monkeypatch.setattr(tune, "_race", spy)
    logs = []
    entry = tune.tune_matmul("96x128x64", budget=30, log=logs.append)
    assert any("stored choice" in m for m in logs)
    assert 0 in raced[-1]  # the incumbent (index 0) in the final race
    won = {x: entry[x] for x in stored}
    assert won == stored or (entry["mr"], entry["nr"], entry["kc"]) in [
        (c["mr"], c["nr"], c["kc"]) for c in tune.matmul_candidates()]


def test_a_challenger_must_beat_the_stored_choice_twice(store, monkeypatch):
    """A re-tune whose final race a challenger wins keeps the stored choice unless the
    challenger also wins a race of the two alone (one noisy run replaced a tuned tiling by
    one that ran 0.88x numpy in the benchmark)."""
    cls = tuning.shape_class("linalg.matmul", None, 96, 128, 64)
    lanes = host_cpu.host().f32_lanes
    stored = dict(mr=2, nr=lanes, kc=48, nc=lanes, forall_m=8, pack_b=0)
    tuning.save("matmul", cls, dict(stored, dtype="f32", shape="96x128x64"))
    races = []

    def scripted(fns, rounds, calls):  # the incumbent (0) loses every race but a duel
        races.append(set(fns))
        duel = set(fns) == {0, max(fns)} and len(fns) == 2 and len(races) > 3
        return {k: (1.0 if k == 0 else 2.0) if duel else (2.0 if k == 0 else 1.0 + k / 1e3) for k in fns}
    monkeypatch.setattr(tune, "_race", scripted)
    entry = tune.tune_matmul("96x128x64", budget=30, log=lambda *_: None)
    # (one round of all, three of the best eight, the final race, then the duel)
    assert len(races) == 4 and len(races[1]) == min(8, len(races[0])) and len(races[-1]) == 2 and 0 in races[-1]
    assert {x: entry[x] for x in stored} == stored
    assert {x: tuning.measured()["matmul"][cls][x] for x in stored} == stored

    def challenger_wins(fns, rounds, calls):
        return {k: (2.0 if k == 0 else 1.0 + k / 1e3) for k in fns}
    monkeypatch.setattr(tune, "_race", challenger_wins)
    entry = tune.tune_matmul("96x128x64", budget=30, log=lambda *_: None)
    assert {x: entry[x] for x in stored} != stored


def _store_plain_entry(m, n, k):
    """Store a plain product's measured entry for m x n x k (4-row tiles, nothing repacked);
    returns its tiles."""
    lanes = host_cpu.host().f32_lanes
    plain = dict(mr=4, nr=lanes, kc=32, nc=lanes, forall_m=16, pack_b=0, pack_a=0, rows_outer=0)
    tuning.save("matmul", tuning.shape_class("linalg.matmul", None, m, n, k),
                dict(plain, dtype="f32", shape=f"{m}x{n}x{k}"))
    return plain


def _check_every_candidate(monkeypatch, inputs, want):
    """Make the tuner's compiles check each candidate's product against `want` (as the tuner
    does); returns the list that collects each candidate's stored entry."""
    compiled, compile_standalone = [], mc.compile_standalone

    def spy(text, name, **kw):
        fn = compile_standalone(text, name, **kw)
        out = np.full(want.shape, np.nan, np.float32)
        fn(inputs, [out])
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-3)
        compiled.append(next(iter(tuning.measured()["matmul"].values())))
        return fn
    monkeypatch.setattr(mc, "compile_standalone", spy)
    return compiled


def test_transposed_b_products_are_tuned_in_their_own_form(store, rng, monkeypatch):
    """`x @ W.T` (B stored N x K, always repacked) has shape classes of its own: the tuner
    times that form (every candidate it keeps is correct, B repacked, never split), races
    the plain product's stored tiles as the incumbent, and a compile of the form uses its
    entry; without one, the plain product's."""
    assert tune.parse_shape("256x512x784T") == (None, 256, 512, 784) and tune.transposed_b("256x512x784T")
    assert not tune.transposed_b("64:256x256x256")
    with pytest.raises(ValueError, match="2-d products only"):
        tune.tune_matmul("3:16x16x16T", budget=1, log=lambda *_: None)
    m, n, k = 96, 128, 64
    plain = _store_plain_entry(m, n, k)
    got = tuning.matmul_config("linalg.matmul_transpose_b", "f32", None, m, n, k)
    assert {x: got[x] for x in plain} == plain  # unmeasured form: the plain product's tiles
    a = rng.standard_normal((m, k), dtype=np.float32)
    w = rng.standard_normal((n, k), dtype=np.float32)
    compiled = _check_every_candidate(monkeypatch, [a, w], a.astype(np.float64) @ w.T)
    logs = []
    entry = tune.tune_matmul(f"{m}x{n}x{k}T", budget=60, log=logs.append)
    assert compiled and all(c["pack_b"] == 1 and not c.get("split") for c in compiled)
    assert {x: compiled[0][x] for x in plain if x != "pack_b"} == {x: plain[x] for x in plain if x != "pack_b"}
    assert any("the plain product's choice" in line for line in logs)
    cls = tuning.shape_class("linalg.matmul_transpose_b", None, m, n, k)
    assert cls.startswith("matmul_transpose_b:") and tuning.measured()["matmul"][cls]["shape"] == f"{m}x{n}x{k}T"
    got = tuning.matmul_config("linalg.matmul_transpose_b", "f32", None, m, n, k)
    assert {x: got[x] for x in ("mr", "nr", "kc")} == {x: entry[x] for x in ("mr", "nr", "kc")}
    assert tuning.matmul_config("linalg.matmul", "f32", None, m, n, k)["kc"] == plain["kc"]  # untouched
    # and a compile of x @ W.T plans with the form's entry
    op_text = tune.matmul_text(None, m, n, k, transpose_b=True)
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(op_text)
        op = mc.matmul_ops(module.operation)[0]
        p = mc.plan(op)
    assert p["transpose_b"] and p["pack"] and (p["mr"], p["nr"], p["kc"]) == (entry["mr"], entry["nr"], min(entry["kc"], k))


def test_transposed_a_products_are_tuned_in_their_own_form(store, rng, monkeypatch):
    """`g.T @ x` (A stored K x M: a weight's gradient) has shape classes of its own: without
    an entry the plain product's tiles with both operands repacked (A read in place
    touches a line a k step); the tuner times that form (every candidate checked against
    numpy), races that fallback as the incumbent, and a compile of the form uses its entry."""
    assert tune.parse_shape("T512x784x256") == (None, 512, 784, 256)
    assert tune.transposed_a("T512x784x256") and not tune.transposed_b("T512x784x256")
    assert not tune.transposed_a("256x512x784T") and not tune.transposed_a("64:256x256x256")
    assert tuning.shape_spec("linalg.matmul_transpose_a", None, 512, 784, 256) == "T512x784x256"
    with pytest.raises(ValueError, match="2-d products only"):
        tune.tune_matmul("3:T16x16x16", budget=1, log=lambda *_: None)
    with pytest.raises(ValueError, match="not both"):
        tune.tune_matmul("T16x16x16T", budget=1, log=lambda *_: None)
    m, n, k = 96, 128, 64
    plain = _store_plain_entry(m, n, k)
    got = tuning.matmul_config("linalg.matmul_transpose_a", "f32", None, m, n, k)
    assert {x: got[x] for x in plain} == dict(plain, pack_a=1, pack_b=1)  # unmeasured: plain's, repacked
    g = rng.standard_normal((k, m), dtype=np.float32)
    x = rng.standard_normal((k, n), dtype=np.float32)
    compiled = _check_every_candidate(monkeypatch, [g, x], g.T.astype(np.float64) @ x)
    logs = []
    entry = tune.tune_matmul(f"T{m}x{n}x{k}", budget=60, log=logs.append)
    assert len(compiled) > 10 and any("the plain product's choice" in line for line in logs)
    assert {x: compiled[0][x] for x in plain} == dict(plain, pack_a=1, pack_b=1)
    cls = tuning.shape_class("linalg.matmul_transpose_a", None, m, n, k)
    assert cls.startswith("matmul_transpose_a:") and tuning.measured()["matmul"][cls]["shape"] == f"T{m}x{n}x{k}"
    assert tuning.matmul_config("linalg.matmul", "f32", None, m, n, k)["kc"] == plain["kc"]  # untouched
    # a compile of g.T @ x plans with the form's entry
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(tune.matmul_text(None, m, n, k, transpose_a=True))
        p = mc.plan(mc.matmul_ops(module.operation)[0])
    assert p["transpose_a"] and (p["mr"], p["nr"], p["kc"]) == (entry["mr"], entry["nr"], min(entry["kc"], k))
    assert p["pack_a"] == bool(entry["pack_a"] and entry["pack_b"])


def test_candidates_compile_as_later_compiles_plan_them(store, monkeypatch):
    """The tuner compiles each candidate as the class's stored entry, with no explicit
    config: what it times is what a later compile of that class builds."""
    from mirax.lowering import matmul_codegen as mc
    seen, compile_standalone = [], mc.compile_standalone

    def spy(text, name, **kw):
        seen.append((kw.get("config"), dict(tuning.measured()["matmul"])))
        return compile_standalone(text, name, **kw)
    monkeypatch.setattr(mc, "compile_standalone", spy)
    tune.tune_matmul("96x128x64", budget=0.01, log=lambda *_: None, save=False)
    cls = tuning.shape_class("linalg.matmul", None, 96, 128, 64)
    assert seen and all(cfg is None and list(store_) == [cls] for cfg, store_ in seen)
    assert seen[0][1][cls]["shape"] == "96x128x64"


def test_candidates_are_lowered_as_a_compile_lowers_them(monkeypatch):
    """What the tuner times goes through the rest of mirax-cpu-pipeline after the matmul
    code generator: the repackings of a packed candidate are split over the threads
    (mirax-parallelize) and vectorized (mirax-vectorize-transposes), as in a compile (a
    lowering of its own had left them serial and scalar, so the tuner ranked the packed
    candidates below what a compile of them runs)."""
    from mirax.lowering import matmul_codegen as mc
    from mirax.lowering.parallelize import MiraxParallelize
    from mirax.lowering.vectorize_transposes import MiraxVectorizeTransposes
    from mirax.runtime import cpu
    # a real compile: not the suite's persistent disk cache nor this process's kernels (a
    # hit lowers nothing; the test failed on a warm cache)
    monkeypatch.setenv("MIRAX_DISABLE_DISK_CACHE", "1")
    monkeypatch.setattr(cpu, "_loaded", type(cpu._loaded)(cpu._loaded.capacity))
    ran = []
    for cls in (MiraxParallelize, MiraxVectorizeTransposes):
        run = cls.run
        monkeypatch.setattr(cls, "run", lambda self, module, run=run, cls=cls: (ran.append(cls), run(self, module))[1])
    h = host_cpu.host()
    mr_, nr = tuning.register_tiles(h)[0]
    m, n, k = 16 * mr_, 4 * nr, 64
    cfg = dict(tuning.matmul_tiles(h, mr_, nr), pack_b=1, pack_a=1, min_flops=0)
    fn = mc.compile_standalone(tune.matmul_text(None, m, n, k), "mm", config=cfg)
    assert MiraxParallelize in ran and MiraxVectorizeTransposes in ran
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    c = np.full((m, n), np.nan, np.float32)
    fn([a, b], [c])
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_tuner_rows_and_threads(store):
    lanes = host_cpu.host().f32_lanes
    e = tune.tune_rows(8, 256 * lanes, log=lambda *_: None)
    assert e["partial_sums"] in tune.row_candidates()
    t = tune.tune_threads(sizes=[1 << 12, 1 << 13], log=lambda *_: None)
    if t is not None:  # more than one thread here
        assert tuning.table()["elementwise"]["parallel_min_elements"] == t["elementwise"]["parallel_min_elements"]


def test_row_race_reads_its_inputs_from_memory_and_times_logsumexp(store, monkeypatch):
    """The row-reduction race times softmax, layer norm and logsumexp (whose exp loop the
    width moves most), each call on a copy of the input no kernel read since the others
    were, so it comes from memory as a large array does: enough copies for twice the
    L3 (at most 256 MiB of it), 4 to 64."""
    avx2 = host_cpu.PRESETS["avx2"]
    assert tune._rotation(64 << 20, dataclasses.replace(avx2, l3=480 << 20)) == 8
    assert tune._rotation(64 << 20, dataclasses.replace(avx2, l3=16 << 20)) == 4
    assert tune._rotation(4 << 20, dataclasses.replace(avx2, l3=32 << 20)) == 16
    assert tune._rotation(1 << 10, dataclasses.replace(avx2, l3=0)) == 64
    import mirax as mr
    read = []
    lse = mr.logsumexp
    monkeypatch.setattr(mr, "logsumexp", lambda v, *a, **k: (read.append(id(v)), lse(v, *a, **k))[1])
    said = []
    lanes = host_cpu.host().f32_lanes
    e = tune.tune_rows(8, 64 * lanes, log=said.append)
    assert e["partial_sums"] in tune.row_candidates() and set(e["others"]) == {str(w) for w in tune.row_candidates()}
    assert len(read) >= len(tune.row_candidates())  # (traced once a width: compiled and raced)
    assert "logsumexp" in said[-1] and "from memory" in said[-1]


def test_products_made_dot_products_are_not_tuned(store):
    """A product a compile makes dot products (lowering/matmul_dot.py: a classifier head
    x @ W.T, 10 columns) has no tiles a compile would use: the tuner says so and stores
    nothing."""
    said = []
    assert tune.tune_matmul("256x10x512T", log=said.append) is None
    assert "dot products" in said[0] and not tuning.measured().get("matmul")


def test_tuner_pow(store, monkeypatch):
    """The tuner races pow's polynomial against the vector math library's call and later
    compiles follow its choice; without a library the polynomial is derived (no race)."""
    import mirax as mr
    a = mr.array(np.linspace(0.5, 2.0, 1 << 16, dtype=np.float32))
    b = mr.array(np.linspace(-3.0, 3.0, 1 << 16, dtype=np.float32))

    def lowered():
        return mr.compile(lambda x, y: mr.power(x, y)).lower(a, b).as_text("llvm")
    if tuning.vector_math_library() is not None:
        said = []
        e = tune.tune_pow(size=1 << 16, log=said.append)
        assert "inputs from memory" in said[-1]  # (copies cycled, as the row race's)
        assert e["polynomial"] in (0, 1) and tuning.table()["math"]["pow_polynomial"] == bool(e["polynomial"])
        assert ("llvm.intr.pow" in lowered()) == (not e["polynomial"])
    monkeypatch.setenv("MIRAX_VECTOR_LIBRARY", "none")
    tuning.store_path().unlink(missing_ok=True)
    tuning._read.cache_clear()
    tuning._derived.cache_clear()
    try:
        assert tune.tune_pow(size=1 << 16, log=lambda *_: None) is None
        assert tuning.table()["math"]["pow_polynomial"] and "llvm.intr.pow" not in lowered()
    finally:
        monkeypatch.delenv("MIRAX_VECTOR_LIBRARY")
        tuning._derived.cache_clear()


def test_command_line(store):
    env = dict(os.environ, MIRAX_CACHE_DIR=str(store))
    # the shape asked for only: not the row reductions nor the threads threshold besides
    out = subprocess.run([sys.executable, "-m", "mirax.tune", "--matmul", "64x64x128", "--budget", "60"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "host:" in out.stdout and "64x64x128" in out.stdout
    assert "rows " not in out.stdout and "threads:" not in out.stdout
    assert set(json.loads(tuning.store_path().read_text())) - {"format", "host"} == {"matmul"}
    shown = subprocess.run([sys.executable, "-m", "mirax.tune", "--show"], capture_output=True, text=True,
                           env=env, timeout=120)
    assert "matmul:6x6x7" in shown.stdout and host_cpu.host().name in shown.stdout
    subprocess.run([sys.executable, "-m", "mirax.tune", "--reset"], env=env, check=True, timeout=120,
                   capture_output=True)
    assert not tuning.store_path().exists()


def test_tuning_on_first_use(store, monkeypatch, rng):
    import mirax as mr
    monkeypatch.setenv("MIRAX_TUNE_ON_FIRST_USE", "20")
    tuning._tried.clear()
    a = rng.standard_normal((96, 80), dtype=np.float32)
    b = rng.standard_normal((80, 128), dtype=np.float32)
    out = mr.compile(lambda x, y: x @ y)(mr.array(a), mr.array(b))
    np.testing.assert_allclose(np.asarray(out), a @ b, rtol=1e-4, atol=1e-4)
    cls = tuning.shape_class("linalg.matmul", None, 96, 128, 80)
    assert cls in tuning.measured().get("matmul", {})


def test_repacking_rule():
    h = host_cpu.PRESETS["avx512"]  # 1 MiB L2
    assert tuning.pack_b_default(1024, 1024, 1024, 8, h)      # rows a page apart
    assert tuning.pack_b_default(1000, 1000, 1000, 8, h)      # B 4 MB > 2 L2
    assert not tuning.pack_b_default(256, 512, 784, 8, h)     # too few rows to repay the copy
    assert not tuning.pack_b_default(784, 512, 256, 8, h)     # B fits the L2


def test_one_task_per_thread_when_b_is_one_block(store):
    """With one n-block (nc covers N) each task re-reads B's kc x N slice: one task per
    thread when that slice outgrows half of L2 (a task refetches it from L3); within
    it, `tasks_per_thread` tasks a thread (threads of unequal speed end together)."""
    lanes = host_cpu.host().f32_lanes
    cfg = tuning.table()["matmul"][("linalg.matmul", "f32")]
    for kc in (64, 1024):
        tuning.save("matmul", tuning.shape_class("linalg.matmul", None, 1024, 1024, 1024),
                    dict(mr=4, nr=2 * lanes, kc=kc, nc=2048, forall_m=32, dtype="f32", shape="1024x1024x1024",
                         pack_b=0))
        with ir.Context(), ir.Location.unknown():
            module = ir.Module.parse(tune.matmul_text(None, 1024, 1024, 1024))
            (p,) = [mc.plan(op) for op in mc.matmul_ops(module.operation)]
        n = max(2, tuning.threads())
        if tuning.threads() > 1 and kc * 1024 * 4 <= cfg["l2_bytes"] // 2:  # (kc 64: 256 KiB)
            assert p["forall_m"] == max(8, 1024 // (n * cfg["tasks_per_thread"])), kc
        else:
            assert p["forall_m"] == 1024 // n, kc
    tuning.save("matmul", tuning.shape_class("linalg.matmul", None, 1024, 1024, 1024),
                dict(mr=4, nr=2 * lanes, kc=64, nc=4 * lanes, forall_m=32, dtype="f32", shape="1024x1024x1024", pack_b=0))
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(tune.matmul_text(None, 1024, 1024, 1024))
        (p,) = [mc.plan(op) for op in mc.matmul_ops(module.operation)]
    assert p["forall_m"] == 32  # n-blocks: A's strip is re-read per block, kept in L2


def test_every_benchmark_sets_the_peers_environment_before_numpy_loads():
    """bench/_host.py caps the peers (OpenBLAS's core type, XLA's ISA) to MIRAX_CPU_MAX_ISA
    when it is imported; OpenBLAS reads its variables when numpy loads it, so a benchmark
    that imports numpy (or jax) first compares our capped code with uncapped peers."""
    import ast
    from pathlib import Path
    bench = Path(__file__).resolve().parents[2] / "bench"
    for path in sorted(bench.glob("*.py")):
        if path.name == "_host.py":
            continue
        order = []
        for node in ast.parse(path.read_text()).body:  # module-level imports, in order
            if isinstance(node, ast.Import):
                order += [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                order.append(node.module.split(".")[0])
        peers = [i for i, m in enumerate(order) if m in ("numpy", "jax", "scipy")]
        if peers:
            assert "_host" in order and order.index("_host") < peers[0], path.name


def test_the_avx2_cap_keeps_numpy_off_its_avx512_loops():
    """Under MIRAX_CPU_MAX_ISA=avx2 bench/_host.py also caps numpy's own loops
    (NPY_DISABLE_CPU_FEATURES): its sin, tan, atan2, pow have AVX-512 (SVML) loops that an
    AVX2 host does not, and with them the 'AVX2' comparison was against a faster numpy
    (f32 sin 2.4 ms, 6.2 capped). On a host without AVX-512 nothing changes."""
    from pathlib import Path
    bench = Path(__file__).resolve().parents[2] / "bench"
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import _host, os, numpy as np\n"
            "m = getattr(np, '_core', None) or np.core\n"
            "u = m._multiarray_umath\n"
            "on = [t for t in u.__cpu_dispatch__ if u.__cpu_features__.get(t)]\n"
            "print(os.environ['NPY_DISABLE_CPU_FEATURES'] != '', [t for t in on if t.startswith('AVX512') or t == 'X86_V4'])")
    env = dict(os.environ, MIRAX_CPU_MAX_ISA="avx2")
    env.pop("NPY_DISABLE_CPU_FEATURES", None)
    out = subprocess.run([sys.executable, "-c", code, str(bench)], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "[]"]


def test_a_missing_openmp_library_named_by_the_environment_warns_and_runs_on_one_thread(tmp_path):
    """MIRAX_OPENMP_LIB naming a file that is not there (or not an LLVM OpenMP runtime):
    a warning naming the variable, and the kernels on one thread. A kernel linked against
    it had aborted the interpreter in the JIT ("Symbols not found: __kmpc_fork_call")."""
    code = ("import warnings, numpy as np, mirax as mr\n"
            "from mirax.lowering import tuning\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    tuning.openmp_library()  # (asked only with 2 CPUs or more: asked here too)\n"
            "    x = mr.array(np.ones((512, 512), np.float32))\n"
            "    y = float(mr.compile(lambda a: (a @ a + 1).sum())(x))\n"
            "print(tuning.threads(), y, any('MIRAX_OPENMP_LIB' in str(m.message) for m in w))")
    env = dict(os.environ, MIRAX_OPENMP_LIB=str(tmp_path / "libomp.so.5"), MIRAX_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["1", str(512.0 * 512 * 513), "True"]


def test_tuner_sort(store, monkeypatch):
    """The tuner races the radix sort against the bitonic blocks, and for 64-bit argsort
    against the merge sort (each checked against numpy first), and stores from which row length the radix sort wins at every longer
    one; later lowerings follow it, and a host where it never wins keeps the blocks."""
    from mirax.dialect.core import PRIMITIVES, Aval
    from mirax.dialect import dtypes as dt
    from mirax.lowering.emit import kernel_function
    monkeypatch.setattr(tune, "SORT_LENGTHS", {"radix_bytes": [64, 512], "radix_wide": [64, 512],
                                               "radix_payload": [64, 512]})
    said = []
    found = tune.tune_sort(total=1 << 12, log=said.append)
    assert set(found) == {"radix_bytes", "radix_wide", "radix_payload"} and len(said) == 9
    for key in found:
        assert tuning.table()["sort"][key] == found[key] == tuning.measured()["sort"][key]
        assert found[key] == tune.NEVER or found[key] in ((64 * 4, 512 * 4) if key == "radix_bytes" else (64, 512))
    tuning.save("sort", "radix_bytes", tune.NEVER)
    text = kernel_function("k", PRIMITIVES["sort"], {"axis": 1}, [Aval((2, 1 << 16), dt.float32)],
                           Aval((2, 1 << 16), dt.float32))
    assert "arith.shrui" not in text and "vector.shuffle" in text
