//! bootimage-gen: turn an OpenShift release image into the bootable disk
//! images coreos-assembler would have published for its OS.
// The leaf library (crates/bootimage-core), under the paths it always had.
pub use bootimage_core::{formats, fs, io};

pub mod backend;
pub mod cli;
pub mod commands;
pub mod disk;
pub mod image;
pub mod live;
pub mod oscontainer;
pub mod pipeline;
pub mod plan;
pub mod platforms;
pub mod publish;
pub mod release;
pub mod sys;
pub mod trust;
pub mod util;
