#!/usr/bin/env bash
# Runs stead's whole test suite as root: unit tests, contract suites, fuzz
# seed corpora and the end-to-end tests against a real daemon (namespaces,
# cgroups, btrfs on a loop device). Root-only tests fail rather than skip
# without root, and this script fails if any test reports a skip.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH=$PATH:/usr/local/go/bin
[ "$(id -u)" = 0 ] || { echo "test.sh must run as root (namespaces, cgroups, loop devices)"; exit 1; }

unformatted=$(gofmt -l $(git ls-files '*.go'))
[ -z "$unformatted" ] || { echo "gofmt needed:"; echo "$unformatted"; exit 1; }
go vet ./...

bash scripts/build.sh
export STEAD_BINARY=$PWD/bin/stead
log=$(mktemp)
set +e
go test -count=1 -p 2 -timeout 40m -v ./... 2>&1 | tee "$log" | grep -E '^(=== RUN|--- FAIL|--- SKIP|FAIL|ok|PASS|panic)' | grep -v '^=== RUN'
status=${PIPESTATUS[0]}
set -e
if grep -q -- '--- SKIP' "$log"; then
  echo "test.sh: tests were skipped; CI does not accept skips:"; grep -- '--- SKIP' "$log"; exit 1
fi
if [ "$status" != 0 ]; then
  grep -B2 -A30 -- '--- FAIL' "$log" | head -300
  exit "$status"
fi
passed=$(grep -c -- '--- PASS' "$log" || true)
echo "$passed passed, 0 failed"
