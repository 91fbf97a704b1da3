//! The live rootfs (docs/contract.md §5.1): the deployed metal root squashed with
//! mksquashfs, and `rootfs.img`, the uncompressed cpio that carries the
//! root image (squashfs or [`super::erofs`]) at a fixed offset, the version
//! stamp and the osmet files.
use super::erofs;
use crate::fs::cpio;
use anyhow::{bail, Context, Result};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Where the rootfs cpio puts the squashfs (kernel unpacks it to `/root.squashfs`).
pub const ROOT_SQUASHFS: &str = "root.squashfs";
/// Byte offset of the squashfs in `rootfs.img` (newc header + name).
pub const ROOT_SQUASHFS_OFFSET: u64 = 124;
/// The version stamp in rootfs.img (osbuild: "confirming that initramfs and
/// rootfs are from the same build").
pub const LIVE_ROOTFS_STAMP: &str = "etc/coreos-live-rootfs";

/// Memory mksquashfs may use for its caches and queues. Its default is a
/// quarter of the machine's memory (2 GiB peak RSS measured on the 3 GB
/// large test OS); with 512 MiB it squashes 2 GB of shared libraries in the
/// same time into the same bytes, at 190 MiB peak RSS.
const MKSQUASHFS_MEM: &str = "512M";

/// Squash `src` (the deployed metal root) into `dst` with zstd on `threads`
/// cores; every time stamp (files and the superblock) is `mtime`, so the
/// same tree gives the same bytes.
pub fn make_squashfs(src: &Path, dst: &Path, mtime: i64, threads: usize) -> Result<()> {
    let t = mtime.max(0).to_string();
    let mut c = crate::util::cmd::new("mksquashfs", [src.as_os_str(), dst.as_os_str()]);
    c.args(["-noappend", "-no-progress", "-comp", "zstd", "-processors"])
        .arg(threads.max(1).to_string())
        .args(["-mkfs-time", &t, "-all-time", &t])
        .args(["-mem", MKSQUASHFS_MEM]);
    crate::util::cmd::run(&mut c)
        .with_context(|| format!("squashing the deployed tree {}", src.display()))?;
    Ok(())
}

/// `rootfs.img` (docs/contract.md §5.1): an uncompressed newc cpio whose first entry is
/// the root image (`root.squashfs` or `root.erofs`), so the image starts at
/// byte 124; its magic must be where the live initramfs looks (squashfs
/// `hsqs` at 124, EROFS `e2e1f5e0` at 124 + 1024, as osbuild checks). Then
/// `etc/coreos-live-rootfs` (the version) and the osmet files (`extras`:
/// name in the archive, file).
pub fn write_rootfs_img(
    image: &Path,
    version: &str,
    extras: &[(String, PathBuf)],
    dst: &Path,
    mtime: u32,
) -> Result<()> {
    let name = image
        .file_name()
        .and_then(|n| n.to_str())
        .context("root image name")?;
    let (magic_at, magic): (u64, &[u8]) = match name {
        ROOT_SQUASHFS => (0, b"hsqs"),
        erofs::ROOT_EROFS => (erofs::SUPERBLOCK_OFFSET, &erofs::MAGIC),
        other => bail!(
            "{other} is neither {ROOT_SQUASHFS} nor {}",
            erofs::ROOT_EROFS
        ),
    };
    let mut f =
        std::fs::File::open(image).with_context(|| format!("opening {}", image.display()))?;
    let len = f.metadata()?.len();
    let mut head = vec![0u8; (magic_at + 4) as usize];
    f.read_exact(&mut head)
        .with_context(|| format!("reading {}", image.display()))?;
    if &head[magic_at as usize..] != magic {
        bail!("{} has no {name} magic at byte {magic_at}", image.display());
    }
    std::io::Seek::rewind(&mut f)?;
    let out = std::fs::File::create(dst).with_context(|| format!("creating {}", dst.display()))?;
    let mut w = cpio::Writer::new(std::io::BufWriter::with_capacity(1 << 20, out), mtime);
    let at = w.file_from(name, 0o644, len, std::io::BufReader::new(f))?;
    if at != ROOT_SQUASHFS_OFFSET {
        bail!("{name} landed at byte {at} of rootfs.img, not {ROOT_SQUASHFS_OFFSET}");
    }
    w.dir("etc", 0o755)?;
    w.file(LIVE_ROOTFS_STAMP, 0o644, format!("{version}\n").as_bytes())?;
    for (n, p) in extras {
        let f = std::fs::File::open(p).with_context(|| format!("opening {}", p.display()))?;
        let len = f.metadata()?.len();
        w.file_from(n, 0o644, len, std::io::BufReader::new(f))?;
    }
    let out = w
        .finish()?
        .into_inner()
        .map_err(|e| e.into_error())
        .with_context(|| format!("writing {}", dst.display()))?;
    out.sync_all()?;
    Ok(())
}
