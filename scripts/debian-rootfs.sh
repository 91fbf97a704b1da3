# Sourced by containerfiles/build.sh and scripts/fresh-machine.sh.
#
# debian_rootfs_image REPO CACHE_DIR MMDEBSTRAP_OPTION...
#   A Debian 12 rootfs made by mmdebstrap with MMDEBSTRAP_OPTIONs (plus
#   --format=tar, the suite and the mirror's sources), imported into podman
#   as REPO:<hash of those inputs> and printed. Cached twice: the image
#   (reused until the inputs change or it is removed, not by date) and its
#   tarball in CACHE_DIR; older tarballs and older images of REPO go.
#   BOOTIMAGE_GEN_DEBIAN_MIRROR (default http://deb.debian.org/debian).
debian_rootfs_image() {
  local repo=$1 cache=$2
  shift 2
  local mirror=${BOOTIMAGE_GEN_DEBIAN_MIRROR:-http://deb.debian.org/debian}
  local security=${mirror%/debian}/debian-security
  local args=("$@" --format=tar bookworm)
  local sources=("deb $mirror bookworm main" "deb $mirror bookworm-updates main" "deb $security bookworm-security main")
  local key image tar old
  key=$(printf '%s\n' "${args[@]}" "${sources[@]}" | sha256sum | cut -c1-16)
  image=$repo:$key
  if ! podman image exists "$image"; then
    mkdir -p "$cache"
    tar=$cache/rootfs-$key.tar
    if [ ! -s "$tar" ]; then
      echo "rootfs: mmdebstrap ${args[*]} -> $tar" >&2
      mmdebstrap -q "${args[@]}" "$tar.tmp" "${sources[@]}" >&2
      mv "$tar.tmp" "$tar"
      find "$cache" -maxdepth 1 -name 'rootfs-*.tar' ! -name "rootfs-$key.tar" -delete
    fi
    echo "rootfs: podman import $tar" >&2
    podman import -q "$tar" "$image" >/dev/null
    for old in $(podman images --format '{{.Repository}}:{{.Tag}}' "$repo"); do
      [ "$old" = "$image" ] || podman rmi "$old" >/dev/null 2>&1 || true
    done
  fi
  echo "$image"
}
