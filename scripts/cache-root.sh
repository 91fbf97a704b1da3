# shellcheck shell=bash
# Where caches that outlive a clone live (fixtures, the tool's image
# inputs, the fresh-machine rootfs, compiled dependencies): each entry is
# keyed by a hash of its inputs, so a fresh clone of the same inputs reuses
# it and a changed input rebuilds. BOOTIMAGE_CACHE overrides;
# default /var/cache/bootimage-gen as root, else ~/.cache/bootimage-gen.
bootimage_cache_root() {
  if [ -n "${BOOTIMAGE_CACHE:-}" ]; then
    echo "$BOOTIMAGE_CACHE"
  elif [ "$(id -u)" = 0 ]; then
    echo /var/cache/bootimage-gen
  else
    echo "${XDG_CACHE_HOME:-$HOME/.cache}/bootimage-gen"
  fi
}
