//! Disk image formats written by the tool.
pub mod qcow2;
