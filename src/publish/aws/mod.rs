//! AWS (docs/contract.md §6.3): register the aws platform's disk as an AMI in regions
//! the release's pinned AMIs do not cover (private, sovereign, secret and
//! disconnected regions). The disk goes up as an EBS snapshot through the
//! EBS direct API ([`snapshot`]), then RegisterImage ([`register`]).
//! Credentials, profile and default region come from the standard AWS
//! chain (environment, shared config and credentials files, process
//! credentials, web identity, container and instance metadata).
//!
//! Here: the module's public face. The options and their checks are in
//! `settings.rs`, the AMI to register in `ami_spec.rs`, the clients and the
//! per-region runs in `session.rs` and `region.rs`, the shared EC2 calls in
//! `calls.rs`, tag names in `tags.rs`, error text in `errors.rs`.
pub mod ec2;
pub mod register;
pub mod retry;
pub mod snapshot;

mod ami_spec;
mod calls;
mod errors;
mod region;
mod sdk_http;
mod session;
mod settings;
mod tags;
#[cfg(test)]
mod tests;

pub use ami_spec::AmiSpec;
pub use calls::{delete_snapshot, snapshot_state, tag};
pub use errors::{chain, explain};
pub use region::Registered;
pub use session::Session;
pub use settings::{check_ami_name, check_endpoint_url, check_region_name, Settings};
pub use tags::{
    Tags, ROOT_DEVICE, TAG_AMI_NAME, TAG_NAME, TAG_OS_VERSION, TAG_RELEASE, TAG_SNAPSHOT,
    TAG_UPLOAD, UPLOAD_COMPLETE,
};
