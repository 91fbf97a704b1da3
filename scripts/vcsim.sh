#!/bin/bash
# vcsim.sh — build (or reuse) vSphere's own simulator, govmomi's vcsim, offline
# from Debian packages, and print the binary's path.
#
#   golang-go                          bookworm, the host's (scripts/install-deps.sh)
#   golang-github-vmware-govmomi-dev   trixie (not in bookworm), through a private
#   golang-github-google-uuid-dev      apt state; its only non-test Go dependency
#
# The .debs are fetched with `apt-get download` into a private apt state
# (the host's sources are not touched), unpacked with dpkg -x into a GOPATH
# and compiled with GO111MODULE=off together with scripts/vcsim/main.go.
# Cache: $BOOTIMAGE_VCSIM_CACHE (default: scripts/cache-root.sh's root) /
# vcsim-<hash of main.go, this script, the package versions, go version>,
# with VERSIONS recording what went in. A changed input rebuilds.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/cache-root.sh
. "$here/cache-root.sh"
cache_root=${BOOTIMAGE_VCSIM_CACHE:-$(bootimage_cache_root)}
suite=${BOOTIMAGE_VCSIM_SUITE:-trixie}
mirror=${BOOTIMAGE_VCSIM_MIRROR:-http://deb.debian.org/debian}
pkgs=(golang-github-vmware-govmomi-dev golang-github-google-uuid-dev)

command -v go >/dev/null || { echo "vcsim.sh: go not found: apt-get install golang-go (scripts/install-deps.sh)" >&2; exit 1; }

# The private apt state of fixtures/os/foreign-apt.sh, over $suite.
# shellcheck source=fixtures/os/foreign-apt.sh
. "$here/../fixtures/os/foreign-apt.sh"
apt_state=$(BOOTIMAGE_FOREIGN_APT=$cache_root/vcsim-apt/$suite apt_dir amd64)
echo "deb [arch=amd64] $mirror $suite main" > "$apt_state/sources.list"
apt_opts "$apt_state"

# The package versions: from the last refresh's lists (refreshed once a week,
# or when no lists are there yet), so a warm cache needs no network; a
# refresh that fails (offline) keeps the lists there are.
versions_of() {
  apt-cache "${APT_OPTS[@]}" show --no-all-versions "${pkgs[@]}" 2>/dev/null |
    awk '/^Package:/{p=$2} /^Version:/{print p"="$2}'
}
if [ "$(versions_of | wc -l)" -ne ${#pkgs[@]} ]; then
  apt_refresh || true
else
  apt_refresh_older 604800 || true
fi
versions=$(versions_of)
[ "$(echo "$versions" | wc -l)" -eq ${#pkgs[@]} ] || { echo "vcsim.sh: ${pkgs[*]} not found in $suite" >&2; exit 1; }

key=$( { echo "$versions"; go version; cat "$here/vcsim/main.go" "$0"; } | sha256sum | cut -c1-16)
out=$cache_root/vcsim-$key
if [ -x "$out/vcsim" ]; then echo "$out/vcsim"; exit 0; fi

tmp=$(mktemp -d "$cache_root/.vcsim-build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
( cd "$apt_state/archives" && apt-get "${APT_OPTS[@]}" download $(echo "$versions" | tr '\n' ' ') >&2 )
for v in $versions; do
  p=${v%%=*} ver=${v#*=}
  dpkg -x "$apt_state/archives/${p}_${ver//:/%3a}_all.deb" "$tmp/root"
done
mkdir -p "$tmp/gopath/src/bootimage-gen/vcsim"
ln -s "$tmp/root/usr/share/gocode/src/github.com" "$tmp/gopath/src/github.com"
cp "$here/vcsim/main.go" "$tmp/gopath/src/bootimage-gen/vcsim/"
( cd "$tmp/gopath/src/bootimage-gen/vcsim" &&
  GO111MODULE=off GOPATH=$tmp/gopath GOCACHE=$cache_root/vcsim-gocache \
    nice -n 5 go build -o "$tmp/vcsim" . ) >&2
mkdir -p "$tmp/out"
mv "$tmp/vcsim" "$tmp/out/vcsim"
{ echo "$versions"; go version; echo "suite=$suite mirror=$mirror"; } > "$tmp/out/VERSIONS"
rm -rf "$out"
mv "$tmp/out" "$out"
# Builds of other inputs go (each a ~20 MB binary).
for old in "$cache_root"/vcsim-*/vcsim; do
  [ "${old%/vcsim}" = "$out" ] || rm -rf "${old%/vcsim}"
done
echo "$out/vcsim"
