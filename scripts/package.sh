#!/usr/bin/env bash
# Builds target/debian/pagevault_VERSION_amd64.deb (and pagevault-dbgsym_VERSION_amd64.deb
# with the debug info split off the binary).
#
#   scripts/package.sh                  release build, then the packages
#   scripts/package.sh --profile ci     package the test build's binary
#   scripts/package.sh --no-build ...   package target/PROFILE/pagevault as it is (CI, after
#                                       `cargo test` built it)
#   scripts/package.sh --check          also install the package, check it, remove it (root)
#
# The package holds /usr/bin/pagevault (stripped, at most 20 MB), a man page per command and
# bash, zsh and fish completions (made by `pagevault generate` from the same definitions as
# --help), the systemd units of docs/systemd (installed disabled), the example configuration
# /etc/pagevault/pagevault.toml.example, and the Prometheus alert rules and Grafana dashboard
# under /usr/share/pagevault.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

profile=release
check=0
build=1
while [ $# -gt 0 ]; do
    case "$1" in
        --profile) profile="$2"; shift 2 ;;
        --check) check=1; shift ;;
        --no-build) build=0; shift ;;
        -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "scripts/package.sh: unknown argument $1 (--profile P, --no-build, --check)" >&2; exit 2 ;;
    esac
done

MAX_BYTES=$((20 * 1024 * 1024))
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
arch=$(dpkg --print-architecture)
out=target/debian
stage=$out/stage
dbg=$out/stage-dbgsym

bin=target/$profile/pagevault
if [ "$build" = 1 ]; then
    cargo build --locked --profile "$profile" --bin pagevault
elif [ ! -x "$bin" ]; then
    echo "scripts/package.sh: --no-build, but $bin is not built" >&2
    exit 1
fi

rm -rf "$stage" "$dbg"
install -d "$stage/DEBIAN" "$stage/usr/bin" "$stage/usr/share/man/man1" \
    "$stage/usr/share/bash-completion/completions" "$stage/usr/share/zsh/vendor-completions" \
    "$stage/usr/share/fish/vendor_completions.d" "$stage/lib/systemd/system" \
    "$stage/etc/pagevault" "$stage/usr/share/pagevault" "$stage/usr/share/doc/pagevault"

# The binary, stripped; its debug info (if the profile keeps any) goes to the dbgsym package
# under the build ID, where gdb and debuginfod clients look for it.
install -m 0755 "$bin" "$stage/usr/bin/pagevault"
build_id=$(readelf -n "$bin" | sed -n 's/.*Build ID: \([0-9a-f]*\).*/\1/p')
if readelf -S "$bin" | grep -q '\.debug_info'; then
    install -d "$dbg/DEBIAN" "$dbg/usr/lib/debug/.build-id/${build_id:0:2}"
    objcopy --only-keep-debug --compress-debug-sections "$bin" \
        "$dbg/usr/lib/debug/.build-id/${build_id:0:2}/${build_id:2}.debug"
    chmod 0644 "$dbg/usr/lib/debug/.build-id/${build_id:0:2}/${build_id:2}.debug"
fi
strip --strip-debug --strip-unneeded "$stage/usr/bin/pagevault"
size=$(stat -c %s "$stage/usr/bin/pagevault")
if [ "$size" -gt "$MAX_BYTES" ]; then
    echo "scripts/package.sh: /usr/bin/pagevault is $size bytes stripped, over the $MAX_BYTES limit" >&2
    exit 1
fi

gen=$out/generated
rm -rf "$gen"
"$bin" generate man --out "$gen/man" >/dev/null
"$bin" generate completions --out "$gen/completions" >/dev/null
for m in "$gen"/man/*.1; do
    gzip -9n -c "$m" >"$stage/usr/share/man/man1/$(basename "$m").gz"
done
install -m 0644 "$gen/completions/pagevault.bash" "$stage/usr/share/bash-completion/completions/pagevault"
install -m 0644 "$gen/completions/_pagevault" "$stage/usr/share/zsh/vendor-completions/_pagevault"
install -m 0644 "$gen/completions/pagevault.fish" "$stage/usr/share/fish/vendor_completions.d/pagevault.fish"
install -m 0644 docs/systemd/*.service docs/systemd/*.timer "$stage/lib/systemd/system/"
install -m 0644 packaging/pagevault.toml.example "$stage/etc/pagevault/pagevault.toml.example"
if [ -d docs/prometheus ]; then
    install -d "$stage/usr/share/pagevault/prometheus"
    install -m 0644 docs/prometheus/pagevault-alerts.yml "$stage/usr/share/pagevault/prometheus/"
fi
if [ -f docs/grafana/pagevault.json ]; then
    install -d "$stage/usr/share/pagevault/grafana"
    install -m 0644 docs/grafana/pagevault.json "$stage/usr/share/pagevault/grafana/"
fi
install -m 0644 packaging/copyright "$stage/usr/share/doc/pagevault/copyright"
echo /etc/pagevault/pagevault.toml.example >"$stage/DEBIAN/conffiles"

# The newest glibc symbol version the binary needs is the one it depends on.
glibc=$(objdump -T "$stage/usr/bin/pagevault" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -Vu | tail -1)
installed=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
cat >"$stage/DEBIAN/control" <<EOF
Package: pagevault
Version: $version
Architecture: $arch
Maintainer: pagevault developers <pagevault@localhost>
Installed-Size: $installed
Depends: libc6 (>= $glibc), libgcc-s1
Suggests: postgresql-client
Section: database
Priority: optional
Homepage: https://github.com/pagevault/pagevault
Description: backup and restore engine for PostgreSQL, SQLite and files
 pagevault backs up a running PostgreSQL 14-18 cluster (full, differential and
 incremental from WAL block summaries, WAL archiving, point-in-time restore),
 SQLite databases and plain files to disk, S3 or Azure Blob, through a bounded
 pipeline, and checks every frame, page and file it restores.
EOF

find "$stage" -type d -exec chmod 0755 {} +
dpkg-deb --root-owner-group -Zxz --build "$stage" "$out/pagevault_${version}_${arch}.deb" >/dev/null
echo "$out/pagevault_${version}_${arch}.deb ($size bytes binary)"
if [ -d "$dbg" ]; then
    cat >"$dbg/DEBIAN/control" <<EOF
Package: pagevault-dbgsym
Version: $version
Architecture: $arch
Maintainer: pagevault developers <pagevault@localhost>
Depends: pagevault (= $version)
Section: debug
Priority: optional
Description: debug symbols for pagevault
Build-Ids: $build_id
EOF
    find "$dbg" -type d -exec chmod 0755 {} +
    dpkg-deb --root-owner-group --build "$dbg" "$out/pagevault-dbgsym_${version}_${arch}.deb" >/dev/null
    echo "$out/pagevault-dbgsym_${version}_${arch}.deb"
fi

[ "$check" = 1 ] || exit 0
exec bash scripts/package-check.sh "$out/pagevault_${version}_${arch}.deb" "$version"
