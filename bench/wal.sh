#!/usr/bin/env bash
# bench/wal.sh: WAL archiving and recovery rates against MinIO (issue 39, items 1 and 2).
#
# One PostgreSQL 15 pgbench cluster (scale SCALE, data checksums) and MinIO with TLS on
# 127.0.0.1. Three parts, each RUNS times (round-robin over the modes):
#   drain   with archive_command empty, pgbench writes SEGS segments (they wait as .ready);
#           then archive_command is set and the time until pg_wal holds no .ready file is
#           taken (for pagevault --async also until its spool is empty: the repository
#           holds every segment). Modes: pagevault archive-push (synchronous), pagevault
#           --async (--process-max 2), pgBackRest 2.59.1 archive-async=y process-max=2
#           (compress-type=zst level 1, as pagevault's zstd level 1).
#   live    the drain's load (the most WAL this machine writes: pgbench alone writes about
#           1 MB/s here) for LIVE_SECS with each mode archiving: the most .ready files
#           pg_wal held (sampled every 0.2 s), the WAL rate, and how long after the load
#           the repository held everything.
#   replay  a full set in a local repository and one in MinIO, then REPLAY_GB of WAL archived
#           into both; each restored (untimed), then the server started and timed until it
#           leaves recovery: pg_wal (the floor: every segment put in pg_wal first, replay
#           alone), local (prefetch on, the default), MinIO (prefetch on), MinIO with
#           --prefetch 0 (one segment per archive-get, the synchronous fetch).
# CPU s is the machine's busy CPU over the measured interval (PostgreSQL, MinIO and every
# tool share the 2 cores). Prints a markdown table of medians with min-max and the ratios
# of the issue's goals. Everything is kept under WORK/results/wal-DATE/.
#
# Usage: bench/wal.sh [--work DIR] [--scale N] [--segs N] [--runs N] [--replay-gb N]
#                     [--live-secs N] [--parts drain,live,replay] [--no-build]
# Environment: WORK_DIR, SCALE (50), SEGS (64), RUNS (3), REPLAY_GB (3), LIVE_SECS (60),
#              PARTS, PAGEVAULT, NO_BUILD=1, PAGEVAULT_TOOLS, PGBACKREST, QUIET_BUDGET
# Quick check: bench/wal.sh --scale 5 --segs 4 --runs 1 --replay-gb 1 --live-secs 10
# Needs root (PostgreSQL and pgBackRest run as postgres), MinIO and Node's S3 SDK under
# PAGEVAULT_TOOLS (scripts/setup.sh), pgBackRest 2.59.1 (bench/README.md), openssl.
set -euo pipefail
{

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$ROOT/bench/lib.sh"
WORK=${WORK_DIR:-$WORK/wal}
SCALE=${SCALE:-50}
SEGS=${SEGS:-64}
RUNS=${RUNS:-3}
REPLAY_GB=${REPLAY_GB:-3}
LIVE_SECS=${LIVE_SECS:-60}
PARTS=${PARTS:-drain,live,replay}
PG_BIN=/usr/lib/postgresql/15/bin
TOOLS=${PAGEVAULT_TOOLS:-/var/tmp/pagevault-tools}
parse_options --work=WORK --scale=SCALE --segs=SEGS --runs=RUNS --replay-gb=REPLAY_GB \
    --live-secs=LIVE_SECS --parts=PARTS --no-build=NO_BUILD=1 -- "$@"
for v in SCALE SEGS RUNS REPLAY_GB LIVE_SECS; do need_posint "--${v,,}" "${!v}"; done
[ "$(id -u)" -eq 0 ] || { echo "run as root (runs PostgreSQL and pgBackRest as postgres)" >&2; exit 2; }
as_pg() { runuser -u postgres -- "$@"; }
ensure_binary
use_current_pgbackrest
MINIO=$TOOLS/bin/minio
for t in "$MINIO" "$PG_BIN/pgbench" openssl node pgbackrest; do
    [ -x "$t" ] || command -v "$t" >/dev/null || die "$t is missing (scripts/setup.sh, bench/README.md)"
done
PGBR_VERSION=$(pgbackrest version | awk '{print $2}')

mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
cd /
RUNDIR=$WORK/results/wal-$(date +%Y%m%d-%H%M%S)
mkdir -p "$RUNDIR"
snapshot_binary "$RUNDIR"
chmod 755 "$WORK" "$WORK/results" "$RUNDIR" "$PV"
D=$WORK/cluster DATA=$WORK/cluster/data
PORT=55641
psql_db() { "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$1" -U postgres -d postgres "${@:2}"; }
pg_stop() { as_pg "$PG_BIN/pg_ctl" -D "$1" -w -m fast stop >/dev/null 2>&1 || true; }
MINIO_PID=""
cleanup() {
    pg_stop "$DATA"
    [ -d "$WORK/replay/data" ] && pg_stop "$WORK/replay/data"
    [ -z "$MINIO_PID" ] || kill "$MINIO_PID" 2>/dev/null || true
    rm -rf "$WORK/minio" "$WORK/replay" "$WORK"/spool-* "$WORK"/pgbr-spool-* "$WORK/localrepo"
    rm -f "$RUNDIR/pagevault"
}
trap_signals cleanup

# ------------------------------------------------------------------ MinIO ----
make_tls "$WORK/tls"
rm -rf "$WORK/minio"
mkdir -p "$WORK/minio/certs"
cp "$WORK/tls/cert.pem" "$WORK/minio/certs/public.crt"
cp "$WORK/tls/key.pem" "$WORK/minio/certs/private.key"
S3_PORT=59100
S3_USER=pvbenchadmin S3_SECRET=pvbench-secret-Qx27 BUCKET=bench
MINIO_ROOT_USER=$S3_USER MINIO_ROOT_PASSWORD=$S3_SECRET MINIO_UPDATE=off MINIO_BROWSER=off \
    "$MINIO" server "$WORK/minio/data" --address "127.0.0.1:$S3_PORT" --certs-dir "$WORK/minio/certs" \
    --quiet > "$WORK/minio.log" 2>&1 < /dev/null &
MINIO_PID=$!
export AWS_ACCESS_KEY_ID=$S3_USER AWS_SECRET_ACCESS_KEY=$S3_SECRET AWS_REGION=us-east-1
export AWS_ENDPOINT_URL=https://127.0.0.1:$S3_PORT PAGEVAULT_CA_FILE=$WORK/tls/ca.pem
export NODE_PATH=$TOOLS/node/node_modules NODE_NO_WARNINGS=1 NODE_EXTRA_CA_CERTS=$WORK/tls/ca.pem
chmod 755 "$WORK/tls"; chmod 644 "$WORK/tls/ca.pem"
for _ in $(seq 1 100); do
    node "$ROOT/tests/tools/store.js" s3 mkbucket "$BUCKET" > "$RUNDIR/mkbucket.log" 2>&1 && break
    sleep 0.3
done
grep -q . "$RUNDIR/mkbucket.log" && die "cannot create the bucket: $(cat "$RUNDIR/mkbucket.log")"

# ---------------------------------------------------------------- cluster ----
fresh_cluster_dir "$D" $((SCALE * 20 + REPLAY_GB * 3072 + SEGS * 64 + 4096)) "the cluster, its WAL and repositories"
bench_initdb "$DATA" "$D/run" "bench/wal.sh"
cat >> "$DATA/postgresql.conf" <<EOF
archive_mode = on
archive_command = ''
max_wal_size = 64GB
EOF
as_pg "$PG_BIN/pg_ctl" -D "$DATA" -l "$D/run/server.log" -w \
    -o "-p $PORT -c listen_addresses=127.0.0.1 -c unix_socket_directories=$D/run" start >/dev/null
log "pgbench -i -s $SCALE"
as_pg "$PG_BIN/pgbench" -h 127.0.0.1 -p $PORT -U postgres -i -q -s "$SCALE" postgres >/dev/null 2>&1
psql_db $PORT -c "VACUUM" -c "CHECKPOINT"

ready() { find "$DATA/pg_wal/archive_status" -name '*.ready' 2>/dev/null | wc -l; }
spooled() { find "$1/ready" -maxdepth 1 -type f ! -name '*.sum' ! -name '*.src' ! -name '*.done' ! -name '.*' 2>/dev/null | wc -l; }
set_archive() {
    psql_db $PORT -c "ALTER SYSTEM SET archive_command = '${1//\'/\'\'}'" -c "SELECT pg_reload_conf()" >/dev/null
}
# wait_for COND MAX_S: until COND succeeds; prints the seconds waited with ns precision.
wait_for() {
    local t0 i; t0=$(now_ns)
    for ((i = 0; i < $2 * 20; i++)); do eval "$1" && break; sleep 0.05; done
    eval "$1" || die "not done after $2 s: $1"
    awk -v a="$t0" -v b="$(now_ns)" 'BEGIN {printf "%.2f", (b - a) / 1e9}'
}
lsn() { psql_db $PORT -c "SELECT pg_current_wal_lsn()"; }
# write_wal BYTES: until the server wrote that much WAL, batches of OLTP-like changes
# (pgbench_accounts rows updated at random: full-page images after each checkpoint, small
# records) and inserts of random text (the bulk of the bytes: pgbench alone writes a few
# MB/s here), then a switch.
write_batch() {
    psql_db $PORT -c "UPDATE pgbench_accounts SET abalance = abalance + 1
            WHERE aid IN (SELECT (random() * $((SCALE * 100000 - 1)))::int + 1 FROM generate_series(1, 20000))" \
        -c "INSERT INTO w SELECT g, md5(random()::text) || md5(random()::text) FROM generate_series(1, 100000) g" >/dev/null
}
# Each starts with a checkpoint, so that every run's WAL has the same share of full-page
# images (they compress several times better than the random text): without it the first
# run's segments compressed to 2 MiB and the later ones' to 5.5 MiB.
write_wal() {
    local start
    psql_db $PORT -c "SET client_min_messages = warning" -c "CREATE TABLE IF NOT EXISTS w (id bigint, v text)" -c "TRUNCATE w" -c "CHECKPOINT" >/dev/null
    start=$(lsn)
    while [ "$(psql_db $PORT -c "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$start') >= $1")" != t ]; do
        write_batch
    done
    psql_db $PORT -c "SELECT pg_switch_wal()" >/dev/null
}

PGBR_CONF=$WORK/pgbackrest.conf
mkdir -p "$WORK/pgbackrest"; chown postgres: "$WORK/pgbackrest"
{ echo "[global]"; pgbr_s3_repo "$S3_PORT" "$BUCKET" "$S3_USER" "$S3_SECRET"; } > "$PGBR_CONF"
cat >> "$PGBR_CONF" <<EOF
repo1-storage-verify-tls=n
archive-async=y
process-max=2
compress-type=zst
compress-level=1
archive-check=n
archive-mode-check=n
lock-path=$WORK/pgbackrest/lock
log-path=$WORK/pgbackrest/log
log-level-file=off
log-level-console=warn

[bench]
pg1-path=$DATA
pg1-port=$PORT
pg1-socket-path=$D/run
pg1-user=postgres
EOF
chown postgres: "$PGBR_CONF"; chmod 600 "$PGBR_CONF"

# archive_cmd MODE TAG: the archive_command of a mode, into a repository of its own.
archive_cmd() {
    case $1 in
        pv-sync) echo "$PV archive-push %p --repo s3://$BUCKET/pv-$2" ;;
        pv-async)
            mkdir -p "$WORK/spool-$2"; chown postgres: "$WORK/spool-$2"
            echo "$PV archive-push %p --repo s3://$BUCKET/pv-$2 --async --spool $WORK/spool-$2 --process-max 2" ;;
        pgbr-async)
            mkdir -p "$WORK/pgbr-spool-$2"; chown postgres: "$WORK/pgbr-spool-$2"
            as_pg pgbackrest --config="$PGBR_CONF" --stanza=bench --repo1-path="/pgbr-$2" stanza-create >/dev/null
            echo "pgbackrest --config=$PGBR_CONF --stanza=bench --repo1-path=/pgbr-$2 --spool-path=$WORK/pgbr-spool-$2 archive-push %p" ;;
    esac
}
# in_repo MODE TAG: whether everything handed over is in the repository.
in_repo() { [ "$(ready)" -eq 0 ] && { [ "$1" != pv-async ] || [ "$(spooled "$WORK/spool-$2")" -eq 0 ]; }; }

RESULTS=$RUNDIR/runs.tsv
printf 'part\tmode\trun\tsegments\tseconds\tseconds_repo\tcpu_s\textra\n' > "$RESULTS"
MODES=(pv-sync pv-async pgbr-async)
has_part() { [[ ",$PARTS," == *",$1,"* ]]; }

if has_part drain; then
    # The WAL of pgbench -i goes first, untimed: it compresses unlike the load's.
    set_archive /bin/true
    psql_db $PORT -c "SELECT pg_switch_wal()" >/dev/null
    wait_for '[ "$(ready)" -eq 0 ]' 600 >/dev/null
    for run in $(seq 1 "$RUNS"); do
        for mode in "${MODES[@]}"; do
            tag=drain-$run-$mode
            set_archive ''
            write_wal $((SEGS * 16 * 1048576))
            n=$(ready)
            cmd=$(archive_cmd "$mode" "$tag")
            wait_quiet
            log "drain $run $mode: $n segments"
            b0=$(busy_ticks)
            set_archive "$cmd"
            t_wal=$(wait_for '[ "$(ready)" -eq 0 ]' 1800)
            t_rest=$(wait_for "in_repo $mode $tag" 1800)
            b1=$(busy_ticks)
            t_repo=$(awk -v a="$t_wal" -v b="$t_rest" 'BEGIN {printf "%.2f", a + b}')
            cpu=$(awk -v t=$((b1 - b0)) -v hz="$HZ" 'BEGIN {printf "%.1f", t / hz}')
            printf 'drain\t%s\t%s\t%s\t%s\t%s\t%s\t\n' "$mode" "$run" "$n" "$t_wal" "$t_repo" "$cpu" >> "$RESULTS"
            log "    pg_wal drained in $t_wal s, all in the repository after $t_repo s, CPU $cpu s"
        done
    done
fi

if has_part live; then
    for run in $(seq 1 "$RUNS"); do
        for mode in "${MODES[@]}"; do
            tag=live-$run-$mode
            set_archive "$(archive_cmd "$mode" "$tag")"
            psql_db $PORT -c "SELECT pg_switch_wal()" >/dev/null
            wait_for '[ "$(ready)" -eq 0 ]' 600 >/dev/null
            wait_quiet
            psql_db $PORT -c "SET client_min_messages = warning" -c "CREATE TABLE IF NOT EXISTS w (id bigint, v text)" -c "TRUNCATE w" >/dev/null
            start=$(lsn)
            b0=$(busy_ticks)
            ( end=$((SECONDS + LIVE_SECS)); while [ $SECONDS -lt $end ]; do write_batch; done ) \
                > "$RUNDIR/$tag.load" 2>&1 &
            pgb=$!
            most=0
            while kill -0 $pgb 2>/dev/null; do
                r=$(ready); [ "$r" -gt "$most" ] && most=$r
                sleep 0.2
            done
            wait $pgb || true
            t_rest=$(wait_for "in_repo $mode $tag" 1800)
            b1=$(busy_ticks)
            segs=$(psql_db $PORT -c "SELECT (pg_wal_lsn_diff(pg_current_wal_lsn(), '$start') / 16777216)::int")
            tps=$(awk -v s="$segs" -v t="$LIVE_SECS" 'BEGIN {printf "%.0f", s * 16 / t}')
            cpu=$(awk -v t=$((b1 - b0)) -v hz="$HZ" 'BEGIN {printf "%.1f", t / hz}')
            printf 'live\t%s\t%s\t%s\t%s\t%s\t%s\tmost_ready=%s wal_MBps=%s\n' "$mode" "$run" "$segs" "$LIVE_SECS" "$t_rest" "$cpu" "$most" "$tps" >> "$RESULTS"
            log "live $run $mode: $segs segments ($tps MB/s of WAL), most .ready $most, drained $t_rest s after"
        done
    done
fi

if has_part replay; then
    LOCAL=$WORK/localrepo
    mkdir -p "$LOCAL"; chown postgres: "$LOCAL"
    set_archive "$PV archive-push %p --repo $LOCAL && $PV archive-push %p --repo s3://$BUCKET/pv-replay"
    URL="postgres://postgres@127.0.0.1:$PORT/postgres?pgdata=$DATA"
    log "replay: a full set in each repository, then $REPLAY_GB GB of WAL"
    "$PV" backup --source "$URL" --repo "$LOCAL" > "$RUNDIR/backup-local.log" 2>&1
    "$PV" backup --source "$URL" --repo "s3://$BUCKET/pv-replay" > "$RUNDIR/backup-s3.log" 2>&1
    write_wal $((REPLAY_GB * 1024 * 1048576))
    wait_for '[ "$(ready)" -eq 0 ]' 3600 >/dev/null
    pg_stop "$DATA"
    RP=$WORK/replay
    for run in $(seq 1 "$RUNS"); do
        for mode in pg_wal local s3 s3-noprefetch; do
            rm -rf "$RP"; mkdir -p "$RP"; chown postgres: "$RP"
            repo=$LOCAL; [[ $mode == s3* ]] && repo=s3://$BUCKET/pv-replay
            "$PV" restore --repo "$repo" --to "$RP/data" --owner postgres > "$RUNDIR/restore-$run-$mode.log" 2>&1
            grep -q "archive-get" "$RP/data/postgresql.auto.conf" || die "no restore_command in the restored copy"
            case $mode in
                s3-noprefetch)
                    sed -i "s|^restore_command = '\(.*\)'$|restore_command = '\1 --prefetch 0'|" "$RP/data/postgresql.auto.conf" ;;
                pg_wal) # the floor: every segment already in pg_wal, replay alone
                    for f in "$LOCAL"/wal/*/*.zst; do
                        n=$(basename "$f" .zst)
                        [ ${#n} -eq 24 ] || continue
                        "$PV" archive-get "$n" "$RP/data/pg_wal/$n" --repo "$LOCAL" --prefetch 0 >/dev/null
                    done
                    chown -R postgres: "$RP/data/pg_wal"
                    sed -i "s|^restore_command = .*$|restore_command = '/bin/false'|" "$RP/data/postgresql.auto.conf" ;;
            esac
            sync
            wait_quiet
            b0=$(busy_ticks); t0=$(now_ns)
            as_pg "$PG_BIN/pg_ctl" -D "$RP/data" -l "$RP/server.log" -w -t 3600 \
                -o "-p $((PORT + 1)) -c listen_addresses=127.0.0.1 -c unix_socket_directories=$RP -c archive_mode=off" \
                start >/dev/null
            until [ "$(psql_db $((PORT + 1)) -c 'SELECT pg_is_in_recovery()' 2>/dev/null)" = f ]; do sleep 0.05; done
            t1=$(now_ns); b1=$(busy_ticks)
            secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", (b - a) / 1e9}')
            cpu=$(awk -v t=$((b1 - b0)) -v hz="$HZ" 'BEGIN {printf "%.1f", t / hz}')
            segs=$(grep -c 'restored log file' "$RP/server.log" || true)
            [ "$mode" != pg_wal ] || segs=$(ls "$RP/data/pg_wal" | grep -c '^[0-9A-F]\{24\}$' || true)
            printf 'replay\t%s\t%s\t%s\t%s\t\t%s\t\n' "$mode" "$run" "$segs" "$secs" "$cpu" >> "$RESULTS"
            log "replay $run $mode: $segs segments in $secs s, CPU $cpu s"
            pg_stop "$RP/data"
        done
    done
fi

python3 - "$RESULTS" "$PGBR_VERSION" "$commit$dirty" <<'PY'
import csv, statistics as st, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter='\t'))
def pick(part, mode, key):
    return [float(r[key]) for r in rows if r['part'] == part and r['mode'] == mode and r[key]]
def fmt(v):
    return f"{st.median(v):.2f} ({min(v):.2f}-{max(v):.2f})" if v else "-"
print(f"\npagevault {sys.argv[3]}, pgBackRest {sys.argv[2]}; median (min-max) of {max([int(r['run']) for r in rows] or [0])} runs\n")
print("| part | mode | segments | s (pg_wal / replay) | s (in repository) | MB/s | CPU s |")
print("|---|---|---:|---:|---:|---:|---:|")
for part, modes in (("drain", ("pv-sync", "pv-async", "pgbr-async")), ("replay", ("pg_wal", "local", "s3", "s3-noprefetch"))):
    for m in modes:
        s, segs = pick(part, m, 'seconds'), pick(part, m, 'segments')
        if not s:
            continue
        repo = pick(part, m, 'seconds_repo')
        mb = st.median(segs) * 16 / st.median(repo or s)
        print(f"| {part} | {m} | {st.median(segs):.0f} | {fmt(s)} | {fmt(repo)} | {mb:.0f} | {fmt(pick(part, m, 'cpu_s'))} |")
for r in rows:
    if r['part'] == 'live':
        print(f"| live | {r['mode']} run {r['run']} | {r['segments']} | {r['seconds']} | {r['seconds_repo']} after | - | {r['cpu_s']} | {r['extra']}")
def rates(part, mode, key):
    return [float(r['segments']) / float(r[key]) for r in rows
            if r['part'] == part and r['mode'] == mode and r[key] and float(r[key]) > 0]
def ratio(a, b, what):
    if a and b:
        print(f"- {what}: {st.median(a) / st.median(b):.2f}x (runs {min(a) / max(b):.2f}-{max(a) / min(b):.2f}x)")
print()
ratio(rates('drain', 'pv-async', 'seconds'), rates('drain', 'pv-sync', 'seconds'), "pg_wal drained, segments/s, async over sync (goal >= 3x)")
ratio(rates('drain', 'pv-async', 'seconds_repo'), rates('drain', 'pv-sync', 'seconds_repo'), "in the repository, segments/s, async over sync")
ratio(rates('drain', 'pv-async', 'seconds'), rates('drain', 'pgbr-async', 'seconds'), "pg_wal drained, pagevault async over pgBackRest async (goal >= 1x)")
ratio(rates('drain', 'pv-async', 'seconds_repo'), rates('drain', 'pgbr-async', 'seconds'), "in the repository, pagevault async over pgBackRest async")
ratio(rates('replay', 'local', 'seconds'), rates('replay', 's3', 'seconds'), "replay, MinIO's time over local's (goal <= 1.2x)")
ratio(rates('replay', 's3', 'seconds'), rates('replay', 's3-noprefetch', 'seconds'), "replay from MinIO, prefetch over one segment per call (goal >= 2x)")
ratio(rates('replay', 'pg_wal', 'seconds'), rates('replay', 's3', 'seconds'), "the floor (segments in pg_wal) over MinIO with prefetch")
PY
echo "(raw: $RESULTS)"
}
