#!/usr/bin/env bash
# bench/delta.sh: delta restore (issue 39, item 3): pagevault restore --delta beside a full
# restore of the same set and pgBackRest 2.59.1's restore --delta (process-max 2).
#
# One PostgreSQL 17 cluster with data checksums (pgbench at SCALE, vacuumed), archiving
# into pagevault's repository and pgBackRest's. Then:
#   1. a full backup with each tool (lz4, or as --compress says; untimed);
#   2. five rows of every 100th block of pgbench_accounts updated (1% of its pages), a
#      CHECKPOINT, the server stopped cleanly: its data directory is the "drifted" copy,
#      kept aside;
#   3. REPS times, the tools in turn, each timed with a cold page cache on an idle disk
#      (synced, and no I/O for half a second) and its CPU seconds (its processes and
#      their children) recorded:
#      pagevault restore into an empty directory (the full restore),
#      pagevault restore --delta over a fresh copy of the drifted directory,
#      pagevault restore --delta wal over a fresh copy of the drifted directory (the
#      pages to write from the block summaries and the copy's own WAL, none read),
#      pgbackrest restore into an empty directory,
#      pgbackrest restore --delta over a fresh copy of the drifted directory.
# Prints one markdown table (median seconds (min-max), median CPU seconds, pagevault's
# bytes written) and the goals' ratios; keeps everything under WORK/results/.
#
# --transfer-size SIZE: pagevault's backup chunk (--max-transfer-size, default 1M); a
# delta restore reads and decompresses every chunk that holds a changed page.
# --pattern spread|range|sparse: the 1% of pgbench_accounts' pages changed is every 100th
# page (spread, the default) or the first 1% of its pages (range: recent rows, say);
# sparse changes 0.1%, every 1000th page (the reads jump from one to the next).
# --compress lz4|none: both tools' codec (none: the frames a delta by WAL reads through
# are checked by their content digest instead of a CRC32C).
#
# Usage: bench/delta.sh [--work DIR] [--scale N] [--reps N] [--transfer-size SIZE]
#                       [--pattern spread|range|sparse] [--compress lz4|none] [--no-build]
# Environment: WORK_DIR, SCALE (400 = about 6 GB), REPS (3), PG17 (bin/ of PostgreSQL 17,
#              default /var/tmp/pagevault-tools/pg17/bin), PGBACKREST (default
#              /var/tmp/pagevault-tools/bin/pgbackrest), PAGEVAULT, NO_BUILD=1, QUIET_BUDGET
set -euo pipefail
{

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$ROOT/bench/lib.sh"
SCALE=${SCALE:-400}
REPS=${REPS:-3}
PG_BIN=${PG17:-/var/tmp/pagevault-tools/pg17/bin}
PGBR=${PGBACKREST:-/var/tmp/pagevault-tools/bin/pgbackrest}
TRANSFER=${TRANSFER:-1M}
PATTERN=${PATTERN:-spread}
COMPRESS=${COMPRESS:-lz4}
parse_options --work=WORK --scale=SCALE --reps=REPS --transfer-size=TRANSFER --pattern=PATTERN --compress=COMPRESS --no-build=NO_BUILD=1 -- "$@"
case $PATTERN in spread|range|sparse) ;; *) echo "--pattern: spread, range or sparse" >&2; exit 2 ;; esac
case $COMPRESS in lz4|none) ;; *) echo "--compress: lz4 or none" >&2; exit 2 ;; esac
need_posint --scale "$SCALE"
need_posint --reps "$REPS"
# At its peak: the cluster (about 15 MB a scale unit) and its pg_wal (about as much
# again, up to max_wal_size) three times (data, drifted copy, restore), two repositories.
mkdir -p "$WORK"
NEED_GB=$(( SCALE * 15 * 6 / 1024 + 5 ))
FREE_GB=$(df --output=avail -BG "$WORK" | tail -1 | tr -dc 0-9)
[ "$FREE_GB" -ge "$NEED_GB" ] || die "--scale $SCALE needs about $NEED_GB GB free under $WORK; it has $FREE_GB GB"
[ "$(id -u)" -eq 0 ] || { echo "run as root (drops the page cache, runs PostgreSQL as postgres)" >&2; exit 2; }
ensure_binary
need_pkg jq jq
[ -x "$PG_BIN/pgbench" ] || die "no PostgreSQL 17 at $PG_BIN (scripts/setup.sh installs it)"
[ -x "$PGBR" ] || die "no pgBackRest at $PGBR: build release/2.59.1 (meson setup build && ninja -C build) and copy build/src/pgbackrest there"

D=$WORK/delta
RUNDIR=$WORK/results/delta-$(date +%Y%m%d-%H%M%S)
DATA=$D/data PVREPO=$D/pv-repo BRREPO=$D/br-repo DRIFTED=$D/drifted R=$D/restore
PORT=55633
mkdir -p "$RUNDIR" "$D"
snapshot_binary "$RUNDIR"
chmod 755 "$RUNDIR" "$PV"
RESULTS=$RUNDIR/runs.tsv
printf 'rep\ttool\tphase\tseconds\tcpu_s\twritten_bytes\tcompared_bytes\n' > "$RESULTS"
psql_db() { "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p $PORT -U postgres -d bench "$@"; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
source "$ROOT/bench/vm-memory.sh"
cleanup() { as_pg "$PG_BIN/pg_ctl" -D "$DATA" -w -m fast stop >/dev/null 2>&1 || true; release_guest_memory; }
trap cleanup EXIT
hold_guest_memory

# ----------------------------------------------------------- the cluster ----
rm -rf "$D"/*; mkdir -p "$D/run" "$PVREPO" "$BRREPO"
chown -R postgres: "$D"
as_pg "$PG_BIN/initdb" -D "$DATA" --data-checksums --auth=trust -U postgres > "$D/initdb.log" 2>&1
cat > "$D/pgbackrest.conf" <<EOF
[global]
repo1-path=$BRREPO
process-max=2
compress-type=$COMPRESS
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
archive_command = '$PV archive-push %p --repo $PVREPO && $PGBR --config=$D/pgbackrest.conf --stanza=bench archive-push %p'
EOF
as_pg "$PG_BIN/pg_ctl" -D "$DATA" -l "$D/server.log" -w -o "-p $PORT -c listen_addresses=127.0.0.1 -k $D/run" start >/dev/null
"$PG_BIN/psql" -X -q -h 127.0.0.1 -p $PORT -U postgres -d postgres -c "CREATE DATABASE bench"
log "pgbench -i -s $SCALE"
"$PG_BIN/pgbench" -i -s "$SCALE" -q -h 127.0.0.1 -p $PORT -U postgres bench > "$D/load.log" 2>&1
psql_db -c "VACUUM (FREEZE, ANALYZE)" -c "CHECKPOINT"
as_pg "$PGBR" --config="$D/pgbackrest.conf" --stanza=bench stanza-create >/dev/null
DB_BYTES=$(psql_db -c "SELECT pg_database_size('bench')")

SRC="postgres://postgres@127.0.0.1:$PORT/postgres?pgdata=$DATA"
log "full backups"
as_pg "$PV" backup --source "$SRC" --repo "$PVREPO" --compress "$COMPRESS" --max-transfer-size "$TRANSFER" --json > "$RUNDIR/pagevault-backup.out"
as_pg "$PGBR" --config="$D/pgbackrest.conf" --stanza=bench --type=full backup > "$RUNDIR/pgbackrest-backup.out" 2>&1

log "pgbench_accounts' pages changed ($PATTERN), the server stopped"
case $PATTERN in
    spread) WHICH="((ctid::text::point)[0])::bigint % 100 = 0" ;;
    sparse) WHICH="((ctid::text::point)[0])::bigint % 1000 = 0" ;;
    range) WHICH="((ctid::text::point)[0])::bigint < (SELECT pg_relation_size('pgbench_accounts') / 8192 / 100)" ;;
esac
psql_db -c "UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE $WHICH AND ((ctid::text::point)[1])::int <= 5" \
    -c "CHECKPOINT"
as_pg "$PG_BIN/pg_ctl" -D "$DATA" -w -m fast stop >/dev/null
rm -rf "$DRIFTED"
cp -a "$DATA" "$DRIFTED"

# timed TOOL PHASE REP CMD...: wall and CPU seconds of CMD (its processes and the children
# they waited for), cold page cache; pagevault's bytes written and compared from its JSON.
# CPU: seconds of the children waited for so far (`times` is a builtin, run in this
# shell: inside $(...) it would report the subshell's children instead).
cpu_now() {
    times > "$RUNDIR/times.tmp"
    CPU=$(awk 'NR == 2 { t = 0; for (i = 1; i <= 2; i++) { split($i, a, "m"); sub("s", "", a[2]); t += a[1] * 60 + a[2] } printf "%.3f", t }' "$RUNDIR/times.tmp")
}
timed() {
    local tool=$1 phase=$2 rep=$3; shift 3
    drop_caches
    wait_disk_idle "$D"
    wait_quiet
    local t0 t1 c0 c1 out=$RUNDIR/$tool-$phase-$rep.out
    cpu_now; c0=$CPU; t0=$(now_ns)
    "$@" > "$out" 2>&1 || die "$tool $phase failed (see $out)"
    t1=$(now_ns); cpu_now; c1=$CPU
    local written="" compared=""
    if [ "$tool" = pagevault ]; then
        written=$(jq -r '.delta.written_bytes // ""' "$out" 2>/dev/null || true)
        compared=$(jq -r '.delta.compared_bytes // ""' "$out" 2>/dev/null || true)
    fi
    local cpu
    cpu=$(awk -v a="$c0" -v b="$c1" 'BEGIN { printf "%.2f", b - a }')
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$rep" "$tool" "$phase" "$(( (t1 - t0) / 1000000 ))e-3" "$cpu" "$written" "$compared" >> "$RESULTS"
    log "  $tool $phase $rep: $(( (t1 - t0) / 1000000 )) ms, CPU $cpu s${written:+, $written bytes written}"
}
empty_target() { rm -rf "$R"; install -d -m 700 -o postgres -g postgres "$R"; }
drifted_target() { rm -rf "$R"; cp -a "$DRIFTED" "$R"; }

# --------------------------------------------------------------- restores ----
BR() { as_pg "$PGBR" --config="$D/pgbackrest.conf" --stanza=bench --pg1-path="$R" "$@"; }
for ((k = 1; k <= REPS; k++)); do
    empty_target
    timed pagevault full "$k" "$PV" restore --repo "$PVREPO" --to "$R" --owner postgres --json
    drifted_target
    timed pagevault delta "$k" "$PV" restore --repo "$PVREPO" --to "$R" --owner postgres --delta --json
    drifted_target
    timed pagevault deltawal "$k" "$PV" restore --repo "$PVREPO" --to "$R" --owner postgres --delta wal --json
    empty_target
    timed pgbackrest full "$k" BR restore
    drifted_target
    timed pgbackrest delta "$k" BR --delta restore
done
rm -rf "$R"

# ------------------------------------------------------------- the table ----
export RESULTS DB_BYTES PATTERN TRANSFER
python3 - > "$RUNDIR/table.md" <<'PY'
import csv, os, statistics
rows = list(csv.DictReader(open(os.environ["RESULTS"]), delimiter="\t"))
def vals(tool, phase, key="seconds"):
    return [float(r[key]) for r in rows if r["tool"] == tool and r["phase"] == phase and r[key]]
def med(tool, phase, key="seconds"):
    v = vals(tool, phase, key)
    return statistics.median(v) if v else None
def cell(tool, phase):
    v = vals(tool, phase)
    if not v:
        return "-"
    return f"{statistics.median(v):.2f}" + (f" ({min(v):.2f}-{max(v):.2f})" if len(v) > 1 else "")
share = "0.1%" if os.environ['PATTERN'] == "sparse" else "1%"
print(f"database {int(os.environ['DB_BYTES']) / 2**30:.2f} GiB; {share} of pgbench_accounts' pages changed since the set ({os.environ['PATTERN']}); pagevault's chunk {os.environ['TRANSFER']}\n")
print("Each cell: the median seconds (min-max) of its runs; CPU: median CPU seconds.\n")
print("| tool | full restore s | full CPU s | delta restore s | delta CPU s | delta wal s | delta wal CPU s |")
print("|---|---:|---:|---:|---:|---:|---:|")
fmt = lambda x: "-" if x is None else f"{x:.2f}"
for t in ("pagevault", "pgbackrest"):
    print(f"| {t} | {cell(t, 'full')} | {fmt(med(t, 'full', 'cpu_s'))} | {cell(t, 'delta')} | {fmt(med(t, 'delta', 'cpu_s'))} | {cell(t, 'deltawal')} | {fmt(med(t, 'deltawal', 'cpu_s'))} |")
for phase, name in (("delta", "--delta"), ("deltawal", "--delta wal")):
    w, c = med("pagevault", phase, "written_bytes"), med("pagevault", phase, "compared_bytes")
    if w is not None:
        print(f"\npagevault {name} wrote {w / 2**20:.1f} MiB and compared {c / 2**20:.1f} MiB (medians).")
print("\nGoals (ratios of the medians above):")
pf, pd, bd = med("pagevault", "full"), med("pagevault", "delta"), med("pgbackrest", "delta")
if pf and pd:
    print(f"- delta / full restore (pagevault) = {pd / pf:.3f} (goal <= 0.25)")
pw = med("pagevault", "deltawal")
if pf and pw:
    print(f"- delta wal / full restore (pagevault) = {pw / pf:.3f} (goal <= 0.25)")
if pd and bd:
    print(f"- delta: pgbackrest / pagevault = {bd / pd:.2f}x (goal > 1x)")
PY
cat "$RUNDIR/table.md"
log "results in $RUNDIR"
exit 0
}
