#!/usr/bin/env bash
# bench/nul.sh: BACKUP TO NUL against fio on the same files (issue 22).
#
# Builds (once) under WORK a large file (--size, default 2G, random bytes) and a tree of
# --files small files (default 30000, 4-64 KiB). Then, --reps rounds (default 3), the
# tools taking turns at going first, measures:
#   cold (page cache dropped before every run):
#     the large file: fio O_DIRECT sequential 1 MiB reads (libaio) at queue depths 1, 4,
#     16, 32, 64; the tree: `cat` of every file by 1, 4, 16, 32 and 64 processes (xargs
#     -P), because fio's opendir= reads a tree of mixed sizes only in part (82 MB of
#     1,045 with bs=4k, nothing with bs=1M)
#     pagevault backup --to NUL at its defaults, and with --adaptive-readers off
#   warm (the files read once first, then from the page cache):
#     fio buffered sequential 1 MiB reads (psync): 1 job; 2 and 4 jobs each reading its
#     own part of the file (the file read once, as pagevault reads it); 4 jobs each
#     reading the whole file (4 times the bytes: what the page cache gives at most);
#     for the tree, cat by 1 and 4 processes
#     pagevault backup --to NUL at its defaults
#     each warm measurement is the median of --warm-runs runs (default 5): a warm pass of
#     the large file lasts about 0.3 s, and single passes swing by half on this VM
# Also runs
# `pagevault bench --profile backup` (one 1 MiB I/O at a time, read and write) on WORK
# once per round, for reference beside fio at depth 1.
# Prints one table per round and the ratios pagevault / best fio, with the level the
# adaptive readers settled on. Rounds compare only within themselves: the disk swings.
#
# Usage: bench/nul.sh [--work DIR] [--size SIZE] [--files N] [--reps N] [--warm-runs N] [--no-build]
# Environment: WORK_DIR, SIZE, FILES, REPS, WARM_RUNS, PAGEVAULT (binary to use), NO_BUILD=1,
#              QUIET_BUDGET (seconds to wait in all for other load to pass).
# Needs root (drop_caches), fio and jq (PAGEVAULT_BENCH=1 scripts/setup.sh).
set -euo pipefail
{
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$ROOT/bench/lib.sh"
WORK=${WORK_DIR:-$WORK/nul}
SIZE=${SIZE:-2G}
FILES=${FILES:-30000}
REPS=${REPS:-3}
WARM_RUNS=${WARM_RUNS:-5}
NO_BUILD=${NO_BUILD:-0}
parse_options --work=WORK --size=SIZE --files=FILES --reps=REPS --warm-runs=WARM_RUNS --no-build=NO_BUILD=1 -- "$@"
need_posint --reps "$REPS"
need_posint --warm-runs "$WARM_RUNS"
need_posint --files "$FILES"
[ "$(id -u)" = 0 ] || die "bench/nul.sh needs root (drop_caches)"
command -v fio >/dev/null && command -v jq >/dev/null || die "fio and jq are missing: PAGEVAULT_BENCH=1 scripts/setup.sh"
ensure_binary
mkdir -p "$WORK"
OUT="$WORK/results/nul-$(date +%Y%m%d-%H%M%S)"; mkdir -p "$OUT"
snapshot_binary "$OUT"

BIG="$WORK/big-$SIZE"
TREE="$WORK/tree-$FILES"
if [ ! -f "$BIG/.done" ]; then
  log "writing a $SIZE file of random bytes"
  rm -rf "$BIG"; mkdir -p "$BIG"
  fio --name=lay --filename="$BIG/data" --rw=write --bs=1M --size="$SIZE" --refill_buffers \
      --randrepeat=0 --ioengine=psync --end_fsync=1 >/dev/null
  touch "$BIG/.done"
fi
if [ ! -f "$TREE.done" ]; then
  log "writing $FILES small files of 4-64 KiB"
  rm -rf "$TREE"; mkdir -p "$TREE"
  python3 - "$TREE" "$FILES" <<'PY'
import os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
rnd = random.Random(22)
for i in range(n):
    d = os.path.join(root, f"{i % 100:02d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i}"), "wb") as f:
        f.write(os.urandom(rnd.randrange(4, 65) << 10))
PY
  sync; touch "$TREE.done"
fi
BIG_BYTES=$(stat -c %s "$BIG/data")
TREE_BYTES=$(find "$TREE" -type f -printf '%s\n' | awk '{s += $1} END {print s}')

source "$ROOT/bench/vm-memory.sh"
trap release_guest_memory EXIT
hold_guest_memory

drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
warm() { find "$1" -type f -exec cat {} + > /dev/null; }

# ref_mb WHAT DIRECT DEPTH JOBS [split]: MB/s (10^6) of one sequential pass by the
# reference reader: fio for the large file (split: each job reads 1/JOBS of it, else each
# reads all of it), cat by DEPTH x JOBS processes for the tree.
ref_mb() {
  local what=$1 direct=$2 depth=$3 jobs=$4 split=${5:-} engine t0 t1 part=()
  if [ "$what" = "$TREE" ]; then
    t0=$(now_ns)
    (cd "$TREE" && find . -type f -print0 | xargs -0 -P $((depth * jobs)) -n 64 cat > /dev/null)
    t1=$(now_ns)
    awk -v b="$TREE_BYTES" -v t=$((t1 - t0)) 'BEGIN {print b / t * 1000}'
    return
  fi
  engine=libaio; [ "$direct" = 0 ] && engine=psync
  [ -n "$split" ] && part=(--size=$((BIG_BYTES / jobs)) --offset_increment=$((BIG_BYTES / jobs)))
  # --invalidate=0: fio otherwise drops the file from the page cache before reading, and a
  # "warm" read is then a cold one.
  fio --name=r --filename="$what/data" --rw=read --bs=1M --direct="$direct" --ioengine="$engine" --invalidate=0 \
      --iodepth="$depth" --numjobs="$jobs" "${part[@]}" --group_reporting --output-format=json 2>/dev/null \
    | sed -n '/^{/,$p' | jq '.jobs[0].read.bw_bytes / 1e6'
}

# pv_mb WHAT [FLAGS]: MB/s of a backup to NUL (source bytes / wall), the level the
# adaptive readers settled on, and how many files it found cached and read with O_DIRECT.
pv_mb() {
  local what=$1; shift
  local j
  j=$("$PV" backup --source "files:$what" --to NUL --json "$@")
  echo "$(jq '.raw_bytes / .seconds / 1e6' <<<"$j") $(jq -r '"\(.adaptive_readers.settled_in_flight)/\(.adaptive_readers.peak_in_flight)"' <<<"$j") $(jq -r '"\(.config.cached_files)c/\(.config.direct_files)d"' <<<"$j")"
}

# median X...: the middle value (the lower one of the middle two for an even count);
# spread X...: lowest-highest.
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
spread() { printf '%s\n' "$@" | sort -g | awk 'NR == 1 {lo = $1} {hi = $1} END {printf "%.0f-%.0f", lo, hi}'; }

# warm_ref KEY WHAT JOBS [split]: r[KEY] = median MB/s of WARM_RUNS warm reference passes.
warm_ref() {
  local k=$1 i v=(); shift
  for ((i = 0; i < WARM_RUNS; i++)); do v+=("$(ref_mb "$1" 0 1 "${@:2}")"); done
  r[$k]=$(median "${v[@]}"); r[$k.spread]=$(spread "${v[@]}")
}

# warm_pv WHAT: r[pvw] = median MB/s of WARM_RUNS warm backups to NUL; r[pvwlvl] the
# levels settled on and r[pvwres] the cached/O_DIRECT file counts (each distinct one).
warm_pv() {
  local i m l c v=() lv=() res=()
  for ((i = 0; i < WARM_RUNS; i++)); do
    read -r m l c < <(pv_mb "$1"); v+=("$m"); lv+=("$l"); res+=("$c")
  done
  r[pvw]=$(median "${v[@]}"); r[pvw.spread]=$(spread "${v[@]}")
  r[pvwlvl]=$(printf '%s\n' "${lv[@]}" | sort -u | paste -sd,)
  r[pvwres]=$(printf '%s\n' "${res[@]}" | sort -u | paste -sd,)
}

f1() { printf '%.0f' "$1"; }
mb() { awk -v b="$1" 'BEGIN {printf "%.0f", b / 1e6}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }

{
echo "# BACKUP TO NUL against fio ($(date -u '+%Y-%m-%d %H:%M UTC'))"
echo
echo "pagevault $commit$dirty built $PV_BUILT; $(nproc) cores; large file $(mb "$BIG_BYTES") MB, tree $FILES files $(mb "$TREE_BYTES") MB; $REPS rounds."
echo "$VM_MEMORY_NOTE."
echo "MB/s = 10^6 bytes/s of source read. Reference (\"fio\" columns): for the large file fio cold O_DIRECT libaio 1 MiB at depth d, warm buffered psync 1 MiB by 1 job, by 2 and 4 jobs each reading its part (the file once), and by 4 jobs each reading all of it; for the tree, cat of every file by d processes (warm: 1 and 4). pv: backup --to NUL (defaults unless named); in flight = settled/peak reads in flight per volume."
} > "$OUT/summary.md"

# One cold pass of each tool, not counted: the first round of earlier runs, just after
# hold_guest_memory touched all free memory, read the large file slowest in both runs.
log "a settling pass (not counted)"
wait_quiet; drop; ref_mb "$BIG" 1 4 1 > /dev/null
drop; pv_mb "$BIG" > /dev/null
for round in $(seq 1 "$REPS"); do
  for what in "$BIG" "$TREE"; do
    name=$([ "$what" = "$BIG" ] && echo "large file" || echo "$FILES small files")
    declare -A r=()
    order=(fio pv); [ $((round % 2)) = 0 ] && order=(pv fio)
    for tool in "${order[@]}"; do
      wait_quiet
      if [ "$tool" = fio ]; then
        for d in 1 4 16 32 64; do drop; r[fio$d]=$(ref_mb "$what" 1 "$d" 1); done
        warm "$what"; warm_ref fiow "$what" 1; warm_ref fiow4 "$what" 4
        if [ "$what" = "$BIG" ]; then
          warm_ref fiows2 "$what" 2 split; warm_ref fiows4 "$what" 4 split
        else
          r[fiows2]=${r[fiow4]}; r[fiows4]=${r[fiow4]}
        fi
      else
        drop; read -r r[pv] r[pvlvl] r[pvres] < <(pv_mb "$what")
        drop; read -r r[pvoff] _ _ < <(pv_mb "$what" --adaptive-readers off)
        warm "$what"; warm_pv "$what"
      fi
    done
    best=0; bestd=0
    for d in 1 4 16 32 64; do
      if awk -v a="${r[fio$d]}" -v b="$best" 'BEGIN {exit !(a > b)}'; then best=${r[fio$d]}; bestd=$d; fi
    done
    # Warm, the best reference that reads the file once.
    bestw=${r[fiow]}
    for k in fiows2 fiows4; do awk -v a="${r[$k]}" -v b="$bestw" 'BEGIN {exit !(a > b)}' && bestw=${r[$k]}; done
    {
      echo
      echo "## Round $round, $name"
      echo
      echo "| | fio d1 | d4 | d16 | d32 | d64 | pv defaults | in flight | pv adaptive off | pv / best fio |"
      echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
      echo "| cold | $(f1 "${r[fio1]}") | $(f1 "${r[fio4]}") | $(f1 "${r[fio16]}") | $(f1 "${r[fio32]}") | $(f1 "${r[fio64]}") | $(f1 "${r[pv]}") | ${r[pvlvl]} (${r[pvres]}) | $(f1 "${r[pvoff]}") | $(ratio "${r[pv]}" "$best") (best fio at d$bestd) |"
      echo
      echo "Warm: medians of $WARM_RUNS passes each (lowest-highest); pv's files found cached (c) and read with O_DIRECT (d)."
      echo
      echo "| warm | fio 1 job | 2 jobs, a part each | 4 jobs, a part each | 4 jobs, all of it each | pv defaults | in flight | pv / fio 1 job | pv / best fio reading it once | pv / 4 whole |"
      echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
      echo "| | $(f1 "${r[fiow]}") (${r[fiow.spread]}) | $(f1 "${r[fiows2]}") | $(f1 "${r[fiows4]}") | $(f1 "${r[fiow4]}") | $(f1 "${r[pvw]}") (${r[pvw.spread]}) | ${r[pvwlvl]} (${r[pvwres]}) | $(ratio "${r[pvw]}" "${r[fiow]}") | $(ratio "${r[pvw]}" "$bestw") | $(ratio "${r[pvw]}" "${r[fiow4]}") |"
    } >> "$OUT/summary.md"
    for k in "${!r[@]}"; do printf '%s\t%s\t%s\t%s\n' "$round" "$name" "$k" "${r[$k]}"; done >> "$OUT/values.tsv"
    log "round $round, $name: cold pv ${r[pv]} vs fio best ${best} (d$bestd); warm pv ${r[pvw]} vs fio ${bestw}"
    unset r
  done
  drop
  pvb=$("$PV" bench --path "$WORK" --profile backup --size 1G --duration 5 --json | jq '.profiles[0].read.mb_per_sec | floor')
  echo "" >> "$OUT/summary.md"
  echo "pagevault bench --profile backup (QD1, read+write), round $round: read ${pvb:-?} MB/s" >> "$OUT/summary.md"
done
# Memory: the large file backed up cold with --memory-budget, peak RSS beside the budget
# (the process without buffers holds about 8 MB).
{
  echo
  echo "## Peak memory with --memory-budget (large file, cold)"
  echo
  echo "| budget | MB/s | reads in flight settled | pool made MiB | peak RSS MiB |"
  echo "|---|---:|---:|---:|---:|"
  for budget in 32M 48M 96M default; do
    wait_quiet; drop
    flag=(); [ "$budget" != default ] && flag=(--memory-budget "$budget")
    j=$(/usr/bin/time -f '%M' -o "$OUT/rss" "$PV" backup --source "files:$BIG" --to NUL --json "${flag[@]}")
    echo "| $budget | $(jq '.raw_bytes / .seconds / 1e6 | floor' <<<"$j") | $(jq '.adaptive_readers.settled_in_flight' <<<"$j") | $(jq '.pool_bytes / 1048576 | floor' <<<"$j") | $(awk '{printf "%.1f", $1 / 1024}' "$OUT/rss") |"
  done
} >> "$OUT/summary.md"
# Medians over the rounds: one pagevault run against the best of five fio depths in a
# round would compare one sample with the largest of five on a disk that swings.
python3 - "$OUT/values.tsv" >> "$OUT/summary.md" <<'PY'
import statistics, sys
from collections import defaultdict
v = defaultdict(list)
for line in open(sys.argv[1]):
    _, what, k, x = line.rstrip("\n").split("\t")
    try:
        v[(what, k)].append(float(x))
    except ValueError:
        pass
med = lambda what, k: statistics.median(v[(what, k)]) if v[(what, k)] else float("nan")
print("\n## Medians over the rounds\n")
print("| source | best reference cold (depth) | pv defaults cold | ratio | pv adaptive off | reference warm, reading it once: 1 / 2 / 4 jobs | reference warm, 4 jobs each all of it | pv warm | ratio to 1 job | ratio to the best once | ratio to 4 whole |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for what in sorted({w for w, _ in v}):
    best_d = max((1, 4, 16, 32, 64), key=lambda d: (v[(what, f"fio{d}")] and med(what, f"fio{d}")) or -1)
    best = med(what, f"fio{best_d}")
    pv, off, w1, s2, s4, w4, pw = (med(what, k) for k in ("pv", "pvoff", "fiow", "fiows2", "fiows4", "fiow4", "pvw"))
    once = max(w1, s2, s4)
    print(f"| {what} | {best:.0f} (d{best_d}) | {pv:.0f} | {pv / best:.2f} | {off:.0f} | {w1:.0f} / {s2:.0f} / {s4:.0f} | {w4:.0f} | {pw:.0f} | {pw / w1:.2f} | {pw / once:.2f} | {pw / w4:.2f} |")
PY
echo "" >> "$OUT/summary.md"
echo "Waited $QUIET_WAITED s in all for other CPU load to pass (budget $QUIET_BUDGET s)." >> "$OUT/summary.md"
cat "$OUT/summary.md"
log "results in $OUT"
}
