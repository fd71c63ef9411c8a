"""`mirax-cpu-pipeline`: mirax (or linalg on tensors) all the way to the LLVM dialect.

The functions it leaves take their inputs and then their outputs as memrefs, written in
place (`buffer-results-to-out-params`), with C interfaces, so the runtime calls them on
numpy buffers without copies.
"""
from __future__ import annotations

from .convert_mirax_to_linalg import ConvertMiraxToLinalg
from .pass_base import MiraxPass

NAME = "mirax-cpu-pipeline"

# Bufferize straight into the caller's buffers (see DESIGN.md, "Bufferization").
BUFFERIZE = [
    "eliminate-empty-tensors",
    "one-shot-bufferize{bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map}",
    "canonicalize", "cse",
    "drop-equivalent-buffer-results",
    "buffer-results-to-out-params{modify-public-functions hoist-static-allocs}",
    "buffer-deallocation-pipeline",
]

TO_LLVM = [
    "func.func(convert-linalg-to-loops)",
    "convert-complex-to-standard",
    "arith-emulate-unsupported-floats{source-types=bf16 target-type=f32}",
    "convert-math-to-llvm",
    "convert-math-to-libm",
    "convert-complex-to-llvm",
    "expand-strided-metadata", "lower-affine",
    "finalize-memref-to-llvm",
    "convert-scf-to-cf", "convert-cf-to-llvm", "convert-arith-to-llvm", "convert-index-to-llvm",
    "convert-func-to-llvm", "convert-ub-to-llvm", "reconcile-unrealized-casts",
]


class MiraxCpuPipeline(MiraxPass):
    name = NAME
    summary = "Lower mirax to LLVM for the CPU: linalg, bufferization into out-params, loops, LLVM"

    def add_to(self, pm):
        ConvertMiraxToLinalg().add_to(pm)
        for p in ["canonicalize", "cse"] + BUFFERIZE + TO_LLVM:
            pm.add(p)
