#!/bin/sh
# RUSTC_WRAPPER for `make fuzz`: stable rustc's sanitizer-coverage pass
# (what cargo-fuzz passes, minus the nightly-only sanitizers) on the crates
# whose code parses the input: ours, the fuzz crate, and the parsing crates
# under it. The rest (tokio, the AWS SDK, ostree-ext, ...) is built plainly:
# instrumenting them would only slow the build and every execution.
rustc="$1"; shift
name=""; prev=""
for a in "$@"; do
  [ "$prev" = "--crate-name" ] && name="$a"
  prev="$a"
done
case "$name" in
  bootimage_gen|bootimage_fuzz|fuzz|serde_json|serde_yaml_ng|unsafe_libyaml|tar|flate2|miniz_oxide|xz2|zstd|oci_spec|serde_path_to_error)
    exec "$rustc" "$@" \
      -Cpasses=sancov-module \
      -Cllvm-args=-sanitizer-coverage-level=4 \
      -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
      -Cllvm-args=-sanitizer-coverage-pc-table \
      -Cllvm-args=-sanitizer-coverage-trace-compares \
      -Cdebug-assertions -Coverflow-checks --cfg fuzzing ;;
  *) exec "$rustc" "$@" ;;
esac
