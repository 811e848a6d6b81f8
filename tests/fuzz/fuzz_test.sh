#!/usr/bin/env bash
# One fuzz target as a test: `BINARY CORPUS replay` runs every corpus file once (ordinary builds);
# `BINARY CORPUS fuzz SECONDS` fuzzes from a writable copy of the corpus for that long (--config=fuzz). A crash,
# a sanitizer report, a leak, a timeout or running out of memory fails the test; libFuzzer writes the input that
# caused it to $TEST_UNDECLARED_OUTPUTS_DIR (bazel-testlogs/.../test.outputs/), where it can be added to the corpus.
set -euo pipefail
binary=$1
corpus=$2
mode=$3
case "$mode" in
  replay)
    exec "$binary" "$corpus"
    ;;
  fuzz)
    seconds=$4
    work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/corpus.XXXXXX")
    cp -R "$corpus"/. "$work"/
    artifacts="${TEST_UNDECLARED_OUTPUTS_DIR:-$work}/"
    # OpenMP threads would only slow a single-input loop down.
    export OMP_NUM_THREADS=1
    exec "$binary" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=3072 -print_final_stats=1 \
      -artifact_prefix="$artifacts" "$work"
    ;;
  *)
    echo "usage: $0 BINARY CORPUS replay|fuzz SECONDS" >&2
    exit 2
    ;;
esac
