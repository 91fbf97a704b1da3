//! The fixed-VHD writer on a real raw disk against `qemu-img convert -O vpc
//! -o subformat=fixed`, and the SHA-256 of the disk alone (part of ours).
//!
//! ```text
//! cargo run --release --example bench_vhd -- DISK.raw
//! ```
use anyhow::{bail, Context, Result};
use bootimage_gen::formats::vhd::write_vhd;
use bootimage_gen::io::view::FileView;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

fn main() -> Result<()> {
    let disk = PathBuf::from(
        std::env::args()
            .nth(1)
            .context("usage: bench_vhd DISK.raw")?,
    );
    let dir = tempfile::tempdir_in(disk.parent().unwrap_or(Path::new(".")))?;
    let view = FileView::open(&disk)?;
    let t = Instant::now();
    let s = write_vhd(&view, &dir.path().join("ours.vhd"), [0; 16], 0, &|_| {})?;
    let ours = t.elapsed();
    let t = Instant::now();
    let st = Command::new("qemu-img")
        .args(["convert", "-f", "raw", "-O", "vpc", "-o"])
        .arg("subformat=fixed,force_size")
        .arg(&disk)
        .arg(dir.path().join("qemu.vhd"))
        .status()
        .context("running qemu-img (Debian package qemu-utils)")?;
    if !st.success() {
        bail!("qemu-img convert failed ({st})");
    }
    let qemu = t.elapsed();
    let t = Instant::now();
    bootimage_gen::io::sparse::sha256_view(&view)?;
    println!("SHA-256 of the disk alone: {:.2?}", t.elapsed());
    let allocated = |n: &str| -> Result<u64> {
        Ok((std::fs::metadata(dir.path().join(n))?.blocks() * 512) >> 20)
    };
    println!(
        "VHD of {} MiB: ours {ours:.2?} (incl. SHA-256 and fsync), qemu-img {qemu:.2?}; \
         allocated ours {} MiB, qemu {} MiB",
        s.virtual_size >> 20,
        allocated("ours.vhd")?,
        allocated("qemu.vhd")?
    );
    Ok(())
}
