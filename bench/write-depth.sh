#!/usr/bin/env bash
# bench/write-depth.sh: one set restored with each write rule (--direct-writes) and write
# depth (--write-depth), beside fio writing the same bytes at its best, in turn.
#
# Usage: bench/write-depth.sh --from SET.pv [--modes auto,off] [--depths 1,2,4,8] [--reps 3]
#   --from    a set (one stripe file) on the disk to measure
# Every run: the set read into the page cache, the target removed, the restore timed with
# a `sync -f` of the target after it (what makes it durable); peak RSS from GNU time. fio:
# the restored size written with O_DIRECT by 2 writers with 8 writes of 1 MiB in flight
# each (bench/pg.sh's device floor). Prints per rule and depth: seconds median (min-max),
# MB/s, peak RSS, and the median over fio's median.
set -euo pipefail
{
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$ROOT/bench/lib.sh"
FROM=""; MODES=auto,off; DEPTHS=1,2,4,8; REPS=3
parse_options --from=FROM --modes=MODES --depths=DEPTHS --reps=REPS -- "$@"
[ -f "$FROM" ] || die "--from SET.pv: a set's stripe file (try --help)"
need_posint REPS "$REPS"
need_pkg fio fio
need_pkg /usr/bin/time time
[ -x "$PV" ] || die "no pagevault at $PV (build it: cargo build --release)"
OUT=$(dirname "$FROM")/write-depth
RESULTS=$(mktemp)
IFS=, read -r -a modes <<< "$MODES"
IFS=, read -r -a depths <<< "$DEPTHS"
size=0
timed() { # timed LABEL COMMAND...: seconds and peak RSS (KiB) of COMMAND plus sync -f
    local label=$1 t0 t1
    shift
    sync; wait_quiet
    t0=$(date +%s%N)
    /usr/bin/time -f %M -o "$OUT.rss" "$@" > "$OUT.log" 2> "$OUT.err" || return 1
    sync -f "$OUT"
    t1=$(date +%s%N)
    printf '%s\t%s\t%s\n' "$label" "$(( (t1 - t0) / 1000000 ))" "$(tail -1 "$OUT.rss")" >> "$RESULTS"
}
for ((rep = 1; rep <= REPS; rep++)); do
    for m in "${modes[@]}"; do
        for d in "${depths[@]}"; do
            cat "$FROM" > /dev/null
            rm -rf "$OUT"
            timed "$m $d" "$PV" restore --from "$FROM" --to "$OUT" --direct-writes "$m" --write-depth "$d" --json ||
                die "restore failed: $(tail -3 "$OUT.err")"
            size=$(du -sb "$OUT" | cut -f1)
        done
    done
    rm -rf "$OUT"; mkdir -p "$OUT"
    timed "fio" fio --name=w --directory="$OUT" --ioengine=libaio --direct=1 --bs=1M --iodepth=8 \
        --rw=write --size=$((size / 2)) --numjobs=2 --fallocate=none
    rm -rf "$OUT"
    log "repetition $rep of $REPS done"
done
python3 - "$RESULTS" "$size" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    k, ms, rss = line.rstrip("\n").split("\t")
    runs.setdefault(k, []).append((int(ms) / 1000, int(rss) if rss.isdigit() else 0))
size = int(sys.argv[2])
fio = statistics.median(s for s, _ in runs["fio"])
print(f"| rule | writers | seconds median (min-max) | MB/s | peak RSS MiB | ÷ fio |")
print("|---|---:|---:|---:|---:|---:|")
for k, v in runs.items():
    secs = [s for s, _ in v]
    med = statistics.median(secs)
    rule, _, depth = k.partition(" ")
    rss = "-" if k == "fio" else f"{max(r for _, r in v) / 1024:.0f}"
    print(f"| {rule} | {depth or '-'} | {med:.2f} ({min(secs):.2f}-{max(secs):.2f}) | {size / 1048576 / med:,.0f} | {rss} | {med / fio:.2f}x |")
PY
rm -f "$RESULTS" "$OUT.log" "$OUT.err" "$OUT.rss"
exit 0
}
