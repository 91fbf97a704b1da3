//! osmet files (docs/contract.md §5.1): what lets `coreos-installer install` write the
//! exact metal image from a live system without any network, by rebuilding
//! it from the ostree repo inside the live rootfs. The format is
//! coreos-installer's (`docs/osmet.md`, `src/osmet/{mod,file,unpacker}.rs`),
//! the code here is our own:
//!
//! - a header: magic `OSMET\0\0\0`, format version 1, the writer's version,
//!   the target's sector size, the OS description (os-release
//!   `PRETTY_NAME`) and architecture;
//! - the table: per partition (start and end byte offsets in the image, boot
//!   then root) the extents that hold ostree `.file` objects (`logical`
//!   offset in the object, `physical` offset in the partition, `length`) and
//!   the object's sha256; then the sha256 and size of the whole image;
//! - then the image with those extents left out, xz-compressed.
//!
//! Header and table use bincode 1 with coreos-installer's options
//! (`src/io/mod.rs` `bincoder`: little endian, varint integers, no limit):
//! integers below 251 are one byte, larger ones a marker byte (251 u16,
//! 252 u32, 253 u64) and the little-endian value; strings and sequences are
//! their varint length then the items; fixed byte arrays are their bytes.
//!
//! Upstream (`coreos-installer pack osmet`) mounts the partitions of a block
//! device and asks FIEMAP where each object lies. The extents are taken the
//! same way here, but where the files are written: in the disk job, on the
//! base disk's mounted filesystems ([`scan`]); the packer ([`pack`]) then
//! streams each metal image's view once, checks every mapped extent against
//! its object (so a stale map can never give a wrong osmet) and hashes the
//! whole image on the way.
use crate::io::view::DiskView;
use crate::publish::meta::sha256_file;
use crate::util::arch::Arch;
use anyhow::{bail, ensure, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// coreos-installer `src/osmet/file.rs` `OSMET_FILE_HEADER_MAGIC`.
pub const MAGIC: [u8; 8] = *b"OSMET\0\0\0";
/// coreos-installer `src/osmet/file.rs` `OSMET_FILE_VERSION`.
pub const VERSION: u32 = 1;
/// Boot files larger than this are matched with ostree objects
/// (coreos-installer `prescan_boot_partition`: smaller ones cost more in
/// the table than they save).
pub const BOOT_FILE_MIN: u64 = 1024;
/// Where the live system puts the osmet files (fedora-coreos-config
/// `coreos-live{iso,pxe}-persist-osmet.service`), and where
/// `coreos-installer install` looks for them.
pub const LIVE_OSMET_DIR: &str = "/run/coreos-installer/osmet";
/// Fault injection for the tests: with `BOOTIMAGE_GEN_FAULT=stale-extent-map`
/// one root extent of the map points a block further into its object
/// before packing (a real filesystem does not
/// give one), to check that a wrong map fails the run and writes nothing.
pub const FAULT_ENV: &str = "BOOTIMAGE_GEN_FAULT";
pub const FAULT_STALE_MAP: &str = "stale-extent-map";
/// The os-release(5) default for an unset `PRETTY_NAME`.
pub const PRETTY_NAME_DEFAULT: &str = "Linux";

/// One extent of a file (FIEMAP's `fe_logical`, `fe_physical`,
/// `fe_length`; physical relative to the partition).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Extent {
    pub logical: u64,
    pub physical: u64,
    pub length: u64,
}

/// An extent that holds (part of) an ostree object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mapping {
    pub extent: Extent,
    /// The object's sha256, hex.
    pub object: String,
}

/// The extents of the base disk's boot and root filesystems that hold
/// ostree objects, as the disk job found them.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ExtentMap {
    pub boot: Vec<Mapping>,
    pub root: Vec<Mapping>,
    /// Objects scanned, objects with data, boot files matched.
    pub objects: u64,
    pub empty_objects: u64,
    pub boot_files: Vec<String>,
    /// The boot extents of each platform boot filesystem that is not the
    /// base disk's (made from its own stage, docs/contract.md §9), by boot
    /// setting key: a metal image's osmet uses its own.
    #[serde(default)]
    pub platform_boot: std::collections::BTreeMap<String, Vec<Mapping>>,
    /// Object sizes → objects, for matching boot files (not stored).
    #[serde(skip)]
    sizes: HashMap<u64, Vec<String>>,
}

// --- FIEMAP (linux/fiemap.h) ---------------------------------------------
const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
const FIEMAP_FLAG_SYNC: u32 = 0x1;
const FIEMAP_EXTENT_LAST: u32 = 0x1;
/// Extent flags that mean the bytes on the disk are not the file's bytes
/// as they are (not there yet, encoded, inline, preallocated, ...).
const FIEMAP_BAD: &[(u32, &str)] = &[
    (0x2, "its location is unknown"),
    (0x4, "it is not allocated yet (delayed allocation)"),
    (0x8, "it is encoded (compressed)"),
    (0x80, "it is encrypted"),
    (0x100, "it is not block-aligned"),
    (0x200, "its data is inline in the metadata"),
    (0x400, "it shares a block with other files (tail packing)"),
    (0x800, "it is preallocated but unwritten"),
    (
        0x1000,
        "the filesystem reports no extents for it (merged block map)",
    ),
];
const BATCH: usize = 256;

#[repr(C)]
#[derive(Clone, Copy)]
struct FiemapExtent {
    fe_logical: u64,
    fe_physical: u64,
    fe_length: u64,
    fe_reserved64: [u64; 2],
    fe_flags: u32,
    fe_reserved: [u32; 3],
}

#[repr(C)]
struct Fiemap {
    fm_start: u64,
    fm_length: u64,
    fm_flags: u32,
    fm_mapped_extents: u32,
    fm_extent_count: u32,
    fm_reserved: u32,
    fm_extents: [FiemapExtent; BATCH],
}

/// The extents of the file at `path` (synced first), or why its bytes on
/// the disk cannot stand for it.
pub fn fiemap(path: &Path) -> Result<Vec<Extent>> {
    use std::os::unix::io::AsRawFd;
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut out: Vec<Extent> = Vec::new();
    // SAFETY: a plain-old-data struct, zero is a valid value.
    let mut m: Box<Fiemap> = Box::new(unsafe { std::mem::zeroed() });
    loop {
        m.fm_start = out.last().map_or(0, |e| e.logical + e.length);
        m.fm_length = u64::MAX - m.fm_start;
        m.fm_flags = FIEMAP_FLAG_SYNC;
        m.fm_mapped_extents = 0;
        m.fm_extent_count = BATCH as u32;
        // SAFETY: FS_IOC_FIEMAP fills at most fm_extent_count extents of
        // the struct we own; the descriptor is valid for the call.
        let r = unsafe { libc::ioctl(f.as_raw_fd(), FS_IOC_FIEMAP as _, &mut *m as *mut Fiemap) };
        if r < 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("FIEMAP on {}", path.display()));
        }
        let n = m.fm_mapped_extents as usize;
        if n == 0 {
            break;
        }
        let mut last = false;
        for e in &m.fm_extents[..n.min(BATCH)] {
            if let Some((_, why)) = FIEMAP_BAD.iter().find(|(bit, _)| e.fe_flags & bit != 0) {
                bail!(
                    "the extent at byte {} of {} cannot be mapped: {why}",
                    e.fe_logical,
                    path.display()
                );
            }
            out.push(Extent {
                logical: e.fe_logical,
                physical: e.fe_physical,
                length: e.fe_length,
            });
            last |= e.fe_flags & FIEMAP_EXTENT_LAST != 0;
        }
        if last {
            break;
        }
    }
    Ok(out)
}

/// Sort by physical offset (longest first on ties), drop extents inside
/// the one before, clamp overlapping starts: the canonical form
/// coreos-installer checks when it reads a table.
pub fn canonicalize(v: &mut Vec<Mapping>) {
    v.sort_by(|a, b| {
        a.extent
            .physical
            .cmp(&b.extent.physical)
            .then(b.extent.length.cmp(&a.extent.length))
    });
    let mut out: Vec<Mapping> = Vec::with_capacity(v.len());
    let mut end = 0u64;
    for mut m in v.drain(..) {
        let e = m.extent.physical + m.extent.length;
        if !out.is_empty() && e <= end {
            continue;
        }
        if !out.is_empty() && m.extent.physical < end {
            let cut = end - m.extent.physical;
            m.extent.logical += cut;
            m.extent.physical += cut;
            m.extent.length -= cut;
        }
        end = e;
        out.push(m);
    }
    *v = out;
}

fn object_of(path: &Path) -> Option<String> {
    let stem = path.file_name()?.to_str()?.strip_suffix(".file")?;
    let dir = path.parent()?.file_name()?.to_str()?;
    let hex = format!("{dir}{stem}");
    (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then_some(hex)
}

/// Path of object `hex` in the `objects` directory of a repo.
pub fn object_path(objects: &Path, hex: &str) -> PathBuf {
    objects.join(&hex[..2]).join(format!("{}.file", &hex[2..]))
}

/// Map the ostree objects of the mounted root (`root`: the root filesystem,
/// `ostree/repo` in it) and the boot files that are copies of objects
/// (`boot`: the boot filesystem): kernel and initramfs. Every regular
/// object with data must map; one that does not is named in the error.
pub fn scan(root: &Path, boot: &Path) -> Result<ExtentMap> {
    let objects = root.join("ostree/repo/objects");
    let mut map = ExtentMap::default();
    let mut by_size: HashMap<u64, Vec<String>> = HashMap::new();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&objects)
        .with_context(|| format!("reading {}", objects.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    dirs.sort();
    for d in dirs {
        if !d.is_dir() {
            continue;
        }
        let mut files: Vec<PathBuf> = std::fs::read_dir(&d)
            .with_context(|| format!("reading {}", d.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        files.sort();
        for p in files {
            let Some(hex) = object_of(&p) else { continue };
            let md = std::fs::symlink_metadata(&p)?;
            if !md.file_type().is_file() {
                continue;
            }
            map.objects += 1;
            let rel = p.strip_prefix(root).unwrap_or(&p).display().to_string();
            let ext = fiemap(&p).with_context(|| {
                format!(
                    "ostree object /{rel} of the deployed tree cannot be mapped for the osmet file"
                )
            })?;
            if ext.is_empty() {
                map.empty_objects += 1;
                continue;
            }
            by_size.entry(md.len()).or_default().push(hex.clone());
            map.root.extend(ext.into_iter().map(|extent| Mapping {
                extent,
                object: hex.clone(),
            }));
        }
    }
    map.sizes = by_size;
    let (boot_maps, files) = scan_boot(&map, root, boot)?;
    map.boot = boot_maps;
    map.boot_files = files;
    canonicalize(&mut map.root);
    Ok(map)
}

/// The boot files of the mounted boot filesystem `boot` that are copies of
/// an object of `map`'s root (mounted at `root`): kernel and initramfs;
/// their extents and names.
pub fn scan_boot(map: &ExtentMap, root: &Path, boot: &Path) -> Result<(Vec<Mapping>, Vec<String>)> {
    let objects = root.join("ostree/repo/objects");
    let by_size = &map.sizes;
    let mut mappings = Vec::new();
    let mut files = Vec::new();
    // Boot files (kernel, initramfs) that are copies of an object.
    let mut digests: HashMap<String, String> = HashMap::new();
    let mut stack = vec![boot.to_path_buf()];
    while let Some(d) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&d)
            .with_context(|| format!("reading {}", d.display()))?
            .filter_map(|e| e.ok())
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let ft = e.file_type()?;
            let p = e.path();
            if ft.is_dir() {
                stack.push(p);
                continue;
            }
            if !ft.is_file() {
                continue;
            }
            let len = e.metadata()?.len();
            let Some(cands) = by_size.get(&len).filter(|_| len > BOOT_FILE_MIN) else {
                continue;
            };
            let mine = sha256_file(&p)?.0;
            let mut found = None;
            for c in cands {
                let d = match digests.get(c) {
                    Some(d) => d.clone(),
                    None => {
                        let d = sha256_file(&object_path(&objects, c))?.0;
                        digests.insert(c.clone(), d.clone());
                        d
                    }
                };
                if d == mine {
                    found = Some(c.clone());
                    break;
                }
            }
            if let Some(obj) = found {
                let rel = p.strip_prefix(boot).unwrap_or(&p).display().to_string();
                let ext = fiemap(&p).with_context(|| {
                    format!("/boot/{rel} (a copy of ostree object {obj}) cannot be mapped for the osmet file")
                })?;
                mappings.extend(ext.into_iter().map(|extent| Mapping {
                    extent,
                    object: obj.clone(),
                }));
                files.push(format!("/boot/{rel}"));
            }
        }
    }
    canonicalize(&mut mappings);
    Ok((mappings, files))
}

// --- bincode 1 (varint, little endian) -------------------------------------

/// bincode 1's varint encoding of an integer (also miniso.dat's).
pub(crate) fn varint(w: &mut Vec<u8>, n: u64) {
    if n < 251 {
        w.push(n as u8);
    } else if n <= u16::MAX as u64 {
        w.push(251);
        w.extend_from_slice(&(n as u16).to_le_bytes());
    } else if n <= u32::MAX as u64 {
        w.push(252);
        w.extend_from_slice(&(n as u32).to_le_bytes());
    } else {
        w.push(253);
        w.extend_from_slice(&n.to_le_bytes());
    }
}

fn string(w: &mut Vec<u8>, s: &str) {
    varint(w, s.len() as u64);
    w.extend_from_slice(s.as_bytes());
}

/// The header (`OsmetFileHeader`).
pub struct Header<'a> {
    pub app_version: &'a str,
    pub sector_size: u32,
    pub os_description: &'a str,
    pub os_architecture: Arch,
}

impl Header<'_> {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Vec::new();
        w.extend_from_slice(&MAGIC);
        varint(&mut w, VERSION as u64);
        string(&mut w, self.app_version);
        varint(&mut w, self.sector_size as u64);
        string(&mut w, self.os_description);
        string(&mut w, self.os_architecture.as_str());
        w
    }
}

/// A partition of the image and its mappings (`OsmetPartition`).
pub struct Partition<'a> {
    pub start: u64,
    pub end: u64,
    pub mappings: &'a [Mapping],
}

/// The table (`Osmet`) with a zero checksum; returns the bytes and the
/// offset of the checksum in them (filled in once the image is hashed).
fn encode_table(parts: &[Partition], size: u64) -> Result<(Vec<u8>, usize)> {
    let mut w = Vec::new();
    varint(&mut w, parts.len() as u64);
    for p in parts {
        varint(&mut w, p.start);
        varint(&mut w, p.end);
        varint(&mut w, p.mappings.len() as u64);
        for m in p.mappings {
            varint(&mut w, m.extent.logical);
            varint(&mut w, m.extent.physical);
            varint(&mut w, m.extent.length);
            let b = hex::decode(&m.object)
                .ok()
                .filter(|b| b.len() == 32)
                .with_context(|| format!("object id {:?} is no sha256", m.object))?;
            w.extend_from_slice(&b);
        }
    }
    let at = w.len();
    w.extend_from_slice(&[0; 32]);
    varint(&mut w, size);
    Ok((w, at))
}

/// What a pack did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PackStats {
    pub image_size: u64,
    pub image_sha256: String,
    /// Bytes left out (they come from the objects).
    pub mapped: u64,
    /// Bytes xz-compressed, and what they became.
    pub packed: u64,
    pub packed_xz: u64,
    pub mappings: u64,
    pub file_size: u64,
    pub seconds: f64,
}

/// The packed image is xz'd by [`super::xzblocks`]: preset 9 as
/// coreos-installer's `pack osmet` (0 with `--fast`), in independent blocks
/// so that the free space (zeros) costs one compressed block, reused; plain
/// liblzma takes 22 s per GiB of zeros at preset 9 on 2 cores (6 s at 0).
const CHUNK: usize = 4 << 20;

/// The parts of an image: `(start, end, mapping or None)` in order.
fn regions<'a>(
    size: u64,
    parts: &'a [Partition<'a>],
) -> Result<Vec<(u64, u64, Option<&'a Mapping>)>> {
    let mut out = Vec::new();
    let mut cur = 0u64;
    for p in parts {
        ensure!(
            p.start >= cur && p.end >= p.start && p.end <= size,
            "partitions of the osmet table overlap or leave the image"
        );
        if p.start > cur {
            out.push((cur, p.start, None));
        }
        cur = p.start;
        for m in p.mappings {
            let s = p.start + m.extent.physical;
            let e = s + m.extent.length;
            ensure!(
                s >= cur && e <= p.end,
                "mapping of object {} ({:?}) is not inside its partition in canonical order",
                m.object,
                m.extent
            );
            if s > cur {
                out.push((cur, s, None));
            }
            out.push((s, e, Some(m)));
            cur = e;
        }
        if p.end > cur {
            out.push((cur, p.end, None));
        }
        cur = p.end;
    }
    if size > cur {
        out.push((cur, size, None));
    }
    Ok(out)
}

/// Write the osmet file of `image` to `out` (a new file): header, table,
/// xz of the unmapped bytes. Every mapped extent is compared with its
/// object in `objects` (an ostree repo's `objects/`; bytes past the
/// object's end must be zeros, as the unpacker writes them) and the whole
/// image is hashed on the way: a mismatch fails, naming the object and the
/// byte, instead of writing an osmet that would not rebuild the image.
/// `expect_sha256`, when given, must be the image's hash. The file is
/// written next to `out` and renamed there only once it is right, so a
/// failed pack leaves nothing behind.
pub fn pack(
    image: &dyn DiskView,
    parts: &[Partition],
    objects: &Path,
    header: &Header,
    expect_sha256: Option<&str>,
    out: &Path,
) -> Result<PackStats> {
    use crate::io::buffers::{BufPool, HashThread};
    use crate::io::sparse::clamped_extents;
    let started = std::time::Instant::now();
    let size = image.len();
    let regions = regions(size, parts)?;
    let head = header.encode();
    let (table, sum_at) = encode_table(parts, size)?;
    let tmp = crate::publish::staged::Staged::new(out)
        .with_context(|| format!("creating a temporary file for {}", out.display()))?;
    let mut f = tmp.file();
    f.write_all(&head)?;
    f.write_all(&table)?;
    let mut xz = super::xzblocks::XzBlocks::new(std::io::BufWriter::with_capacity(1 << 20, f));
    // Hashing runs on its own thread; holes of the image are hashed and
    // compressed as zeros without being read.
    let pool = BufPool::new(CHUNK, 4);
    let hasher = HashThread::spawn(pool.clone(), 4)?;
    let data = clamped_extents(image)?;
    let zeros = vec![0u8; CHUNK];
    let mut obuf = vec![0u8; CHUNK];
    let mut st = PackStats {
        image_size: size,
        mappings: parts.iter().map(|p| p.mappings.len() as u64).sum(),
        ..Default::default()
    };
    let mut open: Option<(String, std::fs::File, u64)> = None;
    for (s, e, m) in regions {
        let mut pos = s;
        if let Some(m) = m {
            if open.as_ref().map(|o| &o.0) != Some(&m.object) {
                let p = object_path(objects, &m.object);
                let of = std::fs::File::open(&p).with_context(|| {
                    format!("opening ostree object {} to check the osmet mapping at byte {s} of the image", m.object)
                })?;
                let len = of.metadata()?.len();
                open = Some((m.object.clone(), of, len));
            }
            let (_, of, olen) = open.as_mut().expect("opened");
            of.seek(SeekFrom::Start(m.extent.logical.min(*olen)))?;
            let mut off_in_obj = m.extent.logical;
            while pos < e {
                crate::util::cancel::check()?;
                let n = ((e - pos) as usize).min(CHUNK);
                let mut buf = pool.get().context("buffer pool closed")?;
                image.read_at(&mut buf[..n], pos)?;
                let have = olen.saturating_sub(off_in_obj).min(n as u64) as usize;
                of.read_exact(&mut obuf[..have])
                    .with_context(|| format!("reading ostree object {}", m.object))?;
                obuf[have..n].fill(0);
                if buf[..n] != obuf[..n] {
                    let i = buf[..n]
                        .iter()
                        .zip(&obuf[..n])
                        .position(|(a, b)| a != b)
                        .unwrap_or(0);
                    bail!(
                        "byte {} of the image differs from ostree object {} (byte {} of it) that the extent map puts there: the map is stale; refusing to write an osmet that would not rebuild the image",
                        pos + i as u64,
                        m.object,
                        off_in_obj + i as u64
                    );
                }
                hasher.data(buf, n)?;
                st.mapped += n as u64;
                pos += n as u64;
                off_in_obj += n as u64;
            }
        } else {
            while pos < e {
                crate::util::cancel::check()?;
                // Up to the next data extent (a hole) or to its end.
                let (hole, end) = match data.get(data.partition_point(|r| r.end <= pos)) {
                    Some(r) if r.start > pos => (true, r.start),
                    Some(r) => (false, r.end),
                    None => (true, e),
                };
                let n = (end.min(e) - pos).min(CHUNK as u64) as usize;
                if hole {
                    hasher.zeros(n as u64)?;
                    xz.write_all(&zeros[..n])
                } else {
                    let mut buf = pool.get().context("buffer pool closed")?;
                    image.read_at(&mut buf[..n], pos)?;
                    let w = xz.write_all(&buf[..n]);
                    hasher.data(buf, n)?;
                    w
                }
                .context("compressing the packed image")?;
                st.packed += n as u64;
                pos += n as u64;
            }
        }
    }
    let (w, _, xz_out) = xz.finish().context("finishing the xz stream")?;
    st.packed_xz = xz_out;
    w.into_inner()
        .map_err(|e| e.into_error())
        .context("flushing the osmet file")?;
    st.image_sha256 = hasher.finish()?.0;
    if let Some(want) = expect_sha256 {
        ensure!(
            want == st.image_sha256,
            "the image read for the osmet file has sha256 {}, but the published image has {want}",
            st.image_sha256
        );
    }
    let sum = hex::decode(&st.image_sha256).expect("hex");
    f.seek(SeekFrom::Start((head.len() + sum_at) as u64))?;
    f.write_all(&sum)?;
    f.sync_all()?;
    st.file_size = f.metadata()?.len();
    tmp.commit_noclobber()
        .with_context(|| format!("publishing {}", out.display()))?;
    st.seconds = started.elapsed().as_secs_f64();
    Ok(st)
}

/// The osmet description: os-release `PRETTY_NAME`, as osbuild passes it to
/// `coreos-installer pack osmet --description`. `None` when the OS has none.
pub fn description(os_release: &std::collections::BTreeMap<String, String>) -> Option<String> {
    os_release
        .get("PRETTY_NAME")
        .filter(|s| !s.is_empty())
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    fn m(l: u64, p: u64, n: u64) -> Mapping {
        Mapping {
            extent: Extent {
                logical: l,
                physical: p,
                length: n,
            },
            object: "00".repeat(32),
        }
    }

    #[test]
    fn varints_are_bincode_1() {
        let mut w = Vec::new();
        for n in [0u64, 250, 251, 65535, 65536, u32::MAX as u64 + 1] {
            varint(&mut w, n);
        }
        assert_eq!(
            w,
            [0, 250, 251, 251, 0, 251, 255, 255, 252, 0, 0, 1, 0, 253, 0, 0, 0, 0, 1, 0, 0, 0]
        );
        let h = Header {
            app_version: "x",
            sector_size: 4096,
            os_description: "d",
            os_architecture: Arch::X86_64,
        }
        .encode();
        assert_eq!(&h[..8], b"OSMET\0\0\0");
        assert_eq!(&h[8..11], &[1, 1, b'x']);
        assert_eq!(&h[11..14], &[251, 0x00, 0x10]);
    }

    #[test]
    fn canonical_form() {
        let mut v = vec![
            m(100, 100, 10),
            m(100, 100, 50),
            m(110, 110, 10),
            m(140, 140, 20),
            m(150, 150, 20),
        ];
        canonicalize(&mut v);
        let e: Vec<_> = v
            .iter()
            .map(|m| (m.extent.logical, m.extent.physical, m.extent.length))
            .collect();
        assert_eq!(e, [(100, 100, 50), (150, 150, 10), (160, 160, 10)]);
    }

    #[test]
    fn regions_cover_the_image() {
        let maps = vec![m(0, 4096, 4096)];
        let parts = [Partition {
            start: 1 << 20,
            end: 2 << 20,
            mappings: &maps,
        }];
        let r = regions(3 << 20, &parts).unwrap();
        let spans: Vec<_> = r.iter().map(|(s, e, m)| (*s, *e, m.is_some())).collect();
        assert_eq!(
            spans,
            [
                (0, 1 << 20, false),
                (1 << 20, (1 << 20) + 4096, false),
                ((1 << 20) + 4096, (1 << 20) + 8192, true),
                ((1 << 20) + 8192, 2 << 20, false),
                (2 << 20, 3 << 20, false)
            ]
        );
    }

    /// A map whose extent does not hold its object's bytes is refused,
    /// naming the object, and leaves no file; a right one packs to a file
    /// whose table and xz stream give the image back.
    #[test]
    fn pack_checks_every_mapping() {
        let d = tempfile::tempdir().unwrap();
        let objects = d.path().join("objects");
        let obj = "ab".to_string() + &"cd".repeat(31);
        let op = object_path(&objects, &obj);
        std::fs::create_dir_all(op.parent().unwrap()).unwrap();
        std::fs::write(&op, b"hello object").unwrap();
        let mut img = vec![7u8; 64 << 10];
        img[8192..8192 + 12].copy_from_slice(b"hello object");
        img[8192 + 12..12288].fill(0);
        let ip = d.path().join("img");
        std::fs::write(&ip, &img).unwrap();
        let view = crate::io::view::FileView::open(&ip).unwrap();
        let maps = vec![Mapping {
            extent: Extent {
                logical: 0,
                physical: 4096,
                length: 4096,
            },
            object: obj.clone(),
        }];
        let parts = [Partition {
            start: 4096,
            end: 32768,
            mappings: &maps,
        }];
        let h = Header {
            app_version: "t",
            sector_size: 512,
            os_description: "Test",
            os_architecture: Arch::X86_64,
        };
        let out = d.path().join("x.osmet");
        let st = pack(&view, &parts, &objects, &h, None, &out).unwrap();
        assert_eq!(st.mapped, 4096);
        assert_eq!(st.packed, (64 << 10) - 4096);
        assert_eq!(st.image_sha256, hex::encode(Sha256::digest(&img)));
        let f = std::fs::read(&out).unwrap();
        let head = h.encode();
        assert_eq!(&f[..head.len()], &head[..]);
        // A stale map: the image changed under the extent.
        img[8192] = b'H';
        std::fs::write(&ip, &img).unwrap();
        let view = crate::io::view::FileView::open(&ip).unwrap();
        let out2 = d.path().join("y.osmet");
        let e = format!(
            "{:#}",
            pack(&view, &parts, &objects, &h, None, &out2).unwrap_err()
        );
        assert!(e.contains(&obj) && e.contains("stale"), "{e}");
        assert!(!out2.exists(), "a refused osmet file is removed");
        // The wrong expected checksum is refused too.
        img[8192] = b'h';
        std::fs::write(&ip, &img).unwrap();
        let view = crate::io::view::FileView::open(&ip).unwrap();
        let e = pack(&view, &parts, &objects, &h, Some("00"), &out2).unwrap_err();
        assert!(format!("{e:#}").contains("published image"), "{e:#}");
        assert!(!out2.exists());
    }

    /// A file whose extents the filesystem cannot give (tmpfs has no
    /// FIEMAP) is an error naming it.
    #[test]
    fn unmappable_file_is_named() {
        let d = tempfile::tempdir_in("/dev/shm").expect("/dev/shm, a tmpfs (no FIEMAP)");
        let p = d.path().join("obj.file");
        std::fs::write(&p, vec![1u8; 8192]).unwrap();
        let e = format!("{:#}", fiemap(&p).unwrap_err());
        assert!(e.contains(&p.display().to_string()), "{e}");
    }

    #[test]
    fn object_names() {
        let h = "ab".to_string() + &"cd".repeat(31);
        let p = object_path(Path::new("/r/objects"), &h);
        assert_eq!(object_of(&p).as_deref(), Some(h.as_str()));
        assert_eq!(object_of(Path::new("/r/objects/ab/cd.dirtree")), None);
    }
}
