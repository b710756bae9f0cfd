#!/usr/bin/env bash
# The test command: installs what the tests need, then runs every test
# (unit, property/fuzz, and integration tests against the real binary).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
cargo fmt --all -- --check
cargo clippy --release --all-targets -- -D warnings
cargo test --profile ci -- --test-threads="${TEST_THREADS:-2}"
# The Debian package of the test build: installs, serves man pages, completions and units,
# removes cleanly (scripts/package.sh builds the release one).
if [ "$(id -u)" = 0 ]; then
    bash scripts/package.sh --profile ci --no-build --check
fi
