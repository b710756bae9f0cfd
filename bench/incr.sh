#!/usr/bin/env bash
# bench/incr.sh: incremental backups that cost what changed (issue 21), pagevault beside
# pgBackRest (--type=incr, repo-block=y, repo-bundle=y, process-max 2) and PostgreSQL 17's
# own incremental backup (summarize_wal, pg_basebackup --incremental, pg_combinebackup).
#
# One PostgreSQL 17 cluster with data checksums (pgbench at SCALE, fillfactor 90 so that
# updates stay on their page, vacuumed), archiving into pagevault's repository and
# pgBackRest's. Then:
#   1. once the archive has taken the load's WAL, a full backup with each tool (timed);
#   2. ROUNDS times: five rows of every 100th block of pgbench_accounts updated (1% of its
#      pages, chosen by block number; five fit in the room fillfactor 90 leaves, so they
#      stay on their page and no index changes), the pages of every table, index and
#      visibility map whose LSN moved counted (pageinspect), and an incremental with each
#      tool (timed; pagevault's bytes read from its JSON);
#   3. REPS - 1 more full backups with each tool (timed, then dropped from the chains'
#      way: the restores below name their sets);
#   4. REPS times, the tools in turn: the chain restored with each tool (timed, cold
#      cache): pagevault restore --set LAST_INCR, pgbackrest restore --set LAST_INCR,
#      pg_combinebackup of the full and every incremental; and the full alone (pagevault
#      restore --set FULL, pgbackrest restore --set FULL, a copy of pg_basebackup's
#      full); then pagevault merge of the chain (a synthetic full), when the binary has it.
# This machine's disk varies run to run (fio's random reads: 23,000-65,000 IOPS in three
# runs in a row): the table gives medians and ranges, and the ratios are of medians.
# pagevault's backups run as postgres (its archive-push writes the same repository).
# Every timed command starts with a cold page cache, every backup after a CHECKPOINT.
# Prints one markdown table and the goals' ratios; keeps everything under WORK/results/.
#
# With PEERS=0 only pagevault runs, on the PostgreSQL of PG_BIN (14-18): the read cost of
# an incremental on a release whose heap records do not name the visibility-map page
# (14-16), e.g. PEERS=0 PG_BIN=/usr/lib/postgresql/15/bin SCALE=100 ROUNDS=3 REPS=1.
#
# Usage: bench/incr.sh [--work DIR] [--scale N] [--rounds N] [--reps N] [--no-build]
# Environment: WORK_DIR, SCALE (400 = about 6 GB), ROUNDS (7), REPS (3), PG17 (bin/ of PostgreSQL 17,
#              default /var/tmp/pagevault-tools/pg17/bin), PGBACKREST (a 2.5x binary with
#              block incremental, default /var/tmp/pagevault-tools/bin/pgbackrest),
#              PEERS (1; 0: pagevault alone), PG_BIN (the server's bin/ with PEERS=0),
#              PAGEVAULT, NO_BUILD=1, QUIET_BUDGET
set -euo pipefail
{

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$ROOT/bench/lib.sh"
SCALE=${SCALE:-400}
ROUNDS=${ROUNDS:-7}
REPS=${REPS:-3}
PEERS=${PEERS:-1}
if [ "$PEERS" = 1 ]; then PG_BIN=${PG17:-/var/tmp/pagevault-tools/pg17/bin}; else PG_BIN=${PG_BIN:-${PG17:-/var/tmp/pagevault-tools/pg17/bin}}; fi
PGBR=${PGBACKREST:-/var/tmp/pagevault-tools/bin/pgbackrest}
peers() { [ "$PEERS" = 1 ]; }
parse_options --work=WORK --scale=SCALE --rounds=ROUNDS --reps=REPS --no-build=NO_BUILD=1 -- "$@"
[ "$(id -u)" -eq 0 ] || { echo "run as root (drops the page cache, runs PostgreSQL as postgres)" >&2; exit 2; }
ensure_binary
need_pkg jq jq
need_pkg fio fio
[ -x "$PG_BIN/pg_ctl" ] || die "no PostgreSQL at $PG_BIN"
! peers || [ -x "$PG_BIN/pg_combinebackup" ] || die "no PostgreSQL 17 at $PG_BIN (scripts/setup.sh installs it)"
! peers || [ -x "$PGBR" ] || die "no pgBackRest at $PGBR: build release/2.59.1 (meson setup build && ninja -C build) and copy build/src/pgbackrest there"

D=$WORK/incr
RUNDIR=$WORK/results/incr-$(date +%Y%m%d-%H%M%S)
DATA=$D/data PVREPO=$D/pv-repo BRREPO=$D/br-repo PG17B=$D/pg17
PORT=55632
mkdir -p "$RUNDIR" "$D"
snapshot_binary "$RUNDIR"
chmod 755 "$RUNDIR" "$PV"
RESULTS=$RUNDIR/runs.tsv
printf 'round\ttool\tphase\tseconds\tread_bytes\tlisted_pages\tchanged_pages\n' > "$RESULTS"
psql_db() { "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p $PORT -U postgres -d bench "$@"; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
source "$ROOT/bench/vm-memory.sh"
cleanup() { as_pg "$PG_BIN/pg_ctl" -D "$DATA" -w -m fast stop >/dev/null 2>&1 || true; release_guest_memory; }
trap cleanup EXIT
# Every tool's restore writes into freshly freed page cache: without this, each pays the
# VM's host faults (about 1 s per GB here) or not, depending on the run before.
hold_guest_memory

# ----------------------------------------------------------- the cluster ----
rm -rf "$D"/*; mkdir -p "$D/run" "$PVREPO" "$BRREPO" "$PG17B"
chown -R postgres: "$D"
as_pg "$PG_BIN/initdb" -D "$DATA" --data-checksums --auth=trust -U postgres > "$D/initdb.log" 2>&1
cat > "$D/pgbackrest.conf" <<EOF
[global]
repo1-path=$BRREPO
repo1-block=y
repo1-bundle=y
process-max=2
compress-type=lz4
start-fast=y
log-level-console=warn
[bench]
pg1-path=$DATA
pg1-port=$PORT
pg1-socket-path=$D/run
EOF
chown postgres: "$D/pgbackrest.conf"
cat >> "$DATA/postgresql.conf" <<EOF
shared_buffers = 1GB
max_wal_size = 16GB
checkpoint_timeout = 30min
archive_mode = on
EOF
if peers; then
    cat >> "$DATA/postgresql.conf" <<EOF
summarize_wal = on
archive_command = '$PV archive-push %p --repo $PVREPO && $PGBR --config=$D/pgbackrest.conf --stanza=bench archive-push %p'
EOF
else
    echo "archive_command = '$PV archive-push %p --repo $PVREPO'" >> "$DATA/postgresql.conf"
fi
as_pg "$PG_BIN/pg_ctl" -D "$DATA" -l "$D/server.log" -w -o "-p $PORT -c listen_addresses=127.0.0.1 -k $D/run" start >/dev/null
"$PG_BIN/psql" -X -q -h 127.0.0.1 -p $PORT -U postgres -d postgres -c "CREATE DATABASE bench"
log "pgbench -i -s $SCALE -F 90"
"$PG_BIN/pgbench" -i -s "$SCALE" -F 90 -I dtGvp -q -h 127.0.0.1 -p $PORT -U postgres bench > "$D/load.log" 2>&1
psql_db -c "VACUUM (FREEZE, ANALYZE)" -c "CREATE EXTENSION pageinspect" -c "CHECKPOINT"
! peers || as_pg "$PGBR" --config="$D/pgbackrest.conf" --stanza=bench stanza-create >/dev/null
DB_BYTES=$(psql_db -c "SELECT pg_database_size('bench')")

# The WAL of the load archived (both archivers) before anything is timed: pg_backup_stop
# would otherwise wait for the backlog in the first backup.
wait_archived() {
    psql_db -c "CHECKPOINT" -c "SELECT pg_switch_wal()" >/dev/null
    local t0=$SECONDS
    while compgen -G "$DATA/pg_wal/archive_status/*.ready" >/dev/null; do
        [ $((SECONDS - t0)) -lt 1800 ] || die "the WAL archive did not catch up in 30 minutes"
        sleep 1
    done
}
# timed TOOL PHASE ROUND CMD...: wall seconds and bytes read by the command's processes.
# Before each backup an untimed CHECKPOINT (the first tool after the updates would
# otherwise pay the flush of their dirty buffers in its own pg_backup_start); before
# every command a cold page cache.
timed() {
    local tool=$1 phase=$2 round=$3; shift 3
    case $phase in full | incr) psql_db -c "CHECKPOINT" ;; esac
    drop_caches
    wait_quiet
    local t0 t1 out=$RUNDIR/$tool-$phase-$round.out
    t0=$(now_ns)
    "$@" > "$out" 2>&1 || die "$tool $phase failed (see $out)"
    t1=$(now_ns)
    sync
    local read="" listed=""
    if [ "$tool" = pagevault ]; then
        read=$(jq -r '.read_bytes // ""' "$out" 2>/dev/null || true)
        listed=$(jq -r '.change_map.listed_pages // ""' "$out" 2>/dev/null || true)
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$tool" "$phase" "$(( (t1 - t0) / 1000000 ))e-3" "$read" "$listed" "${CHANGED:-}" >> "$RESULTS"
    log "  $tool $phase $round: $(( (t1 - t0) / 1000000 )) ms${read:+, read $read bytes}${listed:+, $listed pages listed}"
}

SRC="postgres://postgres@127.0.0.1:$PORT/postgres?pgdata=$DATA"
CHANGED=""
log "waiting for the archive to take the load's WAL"
wait_archived
timed pagevault full 0 as_pg "$PV" backup --source "$SRC" --repo "$PVREPO" --compress lz4 --json
! peers || timed pgbackrest full 0 as_pg "$PGBR" --config="$D/pgbackrest.conf" --stanza=bench --type=full backup
! peers || timed pg17 full 0 as_pg "$PG_BIN/pg_basebackup" -h 127.0.0.1 -p $PORT -U postgres -D "$PG17B/0" -c fast
BASE_LSN=$(psql_db -c "SELECT pg_current_wal_lsn()")
# Pages of every table, index and visibility map of the database whose LSN is past
# BASE_LSN (a psql variable): the blocks an ideal incremental reads.
CHANGED_SQL="SELECT count(*) FROM pg_class c CROSS JOIN (VALUES ('main'), ('vm')) f(fork),
    LATERAL generate_series(0, pg_relation_size(c.oid, f.fork) / 8192 - 1) b
  WHERE c.relkind IN ('r', 'i', 't', 'm') AND c.relpersistence = 'p'
    AND (page_header(get_raw_page(c.oid::regclass::text, f.fork, b::int))).lsn > :'base'"
for ((r = 1; r <= ROUNDS; r++)); do
    psql_db -c "UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE ((ctid::text::point)[0])::bigint % 100 = $((r % 100)) AND ((ctid::text::point)[1])::int <= 5"
    CHANGED=$(psql_db -v base="$BASE_LSN" <<< "$CHANGED_SQL")
    BASE_LSN=$(psql_db -c "SELECT pg_current_wal_lsn()")
    log "round $r: $CHANGED pages changed (tables, indexes, visibility maps)"
    timed pagevault incr "$r" as_pg "$PV" backup --source "$SRC" --repo "$PVREPO" --type incr --compress lz4 --json
    peers || continue
    timed pgbackrest incr "$r" as_pg "$PGBR" --config="$D/pgbackrest.conf" --stanza=bench --type=incr backup
    timed pg17 incr "$r" as_pg "$PG_BIN/pg_basebackup" -h 127.0.0.1 -p $PORT -U postgres -D "$PG17B/$r" -c fast \
        --incremental="$PG17B/$((r - 1))/backup_manifest"
done
CHANGED=""
PV_FULL=$(jq -r '.set_id' "$RUNDIR/pagevault-full-0.out")
PV_LAST=$(jq -r '.set_id' "$RUNDIR/pagevault-incr-$ROUNDS.out")
BR_FULL=none BR_LAST=none
! peers || BR_FULL=$(as_pg "$PGBR" --config="$D/pgbackrest.conf" --stanza=bench info --output=json | jq -r '.[0].backup[0].label')
! peers || BR_LAST=$(as_pg "$PGBR" --config="$D/pgbackrest.conf" --stanza=bench info --output=json | jq -r '.[0].backup[-1].label')
# More fulls, for the full column's median: the chains stay the ones named above.
for ((k = 1; k < REPS; k++)); do
    timed pagevault full "$k" as_pg "$PV" backup --source "$SRC" --repo "$PVREPO" --compress lz4 --json
    peers || continue
    timed pgbackrest full "$k" as_pg "$PGBR" --config="$D/pgbackrest.conf" --stanza=bench --type=full backup
    timed pg17 full "$k" as_pg "$PG_BIN/pg_basebackup" -h 127.0.0.1 -p $PORT -U postgres -D "$PG17B/full-$k" -c fast
    rm -rf "$PG17B/full-$k"
done
as_pg "$PG_BIN/pg_ctl" -D "$DATA" -w -m fast stop >/dev/null

# --------------------------------------------------------------- restores ----
R=$D/restore
restore_dir() { rm -rf "$R"; install -d -m 700 -o postgres -g postgres "$R"; }
chain=(); for ((r = 0; r <= ROUNDS; r++)); do chain+=("$PG17B/$r"); done
for ((k = 1; k <= REPS; k++)); do
    restore_dir
    timed pagevault restore-full "$k" "$PV" restore --repo "$PVREPO" --set "$PV_FULL" --to "$R" --owner postgres --json
    restore_dir
    timed pagevault restore "$k" "$PV" restore --repo "$PVREPO" --set "$PV_LAST" --to "$R" --owner postgres --json
    if peers; then
    restore_dir
    timed pgbackrest restore-full "$k" as_pg "$PGBR" --config="$D/pgbackrest.conf" --stanza=bench --pg1-path="$R" --set="$BR_FULL" restore
    restore_dir
    timed pgbackrest restore "$k" as_pg "$PGBR" --config="$D/pgbackrest.conf" --stanza=bench --pg1-path="$R" --set="$BR_LAST" restore
    rm -rf "$R"
    timed pg17 restore-full "$k" as_pg cp -a "$PG17B/0" "$R"
    rm -rf "$R"
    timed pg17 restore "$k" as_pg "$PG_BIN/pg_combinebackup" -o "$R" "${chain[@]}"
    rm -rf "$R"
    fi
    if "$PV" merge --help >/dev/null 2>&1; then
        timed pagevault merge "$k" as_pg "$PV" merge --repo "$PVREPO" --set "$PV_LAST" --json
    fi
done
"$PV" merge --help >/dev/null 2>&1 || log "this pagevault has no merge: not measured"
# The device floor: the database's size written (then read) sequentially, O_DIRECT, 1 MiB,
# 16 in flight: what any full restore (backup) of it needs of this disk.
FIO=(fio --name=floor --filename="$D/floor.tmp" --size="$DB_BYTES" --bs=1M --direct=1 --ioengine=libaio --iodepth=16)
timed device floor-write 0 "${FIO[@]}" --rw=write --end_fsync=1
timed device floor-read 0 "${FIO[@]}" --rw=read
rm -f "$D/floor.tmp"

# ------------------------------------------------------------- the table ----
export RESULTS DB_BYTES ROUNDS PAGE=8192
python3 - > "$RUNDIR/table.md" <<'PY'
import csv, os, statistics
rows = list(csv.DictReader(open(os.environ["RESULTS"]), delimiter="\t"))
def secs(tool, phase):
    v = [float(r["seconds"]) for r in rows if r["tool"] == tool and r["phase"] == phase]
    return statistics.median(v) if v else None
print(f"database {int(os.environ['DB_BYTES']) / 2**30:.1f} GiB, {os.environ['ROUNDS']} rounds of 1% of pgbench_accounts' pages\n")
fmt = lambda x: "-" if x is None else f"{x:.2f}"
def cell(tool, phase):
    v = [float(r["seconds"]) for r in rows if r["tool"] == tool and r["phase"] == phase]
    if not v:
        return "-"
    return f"{statistics.median(v):.2f}" + (f" ({min(v):.2f}-{max(v):.2f})" if len(v) > 1 else "")
print("Each cell: the median seconds (min-max) of its runs: full and restores REPS runs, incr ROUNDS.\n")
print("| tool | full s | incr s | restore full alone s | restore chain s | merge s |")
print("|---|---:|---:|---:|---:|---:|")
for t in ("pagevault", "pgbackrest", "pg17"):
    print(f"| {t} | " + " | ".join(cell(t, p) for p in ("full", "incr", "restore-full", "restore", "merge")) + " |")
page = int(os.environ["PAGE"])
print("\n| round | pages changed (pageinspect) | pages listed | bytes read | of which whole files | read / (changed + whole) |")
print("|---:|---:|---:|---:|---:|---:|")
worst = 0.0
for r in rows:
    if r["tool"] != "pagevault" or r["phase"] != "incr" or not r["read_bytes"] or not r["listed_pages"]:
        continue
    read, listed, changed = int(r["read_bytes"]), int(r["listed_pages"]), int(r["changed_pages"])
    whole = read - listed * page
    ratio = read / (changed * page + whole)
    worst = max(worst, ratio)
    print(f"| {r['round']} | {changed:,} | {listed:,} | {read:,} | {whole:,} | {ratio:.3f} |")
print("\nGoals (ratios of the medians above):")
pv_i, pv_f = secs("pagevault", "incr"), secs("pagevault", "full")
if worst:
    print(f"- incr reads / (changed blocks + whole files) = {worst:.3f} at worst (goal <= 1.25)")
if pv_i and pv_f:
    print(f"- incr / full (pagevault) = {pv_i / pv_f:.3f} (goal <= 0.1)")
for peer, goal in (("pgbackrest", 3.0), ("pg17", 1.5)):
    p = secs(peer, "incr")
    if p and pv_i:
        print(f"- incr: {peer} / pagevault = {p / pv_i:.2f}x (goal >= {goal}x)")
rf, rc = secs("pagevault", "restore-full"), secs("pagevault", "restore")
if rf and rc:
    print(f"- restore chain / restore full (pagevault) = {rc / rf:.2f} (goal <= 1.15)")
for peer in ("pgbackrest", "pg17"):
    p = secs(peer, "restore")
    if p and rc:
        print(f"- restore chain: {peer} / pagevault = {p / rc:.2f}x (goal >= 2x)")
fw, fr = secs("device", "floor-write"), secs("device", "floor-read")
if fw and fr:
    print(f"- device floor (fio, the database's size, sequential): write {fw:.2f} s, read {fr:.2f} s; "
          f"pagevault's full restore takes {rf / fw:.2f}x the write floor" if rf else "")
m = secs("pagevault", "merge")
if m and rc:
    print(f"- merge / restore chain (pagevault) = {m / rc:.2f} (goal <= 1.0)")
PY
cat "$RUNDIR/table.md"
log "results in $RUNDIR"
exit 0
}
