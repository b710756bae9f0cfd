#!/usr/bin/env bash
# bench/store-delay.sh: backups to and restores from an object store behind a round trip
# (issue 55).
#
# Builds (once, then reuses) a PostgreSQL 15 cluster under WORK/cluster, pgbench at scale SCALE
# (10) and a table of TEXT_MB of random hex text (400: what lz4 barely compresses, so that the
# bytes moved, not the round trips, decide), and stops it; its data directory is the source. MinIO (TLS on 127.0.0.1)
# sits behind the test harness's delay proxy (bench/delay-proxy.rs: every byte held that long
# each way, bandwidth unlimited). For each one-way delay of DELAYS, RUNS times round-robin,
# warm page cache:
#   backup   pagevault backup --source files:DATA --to s3://bench/RUN/set.pv --stripes 2
#            --compress lz4 through the proxy, timed until its last object is complete
#   restore  pagevault restore --from that set --to a fresh directory, timed until the
#            files are durable (sync -f of the target)
# Each set's objects are removed after its restore, so every run finds the store as the
# first did. Prints medians with min-max and, per delay, the ratio to no delay: of the
# medians, and the median of each run's ratio (a run's two delays measured a minute apart;
# goal: at most 1.3x at 25 ms one way, a 50 ms round trip), with the requests each made. Everything is kept under
# WORK/results/store-delay-DATE/.
#
# Usage: bench/store-delay.sh [--work DIR] [--scale N] [--text-mb N] [--runs N] [--delays "0 25"]
#                             [--no-build]
# Environment: WORK_DIR, SCALE (10), TEXT_MB (400), RUNS (5), DELAYS ("0 25"), PAGEVAULT, NO_BUILD=1,
#              PAGEVAULT_TOOLS, QUIET_BUDGET
# Quick check: bench/store-delay.sh --scale 1 --text-mb 20 --runs 1 --delays "0 10"
# Needs root (PostgreSQL runs as postgres), MinIO and Node's S3 SDK under PAGEVAULT_TOOLS
# (scripts/setup.sh), openssl, rustc (for the proxy).
set -euo pipefail
{

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$ROOT/bench/lib.sh"
WORK=${WORK_DIR:-$WORK/store-delay}
SCALE=${SCALE:-10}
TEXT_MB=${TEXT_MB:-400}
RUNS=${RUNS:-5}
DELAYS=${DELAYS:-0 25}
PG_BIN=/usr/lib/postgresql/15/bin
parse_options --work=WORK --scale=SCALE --text-mb=TEXT_MB --runs=RUNS --delays=DELAYS --no-build=NO_BUILD=1 -- "$@"
for v in SCALE RUNS; do need_posint "--${v,,}" "${!v}"; done
[[ $TEXT_MB =~ ^[0-9]+$ ]] || { echo "--text-mb must be a number (0: none)" >&2; exit 2; }
need_delays "$DELAYS"
[ "$(id -u)" -eq 0 ] || { echo "run as root (runs PostgreSQL as postgres)" >&2; exit 2; }
ensure_binary
need_tools "$PG_BIN/initdb" "$PG_BIN/pgbench" openssl node

bench_rundir store-delay
D=$WORK/cluster DATA=$WORK/cluster/data OUT=$WORK/out
PORT=$(free_port 55661)
pg_stop() { as_pg "$PG_BIN/pg_ctl" -D "$1" -w -m fast stop >/dev/null 2>&1 || true; }
cleanup() {
    delay_proxy_stop
    pg_stop "$DATA"
    minio_stop
    rm -rf "$WORK/minio" "$OUT"
    rm -f "$RUNDIR/pagevault"
}
trap_signals cleanup

# ----------------------------------------------------------- the cluster ----
WANT="scale=$SCALE text=$TEXT_MB pg=15"
if ! cluster_is_current "$D" "$WANT"; then
    fresh_cluster_dir "$D" $((SCALE * 16 + 512)) "the pgbench cluster"
    bench_initdb "$DATA" "$D/run" "bench/store-delay.sh"
    as_pg "$PG_BIN/pg_ctl" -D "$DATA" -l "$D/run/server.log" -w \
        -o "-p $PORT -c listen_addresses=127.0.0.1 -c unix_socket_directories=$D/run" start >/dev/null
    log "pgbench -i -s $SCALE"
    as_pg "$PG_BIN/pgbench" -q -i -s "$SCALE" -h 127.0.0.1 -p "$PORT" -U postgres postgres \
        > "$D/run/pgbench.log" 2>&1 || die "pgbench -i failed (see $D/run/pgbench.log)"
    [ "$TEXT_MB" = 0 ] || log "$TEXT_MB MB of random text"
    # A row of 32 md5s is about 1 KiB on disk.
    [ "$TEXT_MB" = 0 ] || as_pg "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -c \
        "CREATE TABLE r AS SELECT i, (SELECT string_agg(md5(random()::text || i || j), '') FROM generate_series(1, 32) j) t
         FROM generate_series(1, $TEXT_MB * 1000) i" > "$D/run/text.log" 2>&1 || die "the text table failed (see $D/run/text.log)"
    as_pg "$PG_BIN/psql" -X -q -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -c CHECKPOINT >/dev/null
    pg_stop "$DATA"
    echo "$WANT" > "$D/manifest"
fi
MB=$(du -sm "$DATA" | cut -f1)
log "source: $DATA, $MB MB"

# ------------------------------------------------------------------ MinIO ----
S3_PORT=$(free_port 59120)
minio_start "$WORK/minio" "$S3_PORT" bench

# --------------------------------------------------------------- the runs ----
RESULTS=$RUNDIR/runs.tsv
printf 'delay_ms\top\trun\tseconds\trequests\tcpu_s\n' > "$RESULTS"
# timed DELAY OP RUN CMD...: runs CMD (a pagevault --json call), records its time and requests.
timed() {
    local d=$1 op=$2 run=$3 t0 t1 b0 b1 secs cpu req
    shift 3
    sync
    wait_quiet
    b0=$(busy_ticks) t0=$(now_ns)
    "$@" > "$RUNDIR/$op-$d-$run.json" 2> "$RUNDIR/$op-$d-$run.log" ||
        die "$op failed at $d ms, run $run (see $RUNDIR/$op-$d-$run.log)"
    [ "$op" = backup ] || sync -f "$OUT"
    t1=$(now_ns) b1=$(busy_ticks)
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", (b - a) / 1e9}')
    cpu=$(awk -v a="$b0" -v b="$b1" -v hz="$HZ" 'BEGIN {printf "%.2f", (b - a) / hz}')
    req=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("object_store", {}).get("requests", "-"))' \
        "$RUNDIR/$op-$d-$run.json" 2>/dev/null || echo -)
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$d" "$op" "$run" "$secs" "$req" "$cpu" >> "$RESULTS"
    log "$d ms one way, $op, run $run: $secs s, $req requests, CPU $cpu s"
}
for run in $(seq 1 "$RUNS"); do
    for d in $DELAYS; do
        delay_proxy_start "$S3_PORT" "$d"
        ep=(--s3-endpoint "https://127.0.0.1:$DELAY_PORT")
        dev=s3://bench/r$run-d$d/set.pv
        timed "$d" backup "$run" "$PV" backup --source "files:$DATA" --to "$dev" --stripes 2 \
            --compress lz4 "${ep[@]}" --json
        rm -rf "$OUT"
        timed "$d" restore "$run" "$PV" restore --from "$dev" --to "$OUT" "${ep[@]}" --json
        rm -rf "$OUT" "$WORK/minio/data/bench/r$run-d$d"
        delay_proxy_stop
    done
done

python3 - "$RESULTS" "$commit$dirty" "$MB" <<'PY'
import csv, statistics as st, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter='\t'))
def secs(d, op):
    return [float(r['seconds']) for r in rows if r['delay_ms'] == d and r['op'] == op]
def reqs(d, op):
    v = [r['requests'] for r in rows if r['delay_ms'] == d and r['op'] == op]
    return v[0] if v else '-'
runs = max([int(r['run']) for r in rows] or [0])
delays = list(dict.fromkeys(r['delay_ms'] for r in rows))
print(f"\npagevault {sys.argv[2]}; {sys.argv[3]} MB (files: source), 2 lz4 stripes in MinIO; median (min-max) of {runs} runs\n")
print("| op | one-way delay | round trip | seconds | MB/s | requests | over no delay: medians | each run's |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for op in ('backup', 'restore'):
    base = secs('0', op)
    for d in delays:
        v = secs(d, op)
        if not v:
            continue
        ratio = paired = '-'
        if base and d != '0':
            ratio = f"{st.median(v) / st.median(base):.2f}x"
            per = [a / b for a, b in zip(v, base)]
            paired = f"{st.median(per):.2f}x ({min(per):.2f}-{max(per):.2f}x)"
        mbs = float(sys.argv[3]) / st.median(v)
        print(f"| {op} | {d} ms | {2 * int(d)} ms | {st.median(v):.2f} ({min(v):.2f}-{max(v):.2f}) | {mbs:.0f} | {reqs(d, op)} | {ratio} | {paired} |")
print("\ngoal: at most 1.3x of no delay at 25 ms one way (50 ms round trip), backup and restore")
PY
echo "(raw: $RESULTS)"
}
