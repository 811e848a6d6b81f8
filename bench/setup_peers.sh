#!/usr/bin/env bash
# Installs the peer that benchmarks compare against: onnxruntime-node (npm), CPU-only, into bench/.peers/ort.
# Its postinstall script would download CUDA files, which cannot work offline, so it is skipped.
# Idempotent. The product never depends on it.
set -euo pipefail
dir="$(cd "$(dirname "$0")" && pwd)/.peers/ort"
if [[ -f "$dir/node_modules/onnxruntime-node/package.json" ]]; then
  exit 0
fi
mkdir -p "$dir"
cd "$dir"
[[ -f package.json ]] || npm init -y >/dev/null
ONNXRUNTIME_NODE_INSTALL=skip npm install --ignore-scripts --no-audit --no-fund onnxruntime-node@1.30.0 >/dev/null
echo "installed onnxruntime-node into $dir" >&2
