"""`mirax-translate`: translate a module of mirax ops out of MLIR, as mlir-translate does.

    mirax-translate --mirax-to-spirv softmax.mlir -o softmax.spv
    mirax-translate --mirax-to-msl softmax.mlir            # Metal Shading Language on stdout
    mirax-translate --mirax-to-ptx softmax.mlir            # NVIDIA PTX on stdout (NVVM, in-process)

`--mirax-to-spirv` runs the GPU pipeline (`mirax-gpu-pipeline`) for a Vulkan 1.1 target
with the common capabilities and writes the SPIR-V binary of the function's kernel. A
function that needs several kernels writes one file per kernel, `OUT.<kernel>.spv`, and
prints their names. `--mirax-to-msl` lowers for a Metal target (no float64) and prints
each kernel's MSL (SPIRV-Cross) with its entry, threadgroup size and buffer map.
Exit status 1 with an MLIR-style diagnostic on bad input.
"""
from __future__ import annotations

import argparse
import os
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="mirax-translate", description=__doc__.splitlines()[0])
    ap.add_argument("input", nargs="?", default="-", help="input .mlir file (- for stdin)")
    ap.add_argument("-o", dest="output", default="-", help="output file (- for stdout: MSL only)")
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--mirax-to-spirv", action="store_true",
                      help="lower mirax ops through the GPU pipeline and write SPIR-V")
    what.add_argument("--mirax-to-msl", action="store_true",
                      help="lower mirax ops for Metal and print the kernels as MSL")
    what.add_argument("--mirax-to-ptx", action="store_true",
                      help="lower mirax ops through NVVM and print the kernels as PTX")
    ap.add_argument("--chip", default="sm_80", help="with --mirax-to-ptx: the NVIDIA architecture")
    ap.add_argument("--func", default=None, help="the function to translate (default: the first)")
    opts = ap.parse_args(argv)

    from mlir import ir
    from .dialect.core import MiraxError
    from .lowering.gpu_pipeline import lower_to_spirv
    from .runtime.context import context
    name = "-" if opts.input == "-" else opts.input
    try:
        text = sys.stdin.read() if opts.input == "-" else open(opts.input, encoding="utf-8").read()
    except OSError as err:
        print(f"mirax-translate: error: could not open input file '{name}': {err.strerror}", file=sys.stderr)
        return 1
    from .lowering.verify import check_parsable
    bad = check_parsable(text)
    if bad is not None:  # MLIR's parser would abort the process on it
        print(f"{name}:{bad[0]}:{bad[1]}: error: {bad[2]}", file=sys.stderr)
        return 1
    try:
        with context():
            module = ir.Module.parse(text)
            funcs = [o.operation for o in module.body.operations if o.operation.name == "func.func"]
            if not funcs:
                raise MiraxError(f"{name}: no func.func to translate")
            fname = opts.func or ir.StringAttr(funcs[0].attributes["sym_name"]).value
            if opts.mirax_to_msl:
                from .lowering.spirv_to_msl import msl_program
                text = msl_program(module, fname).text()
            elif opts.mirax_to_ptx:
                from .lowering.gpu_to_ptx import ptx_program
                text = ptx_program(module, fname, chip=opts.chip).text()
            else:
                prog = lower_to_spirv(module, fname)
    except (MiraxError, ir.MLIRError, ValueError) as err:
        print(f"mirax-translate: {name}: error: {err}", file=sys.stderr)
        return 1
    if opts.mirax_to_msl or opts.mirax_to_ptx:
        if opts.output == "-":
            sys.stdout.write(text)
        else:
            with open(opts.output, "w", encoding="utf-8") as fh:
                fh.write(text)
        return 0
    if opts.output == "-":
        print("mirax-translate: error: SPIR-V is binary: give an output file with -o", file=sys.stderr)
        return 1
    kernels = list(prog.kernels.values())
    if len(kernels) == 1:
        with open(opts.output, "wb") as fh:
            fh.write(kernels[0].spirv)
        return 0
    root, _ = os.path.splitext(opts.output)
    for mod, k in prog.kernels.items():
        path = f"{root}.{mod}.spv"
        with open(path, "wb") as fh:
            fh.write(k.spirv)
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
