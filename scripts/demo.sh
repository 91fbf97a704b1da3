#!/usr/bin/env bash
# The main job on the bundled test OS release: build the fixture release
# (cached), then resolve it, import its OS and show what it holds.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
bin=$top/target/release/bootimage-gen
fx=$(FIXTURE_TOOL=$top/target/release/bootimage-fixture bash "$top/fixtures/build.sh")
release="oci:$fx/oci:release"
echo "== bootimage-gen platforms"
"$bin" platforms
echo
echo "== bootimage-gen inspect $release --import"
"$bin" inspect "$release" --import
