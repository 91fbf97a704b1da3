//! The privileged and boot tiers' tests, one binary (docs/testing.md
//! "Tiers"): the pipeline on the test release with root, loop devices,
//! mounts, podman and local servers, and the boots under qemu.
//!
//! One gating mechanism for every tier, the one the library's unit tests
//! use too: each test here carries
//! `#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]`
//! or the same with `boot` (every test that starts qemu-system or a VM);
//! `cargo test` without the feature lists it as ignored with that reason.
//! The fast tier's `tiers` module checks that every test here carries
//! exactly one, and the boot harness (`common::boot`) refuses to start
//! qemu for a test without the boot gate.
//!
//! Each module was a test target of its own and still is one: scripts/suite.py
//! runs each as its own process (`system generate::`), so a module's
//! statics (artifacts built once, `built_once`) are shared by its tests
//! only, and its scratch directories are removed when its process ends.
//! Run one by hand the same way:
//! `cargo test --release --features boot --test system -- generate::`.
mod common;

mod backend_vm;
mod boot_harness;
mod chaos;
mod concurrency;
mod conformance;
mod container;
mod deploy;
mod faithful;
mod fixture_smoke;
mod generate;
mod generate_aws;
mod generate_errors;
mod generate_interrupt;
mod generate_live;
mod generate_platforms;
mod inspect;
mod live_offline;
mod multiarch;
mod registry;
mod registry_faults;
mod rhel10;
mod trust;
mod vsphere;
