#!/bin/bash
# cosign.sh [SUITE] — fetch (or reuse) the real cosign CLI
# (github.com/sigstore/cosign) of Debian SUITE and print its path: trixie
# ships cosign 2.5, forky (testing) 3.x, both Go binaries that run on
# Debian 12 (tests/tools/debian-binary.sh fetches and caches them).
# A test judge (tests/system/trust.rs, tests/system/registry.rs), not a tool the product uses.
# BOOTIMAGE_COSIGN_MIRROR overrides the mirror.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ -z "${BOOTIMAGE_COSIGN_MIRROR:-}" ] || export BOOTIMAGE_DEBIAN_BINARY_MIRROR=$BOOTIMAGE_COSIGN_MIRROR
exec "$here/debian-binary.sh" cosign "${1:-forky}" cosign version
