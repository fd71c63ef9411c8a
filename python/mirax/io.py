"""Saving and loading arrays: `.npy`, `.npz`, `.safetensors` and `.gguf`, as MLX does.

    import mirax as mr
    mr.save("x", mr.arange(3))                      # writes x.npy
    mr.savez("ab", mr.ones(2), b=mr.zeros(2))       # ab.npz with arr_0 and b
    mr.save_safetensors("w", {"w": mr.ones((2, 2))}, {"format": "mlx"})
    w, meta = mr.load("w.safetensors", return_metadata=True)

The files are the real formats, byte for byte: numpy reads our `.npy`/`.npz` (bfloat16
is stored as MLX stores it, the raw bits under the type string `<V2`), and the
`safetensors` and `gguf` packages read our `.safetensors` and GGUF v3 files. Loading
reads the whole file on the CPU (MLX loads on the CPU too unless CUDA is present).
"""
from __future__ import annotations

import ast
import json
import pathlib
import struct
import zipfile

import numpy as np

from . import device as _device
from .array import Array, _host
from .array import eval as _eval
from .dialect import dtypes as dt

__all__ = ["save", "savez", "savez_compressed", "load", "save_safetensors", "save_gguf"]


# ---- files --------------------------------------------------------------------------

def _is_path(file) -> bool:
    return isinstance(file, (str, pathlib.Path))


def _is_reader(file) -> bool:
    return all(hasattr(file, a) for a in ("readinto", "seek", "tell", "closed"))


def _is_writer(file) -> bool:
    return all(hasattr(file, a) for a in ("write", "seek", "tell", "closed"))


def _with_suffix(file, suffix: str) -> str:
    """MLX appends the format's extension to a file name that lacks it."""
    name = str(file)
    return name if name.endswith(suffix) else name + suffix


def _open_write(op: str, name: str):
    try:
        return open(name, "wb")
    except OSError as err:
        raise RuntimeError(f"[{op}] Failed to open {name}: {err.strerror}") from None


def _read_all(op: str, file) -> bytes:
    """The bytes of a path or of a readable binary file object (from where it stands)."""
    if _is_path(file):
        try:
            with open(str(file), "rb") as f:
                return f.read()
        except OSError as err:
            raise RuntimeError(f"[{op}] Failed to open {file}: {err.strerror}") from None
    if file.closed:
        raise RuntimeError(f"[{op}] Failed to open python file object: it is closed")
    data = file.read()
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ValueError(f"[{op}] Input must be a file-like object opened in binary mode, or string")
    return bytes(data)


def _array_arg(op: str, name, a) -> Array:
    if not isinstance(a, Array):
        raise TypeError(f"[{op}] expected an array for {name!r}, got {type(a).__name__}")
    return a


def _array_dict(op: str, arrays) -> dict:
    if not isinstance(arrays, dict):
        raise TypeError(f"[{op}] arrays must be a dict of names to arrays, got {type(arrays).__name__}")
    out = {}
    for k, a in arrays.items():
        if not isinstance(k, str):
            raise TypeError(f"[{op}] array names must be strings, got {k!r}")
        out[k] = _array_arg(op, k, a)
    return out


def _storage(a: Array) -> np.ndarray:
    """The evaluated, row-contiguous, little-endian buffer (bfloat16 as its uint16 bits)."""
    _eval(a)
    data = np.ascontiguousarray(_host(a._data, a.aval))
    return data.astype(data.dtype.newbyteorder("<"), copy=False)


def _leaf(data: np.ndarray, d: dt.Dtype, shape) -> Array:
    """An evaluated CPU array of dtype `d` from little-endian bytes or a numpy array."""
    storage = np.asarray(data).view(d.storage.newbyteorder("<")).astype(d.storage)
    return Array._leaf(np.array(storage.reshape(shape), order="C"), d)


# ---- .npy / .npz --------------------------------------------------------------------

_NPY_MAGIC = b"\x93NUMPY"
_NPY_CODES = {("b", 1): dt.bool_, ("i", 1): dt.int8, ("i", 2): dt.int16, ("i", 4): dt.int32,
              ("i", 8): dt.int64, ("u", 1): dt.uint8, ("u", 2): dt.uint16, ("u", 4): dt.uint32,
              ("u", 8): dt.uint64, ("f", 2): dt.float16, ("f", 4): dt.float32,
              ("f", 8): dt.float64, ("c", 8): dt.complex64, ("V", 2): dt.bfloat16}


def _npy_descr(d: dt.Dtype) -> str:
    """The array-protocol type string MLX writes: `<f4`, `|u1`, `|b1`, and `<V2` for bfloat16."""
    kind = "V" if d is dt.bfloat16 else d.kind
    return ("<" if d.size > 1 else "|") + kind + str(d.size)


def _npy_bytes(a: Array) -> bytes:
    data = _storage(a)
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %r, }" % (_npy_descr(a.dtype), tuple(a.shape))
    # numpy pads magic + version + length + header + '\n' to a multiple of 64 bytes
    version, fmt = (1, "<H") if len(header) + 11 < 65536 else (2, "<I")
    pre = 6 + 2 + struct.calcsize(fmt)
    header += " " * (-(pre + len(header) + 1) % 64) + "\n"
    return (_NPY_MAGIC + bytes([version, 0]) + struct.pack(fmt, len(header))
            + header.encode("latin1") + data.tobytes())


def _npy_array(blob: bytes, label: str) -> Array:
    """An array from the bytes of a `.npy` file."""
    if blob[:6] != _NPY_MAGIC:
        raise RuntimeError(f"[load] Invalid header in {label}")
    if len(blob) < 8 or blob[6] not in (1, 2, 3):
        raise RuntimeError(f"[load] Unsupported npy format version in {label}")
    fmt = "<H" if blob[6] == 1 else "<I"
    start = 8 + struct.calcsize(fmt)
    if len(blob) < start:
        raise RuntimeError(f"[load] Unable to read the header of {label}")
    (n,) = struct.unpack(fmt, blob[8:start])
    try:
        header = ast.literal_eval(blob[start:start + n].decode("utf-8" if blob[6] == 3 else "latin1"))
        descr, fortran, shape = header["descr"], header["fortran_order"], tuple(header["shape"])
    except (ValueError, SyntaxError, KeyError, TypeError, UnicodeDecodeError):
        raise RuntimeError(f"[load] Unknown error while parsing header in {label}") from None
    d = None
    if isinstance(descr, str) and len(descr) in (2, 3) and descr[-1].isdigit():
        d = _NPY_CODES.get((descr[-2], int(descr[-1])))
    if d is None:
        raise ValueError(f"[load] Unsupported array protocol type-string: {descr}")
    size = int(np.prod(shape, dtype=np.int64))
    body = memoryview(blob)[start + n:]
    if len(body) < size * d.size:
        raise RuntimeError(f"[load] Unable to read {size * d.size} bytes from {label}: "
                           f"the file holds {len(body)} (truncated?)")
    order = ">" if descr[0] == ">" else "<"
    data = np.frombuffer(body, dtype=d.storage.newbyteorder(order), count=size).astype(d.storage)
    if fortran:  # column-major data: the transpose of the reversed shape
        data = data.reshape(shape[::-1]).transpose()
    return Array._leaf(np.array(data.reshape(shape), order="C"), d)


def save(file, arr) -> None:
    """Save an array to a binary `.npy` file (`.npy` is appended to a name without it).

    `file` is a str, a `pathlib.Path` or a file object opened for binary writing.

        mr.save("x", mr.array([1.0, 2.0]))   # x.npy; np.load("x.npy") reads it
    """
    arr = _array_arg("save", "arr", arr)
    if _is_path(file):
        blob = _npy_bytes(arr)
        name = _with_suffix(file, ".npy")
        with _open_write("save", name) as f:
            f.write(blob)
    elif _is_writer(file):
        file.write(_npy_bytes(arr))
    else:
        raise ValueError("[save] Input must be a file-like object, or string")


def _savez(op: str, file, args, kwargs, compression) -> None:
    arrays = {}
    for i, a in enumerate(args):
        key = f"arr_{i}"
        if key in kwargs:
            raise ValueError(f"[{op}] Cannot use un-named variables and keyword {key}")
        arrays[key] = _array_arg(op, key, a)
    for k, a in kwargs.items():
        arrays[k] = _array_arg(op, k, a)
    if _is_path(file):
        file = _with_suffix(file, ".npz")
    elif not _is_writer(file):
        raise ValueError(f"[{op}] Input must be a file-like object, or string")
    with zipfile.ZipFile(file, mode="w", compression=compression, allowZip64=True) as z:
        for k, a in arrays.items():
            # numpy's choice: zip64 entries, since the size is not known in advance
            with z.open(k + ".npy", mode="w", force_zip64=True) as member:
                member.write(_npy_bytes(a))


def savez(file, *args, **kwargs) -> None:
    """Save arrays to an uncompressed `.npz` file (appended to a name without it).

    Positional arrays are named `arr_0`, `arr_1`, ...; keyword arrays by their keyword.

        mr.savez("ab", mr.ones(2), b=mr.zeros(3))   # np.load("ab.npz") has arr_0 and b
    """
    _savez("savez", file, args, kwargs, zipfile.ZIP_STORED)


def savez_compressed(file, /, *args, **kwargs) -> None:
    """`savez` with each array deflate-compressed in the archive.

        mr.savez_compressed("ab.npz", a=mr.zeros(1000))
    """
    _savez("savez_compressed", file, args, kwargs, zipfile.ZIP_DEFLATED)


def _load_npz(file) -> dict:
    if _is_reader(file):
        pos = file.tell()
        is_zip = zipfile.is_zipfile(file)
        file.seek(pos, 0)
    else:
        is_zip = zipfile.is_zipfile(str(file))
    if not is_zip:
        raise ValueError("[load_npz] Input must be a zip file or a file-like object that can be "
                         "opened with zipfile.ZipFile")
    out = {}
    with zipfile.ZipFile(file if _is_reader(file) else str(file)) as z:
        for name in z.namelist():
            key = name[:-4] if len(name) > 4 and name.endswith(".npy") else name
            out[key] = _npy_array(z.read(name), f"{name} in the archive")
    return out


# ---- .safetensors -------------------------------------------------------------------

_ST_CODES = {"F32": dt.float32, "F16": dt.float16, "BF16": dt.bfloat16, "I64": dt.int64,
             "I32": dt.int32, "I16": dt.int16, "I8": dt.int8, "U64": dt.uint64, "U32": dt.uint32,
             "U16": dt.uint16, "U8": dt.uint8, "BOOL": dt.bool_, "C64": dt.complex64,
             # 8-bit floats load as their raw bytes (uint8), as in MLX: see `from_fp8`
             "F8_E4M3": dt.uint8, "F8_E8M0": dt.uint8}
_ST_NAMES = {d.name: code for code, d in _ST_CODES.items() if not code.startswith("F8")}
_ST_MAX_HEADER = 100_000_000  # the reference (Rust) implementation's limit


def save_safetensors(file, arrays, metadata=None) -> None:
    """Save a dict of arrays to a `.safetensors` file (appended to a name without it).

    `metadata` is a dict of str to str, stored under `__metadata__`.

        mr.save_safetensors("w", {"w": mr.ones((2, 2))}, {"format": "mlx"})
    """
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in metadata.items()):
        raise ValueError("[save_safetensors] Metadata must be a dictionary with string keys and values")
    arrays = _array_dict("save_safetensors", arrays)
    if _is_path(file):
        file = _with_suffix(file, ".safetensors")
    elif not _is_writer(file):
        raise ValueError("[save_safetensors] Input must be a file-like object, or string")
    header, blobs, offset = {"__metadata__": dict(metadata)}, [], 0
    for name, a in arrays.items():
        code = _ST_NAMES.get(a.dtype.name)
        if code is None:
            raise RuntimeError(f"[save_safetensors] received invalid dtype {a.dtype.name} for {name!r}.")
        raw = _storage(a).tobytes()
        header[name] = {"dtype": code, "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-(8 + len(text)) % 8)  # the spec's optional padding: data starts 8-aligned
    out = _open_write("save_safetensors", file) if _is_path(file) else None
    f = out or file
    try:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    finally:
        if out is not None:
            out.close()


def _load_safetensors(file):
    if not (_is_path(file) or _is_reader(file)):
        raise ValueError("[load_safetensors] Input must be a file-like object, or string")
    blob = _read_all("load_safetensors", file)
    label = str(file) if _is_path(file) else "python file object"
    n = struct.unpack("<Q", blob[:8])[0] if len(blob) >= 8 else 0
    if n <= 0 or n >= _ST_MAX_HEADER:
        raise RuntimeError(f"[load_safetensors] Invalid json header length {label}")
    if len(blob) < 8 + n:
        raise RuntimeError(f"[load_safetensors] The JSON header is {n} bytes long but the file is only "
                           f"{len(blob)} bytes. Perhaps an incomplete download or corrupt file?")
    try:
        header = json.loads(blob[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RuntimeError(f"[load_safetensors] Invalid json header in {label}: {err}") from None
    if not isinstance(header, dict):
        raise RuntimeError(f"[load_safetensors] Invalid json metadata {label}")
    body = memoryview(blob)[8 + n:]
    arrays, metadata = {}, {}
    for name, info in header.items():
        if name == "__metadata__":
            metadata.update(info)
            continue
        try:
            code, shape, offsets = info["dtype"], tuple(int(s) for s in info["shape"]), info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise RuntimeError(f"[load_safetensors] Tensor {name!r} needs dtype, shape and data_offsets") from None
        if code not in _ST_CODES:
            raise RuntimeError(f"[safetensor] unsupported dtype {code}")
        d = _ST_CODES[code]
        if len(offsets) != 2:
            raise RuntimeError(f"[load_safetensors] Tensor '{name}' data_offsets must have exactly 2 entries "
                               f"but has {len(offsets)}")
        begin, end = int(offsets[0]), int(offsets[1])
        nbytes = d.size * int(np.prod(shape, dtype=np.int64))
        if end < begin or end - begin != nbytes:
            raise RuntimeError(f"[load_safetensors] Tensor '{name}' invalid data offsets ({begin}, {end}). "
                               f"Expecting {nbytes} bytes.")
        if end > len(body):
            raise RuntimeError(f"[load_safetensors] Tensor '{name}' invalid data offsets ({begin}, {end}) "
                               "exceeding the size of the file. Perhaps an incomplete download or corrupt file?")
        arrays[name] = _leaf(np.frombuffer(body[begin:end], np.uint8), d, shape)
    return arrays, metadata


# ---- .gguf (GGUF v3) ----------------------------------------------------------------

# metadata value types of the GGUF spec
_GV_UINT8, _GV_INT8, _GV_UINT16, _GV_INT16, _GV_UINT32, _GV_INT32, _GV_FLOAT32, _GV_BOOL = range(8)
_GV_STRING, _GV_ARRAY, _GV_UINT64, _GV_INT64, _GV_FLOAT64 = range(8, 13)
_GV_NUMPY = {_GV_UINT8: "<u1", _GV_INT8: "<i1", _GV_UINT16: "<u2", _GV_INT16: "<i2", _GV_UINT32: "<u4",
             _GV_INT32: "<i4", _GV_FLOAT32: "<f4", _GV_BOOL: "<u1", _GV_UINT64: "<u8", _GV_INT64: "<i8",
             _GV_FLOAT64: "<f8"}
# the dtype a numeric metadata value loads as (MLX reads float64 values as float32)
_GV_DTYPE = {_GV_UINT8: dt.uint8, _GV_INT8: dt.int8, _GV_UINT16: dt.uint16, _GV_INT16: dt.int16,
             _GV_UINT32: dt.uint32, _GV_INT32: dt.int32, _GV_FLOAT32: dt.float32, _GV_BOOL: dt.bool_,
             _GV_UINT64: dt.uint64, _GV_INT64: dt.int64, _GV_FLOAT64: dt.float32}
_GV_OF_DTYPE = {d.name: t for t, d in _GV_DTYPE.items() if t != _GV_FLOAT64}

# tensor types (ggml_type)
_GT_F32, _GT_F16, _GT_Q4_0, _GT_Q4_1, _GT_Q8_0 = 0, 1, 2, 3, 8
_GT_I8, _GT_I16, _GT_I32, _GT_BF16 = 24, 25, 26, 30
_GT_DTYPE = {_GT_F32: dt.float32, _GT_F16: dt.float16, _GT_I8: dt.int8, _GT_I16: dt.int16, _GT_I32: dt.int32}
_GT_OF_DTYPE = {d.name: t for t, d in _GT_DTYPE.items()}
# quantized tensor types MLX loads as (packed uint32 weights, scales, biases): bits, block bytes
_GT_QUANT = {_GT_Q4_0: (4, 18), _GT_Q4_1: (4, 20), _GT_Q8_0: (8, 34)}
_GGUF_ALIGNMENT = 32  # the default of `general.alignment`


def _gguf_string(s: str) -> bytes:
    raw = s.encode("utf-8")
    return struct.pack("<Q", len(raw)) + raw


def _gguf_metadata_value(key: str, value) -> bytes:
    """The (type, value) bytes of one metadata entry."""
    if isinstance(value, str):
        return struct.pack("<I", _GV_STRING) + _gguf_string(value)
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return (struct.pack("<IIQ", _GV_ARRAY, _GV_STRING, len(value))
                + b"".join(_gguf_string(s) for s in value))
    if isinstance(value, Array):
        if value.ndim > 1:
            raise RuntimeError("[save_gguf] Cannot save arrays with more than one dimension.")
        if value.size == 0:
            raise RuntimeError("[save_gguf] Cannot save empty arrays.")
        t = _GV_OF_DTYPE.get(value.dtype.name)
        if t is None:
            raise ValueError(f"[save_gguf] array type {value.dtype.name} not support for metadata.")
        raw = _storage(value).tobytes()
        if value.ndim == 0:
            return struct.pack("<I", t) + raw
        return struct.pack("<IIQ", _GV_ARRAY, t, value.size) + raw
    raise TypeError(f"[save_gguf] metadata {key!r} must be an array, a str or a list of str, "
                    f"got {type(value).__name__}")


def save_gguf(file, arrays, metadata=None) -> None:
    """Save a dict of arrays to a `.gguf` (GGUF v3) file (appended to a name without it).

    Arrays may be float32, float16, int8, int16 or int32. `metadata` values are a str, a
    list of str, or a 0-d or 1-d array (numbers or bool).

        mr.save_gguf("m", {"w": mr.ones((2, 3))}, {"general.name": "m", "n": mr.array(3)})
    """
    arrays = _array_dict("save_gguf", arrays)
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise TypeError(f"[save_gguf] metadata must be a dict, got {type(metadata).__name__}")
    if not _is_path(file):
        raise ValueError("[save_gguf] Input must be a string")
    kv = []
    for key, value in metadata.items():
        if not isinstance(key, str):
            raise TypeError(f"[save_gguf] metadata keys must be strings, got {key!r}")
        kv.append(_gguf_string(key) + _gguf_metadata_value(key, value))
    infos, blobs, offset = [], [], 0
    for name, a in arrays.items():
        t = _GT_OF_DTYPE.get(a.dtype.name)
        if t is None:
            raise RuntimeError(f"[save_gguf] dtype {a.dtype.name} is not supported")
        offset += -offset % _GGUF_ALIGNMENT
        dims = a.shape[::-1]  # GGML lists dimensions fastest first
        infos.append(_gguf_string(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, t, offset))
        raw = _storage(a).tobytes()
        blobs.append((offset, raw))
        offset += len(raw)
    head = b"GGUF" + struct.pack("<IQQ", 3, len(infos), len(kv)) + b"".join(kv) + b"".join(infos)
    head += b"\0" * (-len(head) % _GGUF_ALIGNMENT)
    with _open_write("save_gguf", _with_suffix(file, ".gguf")) as f:
        f.write(head)
        pos = 0
        for off, raw in blobs:
            f.write(b"\0" * (off - pos))
            f.write(raw)
            pos = off + len(raw)


class _GGUFReader:
    """Sequential reads of a GGUF file's header; a short file raises MLX's RuntimeError."""

    def __init__(self, blob: bytes):
        self.blob, self.pos = blob, 0

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.blob):
            raise RuntimeError("[load_gguf] The header extends past the end of the file. "
                               "Perhaps an incomplete download or corrupt file?")
        out = memoryview(self.blob)[self.pos:self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))

    def string(self) -> str:
        (n,) = self.unpack("<Q")
        return bytes(self.take(n)).decode("utf-8", errors="replace")

    def value(self, t: int):
        if t == _GV_STRING:
            return self.string()
        if t in _GV_NUMPY:
            data = np.frombuffer(self.take(np.dtype(_GV_NUMPY[t]).itemsize), _GV_NUMPY[t])
            return _leaf(data.astype(_GV_DTYPE[t].storage), _GV_DTYPE[t], ())
        if t == _GV_ARRAY:
            et, n = self.unpack("<IQ")
            if et == _GV_ARRAY:
                raise ValueError("[load_gguf] Only supports loading 1-layer of nested arrays.")
            if et == _GV_STRING:
                return [self.string() for _ in range(n)]
            if et not in _GV_NUMPY:
                raise RuntimeError(f"[load_gguf] Received unexpected type {et}.")
            data = np.frombuffer(self.take(n * np.dtype(_GV_NUMPY[et]).itemsize), _GV_NUMPY[et])
            return _leaf(data.astype(_GV_DTYPE[et].storage), _GV_DTYPE[et], (n,))
        raise RuntimeError(f"[load_gguf] Received unexpected type {t}.")


def _gguf_quantized(name: str, t: int, shape: tuple, raw: memoryview) -> dict:
    """MLX's triplet for a Q4_0/Q4_1/Q8_0 tensor: `dequantize(w, scales, biases, 32, bits)`
    gives its values."""
    bits, block = _GT_QUANT[t]
    if not shape or shape[-1] % 32:
        raise RuntimeError(f"[load_gguf] tensor {name} has incompatible last dim shape: "
                           f"{shape[-1] if shape else shape}")
    blocks = np.frombuffer(raw, np.uint8).reshape(-1, block)
    scales = blocks[:, :2].copy().view("<f2").astype(np.float16)
    if t == _GT_Q8_0:
        q = blocks[:, 2:] ^ np.uint8(0x80)  # int8 as uint8 plus 128
        biases = scales * np.float16(-128)
    else:
        packed = blocks[:, 4:] if t == _GT_Q4_1 else blocks[:, 2:]
        q = np.concatenate([packed & 0x0F, packed >> 4], axis=1)  # GGML: low nibbles first
        biases = blocks[:, 2:4].copy().view("<f2").astype(np.float16) if t == _GT_Q4_1 \
            else scales * np.float16(-8)
        q = (q[:, 0::2] | (q[:, 1::2] << 4)).astype(np.uint8)  # MLX: element i at nibble i
    prefix = name[:max(0, len(name) - len(".weight"))]  # MLX drops the last 7 characters
    group_shape = shape[:-1] + (shape[-1] // 32,)
    return {name: _leaf(q.reshape(-1), dt.uint32, shape[:-1] + (shape[-1] * bits // 32,)),
            prefix + ".scales": _leaf(scales, dt.float16, group_shape),
            prefix + ".biases": _leaf(biases, dt.float16, group_shape)}


def _bf16_to_f16(raw: memoryview) -> np.ndarray:
    bits = np.frombuffer(raw, "<u2").astype(np.uint32) << 16
    return bits.view(np.float32).astype(np.float16)


def _load_gguf(file):
    if not _is_path(file):
        raise ValueError("[load_gguf] Input must be a string")
    try:
        with open(str(file), "rb") as f:
            blob = f.read()
    except OSError:
        raise ValueError(f"[load_gguf] Failed to open {file}") from None
    if blob[:4] != b"GGUF":
        raise RuntimeError(f"[load_gguf] gguf_init failed: {file} is not a GGUF file")
    r = _GGUFReader(blob)
    r.take(4)
    version, n_tensors, n_kv = r.unpack("<IQQ")
    if version not in (2, 3):
        raise RuntimeError(f"[load_gguf] Unsupported GGUF version {version} in {file}")
    metadata = {}
    for _ in range(n_kv):
        key = r.string()
        (t,) = r.unpack("<I")
        metadata[key] = r.value(t)
    alignment = metadata.get("general.alignment")
    alignment = int(alignment.item()) if isinstance(alignment, Array) else _GGUF_ALIGNMENT
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        (ndim,) = r.unpack("<I")
        dims = r.unpack(f"<{ndim}Q")
        t, offset = r.unpack("<IQ")
        infos.append((name, tuple(int(s) for s in dims[::-1]), t, offset))
    data_start = r.pos + (-r.pos % alignment)
    arrays = {}
    for name, shape, t, offset in infos:
        count = int(np.prod(shape, dtype=np.int64))
        if t in _GT_DTYPE:
            nbytes = count * _GT_DTYPE[t].size
        elif t in _GT_QUANT:
            nbytes = count // 32 * _GT_QUANT[t][1]
        elif t == _GT_BF16:
            nbytes = count * 2
        else:
            raise RuntimeError(f"[load_gguf] Tensor '{name}' has the unsupported GGML type {t}")
        begin = data_start + offset
        if begin > len(blob) or nbytes > len(blob) - begin:
            raise RuntimeError(f"[load_gguf] Tensor '{name}' extends past the end of the file. "
                               "Perhaps an incomplete download or corrupt file?")
        raw = memoryview(blob)[begin:begin + nbytes]
        if t in _GT_QUANT:
            loaded = _gguf_quantized(name, t, shape, raw)
        elif t == _GT_BF16:  # MLX converts types it has no direct load for to float16
            loaded = {name: _leaf(_bf16_to_f16(raw), dt.float16, shape)}
        else:
            loaded = {name: _leaf(np.frombuffer(raw, np.uint8), _GT_DTYPE[t], shape)}
        for k, v in loaded.items():
            if k in arrays:
                raise RuntimeError(f"[load_gguf] Duplicate parameter name {k} this can happen when "
                                   "loading quantized tensors.")
            arrays[k] = v
    return arrays, metadata


# ---- load ---------------------------------------------------------------------------

def load(file, /, format=None, return_metadata=False, *, stream=None):
    """Load arrays from a `.npy`, `.npz`, `.safetensors` or `.gguf` file.

    `format` defaults to the file name's extension. A `.npy` file gives an array, the
    others a dict of names to arrays; with `return_metadata=True`, safetensors and GGUF
    give `(arrays, metadata)`. GGUF Q4_0/Q4_1/Q8_0 tensors load as MLX's quantized
    triplet (`name`, `prefix.scales`, `prefix.biases`); bfloat16 ones as float16.

        x = mr.load("x.npy")
        w, meta = mr.load("w.safetensors", return_metadata=True)
    """
    _device._as_device(stream)  # a bad stream= fails as in every op; loading runs on the CPU
    if format is None:
        if _is_path(file):
            name = str(file)
        elif _is_reader(file):
            name = str(file.name)
        else:
            raise ValueError("[load] Input must be a file-like object opened in binary mode, or string")
        dot = name.rfind(".")
        if dot < 0:
            raise ValueError("[load] Could not infer file format from extension")
        format = name[dot + 1:]
    if not isinstance(format, str):
        raise TypeError(f"[load] format must be a str, got {type(format).__name__}")
    if return_metadata and format in ("npy", "npz"):
        raise ValueError(f"[load] metadata not supported for format {format}")
    if format == "safetensors":
        arrays, metadata = _load_safetensors(file)
        return (arrays, metadata) if return_metadata else arrays
    if format == "npz":
        return _load_npz(file)
    if format == "npy":
        if not (_is_path(file) or _is_reader(file)):
            raise ValueError("[load_npy] Input must be a file-like object, or string")
        label = str(file) if _is_path(file) else "python file object"
        return _npy_array(_read_all("load", file), label)
    if format == "gguf":
        arrays, metadata = _load_gguf(file)
        return (arrays, metadata) if return_metadata else arrays
    raise ValueError(f"[load] Unknown file format {format}")
