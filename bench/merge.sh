#!/usr/bin/env bash
# bench/merge.sh: `pagevault merge` of one chain by two binaries, in turn (before and after
# a change), each run on a fresh copy of the repository.
#
# Usage: bench/merge.sh --repo DIR --a BINARY --b BINARY [--reps 3] [--compress CODEC]
#   --repo      a repository on disk whose newest chain is a full and later sets (copied
#               per run to WORK/merge/run-N; the original is never changed)
#   --a, --b    the two pagevault binaries (A runs first in odd repetitions, B in even)
#   --compress  passed to merge (default: none given, the full's codec)
# Prints per binary: wall seconds median (min-max), CPU seconds (user + system), peak RSS,
# the chunks kept as stored (`kept_frames`), and B over A. The copies' page cache is warm:
# every run reads its copy once before it is timed.
set -euo pipefail
{
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$ROOT/bench/lib.sh"
REPO=""; A=""; B=""; REPS=3; COMPRESS=""
parse_options --repo=REPO --a=A --b=B --reps=REPS --compress=COMPRESS -- "$@"
[ -n "$REPO" ] && [ -d "$REPO" ] || die "--repo DIR: a repository on disk (try --help)"
[ -x "$A" ] && [ -x "$B" ] || die "--a and --b: two pagevault binaries (try --help)"
need_posint REPS "$REPS"
OUT=$WORK/merge
mkdir -p "$OUT"
RESULTS=$OUT/runs.tsv
printf 'bin\trep\tseconds\tcpu_s\trss_kib\tkept\n' > "$RESULTS"
extra=(); [ -n "$COMPRESS" ] && extra=(--compress "$COMPRESS")
run() { # run LABEL BINARY REP
    local d=$OUT/run-$1-$3 t0 t1
    rm -rf "$d"; cp -a "$REPO" "$d"; find "$d" -type f -exec cat {} + > /dev/null
    sync; wait_quiet
    t0=$(now_ns)
    /usr/bin/time -o "$OUT/time" -f '%e %U %S %M' "$2" merge --repo "$d" "${extra[@]}" --json > "$OUT/out.json" 2> "$OUT/err" ||
        { tail -5 "$OUT/err" >&2; die "merge by $2 failed"; }
    t1=$(now_ns)
    read -r _ u s m < "$OUT/time"
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$3" "$(awk -v n=$((t1 - t0)) 'BEGIN {printf "%.3f", n / 1e9}')" \
        "$(awk -v u="$u" -v s="$s" 'BEGIN {printf "%.2f", u + s}')" "$m" \
        "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["backup"].get("kept_frames", 0))' "$OUT/out.json")" >> "$RESULTS"
    rm -rf "$d"
}
for ((r = 1; r <= REPS; r++)); do
    if [ $((r % 2)) = 1 ]; then run A "$A" "$r"; run B "$B" "$r"; else run B "$B" "$r"; run A "$A" "$r"; fi
    log "repetition $r of $REPS done"
done
python3 - "$RESULTS" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
def col(b, k): return [float(r[k]) for r in rows if r["bin"] == b]
med = {}
print("| binary | runs | seconds median (min-max) | CPU s median | peak RSS MiB | chunks kept |")
print("|---|---:|---:|---:|---:|---:|")
for b in ("A", "B"):
    s, c = col(b, "seconds"), col(b, "cpu_s")
    med[b] = statistics.median(s)
    print(f"| {b} | {len(s)} | {med[b]:.2f} ({min(s):.2f}-{max(s):.2f}) | {statistics.median(c):.2f} | "
          f"{max(col(b, 'rss_kib')) / 1024:.0f} | {int(max(col(b, 'kept')))} |")
print()
print(f"B over A (median seconds): {med['A'] / med['B']:.2f}x faster")
PY
}
