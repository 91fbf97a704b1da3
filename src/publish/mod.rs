//! Publishing: the staged write of every output file, meta.json,
//! stream.json, SHA256SUMS, and the AMI registration (aws).
pub mod aws;
pub mod meta;
pub mod registry;
pub mod staged;
pub mod stream;
pub mod vsphere;
