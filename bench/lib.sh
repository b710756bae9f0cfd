# bench/lib.sh: what every benchmark script shares; sourced right after ROOT is set.

# What every script reads from the environment (a script may change a default after sourcing).
WORK=${WORK_DIR:-/var/tmp/pagevault-bench}
NO_BUILD=${NO_BUILD:-0}
QUIET_BUDGET=${QUIET_BUDGET:-300}   # seconds in all to wait for other CPU load (a build) to pass
PV=${PAGEVAULT:-$ROOT/target/release/pagevault}

log() { printf '[%s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# The script's header comment, up to `set -euo`, is its --help.
show_help() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0; }
unknown_option() { echo "unknown option: $1 (try --help)" >&2; exit 2; }
# parse_args SPEC... -- ARGS...: each SPEC is --name=VAR (the option's value goes to VAR),
# --name=VAR=VALUE (a flag setting VAR) or --name=VAR+ (each value appended to array VAR);
# -h/--help shows the header; other words go to the array pos; an unknown option exits 2.
parse_args() {
    local spec=() a w var found
    while [ "$1" != -- ]; do spec+=("$1"); shift; done
    shift
    pos=()
    while [ $# -gt 0 ]; do
        a=$1; shift; found=0
        case "$a" in -h|--help) show_help ;; esac
        for w in "${spec[@]}"; do
            [ "$a" = "${w%%=*}" ] || continue
            found=1; var=${w#*=}
            if [[ $var == *=* ]]; then printf -v "${var%%=*}" '%s' "${var#*=}"; continue; fi
            [ $# -gt 0 ] || { echo "$a needs a value (try --help)" >&2; exit 2; }
            if [[ $var == *+ ]]; then eval "${var%+}+=(\"\$1\")"; else printf -v "$var" '%s' "$1"; fi
            shift
        done
        [ $found = 1 ] && continue
        case "$a" in -*) unknown_option "$a" ;; *) pos+=("$a") ;; esac
    done
}
# parse_options: parse_args for a script that takes no positional arguments.
parse_options() { parse_args "$@"; [ ${#pos[@]} -eq 0 ] || unknown_option "${pos[0]}"; }
need_posint() { [[ $2 =~ ^[1-9][0-9]*$ ]] || { echo "$1 must be a positive integer" >&2; exit 2; }; }

# need_pkg COMMAND-OR-PATH PACKAGE: installs PACKAGE from apt when COMMAND is missing.
need_pkg() {
    if [ ! -x "$1" ] && ! command -v "$1" >/dev/null 2>&1; then
        log "installing $2"
        [ "$(id -u)" -eq 0 ] || die "$2 is missing and we are not root"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >/dev/null 2>&1 ||
            { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >/dev/null; } ||
            die "cannot install $2"
    fi
}

# use_current_pgbackrest: the pgBackRest the peers' rows measure is the current release,
# PGBACKREST or PAGEVAULT_TOOLS/bin/pgbackrest (default /var/tmp/pagevault-tools: built from
# its repository, see bench/README.md, incr.sh), put first on PATH; without one, the system's,
# with a warning when it is older than 2.52 (Debian's 2.45 runs about 1.8x slower than 2.59.1).
use_current_pgbackrest() {
    local built=${PGBACKREST:-${PAGEVAULT_TOOLS:-/var/tmp/pagevault-tools}/bin/pgbackrest} v
    if [ -x "$built" ]; then
        export PATH="$(dirname "$built"):$PATH"
    fi
    v=$(pgbackrest version 2>/dev/null | awk '{print $2}')
    if [ -n "$v" ] && [ "$(printf '%s\n' "$v" 2.52 | sort -V | head -1)" != 2.52 ]; then
        log "warning: measuring pgBackRest $v, older than 2.52 (the current release runs about 1.8x faster): build release/2.59.1 into $built (bench/README.md)"
    fi
}

now_ns() { date +%s%N; }
# Busy CPU ticks of the whole machine (user nice system irq softirq steal), to tell
# how much else ran during a measurement (another build, the host stealing time).
busy_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat; }
HZ=$(getconf CLK_TCK)
NCPU=$(nproc)
# Before each run: while something else keeps the CPUs over 25% busy (another build),
# wait, up to QUIET_BUDGET seconds over the whole benchmark.
QUIET_WAITED=0
wait_quiet() {
    local b0 b1 busy said=0
    while :; do
        b0=$(busy_ticks); sleep 0.5; b1=$(busy_ticks)
        busy=$(((b1 - b0) * 200 / (HZ * NCPU)))
        if [ "$busy" -lt 25 ] || [ "$QUIET_WAITED" -ge "$QUIET_BUDGET" ]; then return 0; fi
        [ $said = 1 ] || log "  the machine is $busy% busy: waiting for it to calm down"
        said=1
        sleep 1.5
        QUIET_WAITED=$((QUIET_WAITED + 2))
    done
}

# ensure_binary: rebuilds $PV when it is missing or older than any source file (unless
# PAGEVAULT names a binary or NO_BUILD=1); sets build_note when the build failed.
ensure_binary() {
    build_note=""
    if [ -z "${PAGEVAULT:-}" ] && [ "$NO_BUILD" != 1 ]; then
        if [ ! -x "$PV" ] || [ -n "$(find "$ROOT/src" "$ROOT/Cargo.toml" "$ROOT/Cargo.lock" -newer "$PV" -print -quit 2>/dev/null)" ]; then
            log "building the release binary"
            if ! (cd "$ROOT" && cargo build --release -q) >&2; then
                [ -x "$PV" ] || die "cargo build --release failed and there is no binary"
                build_note="(build failed: measured the previous binary)"
                log "warning: cargo build --release failed; using the existing $PV"
            fi
        fi
    fi
    [ -x "$PV" ] || die "no pagevault binary at $PV"
}

# cluster_is_current DIR WANT: DIR/manifest says WANT and DIR/data holds a cluster.
cluster_is_current() { [ -f "$1/manifest" ] && [ "$(cat "$1/manifest")" = "$2" ] && [ -f "$1/data/PG_VERSION" ]; }

# fresh_cluster_dir DIR NEED_MB WHAT: stops and removes the cluster in DIR, makes DIR/run for
# the postgres user; dies unless NEED_MB MiB (for WHAT) are free beside DIR. Needs pg_stop.
fresh_cluster_dir() {
    local parent avail_mb
    [ -d "$1/data" ] && pg_stop "$1/data"
    rm -rf "$1"
    mkdir -p "$1/run"
    parent=$(dirname "$1")
    avail_mb=$(($(df -Pk "$parent" | awk 'NR==2 {print $4}') / 1024))
    [ "$avail_mb" -gt "$2" ] || die "need about $2 MiB free under $parent for $3, have $avail_mb"
    chown -R postgres: "$1"
}

# bench_initdb DATA LOGDIR SCRIPT: a cluster with data checksums and the settings every
# benchmark uses (needs as_pg and PG_BIN).
bench_initdb() {
    as_pg "$PG_BIN/initdb" -D "$1" --data-checksums --auth=trust -U postgres -E UTF8 --locale=C.UTF-8 \
        > "$2/initdb.log" 2>&1 || die "initdb failed (see $2/initdb.log)"
    cat >> "$1/postgresql.conf" <<EOF

# $3 (port, listen_addresses and the socket directory are given by pg_ctl -o)
shared_buffers = 256MB
max_wal_size = 4GB
checkpoint_timeout = 30min
archive_mode = off
EOF
}

# trap_signals FUNCTION: FUNCTION runs on exit; an error names its line; signals exit with
# the shell's status for them.
trap_signals() {
    trap "$1" EXIT
    trap 'log "error: exit $? at line $LINENO: $BASH_COMMAND"' ERR
    trap 'log "interrupted (SIGINT)"; exit 130' INT
    trap 'log "terminated (SIGTERM)"; exit 143' TERM
    trap 'log "hung up (SIGHUP)"; exit 129' HUP
}

# snapshot_binary DIR: others may rebuild target/release while a benchmark runs, so it
# measures one copy of the binary throughout (PV becomes DIR/pagevault); sets PV_BUILT,
# commit and dirty for the report.
snapshot_binary() {
    PV_BUILT=$(date -u -r "$PV" '+%Y-%m-%d %H:%M UTC')
    commit=$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo unknown)
    dirty=$(cd "$ROOT" && git status --porcelain -- src Cargo.toml 2>/dev/null | grep -q . && echo "+uncommitted src changes" || true)
    cp "$PV" "$1/pagevault"
    PV=$1/pagevault
}

# make_tls DIR: a private CA (DIR/ca.pem) and a server certificate for 127.0.0.1/localhost
# signed by it (DIR/cert.pem, DIR/key.pem): pgBackRest's S3 and Azure repositories need HTTPS,
# and rustls, which pagevault uses, refuses a self-signed certificate marked CA:TRUE as a
# server's. Needs openssl.
make_tls() {
    mkdir -p "$1"
    (
        cd "$1"
        openssl req -x509 -newkey rsa:2048 -sha256 -days 30 -nodes -keyout ca.key -out ca.pem \
            -subj "/CN=pagevault bench CA" -addext "basicConstraints=critical,CA:TRUE" \
            -addext "keyUsage=critical,keyCertSign,cRLSign"
        openssl req -newkey rsa:2048 -sha256 -nodes -keyout key.pem -out server.csr -subj "/CN=localhost"
        printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
            "extendedKeyUsage=serverAuth" "subjectAltName=IP:127.0.0.1,DNS:localhost" > server.ext
        openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 30 -sha256 \
            -extfile server.ext -out cert.pem
    ) > "$1/openssl.log" 2>&1 || die "openssl could not make the certificates (see $1/openssl.log)"
}

# pgbr_s3_repo PORT BUCKET KEY SECRET: the [global] lines of a pgBackRest repository on the
# local MinIO (path style, TLS not verified: its certificate is the benchmark's own CA's).
pgbr_s3_repo() {
    printf '%s\n' "repo1-type=s3" "repo1-s3-endpoint=127.0.0.1" "repo1-storage-port=$1" \
        "repo1-s3-bucket=$2" "repo1-s3-key=$3" "repo1-s3-key-secret=$4" "repo1-s3-region=us-east-1" \
        "repo1-s3-uri-style=path"
}

# ------------------------------------------------------- PostgreSQL, ports ----
as_pg() { runuser -u postgres -- "$@"; }
port_free() { ! ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }
free_port() { # free_port FIRST: a TCP port nobody listens on
    local p=$1
    while ! port_free "$p"; do p=$((p + 1)); done
    echo "$p"
}
psql_on() { # psql_on PORT DB ARGS... ($PG_BIN's psql, as postgres over TCP)
    local port=$1 db=$2; shift 2
    "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d "$db" "$@"
}

# cold_cache_check: COLD_OK=1 when the page cache can be dropped (root); drop_caches
# then syncs and drops it (else only syncs).
cold_cache_check() {
    COLD_OK=0
    if (sync && echo 3 > /proc/sys/vm/drop_caches) 2>/dev/null; then COLD_OK=1; fi
}
drop_caches() { sync; if [ "$COLD_OK" = 1 ]; then echo 3 > /proc/sys/vm/drop_caches; fi; }

# wait_disk_idle DIR: until no `pagevault remove-swept` runs (a delta restore's old WAL
# removed after it returned) and the disk holding DIR did no I/O for half a second (a
# previous run's unlinks and discards), at most 60 s: each timed run starts on an idle disk.
wait_disk_idle() {
    local dev ticks a b i
    dev=$(lsblk -no PKNAME "$(findmnt -no SOURCE --target "$1")" 2>/dev/null | head -1)
    [ -n "$dev" ] || dev=$(basename "$(findmnt -no SOURCE --target "$1")")
    ticks() { awk -v d="$dev" '$3 == d {print $13}' /proc/diskstats; }
    for ((i = 0; i < 120; i++)); do
        pgrep -f 'pagevault remove-swept' > /dev/null && { sleep 0.5; continue; }
        a=$(ticks); sleep 0.5; b=$(ticks)
        [ -n "$a" ] && [ "$((b - a))" -lt 10 ] && return 0
        [ -n "$a" ] || return 0
    done
}

# delay_proxy_start TARGET_PORT ONE_WAY_MS: puts ONE_WAY_MS milliseconds of delay each way
# (0, 10, 25, 50) in front of 127.0.0.1:TARGET_PORT, bandwidth unlimited: the test harness's
# proxy (tests/common/delay.rs, through bench/delay-proxy.rs), built with rustc into WORK the
# first time. Sets DELAY_PORT (connect there instead) and DELAY_PID; delay_proxy_stop ends it.
DELAY_PID=""
delay_proxy_start() {
    local bin=$WORK/delay-proxy out=$WORK/delay-proxy.port
    if [ ! -x "$bin" ] || [ "$ROOT/bench/delay-proxy.rs" -nt "$bin" ] || [ "$ROOT/tests/common/delay.rs" -nt "$bin" ]; then
        log "building the delay proxy (bench/delay-proxy.rs)"
        mkdir -p "$WORK"
        PATH="$HOME/.cargo/bin:$PATH" rustc --edition 2021 -O -o "$bin" "$ROOT/bench/delay-proxy.rs" >&2 ||
            die "rustc could not build bench/delay-proxy.rs"
    fi
    delay_proxy_stop
    rm -f "$out"
    "$bin" 0 "$1" "$2" > "$out" 2> "$WORK/delay-proxy.log" < /dev/null &
    DELAY_PID=$!
    for _ in $(seq 1 100); do [ -s "$out" ] && break; sleep 0.05; done
    DELAY_PORT=$(head -1 "$out" 2>/dev/null)
    [ -n "$DELAY_PORT" ] || die "the delay proxy did not start (see $WORK/delay-proxy.log)"
}
delay_proxy_stop() {
    [ -z "$DELAY_PID" ] || { kill "$DELAY_PID" 2>/dev/null || true; wait "$DELAY_PID" 2>/dev/null || true; }
    DELAY_PID=""
}

# minio_start DIR PORT BUCKET: MinIO with TLS (make_tls's certificates) on 127.0.0.1:PORT, its
# data and log under DIR, BUCKET made with Node's S3 SDK. Exports the AWS_* variables,
# PAGEVAULT_CA_FILE and NODE_* for pagevault and tests/tools/store.js; sets MINIO_PID.
MINIO_PID=""
minio_start() {
    local dir=$1 port=$2 bucket=$3 tools=${PAGEVAULT_TOOLS:-/var/tmp/pagevault-tools}
    [ -x "$tools/bin/minio" ] || die "$tools/bin/minio is missing (scripts/setup.sh)"
    make_tls "$dir/tls"
    mkdir -p "$dir/certs"
    cp "$dir/tls/cert.pem" "$dir/certs/public.crt"
    cp "$dir/tls/key.pem" "$dir/certs/private.key"
    export AWS_ACCESS_KEY_ID=pvbenchadmin AWS_SECRET_ACCESS_KEY=pvbench-secret-Qx27 AWS_REGION=us-east-1
    MINIO_ROOT_USER=$AWS_ACCESS_KEY_ID MINIO_ROOT_PASSWORD=$AWS_SECRET_ACCESS_KEY MINIO_UPDATE=off \
        MINIO_BROWSER=off "$tools/bin/minio" server "$dir/data" --address "127.0.0.1:$port" \
        --certs-dir "$dir/certs" --quiet > "$dir/minio.log" 2>&1 < /dev/null &
    MINIO_PID=$!
    export AWS_ENDPOINT_URL=https://127.0.0.1:$port PAGEVAULT_CA_FILE=$dir/tls/ca.pem
    export NODE_PATH=$tools/node/node_modules NODE_NO_WARNINGS=1 NODE_EXTRA_CA_CERTS=$dir/tls/ca.pem
    for _ in $(seq 1 100); do
        node "$ROOT/tests/tools/store.js" s3 mkbucket "$bucket" > "$dir/mkbucket.log" 2>&1 && break
        sleep 0.3
    done
    grep -q . "$dir/mkbucket.log" && die "cannot create the bucket: $(cat "$dir/mkbucket.log")"
    return 0
}
minio_stop() {
    [ -z "$MINIO_PID" ] || { kill "$MINIO_PID" 2>/dev/null || true; wait "$MINIO_PID" 2>/dev/null || true; }
    MINIO_PID=""
}

# need_tools PATH|COMMAND...: dies naming the first missing.
need_tools() {
    local t
    for t in "$@"; do
        [ -x "$t" ] || command -v "$t" >/dev/null || die "$t is missing (scripts/setup.sh, bench/README.md)"
    done
}
# need_delays "0 25": each a number of milliseconds, or a usage error.
need_delays() {
    local d
    for d in $1; do [[ $d =~ ^[0-9]+$ ]] || { echo "--delays: '$d' is not a number of milliseconds" >&2; exit 2; }; done
}
# bench_rundir NAME: WORK made absolute and entered from /, RUNDIR=WORK/results/NAME-DATE made,
# the binary snapshot there (snapshot_binary).
bench_rundir() {
    mkdir -p "$WORK"
    WORK=$(cd "$WORK" && pwd)
    chmod 755 "$WORK"
    cd /
    RUNDIR=$WORK/results/$1-$(date +%Y%m%d-%H%M%S)
    mkdir -p "$RUNDIR"
    snapshot_binary "$RUNDIR"
}
