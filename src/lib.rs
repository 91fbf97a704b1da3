//! bootimage-gen: turn an OpenShift release image into the bootable disk
//! images coreos-assembler would have published for its OS.
pub mod aws;
pub mod backend;
pub mod cli;
pub mod commands;
pub mod disk;
pub mod formats;
pub mod image;
pub mod io;
pub mod live;
pub mod meta;
pub mod osconfig;
pub mod oscontainer;
pub mod plan;
pub mod platforms;
pub mod release;
pub mod stream;
pub mod util;
