#!/usr/bin/env bash
# The main job on the bundled test OS release: build the fixture release
# (cached), then generate every platform's bootimage from it into
# ./bootimages, and show what was written.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/step.sh
. "$top/scripts/step.sh"
step_trap demo
bin=$top/target/release/bootimage-gen
fx=$(FIXTURE_TOOL=$top/target/release/bootimage-fixture bash "$top/fixtures/build.sh" --demo)
release="oci:$fx/oci:release"
out=${DEMO_OUT:-$top/bootimages}
echo "== bootimage-gen inspect $release --import"
"$bin" inspect "$release" --import
echo
echo "== bootimage-gen generate $release all -o $out"
rm -rf "$out"
"$bin" generate "$release" all -o "$out"
echo
echo "== $out"
ls -l "$out"
(cd "$out" && sha256sum -c SHA256SUMS)
