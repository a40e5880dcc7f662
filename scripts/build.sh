#!/usr/bin/env bash
# Builds a statically linked stead binary into ./bin/stead. Static linking
# matters: the binary is bind-mounted into every sandbox as its init, and an
# image may have no C library.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin CGO_ENABLED=1
mkdir -p bin
go build -trimpath -tags netgo,osusergo \
  -ldflags "-s -w -linkmode external -extldflags -static -X main.version=$(git describe --always --dirty 2>/dev/null || echo dev)" \
  -o bin/stead ./cmd/stead
# The runtime shim the daemon forks sandboxes from, and libcontainer's setup
# init: static, small (see cmd/stead-shim).
go build -trimpath -tags netgo,osusergo \
  -ldflags "-s -w -linkmode external -extldflags -static" \
  -o bin/stead-shim ./cmd/stead-shim
# The sandbox init: pure Go, static, small (see cmd/stead-init).
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o bin/stead-init ./cmd/stead-init
echo "built bin/stead, bin/stead-shim and bin/stead-init"
