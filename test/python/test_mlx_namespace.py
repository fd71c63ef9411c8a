"""Every public name of MLX 0.32.4's `mlx.core` and of its submodules exists in mirax.

The snapshots beside this file were made with a real MLX 0.32.4 (pip `mlx==0.32.4`):

    import json, mlx.core as mx
    core = sorted(n for n in dir(mx) if not n.startswith("_"))              # mlx_core_names.json
    subs = {m: sorted(n for n in dir(getattr(mx, m)) if not n.startswith("_"))
            for m in ["random", "linalg", "fft", "fast", "distributed", "metal", "cuda"]}   # mlx_sub_names.json

A name missing here is a regression: add it back (or, if it truly cannot exist in mirax,
list it in MISSING with the reason).
"""
import inspect
import json
import os
import types

import pytest

import mirax as mr

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "mlx_core_names.json")) as f:
    CORE = json.load(f)
with open(os.path.join(HERE, "mlx_sub_names.json")) as f:
    SUBMODULES = json.load(f)

# (module, name) -> why mirax cannot have it; none so far
MISSING: dict = {}

# what each name of mlx.core is in MLX 0.32.4 when it is not a function, checked in mirax too
CLASSES = {"ArrayAt", "ArrayIterator", "ArrayLike", "Device", "DeviceType", "Dtype", "DtypeCategory",
           "FunctionExporter", "PrintOptions", "Stream", "StreamContext", "ThreadLocalStream", "array", "finfo",
           "iinfo"}
DTYPES = {"bool_", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64", "float16", "bfloat16",
          "float32", "float64", "complex64"}
CATEGORIES = {"complexfloating", "floating", "generic", "inexact", "integer", "number", "signedinteger",
              "unsignedinteger"}
FLOATS = {"e", "euler_gamma", "inf", "nan", "pi"}
DEVICES = {"cpu", "gpu"}


def _check_kind(name, obj):
    if name in SUBMODULES:
        assert isinstance(obj, types.ModuleType), f"mirax.{name} should be a module"
    elif name in CLASSES:
        assert inspect.isclass(obj), f"mirax.{name} should be a class"
    elif name in DTYPES:
        assert isinstance(obj, mr.Dtype)
    elif name in CATEGORIES:
        assert isinstance(obj, mr.DtypeCategory)
    elif name in FLOATS:
        assert isinstance(obj, float)
    elif name in DEVICES:
        assert isinstance(obj, mr.Device)
    elif name == "newaxis":
        assert obj is None
    else:  # a function (mirax's `stream`, `printoptions` and `custom_function` are classes: callable too)
        assert callable(obj), f"mirax.{name} should be callable"


def test_snapshots_are_whole():
    # guards against a truncated or emptied snapshot silently passing the table below
    assert len(CORE) == 315 and CORE == sorted(CORE)
    assert {k: len(v) for k, v in SUBMODULES.items()} == {
        "random": 13, "linalg": 19, "fft": 18, "fast": 9, "distributed": 11, "metal": 12, "cuda": 1}
    assert set(SUBMODULES) | CLASSES | DTYPES | CATEGORIES | FLOATS | DEVICES <= set(CORE)


@pytest.mark.parametrize("name", CORE)
def test_core_name(name):
    if ("core", name) in MISSING:
        assert not hasattr(mr, name), f"mirax.{name} exists now: drop it from MISSING"
        pytest.skip(MISSING["core", name])
    assert hasattr(mr, name), f"mirax lacks mlx.core.{name}"
    _check_kind(name, getattr(mr, name))


@pytest.mark.parametrize("module,name", [(m, n) for m, names in SUBMODULES.items() for n in names])
def test_submodule_name(module, name):
    if (module, name) in MISSING:
        assert not hasattr(getattr(mr, module), name), f"mirax.{module}.{name} exists now: drop it from MISSING"
        pytest.skip(MISSING[module, name])
    sub = getattr(mr, module)
    assert hasattr(sub, name), f"mirax lacks mlx.core.{module}.{name}"
    obj = getattr(sub, name)
    assert inspect.isclass(obj) if name == "Group" else callable(obj), f"mirax.{module}.{name}"


def test_aliases_are_their_originals():
    # MLX binds each array-API alias to the same function as its original
    for alias, original in [(mr.atan2, mr.arctan2), (mr.pow, mr.power), (mr.bitwise_left_shift, mr.left_shift),
                            (mr.bitwise_right_shift, mr.right_shift), (mr.matrix_norm, mr.linalg.norm)]:
        assert alias is original
