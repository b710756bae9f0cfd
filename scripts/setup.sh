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
