//! Bootimages into and out of OCI registries (`push`, `pull`; README
//! "Registry"): a client of the OCI distribution API, the credentials
//! podman and skopeo keep, and the artifact layout both commands share.
mod artifact;
pub mod auth;
pub mod client;
pub mod fanin;
pub mod layout;
pub mod pull;
pub mod push;
