"""Function transforms as MLIR passes over the mirax dialect, and their Python API.

Passes (registered for `mirax-opt`): `mirax-jvp`, `mirax-vjp`, `mirax-grad`, `mirax-vmap`.
"""
from ..lowering import PASSES
from .api import grad, hessian, jacfwd, jacrev, jvp, value_and_grad, vjp, vmap  # noqa: F401
from .mirax_jvp import MiraxJvp
from .mirax_vjp import MiraxGrad, MiraxVjp
from .mirax_vmap import MiraxVmap

for _p in (MiraxJvp, MiraxVjp, MiraxGrad, MiraxVmap):
    PASSES[_p.name] = _p
