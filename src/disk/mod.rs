//! The disk: layout (table-driven) and partition table.
pub mod bios;
pub mod bootupd;
pub mod deploy;
pub mod derive;
pub mod efi;
pub mod gpt;
pub mod grubcfg;
pub mod layout;
pub mod manifest;
pub mod mkfs;
pub mod prep;
pub mod selinux;
pub mod stage;
pub mod zipl;
