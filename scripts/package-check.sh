#!/usr/bin/env bash
# Installs a pagevault .deb, checks what it serves, then removes and purges it:
#   scripts/package-check.sh target/debian/pagevault_VERSION_ARCH.deb VERSION
# Root only; refuses to touch a pagevault package installed before it ran.
set -euo pipefail
deb=$1
version=$2
fail() { echo "package check: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || fail "must run as root (dpkg -i)"
if dpkg-query -W -f '${Status}' pagevault 2>/dev/null | grep -q 'ok installed'; then
    fail "a pagevault package is already installed; remove it first (dpkg -r pagevault)"
fi
cleanup() { dpkg -P pagevault >/dev/null 2>&1 || true; }
trap cleanup EXIT

dpkg -i "$deb" >/dev/null
files=$(dpkg -L pagevault)

# The binary: its version and the commit it was built from.
v=$(/usr/bin/pagevault --version)
[[ "$v" =~ ^pagevault\ $version\ \(commit\ [0-9a-f]{12}\)$ ]] ||
    fail "/usr/bin/pagevault --version said '$v', not 'pagevault $version (commit HASH)'"
size=$(stat -c %s /usr/bin/pagevault)
[ "$size" -le $((20 * 1024 * 1024)) ] || fail "/usr/bin/pagevault is $size bytes, over 20 MB"
! readelf -S /usr/bin/pagevault | grep -q '\.debug_info' || fail "/usr/bin/pagevault keeps debug info"

# A man page for every command --help lists, each found by man and rendered.
commands=$(/usr/bin/pagevault --help | sed -n '/^Commands:/,/^$/p' | awk '/^  [a-z]/ && $1!="help" {print $1}')
[ -n "$commands" ] || fail "pagevault --help listed no commands"
pages=$(for c in "" $commands; do echo "pagevault${c:+-$c}"; done
    sed -n 's#^/usr/share/man/man1/\(.*\)\.1\.gz$#\1#p' <<<"$files")
for page in $(sort -u <<<"$pages"); do
    path=$(man -w "$page" 2>/dev/null) || fail "man -w $page found nothing"
    [ "$path" = "/usr/share/man/man1/$page.1.gz" ] || fail "man -w $page gave $path"
    MANWIDTH=100 man "$page" 2>/dev/null | grep -q "^NAME" || fail "man $page does not render"
done
MANWIDTH=100 man pagevault-backup | grep -q -- '--source' || fail "man pagevault-backup lacks --source"

# Completions: bash loads its file and completes subcommands; zsh and fish files present.
out=$(bash -c 'source /usr/share/bash-completion/completions/pagevault
    COMP_WORDS=(pagevault ba); COMP_CWORD=1; COMP_LINE="pagevault ba"; COMP_POINT=12
    _pagevault pagevault ba pagevault; printf "%s\n" "${COMPREPLY[@]}"')
grep -qx backup <<<"$out" || fail "bash completion of 'pagevault ba' gave '$out', not backup"
for f in /usr/share/zsh/vendor-completions/_pagevault /usr/share/fish/vendor_completions.d/pagevault.fish; do
    grep -qx "$f" <<<"$files" && [ -s "$f" ] || fail "$f missing or empty"
done

# systemd units: valid for an instance, and none enabled by the package.
units=$(grep -E '^/lib/systemd/system/pagevault-.*@\.(service|timer)$' <<<"$files")
[ "$(wc -l <<<"$units")" -ge 8 ] || fail "the package holds $(wc -l <<<"$units") systemd units, not 8"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; cleanup' EXIT
for u in $units; do
    inst=$tmp/$(basename "$u" | sed 's/@\./@main./')
    cp "$u" "$inst"
done
systemd-analyze verify --man=no "$tmp"/*.service "$tmp"/*.timer ||
    fail "systemd-analyze verify found faults in the units"
if ls /etc/systemd/system/*.wants/pagevault-* >/dev/null 2>&1; then
    fail "the package enabled a unit: $(ls /etc/systemd/system/*.wants/pagevault-*)"
fi

# The example configuration parses as a stanza; the alert rules and dashboard are in place.
/usr/bin/pagevault history --config /etc/pagevault/pagevault.toml.example --stanza main \
    --show-config >/dev/null || fail "the example configuration does not parse"
for f in /usr/share/pagevault/prometheus/pagevault-alerts.yml /usr/share/pagevault/grafana/pagevault.json; do
    grep -qx "$f" <<<"$files" || fail "$f is not in the package"
done

# Removal leaves only the conffile; purge leaves nothing.
dpkg -r pagevault >/dev/null
for f in $files; do
    [ -d "$f" ] && continue
    [ "$f" = /etc/pagevault/pagevault.toml.example ] && continue
    [ ! -e "$f" ] || fail "$f is left after dpkg -r"
done
dpkg -P pagevault >/dev/null
[ ! -e /etc/pagevault/pagevault.toml.example ] || fail "the example configuration is left after dpkg -P"
echo "package check: $deb installs, serves $(sort -u <<<"$pages" | wc -l) man pages, completions and $(wc -l <<<"$units") units, and removes cleanly"
