//! Userspace filesystems and archives: FAT (the ESP and the ISO's
//! efiboot.img) and newc cpio (initramfs, live rootfs).
pub mod cpio;
pub mod fat;
