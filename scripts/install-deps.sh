#!/usr/bin/env bash
# Install every Debian package and crate bootimage-gen needs, idempotently.
# Safe to run again: it only installs what is missing.
#
#   install-deps.sh            everything: build, run, test (the default)
#   install-deps.sh --runtime  only what the binary runs (the container image)
#   install-deps.sh --build    what compiling it needs, with Debian's Rust
#                              when there is no cargo (the image's build stage)
set -euo pipefail
# A failing step names itself (scripts/step.sh; the image's build copies
# this script alone, without it).
if [ -f "$(dirname "$0")/step.sh" ]; then
  # shellcheck source=scripts/step.sh
  . "$(dirname "$0")/step.sh"
  step_trap install-deps
fi

mode=${1:-all}
case "$mode" in
  all | --runtime | --build) ;;
  *) echo "usage: $0 [--runtime|--build]" >&2; exit 2 ;;
esac

# What the binary runs: also the image's final stage.
RUNTIME_PKGS=(
  # OS import and registry; gpgv checks release signatures (GPG)
  ostree skopeo ca-certificates gpgv
  # disk building
  gdisk fdisk dosfstools mtools xfsprogs e2fsprogs util-linux mount
  grub-pc-bin grub-efi-amd64-bin grub-common
  # live ISO / PXE
  xorriso isolinux syslinux-common squashfs-tools erofs-utils cpio
  # kvm and nokvm backends: the VM, its appliance and the kernel it boots
  qemu-system-x86 qemu-utils supermin linux-image-amd64 kmod
  # s390x disks: the OS's zipl (an s390x program) runs under qemu-s390x-static
  qemu-user-static
)
# What compiling it needs.
BUILD_PKGS=(
  gcc libc6-dev pkg-config libglib2.0-dev libzstd-dev libssl-dev libostree-dev
  # xz2 and flate2 link the system's liblzma and zlib when pkg-config finds
  # them (else they build their own): the same choice on every machine
  liblzma-dev zlib1g-dev
)
# What the tests and the test OS need.
TEST_PKGS=(
  # make fuzz: libfuzzer-sys compiles libFuzzer (C++)
  g++
  # registry; release signatures (gpg makes throwaway keys, skopeo
  # standalone-sign writes atomic signatures)
  docker-registry apache2-utils openssl gnupg
  # live ISO checks
  genisoimage
  # test OS (python3-yaml: fixtures/os/inject-cosa.py reads cosa's YAML)
  busybox-static zstd xz-utils pigz shim-unsigned python3-yaml
  # boot tests (aarch64: qemu-system-arm with AAVMF, the arm64 UEFI;
  # ppc64le: qemu-system-ppc with SLOF; s390x: qemu-system-misc)
  ovmf seabios ipxe-qemu qemu-system-arm qemu-efi-aarch64 qemu-system-ppc qemu-system-misc
  # validation tools used by tests
  libxml2-utils jq file
  # reproducibility: diffoscope compares two runs' artifacts (issue 45)
  diffoscope-minimal
  # AWS API mock for tests/generate_aws.rs (moto, from PyPI, in a venv)
  python3-venv python3-pip
  # the container tier (tests/container.rs): the image is built from a
  # Debian rootfs and run with podman (runc: crun fails on hybrid cgroups)
  podman buildah runc mmdebstrap uidmap fuse-overlayfs slirp4netns
  # tests/vsphere.rs: vSphere's simulator (scripts/vcsim.sh) is compiled
  # from Debian's govmomi source with bookworm's Go; curl for its checks
  golang-go curl
)

case "$mode" in
  all) PKGS=("${RUNTIME_PKGS[@]}" "${BUILD_PKGS[@]}" "${TEST_PKGS[@]}") ;;
  --runtime) PKGS=("${RUNTIME_PKGS[@]}") ;;
  --build)
    PKGS=("${BUILD_PKGS[@]}")
    # Debian 12's own Rust (bookworm's rustc-web is recent enough) when no
    # cargo is installed (rustup's is used when present).
    export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
    command -v cargo >/dev/null 2>&1 || PKGS+=(rustc-web cargo-web)
    ;;
esac

need=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    need+=("$p")
  fi
done

# Refresh the package lists before reading any version from them: lists may
# be stale (a version they name may be gone from the mirror) or absent.
# Done once, only when something must be installed.
export DEBIAN_FRONTEND=noninteractive
updated=
# A mirror caught mid-sync fails one index (say bookworm-security's ppc64el
# Packages) while the rest update: apt keeps the lists it has for that one
# and exits 100. That must not stop the set-up; a package that is really
# missing then fails apt-get install with apt's own message.
refresh() {
  [ -n "$updated" ] && return
  apt-get update -q || echo "install-deps: apt-get update reported errors (above); going on with the lists it fetched" >&2
  updated=1
}

# (The test OS of other arches is made of that arch's Debian packages,
# fetched with a private apt state: fixtures/os/foreign-apt.sh. The host's
# architectures and lists are left alone.)

# qemu-img must come from the same Debian release as qemu-system-x86: if a
# newer (backports) qemu-utils is installed, pin both to the system's
# release. The candidate is read after the refresh, so it exists.
uver=$(dpkg-query -W -f='${Version}' qemu-utils 2>/dev/null || true)
sver=$(dpkg-query -W -f='${db:Status-Abbrev} ${Version}' qemu-system-x86 2>/dev/null | awk '$1 == "ii" {print $2}' || true)
if [ ${#need[@]} -gt 0 ] || { [ -n "$uver" ] && [ "$uver" != "$sver" ]; }; then
  refresh
  qver=$(apt-cache policy qemu-system-x86 2>/dev/null | awk '/Candidate:/ {print $2}')
  if [ -n "$qver" ] && [ "$qver" != "(none)" ] && [ -n "$uver" ] && [ "$uver" != "$qver" ]; then
    need+=("qemu-utils=$qver" "qemu-system-x86=$qver")
  fi
fi

if [ ${#need[@]} -gt 0 ]; then
  echo "install-deps: installing ${need[*]}"
  apt-get install -y -q --no-install-recommends --allow-downgrades "${need[@]}"
fi

# The mkfs that makes the root and boot filesystems reproducibly from a
# tree (xfsprogs 6.19+, e2fsprogs 1.47.3+; Debian 12 has 6.1 and 1.47.0):
# scripts/mkfs-root.sh carries Debian forky's with their own loader, into
# its cache (BOOTIMAGE_MKFS_ROOT_DIR: elsewhere; the tool's image puts
# them in /usr/lib/bootimage-gen/mkfs-root, where the tool looks).
if [ "$mode" != --build ]; then
  here=$(cd "$(dirname "$0")" && pwd)
  mkfs=$(bash "$here/mkfs-root.sh" ${BOOTIMAGE_MKFS_ROOT_DIR:+"$BOOTIMAGE_MKFS_ROOT_DIR"})
  echo "install-deps: mkfs tools in $mkfs ($(tr '\n' ' ' < "$mkfs/VERSIONS" | grep -o 'xfsprogs [^ ]*\|e2fsprogs [^ ]*' | tr '\n' ' '))"
fi

if [ "$mode" != all ]; then
  echo "install-deps: ok ($mode)"
  exit 0
fi

# coreos-installer: the tests check the live ISO and PXE files with the real
# one (iso ignition|kargs, iso extract pxe, pxe customize).
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
if ! command -v coreos-installer >/dev/null 2>&1; then
  if ! command -v cargo >/dev/null 2>&1; then
    echo "install-deps: cargo is needed to install coreos-installer; install Rust (https://rustup.rs) and run again" >&2
    exit 1
  fi
  echo "install-deps: cargo install --locked coreos-installer"
  cargo install --locked coreos-installer
fi

# moto in server mode: an AWS API we did not write (EC2, EBS direct API)
# for tests/generate_aws.rs, in its own venv, installed only if missing.
MOTO_VENV=/opt/bootimage-gen/moto
MOTO_REQ='moto[server]==5.2.5'
if ! "$MOTO_VENV/bin/python" -c 'import moto.server, boto3' 2>/dev/null; then
  echo "install-deps: installing $MOTO_REQ into $MOTO_VENV"
  mkdir -p "$(dirname "$MOTO_VENV")"
  python3 -m venv "$MOTO_VENV"
  "$MOTO_VENV/bin/pip" install -q --disable-pip-version-check "$MOTO_REQ"
fi

echo "install-deps: ok"
