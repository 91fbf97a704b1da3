#!/usr/bin/env bash
# Install every Debian package and crate bootimage-gen needs, idempotently.
# Safe to run again: it only installs what is missing.
set -euo pipefail

PKGS=(
  # OS import and registry
  ostree libostree-dev skopeo docker-registry apache2-utils openssl
  # disk building
  gdisk fdisk dosfstools mtools xfsprogs e2fsprogs util-linux
  grub-pc-bin grub-efi-amd64-bin grub-common shim-unsigned
  # live ISO / PXE
  xorriso isolinux syslinux-common squashfs-tools cpio genisoimage
  # test OS
  linux-image-amd64 busybox-static zstd xz-utils pigz kmod
  # boot tests
  qemu-system-x86 qemu-utils ovmf seabios ipxe-qemu
  # kvm and nokvm backends: the VM appliance
  supermin
  # validation tools used by tests
  libxml2-utils jq file
  # build deps for the crate
  pkg-config libglib2.0-dev libzstd-dev libssl-dev
  # AWS API mock for tests/generate_aws.rs (moto, from PyPI, in a venv)
  python3-venv python3-pip
)

need=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    need+=("$p")
  fi
done

# qemu-img must come from the same Debian release as qemu-system-x86: if a
# newer (backports) qemu-utils is installed, pin both to the system's release.
qver=$(apt-cache policy qemu-system-x86 2>/dev/null | awk '/Candidate:/ {print $2}')
uver=$(dpkg-query -W -f='${Version}' qemu-utils 2>/dev/null || true)
if [ -n "$qver" ] && [ "$qver" != "(none)" ] && [ -n "$uver" ] && [ "$uver" != "$qver" ]; then
  need+=("qemu-utils=$qver" "qemu-system-x86=$qver")
fi

if [ ${#need[@]} -gt 0 ]; then
  echo "install-deps: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if [ ! -d /var/lib/apt/lists ] || [ -z "$(ls /var/lib/apt/lists 2>/dev/null | grep -v lock | head -1)" ] || [ -n "${INSTALL_DEPS_UPDATE:-}" ]; then
    apt-get update -q
  fi
  if ! apt-get install -y -q --no-install-recommends --allow-downgrades "${need[@]}"; then
    apt-get update -q
    apt-get install -y -q --no-install-recommends --allow-downgrades "${need[@]}"
  fi
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
