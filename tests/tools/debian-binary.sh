#!/bin/bash
# debian-binary.sh PACKAGE SUITE BINARY [CHECK-ARG...] — fetch (or reuse)
# the Go program BINARY (/usr/bin/BINARY) of Debian SUITE's PACKAGE and
# print its path. Debian 12 lacks some test judges (oras, cosign) or has
# old ones; newer suites ship them as Go binaries that need only libc6
# (>= 2.34), which bookworm's 2.36 satisfies. `BINARY CHECK-ARG...` must
# run (e.g. `oras version`) before the binary is kept.
#
# The .deb comes through a private apt state (fixtures/os/foreign-apt.sh;
# the host's sources are not touched) and is unpacked with dpkg -x.
# Test tools only (tests/tools/oras.sh, tests/tools/cosign.sh), not ones
# the product or `make demo` uses.
# Cache: $BOOTIMAGE_DEBIAN_BINARY_CACHE (default: scripts/cache-root.sh's
# root) / BINARY-SUITE-<version>/BINARY, with VERSION recording the
# package, suite, mirror and the .deb's sha256; other versions of the same
# BINARY-SUITE go. The suite's lists (debian-apt/SUITE) are refreshed once
# a week (or when the package is missing from them); a refresh that fails
# keeps the lists there are. Mirror: $BOOTIMAGE_DEBIAN_BINARY_MIRROR.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 PACKAGE SUITE BINARY [CHECK-ARG...]" >&2; exit 2; }
package=$1 suite=$2 binary=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/cache-root.sh
. "$here/../../scripts/cache-root.sh"
cache_root=${BOOTIMAGE_DEBIAN_BINARY_CACHE:-$(bootimage_cache_root)}
mirror=${BOOTIMAGE_DEBIAN_BINARY_MIRROR:-http://deb.debian.org/debian}
arch=$(dpkg --print-architecture)
me="debian-binary.sh ($binary from $suite)"

# shellcheck source=fixtures/os/foreign-apt.sh
. "$here/../../fixtures/os/foreign-apt.sh"
apt_state=$(BOOTIMAGE_FOREIGN_APT=$cache_root/debian-apt/$suite apt_dir "$arch")
echo "deb [arch=$arch] $mirror $suite main" > "$apt_state/sources.list"
apt_opts "$apt_state"

# awk reads to the end: an early exit would SIGPIPE apt-cache, and
# pipefail would end the script without a word.
version_of() {
  apt-cache "${APT_OPTS[@]}" show --no-all-versions "$package" 2>/dev/null | awk '/^Version:/ && !v {v=$2} END {print v}'
}
# Concurrent callers (test threads) share the lists: one refresh at a time.
exec 9> "$apt_state/lock"
flock 9
if [ -z "$(version_of)" ]; then
  apt_refresh || true
else
  apt_refresh_older 604800 || true
fi
version=$(version_of)
[ -n "$version" ] || { echo "$me: no $package package in Debian $suite ($mirror)" >&2; exit 1; }

out=$cache_root/$binary-$suite-$version
if [ -x "$out/$binary" ]; then echo "$out/$binary"; exit 0; fi

tmp=$(mktemp -d "$cache_root/.$binary-fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
( cd "$apt_state/archives" && apt-get "${APT_OPTS[@]}" download "$package=$version" >&2 )
deb=$apt_state/archives/${package}_${version//:/%3a}_$arch.deb
dpkg -x "$deb" "$tmp/root"
mkdir -p "$tmp/out"
mv "$tmp/root/usr/bin/$binary" "$tmp/out/$binary"
"$tmp/out/$binary" "$@" >/dev/null 2>&1 || { echo "$me: $deb's $binary does not run here" >&2; exit 1; }
{ echo "$package=$version suite=$suite mirror=$mirror"; sha256sum "$deb" | cut -d' ' -f1; } > "$tmp/out/VERSION"
rm -rf "$out"
mv "$tmp/out" "$out"
rm -f "$deb"
# Other versions from this suite go.
for old in "$cache_root/$binary-$suite"-[0-9]*/"$binary"; do
  [ -e "$old" ] || continue
  [ "${old%/"$binary"}" = "$out" ] || rm -rf "${old%/"$binary"}"
done
echo "$out/$binary"
