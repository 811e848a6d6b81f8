#!/usr/bin/env bash
# The test command: installs what is missing, then builds and runs the whole suite — unit tests, integration
# tests against the real daemon, the ONNX backend tests — optimised and again under AddressSanitizer, and the
# kernels' tests once more built for a CPU without AVX-512.
# Prints a closing line "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."

bash deploy/setup.sh || exit 1
# onnxruntime-node (npm), the independent runtime that cross-checks exported models; the checks skip without it.
bash bench/setup_peers.sh || echo "test: onnxruntime-node could not be installed; its cross-checks will skip" >&2

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
# Two configurations: optimised (GCC), then the sanitizer build (clang 14: AddressSanitizer + UndefinedBehaviorSanitizer
# + libFuzzer, .bazelrc), in which the fuzz targets fuzz for 10 s each (tests/fuzz/README.md) instead of replaying
# their corpora. Heavy tests (multi-GB models, long kill or fuzz loops) carry the tag "no-asan": they run once,
# optimised (--build_tests_only: the sanitizer build compiles only the tests it runs and what they need, not the
# benchmarks or the heavy tests it skips).
for config in "" "--config=asan --test_tag_filters=-no-asan --build_tests_only"; do
  echo "== bazel test ${config:-(opt)} //..." >&2
  bazel test ${config} --test_summary=short //... 2>&1 | tee -a "$log"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
done

# Third, the engine's kernels built for any x86-64-v2 CPU (--config=portable): the portable loops that an AVX-512
# build replaces with its own (softmax rows, GeluGrad) run their tests too.
echo "== bazel test --config=portable //engine/ops:all" >&2
bazel test --config=portable --test_summary=short //engine/ops:all 2>&1 | tee -a "$log"
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1

passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD)' "$log")
echo "${passed} passed, ${failed} failed"
exit "$status"
