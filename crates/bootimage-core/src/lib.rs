//! The leaf library of bootimage-gen: what turns bytes into files, and
//! nothing that knows of releases, OS images, platforms or backends.
//!
//! - `io`: disk views (a base plus patches), sparse writes, hashing, the
//!   one ordered worker pool, parallel compression with its chunk cache;
//! - `fs`: the userspace FAT writer and newc cpio;
//! - `formats`: each disk format's writer (qcow2, VMDK, OVA, VHD, VHDX, GCP
//!   tar, PowerVS, OCI) behind one `encode`;
//! - `util`: cancellation, the external-command wrapper, SHA-256, XML.
//!
//! It is its own crate so that the layering is the compiler's: nothing
//! here can name the tool's modules (docs/design.md "Layout").
pub mod formats;
pub mod fs;
pub mod io;
pub mod util;
