#!/usr/bin/env bash
# bench/core.sh: the core benchmark of pagevault (issue 2).
#
# Builds a multi-GB `files:` source of mixed data (incompressible, text-like and
# database-page-like), then measures with a cold page cache:
#   - fio sequential read of the same files (buffered, and O_DIRECT at queue depth 16)
#   - pagevault backup to NUL (none codec, --direct-io on and off; lz4; zstd)
#   - pagevault backup to 1, 2 and 4 disk stripes (none and lz4)
#   - restore of the 2-stripe sets
#   - peak RSS of every pagevault run next to its configured buffer pool
# and prints one markdown table with verdicts against the targets:
#   NUL backup within 5% of fio's best sequential read; peak RSS <= pool + 64 MiB;
#   restore at least as fast as backup.
#
# Usage: bench/core.sh [--work DIR] [--size-gb N] [--reps N] [--files N] [--sweep 0|1] [--no-build]
#        (or positionally: bench/core.sh [WORKDIR [SIZE_GB]])
# Environment: WORK_DIR, SIZE_GB, REPS, NFILES, SWEEP, QUIET_BUDGET, PAGEVAULT (binary to use), NO_BUILD=1
# See bench/README.md.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$ROOT/bench/lib.sh"
SIZE_GB=${SIZE_GB:-4}
REPS=${REPS:-2}
NFILES=${NFILES:-8}
SWEEP=${SWEEP:-1}
DATA_VERSION=1            # bump when the generator changes: forces new data

parse_args --work=WORK --size-gb=SIZE_GB --reps=REPS --files=NFILES --sweep=SWEEP --no-build=NO_BUILD=1 -- "$@"
[ ${#pos[@]} -ge 1 ] && WORK=${pos[0]}
[ ${#pos[@]} -ge 2 ] && SIZE_GB=${pos[1]}
need_posint REPS "$REPS"
need_posint NFILES "$NFILES"
[[ $SIZE_GB =~ ^[0-9]+([.][0-9]+)?$ ]] || { echo "SIZE_GB must be a number" >&2; exit 2; }

SRC=$WORK/src
STRIPES=$WORK/stripes
RESTORE=$WORK/restore
STAMP=$(date +%Y%m%d-%H%M%S)
RUNDIR=$WORK/results/$STAMP
RESULTS=$RUNDIR/runs.tsv

source "$ROOT/bench/vm-memory.sh"
cleanup() { rm -rf "$STRIPES" "$RESTORE"; release_guest_memory; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- 1. tools ----
need_pkg fio fio
need_pkg /usr/bin/time time
command -v python3 >/dev/null || need_pkg python3 python3

ensure_binary

# ------------------------------------------------------------ page cache ----
COLD=0
if (sync && echo 3 > /proc/sys/vm/drop_caches) 2>/dev/null; then COLD=1; fi
drop_caches() {
    sync
    if [ "$COLD" = 1 ]; then echo 3 > /proc/sys/vm/drop_caches; fi
}
[ "$COLD" = 1 ] || log "warning: cannot drop the page cache (not permitted); measuring WARM"

# ------------------------------------------------------------ 2. the data ----
read -r TOTAL_MIB FILE_MIB < <(python3 -c "
t = int(float('$SIZE_GB') * 1024); n = $NFILES
f = max(1, t // n); print(f * n, f)")
SIZE_BYTES=$((TOTAL_MIB * 1048576))
want_manifest="version=$DATA_VERSION files=$NFILES file_mib=$FILE_MIB"

mkdir -p "$WORK"
if [ ! -f "$WORK/src.manifest" ] || [ "$(cat "$WORK/src.manifest")" != "$want_manifest" ] || [ ! -d "$SRC" ]; then
    rm -rf "$SRC" "$WORK/src.manifest"
    need=$((SIZE_BYTES * 3 / 1024 + 1048576))   # source + stripes + restore, KiB
    avail=$(df -Pk "$WORK" | awk 'NR==2 {print $4}')
    [ "$avail" -gt "$need" ] || die "need $((need / 1048576)) GiB free under $WORK, have $((avail / 1048576)) GiB"
    log "generating ${TOTAL_MIB} MiB of data in $NFILES files of $FILE_MIB MiB under $SRC"
    mkdir -p "$SRC"
    # Every 4 files: 2 database-like (8 KiB pages of rows, ~2-4x compressible),
    # 1 random (incompressible, like compressed blobs), 1 base64 text (~1.3x with zstd).
    for ((i = 0; i < NFILES; i++)); do
        case $((i % 4)) in
            0|2) f=$(printf '%s/db%02d.dat' "$SRC" "$i"); kind=db ;;
            1) f=$(printf '%s/blob%02d.bin' "$SRC" "$i"); kind=random ;;
            3) f=$(printf '%s/text%02d.log' "$SRC" "$i"); kind=text ;;
        esac
        case $kind in
            random) head -c "${FILE_MIB}M" /dev/urandom > "$f" ;;
            text) { base64 -w 100 /dev/urandom || true; } | head -c "${FILE_MIB}M" > "$f" ;;
            db) python3 - "$f" "$((FILE_MIB * 1048576))" "$i" <<'PY'
import random, struct, sys
path, size, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rnd = random.Random(seed)
words = ["".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rnd.randint(3, 10)))
         for _ in range(2000)]
status = [b"active", b"pending", b"shipped", b"cancelled", b"returned"]
PAGE = 8192
def page(pno, rowid):
    # header, then rows of (id, ts, customer, amount, status, name, email, note), then free space
    fill = rnd.randint(PAGE * 6 // 10, PAGE - 200)
    rows = []
    used = 32
    ts = 1_600_000_000 + rowid * 7
    while used < fill:
        name = rnd.choice(words).capitalize() + " " + rnd.choice(words).capitalize()
        note = " ".join(rnd.choice(words) for _ in range(rnd.randint(0, 12)))
        r = struct.pack("<qqid", rowid, ts + rnd.randint(0, 5000), rnd.randint(1, 50000),
                        round(rnd.uniform(1, 2000), 2))
        r += b"|".join([rnd.choice(status), name.encode(), (rnd.choice(words) + "@" + rnd.choice(words) + ".com").encode(), note.encode()])
        rows.append(struct.pack("<H", len(r)) + r)
        used += len(rows[-1]) + 2
        rowid += 1
    body = b"".join(rows)[: PAGE - 32]
    hdr = struct.pack("<IIQHH", 0x0D00 | (pno & 0xff), pno, rowid, len(rows), PAGE - len(body)).ljust(32, b"\0")
    return (hdr + body).ljust(PAGE, b"\0"), rowid
# A 32 MiB template of unique pages; the file repeats it at shifting page offsets
# (each 1 MiB frame is compressed on its own, so repetition far apart does not help).
tmpl = bytearray()
rowid = seed * 10_000_000
pno = 0
while len(tmpl) < 32 << 20:
    p, rowid = page(pno, rowid)
    tmpl += p
    pno += 1
tmpl = bytes(tmpl)
doubled = tmpl + tmpl
with open(path, "wb") as out:
    left, k = size, 0
    while left > 0:
        off = (k * 37 * PAGE) % len(tmpl)
        n = min(left, len(tmpl))
        out.write(doubled[off:off + n])
        left -= n
        k += 1
PY
            ;;
        esac
    done
    sync
    echo "$want_manifest" > "$WORK/src.manifest"
else
    log "reusing the data under $SRC ($want_manifest)"
fi
mapfile -t FILES < <(find "$SRC" -type f | sort)
[ ${#FILES[@]} -gt 0 ] || die "no source files under $SRC"
FIO_FILES=$(IFS=:; echo "${FILES[*]}")

# ------------------------------------------------------ 3. measurements ----
mkdir -p "$RUNDIR"
printf 'case\trep\tkind\twall_s\trss_kib\tjson\tstatus\tgroup\tcpu_s\tbusy_ticks\n' > "$RESULTS"
CASES=()
note_case() { local c; for c in "${CASES[@]:-}"; do [ "$c" = "$1" ] && return; done; CASES+=("$1"); }

# run_fio CASE REP GROUP fio-args...
run_fio() {
    local name=$1 rep=$2 group=$3; shift 3
    note_case "$name"
    local json=$RUNDIR/${name// /_}.$rep.json
    sync    # flush what the previous case wrote before judging how busy the machine is
    local t0 t1 b0 b1
    wait_quiet
    drop_caches
    b0=$(busy_ticks)
    t0=$(now_ns)
    if fio --name="${name// /_}" --rw=read --bs=1M --file_service_type=sequential --filename="$FIO_FILES" \
        --output-format=json --output="$json" "$@" >/dev/null 2>"$RUNDIR/${name// /_}.$rep.err"; then
        t1=$(now_ns)
        b1=$(busy_ticks)
        printf '%s\t%s\tfio\t%s\t\t%s\tok\t%s\t\t%s\n' "$name" "$rep" "$(((t1 - t0) / 1000))e-6" "$json" "$group" "$((b1 - b0))" >> "$RESULTS"
    else
        log "  $name failed: $(tail -1 "$RUNDIR/${name// /_}.$rep.err")"
        printf '%s\t%s\tfio\t\t\t%s\tfailed\t%s\n' "$name" "$rep" "$json" "$group" >> "$RESULTS"
    fi
}

# run_pv CASE REP GROUP [--sync DIR] pagevault-args...   (cold cache; wall time and peak RSS)
run_pv() {
    local name=$1 rep=$2 group=$3; shift 3
    local syncdir=""
    if [ "$1" = --sync ]; then syncdir=$2; shift 2; fi
    note_case "$name"
    local json=$RUNDIR/${name// /_}.$rep.json err=$RUNDIR/${name// /_}.$rep.err tf=$RUNDIR/time.tmp
    sync    # flush what the previous case wrote before judging how busy the machine is
    local t0 t1 b0 b1 rc=0
    wait_quiet
    drop_caches
    b0=$(busy_ticks)
    t0=$(now_ns)
    /usr/bin/time -f '%M %U %S' -o "$tf" "$PV" "$@" --json > "$json" 2> "$err" || rc=$?
    # Restore does not fsync what it wrote: count the flush, as backup's fsync is counted.
    if [ $rc -eq 0 ] && [ -n "$syncdir" ]; then sync -f "$syncdir"; fi
    t1=$(now_ns)
    b1=$(busy_ticks)
    if [ $rc -eq 0 ]; then
        local rss usr sys
        read -r rss usr sys < <(tail -1 "$tf")
        printf '%s\t%s\tpv\t%s\t%s\t%s\tok\t%s\t%s\t%s\n' "$name" "$rep" "$(((t1 - t0) / 1000))e-6" "$rss" "$json" "$group" \
            "$(awk -v u="$usr" -v s="$sys" 'BEGIN {print u + s}')" "$((b1 - b0))" >> "$RESULTS"
    else
        log "  $name failed (exit $rc): $(tail -3 "$err" | tr '\n' ' ')"
        printf '%s\t%s\tpv\t\t\t%s\tfailed\t%s\n' "$name" "$rep" "$json" "$group" >> "$RESULTS"
    fi
    return $rc
}

"$PV" --version >/dev/null || die "$PV does not run"

hold_guest_memory
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
T_START=$(date +%s)
SOURCE="files:$SRC"
for ((rep = 1; rep <= REPS; rep++)); do
    log "repetition $rep of $REPS"
    log "  fio"
    run_fio "fio buffered psync" "$rep" fio --ioengine=psync --direct=0
    run_fio "fio O_DIRECT libaio qd16" "$rep" fio --ioengine=libaio --direct=1 --iodepth=16
    log "  NUL"
    run_pv "NUL none direct-io on" "$rep" nul backup --source "$SOURCE" --to NUL --direct-io on || true
    run_pv "NUL none direct-io off" "$rep" nul backup --source "$SOURCE" --to NUL --direct-io off || true
    run_pv "NUL lz4" "$rep" nul-codec backup --source "$SOURCE" --to NUL --compress lz4 || true
    run_pv "NUL zstd" "$rep" nul-codec backup --source "$SOURCE" --to NUL --compress zstd || true
    for codec in none lz4; do
        for n in 1 2 4; do
            log "  $n disk stripe(s), $codec"
            rm -rf "$STRIPES" "$RESTORE"
            mkdir -p "$STRIPES"
            to=()
            for ((s = 1; s <= n; s++)); do to+=(--to "$STRIPES/s$s.pv"); done
            if run_pv "disk x$n $codec" "$rep" disk backup --source "$SOURCE" "${to[@]}" --compress "$codec" &&
                [ "$n" = 2 ]; then
                from=()
                for ((s = 1; s <= n; s++)); do from+=(--from "$STRIPES/s$s.pv"); done
                log "  restore of the 2-stripe $codec set"
                run_pv "restore x2 $codec" "$rep" restore --sync "$WORK" restore "${from[@]}" --to "$RESTORE" || true
            fi
            rm -rf "$STRIPES" "$RESTORE"
        done
    done
    if [ "$SWEEP" = 1 ]; then
        # The reader settings: what does the pipeline need from the volume? (read-depth 4 is the default)
        log "  read sweep (NUL, none codec)"
        for dio in on off; do
            for rd in 1 2 8 16; do
                run_pv "sweep NUL direct-io $dio read-depth $rd" "$rep" sweep backup --source "$SOURCE" --to NUL \
                    --direct-io "$dio" --read-depth "$rd" || true
            done
            run_pv "sweep NUL direct-io $dio readers 2" "$rep" sweep backup --source "$SOURCE" --to NUL \
                --direct-io "$dio" --readers 2 || true
        done
    fi
done

T_END=$(date +%s)
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

# The wait statistics of one default NUL run, as a user sees them.
drop_caches
"$PV" backup --source "$SOURCE" --to NUL --stats 100 > "$RUNDIR/nul-waits.txt" 2>&1 || true

# ------------------------------------------------------------ 4. the table ----
if [ "$COLD" = 1 ]; then cache="cold page cache (sync; echo 3 > /proc/sys/vm/drop_caches before every run)"
else cache="WARM page cache: dropping caches was not permitted, so reads may come from memory"; fi
commit=$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(cd "$ROOT" && git status --porcelain -- src Cargo.toml 2>/dev/null | grep -q . && echo "+uncommitted src changes" || true)
dev=$(df -P "$WORK" | awk 'NR==2 {print $1}')

export RESULTS SIZE_BYTES HZ NCPU
python3 - "${CASES[@]}" > "$RUNDIR/table.md" <<'PY'
import csv, json, os, statistics, sys
cases = sys.argv[1:]
MIB = 1048576.0
SIZE = int(os.environ["SIZE_BYTES"])
HZ, NCPU = float(os.environ["HZ"]), int(os.environ["NCPU"])

def load(path):
    try:
        return json.load(open(path))
    except Exception:
        return None

runs = {}
for r in csv.DictReader(open(os.environ["RESULTS"]), delimiter="\t"):
    r["j"] = load(r["json"]) if r["status"] == "ok" else None
    if r["status"] == "ok" and r["j"] is None:
        r["status"] = "bad json"
    if r["status"] == "ok":
        j, wall = r["j"], float(r["wall_s"])
        if r["kind"] == "fio":
            job = j["jobs"][0]
            r["speed"] = job["read"]["bw_bytes"] / MIB
            own = (job["usr_cpu"] + job["sys_cpu"]) / 100.0 * job["job_runtime"] / 1000.0
        else:
            r["speed"] = (j.get("raw_bytes") or SIZE) / wall / MIB
            own = float(r["cpu_s"] or 0)
        # CPU the rest of the machine used during the run, in % of all cores.
        r["others"] = max(0.0, (int(r["busy_ticks"]) / HZ - own) / (wall * NCPU) * 100)
    runs.setdefault(r["case"], []).append(r)

# Best fio read of every repetition (for ratios paired with the runs of the same repetition).
fio_rep = {}
for c, rs in runs.items():
    if c.startswith("fio"):
        for r in rs:
            if "speed" in r:
                fio_rep[r["rep"]] = max(fio_rep.get(r["rep"], 0.0), r["speed"])
fio_best = max(fio_rep.values() or [0.0])

def n(x, nd=0):
    return f"{x:,.{nd}f}"

out = []
out.append("| case | MB/s (best) | MB/s (median) | ratio vs fio best (paired median) | pagevault-reported MB/s (best) | raw/stored | peak RSS MiB | buffer pool MiB (config / allocated) | verdict | bottleneck (waits) | other CPU % (max) |")
out.append("|---|---:|---:|---:|---:|---:|---:|---:|---|---|---:|")
best_of = {}
for c in cases:
    rs = runs.get(c, [])
    ok = [r for r in rs if "speed" in r]
    failed = len(rs) - len(ok)
    if not ok:
        out.append(f"| {c} | FAILED | | | | | | | FAIL: {failed} of {len(rs)} runs failed | | |")
        continue
    speeds = [r["speed"] for r in ok]
    best, med = max(speeds), statistics.median(speeds)
    best_of[c] = best
    verdict, ratio_s = [], "-"
    is_read = c.startswith(("fio", "NUL", "sweep"))
    if is_read and fio_best:
        paired = [r["speed"] / fio_rep[r["rep"]] for r in ok if fio_rep.get(r["rep"])]
        ratio_s = f"{best / fio_best:.2f}" + (f" ({statistics.median(paired):.2f})" if paired and not c.startswith("fio") else "")
        if c.startswith("sweep") or " none" in c:
            verdict.append(("PASS" if best >= 0.95 * fio_best else "FAIL") + f" speed {100 * best / fio_best:.0f}% of fio (>= 95%)")
    if c.startswith("restore"):
        b = best_of.get(c.replace("restore", "disk"))
        if b:
            verdict.append(("PASS" if best >= b else "FAIL") + f" restore/backup {best / b:.2f} (>= 1)")
    rss_s = pool_s = rep_s = cr_s = bott = "-"
    pv = [r for r in ok if r["kind"] == "pv"]
    if pv:
        rss = max(int(r["rss_kib"]) for r in pv) / 1024.0
        cfg = max(((r["j"].get("config") or {}).get("total_buffer_memory") or r["j"].get("pool_bytes", 0)) for r in pv) / MIB
        alloc = max(r["j"].get("pool_bytes", 0) for r in pv) / MIB
        rss_s, pool_s = n(rss), f"{cfg:.1f} / {alloc:.1f}"
        verdict.append(("PASS" if rss <= cfg + 64 else "FAIL") + f" RSS <= pool+64 ({rss:.0f} vs {cfg + 64:.0f})")
        rep_s = n(max(r["j"].get("mb_per_sec", 0.0) for r in pv))
        ratios = [(r["j"].get("raw_bytes") or 0) / r["j"]["stored_bytes"] for r in pv if r["j"].get("stored_bytes")]
        cr_s = f"{statistics.median(ratios):.2f}" if ratios else "-"
        bott = "/".join(sorted({(r["j"].get("waits") or {}).get("bottleneck", "?") for r in pv}))
    if failed:
        verdict.append(f"FAIL: {failed} of {len(rs)} runs failed")
    others = max(r["others"] for r in ok)
    out.append(f"| {c} | {n(best)} | {n(med)} | {ratio_s} | {rep_s} | {cr_s} | {rss_s} | {pool_s} | {'; '.join(verdict) or '-'} | {bott} | {others:.0f} |")
print("\n".join(out))
PY

{
    echo "### pagevault core benchmark ($(date -u '+%Y-%m-%d %H:%M UTC'))"
    echo
    echo "- source: \`files:$SRC\`, $NFILES files, $((SIZE_BYTES / 1048576)) MiB (db-like pages, random, base64 text); device $dev"
    echo "- $cache"
    echo "- pagevault $commit$dirty $build_note; $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM; load average $LOAD_START at start, $LOAD_END at end; $VM_MEMORY_NOTE; $(((T_END - T_START) / 60)) min $(((T_END - T_START) % 60)) s of measurements, ${QUIET_WAITED} s of it waiting for other CPU load to pass"
    echo "- $REPS repetition(s) per case, run round-robin (every case once, then again); MB = 1,048,576 bytes. MB/s is measured by this script around the whole"
    echo "  command (raw bytes / wall seconds; disk backups include their fsync, restores include a \`sync -f\` of the target)."
    echo "  'pagevault-reported' is the mb_per_sec of its --json output. fio reads the same files in order with 1 MiB blocks."
    echo "  'paired' ratio: each run against the best fio read of the same repetition (less sensitive to drift of the device)."
    echo "  'other CPU %': CPU the rest of the machine used during the run (other processes, host steal), in % of all cores."
    echo "- targets: NUL (none codec) within 5% of the best fio read; peak RSS <= configured buffer pool + 64 MiB; restore >= backup of the same set"
    echo
    cat "$RUNDIR/table.md"
    echo
    echo "Wait statistics of a default \`backup --to NUL\` (cold cache):"
    echo
    echo '```'
    grep -v 'percent processed' "$RUNDIR/nul-waits.txt" || true
    echo '```'
} | tee "$RUNDIR/report.md"
log "raw results: $RUNDIR (runs.tsv, one JSON per run, report.md)"
