#!/usr/bin/env bash
# bench/archive.sh: does archive-push with block summaries keep up with pgbench on this
# machine, and what does summarizing cost (issue 21's last goal: no .ready pile-up,
# summarizing at most 15% of archive-push's CPU)?
#
# One PostgreSQL 15 cluster with data checksums (pgbench at SCALE) archiving into a
# pagevault repository. ROUNDS times, alternating: pgbench unthrottled (2 clients, 2
# threads) for SECS seconds with archive_command = pagevault archive-push --summaries on,
# then off. During each run the .ready files in pg_wal/archive_status are counted every
# half second; after it, how long the archiver takes to drain them. Every push prints its
# process's CPU seconds and those of summarizing (getrusage, microseconds).
# Prints one markdown table and the ratios; keeps everything under WORK/results/.
#
# Usage: bench/archive.sh [--work DIR] [--scale N] [--rounds N] [--secs N] [--no-build]
# Environment: WORK_DIR, SCALE (50), ROUNDS (3), SECS (60), PAGEVAULT, NO_BUILD=1, QUIET_BUDGET
set -euo pipefail
{

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$ROOT/bench/lib.sh"
SCALE=${SCALE:-50}
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-60}
PG_BIN=/usr/lib/postgresql/15/bin
parse_options --work=WORK --scale=SCALE --rounds=ROUNDS --secs=SECS --no-build=NO_BUILD=1 -- "$@"
need_posint --scale "$SCALE"; need_posint --rounds "$ROUNDS"; need_posint --secs "$SECS"
[ "$(id -u)" -eq 0 ] || { echo "run as root (runs PostgreSQL as postgres)" >&2; exit 2; }
ensure_binary
[ -x "$PG_BIN/pgbench" ] || die "no PostgreSQL 15 at $PG_BIN (scripts/setup.sh installs it)"

D=$WORK/archive
RUNDIR=$WORK/results/archive-$(date +%Y%m%d-%H%M%S)
DATA=$D/data REPO=$D/repo
PORT=55633
mkdir -p "$RUNDIR"
snapshot_binary "$RUNDIR"
chmod 755 "$RUNDIR" "$PV"
chown postgres: "$RUNDIR"
psql_db() { "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p $PORT -U postgres -d postgres "$@"; }
pg_stop() { as_pg "$PG_BIN/pg_ctl" -D "$1" -w -m fast stop >/dev/null 2>&1 || true; }
trap_signals 'pg_stop "$DATA"'

fresh_cluster_dir "$D" $((SCALE * 40 + 4096)) "the cluster and its archive"
bench_initdb "$DATA" "$D/run" "bench/archive.sh"
echo "archive_mode = on" >> "$DATA/postgresql.conf"
echo "archive_command = '/bin/true'" >> "$DATA/postgresql.conf"
as_pg mkdir -p "$REPO"
as_pg "$PG_BIN/pg_ctl" -D "$DATA" -l "$D/run/server.log" -w \
    -o "-p $PORT -c listen_addresses=127.0.0.1 -c unix_socket_directories=$D/run" start >/dev/null
log "pgbench -i -s $SCALE"
as_pg "$PG_BIN/pgbench" -h 127.0.0.1 -p $PORT -U postgres -i -q -s "$SCALE" postgres >/dev/null 2>&1
psql_db -c "VACUUM" -c "CHECKPOINT"

ready() { find "$DATA/pg_wal/archive_status" -name '*.ready' 2>/dev/null | wc -l; }
# wait_drained: until no .ready file is left (at most 600 s); prints the seconds waited.
wait_drained() {
    local t0; t0=$(now_ns)
    for _ in $(seq 1 6000); do [ "$(ready)" -eq 0 ] && break; sleep 0.1; done
    awk -v a="$t0" -v b="$(now_ns)" 'BEGIN {printf "%.2f", (b - a) / 1e9}'
}

RESULTS=$RUNDIR/runs.tsv
printf 'round\tsummaries\ttps\tsegments\tmax_ready\tdrain_s\tcpu_s\tsummary_s\n' > "$RESULTS"
for round in $(seq 1 "$ROUNDS"); do
    for mode in on off; do
        tag=$RUNDIR/push-$round-$mode
        as_pg touch "$tag.log"
        psql_db -c "ALTER SYSTEM SET archive_command = '$PV archive-push %p --repo $REPO --summaries $mode >> $tag.log'" \
            -c "SELECT pg_reload_conf()" >/dev/null
        psql_db -c "SELECT pg_switch_wal()" >/dev/null
        wait_drained >/dev/null
        # Each run starts after a checkpoint: the same full-page images either way.
        psql_db -c "CHECKPOINT"
        psql_db -c "SELECT pg_switch_wal()" >/dev/null
        wait_drained >/dev/null
        : > "$tag.log"
        wait_quiet
        log "round $round, summaries $mode: pgbench for $SECS s"
        as_pg "$PG_BIN/pgbench" -h 127.0.0.1 -p $PORT -U postgres -n -c 2 -j 2 -T "$SECS" postgres \
            > "$tag.pgbench" 2>&1 &
        bench=$!
        max=0
        while kill -0 $bench 2>/dev/null; do
            n=$(ready); [ "$n" -gt "$max" ] && max=$n
            sleep 0.5
        done
        wait $bench || die "pgbench failed (see $tag.pgbench)"
        drain=$(wait_drained)
        tps=$(awk '/^tps/ {printf "%.0f", $3; exit}' "$tag.pgbench")
        segs=$(grep -c 'archived [0-9A-F]\{24\} ' "$tag.log" || true)
        cpu=$(sed -n 's/.* \([0-9.]*\) s CPU (summary.*/\1/p' "$tag.log" | awk '{s += $1} END {printf "%.3f", s}')
        sum=$(sed -n 's/.*(summary \([0-9.]*\) s CPU).*/\1/p' "$tag.log" | awk '{s += $1} END {printf "%.3f", s}')
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$mode" "$tps" "$segs" "$max" "$drain" "$cpu" "$sum" >> "$RESULTS"
        log "  $tps tps, $segs segments, at most $max .ready, drained in $drain s, push CPU $cpu s (summaries $sum s)"
    done
done

echo
echo "bench/archive.sh: pagevault $commit$dirty (built $PV_BUILT), PostgreSQL 15, pgbench scale $SCALE, -c 2 -j 2, $SECS s, $ROUNDS rounds $build_note"
echo
python3 - "$RESULTS" <<'PY'
import csv, sys, statistics as st
rows = list(csv.DictReader(open(sys.argv[1]), delimiter='\t'))
print("| summaries | round | tps | segments | most .ready | drain s | push CPU s | CPU ms / segment | summarizing ms / segment |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
per = {}
for r in sorted(rows, key=lambda r: (r['summaries'], int(r['round']))):
    segs = max(int(r['segments']), 1)
    cpu_ms = 1000 * float(r['cpu_s']) / segs
    sum_ms = 1000 * float(r['summary_s']) / segs
    per.setdefault(r['summaries'], []).append((cpu_ms, sum_ms, int(r['max_ready'])))
    print(f"| {r['summaries']} | {r['round']} | {r['tps']} | {r['segments']} | {r['max_ready']} | {r['drain_s']} | {r['cpu_s']} | {cpu_ms:.1f} | {sum_ms:.1f} |")
on = per.get('on', []); off = per.get('off', [])
if on and off:
    on_cpu = st.median(c for c, _, _ in on); off_cpu = st.median(c for c, _, _ in off)
    share = st.median(s / c for c, s, _ in on if c > 0)
    print()
    print(f"CPU per segment, medians: summaries on {on_cpu:.1f} ms, off {off_cpu:.1f} ms: "
          f"summarizing costs {100 * (on_cpu - off_cpu) / on_cpu:.1f}% of archive-push's CPU "
          f"(its own timer: {100 * share:.1f}%; goal at most 15%)")
    print(f"most .ready files at once: {max(m for _, _, m in on)} with summaries, "
          f"{max(m for _, _, m in off)} without (goal: no pile-up)")
PY
}
