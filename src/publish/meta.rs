//! meta.json and SHA256SUMS: the files that describe a build's artifacts, in
//! the shape coreos-assembler (cosa) publishes them.
//!
//! The meta.json layout follows cosa's JSON schema (`src/v1.json` in
//! coreos/coreos-assembler; a verbatim copy is kept as test data in
//! `tests/data/cosa-meta-v1.schema.json` and `tests/meta_schema.rs` validates
//! our output against it). That schema sets `additionalProperties: false` at
//! the top level, so we cannot add an object of our own: every fact we record
//! goes into a key cosa defines:
//!
//! | our fact                         | meta.json key                            |
//! |----------------------------------|------------------------------------------|
//! | OS version (= build id)          | `buildid`, `ostree-version`              |
//! | OS name (`rhcos`, `fedora-coreos`)| `name`                                  |
//! | ostree commit and its timestamp  | `ostree-commit`, `ostree-timestamp`      |
//! | architecture                     | `coreos-assembler.basearch`              |
//! | when we built the images         | `coreos-assembler.build-timestamp`       |
//! | "built from an OCI image"        | `coreos-assembler.oci-imported`          |
//! | this tool's name and version     | `coreos-assembler.container-image-git`   |
//! | OS image source repo/revision    | `coreos-assembler.container-config-git`  |
//! | OS container image + digest      | `base-oscontainer`                       |
//! | OpenShift release + digest       | `release-payload` (tags: release version)|
//!
//! Files are written atomically: a temporary file in the same directory,
//! fsync, rename, fsync of the directory.
//!
//! The parts, each re-exported here under its old name:
//! - `schema`: the types of cosa's schema, the file names and `images` keys;
//! - `record`: what a `Meta` does (new, check, merge) and
//!   `ImageEntry::for_file`;
//! - `checks`: the value checks of the schema (hex digests, timestamps,
//!   plain file names);
//! - `store`: meta.json read and written, and the atomic write;
//! - `sums`: a file's SHA-256 and SHA256SUMS.
mod checks;
mod record;
mod schema;
mod store;
mod sums;

pub use schema::{
    live_rootfs_details, Ami, ContainerImage, CosaInfo, Git, ImageEntry, Meta, OutputDirConflict,
    DETAILS_KEY_DEPLOY, IMAGE_KEY_LIVE_INITRAMFS, IMAGE_KEY_LIVE_ISO, IMAGE_KEY_LIVE_KERNEL,
    IMAGE_KEY_LIVE_ROOTFS, IMAGE_KEY_OCI_MANIFEST, IMAGE_KEY_OSTREE, META_JSON, SHA256SUMS,
};
pub(crate) use store::write_atomic;
pub use store::{read_meta, write_merged_meta, write_meta};
pub use sums::{sha256_file, write_sha256sums};

pub use crate::util::rfc3339_utc;

#[cfg(test)]
mod tests;
