#!/usr/bin/env bash
# bench/replay.sh: a real recovery replaying GB of archived WAL from a local repository and
# from MinIO behind the delay proxy (issue 55).
#
# PostgreSQL 15 (data checksums, pgbench at --scale) is stopped cleanly and its data
# directory kept as the base; then --wal-gb of WAL is written (rows inserted, pgbench's
# updates between), archived (cp) and pushed by pagevault archive-push into a directory
# repository and into MinIO (TLS on 127.0.0.1). Then RUNS times round-robin, each from a fresh copy of the base with
# recovery.signal: PostgreSQL replays all of it through
#   restore_command = 'pagevault archive-get %f "%p" --repo REPO'
# (prefetch on, its default when PostgreSQL asks) from the directory, and from MinIO at each
# one-way delay of DELAYS (milliseconds; bench/delay-proxy.rs in front of MinIO: every byte
# held that long each way, bandwidth unlimited), timed from pg_ctl start until the server
# answers that it is out of recovery (hot_standby off: the end of the archive reached). Prints the medians
# (min-max) and each store's ratio to the directory (goal: at most 1.2x at 25 ms one way,
# a 50 ms round trip). Everything is kept under WORK/results/replay-DATE/.
#
# Usage: bench/replay.sh [--work DIR] [--scale N] [--wal-gb N] [--runs N] [--delays "0 25"] [--no-build]
# Environment: WORK_DIR, SCALE (50), WAL_GB (3), RUNS (3), DELAYS ("0 25"), PAGEVAULT,
#              NO_BUILD=1, PAGEVAULT_TOOLS
# Quick check: bench/replay.sh --scale 5 --wal-gb 1 --runs 1 --delays 10
# Needs root (PostgreSQL runs as postgres), MinIO under PAGEVAULT_TOOLS (scripts/setup.sh),
# openssl, rustc (for the proxy), about 4 x WAL_GB + 3 GB free.
set -euo pipefail
{

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$ROOT/bench/lib.sh"
WORK=${WORK_DIR:-$WORK/replay}
SCALE=${SCALE:-50}
WAL_GB=${WAL_GB:-3}
RUNS=${RUNS:-3}
DELAYS=${DELAYS:-0 25}
PG_BIN=/usr/lib/postgresql/15/bin
TOOLS=${PAGEVAULT_TOOLS:-/var/tmp/pagevault-tools}
parse_options --work=WORK --scale=SCALE --wal-gb=WAL_GB --runs=RUNS --delays=DELAYS --no-build=NO_BUILD=1 -- "$@"
for v in SCALE WAL_GB RUNS; do need_posint "--${v,,}" "${!v}"; done
need_delays "$DELAYS"
[ "$(id -u)" -eq 0 ] || { echo "run as root (runs PostgreSQL as postgres)" >&2; exit 2; }
ensure_binary
MINIO=$TOOLS/bin/minio
need_tools "$MINIO" "$PG_BIN/initdb" "$PG_BIN/pgbench" openssl

bench_rundir replay
D=$WORK/cluster DATA=$WORK/cluster/data BASE=$WORK/cluster/base ARCH=$WORK/cluster/arch
LOCAL=$WORK/cluster/repo R=$WORK/cluster/replay
PORT=55653
psql_db() { "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p $PORT -U postgres -d postgres "$@"; }
pg_stop() { as_pg "$PG_BIN/pg_ctl" -D "$1" -w -m immediate stop >/dev/null 2>&1 || true; }
cleanup() {
    delay_proxy_stop
    pg_stop "$DATA"
    pg_stop "$R"
    minio_stop
    rm -rf "$WORK/minio" "$D" 2>/dev/null || { sleep 1; rm -rf "$WORK/minio" "$D"; }
    rm -f "$RUNDIR/pagevault"
}
trap_signals cleanup

S3_PORT=59112 BUCKET=bench
minio_start "$WORK/minio" "$S3_PORT" "$BUCKET"
S3=s3://$BUCKET/replay

# ------------------------------------------------------- base and WAL ----
fresh_cluster_dir "$D" $((WAL_GB * 4096 + SCALE * 45 + 2048)) "the cluster, its WAL and two repositories"
mkdir -p "$ARCH"
chown postgres: "$ARCH"
bench_initdb "$DATA" "$D/run" "bench/replay.sh"
cat >> "$DATA/postgresql.conf" <<EOF
archive_mode = on
archive_command = 'cp %p $ARCH/%f'
max_wal_size = 16GB
EOF
start() { as_pg "$PG_BIN/pg_ctl" -D "$1" -l "$D/run/$2.log" -w -t 3600 \
    -o "-p $PORT -c listen_addresses=127.0.0.1 -c unix_socket_directories=$D/run" start >/dev/null; }
start "$DATA" server
log "pgbench -i -s $SCALE"
"$PG_BIN/pgbench" -i -q -s "$SCALE" -h 127.0.0.1 -p $PORT -U postgres postgres > "$D/run/load.log" 2>&1
psql_db -c "CHECKPOINT"
as_pg "$PG_BIN/pg_ctl" -D "$DATA" -w -m fast stop >/dev/null
cp -a "$DATA" "$BASE"
start "$DATA" server
START_LSN=$(psql_db -c "SELECT pg_current_wal_lsn()")
log "$WAL_GB GB of WAL from $START_LSN: rows inserted, pgbench updates between"
psql_db -c "CREATE TABLE w (id bigint, t text)"
while [ "$(psql_db -c "SELECT pg_current_wal_lsn() - '$START_LSN' < $WAL_GB * 1024 * 1048576::numeric")" = t ]; do
    psql_db -c "INSERT INTO w SELECT g, md5(random()::text) || repeat(md5(g::text), 4) FROM generate_series(1, 200000) g"
    "$PG_BIN/pgbench" -n -c 2 -j 2 -T 2 -h 127.0.0.1 -p $PORT -U postgres postgres >> "$D/run/pgbench.log" 2>&1
done
psql_db -c "SELECT pg_switch_wal()" >/dev/null
LAST=$(psql_db -c "SELECT pg_walfile_name(pg_current_wal_lsn() - 1)")
for _ in $(seq 1 600); do [ -e "$ARCH/$LAST" ] && break; sleep 0.1; done
[ -e "$ARCH/$LAST" ] || die "PostgreSQL did not archive $LAST (see $D/run/server.log)"
as_pg "$PG_BIN/pg_ctl" -D "$DATA" -w -m fast stop >/dev/null
mapfile -t SEGS < <(find "$ARCH" -maxdepth 1 -printf '%f\n' | grep '^[0-9A-F]\{24\}$' | sort)
WAL_BYTES=$(du -cb "${SEGS[@]/#/$ARCH/}" | tail -1 | cut -f1)
log "pushing ${#SEGS[@]} segments into $LOCAL and $S3"
"$PV" init --repo "$LOCAL" > "$RUNDIR/init.log" 2>&1
"$PV" init --repo "$S3" --s3-endpoint "https://127.0.0.1:$S3_PORT" >> "$RUNDIR/init.log" 2>&1
for n in "${SEGS[@]}"; do
    "$PV" archive-push "$ARCH/$n" --repo "$LOCAL" --repo "$S3" \
        --s3-endpoint "https://127.0.0.1:$S3_PORT" >> "$RUNDIR/push.log" 2>&1 ||
        die "archive-push $n failed (see $RUNDIR/push.log)"
done
chown -R postgres: "$LOCAL"

# ------------------------------------------------------------ the runs ----
RESULTS=$RUNDIR/runs.tsv
printf 'store\tdelay_ms\trun\tsegments\tseconds\tcpu_s\n' > "$RESULTS"
# replay STORE DELAY RUN: a fresh copy of the base replays every segment from STORE.
replay() {
    local cmd t0 t1 b0 b1 secs cpu
    case $1 in
        local) cmd="$PV archive-get %f \"%p\" --repo $LOCAL" ;;
        minio) cmd="$PV archive-get %f \"%p\" --repo $S3 --s3-endpoint https://127.0.0.1:$DELAY_PORT" ;;
    esac
    pg_stop "$R"
    rm -rf "$R"
    cp -a "$BASE" "$R"
    cat >> "$R/postgresql.conf" <<EOF
archive_mode = off
hot_standby = off
restore_command = '$cmd'
EOF
    touch "$R/recovery.signal"
    chown -R postgres: "$R"
    sync
    wait_quiet
    b0=$(busy_ticks) t0=$(now_ns)
    as_pg "$PG_BIN/pg_ctl" -D "$R" -l "$D/run/replay-$1-$2-$3.log" -W \
        -o "-p $PORT -c listen_addresses=127.0.0.1 -c unix_socket_directories=$D/run" start >/dev/null
    # hot_standby off: the server takes no connection until recovery has ended.
    until [ "$(psql_db -c "SELECT pg_is_in_recovery()" 2>/dev/null)" = f ]; do
        # (Each poll's own refusal while it recovers is no failure.)
        if grep -E "FATAL|PANIC" "$D/run/replay-$1-$2-$3.log" 2>/dev/null | grep -q -v -E "is starting up|not accepting connections"; then
            cp "$D/run/replay-$1-$2-$3.log" "$RUNDIR/"
            die "recovery failed (see $RUNDIR/replay-$1-$2-$3.log)"
        fi
        sleep 0.05
    done
    t1=$(now_ns) b1=$(busy_ticks)
    cp "$D/run/replay-$1-$2-$3.log" "$RUNDIR/"
    grep -q "selected new timeline ID" "$RUNDIR/replay-$1-$2-$3.log" ||
        die "recovery did not reach the end of the archive (see $RUNDIR/replay-$1-$2-$3.log)"
    pg_stop "$R"
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", (b - a) / 1e9}')
    cpu=$(awk -v a="$b0" -v b="$b1" -v hz="$HZ" 'BEGIN {printf "%.1f", (b - a) / hz}')
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${#SEGS[@]}" "$secs" "$cpu" >> "$RESULTS"
    log "$1 ($2 ms one way), run $3: ${#SEGS[@]} segments replayed in $secs s, CPU $cpu s"
}
for run in $(seq 1 "$RUNS"); do
    replay local 0 "$run"
    for delay in $DELAYS; do
        delay_proxy_start "$S3_PORT" "$delay"
        replay minio "$delay" "$run"
        delay_proxy_stop
    done
done

python3 - "$RESULTS" "$commit$dirty" "$WAL_BYTES" <<'PY'
import csv, statistics as st, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter='\t'))
def secs(s, d):
    return [float(r['seconds']) for r in rows if r['store'] == s and r['delay_ms'] == d]
def fmt(v):
    return f"{st.median(v):.2f} ({min(v):.2f}-{max(v):.2f})"
runs = max(int(r['run']) for r in rows)
segs = rows[0]['segments']
gb = int(sys.argv[3]) / 1e9
print(f"\npagevault {sys.argv[2]}; {segs} segments ({gb:.2f} GB) replayed; median (min-max) of {runs} runs\n")
print("| repository | one-way delay | round trip | replay s | MB/s | / local |")
print("|---|---:|---:|---:|---:|---:|")
loc = secs('local', '0')
print(f"| directory | - | - | {fmt(loc)} | {gb * 1e3 / st.median(loc):.0f} | 1.00x |")
for d in dict.fromkeys(r['delay_ms'] for r in rows if r['store'] == 'minio'):
    m = secs('minio', d)
    print(f"| MinIO | {d} ms | {2 * int(d)} ms | {fmt(m)} | {gb * 1e3 / st.median(m):.0f} | {st.median(m) / st.median(loc):.2f}x |")
print("\ngoal: MinIO at 25 ms one way (50 ms round trip) at most 1.2x the directory")
PY
echo "(raw: $RESULTS)"
}
