"""Reading and writing named arrays: `.npz` (numpy) and `.safetensors`.

The safetensors format is written directly: an 8-byte little-endian header length, a
JSON header `{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__"?}`
padded with spaces to a multiple of 8 bytes, then the raw little-endian bytes.
"""
from __future__ import annotations

import json
import struct

import numpy as np

from ..array import _host

from ..array import Array, array
from ..array import eval as _eval
from ..dialect import dtypes as dt

__all__ = ["save_npz", "save_safetensors", "load_safetensors", "load_npz", "load"]

_ST_NAMES = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16",
             "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8",
             "uint64": "U64", "uint32": "U32", "uint16": "U16", "uint8": "U8",
             "bool": "BOOL", "complex64": "C64"}
_ST_DTYPES = {v: k for k, v in _ST_NAMES.items()}


def _storage(a: Array) -> np.ndarray:
    """The evaluated buffer in its storage type (bfloat16 as its uint16 bits)."""
    _eval(a)
    return np.ascontiguousarray(_host(a._data, a.aval))


def save_npz(file: str, arrays: dict) -> None:
    """`np.savez` of the arrays (bfloat16 is widened to float32: numpy has no bfloat16)."""
    np.savez(file, **{k: np.asarray(v) for k, v in arrays.items()})


def load_npz(file: str) -> dict:
    with np.load(file) as f:
        return {k: array(f[k]) for k in f.files}


def save_safetensors(file: str, arrays: dict, metadata: dict | None = None) -> None:
    """Write `{name: array}` to a `.safetensors` file."""
    header: dict = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs, offset = [], 0
    for name, a in arrays.items():
        if not isinstance(a, Array):
            a = array(a)
        code = _ST_NAMES.get(a.dtype.name)
        if code is None:
            raise ValueError(f"save_safetensors: dtype {a.dtype.name} of {name!r} is not supported")
        data = _storage(a)
        raw = data.astype(data.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": code, "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-(8 + len(text)) % 8)
    with open(file, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def load_safetensors(file: str, return_metadata: bool = False):
    """`{name: array}` from a `.safetensors` file (and its metadata if asked)."""
    with open(file, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{file}: not a safetensors file (too short)")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise ValueError(f"{file}: not a safetensors file (header length {n} past the end)")
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", None) or {}
    body = memoryview(blob)[8 + n:]
    out = {}
    for name, info in header.items():
        code = info["dtype"]
        if code not in _ST_DTYPES:
            raise ValueError(f"{file}: dtype {code} of {name!r} is not supported")
        d = dt.to_dtype(_ST_DTYPES[code])
        begin, end = info["data_offsets"]
        shape = tuple(int(s) for s in info["shape"])
        storage = np.dtype(d.storage).newbyteorder("<")
        data = np.frombuffer(body[begin:end], dtype=storage).astype(d.storage).reshape(shape)
        out[name] = Array._leaf(np.array(data, order="C"), d)
    return (out, meta) if return_metadata else out


def load(file: str) -> dict:
    """`{name: array}` from a `.npz` or `.safetensors` file."""
    if file.endswith(".npz"):
        return load_npz(file)
    if file.endswith(".safetensors"):
        return load_safetensors(file)
    raise ValueError(f"Unsupported file extension for {file}. Use '.npz' or '.safetensors'.")
