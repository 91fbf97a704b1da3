//! Streaming I/O: disk views (base + delta), compression, sparse output.
pub mod compress;
pub mod sparse;
pub mod view;
