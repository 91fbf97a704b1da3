# shellcheck shell=bash
# A directory cache keyed by a hash of its inputs (the fixtures'): each
# entry is BASE/KEY, whole once its MARKER file is in it. Sourced by
# fixtures/build.sh; tests/cache_scripts.rs runs it against the roots a
# machine can have.
#
#   keyed_dir_get NAME BASE KEY MARKER     # 0 and KEYED_OUT set if whole
#   keyed_dir_begin NAME BASE KEY MARKER   # lock; KEYED_READY=1 if another
#                                          # run built it meanwhile, else
#                                          # KEYED_WORK is a new build dir
#   ... build into "$KEYED_WORK" (MARKER last) ...
#   keyed_dir_commit NAME BASE DAYS        # rename into place; prune
#
# What it does with the root it finds:
#   missing or empty         makes it; says "cold" in one line
#   another key's entries    left alone; pruned when unused for DAYS days
#   BASE/KEY without MARKER  a build cut short (or a foreign directory):
#                            said, built again, replaced
#   .build-KEY-* leftovers   of builds killed before their trap: removed
#                            (under the key's lock, so none is running)
#   two runs at once         one builds, the other waits on BASE/.lock-KEY
#                            and takes its result; a reader never sees an
#                            entry swapped under it
# Functions, not a subshell: the lock is the caller's fd 9 and lives as
# long as the caller.

keyed_dir_get() { # NAME BASE KEY MARKER
  KEYED_OUT=$2/$3
  [ -f "$KEYED_OUT/$4" ] || return 1
  touch "$KEYED_OUT/.used"
  echo "$1: cached $KEYED_OUT" >&2
}

keyed_dir_begin() { # NAME BASE KEY MARKER
  local name=$1 base=$2 key=$3 marker=$4
  KEYED_OUT=$base/$key
  KEYED_READY=
  KEYED_WORK=
  mkdir -p "$base"
  exec 9>"$base/.lock-$key"
  if ! flock -n 9; then
    echo "$name: waiting for another build of $KEYED_OUT" >&2
    flock 9
  fi
  if [ -f "$KEYED_OUT/$marker" ]; then
    touch "$KEYED_OUT/.used"
    echo "$name: built meanwhile $KEYED_OUT" >&2
    KEYED_READY=1
    return 0
  fi
  find "$base" -mindepth 1 -maxdepth 1 -name ".build-$key-*" -exec rm -rf {} +
  if [ -e "$KEYED_OUT" ]; then
    echo "$name: $KEYED_OUT has no $marker (a build cut short, or a foreign directory): building it again" >&2
  fi
  KEYED_WORK=$(mktemp -d "$base/.build-$key-XXXXXX")
  echo "$name: cold: nothing cached for these inputs (key $key) under $base; building in $KEYED_WORK" >&2
}

keyed_dir_commit() { # NAME BASE DAYS
  local name=$1 base=$2 days=$3 old
  rm -rf "$KEYED_OUT"
  mv -T "$KEYED_WORK" "$KEYED_OUT"
  touch "$KEYED_OUT/.used"
  # Entries of other inputs unused for DAYS days go (a fixture is about
  # 1.7 GB); dot-names (locks, builds in progress) are not entries.
  while read -r old; do
    [ "$old" = "$KEYED_OUT" ] && continue
    if [ -z "$(find "$old/.used" -mtime "-$days" 2>/dev/null)" ] && [ -z "$(find "$old" -maxdepth 0 -mtime "-$days")" ]; then
      rm -rf "$old" && echo "$name: pruned $old (unused for $days days)" >&2
    fi
  done < <(find "$base" -mindepth 1 -maxdepth 1 -type d ! -name '.*')
}
