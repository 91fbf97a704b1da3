#!/bin/bash
# mkfs-root.sh — build (or reuse) a buildroot holding Debian forky's xfsprogs
# and e2fsprogs with the shared libraries they need, runnable on Debian 12,
# and print its path.
#
#   mkfs-root.sh [DIR]   DIR: the cache (default: scripts/cache-root.sh's
#                        root /mkfs-root, i.e. /var/cache/bootimage-gen/
#                        mkfs-root as root, or $BOOTIMAGE_CACHE/mkfs-root)
#
# Why: reproducible root and boot filesystems need `mkfs.xfs -p DIR` with
# SOURCE_DATE_EPOCH/DETERMINISTIC_SEED (xfsprogs >= 7.1) and `mke2fs -d DIR`
# that copies chattr flags and clamps times (e2fsprogs >= 1.47.3). Debian 12
# has 6.1 and 1.47.0; forky has both, but its binaries need glibc >= 2.38
# (Debian 12: 2.36). So forky's libc6 comes along, and each tool runs under
# the buildroot's own loader: nothing is installed, nothing runs in a chroot.
#
# The .debs come through a private apt state (fixtures/os/foreign-apt.sh
# over forky, under DIR/.apt; the host's sources, lists and architectures
# are not touched) and are unpacked with `dpkg-deb -x`. The packages are
# xfsprogs, e2fsprogs and the closure of their Depends/Pre-Depends that are
# libraries (lib*): xfsprogs' python3 (for xfs_scrub_all) and e2fsprogs'
# logsave are not needed to make or check a filesystem.
#
# The entry: DIR/<hash of the package versions and this script>/ with
#   root/               the unpacked packages
#   bin/mkfs.xfs …      wrappers: bin/mkfs.xfs, mke2fs, xfs_db, xfs_repair,
#                       e2fsck, dumpe2fs, each running root/usr/sbin/<tool>
#                       through root's ld-linux-x86-64.so.2 --library-path
#   VERSIONS            "<package> <version>" per package, then the suite
#                       and mirror (written last: an entry is whole with it)
# It is built in DIR/.build-<key>-* and renamed into place (scripts/
# keyed-dir.sh: a lock per key, a one-line "cold" on stderr, entries unused
# for 30 days pruned). The suite's lists are refreshed once a week, or when
# a package is missing; a refresh that fails (offline) keeps the lists there
# are, so a warm cache needs no network.
# Environment: BOOTIMAGE_MKFS_SUITE (forky), BOOTIMAGE_MKFS_MIRROR
# (http://deb.debian.org/debian).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
me=mkfs-root.sh
# shellcheck source=scripts/cache-root.sh
. "$here/cache-root.sh"
# shellcheck source=scripts/keyed-dir.sh
. "$here/keyed-dir.sh"
# shellcheck source=fixtures/os/foreign-apt.sh
. "$here/../fixtures/os/foreign-apt.sh"

base=${1:-$(bootimage_cache_root)/mkfs-root}
suite=${BOOTIMAGE_MKFS_SUITE:-forky}
mirror=${BOOTIMAGE_MKFS_MIRROR:-http://deb.debian.org/debian}
arch=amd64 # the wrappers name the x86-64 loader
[ "$(dpkg --print-architecture)" = "$arch" ] || { echo "$me: runs on amd64 only" >&2; exit 1; }
tools=(mkfs.xfs mke2fs xfs_db xfs_repair e2fsck dumpe2fs)
mkdir -p "$base"
base=$(cd "$base" && pwd)

# The private apt state over $suite; one refresh at a time (fd 8; fd 9 is
# keyed-dir.sh's).
apt_state=$(BOOTIMAGE_FOREIGN_APT=$base/.apt/$suite apt_dir "$arch")
echo "deb [arch=$arch] $mirror $suite main" > "$apt_state/sources.list"
apt_opts "$apt_state"

# "<package> <version>" of xfsprogs, e2fsprogs and every lib* package they
# need, transitively (the first alternative of each dependency; :any and
# version constraints dropped), sorted. Status 0 even with no lists yet
# (apt-cache then fails): whole() judges the result.
closure() {
  local -A seen=()
  local queue=(xfsprogs e2fsprogs) next p dep
  while [ ${#queue[@]} -gt 0 ]; do
    next=()
    for p in "${queue[@]}"; do seen[$p]=1; done
    # awk reads to the end: an early exit would SIGPIPE apt-cache.
    while read -r dep; do
      [ -n "${seen[$dep]:-}" ] && continue
      seen[$dep]=1
      next+=("$dep")
    done < <(apt-cache "${APT_OPTS[@]}" show --no-all-versions "${queue[@]}" 2>/dev/null |
      awk -F': ' '/^(Depends|Pre-Depends):/ {
          n = split($2, d, /, */)
          for (i = 1; i <= n; i++) { sub(/ *[|(].*/, "", d[i]); sub(/:any$/, "", d[i]); if (d[i] ~ /^lib/) print d[i] } }')
    queue=("${next[@]}")
  done
  apt-cache "${APT_OPTS[@]}" show --no-all-versions "${!seen[@]}" 2>/dev/null |
    awk '/^Package:/ {p = $2} /^Version:/ {print p, $2}' | sort -u || true
}
exec 8> "$apt_state/lock"
flock 8
whole() { grep -q '^xfsprogs ' <<< "$versions" && grep -q '^e2fsprogs ' <<< "$versions"; }
stamp() { stat -c %Y "$apt_state/updated" 2>/dev/null || echo none; }
versions=$(closure)
before=$(stamp)
if whole; then
  apt_refresh_older 604800 || true
else
  apt_refresh || true
fi
# Resolved again only when the lists changed.
[ "$(stamp)" = "$before" ] || versions=$(closure)
whole || { echo "$me: no xfsprogs/e2fsprogs from Debian $suite ($mirror): its package lists could not be read (apt's reason above; an expired Release file means a snapshot mirror: Acquire::Check-Valid-Until \"false\" in apt's configuration, or BOOTIMAGE_MKFS_MIRROR)" >&2; exit 1; }
flock -u 8

key=$( { echo "$versions"; cat "$0"; } | sha256sum | cut -c1-16)
if keyed_dir_get "$me" "$base" "$key" VERSIONS; then echo "$KEYED_OUT"; exit 0; fi
keyed_dir_begin "$me" "$base" "$key" VERSIONS
if [ -n "$KEYED_READY" ]; then echo "$KEYED_OUT"; exit 0; fi
trap 'rm -rf "$KEYED_WORK"' EXIT
work=$KEYED_WORK

# Download exactly these versions into the work dir, unpack, drop the .debs.
mkdir -p "$work/debs" "$work/root" "$work/bin"
# shellcheck disable=SC2046  # one "pkg=version" word per package
( cd "$work/debs" && apt-get "${APT_OPTS[@]}" download -qq $(awk '{print $1 "=" $2}' <<< "$versions") >&2 ) ||
  { echo "$me: apt-get download from $suite ($mirror) failed" >&2; exit 1; }
for deb in "$work"/debs/*.deb; do dpkg-deb -x "$deb" "$work/root"; done
rm -rf "$work/debs"

# The wrappers find the entry from their own path (the entry is renamed
# after they are written). --library-path wins over LD_LIBRARY_PATH, so no
# host library is mixed in. mke2fs reads /etc/mke2fs.conf unless
# MKE2FS_CONFIG names another: default it to forky's, which the binary is
# meant for (callers that want a reproducible result pin their own).
lib=lib/x86_64-linux-gnu
loader=root/usr/$lib/ld-linux-x86-64.so.2
[ -x "$work/$loader" ] || { echo "$me: no $loader in the unpacked libc6" >&2; exit 1; }
for t in "${tools[@]}"; do
  [ -x "$work/root/usr/sbin/$t" ] || { echo "$me: no usr/sbin/$t in the unpacked packages" >&2; exit 1; }
  cat > "$work/bin/$t" <<EOF
#!/bin/sh
# $t from Debian $suite, run by its own loader and libraries (scripts/mkfs-root.sh).
e=\$(dirname "\$(dirname "\$(readlink -f "\$0")")")
export MKE2FS_CONFIG="\${MKE2FS_CONFIG:-\$e/root/etc/mke2fs.conf}"
exec "\$e/$loader" --library-path "\$e/root/usr/$lib" --argv0 "$t" "\$e/root/usr/sbin/$t" "\$@"
EOF
  chmod 755 "$work/bin/$t"
done

# They must run here, and load no library from outside the buildroot.
if ! "$work/bin/mkfs.xfs" -V >/dev/null || ! "$work/bin/mke2fs" -V >/dev/null 2>&1; then
  echo "$me: the unpacked mkfs.xfs/mke2fs do not run on this host" >&2; exit 1
fi
for t in "${tools[@]}"; do
  if "$work/$loader" --library-path "$work/root/usr/$lib" --list "$work/root/usr/sbin/$t" |
    grep -v -e "=> $work/root/" -e 'linux-vdso' -e "^[[:space:]]*$work/root/" -e "^[[:space:]]*/lib64/ld-linux"; then
    echo "$me: $t loads libraries from outside $work/root (above)" >&2; exit 1
  fi
done

{ echo "$versions"; echo "suite=$suite mirror=$mirror"; } > "$work/VERSIONS"
keyed_dir_commit "$me" "$base" 30
trap - EXIT
echo "$KEYED_OUT"
