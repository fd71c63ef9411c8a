"""Metal Shading Language through SPIRV-Cross: every row of the op table and the GPU
tests' fused functions translate, with the binding map and threadgroup size the Metal
runtime needs. (No Metal compiler exists on Linux: the MSL is checked as text here, and
the same SPIR-V runs on Vulkan in test_gpu.py.)"""
import numpy as np
import pytest

import mirax as mr
from mirax.array import apply
from mirax.device import kernel_module_text
from mirax.dialect import PRIMITIVES
from mirax.lowering.spirv_to_msl import msl_program, to_msl
from mirax.runtime.context import context
from mlir import ir

from primitive_table import make_inputs, rows

def _has_kernel(name):
    """Host primitives (LAPACK decompositions, MPI collectives) run no GPU kernel: the GPU
    refuses them (test_gpu checks that); the rest translate to MSL."""
    from mirax.runtime import host
    return not host.is_host(name)


ROWS = [r for r in rows() if _has_kernel(r[0])]
_IDS = [f"{r[0]}-{r[3].name}-{'x'.join(map(str, r[1][0])) or 'scalar'}-{i}" for i, r in enumerate(ROWS)]


def _refusal(dtypes):
    for d, why in (("float64", "float64 cannot run on this GPU"), ("complex64", "complex64 cannot run on the GPU"),
                   ("bfloat16", "bfloat16 cannot run on the GPU yet")):
        if d in dtypes:
            return why
    return None


@pytest.mark.parametrize("name,shapes,params,dtype", ROWS, ids=_IDS)
def test_primitive_kernel_translates_to_msl(name, shapes, params, dtype, rng):
    xs, ins = make_inputs(name, shapes, dtype, rng)
    out = apply(name, ins, **params)
    if out.size == 0:
        return  # no kernel
    text = kernel_module_text(PRIMITIVES[name], params, [x.aval for x in ins], out.aval, c_interface=False)
    refusal = _refusal({x.dtype.name for x in ins} | {out.dtype.name})
    with context(), ir.Location.unknown():
        module = ir.Module.parse("module {\n" + text + "}\n")
        if refusal:
            try:
                prog = msl_program(module, "kernel")
            except mr.MiraxError as err:
                assert refusal in str(err)
                return
            # translated: only when no kernel touches the refused dtype (an argsort of rows
            # of one element writes zeros and never reads its float64 input)
            assert prog.kernels and all("double" not in k.source for k in prog.kernels.values()), refusal
            assert name == "argsort" and shapes[0][params["axis"]] == 1, f"{name} was not refused: {refusal}"
            return
        prog = msl_program(module, "kernel")
    assert prog.kernels, "no kernel"
    for k in prog.kernels.values():
        assert "#include <metal_stdlib>" in k.source and f"kernel void {k.entry}(" in k.source
        assert all(b is not None for b in k.buffers) and len(set(k.buffers)) == len(k.buffers)
        assert 1 <= k.threadgroup[0] * k.threadgroup[1] * k.threadgroup[2] <= 1024


def test_fused_functions_translate_to_msl():
    from test_gpu import COMPOSITES, _x
    for name, (f, shapes) in COMPOSITES.items():
        text = mr.compile(f).lower(*[_x(s, i) for i, s in enumerate(shapes)]).as_text("msl")
        assert "kernel void" in text, name


def test_binding_map_follows_the_descriptor_bindings():
    """[[buffer(i)]] of each kernel argument comes from SPIRV-Cross's reflection: the
    runtime binds argument j at buffers[j]."""
    f = lambda a, b: a @ b + 1  # noqa: E731
    with context(), ir.Location.unknown():
        m = ir.Module.parse(mr.compile(f).lower(mr.ones((64, 32)), mr.ones((32, 96))).as_text("simplified"))
        prog = msl_program(m, "main")
    assert prog.kernels
    for k in prog.kernels.values():
        signature = k.source.split(f"kernel void {k.entry}(")[1].split("\n")[0]
        assert k.buffers
        for j, b in enumerate(k.buffers):
            assert f"{k.entry}_arg_{j} [[buffer({b})]]" in signature, (j, b, signature)


def test_spirv_cross_errors_name_the_kernel():
    with pytest.raises(mr.MiraxError, match="SPIRV-Cross cannot translate kernel k"):
        to_msl(b"\x03\x02\x23\x07" + b"\x00" * 16, "k")
