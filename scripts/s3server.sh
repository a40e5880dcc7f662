#!/usr/bin/env bash
# Starts a local S3 server (versitygw, posix backend) in the background for
# benchmarks and manual use, and prints the environment to reach it.
# Idempotent: if it is already running it only prints the environment.
#
#   scripts/s3server.sh          start (or find) the server, print the env
#   scripts/s3server.sh stop     stop the server this script started
#   eval "$(scripts/s3server.sh)"   start and export the env into this shell
#
# Overrides: STEAD_S3_ADDR (default 127.0.0.1:9000), STEAD_S3_DIR (default
# /var/lib/stead-s3). Objects live in $STEAD_S3_DIR/data; the credentials are
# generated once and kept in $STEAD_S3_DIR/credentials (mode 0600).
set -euo pipefail

addr=${STEAD_S3_ADDR:-127.0.0.1:9000}
dir=${STEAD_S3_DIR:-/var/lib/stead-s3}
bucket=stead
pidfile=$dir/versitygw.pid
logfile=$dir/versitygw.log
VERSITYGW_VERSION=v1.8.0

export PATH=$PATH:/usr/local/go/bin

running() {
  [ -f "$pidfile" ] || return 1
  local pid
  pid=$(cat "$pidfile")
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q versitygw
}

if [ "${1:-}" = stop ]; then
  if running; then
    kill "$(cat "$pidfile")"
    echo "s3server: stopped pid $(cat "$pidfile")" >&2
  else
    echo "s3server: not running" >&2
  fi
  rm -f "$pidfile"
  exit 0
fi

mkdir -p "$dir/data"
chmod 700 "$dir"
if [ ! -s "$dir/credentials" ]; then
  umask 077
  {
    echo "access=stead$(head -c 6 /dev/urandom | od -An -tx1 | tr -d ' \n')"
    echo "secret=$(head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  } >"$dir/credentials"
fi
access=$(sed -n 's/^access=//p' "$dir/credentials")
secret=$(sed -n 's/^secret=//p' "$dir/credentials")

if ! running; then
  bin=$(command -v versitygw || true)
  if [ -z "$bin" ]; then
    gobin=$(go env GOBIN)
    [ -n "$gobin" ] || gobin="$(go env GOPATH | cut -d: -f1)/bin"
    bin=$gobin/versitygw
    if [ ! -x "$bin" ]; then
      echo "s3server: installing versitygw $VERSITYGW_VERSION (a few minutes)" >&2
      go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
    fi
  fi
  if curl -s -o /dev/null --max-time 1 "http://$addr/"; then
    echo "s3server: something else already listens on $addr; set STEAD_S3_ADDR" >&2
    exit 1
  fi
  # Credentials through the environment, not argv (visible in ps).
  ROOT_ACCESS_KEY_ID=$access ROOT_SECRET_ACCESS_KEY=$secret \
    setsid "$bin" --port "$addr" --region us-east-1 --quiet posix "$dir/data" \
    </dev/null >>"$logfile" 2>&1 &
  echo $! >"$pidfile"
  for _ in $(seq 100); do
    curl -s -o /dev/null --max-time 1 "http://$addr/" && break
    running || { echo "s3server: versitygw exited; see $logfile" >&2; tail -5 "$logfile" >&2; exit 1; }
    sleep 0.1
  done
  curl -s -o /dev/null --max-time 1 "http://$addr/" || { echo "s3server: not ready after 10 s; see $logfile" >&2; exit 1; }
  echo "s3server: versitygw pid $(cat "$pidfile") on $addr, data in $dir/data" >&2
fi

cat <<ENV
export STEAD_S3_ENDPOINT=$addr
export STEAD_S3_ACCESS_KEY=$access
export STEAD_S3_SECRET_KEY=$secret
export STEAD_S3_URL='s3://$addr/$bucket?secure=false&region=us-east-1'
ENV
