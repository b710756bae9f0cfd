#!/usr/bin/env bash
# bench/storage.sh: `pagevault bench` beside fio (issue 5).
#
# For each I/O profile of a database (oltp-log, oltp-data, bulk-insert, read-ahead,
# backup, restore, checkdb) runs `pagevault bench --profile P --json` and fio with the
# equivalent job on the same directory, and prints one markdown table of MB/s, IOPS and
# p99 latency side by side with the ratio pagevault / fio. Mixed profiles (oltp-data,
# backup) get a row per direction.
#
# The fio job is built from pagevault's own JSON (sizes and their shares as bssplit, read
# share as rwmixread, O_DIRECT or not), so both run the same pattern: one I/O at a time
# (ioengine=psync, iodepth=1), time based, on a file of --size. oltp-log: fio writes with
# O_DSYNC (sync=dsync), pagevault writes and then fdatasyncs: one flush per write either
# way, and the latency of both includes it. pagevault writes its test file anew for every
# run; fio lays its file out once.
#
# With --reps N every profile runs N times, the two tools taking turns at going first, and
# the table shows the median of each figure (and the lowest..highest MB/s ratio).
#
# Usage: bench/storage.sh [--dir DIR] [--size SIZE] [--duration S] [--reps N]
#                         [--profile P ...] [--out DIR] [--no-build]
#   (or positionally: bench/storage.sh [DIR [SIZE [DURATION]]])
# Environment: BENCH_DIR (default /var/tmp), SIZE (default 1G), DURATION (default 5), REPS (1),
#              PROFILES (comma separated), PAGEVAULT (binary to use), NO_BUILD=1
# It installs fio and jq with apt-get when they are missing (needs root then).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$ROOT/bench/lib.sh"
DIR=${BENCH_DIR:-/var/tmp}
SIZE=${SIZE:-1G}
DURATION=${DURATION:-5}
REPS=${REPS:-1}
PROFILES=${PROFILES:-oltp-log,oltp-data,bulk-insert,read-ahead,backup,restore,checkdb}
OUT=""

asked=()
parse_args --dir=DIR --size=SIZE --duration=DURATION --reps=REPS --profile=asked+ --out=OUT --no-build=NO_BUILD=1 -- "$@"
[ ${#pos[@]} -ge 1 ] && DIR=${pos[0]}
[ ${#pos[@]} -ge 2 ] && SIZE=${pos[1]}
[ ${#pos[@]} -ge 3 ] && DURATION=${pos[2]}
[ ${#asked[@]} -gt 0 ] && PROFILES=$(IFS=,; echo "${asked[*]}")
[[ $DURATION =~ ^[0-9]+([.][0-9]+)?$ ]] || { echo "DURATION must be a number of seconds" >&2; exit 2; }
need_posint REPS "$REPS"

[ -d "$DIR" ] || die "$DIR is not a directory"
TMP=$(mktemp -d)
FIOFILE="$DIR/pagevault-storage-fio.$$.tmp"
source "$ROOT/bench/vm-memory.sh"
cleanup() { rm -f "$FIOFILE"; rm -rf "$TMP"; release_guest_memory; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- tools ----
need_pkg fio fio
need_pkg jq jq

if [ -z "${PAGEVAULT:-}" ] && [ "$NO_BUILD" != 1 ]; then
    if [ ! -x "$PV" ] || [ -n "$(find "$ROOT/src" "$ROOT/Cargo.toml" "$ROOT/Cargo.lock" -newer "$PV" -print -quit 2>/dev/null)" ]; then
        log "building the release binary"
        (cd "$ROOT" && cargo build --release -q) >&2 || [ -x "$PV" ] || die "cargo build --release failed"
    fi
fi
[ -x "$PV" ] || die "no pagevault binary at $PV"

# SIZE as pagevault reads it (binary units), rounded down to 64 KiB as pagevault does.
SIZE_BYTES=$(awk -v s="$SIZE" 'BEGIN {
    if (!match(s, /^[0-9]+/)) exit 1
    n = substr(s, 1, RLENGTH); u = tolower(substr(s, RLENGTH + 1))
    if (u == "" || u == "b") m = 1
    else if (u ~ /^k(i?b)?$/) m = 1024
    else if (u ~ /^m(i?b)?$/) m = 1048576
    else if (u ~ /^g(i?b)?$/) m = 1073741824
    else exit 1
    printf "%d", int(n * m / 65536) * 65536 }') || die "SIZE '$SIZE' is not a size (try 256M or 1G)"
RUNTIME_MS=$(awk -v d="$DURATION" 'BEGIN { printf "%d", d * 1000 + 0.5 }')

# fio lays out its own file once, written like pagevault's (1 MiB, O_DIRECT, synced).
log "laying out a $((SIZE_BYTES >> 20)) MiB fio file in $DIR"
fio --name=layout --filename="$FIOFILE" --size="$SIZE_BYTES" --rw=write --bs=1M --direct=1 \
    --ioengine=psync --end_fsync=1 --output-format=json >/dev/null 2>"$TMP/fio.err" ||
    fio --name=layout --filename="$FIOFILE" --size="$SIZE_BYTES" --rw=write --bs=1M --direct=0 \
        --ioengine=psync --end_fsync=1 --output-format=json >/dev/null ||
    die "fio cannot write $FIOFILE: $(cat "$TMP/fio.err")"

# ------------------------------------------------------------- the runs ----
# One JSON line per profile, direction and repetition with both tools' figures.
ROWS=$TMP/rows.jsonl
: > "$ROWS"
IFS=, read -r -a plist <<< "$PROFILES"
# The patterns, as pagevault describes them (a short run on a small file).
"$PV" bench --path "$DIR" --size 16M --duration 0.05 --profile "$PROFILES" --json > "$TMP/spec.json" ||
    die "pagevault bench cannot run in $DIR"
hold_guest_memory
for ((rep = 1; rep <= REPS; rep++)); do
for p in "${plist[@]}"; do
    pvj=$TMP/pv-$p-$rep.json
    fioj=$TMP/fio-$p-$rep.json
    pj=$(jq -c --arg p "$p" '.profiles[] | select(.name == $p)' "$TMP/spec.json")
    bssplit=$(jq -r '[.sizes[] | "\(.bytes)/\(.percent)"] | join(":")' <<< "$pj")
    rd=$(jq -r '.read_percent' <<< "$pj")
    access=$(jq -r '.access' <<< "$pj")
    direct=$(jq -r 'if .direct then 1 else 0 end' <<< "$pj")
    sync_each=$(jq -r '.sync_each_write' <<< "$pj")
    case "$rd:$access" in
        0:*) rw=write ;;
        100:*) rw=read ;;
        *:random) rw=randrw ;;
        *) rw=rw ;;
    esac
    args=(--name="$p" --filename="$FIOFILE" --size="$SIZE_BYTES" --rw="$rw" --bssplit="$bssplit"
          --direct="$direct" --ioengine=psync --iodepth=1 --numjobs=1 --time_based=1
          --runtime="${RUNTIME_MS}ms" --invalidate=1 --randrepeat=0 --norandommap=1
          --percentile_list=50:95:99 --output-format=json)
    if [ "$rw" = randrw ] || [ "$rw" = rw ]; then args+=(--rwmixread="$rd"); fi
    if [ "$sync_each" = true ]; then args+=(--sync=dsync); fi
    run_pv() {
        log "[$rep/$REPS] $p: pagevault bench"
        "$PV" bench --path "$DIR" --size "$SIZE" --duration "$DURATION" --profile "$p" --json > "$pvj"
    }
    run_fio() {
        log "[$rep/$REPS] $p: fio --rw=$rw --bssplit=$bssplit --direct=$direct$([ "$sync_each" = true ] && echo ' --sync=dsync')"
        fio "${args[@]}" > "$fioj"
    }
    # Taking turns at going first, so that neither always runs after the other's writes.
    if ((rep % 2)); then run_pv; run_fio; else run_fio; run_pv; fi

    case "$rw" in
        read) dirs=(read) ;;
        write) dirs=(write) ;;
        *) dirs=(read write) ;;
    esac
    for d in "${dirs[@]}"; do
        jq -c -n --arg p "$p" --arg d "$d" --argjson rep "$rep" \
            --slurpfile pv "$pvj" --slurpfile fio "$fioj" '
            ($pv[0].profiles[0][$d]) as $a | ($fio[0].jobs[0][$d]) as $b |
            { profile: $p, dir: $d, rep: $rep,
              pv_mb: $a.mb_per_sec, fio_mb: ($b.bw_bytes / 1048576),
              pv_iops: $a.iops, fio_iops: $b.iops,
              pv_p99: ($a.latency_us.p99 / 1000),
              fio_p99: ((($b.clat_ns.percentile["99.000000"]) // 0) / 1e6) }' >> "$ROWS"
    done
done
done

# ------------------------------------------------------------ the table ----
first=$TMP/pv-${plist[0]}-1.json
printf '\n## pagevault bench vs fio on %s (%s), %s MiB file, %s s per profile, queue depth 1, %s repetition(s)\n\n' \
    "$DIR" "$(jq -r .filesystem "$first")" "$((SIZE_BYTES >> 20))" "$DURATION" "$REPS"
printf 'pagevault I/O: %s. MB = 1,048,576 bytes. Ratio = pagevault / fio' \
    "$(jq -r '"\(.read_io) (\(.read_io_reason))"' "$first")"
if [ "$REPS" -gt 1 ]; then printf ' (medians; "MB/s ratio range" = lowest..highest ratio of single repetitions)'; fi
printf '; a p99 ratio above 1 means pagevault saw slower I/O.\n\n'
printf '| profile | dir | pagevault MB/s | fio MB/s | ratio | pagevault IOPS | fio IOPS | ratio | pagevault p99 ms | fio p99 ms | ratio | MB/s ratio range |\n'
printf '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n'
jq -r -s '
    def median: sort | if length % 2 == 1 then .[length / 2 | floor]
                       else (.[length / 2 - 1] + .[length / 2]) / 2 end;
    . as $all
    | reduce $all[] as $x ([]; if any(.[]; . == [$x.profile, $x.dir]) then . else . + [[$x.profile, $x.dir]] end)
    | .[] as [$p, $d]
    | [ $all[] | select(.profile == $p and .dir == $d) ] as $rs
    | ($rs | map(if .fio_mb > 0 then .pv_mb / .fio_mb else 0 end)) as $rr
    | [$p, $d,
         ($rs | map(.pv_mb) | median), ($rs | map(.fio_mb) | median),
         ($rs | map(.pv_iops) | median), ($rs | map(.fio_iops) | median),
         ($rs | map(.pv_p99) | median), ($rs | map(.fio_p99) | median),
         ($rr | min), ($rr | max)]
    | @tsv
' "$ROWS" | awk -F'\t' '
function ratio(a, b) { return (b > 0) ? sprintf("%.2f", a / b) : "-" }
{
    printf "| %s | %s | %.1f | %.1f | %s | %.0f | %.0f | %s | %.3f | %.3f | %s | %.2f..%.2f |\n", $1, $2,
        $3, $4, ratio($3, $4), $5, $6, ratio($5, $6), $7, $8, ratio($7, $8), $9, $10
}'
printf '\nRatings by pagevault (repetition 1):'
for p in "${plist[@]}"; do
    printf ' %s' "$(jq -r '.profiles[0] | "\(.name) \(.rating.value) (\(.rating.figure * 100 | round / 100) \(.rating.unit));"' "$TMP/pv-$p-1.json")"
done
printf '\n'

if [ -n "$OUT" ]; then
    mkdir -p "$OUT"
    cp "$TMP"/*.json "$ROWS" "$OUT"/
    log "raw JSON of every run kept in $OUT"
fi
