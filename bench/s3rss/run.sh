#!/usr/bin/env bash
# Peak daemon memory of a push to S3: runs each given stead binary as a
# daemon on a fresh data dir with a repository on a local versitygw
# (scripts/s3server.sh, 127.0.0.1:9311), writes SIZE of random data in a
# sandbox, pushes it, and prints the daemon's VmHWM before and after the
# push (the high-water mark is reset before it) beside the push's wall
# time, one line per binary. As root:
#
#   bash bench/s3rss/run.sh [-s 700M] OLD_BINARY NEW_BINARY ...
#
# stead-init is taken from beside each binary when it is there.
set -euo pipefail
size=700M
if [ "${1:-}" = -s ]; then size=$2; shift 2; fi
[ $# -ge 1 ] || { echo "usage: $0 [-s SIZE] BINARY..."; exit 2; }
export STEAD_S3_ADDR=127.0.0.1:9311 STEAD_S3_DIR=/var/tmp/s3rss-s3
eval "$(bash "$(dirname "$0")/../../scripts/s3server.sh" 2>/dev/null)"
printf '%-40s %14s %14s %10s\n' binary "VmHWM before" "VmHWM push" "push wall"
n=0
for bin in "$@"; do
  n=$((n + 1))
  d=/var/tmp/s3rss-$n
  grep " $d" /proc/mounts | awk '{print $2}' | sort -r | while read -r m; do umount -l "$m"; done || true
  rm -rf "$d"; mkdir -p "$d"
  port=$((7390 + n))
  export STEAD_ENDPOINT=http://127.0.0.1:$port STEAD_DATA_DIR=$d/data
  "$bin" serve --data-dir "$d/data" --run-dir "$d/run" --listen 127.0.0.1:$port \
    --repo "s3://$STEAD_S3_ADDR/s3rss$n$RANDOM?secure=false" >"$d/log" 2>&1 &
  pid=$!
  for _ in $(seq 300); do "$bin" info >/dev/null 2>&1 && break; sleep 0.2; done
  "$bin" repo init >/dev/null 2>&1
  "$bin" create big >/dev/null
  "$bin" exec big -- sh -c "head -c $size /dev/urandom > \$HOME/big; sync"
  before=$(awk '/VmHWM/ {print $2}' /proc/$pid/status)
  echo 5 >/proc/$pid/clear_refs # reset the high-water mark
  start=$(date +%s.%N)
  "$bin" push big >/dev/null 2>&1
  wall=$(echo "$(date +%s.%N) - $start" | bc)
  after=$(awk '/VmHWM/ {print $2}' /proc/$pid/status)
  printf '%-40s %11d KB %11d KB %9.2fs\n' "$bin" "$before" "$after" "$wall"
  "$bin" delete big --purge >/dev/null 2>&1 || true
  kill "$pid"; wait "$pid" 2>/dev/null || true
  grep " $d" /proc/mounts | awk '{print $2}' | sort -r | while read -r m; do umount -l "$m"; done || true
  rm -rf "$d"
done
