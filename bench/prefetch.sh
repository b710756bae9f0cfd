#!/usr/bin/env bash
# bench/prefetch.sh: WAL prefetch under a store's round trip (issue 55).
#
# PostgreSQL 15 writes CALLS segments of WAL (random text: about half compresses away),
# archived into MinIO (TLS on 127.0.0.1) by pagevault archive-push. Then, for each one-way
# delay of DELAYS (milliseconds; the test harness's proxy, bench/delay-proxy.rs, in front of
# MinIO: every byte held that long each way, bandwidth unlimited) and each mode, RUNS times
# round-robin: CALLS archive-get calls one after another as recovery makes them (destination
# pg_wal/RECOVERYXLOG, moved to its name after each call; a fresh pg_wal each run), timed
# from the first call's start to the last one's end. Modes:
#   prefetch  the default when PostgreSQL asks: a background fetcher keeps up to 16 segments
#             ahead (how many adapts to the round trip and the replay rate); a call that
#             finds its segment prefetched makes no request to the store
#   none      --prefetch 0: every call opens the repository and fetches its segment
# Prints a markdown table of medians with min-max, and per delay the ratio none/prefetch
# (goal: at least 4x at 25 ms one way, a 50 ms round trip). Everything is kept under
# WORK/results/prefetch-DATE/.
#
# Usage: bench/prefetch.sh [--work DIR] [--calls N] [--runs N] [--delays "0 25"] [--no-build]
# Environment: WORK_DIR, CALLS (24), RUNS (5), DELAYS ("0 25"), PAGEVAULT, NO_BUILD=1,
#              PAGEVAULT_TOOLS, QUIET_BUDGET
# Quick check: bench/prefetch.sh --calls 3 --runs 1 --delays "0 10"
# Needs root (PostgreSQL runs as postgres), MinIO and Node's S3 SDK under PAGEVAULT_TOOLS
# (scripts/setup.sh), openssl, rustc (for the proxy).
set -euo pipefail
{

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$ROOT/bench/lib.sh"
WORK=${WORK_DIR:-$WORK/prefetch}
CALLS=${CALLS:-24}
RUNS=${RUNS:-5}
DELAYS=${DELAYS:-0 25}
PG_BIN=/usr/lib/postgresql/15/bin
TOOLS=${PAGEVAULT_TOOLS:-/var/tmp/pagevault-tools}
parse_options --work=WORK --calls=CALLS --runs=RUNS --delays=DELAYS --no-build=NO_BUILD=1 -- "$@"
for v in CALLS RUNS; do need_posint "--${v,,}" "${!v}"; done
need_delays "$DELAYS"
[ "$(id -u)" -eq 0 ] || { echo "run as root (runs PostgreSQL as postgres)" >&2; exit 2; }
ensure_binary
MINIO=$TOOLS/bin/minio
need_tools "$MINIO" "$PG_BIN/initdb" openssl node

bench_rundir prefetch
D=$WORK/cluster DATA=$WORK/cluster/data ARCH=$WORK/cluster/arch PGW=$WORK/run
PORT=55651
psql_db() { "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p $PORT -U postgres -d postgres "$@"; }
pg_stop() { as_pg "$PG_BIN/pg_ctl" -D "$1" -w -m fast stop >/dev/null 2>&1 || true; }
cleanup() {
    delay_proxy_stop
    pg_stop "$DATA"
    minio_stop
    # Removing the prefetch directory ends its fetcher.
    rm -rf "$WORK/minio" "$D" "$PGW" 2>/dev/null || { sleep 1; rm -rf "$WORK/minio" "$D" "$PGW"; }
    rm -f "$RUNDIR/pagevault"
}
trap_signals cleanup

# ------------------------------------------------------------------ MinIO ----
S3_PORT=59110 BUCKET=bench
minio_start "$WORK/minio" "$S3_PORT" "$BUCKET"
REPO=s3://$BUCKET/wal

# ------------------------------------------------------------- the WAL ----
fresh_cluster_dir "$D" $((CALLS * 48 + 1024)) "the cluster and its archived WAL"
mkdir -p "$ARCH"
chown postgres: "$ARCH"
bench_initdb "$DATA" "$D/run" "bench/prefetch.sh"
cat >> "$DATA/postgresql.conf" <<EOF
archive_mode = on
archive_command = 'cp %p $ARCH/%f'
EOF
as_pg "$PG_BIN/pg_ctl" -D "$DATA" -l "$D/run/server.log" -w \
    -o "-p $PORT -c listen_addresses=127.0.0.1 -c unix_socket_directories=$D/run" start >/dev/null
archived() { find "$ARCH" -maxdepth 1 -name '[0-9A-F]*' -printf '%f\n' | grep -c '^[0-9A-F]\{24\}$' || true; }
log "writing $CALLS segments of WAL"
psql_db -c "CREATE TABLE w (t text)"
while [ "$(archived)" -lt "$CALLS" ]; do
    psql_db -c "INSERT INTO w SELECT md5(random()::text) || md5(random()::text) FROM generate_series(1, 50000)"
    if [ "$(psql_db -c "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn > $((CALLS + 2)) * 16 * 1048576")" = t ]; then
        psql_db -c "SELECT pg_switch_wal()" >/dev/null
        for _ in $(seq 1 600); do [ "$(archived)" -ge "$CALLS" ] && break; sleep 0.1; done
        break
    fi
done
[ "$(archived)" -ge "$CALLS" ] || die "PostgreSQL archived $(archived) segments, not $CALLS (see $D/run/server.log)"
pg_stop "$DATA"
mapfile -t SEGS < <(find "$ARCH" -maxdepth 1 -printf '%f\n' | grep '^[0-9A-F]\{24\}$' | sort | head -n "$CALLS")
"$PV" init --repo "$REPO" > "$RUNDIR/init.log" 2>&1 || die "init failed (see $RUNDIR/init.log)"
for n in "${SEGS[@]}"; do
    "$PV" archive-push "$ARCH/$n" --repo "$REPO" >> "$RUNDIR/push.log" 2>&1 || die "archive-push $n failed (see $RUNDIR/push.log)"
done
log "archived ${SEGS[0]} to ${SEGS[-1]} into $REPO"

# ------------------------------------------------------------ the calls ----
RESULTS=$RUNDIR/runs.tsv
printf 'delay_ms\tmode\trun\tcalls\tseconds\tcpu_s\n' > "$RESULTS"
# calls DELAY MODE RUN: CALLS archive-get calls in a row through the proxy.
calls() {
    local extra=() t0 t1 b0 b1 n secs cpu w=$PGW/$1-$2-$3
    [ "$2" = none ] && extra=(--prefetch 0)
    # A new directory each run: a fetcher still running stays with the one before.
    mkdir -p "$w/pg_wal"
    chmod 700 "$PGW" "$w" "$w/pg_wal"
    wait_quiet
    b0=$(busy_ticks) t0=$(now_ns)
    for n in "${SEGS[@]}"; do
        "$PV" archive-get "$n" "$w/pg_wal/RECOVERYXLOG" --repo "$REPO" \
            --s3-endpoint "https://127.0.0.1:$DELAY_PORT" "${extra[@]}" > /dev/null 2>> "$RUNDIR/get.log" ||
            die "archive-get $n failed (see $RUNDIR/get.log)"
        mv "$w/pg_wal/RECOVERYXLOG" "$w/pg_wal/$n"
    done
    t1=$(now_ns) b1=$(busy_ticks)
    # Its directory gone, the fetcher ends; one still writing a segment may refill it a moment.
    for _ in $(seq 1 50); do rm -rf "$w" 2>/dev/null && break; sleep 0.2; done
    [ ! -e "$w" ] || die "cannot remove $w: a fetcher still writes there"
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", (b - a) / 1e9}')
    cpu=$(awk -v a="$b0" -v b="$b1" -v hz="$HZ" 'BEGIN {printf "%.2f", (b - a) / hz}')
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${#SEGS[@]}" "$secs" "$cpu" >> "$RESULTS"
    log "$1 ms one way, $2, run $3: ${#SEGS[@]} calls in $secs s, CPU $cpu s"
    sleep 0.5
}
for run in $(seq 1 "$RUNS"); do
    for delay in $DELAYS; do
        delay_proxy_start "$S3_PORT" "$delay"
        for mode in prefetch none; do
            calls "$delay" "$mode" "$run"
        done
        delay_proxy_stop
    done
done

python3 - "$RESULTS" "$commit$dirty" <<'PY'
import csv, statistics as st, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter='\t'))
def secs(d, m):
    return [float(r['seconds']) for r in rows if r['delay_ms'] == d and r['mode'] == m]
def fmt(v):
    return f"{st.median(v):.3f} ({min(v):.3f}-{max(v):.3f})" if v else "-"
runs = max([int(r['run']) for r in rows] or [0])
calls = rows[0]['calls'] if rows else '-'
print(f"\npagevault {sys.argv[2]}; {calls} archive-get calls in a row; median (min-max) of {runs} runs\n")
print("| one-way delay | round trip | prefetch s | none s | ms per call (prefetch / none) | none / prefetch |")
print("|---:|---:|---:|---:|---:|---:|")
for d in dict.fromkeys(r['delay_ms'] for r in rows):
    p, n = secs(d, 'prefetch'), secs(d, 'none')
    if not p or not n:
        continue
    per = f"{st.median(p) * 1e3 / int(calls):.0f} / {st.median(n) * 1e3 / int(calls):.0f}"
    ratio = f"{st.median(n) / st.median(p):.2f}x ({min(n) / max(p):.2f}-{max(n) / min(p):.2f}x)"
    print(f"| {d} ms | {2 * int(d)} ms | {fmt(p)} | {fmt(n)} | {per} | {ratio} |")
print("\ngoal: none / prefetch >= 4x at 25 ms one way (50 ms round trip)")
PY
echo "(raw: $RESULTS)"
}
