#!/usr/bin/env bash
# bench/pg.sh: pagevault beside pgBackRest and pg_basebackup on PostgreSQL 15 (issue 3).
#
# Builds (once, then reuses) two PostgreSQL 15 clusters with data checksums under WORK/pg:
#   pgbench  a pgbench database at scale SCALE (140 = about 2.1 GB; its rows compress 15-38x)
#   real     about REAL_MB MiB of order rows (numbers, timestamps, e-mails, word text, md5
#            tokens, random bytes, three indexes) that compress about 2x with zstd, like real data
# then times on each cluster, one case after another, REPS times (round-robin, the order
# reversed every other repetition), with a warm (the data directory, and before a restore its
# input, read into the page cache first) and a cold page cache
# (sync; echo 3 > /proc/sys/vm/drop_caches before every cold backup and every cold restore;
# on a VM that hands freed memory back to its host, that is stopped while measuring: see
# bench/vm-memory.sh):
#   - pagevault backup (none, lz4, zstd) to a file in the work dir, and its restore
#   - pagevault backup (none, lz4, zstd) to NUL
#   - pgbackrest backup --type=full, process-max=2 (compress-type none, lz4, zst), and its restore
#   - pg_basebackup -Ft -X stream (none, client-lz4, server-lz4, server-zstd), and its restore
#     (untar, decompressing with lz4/zstd)
#   - the device floor (fio, in the same round-robin): writing the data directory's size
#     sequentially, O_DIRECT, 2 writers with 8 writes of 1 MiB in flight each (warm), the same
#     while reading a file of that size (cold): what an uncompressed restore needs of the disk
#     (cold, also while reading only the size of pagevault's lz4 and zstd sets: compressed restores);
#     and with a cold cache, reading that file alone: what any cold backup needs of the disk
# Every timed run starts after `sync`, a quiet CPU and an idle disk (half a second under 2%
# busy, no `pagevault remove-swept` running), and includes making its output durable (sync -f of the target afterwards);
# the floor is fio's runtime plus that sync: a virtual disk acknowledges O_DIRECT writes into
# its host's cache, and the flush is where they reach the disk.
# Prints one markdown table (seconds, MB/s of the database size, backup size, restore seconds,
# pagevault's speed over each peer with the same codec) and the verdicts of the issue's goals:
# pagevault >= 2x pgBackRest with the same codec and cores (backup and restore) and >= 1.5x
# pg_basebackup's fastest variant, with the most the device floor allows for each restore
# without compression. Everything is kept under WORK/results/pg-DATE/.
#
# Usage: bench/pg.sh [--work DIR] [--scale N] [--real-mb N] [--reps N] [--cache warm,cold]
#                    [--sets pgbench,real] [--pv-dest file|repo] [--verify 0|1] [--no-build]
#                    [--keep-running]      (or positionally: bench/pg.sh [SCALE])
#   - pagevault backup and restore with encryption (pve: --key-file, AES-256-GCM) beside each
#     codec's plain one: encryption's cost is the "pagevault ÷ this" column of those rows
# Environment: WORK_DIR, SCALE, REAL_MB, REPS, CACHES, DATASETS, PV_DEST, VERIFY, QUIET_BUDGET,
#              PAGEVAULT (binary to use), NO_BUILD=1, PG_BIN, KEEP_RUNNING=1,
#              CASES ('pv lz4 disk;pvb lz4 disk': a subset), PV_BEFORE (binary of the pvb cases)
# Quick check: bench/pg.sh --scale 10 --real-mb 150 --reps 1. See bench/README.md.
set -euo pipefail
# The whole script is one block that bash reads before running it: editing or checking out this
# file while it runs does not change what runs.
{

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$ROOT/bench/lib.sh"
SCALE=${SCALE:-140}
REAL_MB=${REAL_MB:-1024}
REPS=${REPS:-2}
CACHES=${CACHES:-warm,cold}
DATASETS=${DATASETS:-pgbench,real}
PV_DEST=${PV_DEST:-file}
VERIFY=${VERIFY:-1}
KEEP_RUNNING=${KEEP_RUNNING:-0}
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
DATA_VERSION=1            # bump when a generator changes: forces new clusters

parse_args --work=WORK --scale=SCALE --real-mb=REAL_MB --reps=REPS --cache=CACHES --caches=CACHES --sets=DATASETS --pv-dest=PV_DEST --verify=VERIFY --no-build=NO_BUILD=1 --keep-running=KEEP_RUNNING=1 -- "$@"
[ ${#pos[@]} -ge 1 ] && SCALE=${pos[0]}
need_posint REPS "$REPS"
need_posint SCALE "$SCALE"
need_posint REAL_MB "$REAL_MB"
[[ $PV_DEST =~ ^(file|repo)$ ]] || { echo "PV_DEST must be file or repo" >&2; exit 2; }
IFS=', ' read -r -a CACHE_LIST <<< "$CACHES"
IFS=', ' read -r -a SET_LIST <<< "$DATASETS"
for c in "${CACHE_LIST[@]}"; do [[ $c =~ ^(warm|cold)$ ]] || { echo "cache must be warm and/or cold, not '$c'" >&2; exit 2; }; done
for s in "${SET_LIST[@]}"; do [[ $s =~ ^(pgbench|real)$ ]] || { echo "data set must be pgbench and/or real, not '$s'" >&2; exit 2; }; done
[ "$(id -u)" -eq 0 ] || { echo "run as root (drops the page cache, runs PostgreSQL as the postgres user)" >&2; exit 2; }

mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
cd /                          # the postgres user runs commands too: a directory everyone can enter
PGW=$WORK/pg                  # clusters, pgBackRest settings
SCRATCH_ROOT=$PGW/scratch     # holds SCRATCH; emptied after every case
SCRATCH=$SCRATCH_ROOT/case-0  # the backup and restore of the case running (bench/scratch.sh)
STAMP=$(date +%Y%m%d-%H%M%S)
RUNDIR=$WORK/results/pg-$STAMP
RESULTS=$RUNDIR/runs.tsv

# ---------------------------------------------------------------- 1. tools ----
if [ ! -x "$PG_BIN/initdb" ]; then
    # No default cluster on port 5432: this script makes its own.
    mkdir -p /etc/postgresql-common
    grep -qs '^create_main_cluster' /etc/postgresql-common/createcluster.conf ||
        echo 'create_main_cluster = false' >> /etc/postgresql-common/createcluster.conf
    need_pkg "$PG_BIN/initdb" postgresql-15
fi
need_pkg pgbackrest pgbackrest
use_current_pgbackrest
need_pkg /usr/bin/time time
need_pkg lz4 lz4
need_pkg zstd zstd
need_pkg ss iproute2
need_pkg fio fio
command -v python3 >/dev/null || need_pkg python3 python3
id postgres >/dev/null 2>&1 || die "there is no postgres user (install postgresql-15)"

ensure_binary
"$PV" --version >/dev/null || die "$PV does not run"

# ------------------------------------------------------------ page cache ----
source "$ROOT/bench/vm-memory.sh"
source "$ROOT/bench/scratch.sh"
cold_cache_check
if [ "$COLD_OK" = 0 ]; then
    log "warning: cannot drop the page cache: measuring warm only"
    CACHE_LIST=(warm)
fi

# ------------------------------------------------------------ clusters ----
declare -A PORT DATA
RUNNING=()            # data directories this script started (stopped on exit)

# pg_start DATADIR SOCKETDIR LOG FIRST-PORT: starts a server (or finds it running); sets STARTED_PORT
pg_start() {
    local data=$1 sock=$2 logf=$3 port
    if as_pg "$PG_BIN/pg_ctl" -D "$data" status >/dev/null 2>&1; then
        STARTED_PORT=$(sed -n 4p "$data/postmaster.pid")
        RUNNING+=("$data")
        return 0
    fi
    port=$(free_port "$4")
    mkdir -p "$sock"; chown postgres: "$sock"
    as_pg "$PG_BIN/pg_ctl" -D "$data" -l "$logf" -w -t 300 \
        -o "-p $port -c listen_addresses=127.0.0.1 -k $sock" start >/dev/null || return 1
    RUNNING+=("$data")
    STARTED_PORT=$port
}
pg_stop() {
    local data=$1
    if as_pg "$PG_BIN/pg_ctl" -D "$data" status >/dev/null 2>&1; then
        as_pg "$PG_BIN/pg_ctl" -D "$data" -w -t 120 -m fast stop >/dev/null || true
    fi
}

cleanup() {
    local d
    for d in "${RUNNING[@]:-}"; do
        [ -n "$d" ] || continue
        # The benchmark clusters stay up with --keep-running; restored ones always stop.
        if [ "$KEEP_RUNNING" = 1 ] && [[ $d == "$PGW"/*/data && $d != "$SCRATCH_ROOT"* ]]; then continue; fi
        pg_stop "$d"
    done
    rm -rf "$SCRATCH_ROOT"
    rm -f "$RUNDIR/pagevault"
    release_guest_memory
}
trap_signals cleanup

# The realistic rows: one batch of ids :lo..:hi.
REAL_SCHEMA="
CREATE TABLE orders (
    id          bigint PRIMARY KEY,
    customer_id integer NOT NULL,
    created_at  timestamptz NOT NULL,
    amount      numeric(12,2) NOT NULL,
    quantity    smallint NOT NULL,
    status      text NOT NULL,
    email       text NOT NULL,
    note        text,
    token       text NOT NULL,
    digest      bytea
);
CREATE INDEX orders_customer ON orders (customer_id);
CREATE INDEX orders_created ON orders (created_at);"
REAL_WORDS='the of and to in is was that for on with as by at from his her an be this which or had are not but have were they it one all their been has more when who also into other would there time can only after new first two over some than its out such these made most many years any state may since work could between through where under then about both during each before those while world system page life part number city people however great three later against well being long use family known still power group high several same including without form found day area name second because water music war national based end history became general public place small local course line school even among set left following year country south north case point government university right film another company own house included around order season data report market service price value customer product account address payment delivery invoice shipment warehouse category supplier discount review rating message session region branch employee manager contract project budget quarter revenue profit tax total amount balance credit debit transfer status pending approved rejected refund priority urgent normal low medium level score result test sample batch lot serial model version release update change request issue ticket support contact email phone mobile street avenue road lane drive court square park garden valley river lake mountain hill forest beach island harbor bridge tower castle palace museum library theater stadium airport station hotel restaurant cafe bakery store shop mall office factory farm hospital clinic pharmacy college academy institute'
REAL_BATCH="
INSERT INTO orders
SELECT g,
       (random() * 200000)::int,
       timestamptz '2023-01-01' + random() * interval '1000 days',
       round((random() * random() * 2000)::numeric, 2),
       (1 + random() * 9)::int,
       (ARRAY['new','paid','shipped','delivered','cancelled','returned'])[1 + floor(random() * 6)::int],
       w[1 + floor(random() * array_length(w, 1))::int] || '.' || (random() * 9999)::int || '@'
         || (ARRAY['gmail.com','yahoo.com','example.org','mail.net','corp.example.com'])[1 + floor(random() * 5)::int],
       CASE WHEN random() < 0.3 THEN NULL
            ELSE array_to_string(ARRAY(SELECT w[1 + floor(random() * array_length(w, 1))::int]
                                       FROM generate_series(1, 3 + (g % 17))), ' ') END,
       md5(g::text || random()::text),
       CASE WHEN random() < 0.5 THEN decode(md5(random()::text) || md5(random()::text), 'hex') END
FROM generate_series(:lo, :hi) AS g,
     (SELECT regexp_split_to_array('$REAL_WORDS', ' ') AS w) AS words;"

# make_cluster SET: creates (or reuses) WORK/pg/SET with its data; starts it; sets PORT and DATA.
make_cluster() {
    local set=$1 dir=$PGW/$1 want port
    case $set in
        pgbench) want="version=$DATA_VERSION set=pgbench scale=$SCALE" ;;
        real) want="version=$DATA_VERSION set=real mb=$REAL_MB" ;;
    esac
    DATA[$set]=$dir/data
    if cluster_is_current "$dir" "$want"; then
        log "reusing the $set cluster in $dir ($want)"
        pg_start "$dir/data" "$dir/run" "$dir/server.log" 55432 || die "PostgreSQL did not start (see $dir/server.log)"
        PORT[$set]=$STARTED_PORT
        return
    fi
    local need_mb
    case $set in pgbench) need_mb=$((SCALE * 15 * 4 + 2048)) ;; real) need_mb=$((REAL_MB * 4 + 2048)) ;; esac
    fresh_cluster_dir "$dir" "$need_mb" "the $set cluster and its copies"
    log "creating the $set cluster in $dir"
    bench_initdb "$dir/data" "$dir" bench/pg.sh
    pg_start "$dir/data" "$dir/run" "$dir/server.log" 55432 || die "PostgreSQL did not start (see $dir/server.log)"
    port=$STARTED_PORT
    PORT[$set]=$port
    local t0=$SECONDS
    case $set in
        pgbench)
            log "  pgbench -i -s $SCALE (server-side generation)"
            psql_on "$port" postgres -c "CREATE DATABASE bench"
            "$PG_BIN/pgbench" -i -s "$SCALE" -I dtGvp -q -h 127.0.0.1 -p "$port" -U postgres bench \
                > "$dir/load.log" 2>&1 || die "pgbench -i failed (see $dir/load.log)"
            ;;
        real)
            log "  about $REAL_MB MiB of order rows (numbers, text, hashes, random bytes; 3 indexes)"
            psql_on "$port" postgres -c "CREATE DATABASE real"
            psql_on "$port" real -c "$REAL_SCHEMA" >/dev/null
            local lo=1 batch=250000 size target=$((REAL_MB * 1048576))
            while :; do
                size=$(psql_on "$port" real -At -c "SELECT pg_database_size('real')")
                [ "$size" -lt "$target" ] || break
                # Two sessions at once (two cores); the last round is cut to what is missing.
                local left_rows=$(( (target - size) / 280 + 1000 ))
                [ "$batch" -gt $((left_rows / 2)) ] && batch=$((left_rows / 2 + 1))
                printf '%s\n' "$REAL_BATCH" | psql_on "$port" real -v lo=$lo -v hi=$((lo + batch - 1)) >/dev/null &
                local p1=$!
                printf '%s\n' "$REAL_BATCH" | psql_on "$port" real -v lo=$((lo + batch)) -v hi=$((lo + 2 * batch - 1)) >/dev/null &
                local p2=$!
                wait $p1 || die "loading the real data set failed"
                wait $p2 || die "loading the real data set failed"
                lo=$((lo + 2 * batch))
            done
            psql_on "$port" real -c "VACUUM ANALYZE orders" >/dev/null
            ;;
    esac
    # A quiet cluster for the measurements: everything written, old WAL gone.
    psql_on "$port" postgres -c "ALTER SYSTEM SET max_wal_size = '1GB'" -c "SELECT pg_reload_conf()" >/dev/null
    psql_on "$port" postgres -c "CHECKPOINT" -c "SELECT pg_switch_wal()" -c "CHECKPOINT" >/dev/null
    sync
    echo "$want" > "$dir/manifest"
    log "  loaded in $((SECONDS - t0)) s"
}

# db_bytes SET: the size of the data directory without pg_wal (what every tool copies).
db_bytes() {
    local d=${DATA[$1]}
    echo $(( $(du -sb "$d" | cut -f1) - $(du -sb "$d/pg_wal" | cut -f1) ))
}
# The table that the restore check counts.
main_table() { case $1 in pgbench) echo "bench pgbench_accounts" ;; real) echo "real orders" ;; esac; }

# ------------------------------------------------------ 3. measurements ----
mkdir -p "$RUNDIR" "$PGW"
snapshot_binary "$RUNDIR"
printf 'set\ttool\tvariant\tcache\trep\tphase\tseconds\tbytes\tstatus\tbusy_ticks\tcpu_s\tout\n' > "$RESULTS"
printf 'set\tdb_bytes\tdescription\n' > "$RUNDIR/sets.tsv"
: > "$RUNDIR/notes.txt"
warm_up() {      # read the data directory into the page cache
    find "${DATA[$SET]}" -type f -print0 | xargs -0 cat > /dev/null 2>&1 || true
}
# warm_input PATH: with a warm cache, a restore's input (a set or repository just written)
# read into the page cache first, whoever wrote it: pagevault writes its stripes with
# O_DIRECT, so they are not there after its backup as a buffered writer's are.
warm_input() {
    [ "$CACHE" = warm ] || return 0
    find "$1" -type f -print0 | xargs -0 cat > /dev/null 2>&1 || true
}

# CPU of the server: the postmaster and its children, with those it has reaped (ticks).
server_ticks() {
    local pid
    pid=$(head -1 "${DATA[$SET]}/postmaster.pid" 2>/dev/null) || { echo 0; return; }
    { echo "$pid"; pgrep -P "$pid" || true; } | while read -r p; do
        sed 's/^.*) //' "/proc/$p/stat" 2>/dev/null || true
    done | awk '{s += $12 + $13 + $14 + $15} END {print s + 0}'
}

# run_timed PHASE TOOL VARIANT SIZE-PATH SYNC-DIR COMMAND...: one timed run, one row of runs.tsv.
# Globals: SET CACHE REP. The time includes `sync -f SYNC-DIR` after the command.
# Records the CPU seconds of the command's processes and of the server, and the machine's busy ticks.
run_timed() {
    local phase=$1 tool=$2 variant=$3 sizep=$4 syncdir=$5; shift 5
    local tag="$SET.$tool.$variant.$CACHE.$REP.$phase"
    tag=${tag// /_}
    local out=$RUNDIR/$tag.out err=$RUNDIR/$tag.err t0 ts t1 b0 b1 c0 c1 s0 s1 rc=0 bytes=""
    sync
    wait_quiet
    if [ "$CACHE" = cold ]; then drop_caches; fi
    wait_disk_idle "$PGW"
    s0=$(server_ticks)
    times > "$RUNDIR/times0.tmp"   # CPU of the waited-for children so far (a builtin: no fork)
    b0=$(busy_ticks)
    t0=$(now_ns)
    "$@" > "$out" 2> "$err" || rc=$?
    ts=$(now_ns)
    if [ $rc -eq 0 ] && [ -n "$syncdir" ]; then sync -f "$syncdir" || rc=$?; fi
    t1=$(now_ns)
    # The sync's own seconds: fio's floor is its runtime plus this (what makes its writes durable).
    echo "$(((t1 - ts) / 1000))e-6" > "$out.sync"
    b1=$(busy_ticks)
    times > "$RUNDIR/times.tmp"
    s1=$(server_ticks)
    local cpu
    cpu=$(awk -v hz="$HZ" -v srv=$((s1 - s0)) 'FNR == 2 {
            for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); v[FILENAME] += a[1] * 60 + a[2] } }
        END { for (f in v) if (f ~ /times0/) c0 = v[f]; else c1 = v[f]
              d = srv / hz; if (d < 0) d = 0
              printf "%.3f", c1 - c0 + d }' "$RUNDIR/times0.tmp" "$RUNDIR/times.tmp")
    if [ $rc -eq 0 ]; then
        [ -n "$sizep" ] && bytes=$(du -sb "$sizep" | cut -f1)
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\tok\t%s\t%s\t%s\n' "$SET" "$tool" "$variant" "$CACHE" "$REP" "$phase" \
            "$(((t1 - t0) / 1000))e-6" "$bytes" "$((b1 - b0))" "$cpu" "$out" >> "$RESULTS"
        log "    $phase $tool $variant: $(awk -v n=$((t1 - t0)) 'BEGIN {printf "%.2f s", n / 1e9}'), CPU $cpu s"
    else
        log "    $phase $tool $variant FAILED (exit $rc): $(tail -3 "$err" | tr '\n' ' ')"
        printf '%s\t%s\t%s\t%s\t%s\t%s\t\t\tfailed\t\t\t%s\n' "$SET" "$tool" "$variant" "$CACHE" "$REP" "$phase" "$err" >> "$RESULTS"
    fi
    return $rc
}

# verify_restore DIR WHAT: starts a restored data directory and counts the main table (untimed).
verify_restore() {
    local dir=$1 what=$2 port want got db table
    read -r db table < <(main_table "$SET")
    want=$(psql_on "${PORT[$SET]}" "$db" -At -c "SELECT count(*) FROM $table")
    if pg_start "$dir" "$SCRATCH/verify-run" "$SCRATCH/verify.log" 56432; then
        port=$STARTED_PORT
        got=$(psql_on "$port" "$db" -At -c "SELECT count(*) FROM $table" 2>&1 || true)
        pg_stop "$dir"
    else
        got="did not start: $(tail -2 "$SCRATCH/verify.log" 2>/dev/null | tr '\n' ' ')"
    fi
    if [ "$got" = "$want" ]; then
        echo "- $SET: $what: the restored cluster started and recovered; $table has $got rows, as the source (PASS)" >> "$RUNDIR/notes.txt"
        log "    restore check: PASS ($got rows)"
    else
        echo "- $SET: $what: restore check FAILED: source has $want rows in $table, restored cluster: $got" >> "$RUNDIR/notes.txt"
        log "    restore check FAILED: $got"
    fi
}

# The key of the encrypted cases (pve): 32 random bytes, private, made once.
BENCH_KEY=$PGW/bench.key
bench_key() {
    if [ ! -s "$BENCH_KEY" ]; then
        mkdir -p "$PGW"
        (umask 077; head -c 32 /dev/urandom > "$BENCH_KEY")
    fi
    chmod 600 "$BENCH_KEY"
}

case_pv() { # case_pv CODEC disk|nul [BINARY TOOL [EXTRA OPTION...]]
    local codec=$1 dest=$2 src="postgres://postgres@127.0.0.1:${PORT[$SET]}/postgres?pgdata=${DATA[$SET]}"
    local PV=${3:-$PV} tool=${4:-pagevault}
    local extra=("${@:5}") bonly=()
    # Options for the backup only (PV_BACKUP_ONLY, words): --sign.
    read -r -a bonly <<< "${PV_BACKUP_ONLY:-}"
    fresh_scratch
    if [ "$dest" = nul ]; then
        run_timed backup "$tool" "NUL $codec" "" "" "$PV" backup --source "$src" --to NUL --compress "$codec" "${extra[@]}" "${bonly[@]}" --json || true
        return
    fi
    local to=(--to "$SCRATCH/pv.pvb") from=(--from "$SCRATCH/pv.pvb") sizep=$SCRATCH/pv.pvb
    if [ "$PV_DEST" = repo ]; then to=(--repo "$SCRATCH/repo"); from=(--repo "$SCRATCH/repo"); sizep=$SCRATCH/repo; fi
    if run_timed backup "$tool" "$codec" "$sizep" "$SCRATCH" "$PV" backup --source "$src" "${to[@]}" --compress "$codec" "${extra[@]}" "${bonly[@]}" --json; then
        warm_input "$sizep"
        if run_timed restore "$tool" "$codec" "$SCRATCH/restore" "$SCRATCH" \
            "$PV" restore "${from[@]}" --to "$SCRATCH/restore" --owner postgres "${extra[@]}" --json &&
            [ "$VERIFY" = 1 ] && [ "$REP" = 1 ] && [ "$CACHE" = "${CACHE_LIST[0]}" ] && [ "$codec" = lz4 ] && [ "$tool" = pagevault ]; then
            verify_restore "$SCRATCH/restore" "pagevault lz4 restore"
        fi
    fi
    fresh_scratch
}

case_pgbr() { # case_pgbr none|lz4|zst
    local ct=$1 conf=$PGW/pgbackrest-$SET.conf
    fresh_scratch
    mkdir -p "$PGW/pgbackrest-lock" "$PGW/pgbackrest-log"
    chown postgres: "$PGW/pgbackrest-lock" "$PGW/pgbackrest-log"
    cat > "$conf" <<EOF
[global]
repo1-path=$SCRATCH/pgbackrest-repo
repo1-retention-full=2
process-max=2
start-fast=y
archive-check=n
archive-mode-check=n
lock-path=$PGW/pgbackrest-lock
log-path=$PGW/pgbackrest-log
log-level-file=off
log-level-console=warn

[$SET]
pg1-path=${DATA[$SET]}
pg1-port=${PORT[$SET]}
pg1-socket-path=$PGW/$SET/run
pg1-user=postgres
EOF
    chmod 644 "$conf"
    (cd / && as_pg pgbackrest --config="$conf" --stanza="$SET" stanza-create) > "$RUNDIR/stanza-create.log" 2>&1 ||
        { log "    pgbackrest stanza-create failed: $(tail -2 "$RUNDIR/stanza-create.log" | tr '\n' ' ')"; return 0; }
    if run_timed backup pgbackrest "$ct" "$SCRATCH/pgbackrest-repo" "$SCRATCH" \
        as_pg pgbackrest --config="$conf" --stanza="$SET" backup --type=full --compress-type="$ct"; then
        install -d -m 700 -o postgres -g postgres "$SCRATCH/restore"
        warm_input "$SCRATCH/pgbackrest-repo"
        run_timed restore pgbackrest "$ct" "$SCRATCH/restore" "$SCRATCH" \
            as_pg pgbackrest --config="$conf" --stanza="$SET" --pg1-path="$SCRATCH/restore" restore || true
    fi
    fresh_scratch
}

# pgbb_restore BACKUPDIR TARGET: what a user does with a pg_basebackup -Ft backup.
pgbb_restore() {
    local from=$1 to=$2 f
    install -d -m 700 -o postgres -g postgres "$to" "$to/pg_wal"
    for f in "$from"/base.tar* "$from"/pg_wal.tar*; do
        local dest=$to
        case $f in */pg_wal.tar*) dest=$to/pg_wal ;; esac
        case $f in
            *.tar) tar -xf "$f" -C "$dest" ;;
            *.tar.lz4) lz4 -dc "$f" | tar -xf - -C "$dest" ;;
            *.tar.zst) zstd -q -dc "$f" | tar -xf - -C "$dest" ;;
            *.tar.gz) gzip -dc "$f" | tar -xf - -C "$dest" ;;
            *) echo "unexpected file $f" >&2; return 1 ;;
        esac
    done
}

case_pgbb() { # case_pgbb none|client-lz4|server-lz4|server-zstd
    local v=$1 args=()
    [ "$v" = none ] || args=(--compress="$v")
    fresh_scratch
    if run_timed backup pg_basebackup "$v" "$SCRATCH/bb" "$SCRATCH" \
        "$PG_BIN/pg_basebackup" -h 127.0.0.1 -p "${PORT[$SET]}" -U postgres -D "$SCRATCH/bb" -Ft -X stream -c fast "${args[@]}"; then
        warm_input "$SCRATCH/bb"
        run_timed restore pg_basebackup "$v" "$SCRATCH/restore" "$SCRATCH" pgbb_restore "$SCRATCH/bb" "$SCRATCH/restore" || true
    fi
    fresh_scratch
}

# case_floor: what the disk alone takes for the bytes of an uncompressed restore, at its best
# (O_DIRECT, deep queues). Warm: write the data directory's size. Cold: the same while reading a
# file of that size from the disk, as a cold restore reads its set; and before, that read alone,
# as any cold backup reads the data directory.
case_floor() {
    local src=$PGW/floor-$SET.src jobs=()
    if [ "$CACHE" = cold ] && [ "$(stat -c %s "$src" 2>/dev/null || echo 0)" != "$DBB" ]; then
        fio --name=lay-out --filename="$src" --rw=write --bs=1M --size="$DBB" --end_fsync=1 > /dev/null ||
            { log "    fio cannot lay out $src"; return 0; }
    fi
    fresh_scratch
    if [ "$CACHE" = cold ]; then
        run_timed backup device none "" "" fio --output-format=json --ioengine=libaio --direct=1 --bs=1M \
            --iodepth=16 --name=read --filename="$src" --rw=read --size="$DBB" || true
    fi
    mkdir -p "$SCRATCH/restore"
    jobs=(--output-format=json --ioengine=libaio --direct=1 --bs=1M --iodepth=8
          --name=write --directory="$SCRATCH/restore" --rw=write --size=$((DBB / 2)) --numjobs=2 --fallocate=none)
    [ "$CACHE" = cold ] && jobs+=(--name=read --filename="$src" --rw=read --size="$DBB" --numjobs=1)
    run_timed restore device none "$SCRATCH/restore" "$SCRATCH" fio "${jobs[@]}" || true
    # A compressed cold restore reads only its set: the same writes while reading the size of
    # pagevault's latest set of that codec (none yet in the first repetition's first cases).
    if [ "$CACHE" = cold ]; then
        local codec stored
        for codec in lz4 zstd; do
            stored=$(awk -F'\t' -v s="$SET" -v c="$codec" '$1 == s && $2 == "pagevault" && $3 == c &&
                $6 == "backup" && $9 == "ok" && $8 != "" {b = $8} END {print b}' "$RESULTS")
            [ -n "$stored" ] || continue
            rm -rf "$SCRATCH/restore"    # (jobs names this directory)
            mkdir -p "$SCRATCH/restore"
            jobs[-2]=--size="$stored"
            run_timed restore device "$codec" "$SCRATCH/restore" "$SCRATCH" fio "${jobs[@]}" || true
        done
    fi
    fresh_scratch
}

# The cases of one repetition, codec by codec so that every tool meets the same conditions.
CASE_LIST=(
    "floor" "pv none disk" "pve none disk" "pv none nul" "pgbr none" "pgbb none"
    "pv lz4 disk" "pve lz4 disk" "pv lz4 nul" "pve lz4 nul" "pgbr lz4" "pgbb client-lz4" "pgbb server-lz4"
    "pv zstd disk" "pve zstd disk" "pv zstd nul" "pgbr zst" "pgbb server-zstd"
)
# CASES (';'-separated) runs a subset; with PV_BEFORE (another build of pagevault), "pvb CODEC
# disk|nul" cases run it as tool pagevault-before: the before/after table of a refactoring.
# "pve CODEC disk|nul" runs this pagevault with encryption (--key-file, AES-256-GCM) as tool
# pagevault-encrypted: the table's "pagevault ÷ this" column of its rows is encryption's cost;
# "pvs CODEC disk|nul" with signing (backup --sign, keyed BLAKE3 tags) as pagevault-signed.
if [ -n "${CASES:-}" ]; then IFS=';' read -r -a CASE_LIST <<< "$CASES"; fi
run_case() {
    local words
    read -r -a words <<< "$1"
    case ${words[0]} in
        pv) case_pv "${words[1]}" "${words[2]}" ;;
        pvb) case_pv "${words[1]}" "${words[2]}" "${PV_BEFORE:?PV_BEFORE names the binary before}" pagevault-before ;;
        pve) bench_key; case_pv "${words[1]}" "${words[2]}" "$PV" pagevault-encrypted --key-file "$BENCH_KEY" ;;
        pvs) bench_key; PV_BACKUP_ONLY=--sign case_pv "${words[1]}" "${words[2]}" "$PV" pagevault-signed --key-file "$BENCH_KEY" ;;
        pgbr) case_pgbr "${words[1]}" ;;
        pgbb) case_pgbb "${words[1]}" ;;
        floor) case_floor ;;
    esac
}

hold_guest_memory
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
T_START=$(date +%s)
T_MEASURE=0
for SET in "${SET_LIST[@]}"; do
    make_cluster "$SET"
    # Only the cluster being measured runs.
    for other in "${SET_LIST[@]}"; do
        [ "$other" = "$SET" ] || { [ -n "${DATA[$other]:-}" ] && pg_stop "${DATA[$other]}"; } || true
    done
    DBB=$(db_bytes "$SET")
    case $SET in
        pgbench) desc="pgbench scale $SCALE" ;;
        real) desc="order rows, about $REAL_MB MiB target" ;;
    esac
    printf '%s\t%s\t%s\n' "$SET" "$DBB" "$desc" >> "$RUNDIR/sets.tsv"
    log "data set $SET: $desc, $((DBB / 1048576)) MiB without pg_wal, on port ${PORT[$SET]}"
    t_set=$(date +%s)
    for ((REP = 1; REP <= REPS; REP++)); do
        order=("${CASE_LIST[@]}")
        if [ $((REP % 2)) = 0 ]; then   # every other repetition runs the cases backwards
            order=(); for ((i = ${#CASE_LIST[@]} - 1; i >= 0; i--)); do order+=("${CASE_LIST[i]}"); done
        fi
        caches=("${CACHE_LIST[@]}")
        if [ $((REP % 2)) = 0 ] && [ ${#caches[@]} = 2 ]; then caches=("${CACHE_LIST[1]}" "${CACHE_LIST[0]}"); fi
        for CACHE in "${caches[@]}"; do
            log "$SET: repetition $REP of $REPS, $CACHE cache"
            [ "$CACHE" = warm ] && warm_up
            for c in "${order[@]}"; do run_case "$c"; done
        done
    done
    T_MEASURE=$((T_MEASURE + $(date +%s) - t_set))

    # The wait statistics of pagevault, as a user sees them (cold cache, disk backups and their restores).
    if [ "$COLD_OK" = 1 ]; then
        log "$SET: pagevault wait statistics (cold cache)"
        src="postgres://postgres@127.0.0.1:${PORT[$SET]}/postgres?pgdata=${DATA[$SET]}"
        for codec in none lz4 zstd; do
            fresh_scratch
            drop_caches
            {
                echo "== $SET: pagevault backup --compress $codec --to FILE (cold cache)"
                "$PV" backup --source "$src" --to "$SCRATCH/pv.pvb" --compress "$codec" 2>&1 | grep -v 'percent processed' || true
                drop_caches
                echo "== $SET: pagevault restore of that set (cold cache)"
                "$PV" restore --from "$SCRATCH/pv.pvb" --to "$SCRATCH/restore" --owner postgres 2>&1 | grep -v 'percent processed' || true
                echo
            } >> "$RUNDIR/waits.txt"
        done
        fresh_scratch
    fi
done
T_END=$(date +%s)
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
for SET in "${SET_LIST[@]}"; do [ "$KEEP_RUNNING" = 1 ] || pg_stop "${DATA[$SET]}"; done

# ------------------------------------------------------------ 4. the table ----
export RESULTS RUNDIR HZ NCPU
python3 "$ROOT/bench/pg_table.py" > "$RUNDIR/table.md"

{
    echo "### pagevault against pgBackRest and pg_basebackup, PostgreSQL 15 ($(date -u '+%Y-%m-%d %H:%M UTC'))"
    echo
    while IFS=$'\t' read -r s b d; do
        [ "$s" = set ] && continue
        echo "- data set \`$s\`: $d; $((b / 1048576)) MiB in the data directory without pg_wal (the MB of MB/s)"
    done < "$RUNDIR/sets.tsv"
    echo "- pagevault $commit$dirty (binary built $PV_BUILT) $build_note ($PV_DEST destination: $([ "$PV_DEST" = file ] && echo '--to FILE' || echo '--repo DIR')); $(pgbackrest version) (process-max=2, archive-check=n, start-fast=y);"
    echo "  $("$PG_BIN/pg_basebackup" --version) (-Ft -X stream -c fast); pagevault threads: one per core"
    echo "- $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM, device $(df -P "$PGW" | awk 'NR==2 {print $1}'); load average $LOAD_START at start, $LOAD_END at end; $VM_MEMORY_NOTE;"
    echo "  every case in a new directory that ext4 places away from the inodes the last cases freed (bench/scratch.sh)"
    echo "- $REPS repetition(s) of every case per cache state (${CACHE_LIST[*]}), round-robin, every other repetition in reverse order;"
    echo "  $((T_MEASURE / 60)) min $((T_MEASURE % 60)) s of measurements (${QUIET_WAITED} s of it waiting for other CPU load), $(((T_END - T_START) / 60)) min $(((T_END - T_START) % 60)) s in all"
    echo "- seconds: wall time of the command plus \`sync -f\` of what it wrote (backup and restore alike); the best of the repetitions"
    echo "  (other processes on the machine only ever add time), the median in brackets; MB/s and every ratio use the best;"
    echo "  MB/s = data directory size / seconds (MB = 1,048,576 bytes); cold = \`sync; echo 3 > /proc/sys/vm/drop_caches\` before every backup and every restore;"
    echo "  CPU s = CPU seconds of the command's processes plus the PostgreSQL server's (pg_basebackup's server-side compression, checkpoints);"
    echo "  other CPU % = the rest of the machine's busy CPU during the row's runs (max), in % of all cores: high values mean a disturbed row."
    echo "  pagevault ÷ this = this tool's seconds / pagevault's seconds with the same codec (pagevault's disk rows; the NUL rows only show the pipeline)."
    echo "  pgBackRest runs with archive-check=n (archive_mode is off here): its restores are timed, not started. pg_basebackup restore = untar (lz4 -d / zstd -d | tar -x)."
    echo "  device floor = restore: fio writing the data directory's size, O_DIRECT, 2 writers x 8 MiB in flight (cold: while reading a file that size from the disk),"
    echo "  its runtime plus the sync -f after it (a virtual disk acknowledges O_DIRECT writes into its host's cache: the flush makes them durable);"
    echo "  backup (cold only): fio reading a file that size, O_DIRECT, 16 MiB in flight. Beside the cold pg_basebackup goal: any cold backup reads that much."
    echo "  An uncompressed backup's goals use the restore floor: it writes the data size too (cold: while reading it), as an uncompressed restore does."
    echo "  peer ÷ floor = about the most any tool could beat that peer by on this disk at that moment. A goal is called device-bound when pagevault's time"
    echo "  is within 10% of fio's (the goal's \"or at the device floor\"), or when the peer's time over the lesser of fio's and pagevault's is under the goal:"
    echo "  fio is no strict floor (pagevault's buffered I/O sometimes beats it)."
    echo
    cat "$RUNDIR/table.md"
    echo
    if [ -s "$RUNDIR/notes.txt" ]; then echo "Restore checks (untimed):"; echo; cat "$RUNDIR/notes.txt"; echo; fi
    if [ -s "$RUNDIR/waits.txt" ]; then
        echo "pagevault's wait statistics (one more cold run of each disk case):"
        echo
        echo '```'
        grep -v -e '^Processed' "$RUNDIR/waits.txt" || true
        echo '```'
    fi
} | tee "$RUNDIR/report.md"
rm -f "$PV" "$RUNDIR"/times*.tmp
log "raw results: $RUNDIR (runs.tsv, the output of every run, report.md)"
exit 0
}
