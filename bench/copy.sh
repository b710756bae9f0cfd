#!/usr/bin/env bash
# bench/copy.sh: `pagevault copy` of a set between repositories beside copying the same
# bytes with the plain tools (issue 54: at least the slower store's line rate).
#
# A tree of --size-mb (half random, half text) is backed up with lz4 into a directory
# repository. Then RUNS times round-robin, cold page cache each:
#   copy to dir    pagevault copy --repo A --to-repo B (a new directory repository):
#                  every frame checked on the way, the set recorded once complete
#   cp             cp -r of the set's stripes into a new directory, then sync -f
#   copy to MinIO  pagevault copy --repo A --to-repo s3://bench/copy-N (TLS on 127.0.0.1)
#   PUT            the same stripes uploaded by the AWS SDK for JavaScript, one PUT each
# Prints the medians (min-max), MB/s of the stored bytes and each copy's time over its
# baseline's (goal: at most 1x, the line rate of the slower side).
# Everything is kept under WORK/results/copy-DATE/.
#
# Usage: bench/copy.sh [--work DIR] [--size-mb N] [--runs N] [--no-build]
# Environment: WORK_DIR, SIZE_MB (1024), RUNS (3), PAGEVAULT, NO_BUILD=1, PAGEVAULT_TOOLS
# Quick check: bench/copy.sh --size-mb 64 --runs 1
# Needs root (drops the page cache), MinIO and Node's S3 SDK under PAGEVAULT_TOOLS
# (scripts/setup.sh), openssl.
set -euo pipefail
{

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$ROOT/bench/lib.sh"
WORK=${WORK_DIR:-$WORK/copy}
SIZE_MB=${SIZE_MB:-1024}
RUNS=${RUNS:-3}
TOOLS=${PAGEVAULT_TOOLS:-/var/tmp/pagevault-tools}
parse_options --work=WORK --size-mb=SIZE_MB --runs=RUNS --no-build=NO_BUILD=1 -- "$@"
for v in SIZE_MB RUNS; do need_posint "--${v//_/-}" "${!v}"; done
[ "$(id -u)" -eq 0 ] || { echo "run as root (drops the page cache)" >&2; exit 2; }
ensure_binary
need_tools "$TOOLS/bin/minio" openssl node

bench_rundir copy
D=$WORK/data SRC=$WORK/data/src A=$WORK/data/a
cleanup() {
    minio_stop
    rm -rf "$WORK/minio" "$D" 2>/dev/null || true
    rm -f "$RUNDIR/pagevault"
}
trap_signals cleanup
S3_PORT=59114 BUCKET=bench
minio_start "$WORK/minio" "$S3_PORT" "$BUCKET"
STORE_JS=$ROOT/tests/tools/store.js

rm -rf "$D"
mkdir -p "$SRC"
log "a tree of $SIZE_MB MB, backed up into $A"
for i in $(seq 1 $((SIZE_MB / 64))); do
    if [ $((i % 2)) -eq 0 ]; then
        head -c $((64 << 20)) /dev/urandom > "$SRC/r$i"
    else
        head -c $((64 << 20)) < <(yes "row $i of a text that compresses, with some words repeated $RANDOM") > "$SRC/t$i"
    fi
done
"$PV" init --repo "$A" > "$RUNDIR/init.log"
"$PV" backup --source "files:$SRC" --repo "$A" --compress lz4 --stripes 2 --json > "$RUNDIR/backup.json"
SET=$(find "$A/sets" -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | head -1)
mapfile -t STRIPES < <(find "$A/sets/$SET" -name '*.pv' | sort)
BYTES=$(du -cb "${STRIPES[@]}" | tail -1 | cut -f1)
log "set $SET: ${#STRIPES[@]} stripes, $BYTES bytes"

RESULTS=$RUNDIR/runs.tsv
printf 'case\trun\tseconds\n' > "$RESULTS"
timed() { # timed CASE RUN CMD...
    local t0 t1 secs
    sync
    echo 3 > /proc/sys/vm/drop_caches
    wait_quiet
    t0=$(now_ns)
    "${@:3}" > "$RUNDIR/$1-$2.out" 2>&1 || die "$1 failed (see $RUNDIR/$1-$2.out)"
    t1=$(now_ns)
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", (b - a) / 1e9}')
    printf '%s\t%s\t%s\n' "$1" "$2" "$secs" >> "$RESULTS"
    log "$1, run $2: $secs s"
}
cp_sync() { mkdir -p "$1" && cp -r "${STRIPES[@]}" "$1/" && sync -f "$1"; }
put_all() { for s in "${STRIPES[@]}"; do node "$STORE_JS" s3 putfile "$BUCKET" "put-$1/$(basename "$s")" "$s"; done; }
for run in $(seq 1 "$RUNS"); do
    "$PV" init --repo "$D/b$run" > /dev/null
    "$PV" init --repo "s3://$BUCKET/copy-$run" > /dev/null
    timed "copy to dir" "$run" "$PV" copy --repo "$A" --to-repo "$D/b$run" --json
    timed cp "$run" cp_sync "$D/c$run"
    timed "copy to MinIO" "$run" "$PV" copy --repo "$A" --to-repo "s3://$BUCKET/copy-$run" --json
    timed PUT "$run" put_all "$run"
    rm -rf "$D/b$run" "$D/c$run"
done

python3 - "$RESULTS" "$commit$dirty" "$BYTES" <<'PY'
import csv, statistics as st, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter='\t'))
def secs(c):
    return [float(r['seconds']) for r in rows if r['case'] == c]
mb = int(sys.argv[3]) / 1e6
runs = max(int(r['run']) for r in rows)
print(f"\npagevault {sys.argv[2]}; a set of {mb:.0f} MB stored (2 stripes); median (min-max) of {runs} runs, cold page cache\n")
print("| case | s | MB/s | over its baseline |")
print("|---|---:|---:|---:|")
for c, base in (("copy to dir", "cp"), ("cp", None), ("copy to MinIO", "PUT"), ("PUT", None)):
    v = secs(c)
    ratio = f"{st.median(v) / st.median(secs(base)):.2f}x" if base else "-"
    print(f"| {c} | {st.median(v):.2f} ({min(v):.2f}-{max(v):.2f}) | {mb / st.median(v):.0f} | {ratio} |")
print("\ngoal: each copy at most 1x its baseline (the line rate of the slower side)")
PY
echo "(raw: $RESULTS)"
}
