//! The disk: layout (table-driven) and partition table.
pub mod gpt;
pub mod layout;
