//! Disk image encoders: each reads a [`crate::io::view::DiskView`] and
//! streams one platform's format.
pub mod gcp;
pub mod ova;
pub mod qcow2;
pub mod vhd;
pub mod vmdk;
