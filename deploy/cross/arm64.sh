#!/usr/bin/env bash
# Cross-builds traind and trainctl for arm64 (most edge devices) with Debian's cross toolchain and smoke-tests them
# under qemu-user-static against the x86 build: start traind, `trainctl health`, train a few steps of the golden MLP
# on each and compare the losses. Run by hand (a full build of the engine for arm64 takes long on 2 cores): it is
# not part of deploy/test.sh.
#
#   deploy/cross/arm64.sh [--steps N] [--x86-bin DIR]
#
# --x86-bin DIR compares with DIR/server/traind (default: `bazel build` here, optimised).
#
# How: the arm64 libraries come from Debian's archive as a sysroot (dpkg --add-architecture arm64, then
# `apt-get download` of deploy/cross/arm64-packages.txt and their arm64 dependencies, unpacked with dpkg -x; the
# build machine's own packages are not touched: installing the :arm64 -dev packages would remove amd64 ones such
# as prometheus-cpp-dev, which are not co-installable). Bazel runs in its own output base with its auto-configured
# C++ toolchain pointed at aarch64-linux-gnu-gcc and --sysroot, pkg-config pointed at the sysroot, and
# --config=arm64 (the engine compiled for ARMv8-A instead of -march=native).
set -euo pipefail
source_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
work=${TRAIND_ARM64_WORK:-/var/tmp/traind-arm64}
sysroot=$work/sysroot
steps=5
x86_bin=""
while (($#)); do
  case "$1" in
    --steps) steps=$2; shift ;;
    --x86-bin) x86_bin=$2; shift ;;
    *) echo "usage: deploy/cross/arm64.sh [--steps N] [--x86-bin DIR]" >&2; exit 2 ;;
  esac
  shift
done
log() { echo "arm64: $*" >&2; }

# 1. Tools and the arm64 package lists.
SUDO=""
[[ $(id -u) -eq 0 ]] || SUDO=sudo
need=()
for pkg in crossbuild-essential-arm64 qemu-user-static; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if ((${#need[@]})); then $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; fi
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  $SUDO dpkg --add-architecture arm64
  $SUDO apt-get update -qq
fi

# 2. The sysroot: every arm64 package apt would install for the list, unpacked (not installed).
if [[ ! -f $sysroot/.complete ]]; then
  log "downloading the arm64 libraries into $sysroot"
  rm -rf "$sysroot" "$work/debs"
  mkdir -p "$sysroot" "$work/debs"
  mapfile -t wanted < <(grep -v '^#' "$source_root/deploy/cross/arm64-packages.txt" | sed '/^$/d; s/$/:arm64/')
  # "Inst" lines of a simulated install = the arm64 packages and dependencies (nothing is installed).
  apt-get install -s --no-install-recommends "${wanted[@]}" 2>/dev/null | awk '/^Inst .*:arm64/ {print $2}' \
    >"$work/debs/list.txt"
  (cd "$work/debs" && apt-get download $(cat list.txt) >/dev/null 2>&1)
  for deb in "$work"/debs/*.deb; do dpkg -x "$deb" "$sysroot"; done
  # Absolute symlinks (libz.so -> /lib/aarch64-linux-gnu/libz.so.1...) point into the sysroot, not the host.
  while IFS= read -r link; do
    ln -sfn "$sysroot$(readlink "$link")" "$link"
  done < <(find "$sysroot" -type l -lname '/*')
  # What update-alternatives would have made: OpenBLAS as libblas/libopenblas, and its cblas.h.
  multiarch=$sysroot/usr/lib/aarch64-linux-gnu
  for lib in libopenblas.so libopenblas.so.0 libblas.so libblas.so.3 liblapack.so liblapack.so.3; do
    ln -sf "openblas-pthread/$lib" "$multiarch/$lib"
  done
  for header in cblas.h f77blas.h openblas_config.h; do
    ln -sf "openblas-pthread/$header" "$sysroot/usr/include/aarch64-linux-gnu/$header"
  done
  ln -sf openblas-pthread/cblas.h "$sysroot/usr/include/aarch64-linux-gnu/cblas-openblas.h"
  ln -sf ../openblas-pthread/pkgconfig/openblas.pc "$multiarch/pkgconfig/openblas.pc"
  ln -sf ../openblas-pthread/pkgconfig/blas-openblas.pc "$multiarch/pkgconfig/blas.pc"
  ln -sf ../openblas-pthread/pkgconfig/lapack-openblas.pc "$multiarch/pkgconfig/lapack.pc"
  touch "$sysroot/.complete"
fi

# 3. The cross toolchain as Bazel's auto-configuration finds tools: by their plain names on PATH.
bin=$work/bin
mkdir -p "$bin"
for tool in gcc g++ cpp ar ld nm objcopy objdump strip gcov dwp; do
  [[ -x /usr/bin/aarch64-linux-gnu-$tool ]] && ln -sf "/usr/bin/aarch64-linux-gnu-$tool" "$bin/$tool"
done
pkg_libdir=$sysroot/usr/lib/aarch64-linux-gnu/pkgconfig:$sysroot/usr/share/pkgconfig
started=$(date +%s)
log "building //server:traind //client:trainctl for arm64 (output base $work/bazel)"
(cd "$source_root" && PATH=$bin:$PATH bazel --output_base="$work/bazel" build --config=arm64 \
  --repo_env=CC="$bin/gcc" \
  --repo_env=BAZEL_CXXOPTS="-std=c++17:--sysroot=$sysroot" \
  --repo_env=BAZEL_LINKOPTS="-lstdc++:-lm:--sysroot=$sysroot" \
  --repo_env=PKG_CONFIG_LIBDIR="$pkg_libdir" --repo_env=PKG_CONFIG_SYSROOT_DIR="$sysroot" \
  --repo_env=PKG_CONFIG_PATH= \
  //server:traind //client:trainctl)
arm_bin=$(cd "$source_root" && PATH=$bin:$PATH bazel --output_base="$work/bazel" info --config=arm64 bazel-bin \
  2>/dev/null)
log "built in $(($(date +%s) - started)) s: $(file -b "$arm_bin/server/traind" | cut -d, -f1-2)"

# 4. Smoke test under qemu, side by side with the x86 build.
if [[ -z $x86_bin ]]; then
  (cd "$source_root" && bazel build //server:traind //client:trainctl >/dev/null 2>&1)
  x86_bin=$(cd "$source_root" && bazel info bazel-bin 2>/dev/null)
fi
qemu="qemu-aarch64-static -L $sysroot"
scratch=$(mktemp -d /tmp/traind-arm64-smoke.XXXXXX)
pids=()
trap 'for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$scratch"' EXIT
$qemu "$arm_bin/server/traind" --version

start_daemon() {  # name, launcher...
  local name=$1; shift
  "$@" --listen=127.0.0.1:0 --metrics_listen= --state_dir="$scratch/$name-state" --ready_file="$scratch/$name.ready" \
    --default_num_threads=1 >"$scratch/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 1200); do [[ -f $scratch/$name.ready ]] && break; sleep 0.1; done
  [[ -f $scratch/$name.ready ]] || { cat "$scratch/$name.log" >&2; log "$name traind did not start"; exit 1; }
  sed -n 's/.*"grpc_address": "\([^"]*\)".*/\1/p' "$scratch/$name.ready"
}
arm_address=$(start_daemon arm64 $qemu "$arm_bin/server/traind")
x86_address=$(start_daemon x86 "$x86_bin/server/traind")
$qemu "$arm_bin/client/trainctl" health --address "$arm_address"

golden=$source_root/tests/golden/data/mlp
train() {  # address -> one loss per line
  local address=$1 out=$scratch/artifacts-$1
  "$x86_bin/client/trainctl" artifacts generate --address "$address" --model "$golden/model.onnx" \
    --loss cross_entropy --optimizer adamw --lr 0.01 --out "$out" --json >/dev/null
  local session
  session=$("$x86_bin/client/trainctl" session create --address "$address" --artifact-dir "$out" --threads 1 \
    --seed 1 --json | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["session_id"])')
  "$x86_bin/client/trainctl" train --address "$address" --session "$session" --input "input=$golden/inputs/input.npy" \
    --input "target=$golden/targets/target.npy" --steps "$steps" --json |
    /usr/bin/python3 -c 'import json, sys; [print(s["loss"]) for s in json.load(sys.stdin)["steps"]]'
}
train "$arm_address" >"$scratch/arm64.loss"
train "$x86_address" >"$scratch/x86.loss"
/usr/bin/python3 - "$scratch/x86.loss" "$scratch/arm64.loss" <<'PY'
import sys
x86 = [float(line) for line in open(sys.argv[1])]
arm = [float(line) for line in open(sys.argv[2])]
worst = 0.0
print(f"{'step':>4} {'x86_64 loss':>14} {'arm64 loss':>14} {'rel. diff':>10}")
for step, (a, b) in enumerate(zip(x86, arm), start=1):
    diff = abs(a - b) / max(abs(a), 1e-12)
    worst = max(worst, diff)
    print(f"{step:>4} {a:>14.8f} {b:>14.8f} {diff:>10.2e}")
print(f"largest relative difference: {worst:.2e}")
sys.exit(0 if len(x86) == len(arm) > 0 and worst < 1e-4 else 1)
PY

log "ok"
