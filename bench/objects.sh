#!/usr/bin/env bash
# bench/objects.sh: pagevault beside pgBackRest (and WAL-G, where it builds) backing up the same
# PostgreSQL 15 pgbench database to the same object stores (issue 4).
#
# Starts MinIO (S3) and Azurite (Azure Blob) on 127.0.0.1 with TLS (a private CA made with openssl;
# pgBackRest's S3 and Azure repositories need HTTPS), builds (once, then reuses) a pgbench cluster
# at scale SCALE with data checksums under WORK/pg, and times, REPS times (round-robin, the order
# reversed every other repetition, each store warmed up by an untimed 256 MiB upload and
# read-back first), warm page cache, for each store and codec:
#   - pagevault backup --repo s3://bench/pv-RUN (or azure://bench/pv-RUN) --stripes 1 and 3,
#     --compress none|lz4|zstd (2 compression threads: one per core), and its restore
#   - pgbackrest backup --type=full to a repository on the same store (process-max=2,
#     compress-type none|lz4|zst), and its restore (process-max=2)
#   - wal-g backup-push to s3://bench/walg-RUN (WALG_UPLOAD_CONCURRENCY=2, compression
#     none|lz4|zstd), and backup-fetch LATEST (WALG_DOWNLOAD_CONCURRENCY=2); informational, S3 only
#     (WAL-G reaches Azure only as ACCOUNT.blob.SUFFIX, not Azurite's path-style endpoint). Built
#     once into PAGEVAULT_TOOLS/bin/wal-g; when it cannot be built the report says why and skips it.
# A restore is timed until its files are durable (sync -f of the target, for every tool).
# Prints one markdown table (seconds best and median, MB/s of the database size, stored size,
# pagevault's speed over pgBackRest's, peak RSS against pagevault's buffer pool, CPU of the tool
# and of the store server) and the verdicts of the issue's goal: pagevault >= 2x pgBackRest to the
# same store with the same codec and cores, backup and restore; pagevault over WAL-G is informational.
# Everything is kept under WORK/results/objects-DATE/.
#
# Usage: bench/objects.sh [--work DIR] [--scale N] [--reps N] [--stores s3,azure]
#                         [--codecs none,lz4,zstd] [--stripes 1,3] [--keep-stores]
#                         [--no-bundle] [--no-local]
#                         (or positionally: bench/objects.sh [SCALE])
# pgBackRest runs with repo1-bundle=y (--no-bundle: without); pagevault also backs up to and restores
# from a local directory repository (--no-local: not), the reference of the restore-from-store goal.
# Environment: WORK_DIR, SCALE, REPS, STORES, CODECS, STRIPES, BUNDLE, LOCAL, QUIET_BUDGET, PAGEVAULT (binary),
#              PAGEVAULT_TOOLS (default /var/tmp/pagevault-tools), PG_BIN, KEEP_STORES=1,
#              WALG (binary; default PAGEVAULT_TOOLS/bin/wal-g), WALG_VERSION (what to build), NO_WALG=1
# Quick check: bench/objects.sh --scale 5 --reps 1. The issue's size (about 2 GB): --scale 140.
# Needs root (runs PostgreSQL, pgBackRest and WAL-G as the postgres user) and the tools of
# `PAGEVAULT_BENCH=1 scripts/setup.sh`. See bench/README.md.
set -euo pipefail
# One block that bash reads whole before running it: editing the file while it runs changes nothing.
{

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$ROOT/bench/lib.sh"
WORK=${WORK_DIR:-$WORK/objects}
SCALE=${SCALE:-70}
REPS=${REPS:-2}
STORES=${STORES:-s3,azure}
CODECS=${CODECS:-none,lz4,zstd}
STRIPES=${STRIPES:-1,3}
KEEP_STORES=${KEEP_STORES:-0}
BUNDLE=${BUNDLE:-1}       # pgBackRest's repo1-bundle=y: small files in bundles, as pagevault's frames
LOCAL=${LOCAL:-1}         # pagevault also to a local directory repository: the line a store is held to
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
TOOLS=${PAGEVAULT_TOOLS:-/var/tmp/pagevault-tools}
WALG=${WALG:-$TOOLS/bin/wal-g}
# WAL-G's release tags (v3.x) are no Go module versions (its module path has no /v3): pin a commit,
# master of 2026-09-13 (needs Go >= 1.27).
WALG_VERSION=${WALG_VERSION:-v1.1.3-rc-with-build.0.20260913163159-ae2b1dfb71ed}
DATA_VERSION=1            # bump when the cluster's making changes: forces a new cluster

parse_args --work=WORK --scale=SCALE --reps=REPS --stores=STORES --codecs=CODECS --stripes=STRIPES --keep-stores=KEEP_STORES=1 --no-bundle=BUNDLE=0 --no-local=LOCAL=0 -- "$@"
[ ${#pos[@]} -ge 1 ] && SCALE=${pos[0]}
need_posint REPS "$REPS"
need_posint SCALE "$SCALE"
IFS=', ' read -r -a STORE_LIST <<< "$STORES"
IFS=', ' read -r -a CODEC_LIST <<< "$CODECS"
IFS=', ' read -r -a STRIPE_LIST <<< "$STRIPES"
for s in "${STORE_LIST[@]}"; do [[ $s =~ ^(s3|azure)$ ]] || { echo "stores are s3 and/or azure, not '$s'" >&2; exit 2; }; done
for c in "${CODEC_LIST[@]}"; do [[ $c =~ ^(none|lz4|zstd)$ ]] || { echo "codecs are none, lz4, zstd, not '$c'" >&2; exit 2; }; done
for n in "${STRIPE_LIST[@]}"; do [[ $n =~ ^[1-9][0-9]?$ ]] || { echo "stripes must be numbers 1..99, not '$n'" >&2; exit 2; }; done
[ "$(id -u)" -eq 0 ] || { echo "run as root (runs PostgreSQL and pgBackRest as the postgres user)" >&2; exit 2; }

mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
cd /                          # the postgres user runs commands too: a directory everyone can enter
PGW=$WORK/pg                  # the cluster
SCRATCH_ROOT=$WORK/scratch    # holds SCRATCH; emptied after every case
SCRATCH=$SCRATCH_ROOT/case-0  # the restore of the case running (bench/scratch.sh)
STORE_DIR=$WORK/stores        # MinIO's and Azurite's data, TLS files; new for every run
STAMP=$(date +%Y%m%d-%H%M%S)
RUNDIR=$WORK/results/objects-$STAMP
RESULTS=$RUNDIR/runs.tsv
BUCKET=bench
S3_USER=pvbenchadmin
S3_SECRET=pvbench-secret-Qx27
AZ_ACCOUNT=devstoreaccount1
AZ_KEY='Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='

# ---------------------------------------------------------------- 1. tools ----
SETUP_HINT="install it with: PAGEVAULT_BENCH=1 scripts/setup.sh"
MINIO=$TOOLS/bin/minio
AZURITE=$TOOLS/node/node_modules/.bin/azurite-blob
need() { # need PATH-OR-COMMAND WHAT
    [ -x "$1" ] || command -v "$1" >/dev/null 2>&1 || die "$2 is missing ($1): $SETUP_HINT"
}
need "$MINIO" "MinIO"
need "$AZURITE" "Azurite"
need node "Node.js"
[ -d "$TOOLS/node/node_modules/@aws-sdk/client-s3" ] && [ -d "$TOOLS/node/node_modules/@azure/storage-blob" ] ||
    die "the S3 and Azure SDKs for Node are missing under $TOOLS/node: $SETUP_HINT"
need "$PG_BIN/initdb" "PostgreSQL 15"
need "$PG_BIN/pgbench" "pgbench (PostgreSQL 15)"
use_current_pgbackrest
need pgbackrest "pgBackRest"
need /usr/bin/time "GNU time"
need openssl "openssl"
need ss "ss (iproute2)"
need python3 "python3"
id postgres >/dev/null 2>&1 || die "there is no postgres user: $SETUP_HINT"

if [ ! -x "$PV" ]; then
    [ -z "${PAGEVAULT:-}" ] || die "no pagevault binary at $PV"
    log "no $PV: cargo build --release"
    (cd "$ROOT" && cargo build --release -q) >&2 || die "cargo build --release failed"
fi
"$PV" --version >/dev/null || die "$PV does not run"

# WAL-G is optional: WALG_NOT says why it is left out ("" = measured). A failed build is remembered
# per version in TOOLS/wal-g.failed (delete it to try again); the build log is TOOLS/wal-g-build.log.
WALG_NOT=""
GO=$(command -v go || echo /usr/local/go/bin/go)
walg_build() {
    local failed=$TOOLS/wal-g.failed blog=$TOOLS/wal-g-build.log gobin
    if [ -f "$failed" ] && [ "$(head -1 "$failed")" = "$WALG_VERSION" ]; then
        WALG_NOT="not built ($(tail -n +2 "$failed"))"; return
    fi
    [ -x "$GO" ] || { WALG_NOT="not built (no Go to build it)"; return; }
    mkdir -p "$(dirname "$WALG")"
    gobin=$(mktemp -d)
    log "building WAL-G $WALG_VERSION into $WALG (once; nice -n 19, one package at a time: a few minutes)"
    # No cgo compressor tags (brotli, lzo, libsodium): lz4, zstd and none are built in.
    if GOBIN=$gobin GOFLAGS=-p=1 GOTOOLCHAIN=local nice -n 19 "$GO" install "github.com/wal-g/wal-g/main/pg@$WALG_VERSION" \
        > "$blog" 2>&1 && [ -x "$gobin/pg" ]; then
        install -m 755 "$gobin/pg" "$WALG"
    else
        # The reason: go's first two lines after its downloads, without URLs and module@version prefixes.
        WALG_NOT="go install github.com/wal-g/wal-g/main/pg@$WALG_VERSION failed: $(grep -v '^go: downloading' "$blog" |
            head -2 | tr '\t' ' ' | paste -sd, | sed -E 's#reading https?://[^ ]+ ##g; s#[^ ]+@[^ ]+: ##g; s/^go: //; s/ +/ /g; s/[ .]+$//' |
            cut -c1-200); log: $blog"
        printf '%s\n%s\n' "$WALG_VERSION" "$WALG_NOT" > "$failed"
        WALG_NOT="not built ($WALG_NOT)"
    fi
    rm -rf "$gobin"
}
if [ "${NO_WALG:-0}" = 1 ]; then
    WALG_NOT="skipped (NO_WALG=1)"
elif [ ! -x "$WALG" ]; then
    walg_build
fi
if [ -z "$WALG_NOT" ]; then
    "$WALG" --version > /dev/null 2>&1 || WALG_NOT="$WALG does not run"
fi
[ -z "$WALG_NOT" ] || log "WAL-G: $WALG_NOT"
walg_version() { # the module version go embeds, else what wal-g says
    local v
    v=$("$GO" version -m "$WALG" 2>/dev/null | awk '$1 == "mod" {print $3; exit}') || true
    [ -n "$v" ] && [ "$v" != "(devel)" ] || v=$("$WALG" --version 2>/dev/null | head -1 | cut -f1 | sed 's/^wal-g version //') || true
    echo "${v:-(unknown version)}"
}

# ------------------------------------------------------------ processes ----
as_pg() { runuser -u postgres -- "$@"; }
port_free() { ! ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }
free_port() { # free_port FIRST: a TCP port nobody listens on
    local p=$1
    while ! port_free "$p"; do p=$((p + 1)); done
    echo "$p"
}
wait_port() { # wait_port PORT WHAT PID LOG: until something listens (60 s)
    local i
    for ((i = 0; i < 600; i++)); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
        kill -0 "$3" 2>/dev/null || die "$2 exited at start: $(tail -5 "$4" | tr '\n' ' ')"
        sleep 0.1
    done
    die "$2 did not listen on port $1 within 60 s (see $4)"
}
psql_on() { # psql_on PORT DB ARGS...
    local port=$1 db=$2; shift 2
    "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d "$db" "$@"
}
PG_RUNNING=""
pg_start() { # pg_start DATADIR SOCKETDIR LOG FIRST-PORT: starts a server (or finds it running); sets PG_PORT
    local data=$1 sock=$2 logf=$3 port
    if as_pg "$PG_BIN/pg_ctl" -D "$data" status >/dev/null 2>&1; then
        PG_PORT=$(sed -n 4p "$data/postmaster.pid")
        PG_RUNNING=$data
        return 0
    fi
    port=$(free_port "$4")
    mkdir -p "$sock"; chown postgres: "$sock"
    as_pg "$PG_BIN/pg_ctl" -D "$data" -l "$logf" -w -t 300 \
        -o "-p $port -c listen_addresses=127.0.0.1 -k $sock" start >/dev/null || return 1
    PG_RUNNING=$data
    PG_PORT=$port
}
pg_stop() {
    if as_pg "$PG_BIN/pg_ctl" -D "$1" status >/dev/null 2>&1; then
        as_pg "$PG_BIN/pg_ctl" -D "$1" -w -t 120 -m fast stop >/dev/null || true
    fi
}
MINIO_PID=""
AZURITE_PID=""
stop_pid() { # stop_pid PID: TERM, then KILL after 10 s
    local pid=$1 i
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
}
cleanup() {
    stop_pid "$MINIO_PID"
    stop_pid "$AZURITE_PID"
    [ -z "$PG_RUNNING" ] || pg_stop "$PG_RUNNING"
    rm -rf "$SCRATCH_ROOT"
    [ "$KEEP_STORES" = 1 ] || rm -rf "$STORE_DIR/minio" "$STORE_DIR/azurite"
    rm -f "$RUNDIR/pagevault"
    release_guest_memory
}
source "$ROOT/bench/vm-memory.sh"
source "$ROOT/bench/scratch.sh"
trap_signals cleanup

mkdir -p "$RUNDIR" "$PGW"
snapshot_binary "$RUNDIR"

# ------------------------------------------------------------ 2. the stores ----
# A private CA and a server certificate for 127.0.0.1/localhost signed by it (a self-signed
# certificate marked CA:TRUE would be refused as a server certificate by rustls, which pagevault
# uses; pgBackRest runs with repo1-storage-verify-tls=n).
rm -rf "$STORE_DIR"
mkdir -p "$STORE_DIR/tls" "$STORE_DIR/minio/certs" "$STORE_DIR/azurite"
TLS=$STORE_DIR/tls
make_tls "$TLS"
cp "$TLS/cert.pem" "$STORE_DIR/minio/certs/public.crt"
cp "$TLS/key.pem" "$STORE_DIR/minio/certs/private.key"

S3_PORT=$(free_port 59000)
log "starting MinIO on https://127.0.0.1:$S3_PORT"
MINIO_ROOT_USER=$S3_USER MINIO_ROOT_PASSWORD=$S3_SECRET MINIO_UPDATE=off MINIO_BROWSER=off \
    "$MINIO" server "$STORE_DIR/minio/data" --address "127.0.0.1:$S3_PORT" --certs-dir "$STORE_DIR/minio/certs" --quiet \
    > "$STORE_DIR/minio/log" 2>&1 < /dev/null &
MINIO_PID=$!
wait_port "$S3_PORT" MinIO "$MINIO_PID" "$STORE_DIR/minio/log"

AZ_PORT=$(free_port $((S3_PORT + 1)))
log "starting Azurite on https://127.0.0.1:$AZ_PORT"
"$AZURITE" --blobHost 127.0.0.1 --blobPort "$AZ_PORT" --location "$STORE_DIR/azurite/data" --disableTelemetry \
    --skipApiVersionCheck --loose --silent --cert "$TLS/cert.pem" --key "$TLS/key.pem" \
    > "$STORE_DIR/azurite/log" 2>&1 < /dev/null &
AZURITE_PID=$!
wait_port "$AZ_PORT" Azurite "$AZURITE_PID" "$STORE_DIR/azurite/log"

# What pagevault and the SDK helpers read.
export NODE_PATH=$TOOLS/node/node_modules NODE_NO_WARNINGS=1 NODE_EXTRA_CA_CERTS=$TLS/ca.pem
export AWS_ACCESS_KEY_ID=$S3_USER AWS_SECRET_ACCESS_KEY=$S3_SECRET AWS_REGION=us-east-1
export AWS_ENDPOINT_URL=https://127.0.0.1:$S3_PORT
export AZURE_STORAGE_CONNECTION_STRING="DefaultEndpointsProtocol=https;AccountName=$AZ_ACCOUNT;AccountKey=$AZ_KEY;BlobEndpoint=https://127.0.0.1:$AZ_PORT/$AZ_ACCOUNT;"
export PAGEVAULT_CA_FILE=$TLS/ca.pem

STORE_JS=$ROOT/tests/tools/store.js
[ -f "$STORE_JS" ] || die "missing $STORE_JS"
# The bucket and the container (MinIO answers a little after its port opens: retry for 60 s).
for kind in s3 azure; do
    ok=0
    for ((i = 0; i < 120; i++)); do
        if node "$STORE_JS" "$kind" mkbucket "$BUCKET" > "$RUNDIR/mkbucket-$kind.log" 2>&1; then ok=1; break; fi
        sleep 0.5
    done
    [ $ok = 1 ] || die "cannot create the $kind bucket: $(tail -3 "$RUNDIR/mkbucket-$kind.log" | tr '\n' ' ')"
done

# Size and removal of a prefix (what one backup stored), with the vendors' SDKs.
cat > "$RUNDIR/prefix.js" <<'JS'
// node prefix.js s3|azure du|rm BUCKET PREFIX: bytes and objects under PREFIX, or delete them.
const [kind, cmd, bucket, prefix] = process.argv.slice(2);
async function s3() {
  const s = require('@aws-sdk/client-s3');
  const c = new s.S3Client({ endpoint: process.env.AWS_ENDPOINT_URL, region: process.env.AWS_REGION, forcePathStyle: true });
  let token, bytes = 0, n = 0;
  do {
    const r = await c.send(new s.ListObjectsV2Command({ Bucket: bucket, Prefix: prefix, ContinuationToken: token }));
    const objs = r.Contents || [];
    for (const o of objs) { bytes += o.Size; n++; }
    if (cmd === 'rm' && objs.length)
      await c.send(new s.DeleteObjectsCommand({ Bucket: bucket, Delete: { Objects: objs.map((o) => ({ Key: o.Key })), Quiet: true } }));
    token = r.IsTruncated ? r.NextContinuationToken : undefined;
  } while (token);
  console.log(`${bytes}\t${n}`);
}
async function azure() {
  const { BlobServiceClient } = require('@azure/storage-blob');
  const cc = BlobServiceClient.fromConnectionString(process.env.AZURE_STORAGE_CONNECTION_STRING).getContainerClient(bucket);
  let bytes = 0, n = 0, pending = [];
  for await (const b of cc.listBlobsFlat({ prefix })) {
    bytes += b.properties.contentLength; n++;
    if (cmd === 'rm') {
      pending.push(cc.deleteBlob(b.name));
      if (pending.length >= 32) { await Promise.all(pending); pending = []; }
    }
  }
  await Promise.all(pending);
  console.log(`${bytes}\t${n}`);
}
(kind === 's3' ? s3() : azure()).catch((e) => { console.error(`${kind} ${cmd}: ${e.name}: ${e.message}`); process.exit(1); });
JS
prefix_do() { node "$RUNDIR/prefix.js" "$@"; }   # prefix_do s3|azure du|rm BUCKET PREFIX

# ------------------------------------------------------------ 3. the cluster ----
make_cluster() {
    local dir=$PGW want="version=$DATA_VERSION scale=$SCALE"
    DATA=$dir/data
    if cluster_is_current "$dir" "$want"; then
        log "reusing the pgbench cluster in $dir ($want)"
        pg_start "$DATA" "$dir/run" "$dir/server.log" 55532 || die "PostgreSQL did not start (see $dir/server.log)"
        return
    fi
    fresh_cluster_dir "$dir" $((SCALE * 15 * 3 + 1024)) "the cluster, the stores and a restore"
    log "creating the pgbench cluster in $dir"
    bench_initdb "$DATA" "$dir" bench/objects.sh
    pg_start "$DATA" "$dir/run" "$dir/server.log" 55532 || die "PostgreSQL did not start (see $dir/server.log)"
    local t0=$SECONDS
    log "  pgbench -i -s $SCALE (server-side generation)"
    psql_on "$PG_PORT" postgres -c "CREATE DATABASE bench"
    "$PG_BIN/pgbench" -i -s "$SCALE" -I dtGvp -q -h 127.0.0.1 -p "$PG_PORT" -U postgres bench \
        > "$dir/load.log" 2>&1 || die "pgbench -i failed (see $dir/load.log)"
    # A quiet cluster for the measurements: everything written, old WAL gone.
    psql_on "$PG_PORT" postgres -c "ALTER SYSTEM SET max_wal_size = '1GB'" -c "SELECT pg_reload_conf()" >/dev/null
    psql_on "$PG_PORT" postgres -c "CHECKPOINT" -c "SELECT pg_switch_wal()" -c "CHECKPOINT" >/dev/null
    sync
    echo "$want" > "$dir/manifest"
    log "  loaded in $((SECONDS - t0)) s"
}
make_cluster
DB_BYTES=$(( $(du -sb "$DATA" | cut -f1) - $(du -sb "$DATA/pg_wal" | cut -f1) ))
SOURCE="postgres://postgres@127.0.0.1:$PG_PORT/postgres?pgdata=$DATA"
log "pgbench scale $SCALE: $((DB_BYTES / 1048576)) MiB without pg_wal, on port $PG_PORT"

# pgBackRest: one configuration per store; the repository path is given per case.
mkdir -p "$WORK/pgbackrest/lock" "$WORK/pgbackrest/log"
chown -R postgres: "$WORK/pgbackrest"
pgbr_conf() { # pgbr_conf STORE: writes WORK/pgbackrest/STORE.conf, prints its path
    local f=$WORK/pgbackrest/$1.conf
    {
        echo "[global]"
        case $1 in
            s3) pgbr_s3_repo "$S3_PORT" "$BUCKET" "$S3_USER" "$S3_SECRET" ;;
            azure)
                echo "repo1-type=azure"
                echo "repo1-azure-account=$AZ_ACCOUNT"
                echo "repo1-azure-key=$AZ_KEY"
                echo "repo1-azure-container=$BUCKET"
                echo "repo1-storage-host=127.0.0.1"
                echo "repo1-storage-port=$AZ_PORT"
                echo "repo1-azure-uri-style=path"
                ;;
        esac
        cat <<EOF
repo1-storage-verify-tls=n
repo1-path=/pgbr
repo1-bundle=$([ "$BUNDLE" = 1 ] && echo y || echo n)
repo1-retention-full=2
process-max=2
start-fast=y
archive-check=n
archive-mode-check=n
lock-path=$WORK/pgbackrest/lock
log-path=$WORK/pgbackrest/log
log-level-file=off
log-level-console=warn

[bench]
pg1-path=$DATA
pg1-port=$PG_PORT
pg1-socket-path=$PGW/run
pg1-user=postgres
EOF
    } > "$f"
    chown postgres: "$f"; chmod 600 "$f"
    echo "$f"
}
declare -A PGBR_CONF
for st in "${STORE_LIST[@]}"; do PGBR_CONF[$st]=$(pgbr_conf "$st"); done

# ------------------------------------------------------------ 4. measurements ----
printf 'store\tcodec\ttool\tstripes\trep\tphase\tseconds\trss_kib\tcpu_s\tstore_cpu_s\tserver_cpu_s\tbusy_ticks\tstored_bytes\tobjects\tstatus\tout\n' > "$RESULTS"
: > "$RUNDIR/notes.txt"
: > "$RUNDIR/failures.txt"
warm_up() { find "$DATA" -type f -print0 | xargs -0 cat > /dev/null 2>&1 || true; }
# warm_stores: an untimed 256 MiB upload and read-back per store before each repetition.
# Azurite (node) is slow while its heap grows, in its first minute most: without this, the
# first case on a store after minutes of the other paid for it, whichever tool it was.
warm_stores() {
    local st p=warm-$STAMP-r$REP f=$WORK/warm.bin
    [ -s "$f" ] || head -c 268435456 /dev/urandom > "$f"
    for st in "${STORE_LIST[@]}"; do
        { "$PV" backup --source "files:$f" --to "$st://$BUCKET/$p/w.pv" --compress none &&
            "$PV" verify --from "$st://$BUCKET/$p/w.pv"; } > /dev/null 2>>"$RUNDIR/warm.log" ||
            log "    warning: warming $st up failed (see warm.log)"
        prefix_do "$st" rm "$BUCKET" "$p/" > /dev/null 2>>"$RUNDIR/prefix.log" || true
    done
}
proc_ticks() { # proc_ticks PID [children too]: utime + stime (+ cutime + cstime) of one process
    local f
    f=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null) || { echo 0; return; }
    if [ -n "${2:-}" ]; then awk '{print $12 + $13 + $14 + $15}' <<< "$f"; else awk '{print $12 + $13}' <<< "$f"; fi
}
store_ticks() { case $1 in s3) proc_ticks "$MINIO_PID" ;; azure) proc_ticks "$AZURITE_PID" ;; *) echo 0 ;; esac; }
# The local directory repository (store "dir") lives beside the scratch directories.
DIR_REPOS=$WORK/dir-repos
store_rm() { # store_rm STORE PREFIX/
    if [ "$1" = dir ]; then rm -rf "${DIR_REPOS:?}/$2"; else prefix_do "$1" rm "$BUCKET" "$2"; fi
}
server_ticks() { # the postmaster and its children, with those it has reaped
    local pid
    pid=$(head -1 "$DATA/postmaster.pid" 2>/dev/null) || { echo 0; return; }
    { echo "$pid"; pgrep -P "$pid" || true; } | while read -r p; do proc_ticks "$p" all; done | awk '{s += $1} END {print s + 0}'
}
FAILED=0

# run_timed PHASE STORE CODEC TOOL STRIPES SYNC-DIR COMMAND...: one timed run, one row of runs.tsv.
# The time includes `sync -f SYNC-DIR` after the command (restores). Records the peak RSS and the
# CPU of the command's processes (GNU time), of the store server and of PostgreSQL.
run_timed() {
    local phase=$1 store=$2 codec=$3 tool=$4 stripes=$5 syncdir=$6; shift 6
    local tag="$store.$codec.$tool.s$stripes.$REP.$phase"
    local out=$RUNDIR/$tag.out err=$RUNDIR/$tag.err tf=$RUNDIR/$tag.time t0 t1 b0 b1 k0 k1 s0 s1 rc=0
    sync
    wait_quiet
    k0=$(store_ticks "$store"); s0=$(server_ticks); b0=$(busy_ticks)
    t0=$(now_ns)
    /usr/bin/time -o "$tf" -f '%M %U %S' "$@" > "$out" 2> "$err" || rc=$?
    if [ $rc -eq 0 ] && [ -n "$syncdir" ]; then sync -f "$syncdir" || rc=$?; fi
    t1=$(now_ns)
    b1=$(busy_ticks); k1=$(store_ticks "$store"); s1=$(server_ticks)
    local rss cpu secs
    read -r rss cpu < <(tail -1 "$tf" 2>/dev/null | awk '{printf "%s %.2f\n", $1, $2 + $3}') || { rss=0; cpu=0; }
    secs=$(awk -v n=$((t1 - t0)) 'BEGIN {printf "%.3f", n / 1e9}')
    if [ $rc -eq 0 ]; then
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\t\tok\t%s\n' "$store" "$codec" "$tool" "$stripes" "$REP" "$phase" \
            "$secs" "$rss" "$cpu" "$(awk -v t=$((k1 - k0)) -v hz="$HZ" 'BEGIN {printf "%.2f", t / hz}')" \
            "$(awk -v t=$((s1 - s0)) -v hz="$HZ" 'BEGIN {printf "%.2f", (t < 0 ? 0 : t) / hz}')" "$((b1 - b0))" "$out" >> "$RESULTS"
        log "    $phase $tool $store $codec$([ "$stripes" = - ] || echo " stripes $stripes"): $secs s, peak RSS $((rss / 1024)) MiB, CPU $cpu s"
    else
        FAILED=$((FAILED + 1))
        log "    $phase $tool $store $codec FAILED (exit $rc): $*"
        tail -5 "$err" | sed 's/^/        /' >&2
        {
            echo "- $phase $tool $store $codec stripes $stripes, repetition $REP: exit $rc"
            echo "  command: $*"
            echo "  log ($err), last lines:"
            tail -5 "$err" | sed 's/^/      /'
        } >> "$RUNDIR/failures.txt"
        printf '%s\t%s\t%s\t%s\t%s\t%s\t\t\t\t\t\t\t\t\tfailed\t%s\n' "$store" "$codec" "$tool" "$stripes" "$REP" "$phase" "$err" >> "$RESULTS"
    fi
    return $rc
}

# Records what a backup stored (listed from the store) on its runs.tsv row, then the sanity of a restore.
record_stored() { # record_stored STORE PREFIX
    local line
    if [ "$1" = dir ]; then
        line="$(du -sb "$DIR_REPOS/$2" | cut -f1)"$'\t'"$(find "$DIR_REPOS/$2" -type f | wc -l)"
    else
        line=$(prefix_do "$1" du "$BUCKET" "$2" 2>>"$RUNDIR/prefix.log") || line=$'\t'
    fi
    python3 - "$RESULTS" "$line" <<'PY'
import sys
path, line = sys.argv[1], sys.argv[2]
rows = open(path).read().rstrip("\n").split("\n")
f = rows[-1].split("\t")
b, n = (line.split("\t") + [""])[:2]
f[12], f[13] = b, n
rows[-1] = "\t".join(f)
open(path, "w").write("\n".join(rows) + "\n")
PY
}
check_restore() { # check_restore DIR WHAT: the restored data directory holds what the source holds
    local d=$1 got
    got=$(( $(du -sb "$d" | cut -f1) - $( [ -d "$d/pg_wal" ] && du -sb "$d/pg_wal" | cut -f1 || echo 0) ))
    if [ $((got * 100)) -lt $((DB_BYTES * 97)) ] || [ $((got * 100)) -gt $((DB_BYTES * 103)) ]; then
        echo "- $2: the restored data directory holds $got bytes without pg_wal, the source $DB_BYTES" >> "$RUNDIR/notes.txt"
        log "    warning: $2 restored $got bytes, the source has $DB_BYTES"
    fi
}

case_pv() { # case_pv STORE CODEC STRIPES
    local store=$1 codec=$2 n=$3 prefix="pv-$STAMP-r$REP-$2-s$3" repo
    repo=$store://$BUCKET/$prefix
    if [ "$store" = dir ]; then mkdir -p "$DIR_REPOS"; repo=$DIR_REPOS/$prefix; fi
    fresh_scratch
    if run_timed backup "$store" "$codec" pagevault "$n" "" \
        "$PV" backup --source "$SOURCE" --repo "$repo" --stripes "$n" --compress "$codec" --json; then
        record_stored "$store" "$prefix/"
        # The restore_command a restore checks runs as postgres: it reads the local repository.
        if [ "$store" = dir ]; then chmod 755 "$DIR_REPOS"; chown -R postgres: "$repo"; fi
        if run_timed restore "$store" "$codec" pagevault "$n" "$SCRATCH" \
            "$PV" restore --repo "$repo" --to "$SCRATCH/restore" --owner postgres --json; then
            check_restore "$SCRATCH/restore" "pagevault $store $codec stripes $n"
        fi
    fi
    store_rm "$store" "$prefix/" > /dev/null 2>>"$RUNDIR/prefix.log" || log "    warning: could not delete $repo"
    fresh_scratch
}

case_pgbr() { # case_pgbr STORE CODEC (pagevault's name: zstd = pgBackRest's zst)
    local store=$1 codec=$2 ct=$2 prefix="pgbr-$STAMP-r$REP-$2" conf=${PGBR_CONF[$1]}
    [ "$ct" = zstd ] && ct=zst
    fresh_scratch
    local pg=(runuser -u postgres -- pgbackrest --config="$conf" --stanza=bench --repo1-path="/$prefix")
    if ! "${pg[@]}" stanza-create > "$RUNDIR/stanza-create-$store.log" 2>&1; then
        FAILED=$((FAILED + 1))
        log "    pgbackrest stanza-create ($store) FAILED: ${pg[*]} stanza-create"
        tail -5 "$RUNDIR/stanza-create-$store.log" | sed 's/^/        /' >&2
        { echo "- pgbackrest stanza-create $store: ${pg[*]} stanza-create"; tail -5 "$RUNDIR/stanza-create-$store.log" | sed 's/^/      /'; } >> "$RUNDIR/failures.txt"
        prefix_do "$store" rm "$BUCKET" "$prefix/" > /dev/null 2>>"$RUNDIR/prefix.log" || true
        return 0
    fi
    if run_timed backup "$store" "$codec" pgbackrest - "" "${pg[@]}" backup --type=full --compress-type="$ct"; then
        record_stored "$store" "$prefix/"
        install -d -m 700 -o postgres -g postgres "$SCRATCH/restore"
        if run_timed restore "$store" "$codec" pgbackrest - "$SCRATCH" "${pg[@]}" --pg1-path="$SCRATCH/restore" restore; then
            check_restore "$SCRATCH/restore" "pgBackRest $store $codec"
        fi
    fi
    prefix_do "$store" rm "$BUCKET" "$prefix/" > /dev/null 2>>"$RUNDIR/prefix.log" || log "    warning: could not delete /$prefix"
    fresh_scratch
}

# WAL-G runs as postgres, like pgBackRest, with 2 uploads/downloads at a time (process-max=2 there),
# and connects to the cluster over TCP. S3 only: see WALG_SKIPS.
case_walg() { # case_walg STORE CODEC (same codec names in WAL-G)
    local store=$1 codec=$2 prefix="walg-$STAMP-r$REP-$2"
    fresh_scratch
    local wg=(runuser -u postgres -- env WALG_S3_PREFIX="s3://$BUCKET/$prefix" WALG_COMPRESSION_METHOD="$codec"
        WALG_UPLOAD_CONCURRENCY=2 WALG_DOWNLOAD_CONCURRENCY=2 AWS_ENDPOINT="https://127.0.0.1:$S3_PORT"
        AWS_S3_FORCE_PATH_STYLE=true AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID="$S3_USER" AWS_SECRET_ACCESS_KEY="$S3_SECRET"
        WALG_S3_CA_CERT_FILE="$TLS/ca.pem" PGHOST=127.0.0.1 PGPORT="$PG_PORT" PGUSER=postgres "$WALG")
    if run_timed backup "$store" "$codec" wal-g - "" "${wg[@]}" backup-push "$DATA"; then
        record_stored "$store" "$prefix/"
        install -d -m 700 -o postgres -g postgres "$SCRATCH/restore"
        if run_timed restore "$store" "$codec" wal-g - "$SCRATCH" "${wg[@]}" backup-fetch "$SCRATCH/restore" LATEST; then
            check_restore "$SCRATCH/restore" "WAL-G $store $codec"
        fi
    fi
    prefix_do "$store" rm "$BUCKET" "$prefix/" > /dev/null 2>>"$RUNDIR/prefix.log" || log "    warning: could not delete $prefix"
    fresh_scratch
}

# What WAL-G leaves out, one line each for the report. Its Azure client always addresses
# https://ACCOUNT.blob.SUFFIX/CONTAINER (AZURE_ENDPOINT_SUFFIX sets only SUFFIX), which cannot be
# Azurite's path-style https://127.0.0.1:PORT/ACCOUNT without a hosts entry for the account's name.
WALG_SKIPS=()
walg_wants() { # walg_wants STORE CODEC: whether WAL-G runs this case
    [ -z "$WALG_NOT" ] || return 1
    [ "$1" = s3 ] || return 1
    # The none method came with WAL-G 3.0.8; a Go binary names its packages.
    [ "$2" != none ] || grep -q 'wal-g/internal/compression/none' "$WALG"
}

CASE_LIST=()
for st in "${STORE_LIST[@]}"; do
    for c in "${CODEC_LIST[@]}"; do
        for n in "${STRIPE_LIST[@]}"; do CASE_LIST+=("pv $st $c $n"); done
        CASE_LIST+=("pgbr $st $c")
        if walg_wants "$st" "$c"; then CASE_LIST+=("walg $st $c"); fi
    done
done
if [ "$LOCAL" = 1 ]; then
    for c in "${CODEC_LIST[@]}"; do
        for n in "${STRIPE_LIST[@]}"; do CASE_LIST+=("pv dir $c $n"); done
    done
fi
if [ -z "$WALG_NOT" ]; then
    if [[ " ${STORE_LIST[*]} " == *" azure "* ]]; then
        WALG_SKIPS+=("Azure skipped: WAL-G addresses https://ACCOUNT.blob.SUFFIX/CONTAINER only, not Azurite's path-style endpoint")
    fi
    if [[ " ${CODEC_LIST[*]} " == *" none "* ]] && ! walg_wants s3 none; then
        WALG_SKIPS+=("none codec skipped: this WAL-G has no uncompressed method (WALG_COMPRESSION_METHOD=none came with 3.0.8)")
    fi
fi
hold_guest_memory
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
T_START=$(date +%s)
for ((REP = 1; REP <= REPS; REP++)); do
    order=("${CASE_LIST[@]}")
    if [ $((REP % 2)) = 0 ]; then   # every other repetition runs the cases backwards
        order=(); for ((i = ${#CASE_LIST[@]} - 1; i >= 0; i--)); do order+=("${CASE_LIST[i]}"); done
    fi
    log "repetition $REP of $REPS (${#order[@]} cases, warm cache)"
    warm_up
    warm_stores
    for c in "${order[@]}"; do
        read -r -a w <<< "$c"
        case ${w[0]} in
            pv) case_pv "${w[1]}" "${w[2]}" "${w[3]}" ;;
            pgbr) case_pgbr "${w[1]}" "${w[2]}" ;;
            walg) case_walg "${w[1]}" "${w[2]}" ;;
        esac
    done
done
T_END=$(date +%s)
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
pg_stop "$DATA"; PG_RUNNING=""

# ------------------------------------------------------------ 5. the table ----
WALG_NOTE="WAL-G ${WALG_NOT:-skipped these stores and codecs}"
WALG_NOTE="${WALG_NOTE%% (*}, see above"
export RESULTS RUNDIR HZ NCPU DB_BYTES WALG_NOTE
BENCH_DIR=$ROOT/bench python3 > "$RUNDIR/table.md" <<'PY'
import csv, json, os, statistics, sys
sys.path.insert(0, os.environ["BENCH_DIR"])
from runs import group, ok_runs, outputs
MIB = 1048576.0
HZ, NCPU, DB = float(os.environ["HZ"]), int(os.environ["NCPU"]), int(os.environ["DB_BYTES"])
rows = list(csv.DictReader(open(os.environ["RESULTS"]), delimiter="\t"))
STORE_ORDER = {"s3": 0, "azure": 1, "dir": 2}
CODEC_ORDER = {"none": 0, "lz4": 1, "zstd": 2}
STORE_NAME = {"s3": "MinIO (S3)", "azure": "Azurite (Azure)", "dir": "local directory"}
PAR = {"pgbackrest": "- (process-max=2)", "wal-g": "- (concurrency 2)"}
keys, runs = group(rows, lambda r: (r["store"], r["codec"], r["tool"], r["stripes"]))
keys.sort(key=lambda k: (STORE_ORDER[k[0]], CODEC_ORDER[k[1]], k[2] != "pagevault", k[3]))

def stat(k, phase):
    ok, failed = ok_runs(runs, k, phase)
    if not ok:
        return None, failed
    secs = [float(r["seconds"]) for r in ok]
    def med(field):
        v = [float(r[field]) for r in ok if r.get(field)]
        return statistics.median(v) if v else None
    js = outputs(ok)
    others = [max(0.0, int(r["busy_ticks"]) / HZ - float(r["cpu_s"] or 0) - float(r["store_cpu_s"] or 0)
                  - float(r["server_cpu_s"] or 0)) / (NCPU * float(r["seconds"])) * 100 for r in ok if r["busy_ticks"]]
    return {"sec": min(secs), "med": statistics.median(secs), "max": max(secs), "n": len(ok),
            "rss": max(int(r["rss_kib"]) for r in ok), "cpu": med("cpu_s"), "store_cpu": med("store_cpu_s"),
            "server_cpu": med("server_cpu_s"),
            "stored": med("stored_bytes"), "objects": med("objects"), "json": js,
            "others": max(others) if others else 0.0}, failed

def secs(st):
    if st is None:
        return "FAILED"
    return f"{st['sec']:.2f}" + (f" ({st['med']:.2f})" if st["n"] > 1 else "")

def mbps(st):
    return "-" if st is None else f"{DB / MIB / st['sec']:,.0f}"

def jget(st, *path):
    vals = []
    for j in (st or {}).get("json", []):
        v = j
        for p in path:
            v = v.get(p) if isinstance(v, dict) else None
        if isinstance(v, (int, float)):
            vals.append(v)
    return vals

out = ["| store | codec | tool | stripes | backup s best (median) | backup MB/s | stored MiB (ratio) | restore s best (median) "
       "| restore MB/s | pagevault ÷ pgBackRest: backup | pagevault ÷ pgBackRest: restore | peak RSS MiB backup / restore "
       "(pagevault: buffer pool MiB) | CPU s backup / restore: tool + store server | other CPU % | notes |",
       "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
goals, mem, walg = [], [], []
for k in keys:
    store, codec, tool, stripes = k
    b, bf = stat(k, "backup")
    r, rf = stat(k, "restore")
    notes = []
    if bf or rf:
        notes.append(f"FAILED runs: {bf} backup, {rf} restore")
    for name, st in (("backup", b), ("restore", r)):
        if st and st["n"] > 1 and st["max"] > 1.25 * st["sec"]:
            notes.append(f"{name} varied {st['sec']:.2f}-{st['max']:.2f} s")
    size = "-"
    if b and b["stored"]:
        size = f"{b['stored'] / MIB:,.1f} ({DB / b['stored']:.1f}x, {b['objects']:.0f} objects)"
    rb = rr = "-"
    rss = "-"
    if tool == "pagevault":
        ref = (store, codec, "pgbackrest", "-")
        pb, _ = stat(ref, "backup")
        pr, _ = stat(ref, "restore")
        if b and pb:
            rb = f"{pb['sec'] / b['sec']:.2f}x"
        if r and pr:
            rr = f"{pr['sec'] / r['sec']:.2f}x"
        wk = (store, codec, "wal-g", "-")
        wb, _ = stat(wk, "backup")
        wr, _ = stat(wk, "restore")
        for phase, me, peer in (("backup", b, wb), ("restore", r, wr)):
            if wk + ("backup",) in runs:   # WAL-G ran here (it skips Azure, and none where it lacks it)
                walg.append((store, codec, stripes, phase, me["sec"] if me else None, peer["sec"] if peer else None))
        for phase, me, peer in (("backup", b, pb), ("restore", r, pr)):
            # A failed pagevault run fails its goal; without a pgBackRest run there is nothing to compare.
            if store != "dir" and (peer or me):
                # The share of the cores pagevault, the store server and PostgreSQL kept busy (medians).
                busy = None
                if me and me["cpu"] is not None:
                    busy = (me["cpu"] + (me["store_cpu"] or 0) + (me["server_cpu"] or 0)) / (NCPU * me["med"])
                goals.append((store, codec, stripes, phase, me["sec"] if me else None, peer["sec"] if peer else None, busy))
        pools = [jget(b, "pool_bytes"), jget(r, "pool_bytes")]
        parts = []
        for st, pool, phase in ((b, pools[0], "backup"), (r, pools[1], "restore")):
            if st is None:
                parts.append("-")
                continue
            p = max(pool) if pool else None
            parts.append(f"{st['rss'] / 1024:,.0f}" + (f" ({p / MIB:,.0f})" if p else ""))
            if p:
                # Backups report their upload buffers (all stripes) as device_buffer_memory.
                dev = jget(st, "device_buffer_memory") if phase == "backup" else []
                mem.append((store, codec, stripes, phase, st["rss"] * 1024, p, int(stripes), max(dev) if dev else None))
        rss = " / ".join(parts)
        retries = [int(x) for x in jget(b, "object_store", "retries") + jget(r, "object_store", "retries")]
        if retries and max(retries):
            notes.append(f"object store retries: up to {max(retries)}")
    else:
        rb = rr = "reference" if tool == "pgbackrest" else "-"
        rss = " / ".join("-" if st is None else f"{st['rss'] / 1024:,.0f}" for st in (b, r)) + " (largest process)"
    def cpu(st):
        if st is None or st["cpu"] is None:
            return "-"
        return f"{st['cpu']:.1f} + {st['store_cpu'] or 0:.1f}"
    others = max(b["others"] if b else 0.0, r["others"] if r else 0.0)
    out.append(f"| {STORE_NAME[store]} | {codec} | {tool} | {stripes if tool == 'pagevault' else PAR[tool]} | "
               f"{secs(b)} | {mbps(b)} | {size} | {secs(r) if b else '-'} | {mbps(r)} | {rb} | {rr} | {rss} | "
               f"{cpu(b)} / {cpu(r)} | {others:.0f} | {'; '.join(notes)} |")
print("\n".join(out))
print()
print("Goal (issue 4): pagevault at least 2x as fast as pgBackRest to the same store with the same codec and cores "
      "(best seconds of each side):")
print()
print("| store | codec | pagevault stripes | phase | pagevault s | pgBackRest s | pagevault ÷ pgBackRest | verdict |")
print("|---|---|---:|---|---:|---:|---:|---|")
npass = ncpubound = 0
goals.sort(key=lambda g: (STORE_ORDER[g[0]], CODEC_ORDER[g[1]], g[2], g[3]))
for store, codec, stripes, phase, pv, peer, busy in goals:
    if pv is None or peer is None:
        verdict = "FAIL (pagevault failed)" if pv is None else "no verdict (pgBackRest failed)"
        print(f"| {STORE_NAME[store]} | {codec} | {stripes} | {phase} | {'FAILED' if pv is None else f'{pv:.2f}'} | "
              f"{'FAILED' if peer is None else f'{peer:.2f}'} | - | {verdict} |")
        continue
    ok = peer / pv >= 2.0
    npass += ok
    verdict = "PASS" if ok else "FAIL"
    if not ok and busy is not None and busy >= 0.9:
        ncpubound += 1
        verdict += f" (CPU-bound: pagevault, the store server and PostgreSQL kept {busy:.0%} of the {NCPU} cores busy)"
    print(f"| {STORE_NAME[store]} | {codec} | {stripes} | {phase} | {pv:.2f} | {peer:.2f} | {peer / pv:.2f}x | {verdict} |")
print()
print(f"{npass} of {len(goals)} goals pass" + (f"; {ncpubound} of the others ran with the store server on the same cores, "
      "both busy: a store on its own machine leaves pagevault the cores." if ncpubound else "."))
print()
local = [k for k in keys if k[0] == "dir" and k[2] == "pagevault"]
if local:
    GB = DB / 1e9
    print("Goal (issue 39): a restore from the store within 1.2x of the same set restored from a local directory "
          "(best seconds), and CPU seconds per GB of the database (the tool's own; the store server's beside it):")
    print()
    print("| store | codec | stripes | restore s from store | from local directory | store ÷ local | CPU s/GB pagevault (+ store) | CPU s/GB local | verdict |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for lk in local:
        lr, _ = stat(lk, "restore")
        for store in sorted({k[0] for k in keys if k[0] != "dir"}, key=lambda x: STORE_ORDER[x]):
            r, _ = stat((store, lk[1], "pagevault", lk[3]), "restore")
            if r is None or lr is None:
                continue
            ratio = r["sec"] / lr["sec"]
            cpu = f"{r['cpu'] / GB:.2f} (+ {(r['store_cpu'] or 0) / GB:.2f})" if r["cpu"] is not None else "-"
            lcpu = f"{lr['cpu'] / GB:.2f}" if lr["cpu"] is not None else "-"
            print(f"| {STORE_NAME[store]} | {lk[1]} | {lk[3]} | {r['sec']:.2f} | {lr['sec']:.2f} | {ratio:.2f}x | {cpu} | {lcpu} | "
                  f"{'PASS' if ratio <= 1.2 else 'FAIL'} |")
    print()
print("Informational, not a goal: pagevault over WAL-G to the same store with the same codec (best seconds of each side):")
print()
if walg:
    walg.sort(key=lambda g: (STORE_ORDER[g[0]], CODEC_ORDER[g[1]], g[2], g[3]))
    print("| store | codec | pagevault stripes | phase | pagevault s | WAL-G s | pagevault ÷ WAL-G |")
    print("|---|---|---:|---|---:|---:|---:|")
    for store, codec, stripes, phase, pv, peer in walg:
        ratio = f"{peer / pv:.2f}x" if pv and peer else "-"
        print(f"| {STORE_NAME[store]} | {codec} | {stripes} | {phase} | {'FAILED' if pv is None else f'{pv:.2f}'} | "
              f"{'FAILED' if peer is None else f'{peer:.2f}'} | {ratio} |")
else:
    print("- no WAL-G runs: " + (os.environ.get("WALG_NOTE") or "see the header"))
if mem:
    # src/device/object.rs: UPLOAD_BUDGET (64 MiB of parts in flight per stripe, backup);
    # READ_CHUNK x (READ_AHEAD + 1), plus one chunk a read may straddle (6 x 8 MiB per stripe, restore).
    UP, DOWN, PROC = 64 * MIB, 48 * MIB, 32 * MIB
    print()
    print("Memory (pagevault): peak RSS against the buffer pool (`pool_bytes`) plus the object store buffers "
          "(backup: the upload parts it reports as `device_buffer_memory`, at most 64 MiB per stripe; restore: 6 read-ahead chunks of 8 MiB per stripe) "
          "plus 32 MiB for the process itself (code, runtime, TLS and HTTP clients):")
    print()
    print("| store | codec | stripes | phase | peak RSS MiB | pool MiB | store buffers MiB | bound MiB | RSS - bound | within |")
    print("|---|---|---:|---|---:|---:|---:|---:|---:|---|")
    nin = 0
    for store, codec, stripes, phase, rss, pool, n, dev in mem:
        buf = dev or (UP if phase == "backup" else DOWN) * n
        bound = pool + buf + PROC
        nin += rss <= bound
        print(f"| {STORE_NAME[store]} | {codec} | {stripes} | {phase} | {rss / MIB:,.0f} | {pool / MIB:,.0f} | "
              f"{buf / MIB:,.0f} | {bound / MIB:,.0f} | {(rss - bound) / MIB:+,.0f} | {'yes' if rss <= bound else 'NO'} |")
    print()
    print(f"{nin} of {len(mem)} runs within the bound.")
PY

{
    echo "### pagevault against pgBackRest (and WAL-G) on object stores, PostgreSQL 15 ($(date -u '+%Y-%m-%d %H:%M UTC'))"
    echo
    echo "- database: pgbench scale $SCALE, $((DB_BYTES / 1048576)) MiB in the data directory without pg_wal (the MB of MB/s), data checksums"
    echo "- stores on this machine, TLS on 127.0.0.1: MinIO $("$MINIO" --version 2>/dev/null | head -1 | awk '{print $3}') (one drive under $STORE_DIR),"
    echo "  Azurite $("$AZURITE" --version 2>/dev/null | head -1) (disk persistence); both share the $(nproc) cores with the tools"
    echo "- pagevault $commit$dirty (binary built $PV_BUILT): --repo s3://|azure://, --stripes ${STRIPE_LIST[*]}, 2 compression threads (one per core);"
    echo "  $(pgbackrest version): process-max=2, start-fast=y, repo1-bundle=$([ "$BUNDLE" = 1 ] && echo y || echo n), archive-check=n (archive_mode is off: its backups hold no WAL)"
    [ "$LOCAL" = 1 ] && echo "- local directory rows: pagevault's repository in $DIR_REPOS (same disk as the restores), the reference of issue 39's restore-from-store goal"
    if [ -n "$WALG_NOT" ]; then
        echo "- WAL-G: $WALG_NOT"
    else
        echo "- WAL-G $(walg_version) (informational): backup-push (fast checkpoint, no WAL) and backup-fetch LATEST, as postgres,"
        echo "  WALG_UPLOAD_CONCURRENCY=2, WALG_DOWNLOAD_CONCURRENCY=2 (as process-max=2), WALG_COMPRESSION_METHOD = the codec"
        for w in "${WALG_SKIPS[@]}"; do echo "  - $w"; done
    fi
    echo "- codecs: none, lz4 (pgBackRest lz4 level 1), zstd (level 3 all); warm page cache only (the data directory read before each repetition)"
    echo "- $REPS repetition(s), round-robin, every other one in reverse order, each store warmed up first by an untimed 256 MiB upload and read-back; $(((T_END - T_START) / 60)) min $(((T_END - T_START) % 60)) s of measurements"
    echo "  (${QUIET_WAITED} s of it waiting for other CPU load); load average $LOAD_START at start, $LOAD_END at end"
    echo "- $VM_MEMORY_NOTE; every case restores into a new directory that ext4 places away from the inodes the last cases freed (bench/scratch.sh)"
    echo "- seconds: wall time of the command (restores: plus \`sync -f\` of the target); best of the repetitions, median in brackets;"
    echo "  MB/s = database size / best seconds (MB = 1,048,576 bytes); stored = bytes listed under the backup's prefix in the store"
    echo "  (pgBackRest: repository with manifest and backup.info; WAL-G: basebackups_005/); CPU s = user + system of the tool's processes + of the store server;"
    echo "  other CPU % = the rest of the machine's busy CPU during the row's runs (max, % of all cores): high values mean a disturbed row."
    echo
    cat "$RUNDIR/table.md"
    echo
    if [ -s "$RUNDIR/notes.txt" ]; then echo "Restore checks:"; echo; cat "$RUNDIR/notes.txt"; echo; fi
    if [ -s "$RUNDIR/failures.txt" ]; then echo "FAILED commands:"; echo; cat "$RUNDIR/failures.txt"; echo; fi
} | tee "$RUNDIR/report.md"
log "raw results: $RUNDIR (runs.tsv, the output and log of every run, report.md)"
if [ "$FAILED" -gt 0 ]; then
    log "$FAILED command(s) failed: see FAILED commands above ($RUNDIR/failures.txt)"
    exit 1
fi
exit 0
}
