#!/usr/bin/env bash
# bench/adaptive.sh: adaptive readers on and off, on a fragmented and an unfragmented source
# (issue 5).
#
# Builds (once) under WORK two sources of about the same size:
#   fragmented    FILES small files of 4-64 KiB (what a PostgreSQL database with many small
#                 relations looks like), written interleaved with LARGE_MB of large files so
#                 their blocks are scattered over the disk
#   unfragmented  the same bytes as 8 large files written one after another
# then backs each up to NUL with --adaptive-readers on and off, REPS times, alternating the
# order, with a cold page cache (sync; echo 3 > /proc/sys/vm/drop_caches before each run),
# and prints MB/s best and median, how often the reads in flight were raised and their peak,
# and on/off ratios. One --report FILE.html per case is kept under WORK/results/adaptive-DATE/
# (the "Reads in flight allowed" chart shows the effect beside read size and latency).
#
# Usage: bench/adaptive.sh [--work DIR] [--files N] [--large-mb N] [--reps N]
# Environment: WORK_DIR, FILES (default 20000), LARGE_MB (default 1024), REPS (default 3),
#              PAGEVAULT (binary to use). Needs root (drop_caches).
set -euo pipefail
{
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$ROOT/bench/lib.sh"
WORK=${WORK_DIR:-$WORK/adaptive}
FILES=${FILES:-20000}
LARGE_MB=${LARGE_MB:-1024}
REPS=${REPS:-3}
parse_options --work=WORK --files=FILES --large-mb=LARGE_MB --reps=REPS -- "$@"
[ "$(id -u)" = 0 ] || { echo "bench/adaptive.sh needs root (drop_caches)" >&2; exit 1; }
command -v jq >/dev/null || { echo "jq is missing: PAGEVAULT_BENCH=1 scripts/setup.sh" >&2; exit 1; }
[ -x "$PV" ] || (cd "$ROOT" && cargo build --release)
mkdir -p "$WORK"
BIN="$WORK/pagevault.bin"; cp "$PV" "$BIN"
OUT="$WORK/results/adaptive-$(date +%Y%m%d-%H%M%S)"; mkdir -p "$OUT"

SRC_F="$WORK/fragmented-$FILES-$LARGE_MB"
SRC_U="$WORK/unfragmented-$FILES-$LARGE_MB"
if [ ! -f "$SRC_F/.done" ]; then
  log "building the fragmented source: $FILES small files interleaved with $LARGE_MB MiB of large files"
  rm -rf "$SRC_F"; mkdir -p "$SRC_F/small" "$SRC_F/large"
  python3 - "$SRC_F" "$FILES" "$LARGE_MB" <<'PY'
import os, random, sys
root, files, large_mb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rnd = random.Random(7)
larges = [open(os.path.join(root, "large", f"big{i}"), "wb") for i in range(8)]
chunk = os.urandom(1 << 20)
written = 0
target = large_mb << 20
for i in range(files):
    d = os.path.join(root, "small", f"{i % 100:02d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"rel{i}"), "wb") as f:
        f.write(os.urandom(rnd.choice([4, 8, 16, 24, 32, 48, 64]) << 10))
    # Interleave: a slice of a large file after every few small files.
    while written < target * (i + 1) // files:
        larges[written // (1 << 20) % 8].write(chunk)
        written += 1 << 20
for f in larges:
    f.close()
PY
  sync; touch "$SRC_F/.done"
fi
if [ ! -f "$SRC_U/.done" ]; then
  log "building the unfragmented source (the same bytes in 8 large files, written one by one)"
  rm -rf "$SRC_U"; mkdir -p "$SRC_U"
  total=$(du -sb --exclude=.done "$SRC_F" | cut -f1)
  for i in $(seq 0 7); do head -c $((total / 8)) /dev/urandom > "$SRC_U/big$i"; done
  sync; touch "$SRC_U/.done"
fi

source "$ROOT/bench/vm-memory.sh"
trap release_guest_memory EXIT
hold_guest_memory
echo -e "source\tadaptive\trep\tseconds\tmbps\traises\tpeak" > "$OUT/runs.tsv"
run() { # source-name dir adaptive rep
  sync; echo 3 > /proc/sys/vm/drop_caches
  local j="$OUT/$1-$3-$4.json"
  "$BIN" backup --source "files:$2" --to NUL --adaptive-readers "$3" --json \
    --report "$OUT/$1-$3.html" > "$j"
  local secs mbps raises peak
  secs=$(jq -r .seconds "$j"); mbps=$(jq -r .mb_per_sec "$j")
  raises=$(jq -r .adaptive_readers.raises "$j"); peak=$(jq -r .adaptive_readers.peak_in_flight "$j")
  echo -e "$1\t$3\t$4\t$secs\t$mbps\t$raises\t$peak" >> "$OUT/runs.tsv"
  log "  $1 adaptive=$3: $(printf %.1f "$mbps") MB/s, raised $raises times, peak $peak in flight"
}
for rep in $(seq 1 "$REPS"); do
  if [ $((rep % 2)) = 1 ]; then order="on off"; else order="off on"; fi
  for src in fragmented unfragmented; do
    dir=$SRC_F; [ $src = unfragmented ] && dir=$SRC_U
    for a in $order; do run $src "$dir" "$a" "$rep"; done
  done
done

{
  echo "## Adaptive readers, cold cache, backup to NUL ($REPS repetitions, $(nproc) cores)"
  echo
  echo "$VM_MEMORY_NOTE"
  echo
  echo "| source | adaptive | MB/s best | MB/s median | raises | peak reads in flight | on/off (median) |"
  echo "|---|---|---:|---:|---:|---:|---:|"
  for src in fragmented unfragmented; do
    off=$(awk -F'\t' -v s=$src '$1==s && $2=="off"{print $5}' "$OUT/runs.tsv" | sort -g | awk '{a[NR]=$1} END{print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}')
    for a in on off; do
      vals=$(awk -F'\t' -v s=$src -v a=$a '$1==s && $2==a{print $5}' "$OUT/runs.tsv" | sort -g)
      best=$(echo "$vals" | tail -1)
      med=$(echo "$vals" | awk '{a[NR]=$1} END{print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}')
      raises=$(awk -F'\t' -v s=$src -v a=$a '$1==s && $2==a{print $6}' "$OUT/runs.tsv" | sort -g | tail -1)
      peak=$(awk -F'\t' -v s=$src -v a=$a '$1==s && $2==a{print $7}' "$OUT/runs.tsv" | sort -g | tail -1)
      ratio="-"; [ $a = on ] && ratio=$(awk -v x="$med" -v y="$off" 'BEGIN{printf "%.2fx", x/y}')
      printf "| %s | %s | %.1f | %.1f | %s | %s | %s |\n" $src $a "$best" "$med" "$raises" "$peak" "$ratio"
    done
  done
  echo
  echo "Files: fragmented = $FILES small files (4-64 KiB) interleaved with $LARGE_MB MiB of large files; unfragmented = the same bytes in 8 files. Reports: $OUT/*.html"
} | tee "$OUT/report.md"
}
exit
