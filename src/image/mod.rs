//! Container images: references, mirrors, fetching, local layouts and layers.
pub mod access;
pub mod fetch;
pub mod idms;
pub mod imageref;
pub mod index;
pub mod layers;
pub mod layout;
