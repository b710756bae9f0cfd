#!/usr/bin/env bash
# Installs what pagevault's build, tests and benchmarks need on a fresh Debian
# machine. Idempotent: skips what is already there.
set -euo pipefail

need_apt=()
command -v cc >/dev/null || need_apt+=(build-essential)
command -v pkg-config >/dev/null || need_apt+=(pkg-config)
[ -x /usr/lib/postgresql/15/bin/postgres ] || need_apt+=(postgresql-15 postgresql-client-15)
command -v sqlite3 >/dev/null || need_apt+=(sqlite3)
command -v strace >/dev/null || need_apt+=(strace)
# tests/report.rs renders the --report page in a headless browser.
command -v chromium >/dev/null || need_apt+=(chromium)
if [ "${PAGEVAULT_BENCH:-0}" = 1 ]; then
  command -v fio >/dev/null || need_apt+=(fio)
  command -v jq >/dev/null || need_apt+=(jq)
  command -v pgbackrest >/dev/null || need_apt+=(pgbackrest)
  command -v hyperfine >/dev/null || need_apt+=(hyperfine)
  [ -x /usr/bin/time ] || need_apt+=(time)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  else
    echo "setup: Rust is missing; install it with rustup (https://rustup.rs) and run again" >&2
    exit 1
  fi
fi

# Object stores for the tests, cached between runs (building MinIO takes ~6 minutes):
# MinIO (S3) built with Go, Azurite (Azure Blob) and the AWS/Azure SDKs the test
# helper tests/tools/store.js uses, from npm.
TOOLS="${PAGEVAULT_TOOLS:-/var/tmp/pagevault-tools}"
mkdir -p "$TOOLS/bin" "$TOOLS/node"
if [ ! -x "$TOOLS/bin/minio" ]; then
  GO="$(command -v go || echo /usr/local/go/bin/go)"
  [ -x "$GO" ] || { echo "setup: Go is needed to build MinIO (go install github.com/minio/minio@latest)" >&2; exit 1; }
  echo "setup: building MinIO into $TOOLS/bin (about 6 minutes, once)"
  GOBIN="$TOOLS/bin" "$GO" install github.com/minio/minio@latest
fi
if [ ! -x "$TOOLS/node/node_modules/.bin/azurite-blob" ] || [ ! -d "$TOOLS/node/node_modules/@aws-sdk/client-s3" ] || [ ! -d "$TOOLS/node/node_modules/@azure/storage-blob" ]; then
  command -v npm >/dev/null || { export DEBIAN_FRONTEND=noninteractive; apt-get update -qq; apt-get install -y -qq nodejs npm >/dev/null; }
  echo "setup: installing Azurite and the S3/Azure SDKs into $TOOLS/node"
  [ -f "$TOOLS/node/package.json" ] || echo '{"name":"pagevault-test-tools","private":true}' > "$TOOLS/node/package.json"
  (cd "$TOOLS/node" && npm install --no-audit --no-fund --silent azurite @aws-sdk/client-s3 @azure/storage-blob)
fi
