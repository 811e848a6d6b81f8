#!/usr/bin/env bash
# The test command: installs what is missing, then builds and runs the whole suite — unit tests, integration
# tests against the real daemon, the ONNX backend tests — optimised and again under AddressSanitizer.
# Prints a closing line "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."

bash deploy/setup.sh || exit 1
# onnxruntime-node (npm), the independent runtime that cross-checks exported models; the checks skip without it.
bash bench/setup_peers.sh || echo "test: onnxruntime-node could not be installed; its cross-checks will skip" >&2

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
# Heavy tests (multi-GB models, long kill or fuzz loops) carry the tag "no-asan": they run once, optimised.
for config in "" "--config=asan --test_tag_filters=-no-asan"; do
  echo "== bazel test ${config:-(opt)} //..." >&2
  bazel test ${config} --test_summary=short //... 2>&1 | tee -a "$log"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
done

# The fuzz targets replay their corpora in both configurations above; the fuzzing stage then fuzzes each for 10 s
# (clang 14 + libFuzzer + ASan/UBSan, tests/fuzz/README.md). --nocache_test_results: a cached pass fuzzed nothing.
echo "== bazel test --config=fuzz (libFuzzer, 10 s per target)" >&2
bazel test --config=fuzz --test_tag_filters=fuzz --nocache_test_results --test_summary=short //tests/fuzz/... 2>&1 |
  tee -a "$log"
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1

passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD)' "$log")
echo "${passed} passed, ${failed} failed"
exit "$status"
