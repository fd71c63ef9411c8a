"""NVIDIA PTX from the same gpu kernels (upstream NVVM passes, in-process): every
primitive's kernel and the GPU tests' fused functions lower to PTX with bare-pointer
kernel parameters and `.shared` workgroup arrays. Nothing here needs an NVIDIA GPU."""
import pytest

import mirax as mr
from mirax.array import apply
from mirax.device import kernel_module_text
from mirax.dialect import PRIMITIVES
from mirax.lowering.gpu_to_ptx import ptx_program
from mirax.runtime.context import context
from mlir import ir

from primitive_table import make_inputs, rows

# one row per primitive and float32/int32 shape (the dtypes a CUDA kernel most often sees)
def _has_kernel(name):
    """Host primitives (LAPACK decompositions, MPI collectives) run no GPU kernel."""
    from mirax.runtime import host
    return not host.is_host(name)


ROWS = [r for r in rows() if r[3].name in ("float32", "int32") and _has_kernel(r[0])]
_IDS = [f"{r[0]}-{r[3].name}-{'x'.join(map(str, r[1][0])) or 'scalar'}-{i}" for i, r in enumerate(ROWS)]


@pytest.mark.parametrize("name,shapes,params,dtype", ROWS, ids=_IDS)
def test_primitive_kernel_lowers_to_ptx(name, shapes, params, dtype, rng):
    xs, ins = make_inputs(name, shapes, dtype, rng)
    out = apply(name, ins, **params)
    if out.size == 0:
        return
    text = kernel_module_text(PRIMITIVES[name], params, [x.aval for x in ins], out.aval, c_interface=False)
    with context(), ir.Location.unknown():
        prog = ptx_program(ir.Module.parse("module {\n" + text + "}\n"), "kernel")
    assert prog.kernels
    for k in prog.kernels.values():
        assert f".visible .entry {k.entry}(" in k.ptx and "malloc" not in k.ptx
        params_ = k.ptx.split(f".visible .entry {k.entry}(")[1].split(")")[0]
        assert params_.count(".param") == k.nargs  # one bare pointer per buffer


def test_fused_functions_lower_to_ptx():
    from test_gpu import COMPOSITES, _x
    for name, (f, shapes) in COMPOSITES.items():
        text = mr.compile(f).lower(*[_x(s, i) for i, s in enumerate(shapes)]).as_text("ptx")
        assert ".visible .entry" in text and "malloc" not in text, name
    softmax = COMPOSITES["softmax"][0]
    text = mr.compile(softmax).lower(_x((6, 1000))).as_text("ptx")
    assert text.count(".visible .entry") == 1 and ".shared" in text and "bar.sync" in text
