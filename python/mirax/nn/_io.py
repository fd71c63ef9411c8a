"""The weight files of `Module.save_weights`/`load_weights`: `.npz` and `.safetensors`.

The formats themselves live in `mirax.io` (`mr.savez`, `mr.save_safetensors`,
`mr.load`); these names are what `nn` calls.
"""
from __future__ import annotations

from .. import io as _io

__all__ = ["save_npz", "save_safetensors", "load_safetensors", "load_npz", "load"]


def save_npz(file, arrays: dict) -> None:
    """`mr.savez(file, **arrays)`: bfloat16 is stored as MLX stores it (`<V2` raw bits)."""
    _io.savez(file, **arrays)


def load_npz(file) -> dict:
    return _io.load(file, format="npz")


def save_safetensors(file, arrays: dict, metadata: dict | None = None) -> None:
    """Write `{name: array}` to a `.safetensors` file."""
    _io.save_safetensors(file, arrays, metadata)


def load_safetensors(file, return_metadata: bool = False):
    """`{name: array}` from a `.safetensors` file (and its metadata if asked)."""
    return _io.load(file, format="safetensors", return_metadata=return_metadata)


def load(file) -> dict:
    """`{name: array}` from a weights file, the format told by its extension (as `mr.load`)."""
    return _io.load(file)
