#!/bin/bash
# fixture_smoke.sh — smoke test of the test OS fixture: build the OS tree with
# fixtures/os/build-tree.sh into a temporary directory, then boot it as a live
# PXE system under qemu (TCG) with fixtures/os/smoke-boot.sh, which checks the
# BOOTIMAGE-TEST-OS marker line. Exit code = result (0 = pass).
#
# Usage: tests/fixture_smoke.sh   (env: SMOKE_TIMEOUT=seconds for the boot, default 300)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OS=$HERE/../fixtures/os

TMP=$(mktemp -d "${TMPDIR:-/tmp}/fixture-smoke.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
trap 'exit 130' INT TERM HUP

t0=$(date +%s)
"$OS/build-tree.sh" "$TMP/tree"
t1=$(date +%s)
"$OS/smoke-boot.sh" "$TMP/tree"
t2=$(date +%s)
echo "fixture_smoke.sh: PASS (build $((t1 - t0)) s, boot $((t2 - t1)) s)" >&2
