//! Small shared helpers: the external command wrapper and friends.
pub mod arch;
pub mod cancel;
pub mod container;
pub mod http;
pub mod lock;
pub mod owner;
pub mod progress;
pub mod space;
pub mod ui;

// The base utilities the leaf library (formats, fs, io) runs on, under their
// old names: commands, hashing, XML escaping, worker counts, timestamps.
pub use bootimage_core::util::{cmd, rfc3339_utc, sha256, sha256_hex, threads, xml};
