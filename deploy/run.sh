#!/usr/bin/env bash
# The main command: installs what is missing, builds traind and trainctl, starts traind on its built-in defaults
# (gRPC 127.0.0.1:50051, metrics http://127.0.0.1:9464/metrics), checks it with trainctl, then, as a client over
# gRPC, trains the bundled example end to end (client/python/examples/train_digits.py: handwritten digits, at least
# 95 % held-back accuracy, exported model checked by the engine) and keeps serving in the foreground until Ctrl-C.
# `deploy/run.sh --once` stops the daemon after the checks and the example instead.
# Extra arguments after `--` go to traind, e.g. `deploy/run.sh -- --enable_reflection`.
set -euo pipefail
cd "$(dirname "$0")/.."

once=0
traind_args=()
while (($#)); do
  case "$1" in
    --once) once=1 ;;
    --) shift; traind_args=("$@"); break ;;
    *) echo "usage: deploy/run.sh [--once] [-- traind flags...]" >&2; exit 2 ;;
  esac
  shift
done

bash deploy/setup.sh
bazel build //server:traind //client:trainctl
bin=$(bazel info bazel-bin 2>/dev/null)
ready=$(mktemp -u /tmp/traind-ready.XXXXXX)

# libgomp reads this at start-up: idle OpenMP threads stop spinning soon, so traind does not collapse on a machine
# whose cores other processes are using (as the systemd unit sets it).
export GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-10000}
"$bin/server/traind" --ready_file="$ready" "${traind_args[@]}" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$ready"' EXIT
for _ in $(seq 1 200); do
  [[ -f $ready ]] && break
  kill -0 $pid 2>/dev/null || { echo "run: traind failed to start" >&2; exit 1; }
  sleep 0.05
done
[[ -f $ready ]] || { echo "run: traind did not become ready" >&2; exit 1; }
address=$(sed -n 's/.*"grpc_address": "\([^"]*\)".*/\1/p' "$ready")

"$bin/client/trainctl" health --address "$address"
"$bin/client/trainctl" info --address "$address"

# The main job, over gRPC: the Python client installed the way users install it (a venv over Debian's packages,
# offline), then the digits example trained on the daemon.
venv=.venv
[[ -x $venv/bin/python ]] || /usr/bin/python3 -m venv --system-site-packages "$venv"
"$venv/bin/pip" install --quiet --no-index --disable-pip-version-check ./client/python  # reinstalls the checkout
TRAIND_ADDRESS="$address" "$venv/bin/python" client/python/examples/train_digits.py \
  --out "$(mktemp -d /tmp/traind-digits.XXXXXX)"

if ((once)); then
  exit 0
fi
echo "run: traind is serving on $address (pid $pid); Ctrl-C stops it" >&2
wait $pid
