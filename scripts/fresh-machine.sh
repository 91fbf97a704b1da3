#!/usr/bin/env bash
# `make demo` on a fresh machine of the kind the README targets (Debian 12,
# root, package registries only, package lists possibly stale), simulated in
# a container so it can be repeated:
#
# - a pristine Debian 12 rootfs: mmdebstrap minbase plus make and git
#   (cached as fresh-machine/rootfs-<hash>.tar under scripts/cache-root.sh's
#   root, keyed by its inputs);
# - its package lists made stale before anything runs: every version they
#   name gets a suffix the mirror does not have, every file name points
#   nowhere and the Release files are gone, so nothing can be installed from
#   them without `apt-get update` first;
# - the repository cloned clean (HEAD, no untracked files) into it;
# - this machine's Rust toolchain (rustup's ~/.rustup, read-only, and the
#   cargo/rustc proxies), as a fresh machine has it, with a CARGO_HOME of
#   its own so nothing cargo installs on the host is seen (coreos-installer
#   is built as install-deps builds it on a fresh machine); crates.io
#   downloads are shared with the host's ~/.cargo/registry;
# - the host's CA bundle, as the machine's own trust store;
# - then `make demo`, as root, with no other step. Its exit status is ours.
#
#   scripts/fresh-machine.sh [--warm TARGET_DIR] [--keep] [--make GOAL]
#
# --warm TARGET_DIR  nothing compiled twice: start from a copy-on-write view
#                    of an existing target/ (an overlay: TARGET_DIR is never
#                    written), and give the machine the coreos-installer this
#                    host's install-deps already built (cargo install), so
#                    only the crate itself compiles again. Without it,
#                    everything compiles as on a fresh machine (about 25 min
#                    more on 2 cores).
# --keep             keep the work dir (its path is printed) for inspection.
# --make GOAL        run `make GOAL` instead of `make demo` (`--make test`:
#                    the whole suite on a fresh machine, for its cold time).
#
# Runs podman --privileged (make demo builds disks with loop devices). The
# host's quirks (README, Troubleshooting): runc, lower rlimits.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
warm=
keep=
goal=demo
while [ $# -gt 0 ]; do
  case "$1" in
    --warm) warm=$(cd "$2" && pwd); shift 2 ;;
    --keep) keep=1; shift ;;
    --make) goal=$2; shift 2 ;;
    *) echo "usage: $0 [--warm TARGET_DIR] [--keep] [--make GOAL]" >&2; exit 2 ;;
  esac
done
say() { echo "fresh-machine: $*" >&2; }
for tool in podman mmdebstrap git; do
  command -v "$tool" >/dev/null || { say "$tool is not installed (run scripts/install-deps.sh)"; exit 1; }
done
RUSTUP_HOME=${RUSTUP_HOME:-$HOME/.rustup}
HOST_CARGO=${CARGO_HOME:-$HOME/.cargo}
[ -d "$RUSTUP_HOME/toolchains" ] || { say "no rustup toolchain in $RUSTUP_HOME: this check mounts the machine's own"; exit 1; }

# shellcheck source=scripts/cache-root.sh
. "$top/scripts/cache-root.sh"
CACHE=$(bootimage_cache_root)/fresh-machine
mkdir -p "$CACHE/apt-archives/partial"
# Its package lists are kept (mmdebstrap removes them by default), to be made stale.
. "$top/scripts/debian-rootfs.sh"
image=$(debian_rootfs_image localhost/bootimage-gen-fresh "$CACHE" \
  --variant=minbase --include=ca-certificates,make,git --skip=cleanup/apt/lists)

work=$(mktemp -d /var/tmp/bootimage-gen-fresh.XXXXXX)
name=bootimage-gen-fresh-$$
cleanup() {
  podman rm -f "$name" >/dev/null 2>&1 || true
  if mountpoint -q "$work/src/target" 2>/dev/null; then umount "$work/src/target" || umount -l "$work/src/target"; fi
  if [ -n "$keep" ]; then say "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

git clone -q "$top" "$work/src"
say "clean clone of $(git -C "$work/src" rev-parse --short HEAD) in $work/src"
if [ -n "$warm" ]; then
  mkdir -p "$work/upper" "$work/ovl" "$work/src/target"
  mount -t overlay overlay -o "lowerdir=$warm,upperdir=$work/upper,workdir=$work/ovl" "$work/src/target"
  say "target/: copy-on-write over $warm"
fi
# A CARGO_HOME of the fresh machine's own: rustup's proxies only.
mkdir -p "$work/cargo/bin" "$work/cargo/registry"
for p in cargo rustc rustup rustdoc; do
  [ -e "$HOST_CARGO/bin/$p" ] && cp -L "$HOST_CARGO/bin/$p" "$work/cargo/bin/"
done
if [ -n "$warm" ] && [ -x "$HOST_CARGO/bin/coreos-installer" ]; then
  cp "$HOST_CARGO/bin/coreos-installer" "$work/cargo/bin/"
  say "coreos-installer: the one this host's install-deps built"
fi

# Inside: make the lists stale, show it, then exactly the README's command.
cat > "$work/run.sh" <<'EOF'
set -euo pipefail
shopt -s nullglob
lists=(/var/lib/apt/lists/*_Packages)
[ ${#lists[@]} -gt 0 ] || { echo "fresh-machine: the rootfs has no package lists" >&2; exit 1; }
# The machine trusts what this host trusts (a site proxy's CA for crates.io
# and PyPI, if any), as a machine of this kind does out of the box.
[ ! -s /run/host-ca.crt ] || cat /run/host-ca.crt > /etc/ssl/certs/ca-certificates.crt
sed -i -e 's/^Version: .*/&~stale1/' -e 's|^Filename: .*|&.gone|' "${lists[@]}"
rm -f /var/lib/apt/lists/*Release /var/lib/apt/lists/*Release.gpg /var/lib/apt/lists/*InRelease
echo "fresh-machine: stale lists: qemu-utils $(apt-cache policy qemu-utils | awk '/Candidate:/ {print $2}')"
cd /src
time make "$1"
EOF
# A copy-on-write target/ must not be hard-linked into the dependency cache
# (each link would copy the file up): no cache then.
cache_env=()
[ -z "$warm" ] || cache_env=(-e BOOTIMAGE_TARGET_CACHE=)
say "podman run $image: make $goal"
podman run --name "$name" --rm --privileged --runtime runc \
  --ulimit nofile=4096:4096 --ulimit nproc=4096:4096 --network host \
  -v "$work/src:/src" -v "$work/run.sh:/run.sh:ro" \
  -v "$RUSTUP_HOME:/root/.rustup:ro" -v "$work/cargo:/root/.cargo" \
  -v "$HOST_CARGO/registry:/root/.cargo/registry" \
  -v "$CACHE/apt-archives:/var/cache/apt/archives" \
  -v /etc/ssl/certs/ca-certificates.crt:/run/host-ca.crt:ro \
  -e PATH=/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  -e RUSTUP_HOME=/root/.rustup -e CARGO_HOME=/root/.cargo -e HOME=/root "${cache_env[@]}" \
  "$image" bash /run.sh "$goal"
