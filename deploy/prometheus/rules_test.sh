#!/usr/bin/env bash
# The rules are valid (promtool check rules) and behave as their unit tests say (promtool test rules): each alert
# fires for a failing daemon after its `for` duration, not before, and not for a healthy one.
set -euo pipefail
promtool=/usr/bin/promtool
if [[ ! -x $promtool ]]; then
  echo "rules_test: $promtool is missing (deploy/setup.sh installs Debian's prometheus)" >&2
  exit 1
fi
dir=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
here=${TEST_SRCDIR:-}/${TEST_WORKSPACE:-}/deploy/prometheus
[[ -f $here/traind.rules.yml ]] || here=$dir
"$promtool" check rules "$here/traind.rules.yml"
cd "$here"
"$promtool" test rules traind.rules.test.yml
