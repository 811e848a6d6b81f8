#!/bin/sh
# Regenerates expected_pass.txt from the runner (never edit that file by hand).
set -eu
cd "$(dirname "$0")/../.."
DATA=/usr/share/libonnx-testdata/data
bazel run //tests/onnx_backend:runner -- \
  --write_expected=tests/onnx_backend/expected_pass.txt \
  "$DATA/node" "$DATA/pytorch-converted" "$DATA/pytorch-operator" "$DATA/simple" | tail -1
