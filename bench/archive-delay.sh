#!/usr/bin/env bash
# bench/archive-delay.sh: does async archive-push keep up with a steady WAL rate when the
# object store is a round trip away (issue 55)?
#
# PostgreSQL 15 archives with archive_command = pagevault archive-push %p --async into a
# repository in MinIO (TLS on 127.0.0.1) behind the test harness's delay proxy
# (bench/delay-proxy.rs: every byte held that long each way, bandwidth unlimited), default
# settings otherwise. For each one-way delay of DELAYS, RUNS times round-robin: a fresh
# repository and spool, then SECS seconds of WAL written at RATE MB/s (a loop of inserts of
# random text, paced by pg_current_wal_lsn); the .ready files in pg_wal/archive_status are
# counted every half second, and the segments the spool holds that the store does not yet
# (SPOOL/ready). After the load, how long until neither is left (drain). Prints per delay
# the WAL rate reached, the .ready files and spooled segments waiting (median, 95th
# percentile, most) and the drain (goal: at most 2 waiting at 25 ms one way, a 50 ms round
# trip, at 16 MB/s).
# Everything is kept under WORK/results/archive-delay-DATE/.
#
# Usage: bench/archive-delay.sh [--work DIR] [--rate MB] [--secs N] [--runs N] [--delays "0 25"]
#                               [--no-build]
# Environment: WORK_DIR, RATE (16), SECS (60), RUNS (2), DELAYS ("0 25"), PAGEVAULT, NO_BUILD=1,
#              PAGEVAULT_TOOLS, QUIET_BUDGET
# Quick check: bench/archive-delay.sh --secs 10 --runs 1 --delays "0 10"
# Needs root (PostgreSQL runs as postgres), MinIO and Node's S3 SDK under PAGEVAULT_TOOLS
# (scripts/setup.sh), openssl, rustc (for the proxy).
set -euo pipefail
{

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$ROOT/bench/lib.sh"
WORK=${WORK_DIR:-$WORK/archive-delay}
RATE=${RATE:-16}
SECS=${SECS:-60}
RUNS=${RUNS:-2}
DELAYS=${DELAYS:-0 25}
PG_BIN=/usr/lib/postgresql/15/bin
parse_options --work=WORK --rate=RATE --secs=SECS --runs=RUNS --delays=DELAYS --no-build=NO_BUILD=1 -- "$@"
for v in RATE SECS RUNS; do need_posint "--${v,,}" "${!v}"; done
need_delays "$DELAYS"
[ "$(id -u)" -eq 0 ] || { echo "run as root (runs PostgreSQL as postgres)" >&2; exit 2; }
ensure_binary
need_tools "$PG_BIN/initdb" openssl node

bench_rundir archive-delay
chmod 755 "$RUNDIR" "$PV"
D=$WORK/cluster DATA=$WORK/cluster/data
PORT=$(free_port 55671)
psql_db() { "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U postgres -d postgres "$@"; }
pg_stop() { as_pg "$PG_BIN/pg_ctl" -D "$1" -w -m fast stop >/dev/null 2>&1 || true; }
cleanup() {
    pg_stop "$DATA"
    delay_proxy_stop
    minio_stop
    pkill -f "$RUNDIR/pagevault archive-push" 2>/dev/null || true
    rm -rf "$WORK/minio" "$D"
    rm -f "$RUNDIR/pagevault"
}
trap_signals cleanup

S3_PORT=$(free_port 59130)
minio_start "$WORK/minio" "$S3_PORT" bench
chmod -R a+rX "$WORK/minio/tls"

RESULTS=$RUNDIR/runs.tsv
printf 'delay_ms\trun\twal_mb\tsecs\tready_median\tready_p95\tready_max\tspool_median\tspool_p95\tspool_max\tdrain_s\n' > "$RESULTS"
waiting() { find "$DATA/pg_wal/archive_status" -name '*.ready' 2>/dev/null | wc -l; }
spooled() { find "$WORK/cluster/spool/ready" -maxdepth 1 -regextype egrep -regex '.*/[0-9A-F]{24}' 2>/dev/null | wc -l; }
# one DELAY RUN: a fresh cluster, repository and spool; the load; the samples; the drain.
one() {
    local d=$1 run=$2 repo=s3://bench/r$2-d$1 spool=$WORK/cluster/spool ep l0 l1 t0 t1 n samples=$RUNDIR/ready-$1-$2.txt
    rm -rf "$D"
    mkdir -p "$D/run" "$spool"
    chown -R postgres: "$D"
    chmod 700 "$spool"
    "$PV" init --repo "$repo" > "$RUNDIR/init-$d-$run.log" 2>&1 || die "init failed (see $RUNDIR/init-$d-$run.log)"
    ep="https://127.0.0.1:$DELAY_PORT"
    bench_initdb "$DATA" "$D/run" "bench/archive-delay.sh"
    cat >> "$DATA/postgresql.conf" <<EOF
archive_mode = on
archive_command = '$PV archive-push %p --repo $repo --async --spool $spool --s3-endpoint $ep'
max_wal_size = 1GB
EOF
    as_pg env AWS_ACCESS_KEY_ID="$AWS_ACCESS_KEY_ID" AWS_SECRET_ACCESS_KEY="$AWS_SECRET_ACCESS_KEY" \
        AWS_REGION="$AWS_REGION" PAGEVAULT_CA_FILE="$PAGEVAULT_CA_FILE" \
        "$PG_BIN/pg_ctl" -D "$DATA" -l "$D/run/server.log" -w \
        -o "-p $PORT -c listen_addresses=127.0.0.1 -c unix_socket_directories=$D/run" start >/dev/null
    psql_db -c "CREATE TABLE w (t text)"
    wait_quiet
    : > "$samples"
    l0=$(psql_db -c "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")
    t0=$(now_ns)
    psql_db -c "DO \$\$
        DECLARE t0 timestamptz := clock_timestamp(); l0 numeric := pg_current_wal_lsn() - '0/0'::pg_lsn;
        BEGIN
          LOOP
            EXIT WHEN clock_timestamp() - t0 > interval '$SECS seconds';
            IF pg_current_wal_lsn() - '0/0'::pg_lsn - l0
               < $RATE * 1048576 * extract(epoch FROM clock_timestamp() - t0) THEN
              INSERT INTO w SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 16), generate_series(1, 500) g GROUP BY g;
              COMMIT;
            ELSE
              PERFORM pg_sleep(0.01);
            END IF;
          END LOOP;
        END \$\$" &
    local load=$!
    while kill -0 "$load" 2>/dev/null; do
        echo "$(waiting) $(spooled)" >> "$samples"
        sleep 0.5
    done
    wait "$load" || die "the load failed at $d ms, run $run"
    t1=$(now_ns)
    l1=$(psql_db -c "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")
    psql_db -c "SELECT pg_switch_wal()" >/dev/null
    local t2 t3
    t2=$(now_ns)
    for _ in $(seq 1 1200); do
        [ "$(waiting)" = 0 ] && [ "$(spooled)" = 0 ] && break
        sleep 0.1
    done
    t3=$(now_ns)
    n="$(waiting) .ready files and $(spooled) spooled segments"
    [ "$n" = "0 .ready files and 0 spooled segments" ] ||
        die "$n left 2 minutes after the load at $d ms, run $run (see $D/run/server.log, $spool/pusher.log)"
    # Every segment PostgreSQL archived is in the store (each a directory in MinIO's data).
    local stored want
    stored=$(find "$WORK/minio/data/bench/r$run-d$d/wal" -mindepth 2 -maxdepth 2 -regextype egrep -regex '.*/[0-9A-F]{24}\.zst' | wc -l)
    want=$(psql_db -c "SELECT archived_count FROM pg_stat_archiver")
    [ "$stored" -ge "$want" ] || die "the store holds $stored segments, PostgreSQL archived $want ($d ms, run $run)"
    cp "$D/run/server.log" "$RUNDIR/server-$d-$run.log"
    pg_stop "$DATA"
    python3 - "$samples" "$d" "$run" "$l0" "$l1" "$t0" "$t1" "$t2" "$t3" >> "$RESULTS" <<'PY'
import statistics as st, sys
rows = [x.split() for x in open(sys.argv[1]) if x.strip()]
d, run, l0, l1, t0, t1, t2, t3 = sys.argv[2:]
secs = (int(t1) - int(t0)) / 1e9
def stats(i):
    v = sorted(int(r[i]) for r in rows) or [0]
    return f"{st.median(v):g}\t{v[min(len(v) - 1, int(len(v) * 0.95))]}\t{max(v)}"
print(f"{d}\t{run}\t{(float(l1) - float(l0)) / 1048576:.0f}\t{secs:.1f}\t{stats(0)}\t{stats(1)}\t{(int(t3) - int(t2)) / 1e9:.1f}")
PY
    log "$d ms one way, run $run: $(tail -1 "$RESULTS"); $stored segments stored, $want archived"
}
for run in $(seq 1 "$RUNS"); do
    for d in $DELAYS; do
        delay_proxy_start "$S3_PORT" "$d"
        one "$d" "$run"
        delay_proxy_stop
    done
done

python3 - "$RESULTS" "$commit$dirty" "$RATE" "$SECS" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter='\t'))
print(f"\npagevault {sys.argv[2]}; archive-push --async into MinIO, {sys.argv[3]} MB/s of WAL asked for {sys.argv[4]} s\n")
print("| one-way delay | round trip | run | WAL MB/s | .ready waiting: median | 95th pct | most | spooled, not stored: median | 95th pct | most | drain s |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    rate = float(r['wal_mb']) / float(r['secs'])
    print(f"| {r['delay_ms']} ms | {2 * int(r['delay_ms'])} ms | {r['run']} | {rate:.1f} | {r['ready_median']} | {r['ready_p95']} | {r['ready_max']} | {r['spool_median']} | {r['spool_p95']} | {r['spool_max']} | {r['drain_s']} |")
print("\ngoal: at most 2 .ready files waiting at 25 ms one way (50 ms round trip), 16 MB/s of WAL")
PY
echo "(raw: $RESULTS)"
}
