#!/usr/bin/env bash
# Compiled dependencies kept outside the clone, keyed by their inputs, so a
# fresh clone compiles only the workspace's own crates (`make demo`, `make
# test` and the targets that build call this).
#
#   scripts/target-cache.sh restore   # before cargo: seed target/release
#   scripts/target-cache.sh save      # after cargo: keep what a fresh clone needs
#
# The key is a hash of Cargo.lock, the toolchain (`rustc -vV`),
# Cargo.toml's profiles and features, and the clone's path (below): a
# changed input is a new key, so it always rebuilds. Only the dependencies
# are kept: every artifact of this workspace's own packages (their
# fingerprints name them) is left out, so a clone never runs another
# clone's binaries.
#
# An entry is <root>/<key>/release/{deps,build,.fingerprint} plus
# <key>/MANIFEST, the size and path of every file. A save builds a new
# entry in <root>/.save-* and renames it into place whole; a save that adds
# to an existing entry marks it <key>/ADDING until its new MANIFEST is in:
# an entry so marked is half-written (the save was cut short) and is never
# restored. (An entry without a MANIFEST comes from the older script,
# which also renamed entries into place whole: restored unchecked.)
# Restore copies into target/.restore-* and checks every file against the
# MANIFEST before it renames the copy to target/release, so a cut-short
# restore leaves no half of target/release behind. Saves take the root's
# lock exclusively, restores shared: two runs at once wait for each other
# rather than read a half-pruned entry.
#
# What restore does with the cache root it finds:
#   missing or empty         says "cold compile" in one line, restores nothing
#   no entry for this key    starts from the most recent entry of another
#                            key (cargo's fingerprints still decide, per
#                            dependency, what to recompile)
#   half-written or corrupt  skips it, saying so, and tries the next
#                            (corrupt: a file's size differs from MANIFEST)
#   anything else there      (files, foreign directories) is left alone
# The 3 most recently saved keys are kept; leftovers of cut-short saves go.
#
# BOOTIMAGE_TARGET_CACHE (default: target/ under scripts/cache-root.sh's
# root); empty turns this off.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cmd=${1:-}
# shellcheck source=scripts/step.sh
. "$top/scripts/step.sh"
step_trap "target-cache $cmd"
say() { echo "target-cache: $*" >&2; }
case "$cmd" in
  restore | save) ;;
  *) echo "usage: $0 restore|save" >&2; exit 2 ;;
esac
# shellcheck source=scripts/cache-root.sh
. "$top/scripts/cache-root.sh"
base=${BOOTIMAGE_TARGET_CACHE-$(bootimage_cache_root)/target}
if [ -z "$base" ]; then
  say "turned off (BOOTIMAGE_TARGET_CACHE is empty)"
  exit 0
fi
command -v rustc >/dev/null || {
  say "rustc not found: install Rust (scripts/install-deps.sh says how), then run again"
  exit 1
}
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
# The temporary directories an EXIT trap removes (globals: the trap runs
# after the function that made them returned).
stage=
tmp=

# Copies, never hard links: cargo rewrites some files in place (a build
# script's output and invoked.timestamp when it reruns), and through a
# link that would change the cache, and every clone restored from it,
# under their feet.
copy() { cp -a --reflink=auto "$@"; }
# Every file's size and path under DIR/release, sorted: an entry's
# MANIFEST, and what a copy of it is checked against.
manifest_of() { (cd "$1" && find release -type f -printf '%s %p\n' | LC_ALL=C sort); }
# The root's lock: restore shared, save exclusive.
lock() { # shared|exclusive
  exec 9>>"$base/.lock"
  if ! flock -n "--$1" 9; then
    say "waiting for another run's $([ "$1" = shared ] && echo save || echo restore or save) under $base"
    flock "--$1" 9
  fi
}
# Entries, the most recently saved first: key directories holding a
# release/ (.save-*, .lock and anything foreign are not entries).
entries() {
  find "$base" -mindepth 1 -maxdepth 1 -type d ! -name '.*' -printf '%T@ %p\n' 2>/dev/null |
    LC_ALL=C sort -rn | cut -d' ' -f2- | while read -r e; do
      [ ! -d "$e/release" ] || echo "$e"
    done
}

restore() {
  if [ -d "$rel/.fingerprint" ]; then
    say "target/release exists; nothing restored (cargo's fingerprints decide what is fresh)"
    return 0
  fi
  if [ ! -d "$base" ] || [ -z "$(ls -A "$base" 2>/dev/null)" ]; then
    say "cold compile: no dependency cache yet at $base (the first run on this machine; the next one restores from it)"
    return 0
  fi
  lock shared
  local from tried=0 candidates
  # This key's entry first, then every other one, newest first.
  mapfile -t candidates < <(echo "$cache"; entries | grep -vxF "$cache" || true)
  for from in "${candidates[@]}"; do
    [ -d "$from" ] || continue
    tried=$((tried + 1))
    if [ -e "$from/ADDING" ]; then
      say "skipping $from: half-written (a save was cut short); the next save replaces it"
      continue
    fi
    if [ ! -d "$from/release/.fingerprint" ]; then
      say "skipping $from: no release/.fingerprint in it (not an entry of this script)"
      continue
    fi
    mkdir -p "$top/target"
    stage=$(mktemp -d "$top/target/.restore-XXXXXX")
    trap 'rm -rf "$stage"' EXIT
    copy "$from/release" "$stage/"
    if [ ! -f "$from/MANIFEST" ]; then
      # Saved by the target-cache.sh before MANIFESTs, which renamed whole
      # entries into place: taken as it is, and given a MANIFEST by the
      # next save.
      say "$from has no MANIFEST (an older script saved it): restoring it unchecked"
    elif ! diff -q <(manifest_of "$stage") "$from/MANIFEST" >/dev/null; then
      say "skipping $from: its files differ from its MANIFEST (a corrupt entry, or the copy into $top/target was cut short)"
      rm -rf "$stage"
      continue
    fi
    if [ -e "$rel" ]; then
      # A target/release without fingerprints (a clean cut short, or
      # another restore of this clone that won the race): add the
      # artifacts, fingerprints last.
      for d in deps build .fingerprint; do
        [ -d "$stage/release/$d" ] || continue
        mkdir -p "$rel/$d"
        copy -n "$stage/release/$d/." "$rel/$d/"
      done
    else
      mv -T "$stage/release" "$rel"
    fi
    rm -rf "$stage"
    trap - EXIT
    if [ "$from" = "$cache" ]; then
      say "restored $(du -sh "$from" | cut -f1) of compiled dependencies from $from"
    else
      say "no entry for key $key; restored the most recent other one, $from (cargo recompiles what changed)"
    fi
    return 0
  done
  if [ "$tried" = 0 ]; then
    say "cold compile: no dependency cache yet under $base (nothing there is an entry)"
  else
    say "cold compile: none of the $tried entries under $base could be restored (above)"
  fi
}

save() {
  [ -d "$rel/.fingerprint" ] || { say "nothing compiled yet; nothing saved"; return 0; }
  mkdir -p "$base"
  lock exclusive
  # Leftovers of saves cut short: no save runs now but this one.
  find "$base" -mindepth 1 -maxdepth 1 -name '.save-*' -exec rm -rf {} +
  if [ -d "$cache" ] && { [ -e "$cache/ADDING" ] || [ ! -d "$cache/release/.fingerprint" ]; }; then
    say "replacing the half-written entry $cache"
    rm -rf "$cache"
  elif [ -f "$cache/MANIFEST" ] && ! diff -q <(manifest_of "$cache") "$cache/MANIFEST" >/dev/null; then
    # Restore skips it: left as it is, every run would compile cold.
    say "replacing the corrupt entry $cache (its files differ from its MANIFEST)"
    rm -rf "$cache"
  fi
  local pkg own added=0 d f
  tmp=$(mktemp -d "$base/.save-XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  # The workspace's packages (the tool and crates/*) and their fingerprint
  # hashes: every file of their own targets carries one of them in its name.
  pkg=$(for t in "$top/Cargo.toml" "$top"/crates/*/Cargo.toml; do
          if [ -f "$t" ]; then sed -n 's/^name = "\(.*\)"/\1/p' "$t" | head -1; fi
        done | sed 's/-/[-_]/g' | paste -sd'|')
  pkg="($pkg)"
  own=$(find "$rel/.fingerprint" -mindepth 1 -maxdepth 1 -printf '%f\n' |
          sed -En "s/^$pkg-([0-9a-f]*)$/\2/p" | paste -sd'|')
  [ -n "$own" ] || own=NONE
  # Only what the entry lacks: the same key compiled with other features
  # (`make build`'s binaries, then the suite's tests with their
  # dev-dependencies) leaves dependency builds of other hashes, and each
  # is added; a file already there is the same build (its name holds its
  # hash).
  for d in deps build .fingerprint; do
    [ -d "$rel/$d" ] || continue
    mkdir -p "$tmp/release/$d"
    while read -r f; do
      [ -e "$cache/release/$d/$f" ] || { copy "$rel/$d/$f" "$tmp/release/$d/"; added=$((added + 1)); }
    done < <(find "$rel/$d" -mindepth 1 -maxdepth 1 -printf '%f\n' | grep -Ev -- "-($own)(\.|$)|^(lib)?$pkg-" || true)
  done
  if [ ! -d "$cache" ]; then
    manifest_of "$tmp" > "$tmp/MANIFEST"
    mv -T "$tmp" "$cache"
    trap - EXIT
    say "saved the compiled dependencies as $cache ($(du -sh "$cache" | cut -f1))"
  elif [ "$added" -gt 0 ]; then
    # Into the existing entry, marked ADDING until its MANIFEST is new;
    # fingerprints last, so a fingerprint is never there before its
    # artifacts.
    : > "$cache/ADDING"
    for d in deps build .fingerprint; do
      [ -d "$tmp/release/$d" ] || continue
      mkdir -p "$cache/release/$d"
      find "$tmp/release/$d" -mindepth 1 -maxdepth 1 -exec mv -t "$cache/release/$d/" {} +
    done
    manifest_of "$cache" > "$cache/MANIFEST.new"
    mv "$cache/MANIFEST.new" "$cache/MANIFEST"
    rm -f "$cache/ADDING"
    touch "$cache"
    say "added $added files of compiled dependencies to $cache ($(du -sh "$cache" | cut -f1))"
  else
    if [ ! -f "$cache/MANIFEST" ]; then
      manifest_of "$cache" > "$cache/MANIFEST.new"
      mv "$cache/MANIFEST.new" "$cache/MANIFEST"
    fi
    touch "$cache"
    say "$cache already holds every compiled dependency; nothing added"
  fi
  rm -rf "$tmp"
  trap - EXIT
  # Keep the 3 most recently saved keys; half-written entries of other
  # keys go too (nothing restores them).
  local old
  entries | tail -n +4 | while read -r old; do
    rm -rf "$old" && say "pruned $old"
  done
  find "$base" -mindepth 2 -maxdepth 2 -name ADDING -printf '%h\n' | while read -r old; do
    rm -rf "$old" && say "pruned the half-written entry $old"
  done
}

"$cmd"
