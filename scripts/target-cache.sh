#!/usr/bin/env bash
# Compiled dependencies kept outside the clone, keyed by their inputs, so a
# fresh clone compiles only the crate itself (about 25 minutes less on 2
# cores; `make test` and `make demo` call this).
#
#   scripts/target-cache.sh restore   # before cargo: seed target/release
#   scripts/target-cache.sh save      # after cargo: keep what a fresh clone needs
#
# The key is a hash of Cargo.lock, the toolchain (`rustc -vV`) and
# Cargo.toml's profiles and features: a changed input is a new key, so it
# always rebuilds. Only the dependencies are kept: every artifact of this
# workspace's own package (its fingerprints name it) is left out, so a
# clone never runs another clone's binaries. Files are hard links when the
# cache and target/ share a filesystem (no extra space), copies otherwise;
# cargo replaces a dependency's files only when that dependency changes,
# which is a new key. With no cache for the key, the most recent other key
# seeds target/ (cargo's fingerprints still decide, per dependency, what to
# recompile). The 3 most recently saved keys are kept.
#
# BOOTIMAGE_TARGET_CACHE (default: target/ under scripts/cache-root.sh's
# root); empty turns this off.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
say() { echo "target-cache: $*" >&2; }
# shellcheck source=scripts/cache-root.sh
. "$top/scripts/cache-root.sh"
base=${BOOTIMAGE_TARGET_CACHE-$(bootimage_cache_root)/target}
[ -n "$base" ] || exit 0
key=$( {
  cat "$top/Cargo.lock"
  rustc -vV
  sed -n '/^\[features\]/,/^\[dependencies\]/p;/^\[profile/,/^$/p' "$top/Cargo.toml"
} | sha256sum | cut -c1-16)
cache=$base/$key
rel=$top/target/release

# cp that links when it can.
link_copy() { cp -al "$@" 2>/dev/null || cp -a "$@"; }

case "${1:-}" in
  restore)
    if [ -d "$rel/.fingerprint" ]; then
      say "target/release exists; nothing restored"
      exit 0
    fi
    from=$cache
    if [ ! -d "$cache/release" ]; then
      # Another key (Cargo.lock or the toolchain changed): cargo's own
      # fingerprints still tell, dependency by dependency, what is fresh,
      # so start from the most recent one and compile what changed.
      # shellcheck disable=SC2012
      from=$(ls -1dt "$base"/*/ 2>/dev/null | head -1)
      from=${from%/}
      if [ -z "$from" ] || [ ! -d "$from/release" ]; then
        say "no cached dependencies for key $key (cold compile)"
        exit 0
      fi
      say "no cache for key $key; starting from $from (cargo recompiles what changed)"
    fi
    mkdir -p "$top/target"
    link_copy "$from/release" "$top/target/"
    say "restored $(du -sh "$from" | cut -f1) of compiled dependencies from $from"
    ;;
  save)
    [ -d "$rel/.fingerprint" ] || { say "nothing compiled yet"; exit 0; }
    if [ -d "$cache/release" ]; then
      touch "$cache"
      exit 0
    fi
    mkdir -p "$base"
    tmp=$(mktemp -d "$base/.save-XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    # This package's fingerprint hashes: every file of its own targets
    # carries one of them in its name.
    pkg=$(sed -n 's/^name = "\(.*\)"/\1/p' "$top/Cargo.toml" | head -1)
    own=$(ls "$rel/.fingerprint" | sed -n "s/^$pkg-\([0-9a-f]*\)$/\1/p" | paste -sd'|')
    [ -n "$own" ] || own=NONE
    mkdir -p "$tmp/release"
    for d in .fingerprint build deps; do
      [ -d "$rel/$d" ] || continue
      mkdir -p "$tmp/release/$d"
      # shellcheck disable=SC2012
      ls -A "$rel/$d" | grep -Ev -- "-($own)(\.|$)|^$pkg-" | while read -r f; do
        link_copy "$rel/$d/$f" "$tmp/release/$d/"
      done
    done
    mv "$tmp" "$cache"
    trap - EXIT
    say "saved the compiled dependencies as $cache ($(du -sh "$cache" | cut -f1))"
    # Keep the 3 most recently used keys.
    # shellcheck disable=SC2012
    ls -1dt "$base"/*/ 2>/dev/null | tail -n +4 | while read -r old; do
      rm -rf "$old" && say "pruned $old"
    done
    ;;
  *)
    echo "usage: $0 restore|save" >&2
    exit 2
    ;;
esac
