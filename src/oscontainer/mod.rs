//! The OS image: tell its format from its labels, import its commit into the
//! cache repo (ostree-native through ostree-ext; legacy machine-os-content by
//! a verified local pull from `/srv/repo`), and read what the OS says about
//! itself (version, kernel, osname, bootimage configuration).
//!
//! The parts: `format` (the labels and [`OsFormat`]), `cache` ([`Cache`],
//! [`ImportRecord`]), `import` and `legacy` (the two ways in), `refs` (the
//! refs a node's ostree-ext expects), `info` ([`OsInfo`]); each re-exported
//! here, so callers name `oscontainer::X`.
pub mod buildroot;
mod cache;
mod canonical;
pub mod config;
mod format;
pub mod gc;
mod import;
mod info;
mod legacy;
pub mod nonostree;
mod refs;
pub mod repo;

pub use cache::{Cache, ImportRecord};
pub use format::{
    detect_format, OsFormat, LABEL_BOOTC, LABEL_LEGACY_COMMIT, LABEL_OSNAME, LABEL_OSTREE_BOOTABLE,
    LABEL_OSTREE_COMMIT, LABEL_OSTREE_LINUX, LEGACY_REPO_DIR,
};
pub use import::import;
pub use info::{parse_os_release, read_os_info, OsInfo};
pub use refs::{image_refs, ImageRefs, IMAGE_REF_PREFIX, LAYER_REF_PREFIX};
// For `nonostree`, which reads it as `super::IGNORED_TOPLEVELS`.
use import::IGNORED_TOPLEVELS;

#[cfg(test)]
mod tests;
