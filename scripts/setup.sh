#!/usr/bin/env bash
# Installs what stead needs to build, run and test on Debian (idempotent).
set -euo pipefail

need=()
command -v mkfs.btrfs >/dev/null || need+=(btrfs-progs)
command -v mkfs.xfs   >/dev/null || need+=(xfsprogs)
command -v gcc        >/dev/null || need+=(gcc)
[ -f /usr/lib/x86_64-linux-gnu/libc.a ] || need+=(libc6-dev)
dpkg -s busybox-static >/dev/null 2>&1 || need+=(busybox-static)
command -v losetup    >/dev/null || need+=(mount)
command -v unshare    >/dev/null || need+=(util-linux)
command -v runc       >/dev/null || need+=(runc)
command -v bwrap      >/dev/null || need+=(bubblewrap)
command -v python3    >/dev/null || need+=(python3)
[ -x /usr/bin/sqlite3 ] || need+=(sqlite3)   # used inside sandboxes by the volume locking test
[ -x /usr/bin/perl ]    || need+=(perl)
[ -x /usr/bin/curl ]    || need+=(curl)      # the agent's API socket is exercised with curl inside a sandbox
command -v nft    >/dev/null || need+=(nftables)   # the network tests read the daemon's table with nft
command -v ip     >/dev/null || need+=(iproute2)   # tests try to reconfigure a sandbox's network from inside
command -v strace >/dev/null || need+=(strace)   # ptrace inside a sandbox (user namespaces)
command -v gdb    >/dev/null || need+=(gdb)
# The MCP e2e tests drive `stead mcp` with the official MCP TypeScript SDK
# (installed by the tests with npm; it wants node >= 18).
command -v node   >/dev/null || need+=(nodejs)
command -v npm    >/dev/null || need+=(npm)
# lxcfs gives each sandbox /proc views of its own size; stead starts it itself
# (never through systemd or the package's service).
command -v lxcfs      >/dev/null || need+=(lxcfs)
# PostgreSQL server binaries for the PostgreSQL store's tests: pgtest runs
# its own private cluster (initdb in a temp dir, 127.0.0.1, a free port), so
# the package's default cluster is not created (createcluster.d) and is never
# used. Set STEAD_TEST_POSTGRES to a postgres:// URL to use another server.
if ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
  mkdir -p /etc/postgresql-common/createcluster.d
  echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.d/stead.conf
  need+=(postgresql)
fi
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if ! command -v go >/dev/null; then
  export PATH=$PATH:/usr/local/go/bin
fi
command -v go >/dev/null || { echo "setup: Go is not installed (want /usr/local/go)"; exit 1; }

# S3 test server: versitygw (Apache-2.0), run by the blob store tests
# (internal/blobstore/s3/s3test) and scripts/s3server.sh, never linked into
# stead. Pinned: reinstalled only when the installed binary is another version
# (a fresh install takes ~3.5 min on 2 cores).
VERSITYGW_VERSION=v1.8.0
gobin=$(go env GOBIN)
[ -n "$gobin" ] || gobin="$(go env GOPATH | cut -d: -f1)/bin"
have=$(go version -m "$gobin/versitygw" 2>/dev/null || true)
if ! grep -Eq "^[[:space:]]*mod[[:space:]]+github.com/versity/versitygw[[:space:]]+$VERSITYGW_VERSION([[:space:]]|\$)" <<<"$have"; then
  echo "setup: installing versitygw $VERSITYGW_VERSION into $gobin"
  go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
fi
