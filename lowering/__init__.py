"""mirax's passes, looked up by name (the registry `mirax-opt` consults first).

    from mirax.lowering import PASSES
    PASSES["convert-mirax-to-linalg"]().add_to(pm)
"""
from .convert_mirax_to_linalg import ConvertMiraxToLinalg
from .cpu_pipeline import MiraxCpuPipeline
from .pass_base import MiraxPass, PassError

PASSES = {p.name: p for p in [ConvertMiraxToLinalg, MiraxCpuPipeline]}

__all__ = ["PASSES", "MiraxPass", "PassError"]
