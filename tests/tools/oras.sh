#!/bin/bash
# oras.sh — fetch (or reuse) the real ORAS CLI (oras.land/oras) and print its
# path. Debian 12 has no `oras`; forky (testing) ships it as a Go binary
# (tests/tools/debian-binary.sh fetches and caches it).
# A test tool (tests/system/registry.rs), not one the product or `make demo` uses.
# BOOTIMAGE_ORAS_CACHE, BOOTIMAGE_ORAS_SUITE (default forky) and
# BOOTIMAGE_ORAS_MIRROR override the cache root, suite and mirror.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ -z "${BOOTIMAGE_ORAS_CACHE:-}" ] || export BOOTIMAGE_DEBIAN_BINARY_CACHE=$BOOTIMAGE_ORAS_CACHE
[ -z "${BOOTIMAGE_ORAS_MIRROR:-}" ] || export BOOTIMAGE_DEBIAN_BINARY_MIRROR=$BOOTIMAGE_ORAS_MIRROR
exec "$here/debian-binary.sh" oras "${BOOTIMAGE_ORAS_SUITE:-forky}" oras version
