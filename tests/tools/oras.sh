#!/bin/bash
# oras.sh — fetch (or reuse) the real ORAS CLI (oras.land/oras) and print its
# path. Debian 12 has no `oras`; forky (testing) ships it as a Go binary that
# needs only libc6 (>= 2.34), which bookworm's 2.36 satisfies.
#
# The .deb comes through a private apt state (fixtures/os/foreign-apt.sh;
# the host's sources are not touched) and is unpacked with dpkg -x.
# A test tool (tests/registry.rs), not one the product or `make demo` uses.
# Cache: $BOOTIMAGE_ORAS_CACHE (default: scripts/cache-root.sh's root) /
# oras-<version>/oras, with VERSION recording the package, suite and the
# .deb's sha256. The lists are refreshed once a week (or when the package
# is missing from them); a refresh that fails keeps the lists there are.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/cache-root.sh
. "$here/../../scripts/cache-root.sh"
cache_root=${BOOTIMAGE_ORAS_CACHE:-$(bootimage_cache_root)}
suite=${BOOTIMAGE_ORAS_SUITE:-forky}
mirror=${BOOTIMAGE_ORAS_MIRROR:-http://deb.debian.org/debian}

# shellcheck source=fixtures/os/foreign-apt.sh
. "$here/../../fixtures/os/foreign-apt.sh"
apt_state=$(BOOTIMAGE_FOREIGN_APT=$cache_root/oras-apt/$suite apt_dir amd64)
echo "deb [arch=amd64] $mirror $suite main" > "$apt_state/sources.list"
apt_opts "$apt_state"

version_of() {
  apt-cache "${APT_OPTS[@]}" show --no-all-versions oras 2>/dev/null | awk '/^Version:/{print $2; exit}'
}
if [ -z "$(version_of)" ]; then
  apt_refresh || true
else
  apt_refresh_older 604800 || true
fi
version=$(version_of)
[ -n "$version" ] || { echo "oras.sh: no oras package in Debian $suite ($mirror)" >&2; exit 1; }

out=$cache_root/oras-$version
if [ -x "$out/oras" ]; then echo "$out/oras"; exit 0; fi

tmp=$(mktemp -d "$cache_root/.oras-fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
( cd "$apt_state/archives" && apt-get "${APT_OPTS[@]}" download "oras=$version" >&2 )
deb=$apt_state/archives/oras_${version//:/%3a}_amd64.deb
dpkg -x "$deb" "$tmp/root"
mkdir -p "$tmp/out"
mv "$tmp/root/usr/bin/oras" "$tmp/out/oras"
"$tmp/out/oras" version >/dev/null || { echo "oras.sh: $deb's oras does not run here" >&2; exit 1; }
{ echo "oras=$version suite=$suite mirror=$mirror"; sha256sum "$deb" | cut -d' ' -f1; } > "$tmp/out/VERSION"
rm -rf "$out"
mv "$tmp/out" "$out"
rm -f "$deb"
# Other versions go.
for old in "$cache_root"/oras-[0-9]*/oras; do
  [ "${old%/oras}" = "$out" ] || rm -rf "${old%/oras}"
done
echo "$out/oras"
