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
log=${STEAD_TEST_LOG:-$(mktemp /tmp/stead-test.XXXXXX.log)}
echo "full test log: $log"
set +e
go test -count=1 -p 2 -timeout 40m -v ./... > "$log" 2>&1
status=$?
set -e
grep -E '^(ok|FAIL|---- FAIL|panic:)|^--- FAIL' "$log" || true
if grep -q -- '--- SKIP' "$log"; then
  echo "test.sh: tests were skipped; CI does not accept skips:"; grep -- '--- SKIP' "$log"; exit 1
fi
if [ "$status" != 0 ]; then
  # Show each failed test's own output (go test -v prints it between RUN and FAIL).
  for name in $(grep -oE -- '--- FAIL: [^ ]+' "$log" | awk '{print $3}' | sort -u); do
    echo "===== $name"
    awk -v n="$name" '$0 ~ "^=== (RUN|CONT|PAUSE)   "n"$" {p=1} p {print} $0 ~ "--- FAIL: "n" " {p=0}' "$log" | grep -v '^=== ' | head -150
  done
  grep -A20 '^panic:' "$log" | head -60 || true
  exit "$status"
fi
passed=$(grep -c -- '--- PASS' "$log" || true)
echo "$passed passed, 0 failed"
