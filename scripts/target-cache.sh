#!/usr/bin/env bash
# Compiled dependencies kept outside the clone, keyed by their inputs, so a
# fresh clone compiles only the crate itself (about 25 minutes less on 2
# cores; `make test` and `make demo` call this).
#
#   scripts/target-cache.sh restore   # before cargo: seed target/release
#   scripts/target-cache.sh save      # after cargo: keep what a fresh clone needs
#
# The key is a hash of Cargo.lock, the toolchain (`rustc -vV`),
# Cargo.toml's profiles and features, and the clone's path (below): a
# changed input is a new key, so it always rebuilds. Only the dependencies
# are kept: every artifact of this workspace's own package (its
# fingerprints name it) is left out, so a clone never runs another clone's
# binaries. A save adds what the key's cache lacks: the same Cargo.lock
# built with other features (the binaries alone, then the tests with their
# dev-dependencies) gives dependency builds of other hashes. With no cache
# for the key, the most recent other key seeds target/ (cargo's
# fingerprints still decide, per dependency, what to recompile). The 3
# most recently saved keys are kept.
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
# The clone's path is part of the key: build scripts see their OUT_DIR, an
# absolute path under target/, and some rerun when it changes (ring's says
# `rerun-if-env-changed=OUT_DIR`), which recompiles them and everything
# above them (rustls, the AWS SDK: minutes). A clone at the same path (CI's
# checkout) reuses all of it; a clone elsewhere starts from the most
# recent key and cargo recompiles just those.
key=$( {
  cat "$top/Cargo.lock"
  rustc -vV
  sed -n '/^\[features\]/,/^\[dependencies\]/p;/^\[profile/,/^$/p' "$top/Cargo.toml"
  echo "$top/target"
} | sha256sum | cut -c1-16)
cache=$base/$key
rel=$top/target/release

# Copies, never hard links: cargo rewrites some files in place (a build
# script's output and invoked.timestamp when it reruns), and through a
# link that would change the cache, and every clone restored from it,
# under their feet (their fingerprints then see a newer dependency and
# recompile it).
copy() { cp -a --reflink=auto "$@"; }

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
    copy "$from/release" "$top/target/"
    say "restored $(du -sh "$from" | cut -f1) of compiled dependencies from $from"
    ;;
  save)
    [ -d "$rel/.fingerprint" ] || { say "nothing compiled yet"; exit 0; }
    mkdir -p "$base"
    tmp=$(mktemp -d "$base/.save-XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    # The workspace's packages (the tool and crates/*) and their
    # fingerprint hashes: every file of their own targets carries one of
    # them in its name.
    pkg=$(for t in "$top/Cargo.toml" "$top"/crates/*/Cargo.toml; do
            [ -f "$t" ] && sed -n 's/^name = "\(.*\)"/\1/p' "$t" | head -1
          done | sed 's/-/[-_]/g' | paste -sd'|')
    pkg="($pkg)"
    own=$(ls "$rel/.fingerprint" | sed -En "s/^$pkg-([0-9a-f]*)$/\2/p" | paste -sd'|')
    [ -n "$own" ] || own=NONE
    # Only what the cache lacks: the same key compiled with other features
    # (`make build`'s binaries, then the suite's tests with their
    # dev-dependencies) leaves dependency builds of other hashes, and each
    # is added; a file already there is the same build (its name holds
    # its hash).
    mkdir -p "$tmp/release"
    added=0
    for d in deps build .fingerprint; do
      [ -d "$rel/$d" ] || continue
      mkdir -p "$tmp/release/$d"
      # shellcheck disable=SC2012
      ls -A "$rel/$d" | grep -Ev -- "-($own)(\.|$)|^(lib)?$pkg-" | while read -r f; do
        [ -e "$cache/release/$d/$f" ] || copy "$rel/$d/$f" "$tmp/release/$d/"
      done
      added=$((added + $(ls -A "$tmp/release/$d" | wc -l)))
    done
    if [ ! -d "$cache/release" ]; then
      mv "$tmp" "$cache"
      trap - EXIT
      say "saved the compiled dependencies as $cache ($(du -sh "$cache" | cut -f1))"
    elif [ "$added" -gt 0 ]; then
      # Into the existing key, entry by entry with rename (a reader never
      # sees half an entry); fingerprints last, so a fingerprint is never
      # there before its artifacts.
      for d in deps build .fingerprint; do
        [ -d "$tmp/release/$d" ] || continue
        mkdir -p "$cache/release/$d"
        ls -A "$tmp/release/$d" | while read -r f; do
          mv -T "$tmp/release/$d/$f" "$cache/release/$d/$f" 2>/dev/null || true
        done
      done
      touch "$cache"
      say "added $added entries of compiled dependencies to $cache ($(du -sh "$cache" | cut -f1))"
    else
      touch "$cache"
    fi
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
