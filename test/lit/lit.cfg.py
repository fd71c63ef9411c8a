# -*- Python -*-
"""lit configuration for mirax's .mlir tests.

Works from CMake (`check-mirax`, through the generated lit.site.cfg.py) and directly:
    .venv/bin/lit -v test/lit
Tools come from the Python environment running lit (or the one CMake found): mirax-opt
beside the interpreter, mlir-opt from the `mlir` package, FileCheck/not/count from `llvm`.
"""
import importlib.util
import os
import shutil
import sys

import lit.formats

config.name = "mirax"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir"]
config.excludes = ["lit.cfg.py", "lit.site.cfg.py", "Output", "Inputs"]
config.test_source_root = os.path.dirname(os.path.abspath(__file__))
config.test_exec_root = getattr(config, "mirax_obj_root", None) or os.path.join(config.test_source_root, "Output")
src_root = getattr(config, "mirax_src_root", None) or os.path.dirname(os.path.dirname(config.test_source_root))

python = getattr(config, "python_executable", None) or sys.executable


def package_bin(package):
    """The bin/ folder shipped inside an installed Python package (mlir, llvm)."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    for loc in (spec.submodule_search_locations or []) if spec else []:
        if os.path.isdir(os.path.join(loc, "bin")):
            return os.path.join(loc, "bin")
    # lit may run under another interpreter than the venv's: look in the venv's site-packages
    prefix = os.path.dirname(os.path.dirname(python))
    for lib in ("lib", "lib64"):
        base = os.path.join(prefix, lib)
        for pyver in sorted(os.listdir(base)) if os.path.isdir(base) else []:
            d = os.path.join(base, pyver, "site-packages", package, "bin")
            if os.path.isdir(d):
                return d
    return None


python_bin = os.path.dirname(python)
tool_dirs = [d for d in (python_bin, package_bin("mlir"), package_bin("llvm")) if d]
path = os.pathsep.join(tool_dirs + [config.environment.get("PATH", os.environ.get("PATH", ""))])
config.environment["PATH"] = path

for tool in ("mlir-opt", "FileCheck", "not", "count"):
    if not shutil.which(tool, path=path):
        lit_config.fatal(f"cannot find {tool} (looked in {', '.join(tool_dirs)})")

mirax_opt = shutil.which("mirax-opt", path=path)
if mirax_opt is None:  # not installed as a console script: run the module
    mirax_opt = f"{python} -m mirax.opt"

mirax_translate = shutil.which("mirax-translate", path=path) or f"{python} -m mirax.translate"

config.substitutions.append(("%mirax-translate", mirax_translate))
config.substitutions.append(("%mirax-opt", mirax_opt))
config.substitutions.append(("%mlir-opt", shutil.which("mlir-opt", path=path)))
config.substitutions.append(("%irdl", os.path.join(src_root, "dialect", "mirax.irdl.mlir")))
config.substitutions.append(("%PYTHON", python))

# keep kernels the CPU folding compiles out of the user's cache and the lit run quiet
for var in ("HOME", "TMPDIR", "MIRAX_CACHE_DIR", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
    if var in os.environ:
        config.environment[var] = os.environ[var]
# the code generator's choices as this host's features derive them, not as `python -m
# mirax.tune` measured them here: a tuned machine's stored entries (A repacked, say) would
# change what the checks see
config.environment["MIRAX_TUNING"] = "off"

# `threads`: kernels may run on two threads here (two CPUs and an OpenMP runtime): the
# checks of what the lowering emits for them
try:
    import subprocess
    _threads = subprocess.run([python, "-c", "from mirax.lowering import tuning; print(tuning.threads())"],
                              capture_output=True, text=True, timeout=120).stdout.strip()
    if _threads.isdigit() and int(_threads) >= 2:
        config.available_features.add("threads")
except (OSError, subprocess.SubprocessError):
    pass
