"""mirax's passes, looked up by name (the registry `mirax-opt` consults first).

    from mirax.lowering import PASSES
    PASSES["convert-mirax-to-linalg"]().add_to(pm)
"""
from .convert_mirax_to_linalg import ConvertMiraxToLinalg
from .cpu_pipeline import MiraxCpuPipeline
from .mirax_simplify import MiraxSimplify
from .pass_base import MiraxPass, PassError
from .verify import MiraxVerify

PASSES = {p.name: p for p in [ConvertMiraxToLinalg, MiraxCpuPipeline, MiraxSimplify, MiraxVerify]}

__all__ = ["PASSES", "MiraxPass", "PassError"]
