#!/bin/sh
# Run Python (pytest, a script) on an emulated AArch64 CPU, with this checkout's mirax:
#
#   test/aarch64/run.sh neoverse-n1 -m pytest -q test/python/test_cpu_codegen.py   (NEON)
#   test/aarch64/run.sh neoverse-v1 -m pytest -q test/python/test_cpu_codegen.py   (SVE, 256-bit)
#   SVE_BITS=512 test/aarch64/run.sh neoverse-v1 ...    (LLVM's SVE loops are vector-length agnostic)
#
# qemu-user runs Debian's arm64 Python (test/aarch64/setup.sh). The CPU mirax and LLVM
# detect is the one named: qemu serves files from its `-L` prefix before the host's, so a
# prefix per CPU (the userland linked in) holds that CPU's /proc/cpuinfo
# (test/aarch64/cpuinfo/), and qemu emulates a CPU with its features (neoverse-n1 as such;
# for neoverse-v1 qemu 7.2 has no model: `max`, SVE at Graviton3's 256 bits). Speed under
# emulation means nothing: this checks that the code generated for these CPUs is right.
set -eu
cpu=$1; shift
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
root=$repo/build/aarch64
[ -x $root/sysroot/usr/bin/python3 ] || { echo "run test/aarch64/setup.sh first" >&2; exit 2; }
[ -f "$here/cpuinfo/$cpu" ] || { echo "no test/aarch64/cpuinfo/$cpu" >&2; exit 2; }
case $cpu in
  neoverse-n1) qcpu=neoverse-n1 ;;
  neoverse-v1) qcpu=max,sve-default-vector-length=$(( ${SVE_BITS:-256} / 8 )) ;;
  *) qcpu=max ;;
esac
# (/tmp is not served from the prefix: the host's, as the paths the emulated process
# computes from it must resolve alike — pytest's tmp_path failed in a checkout under /tmp)
prefix=$root/cpu/$cpu
if [ ! -f $prefix/proc/cpuinfo ] || ! cmp -s "$here/cpuinfo/$cpu" $prefix/proc/cpuinfo || [ -e $prefix/tmp ]; then
  rm -rf $prefix && mkdir -p $prefix/proc
  for e in $root/sysroot/*; do
    case "$(basename "$e")" in proc|tmp) ;; *) ln -sfn "$e" "$prefix/$(basename "$e")" ;; esac
  done
  cp "$here/cpuinfo/$cpu" $prefix/proc/cpuinfo
fi
# mirax from the checkout: its package layout (pyproject's package-dir) as links
# (links added and dangling ones dropped, never the whole: runs on both CPUs may overlap)
pkg=$root/pkg/mirax
mkdir -p $pkg
for e in $repo/python/mirax/* $repo/dialect $repo/lowering $repo/runtime; do
  [ -e "$pkg/$(basename "$e")" ] || ln -s "$e" "$pkg/$(basename "$e")"
done
for l in $pkg/*; do [ -e "$l" ] || rm -f "$l"; done
export PYTHONPATH=$root/pkg:$root/site PATH=$root/bin:$PATH
# (the tests' kernel cache too: conftest.py's MIRAX_TEST_CACHE_DIR, kept between runs)
export MIRAX_CACHE_DIR=${MIRAX_AARCH64_CACHE_DIR:-$root/cache/$cpu}
export MIRAX_TEST_CACHE_DIR=$MIRAX_CACHE_DIR
export QEMU_CPU=$qcpu QEMU_LD_PREFIX=$prefix
exec $root/sysroot/usr/bin/python3-qemu "$@"
