#!/usr/bin/env bash
# Fuzzes every target for SECONDS each (default 60) with clang 14's libFuzzer under AddressSanitizer and
# UndefinedBehaviorSanitizer (bazel --config=fuzz), from the committed seed corpora, and prints one line per
# target. New inputs libFuzzer finds go to $FUZZ_WORK_DIR (default /tmp/traind-fuzz/<target>), so a longer run
# can continue where the last one stopped; crashing inputs to $FUZZ_WORK_DIR/<target>/crashes/ (add them to
# tests/fuzz/corpus/<target>/ as crash-<name> once fixed: the ordinary test suite then replays them).
#
#   tests/fuzz/run.sh 600                  # ten minutes per target
#   tests/fuzz/run.sh 60 model_fuzzer      # one target
set -uo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-60}
shift || true
targets=("$@")
if ((${#targets[@]} == 0)); then
  targets=(model_fuzzer train_fuzzer loss_graph_fuzzer checkpoint_fuzzer npy_fuzzer tensor_fuzzer)
fi
work=${FUZZ_WORK_DIR:-/tmp/traind-fuzz}

bins=()
for target in "${targets[@]}"; do bins+=("//tests/fuzz:${target}_bin"); done
bazel build --config=fuzz "${bins[@]}" || exit 1
bin_dir=$(bazel info --config=fuzz bazel-bin 2>/dev/null)

status=0
for target in "${targets[@]}"; do
  corpus="$work/$target"
  crashes="$corpus/crashes"
  mkdir -p "$corpus/generated" "$crashes"
  log="$corpus/fuzz.log"
  # libFuzzer writes new inputs into the first directory and reads the seeds from the second.
  OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$bin_dir/tests/fuzz/${target}_bin" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=3072 \
    -print_final_stats=1 -artifact_prefix="$crashes/" "$corpus/generated" "tests/fuzz/corpus/$target" \
    >"$log" 2>&1
  code=$?
  runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1)
  if ((code == 0)); then
    echo "$target: ok, ${runs:-?} inputs in ${seconds}s, ${cov:-cov ?}, corpus $(ls "$corpus/generated" | wc -l) new"
  else
    status=1
    echo "$target: FAILED (exit $code), see $log; inputs in $crashes"
    grep -m3 -E 'ERROR|SUMMARY|runtime error|deadly signal' "$log" | sed 's/^/    /'
  fi
done
exit $status
