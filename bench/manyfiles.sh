#!/usr/bin/env bash
# bench/manyfiles.sh: many small files (issue 38, items 4 and 5): backup and restore time,
# CPU and peak RSS beside cp -a, tar, pg_basebackup and pgBackRest 2.59.1 (repo-bundle=y).
#
# Trees (plain `files:` sources), one per --files N (default 300000 and 1000000): N files
# of 0-8 KiB (random sizes, half random bytes, half text) in N/1000 directories, made once
# under WORK/trees. REPS times, the tools in turn, each with a cold page cache and into a
# new directory (the last copy is removed after the run, outside the timing):
#   pagevault backup (lz4) into a new repository, pagevault restore of it (+ its syncfs),
#   tar cf of the tree into a file + sync, cp -a of the tree + sync.
# With --relations R (default 0: none), a PostgreSQL 17 cluster holding R tables, each
# with a text column and a primary key (heap, index, TOAST heap and TOAST index: about 4R
# files), and: pagevault backup and restore, pg_basebackup -Fp (+ sync), pgBackRest
# backup (process-max 2, lz4, repo-bundle=y) and restore.
# Prints one markdown table (median seconds (min-max), median CPU seconds, median peak
# RSS) and pagevault's memory bound (its pool + 64 MiB + 200 bytes per file); keeps
# everything under WORK/results/.
#
# Usage: bench/manyfiles.sh [--work DIR] [--files N]... [--relations R] [--reps N] [--no-build]
# Environment: WORK_DIR, REPS (2), PG17, PGBACKREST, PAGEVAULT, NO_BUILD=1, QUIET_BUDGET
set -euo pipefail
{

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$ROOT/bench/lib.sh"
REPS=${REPS:-2}
RELATIONS=0
FILES=()
PG_BIN=${PG17:-/var/tmp/pagevault-tools/pg17/bin}
PGBR=${PGBACKREST:-/var/tmp/pagevault-tools/bin/pgbackrest}
parse_options --work=WORK --files=FILES+ --relations=RELATIONS --reps=REPS --no-build=NO_BUILD=1 -- "$@"
[ ${#FILES[@]} -gt 0 ] || FILES=(300000 1000000)
for n in "${FILES[@]}"; do need_posint --files "$n"; done
need_posint --reps "$REPS"
[[ $RELATIONS =~ ^[0-9]+$ ]] || { echo "--relations must be a number" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "run as root (drops the page cache, runs PostgreSQL as postgres)" >&2; exit 2; }
ensure_binary
[ -x /usr/bin/time ] || need_pkg /usr/bin/time time
RUNDIR=$WORK/results/manyfiles-$(date +%Y%m%d-%H%M%S)
mkdir -p "$RUNDIR" "$WORK/trees"
RESULTS=$RUNDIR/results.tsv
printf 'rep\tcase\ttool\top\tseconds\tcpu_s\trss_kib\tfiles\n' > "$RESULTS"
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }

# timed CASE TOOL OP REP FILES CMD...: wall seconds, CPU seconds and peak RSS (GNU time,
# the largest process of the command's tree), cold page cache.
timed() {
    local case=$1 tool=$2 op=$3 rep=$4 files=$5; shift 5
    drop_caches
    wait_quiet
    local out=$RUNDIR/$case-$tool-$op-$rep.out
    /usr/bin/time -o "$out.time" -f '%e %U %S %M' "$@" > "$out" 2>&1 || die "$tool $op failed (see $out)"
    read -r e u s m < "$out.time"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$rep" "$case" "$tool" "$op" "$e" \
        "$(awk -v u="$u" -v s="$s" 'BEGIN { printf "%.2f", u + s }')" "$m" "$files" >> "$RESULTS"
    log "  $case $tool $op $rep: $e s, RSS $((m / 1024)) MiB"
}

# ------------------------------------------------------------------ trees ----
make_tree() {
    local dir=$1 n=$2
    [ -f "$dir.done" ] && return
    log "making $n files under $dir"
    rm -rf "$dir"
    python3 - "$dir" "$n" <<'PY'
import os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
dirs = max(1, n // 1000)
random.seed(42)
blob = os.urandom(4096) + b"pagevault row data " * 220
for d in range(dirs):
    base = f"{root}/d{d:04}/"
    os.makedirs(base)
    for i in range(n // dirs + (1 if d < n % dirs else 0)):
        sz, off = random.randint(0, 8192), random.randint(0, 4096)
        fd = os.open(base + f"f{i:05}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        if sz:
            os.write(fd, blob[off:off + sz])
        os.close(fd)
PY
    touch "$dir.done"
}

T=$WORK/target
for n in "${FILES[@]}"; do
    tree=$WORK/trees/files-$n
    make_tree "$tree" "$n"
    case=files-$n
    for ((k = 1; k <= REPS; k++)); do
        repo=$WORK/repo-$n
        rm -rf "$repo" "$T"; drop_caches
        timed "$case" pagevault backup "$k" "$n" "$PV" backup --source "files:$tree" --repo "$repo" --compress lz4 --json
        timed "$case" pagevault restore "$k" "$n" "$PV" restore --repo "$repo" --to "$T" --json
        [ "$k" -gt 1 ] || diff -rq "$tree" "$T" > /dev/null || die "the restored tree differs from $tree"
        rm -rf "$T" "$repo"
        timed "$case" tar backup "$k" "$n" sh -c '"$@" && sync' _ tar cf "$WORK/tree.tar" -C "$tree" .
        rm -f "$WORK/tree.tar"
        timed "$case" cp-a restore "$k" "$n" sh -c '"$@" && sync' _ cp -a "$tree" "$T"
        rm -rf "$T"
    done
done

# ------------------------------------------------------------- PostgreSQL ----
if [ "$RELATIONS" -gt 0 ]; then
    [ -x "$PG_BIN/pg_basebackup" ] || die "no PostgreSQL 17 at $PG_BIN (scripts/setup.sh installs it)"
    use_current_pgbackrest
    as_pg() { runuser -u postgres -- "$@"; }
    PGU=(runuser -u postgres --)
    D=$WORK/pg-rel-$RELATIONS DATA=$WORK/pg-rel-$RELATIONS/data PORT=55491
    PVREPO=$D/pv-repo BRREPO=$D/br-repo
    write_conf() {
        cat > "$D/pgbackrest.conf" <<EOF
[global]
repo1-path=$BRREPO
process-max=2
compress-type=lz4
repo1-bundle=y
start-fast=y
archive-check=n
log-level-console=warn
[bench]
pg1-path=$DATA
pg1-port=$PORT
pg1-socket-path=$D/run
EOF
        chown postgres: "$D/pgbackrest.conf"
    }
    if [ ! -f "$D/made" ]; then
        rm -rf "$D"; mkdir -p "$D/run" "$PVREPO" "$BRREPO"; chown -R postgres: "$D"
        as_pg "$PG_BIN/initdb" -D "$DATA" --data-checksums --auth=trust -U postgres > "$D/initdb.log" 2>&1
        write_conf
        cat >> "$DATA/postgresql.conf" <<EOF
archive_mode = on
archive_command = '$PV archive-push %p --repo $PVREPO && $PGBR --config=$D/pgbackrest.conf --stanza=bench archive-push %p'
max_locks_per_transaction = 4096
EOF
        as_pg "$PG_BIN/pg_ctl" -D "$DATA" -l "$D/server.log" -w -o "-p $PORT -c listen_addresses=127.0.0.1 -k $D/run" start >/dev/null
        as_pg "$PGBR" --config="$D/pgbackrest.conf" --stanza=bench stanza-create > /dev/null
        log "creating $RELATIONS tables (about $((RELATIONS * 4)) files)"
        for ((b = 0; b < RELATIONS; b += 1000)); do
            "$PG_BIN/psql" -X -q -h 127.0.0.1 -p $PORT -U postgres -d postgres -c \
                "DO \$\$ BEGIN FOR i IN $b..$((b + 999 < RELATIONS - 1 ? b + 999 : RELATIONS - 1)) LOOP EXECUTE format('CREATE TABLE t%s (id int PRIMARY KEY, v text); INSERT INTO t%s VALUES (1, repeat(''x'', 100))', i, i); END LOOP; END \$\$"
        done
        "$PG_BIN/psql" -X -q -h 127.0.0.1 -p $PORT -U postgres -d postgres -c CHECKPOINT
        touch "$D/made"
    else
        as_pg "$PG_BIN/pg_ctl" -D "$DATA" -l "$D/server.log" -w -o "-p $PORT -c listen_addresses=127.0.0.1 -k $D/run" start >/dev/null
    fi
    PGFILES=$(find "$DATA" -type f | wc -l)
    SRC="postgres://postgres@127.0.0.1:$PORT/postgres?pgdata=$DATA"
    BR=("${PGU[@]}" "$PGBR" --config="$D/pgbackrest.conf" --stanza=bench)
    case=pg-$RELATIONS-relations
    for ((k = 1; k <= REPS; k++)); do
        rm -rf "$T"; install -d -m 700 -o postgres -g postgres "$T"
        timed "$case" pagevault backup "$k" "$PGFILES" "${PGU[@]}" "$PV" backup --source "$SRC" --repo "$PVREPO" --compress lz4 --json
        timed "$case" pgbackrest backup "$k" "$PGFILES" "${BR[@]}" --type=full backup
        timed "$case" pg_basebackup backup "$k" "$PGFILES" sh -c '"$@" && sync' _ "${PGU[@]}" "$PG_BIN/pg_basebackup" -h 127.0.0.1 -p $PORT -U postgres -D "$T" -Fp -X none -c fast --no-sync
        rm -rf "$T"
        timed "$case" pagevault restore "$k" "$PGFILES" "$PV" restore --repo "$PVREPO" --to "$T" --owner postgres --json
        rm -rf "$T"; install -d -m 700 -o postgres -g postgres "$T"
        timed "$case" pgbackrest restore "$k" "$PGFILES" "${BR[@]}" --pg1-path="$T" restore
        rm -rf "$T"
    done
    as_pg "$PG_BIN/pg_ctl" -D "$DATA" -w -m fast stop > /dev/null
fi

# ------------------------------------------------------------- the table ----
export RESULTS RUNDIR
python3 - > "$RUNDIR/table.md" <<'PY'
import csv, os, statistics
rows = list(csv.DictReader(open(os.environ["RESULTS"]), delimiter="\t"))
cases = list(dict.fromkeys(r["case"] for r in rows))
import glob, json
def pool(c, op):
    # The pool each run reports (it grows with the memory budget): their median.
    v = []
    for f in glob.glob(f"{os.environ['RUNDIR']}/{c}-pagevault-{op}-*.out"):
        try:
            v.append(json.load(open(f))["pool_bytes"])
        except (ValueError, KeyError):
            pass
    return statistics.median(v) if v else 0
print("Each cell: median seconds (min-max) of the runs, median CPU seconds, median peak RSS.\n")
print("| case | files | tool | op | seconds | CPU s | peak RSS MiB | pagevault bound MiB |")
print("|---|---:|---|---|---:|---:|---:|---:|")
for c in cases:
    for tool, op in dict.fromkeys((r["tool"], r["op"]) for r in rows if r["case"] == c):
        rs = [r for r in rows if r["case"] == c and r["tool"] == tool and r["op"] == op]
        s = [float(r["seconds"]) for r in rs]
        cpu = statistics.median(float(r["cpu_s"]) for r in rs)
        rss = statistics.median(int(r["rss_kib"]) for r in rs) / 1024
        n = int(rs[0]["files"])
        cell = f"{statistics.median(s):.2f}" + (f" ({min(s):.2f}-{max(s):.2f})" if len(s) > 1 else "")
        bound = (pool(c, op) / 2**20 + 64 + 200 * n / 2**20) if tool == "pagevault" else None
        print(f"| {c} | {n:,} | {tool} | {op} | {cell} | {cpu:.1f} | {rss:.0f} | {'-' if bound is None else f'{bound:.0f}'} |")
def med(c, tool, op):
    s = [float(r["seconds"]) for r in rows if r["case"] == c and r["tool"] == tool and r["op"] == op]
    return statistics.median(s) if s else None
print("\nRatios (medians; > 1: pagevault faster):")
for c in cases:
    for other, op in (("tar", "backup"), ("cp-a", "restore"), ("pg_basebackup", "backup"),
                      ("pgbackrest", "backup"), ("pgbackrest", "restore")):
        a, b = med(c, "pagevault", op), med(c, other, op)
        if a and b:
            print(f"- {c}: {other} / pagevault {op} = {b / a:.2f}x")
PY
cat "$RUNDIR/table.md"
log "results in $RUNDIR"
exit 0
}
