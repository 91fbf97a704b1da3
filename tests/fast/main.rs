//! The fast tier's integration tests, one binary (docs/testing.md
//! "Tiers"): no root, no loop device, no VM, no server. `cargo test`
//! runs them with the library's unit tests; nothing here carries a tier
//! gate. Each module was a test target of its own and still is one for
//! scripts/suite.py, which runs it as its own process (`fast
//! cache_scripts::`).
//!
//! `tiers` checks the one gating mechanism of the other tiers (the
//! `system` binary) from the sources.
mod cache_scripts;
mod fuzz_smoke;
mod meta_schema;
mod stream_metadata;
mod tiers;
