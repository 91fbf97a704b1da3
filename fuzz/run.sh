#!/bin/bash
# Run the libFuzzer targets (docs/fuzzing.md). Builds fuzz/target/release/fuzz
# with stable rustc (rustc-sancov.sh adds the coverage pass), then runs each
# target for SECONDS seconds on a scratch copy of its committed corpus under
# the limits: -timeout=10 (a hang over 10 s per input is a crash),
# -rss_limit_mb=2048 and, inside the binary, 1 GiB of live heap (src/cap.rs).
# Crashes go to fuzz/artifacts/<target>/; one line per target is appended to
# fuzz/target/results.tsv: target, seconds, executions, crashes.
# Usage: fuzz/run.sh [-j LANES] SECONDS [TARGET...]   (default: every target)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
lanes=1
if [ "${1:-}" = -j ]; then lanes=$2; shift 2; fi
secs=${1:?usage: fuzz/run.sh [-j LANES] SECONDS [TARGET...]}; shift
cd "$here"
# FUZZ_NO_BUILD=1: use the binary already built.
[ -n "${FUZZ_NO_BUILD:-}" ] || RUSTC_WRAPPER=$here/rustc-sancov.sh cargo build --release --bin fuzz --quiet
bin=$here/target/release/fuzz
if [ $# -eq 0 ]; then set -- $(ls corpus); fi
mkdir -p target/work artifacts
export TMPDIR=${FUZZ_TMPDIR:-/dev/shm}

one() {
  local t=$1 work=target/work/$1 log=target/work/$1.log
  mkdir -p "$work" "artifacts/$t"
  cp -n corpus/"$t"/* "$work"/ 2>/dev/null || true
  local start=$SECONDS rc=0
  BOOTIMAGE_FUZZ_TARGET=$t "$bin" -max_total_time="$secs" -timeout=10 \
    -rss_limit_mb=2048 -malloc_limit_mb=1024 -max_len=262144 -print_final_stats=1 \
    -artifact_prefix="artifacts/$t/" "$work" corpus/"$t" > "$log" 2>&1 || rc=$?
  local took=$((SECONDS - start))
  local execs
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  [ -n "$execs" ] || execs=$(grep -o '^#[0-9]*' "$log" | tr -d '#' | tail -1)
  local crashes
  crashes=$(ls "artifacts/$t" | wc -l)
  printf '%s\t%s\t%s\t%s\t%s\n' "$t" "$took" "${execs:-0}" "$crashes" "rc=$rc" | tee -a target/results.tsv
}

pids=()
for t in "$@"; do
  one "$t" &
  pids+=($!)
  if [ ${#pids[@]} -ge "$lanes" ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
done
wait
