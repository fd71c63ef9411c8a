"""mr.save / savez / savez_compressed / save_safetensors / save_gguf / load (MLX's file I/O).

Every format is checked both ways against an independent implementation: numpy for
.npy/.npz, the `safetensors` package and the `gguf` package (llama.cpp's) for the others.
"""
import io
import json
import pathlib
import struct
import zipfile

import numpy as np
import pytest

import mirax as mr

ALL = ["bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
       "float16", "bfloat16", "float32", "float64", "complex64"]
SHAPES = [(), (0,), (3,), (2, 0, 3), (2, 3, 4)]


def values(name, shape, seed=0):
    """A mirax array of dtype `name` with distinct values (exact in every dtype)."""
    rng = np.random.default_rng(seed)
    v = rng.integers(0, 100, size=shape)
    if name == "bool_":
        return mr.array(v % 2 == 0)
    if name == "complex64":
        return mr.array((v + 1j * (v + 1)).astype(np.complex64))
    if name in ("float16", "bfloat16", "float32", "float64"):
        return mr.array(v / 4, getattr(mr, name))
    return mr.array(v.astype(np.dtype(name)), getattr(mr, name))


def bf16_bits(a):
    """The uint16 bits of a bfloat16 array (numpy sees it widened, exactly, to float32)."""
    wide = np.asarray(a.reshape(-1), np.float32).reshape(a.shape)
    return (wide.view(np.uint32) >> 16).astype(np.uint16)


def bits(a):
    """The stored bytes of an array, for exact comparison (bfloat16 included)."""
    a = bf16_bits(a) if a.dtype == mr.bfloat16 else np.asarray(a)
    return a.dtype, a.shape, a.tobytes()


def same(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    assert bits(a) == bits(b)


# ---- .npy ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", ALL)
def test_npy_round_trip_and_numpy(tmp_path, name):
    for i, shape in enumerate(SHAPES):
        a = values(name, shape, i)
        mr.save(tmp_path / f"a{i}", a)  # a pathlib.Path; the extension is appended
        f = tmp_path / f"a{i}.npy"
        same(mr.load(f), a)
        ours = np.load(f)
        if name == "bfloat16":  # MLX's layout: raw bits as the 2-byte void type
            assert ours.dtype == np.dtype("V2")
            assert ours.tobytes() == bf16_bits(a).tobytes()
            continue
        np.testing.assert_array_equal(ours, np.asarray(a))
        assert ours.dtype == np.asarray(a).dtype and ours.shape == shape
        np.save(tmp_path / f"n{i}.npy", np.asarray(a))
        same(mr.load(str(tmp_path / f"n{i}.npy")), a)


def test_npy_header_bytes(tmp_path):
    for a, descr in [(mr.array([1.0, 2.0], mr.bfloat16), "<V2"), (mr.array([True]), "|b1"),
                     (mr.array([1], mr.uint8), "|u1"), (mr.array([1 + 2j], mr.complex64), "<c8"),
                     (mr.zeros((2, 3), mr.float64), "<f8")]:
        buf = io.BytesIO()
        mr.save(buf, a)
        raw = buf.getvalue()
        assert raw[:8] == b"\x93NUMPY\x01\x00"
        (n,) = struct.unpack("<H", raw[8:10])
        assert (10 + n) % 64 == 0 and raw[10 + n - 1:10 + n] == b"\n"
        header = eval(raw[10:10 + n].decode("latin1"))  # noqa: S307 (our own test bytes)
        assert header == {"descr": descr, "fortran_order": False, "shape": a.shape}
        assert len(raw) == 10 + n + a.nbytes


def test_npy_numpy_layouts(tmp_path):
    x = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    np.save(tmp_path / "f.npy", np.asfortranarray(x))
    np.save(tmp_path / "b.npy", x.astype(">f8"))
    with open(tmp_path / "v2.npy", "wb") as f:
        np.lib.format.write_array(f, x, version=(2, 0))
    np.testing.assert_array_equal(np.asarray(mr.load(tmp_path / "f.npy")), x)
    big = mr.load(tmp_path / "b.npy")
    assert big.dtype == mr.float64
    np.testing.assert_array_equal(np.asarray(big), x)
    np.testing.assert_array_equal(np.asarray(mr.load(tmp_path / "v2.npy")), x)
    # strided and broadcast arrays are written in row-major order
    t = mr.arange(6).reshape(2, 3).T
    b = mr.broadcast_to(mr.array([1, 2]), (3, 2))
    for name, a in [("t", t), ("b", b)]:
        mr.save(tmp_path / name, a)
        np.testing.assert_array_equal(np.load(tmp_path / f"{name}.npy"), np.asarray(a))


def test_npy_file_objects(tmp_path):
    a = values("float32", (2, 3))
    with open(tmp_path / "x.npy", "wb") as f:
        mr.save(f, a)
    with open(tmp_path / "x.npy", "rb") as f:
        same(mr.load(f), a)  # the format comes from f.name
    buf = io.BytesIO()
    mr.save(buf, a)
    buf.seek(0)
    same(mr.load(buf, format="npy"), a)
    assert not (tmp_path / "x.npy.npy").exists()


def test_npy_errors(tmp_path):
    np.save(tmp_path / "c.npy", np.ones(2, np.complex128))
    with pytest.raises(ValueError, match="Unsupported array protocol type-string: <c16"):
        mr.load(tmp_path / "c.npy")
    (tmp_path / "bad.npy").write_bytes(b"not a numpy file at all")
    with pytest.raises(RuntimeError, match="Invalid header"):
        mr.load(tmp_path / "bad.npy")
    np.save(tmp_path / "t.npy", np.arange(16, dtype=np.float32))
    raw = (tmp_path / "t.npy").read_bytes()
    (tmp_path / "t.npy").write_bytes(raw[:-8])
    with pytest.raises(RuntimeError, match="Unable to read 64 bytes"):
        mr.load(tmp_path / "t.npy")
    with pytest.raises(RuntimeError, match="Failed to open"):
        mr.load(tmp_path / "missing.npy")
    with pytest.raises(ValueError, match="metadata not supported for format npy"):
        mr.load(tmp_path / "t.npy", return_metadata=True)
    with pytest.raises(ValueError, match="Unknown file format txt"):
        mr.load(tmp_path / "t.txt")
    with pytest.raises(ValueError, match="Could not infer file format"):
        mr.load("no_extension")
    with pytest.raises(ValueError, match=r"\[load\] Input must be"):
        mr.load(3)
    with pytest.raises(ValueError, match=r"\[save\] Input must be"):
        mr.save(3, mr.ones(2))
    with pytest.raises(TypeError, match="save"):
        mr.save(tmp_path / "l", [1, 2])
    with pytest.raises(TypeError, match="stream="):
        mr.load(tmp_path / "t.npy", stream=3)


# ---- .npz ---------------------------------------------------------------------------

@pytest.mark.parametrize("compressed", [False, True])
def test_npz_round_trip_and_numpy(tmp_path, compressed):
    save = mr.savez_compressed if compressed else mr.savez
    arrays = {f"k_{n}": values(n, (2, 3), i) for i, n in enumerate(ALL)}
    arrays["empty"] = mr.zeros((0, 3))
    arrays["scalar"] = mr.array(7, mr.int16)
    save(tmp_path / "z", mr.ones(2), mr.arange(3), **arrays)  # z.npz
    f = tmp_path / "z.npz"
    back = mr.load(f)
    assert set(back) == set(arrays) | {"arr_0", "arr_1"}
    for k, a in arrays.items():
        same(back[k], a)
    same(back["arr_1"], mr.arange(3))
    with zipfile.ZipFile(f) as z:
        kinds = {i.compress_type for i in z.infolist()}
        assert kinds == {zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED}
        assert sorted(z.namelist()) == sorted(k + ".npy" for k in back)
    with np.load(f) as theirs:
        for k, a in arrays.items():
            if k != "k_bfloat16":
                np.testing.assert_array_equal(theirs[k], np.asarray(a))
        assert theirs["k_bfloat16"].dtype == np.dtype("V2")
    npz = {k: np.asarray(a) for k, a in arrays.items() if k != "k_bfloat16"}
    (np.savez_compressed if compressed else np.savez)(tmp_path / "n.npz", **npz)
    back = mr.load(str(tmp_path / "n.npz"))
    for k, v in npz.items():
        same(back[k], arrays[k])


def test_npz_file_objects_and_errors(tmp_path):
    buf = io.BytesIO()
    mr.savez(buf, x=mr.arange(4))
    buf.seek(0)
    assert np.load(buf)["x"].tolist() == [0, 1, 2, 3]
    buf.seek(0)
    same(mr.load(buf, format="npz")["x"], mr.arange(4))
    with pytest.raises(ValueError, match="Cannot use un-named variables and keyword arr_0"):
        mr.savez(tmp_path / "c", mr.ones(1), arr_0=mr.ones(1))
    with pytest.raises(TypeError, match="savez_compressed"):
        mr.savez_compressed(tmp_path / "c", x=np.ones(1))
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="Input must be a zip file"):
        mr.load(tmp_path / "bad.npz")
    with pytest.raises(ValueError, match="metadata not supported for format npz"):
        mr.load(tmp_path / "bad.npz", return_metadata=True)


# ---- .safetensors -------------------------------------------------------------------

ST = [n for n in ALL if n != "float64"]  # MLX's safetensors dtypes


def test_safetensors_round_trip_and_package(tmp_path):
    safetensors = pytest.importorskip("safetensors")
    import safetensors.numpy as st
    arrays = {n: values(n, (2, 3), i) for i, n in enumerate(ST)}
    arrays.update(empty=mr.zeros((0, 3), mr.int32), scalar=mr.array(1.5), t=mr.arange(6).reshape(2, 3).T)
    mr.save_safetensors(tmp_path / "w", arrays, {"format": "mlx", "x": "y"})
    f = tmp_path / "w.safetensors"
    back, meta = mr.load(f, return_metadata=True)
    assert meta == {"format": "mlx", "x": "y"}
    assert set(back) == set(arrays)
    for k, a in arrays.items():
        same(back[k], a)
    # the layout: u64 header length, JSON (8-aligned), data
    raw = f.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    assert (8 + n) % 8 == 0
    header = json.loads(raw[8:8 + n])
    assert header["__metadata__"] == meta and header["bfloat16"]["dtype"] == "BF16"
    assert header["t"] == {"dtype": "I32", "shape": [3, 2], "data_offsets": header["t"]["data_offsets"]}
    b, e = header["bfloat16"]["data_offsets"]
    assert raw[8 + n + b:8 + n + e] == bf16_bits(arrays["bfloat16"]).tobytes()
    # the safetensors package reads ours (numpy has no bfloat16) and we read its files
    theirs = {k: np.asarray(a) for k, a in arrays.items() if k != "bfloat16"}
    with safetensors.safe_open(str(f), framework="np") as fh:
        assert fh.metadata() == meta
        got = {k: fh.get_tensor(k) for k in theirs}
    for k, v in theirs.items():
        np.testing.assert_array_equal(got[k], v)
        assert got[k].dtype == v.dtype and got[k].shape == v.shape
    st.save_file(theirs, str(tmp_path / "theirs.safetensors"), metadata={"m": "1"})
    back, meta = mr.load(str(tmp_path / "theirs.safetensors"), return_metadata=True)
    assert meta == {"m": "1"}
    for k, v in theirs.items():
        same(back[k], arrays[k])


def test_safetensors_file_objects_and_fp8(tmp_path):
    a = values("bfloat16", (4,))
    with open(tmp_path / "o.safetensors", "wb") as f:
        mr.save_safetensors(f, {"a": a})
    with open(tmp_path / "o.safetensors", "rb") as f:
        same(mr.load(f)["a"], a)
    # F8_E4M3 loads as its raw bytes (uint8), as MLX does
    body = bytes([0x00, 0x7E, 0xFE])
    head = json.dumps({"t": {"dtype": "F8_E4M3", "shape": [3], "data_offsets": [0, 3]}}).encode()
    buf = io.BytesIO(struct.pack("<Q", len(head)) + head + body)
    t = mr.load(buf, format="safetensors")["t"]
    assert t.dtype == mr.uint8 and np.asarray(t).tolist() == [0, 0x7E, 0xFE]


def test_safetensors_errors(tmp_path):
    f = tmp_path / "e.safetensors"
    with pytest.raises(ValueError, match="Metadata must be a dictionary with string keys and values"):
        mr.save_safetensors(f, {"a": mr.ones(2)}, {"testing": 0})
    with pytest.raises(RuntimeError, match="invalid dtype float64"):
        mr.save_safetensors(f, {"a": mr.ones(2, mr.float64)})
    with pytest.raises(TypeError, match="save_safetensors"):
        mr.save_safetensors(f, {"a": [1.0]})
    with pytest.raises(ValueError, match="Input must be a file-like object, or string"):
        mr.save_safetensors(3, {"a": mr.ones(2)})

    def write(header, body=b""):
        text = json.dumps(header).encode()
        f.write_bytes(struct.pack("<Q", len(text)) + text + body)

    f.write_bytes(struct.pack("<Q", 0))
    with pytest.raises(RuntimeError, match="Invalid json header length"):
        mr.load(f)
    f.write_bytes(struct.pack("<Q", 100) + b"{}")
    with pytest.raises(RuntimeError, match="Perhaps an incomplete download"):
        mr.load(f)
    write({"a": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}}, bytes(8))
    with pytest.raises(RuntimeError, match="unsupported dtype F64"):
        mr.load(f)
    write({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, bytes(8))
    with pytest.raises(RuntimeError, match="Expecting 8 bytes"):
        mr.load(f)
    write({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, bytes(4))
    with pytest.raises(RuntimeError, match="exceeding the size of the file"):
        mr.load(f)


# ---- .gguf --------------------------------------------------------------------------

GGUF = ["float32", "float16", "int8", "int16", "int32"]  # MLX's GGUF tensor dtypes


def test_gguf_round_trip_and_package(tmp_path):
    gguf = pytest.importorskip("gguf")
    arrays = {n: values(n, (2, 3, 4), i) for i, n in enumerate(GGUF)}
    arrays.update(vec=mr.arange(5, dtype=mr.int16), empty=mr.zeros((0, 2)), t=mr.arange(6).reshape(2, 3).T)
    meta = {"name": "m", "names": ["a", "bc", ""], "n": mr.array(3, mr.uint64), "flag": mr.array(True),
            "v": mr.array([1.5, -2.0]), "i8": mr.array([-1, 2], mr.int8)}
    mr.save_gguf(tmp_path / "m", arrays, meta)
    f = tmp_path / "m.gguf"
    back, got = mr.load(f, return_metadata=True)
    assert set(back) == set(arrays)
    for k, a in arrays.items():
        same(back[k], a)
    assert got["name"] == "m" and got["names"] == ["a", "bc", ""]
    for k in ("n", "flag", "v", "i8"):
        same(got[k], meta[k])
    # llama.cpp's reader: dims fastest first, tensors 32-byte aligned, the value types
    r = gguf.GGUFReader(str(f))
    tensors = {t.name: t for t in r.tensors}
    assert tensors["float16"].tensor_type == gguf.GGMLQuantizationType.F16
    assert tensors["int32"].tensor_type == gguf.GGMLQuantizationType.I32
    assert list(tensors["float32"].shape) == [4, 3, 2]
    for k in GGUF + ["vec"]:
        np.testing.assert_array_equal(np.asarray(tensors[k].data).reshape(arrays[k].shape), np.asarray(arrays[k]))
    assert all(t.data_offset % 32 == 0 for t in r.tensors)
    fields = r.fields
    assert fields["name"].contents() == "m" and fields["names"].contents() == ["a", "bc", ""]
    assert fields["n"].types == [gguf.GGUFValueType.UINT64] and fields["n"].contents() == 3
    assert fields["v"].types == [gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.FLOAT32]
    assert fields["v"].contents() == [1.5, -2.0] and fields["flag"].contents() is True


def test_gguf_written_by_package(tmp_path):
    gguf = pytest.importorskip("gguf")
    rng = np.random.default_rng(1)
    f = str(tmp_path / "theirs.gguf")
    w = gguf.GGUFWriter(f, "test")
    w.add_uint8("u8", 7)
    w.add_int64("i64", -5)
    w.add_float64("f64", 0.25)
    w.add_bool("b", False)
    w.add_array("ints", [1, 2, 3])
    w.add_array("strs", ["x", "yz"])
    x = rng.standard_normal((3, 64)).astype(np.float32)
    w.add_tensor("x", x)
    w.add_tensor("h", x.astype(np.float16))
    w.add_tensor("bf.weight", gguf.quants.quantize(x, gguf.GGMLQuantizationType.BF16),
                 raw_dtype=gguf.GGMLQuantizationType.BF16)
    quants = {}
    for q in ("Q8_0", "Q4_0", "Q4_1"):
        qt = gguf.GGMLQuantizationType[q]
        quants[q] = gguf.quants.quantize(x, qt)
        w.add_tensor(f"{q}.weight", quants[q], raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    arrays, meta = mr.load(f, return_metadata=True)
    assert meta["general.architecture"] == "test"
    same(meta["u8"], mr.array(7, mr.uint8))
    same(meta["i64"], mr.array(-5, mr.int64))
    same(meta["f64"], mr.array(0.25))  # MLX reads float64 values as float32
    same(meta["b"], mr.array(False))
    assert meta["ints"].tolist() == [1, 2, 3] and meta["strs"] == ["x", "yz"]
    same(arrays["x"], mr.array(x))
    same(arrays["h"], mr.array(x.astype(np.float16)))
    # bfloat16 tensors come back as float16 (MLX converts types it cannot load directly)
    bf = gguf.quants.dequantize(gguf.quants.quantize(x, gguf.GGMLQuantizationType.BF16),
                                gguf.GGMLQuantizationType.BF16)
    same(arrays["bf.weight"], mr.array(bf.astype(np.float16)))
    for q, bits in (("Q8_0", 8), ("Q4_0", 4), ("Q4_1", 4)):
        w, s, b = arrays[f"{q}.weight"], arrays[f"{q}.scales"], arrays[f"{q}.biases"]
        assert w.dtype == mr.uint32 and w.shape == (3, 64 * bits // 32)
        assert s.dtype == b.dtype == mr.float16 and s.shape == b.shape == (3, 2)
        # unpack MLX's layout by hand: element i of a word in bits [i*bits, (i+1)*bits)
        words = np.asarray(w).astype(np.uint64)
        per = 32 // bits
        q_vals = (words[..., None] >> (np.arange(per, dtype=np.uint64) * bits)) & ((1 << bits) - 1)
        q_vals = q_vals.reshape(3, 64).astype(np.float32)
        scale = np.repeat(np.asarray(s).astype(np.float32), 32, axis=1)
        bias = np.repeat(np.asarray(b).astype(np.float32), 32, axis=1)
        ref = gguf.quants.dequantize(quants[q], gguf.GGMLQuantizationType[q])
        np.testing.assert_allclose(q_vals * scale + bias, ref, rtol=1e-3, atol=1e-3)


def test_gguf_errors(tmp_path):
    f = tmp_path / "e.gguf"
    with pytest.raises(RuntimeError, match="dtype uint8 is not supported"):
        mr.save_gguf(f, {"a": mr.ones(2, mr.uint8)})
    for t in (mr.float16, mr.bfloat16, mr.complex64):
        with pytest.raises(ValueError, match="not support for metadata"):
            mr.save_gguf(f, {"a": mr.ones(2)}, {"m": mr.array(1, t)})
    with pytest.raises(RuntimeError, match="more than one dimension"):
        mr.save_gguf(f, {}, {"m": mr.ones((2, 2), mr.int32)})
    with pytest.raises(RuntimeError, match="empty arrays"):
        mr.save_gguf(f, {}, {"m": mr.zeros((0,), mr.int32)})
    with pytest.raises(TypeError, match="metadata 'm'"):
        mr.save_gguf(f, {}, {"m": 3})
    with pytest.raises(ValueError, match=r"\[save_gguf\] Input must be a string"):
        mr.save_gguf(io.BytesIO(), {"a": mr.ones(2)})
    mr.save_gguf(f, {"a": mr.ones(2)})
    with open(f, "rb") as fh:
        with pytest.raises(ValueError, match=r"\[load_gguf\] Input must be a string"):
            mr.load(fh)
    with pytest.raises(ValueError, match="Failed to open"):
        mr.load(tmp_path / "missing.gguf")
    f.write_bytes(f.read_bytes()[:-4])
    with pytest.raises(RuntimeError, match="extends past the end of the file"):
        mr.load(f)
    f.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"k"
                  + struct.pack("<IIQ", 9, 9, 1))
    with pytest.raises(ValueError, match="nested arrays"):
        mr.load(f)


def test_module_weights_go_through_io(tmp_path):
    import mirax.nn as nn
    lin = nn.Linear(3, 2)
    lin.weight = lin.weight.astype(mr.bfloat16)
    lin.save_weights(str(tmp_path / "w.npz"))
    assert np.load(tmp_path / "w.npz")["weight"].dtype == np.dtype("V2")
    other = nn.Linear(3, 2)
    other.load_weights(str(tmp_path / "w.npz"))
    same(other.weight, lin.weight)
    p = pathlib.Path(tmp_path / "w.safetensors")
    lin.save_weights(str(p))
    assert set(mr.load(p)) == {"weight", "bias"}
