#!/usr/bin/env bash
# Installs everything traind needs to build, test and run on a fresh Debian bookworm machine.
# Idempotent: packages already present are skipped, so running it again costs ~1 s.
set -euo pipefail

# Build + runtime libraries (see ../shared/BUILD-NOTES.md for why each is here).
BUILD_PACKAGES=(
  bazel-bootstrap g++ pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  libssl-dev openssl prometheus-cpp-dev libonnx-dev libgtest-dev libgmock-dev
  libdnnl-dev libopenblas-dev zlib1g-dev
  ocl-icd-opencl-dev opencl-headers libclblast-dev
)
# Tests, golden-data generators, the Python client, cross-checks and fuzzing (clang 14 + libFuzzer: the --config=asan build).
TEST_PACKAGES=(
  libonnx-testdata python3-torch python3-onnx python3-numpy python3-grpcio python3-protobuf curl
  python3-venv python3-pip python3-setuptools python3-wheel python3-sklearn prometheus
  # Fleets and deployment: history plots, the Debian packages (dpkg-buildpackage), manifest checks.
  python3-matplotlib python3-yaml dpkg-dev debhelper dh-python python3-all fakeroot
  pocl-opencl-icd clinfo
  clang-14 libfuzzer-14-dev libclang-rt-14-dev
)

missing=()
for pkg in "${BUILD_PACKAGES[@]}" "${TEST_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "setup: all packages present" >&2
fi
