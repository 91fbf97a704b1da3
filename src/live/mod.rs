//! Live ISO and PXE artifacts (docs/contract.md §5): the PXE kernel, initramfs and rootfs,
//! and a hybrid ISO holding them, shaped like the CoreOS ones so that
//! `coreos-installer iso|pxe ...` can customise them. Sources: osbuild
//! `org.osbuild.coreos.live-artifacts.mono`, coreos-installer `src/live/`
//! (what it reads: `coreos/igninfo.json`, `coreos/kargs.json`, the embed
//! areas); the code here is our own.
//!
//! - [`crate::fs::cpio`]: our newc writer (the rootfs image and the appended initramfs).
//! - [`iso`]: the ISO tree and xorriso (El Torito BIOS + EFI, hybrid MBR/GPT).
//! - `kargs`: the volume id and the live kernel arguments.
//! - `initramfs`: initramfs checks, the appended live initramfs,
//!   features.json and the rootfs stream hash.
//! - `menu`: boot menu templates and their karg embed areas ([`Rendered`]).
//! - `rootfs`: the squashfs and `rootfs.img`.
//! - here: the OS's kernel and initramfs names, `coreos/igninfo.json`; the
//!   four above are re-exported, so callers name `live::X`.
pub mod erofs;
mod initramfs;
pub mod iso;
mod kargs;
mod menu;
pub mod miniso;
pub mod osmet;
mod rootfs;
pub mod xzblocks;

pub use initramfs::{
    check_initramfs, config_directives, features_json, live_initramfs, live_initramfs_addon,
    stream_hash, InitrdFormat, EXAMPLE_CONFIG, FEATURES_IN_INITRAMFS, INITRD_ALIGN,
    LIVE_INITRAMFS_STAMP, STREAM_HASH_CHUNK, WANT_ROOTFS,
};
pub use kargs::{live_kargs, volume_id, VOLUME_ID_MAX};
pub use menu::{
    builtin_templates, place_templates, read_templates, render, EmbedArea, Rendered, Template,
    ISOLINUX_CFG, KARG_EMBED_MARKER, KARG_EMBED_MAX, KARG_EMBED_PAD, OF_GRUB_CFG, PH_KARGS,
    PH_VERSION, PH_VOLID, ZIPL_PRM,
};
pub use rootfs::{
    make_squashfs, write_rootfs_img, LIVE_ROOTFS_STAMP, ROOT_SQUASHFS, ROOT_SQUASHFS_OFFSET,
};

use serde_json::json;

/// Size of `images/ignition.img`, the Ignition embed area (docs/contract.md §5).
pub const IGNITION_IMG_SIZE: u64 = 256 * 1024;
/// The OS's initramfs and kernel, relative to `/usr/lib/modules/<kver>/`.
pub const KERNEL_NAME: &str = "vmlinuz";
pub const INITRAMFS_NAME: &str = "initramfs.img";

/// `coreos/igninfo.json`.
pub fn igninfo_json() -> Vec<u8> {
    let mut v =
        serde_json::to_vec_pretty(&json!({"file": "images/ignition.img"})).expect("static json");
    v.push(b'\n');
    v
}
