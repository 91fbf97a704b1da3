//! Publishing: the staged write of every output file, meta.json,
//! stream.json, SHA256SUMS, the AMI registration (aws), the registry
//! (push/pull), vSphere, and the merge of several runs' stream documents.
pub mod aws;
pub mod merge;
pub mod meta;
pub mod registry;
pub mod staged;
pub mod stream;
pub mod vsphere;
