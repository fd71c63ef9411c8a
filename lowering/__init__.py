"""mirax's passes, looked up by name (the registry `mirax-opt` consults first).

    from mirax.lowering import PASSES
    PASSES["convert-mirax-to-linalg"]().add_to(pm)
"""
from .approx import MathApprox
from .convert_mirax_to_linalg import ConvertMiraxToLinalg
from .cpu_pipeline import MiraxCpuPipeline
from .donate_arguments import MiraxDonateArguments, MiraxDropDonatedResults, MiraxSinkDonatedWriters
from .early_dealloc import MiraxEarlyDealloc
from .expand_bf16_truncf import MiraxExpandBf16Truncf
from .fuse import MiraxFuse
from .fuse_reductions import MiraxFuseReductions, MiraxRowMemory
from .lower_barriers import MiraxLowerBarriers
from .gpu_map import MiraxGpuMap
from .gpu_pipeline import MiraxGpuLaunch, MiraxGpuPipeline
from .mirax_simplify import MiraxSimplify
from .outline_kernels import MiraxOutlineKernels
from .parallelize import MiraxParallelize
from .pass_base import MiraxPass, PassError
from .pin_constants import MiraxPinConstants
from .reshape_views import MiraxReshapeViews
from .results_in_place import MiraxResultsInPlace
from .streaming_stores import MiraxStreamingStores
from .stable_shift import MiraxStableShift
from .static_partition import MiraxStaticPartition
from .task_counter import MiraxTaskCounter
from .shard import MiraxMpiCpuPipeline, MiraxShard, MiraxShardToMpi
from .vectorize_transposes import MiraxVectorizeTransposes
from .verify import MiraxVerify

PASSES = {p.name: p for p in [ConvertMiraxToLinalg, MiraxCpuPipeline, MiraxSimplify, MiraxVerify,
                               MathApprox, MiraxFuse, MiraxFuseReductions, MiraxParallelize,
                               MiraxGpuMap, MiraxGpuLaunch, MiraxGpuPipeline, MiraxOutlineKernels,
                               MiraxShard, MiraxShardToMpi, MiraxMpiCpuPipeline, MiraxLowerBarriers,
                               MiraxEarlyDealloc, MiraxVectorizeTransposes, MiraxRowMemory,
                               MiraxStreamingStores, MiraxResultsInPlace, MiraxPinConstants,
                               MiraxStableShift, MiraxTaskCounter, MiraxStaticPartition,
                               MiraxDonateArguments, MiraxSinkDonatedWriters, MiraxDropDonatedResults,
                               MiraxReshapeViews, MiraxExpandBf16Truncf]}

__all__ = ["PASSES", "MiraxPass", "PassError"]
