#!/usr/bin/env bash
# Builds the Debian packages (deploy/debian/build.sh: dpkg-buildpackage, offline) from the binaries this suite
# built, installs them with dpkg into a scratch root, and checks the result: the files and their places, the
# conffile, dependencies found by dpkg-shlibdeps, the systemd unit's hardening (systemd-analyze security, offline),
# `traind --version`, then a daemon started from the installed files with the installed config answers
# `trainctl health`, the installed Python client and `trainctl fleet status` (through the installed
# traind_client.fleet).
set -euo pipefail
# dpkg runs ldconfig and start-stop-daemon from the sbin directories (Bazel's test PATH has none).
export PATH=/usr/local/sbin:/usr/sbin:/sbin:$PATH
src=$TEST_SRCDIR/$TEST_WORKSPACE
tmp=${TEST_TMPDIR:-$(mktemp -d)}
fail() { echo "package_test: FAIL: $*" >&2; exit 1; }

bash "$src/deploy/debian/build.sh" --prebuilt "$src" --source-root "$src" --out "$tmp/debs" >/dev/null
version=$(sed -n '1s/^traind (\([^)]*\)).*/\1/p' "$src/deploy/debian/changelog")
arch=$(dpkg --print-architecture)
daemon_deb=$tmp/debs/traind_${version}_${arch}.deb
python_deb=$tmp/debs/python3-traind-client_${version}_all.deb
[[ -f $daemon_deb && -f $python_deb ]] || fail "expected $daemon_deb and $python_deb; got $(ls "$tmp/debs")"

# What dpkg-shlibdeps found: the Debian libraries traind links.
depends=$(dpkg-deb -f "$daemon_deb" Depends)
for library in libgrpc++ libprotobuf libdnnl libonnx libssl3 adduser; do
  [[ $depends == *"$library"* ]] || fail "traind's Depends lacks $library: $depends"
done
[[ $(dpkg-deb -f "$python_deb" Depends) == *python3-grpcio* ]] || fail "python3-traind-client must depend on python3-grpcio"
[[ $(dpkg-deb -f "$python_deb" Architecture) == all ]] || fail "python3-traind-client is not Architecture: all"

# Install into a scratch root: dpkg's own database there, maintainer scripts run without chroot (DPKG_ROOT set).
root=$tmp/root
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates"
touch "$root/var/lib/dpkg/status"
# --force-depends: the scratch root has none of the libraries; the binaries run against the host's.
dpkg --root="$root" --force-not-root --force-script-chrootless --force-depends --log=/dev/null \
  -i "$daemon_deb" "$python_deb" >"$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log" >&2; fail "dpkg -i"; }
for package in traind python3-traind-client; do
  status=$(dpkg-query --admindir="$root/var/lib/dpkg" -W -f='${Status}' "$package")
  [[ $status == "install ok installed" ]] || fail "$package: $status"
done
for file in usr/bin/traind usr/bin/trainctl etc/traind/traind.conf lib/systemd/system/traind.service \
    usr/lib/python3/dist-packages/traind_client/fleet/_run.py \
    usr/lib/python3/dist-packages/traind_client/_proto/training_service_pb2_grpc.py; do
  [[ -f $root/$file ]] || fail "/$file is not installed"
done
[[ -L $root/etc/systemd/system/multi-user.target.wants/traind.service ||
   -e $root/var/lib/systemd/deb-systemd-helper-enabled/multi-user.target.wants/traind.service ]] ||
  fail "the unit is not enabled"
grep -qx /etc/traind/traind.conf "$root/var/lib/dpkg/info/traind.conffiles" || fail "traind.conf is not a conffile"

if command -v systemd-analyze >/dev/null; then
  # Exposure 0 (locked down) .. 10 (unprotected); the unit scores 1.7; --threshold counts tenths (30 = 3.0).
  # Unknown directives would be warned about.
  systemd-analyze security --offline=yes --root="$root" --threshold=30 traind.service >"$tmp/security.log" 2>&1 ||
    { cat "$tmp/security.log" >&2; fail "systemd-analyze security"; }
  ! grep -qi "unknown\|ignoring" "$tmp/security.log" || { cat "$tmp/security.log" >&2; fail "unit warnings"; }
else
  echo "package_test: systemd-analyze not found: the unit's hardening is not rated" >&2
fi

[[ $("$root/usr/bin/traind" --version) == "traind ${version%-*}" ]] || fail "traind --version: $("$root/usr/bin/traind" --version)"

# A daemon from the installed files, with the installed config (addresses and state moved into the test's space).
ready=$tmp/ready.json
"$root/usr/bin/traind" --config="$root/etc/traind/traind.conf" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 \
  --state_dir="$tmp/state" --ready_file="$ready" >"$tmp/traind.log" 2>&1 &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 300); do
  [[ -f $ready ]] && break
  kill -0 $pid 2>/dev/null || { cat "$tmp/traind.log" >&2; fail "traind did not start"; }
  sleep 0.05
done
[[ -f $ready ]] || fail "traind did not become ready"
address=$(sed -n 's/.*"grpc_address": "\([^"]*\)".*/\1/p' "$ready")
"$root/usr/bin/trainctl" health --address "$address" || fail "trainctl health"

export PYTHONPATH=$root/usr/lib/python3/dist-packages
reported=$(/usr/bin/python3 -c "import sys, traind_client; print(traind_client.connect(sys.argv[1]).get_server_info().version)" "$address")
[[ $reported == "${version%-*}" ]] || fail "the installed Python client got version '$reported'"
printf '{"devices": [{"name": "local", "address": "%s", "data": {"local_path": "x"}}]}' "$address" >"$tmp/fleet.json"
"$root/usr/bin/trainctl" fleet status --fleet "$tmp/fleet.json" >"$tmp/fleet.out" ||
  { cat "$tmp/fleet.out" >&2; fail "trainctl fleet status"; }
grep -q "local .* up" "$tmp/fleet.out" || { cat "$tmp/fleet.out" >&2; fail "trainctl fleet status output"; }
echo "package_test: $(basename "$daemon_deb") and $(basename "$python_deb") install and run"
