# bench/lib.sh: what every benchmark script shares; sourced after it defines log, die,
# ROOT, PV, NO_BUILD and QUIET_BUDGET.

now_ns() { date +%s%N; }
# Busy CPU ticks of the whole machine (user nice system irq softirq steal), to tell
# how much else ran during a measurement (another build, the host stealing time).
busy_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat; }
HZ=$(getconf CLK_TCK)
NCPU=$(nproc)
# Before each run: while something else keeps the CPUs over 25% busy (another build),
# wait, up to QUIET_BUDGET seconds over the whole benchmark.
QUIET_WAITED=0
wait_quiet() {
    local b0 b1 busy said=0
    while :; do
        b0=$(busy_ticks); sleep 0.5; b1=$(busy_ticks)
        busy=$(((b1 - b0) * 200 / (HZ * NCPU)))
        if [ "$busy" -lt 25 ] || [ "$QUIET_WAITED" -ge "$QUIET_BUDGET" ]; then return 0; fi
        [ $said = 1 ] || log "  the machine is $busy% busy: waiting for it to calm down"
        said=1
        sleep 1.5
        QUIET_WAITED=$((QUIET_WAITED + 2))
    done
}

# ensure_binary: rebuilds $PV when it is missing or older than any source file (unless
# PAGEVAULT names a binary or NO_BUILD=1); sets build_note when the build failed.
ensure_binary() {
    build_note=""
    if [ -z "${PAGEVAULT:-}" ] && [ "$NO_BUILD" != 1 ]; then
        if [ ! -x "$PV" ] || [ -n "$(find "$ROOT/src" "$ROOT/Cargo.toml" "$ROOT/Cargo.lock" -newer "$PV" -print -quit 2>/dev/null)" ]; then
            log "building the release binary"
            if ! (cd "$ROOT" && cargo build --release -q) >&2; then
                [ -x "$PV" ] || die "cargo build --release failed and there is no binary"
                build_note="(build failed: measured the previous binary)"
                log "warning: cargo build --release failed; using the existing $PV"
            fi
        fi
    fi
    [ -x "$PV" ] || die "no pagevault binary at $PV"
}

# bench_initdb DATA LOGDIR SCRIPT: a cluster with data checksums and the settings every
# benchmark uses (needs as_pg and PG_BIN).
bench_initdb() {
    as_pg "$PG_BIN/initdb" -D "$1" --data-checksums --auth=trust -U postgres -E UTF8 --locale=C.UTF-8 \
        > "$2/initdb.log" 2>&1 || die "initdb failed (see $2/initdb.log)"
    cat >> "$1/postgresql.conf" <<EOF

# $3 (port, listen_addresses and the socket directory are given by pg_ctl -o)
shared_buffers = 256MB
max_wal_size = 4GB
checkpoint_timeout = 30min
archive_mode = off
EOF
}
