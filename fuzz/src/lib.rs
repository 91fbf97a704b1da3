//! The fuzz targets of bootimage-gen's parsers, shared by the libFuzzer
//! binary (`fuzz_targets/fuzz.rs`) and the smoke test (`tests/fuzz_smoke.rs`).
pub mod cap;
pub mod targets;
