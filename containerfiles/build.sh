#!/usr/bin/env bash
# Build bootimage-gen's container image (containerfiles/Containerfile) and
# print its name on stdout (progress goes to stderr).
#
#   containerfiles/build.sh            the binary from target/release (CI: the
#                                      one `cargo build --release` just made)
#   containerfiles/build.sh --release  compile it inside the image's build stage
#
# Cached at two levels, so a rebuild with nothing changed takes seconds:
# - the base: a minimal Debian 12 rootfs from mmdebstrap, imported as
#   localhost/bootimage-gen-base:<hash of the mmdebstrap inputs> (its tarball
#   is kept in container/ under scripts/cache-root.sh's root);
# - the image: tagged localhost/bootimage-gen:<hash of the Containerfile, the
#   install script, the base and the binary (or the sources)>, and :latest.
#   Within a build, podman's layer cache keeps the runtime stage (the apt
#   installs) while only the binary changes.
#
# Environment: BOOTIMAGE_GEN_IMAGE (default localhost/bootimage-gen),
# BOOTIMAGE_GEN_DEBIAN_MIRROR (default http://deb.debian.org/debian).
set -euo pipefail
cd "$(dirname "$0")/.."

target=prebuilt
case "${1:-}" in
  "") ;;
  --release) target=release ;;
  *) echo "usage: $0 [--release]" >&2; exit 2 ;;
esac

IMAGE=${BOOTIMAGE_GEN_IMAGE:-localhost/bootimage-gen}
# shellcheck source=scripts/cache-root.sh
. scripts/cache-root.sh
CACHE=$(bootimage_cache_root)/container
# This host's quirks (see docs/troubleshooting.md): crun fails on hybrid
# cgroups, podman's default rlimits exceed the sandbox's.
PODMAN_BUILD_FLAGS=(--runtime runc --ulimit nofile=4096:4096 --ulimit nproc=4096:4096 --network host)
say() { echo "image: $*" >&2; }
hash() { sha256sum | cut -c1-16; }
t0=$(date +%s)
mkdir -p "$CACHE"

for tool in podman mmdebstrap; do
  command -v "$tool" >/dev/null || { say "$tool is not installed (run scripts/install-deps.sh)"; exit 1; }
done

# The base rootfs (scripts/debian-rootfs.sh: keyed by what mmdebstrap is
# given, not by date).
. scripts/debian-rootfs.sh
base=$(debian_rootfs_image localhost/bootimage-gen-base "$CACHE" --variant=minbase --include=ca-certificates)

# The build context: only what the Containerfile copies.
ctx=$CACHE/ctx-$target
rm -rf "$ctx"
mkdir -p "$ctx/scripts" "$ctx/fixtures/os"
mkfs_scripts=(scripts/install-deps.sh scripts/mkfs-root.sh scripts/cache-root.sh scripts/keyed-dir.sh fixtures/os/foreign-apt.sh)
cp scripts/install-deps.sh scripts/mkfs-root.sh scripts/cache-root.sh scripts/keyed-dir.sh "$ctx/scripts/"
cp fixtures/os/foreign-apt.sh "$ctx/fixtures/os/"
if [ "$target" = prebuilt ]; then
  bin=target/release/bootimage-gen
  [ -x "$bin" ] || { say "$bin is missing: run cargo build --release first (make build)"; exit 1; }
  mkdir -p "$ctx/target/release"
  cp -l "$bin" "$ctx/target/release/" 2>/dev/null || cp "$bin" "$ctx/target/release/"
  input=$(sha256sum "$bin")
else
  # The sources as git sees them (tracked and untracked, not ignored).
  git ls-files -z --cached --others --exclude-standard | tar --null -T - -c | tar -x -C "$ctx"
  input=$(cd "$ctx" && find . -type f -print0 | sort -z | xargs -0 sha256sum)
fi
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
# The host's apt checks Release files' Valid-Until, or not (a snapshot
# mirror): the image's build does as the host does (the Containerfile's
# APT_CHECK_VALID_UNTIL).
valid_until=true
# (grep reads it all: with -q it would stop at the first match, apt-config
# would die of SIGPIPE, and pipefail would make the match a miss.)
if apt-config dump 2>/dev/null | grep -i '^Acquire::Check-Valid-Until "false"' >/dev/null; then
  valid_until=false
fi
key=$({ cat containerfiles/Containerfile "${mkfs_scripts[@]}"; echo "$base $target $valid_until"; echo "$input"; } | hash)
tag=$IMAGE:$key

# Compiling fetches crates: trust what this host trusts (a site proxy's CA).
if [ "$target" = release ] && [ -s /etc/ssl/certs/ca-certificates.crt ]; then
  PODMAN_BUILD_FLAGS+=(-v /etc/ssl/certs/ca-certificates.crt:/run/host-ca.crt:ro)
fi

if podman image exists "$tag"; then
  say "cached $tag"
else
  say "podman build --target $target -> $tag"
  podman build "${PODMAN_BUILD_FLAGS[@]}" --layers \
    -f containerfiles/Containerfile --target "$target" \
    --build-arg "BASE=$base" --build-arg "BOOTIMAGE_GEN_GIT_COMMIT=$commit" \
    --build-arg "APT_CHECK_VALID_UNTIL=$valid_until" \
    -t "$tag" "$ctx" >&2
  # Earlier tags of ours go (their layers stay in podman's cache until
  # `podman image prune`).
  for old in $(podman images --format '{{.Repository}}:{{.Tag}}' "$IMAGE"); do
    case "$old" in "$tag" | "$IMAGE:latest" | *"<none>"*) ;; *) podman untag "$(podman image inspect --format '{{.Id}}' "$old")" "$old" 2>/dev/null || true ;; esac
  done
fi
podman tag "$tag" "$IMAGE:latest"
rm -rf "$ctx"
size=$(podman image inspect --format '{{.Size}}' "$tag")
say "$tag: $((size / 1000000)) MB, $(( $(date +%s) - t0 )) s"
echo "$tag"
