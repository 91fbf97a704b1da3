//! The EFI system partition (docs/contract.md §2): a FAT filesystem written in userspace
//! (no kernel vfat, no mounts) straight into its region of the disk image,
//! holding the OS's `EFI/` tree (`/usr/lib/bootupd/updates/EFI`) plus
//! generated files such as the stub `grub.cfg`.
//!
//! The filesystem is written once, from a complete description of its
//! contents: geometry, directory entries (with VFAT long names), FATs and
//! file data are laid out in memory and then written with positioned writes
//! that cannot leave the region. (The `fatfs` 0.3 crate was tried first; it
//! puts long-name entries in front of the `.` and `..` entries of every new
//! directory, which fsck.fat rejects.)
//!
//! Geometry follows `mkfs.fat` 4.2, which cosa runs with only a label and a
//! volume id (osbuild `org.osbuild.mkfs.fat`): below 512 MiB 4 sectors per
//! cluster (doubled until the volume has at most 65524 clusters), FAT12 or
//! FAT16 by cluster count, 512 root entries, 2 FATs, FAT length and reserved
//! sectors rounded so the data area starts on a cluster boundary; from
//! 512 MiB on FAT32. For the 127 MiB ESP this gives exactly what mkfs.fat
//! gives: FAT16, 4 reserved sectors, 2 KiB clusters with 512-byte sectors and
//! 16 KiB clusters with 4096-byte sectors. Layout facts: Microsoft "FAT32 File
//! System Specification" 1.03 (BPB, FSInfo, directory and long-name entries,
//! FAT type by cluster count).
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Component, Path, PathBuf};

/// Cluster-count limits that define the FAT type (FAT spec section 3.5).
const FAT12_MAX_CLUSTERS: u64 = 4084;
const FAT16_MAX_CLUSTERS: u64 = 65524;
/// mkfs.fat switches to FAT32 from this volume size on.
const FAT32_FROM: u64 = 512 << 20;
/// mkfs.fat's starting cluster size for FAT12/16, in sectors.
const SMALL_SECTORS_PER_CLUSTER: u64 = 4;
/// Largest cluster size in bytes that every implementation accepts.
const MAX_CLUSTER: u64 = 32 << 10;
/// Root directory entries of a FAT12/16 volume (mkfs.fat default).
const ROOT_ENTRIES: u64 = 512;
/// Reserved sectors before alignment: boot sector only for FAT12/16; 32 for
/// FAT32 (boot sector, FSInfo, backup boot sector at 6).
const FAT16_MIN_RESERVED: u64 = 1;
const FAT32_MIN_RESERVED: u64 = 32;
const FAT32_FSINFO_SECTOR: u64 = 1;
const FAT32_BACKUP_BOOT_SECTOR: u64 = 6;
/// Media descriptor of a fixed disk.
const MEDIA: u8 = 0xF8;
/// Size of a directory entry.
const DIRENT: usize = 32;
/// Attributes.
const ATTR_VOLUME_ID: u8 = 0x08;
const ATTR_DIRECTORY: u8 = 0x10;
const ATTR_ARCHIVE: u8 = 0x20;
const ATTR_LONG_NAME: u8 = 0x0F;
/// Characters a short (8.3) name may hold besides A-Z and 0-9.
const SFN_SPECIAL: &[u8] = b"$%'-_@~`!(){}^#&";
/// Characters a long name may not hold.
const LFN_FORBIDDEN: &str = "\"*/:<>?\\|";

// ---- the content tree -------------------------------------------------------

enum Data {
    Path(PathBuf, u64),
    Bytes(Vec<u8>),
}

impl Data {
    fn len(&self) -> u64 {
        match self {
            Data::Path(_, n) => *n,
            Data::Bytes(b) => b.len() as u64,
        }
    }
}

enum Node {
    Dir(Dir),
    File(Data),
}

/// A directory: children by upper-cased name (FAT names are case
/// insensitive), each with the name as given.
#[derive(Default)]
struct Dir {
    children: BTreeMap<String, (String, Node)>,
}

fn check_long_name(name: &str) -> Result<()> {
    let units = name.encode_utf16().count();
    if name.is_empty()
        || name == "."
        || name == ".."
        || units > 255
        || name.ends_with('.')
        || name.ends_with(' ')
        || name
            .chars()
            .any(|c| c.is_control() || LFN_FORBIDDEN.contains(c))
    {
        bail!("{name:?} cannot be a FAT file name");
    }
    Ok(())
}

impl Dir {
    /// The subdirectory `name`, created if needed.
    fn subdir(&mut self, name: &str) -> Result<&mut Dir> {
        check_long_name(name)?;
        let key = name.to_uppercase();
        let e = self
            .children
            .entry(key)
            .or_insert_with(|| (name.to_string(), Node::Dir(Dir::default())));
        match &mut e.1 {
            Node::Dir(d) => Ok(d),
            Node::File(_) => bail!("{name} is a file on the ESP, not a directory"),
        }
    }

    /// Add (or replace) a file.
    fn put(&mut self, name: &str, data: Data) -> Result<()> {
        check_long_name(name)?;
        let key = name.to_uppercase();
        if let Some((_, Node::Dir(_))) = self.children.get(&key) {
            bail!("{name} is a directory on the ESP, not a file");
        }
        self.children
            .insert(key, (name.to_string(), Node::File(data)));
        Ok(())
    }

    /// Add the tree at `src` below this directory.
    fn add_tree(&mut self, src: &Path) -> Result<u64> {
        let mut n = 0;
        for e in std::fs::read_dir(src).with_context(|| format!("reading {}", src.display()))? {
            let e = e.with_context(|| format!("reading {}", src.display()))?;
            let p = e.path();
            let name = e.file_name().into_string().map_err(|n| {
                anyhow::anyhow!("file name {n:?} in {} is not UTF-8", src.display())
            })?;
            let md = std::fs::symlink_metadata(&p)
                .with_context(|| format!("inspecting {}", p.display()))?;
            let ft = md.file_type();
            if ft.is_dir() {
                n += self.subdir(&name)?.add_tree(&p)?;
            } else if ft.is_file() {
                if self.children.contains_key(&name.to_uppercase()) {
                    bail!(
                        "{} clashes with another name in {} (FAT names ignore case)",
                        p.display(),
                        src.display()
                    );
                }
                self.put(&name, Data::Path(p, md.len()))?;
                n += 1;
            } else if ft.is_symlink() {
                bail!(
                    "{} is a symlink; FAT has no symlinks, so the ESP cannot hold it",
                    p.display()
                );
            } else {
                bail!(
                    "{} is not a regular file or directory; it cannot go on the ESP",
                    p.display()
                );
            }
        }
        Ok(n)
    }
}

/// Path components of an ESP path (relative, no `..`).
fn components(rel: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for c in Path::new(rel.trim_start_matches('/')).components() {
        match c {
            Component::Normal(n) => out.push(
                n.to_str()
                    .with_context(|| format!("ESP path {rel:?} is not UTF-8"))?
                    .to_string(),
            ),
            Component::CurDir => {}
            _ => bail!("ESP path {rel:?} must be relative, without '..'"),
        }
    }
    if out.is_empty() {
        bail!("empty ESP path");
    }
    Ok(out)
}

// ---- geometry -----------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FatType {
    Fat12,
    Fat16,
    Fat32,
}

impl FatType {
    fn of_clusters(n: u64) -> Self {
        if n <= FAT12_MAX_CLUSTERS {
            FatType::Fat12
        } else if n <= FAT16_MAX_CLUSTERS {
            FatType::Fat16
        } else {
            FatType::Fat32
        }
    }
    fn bits(self) -> u64 {
        match self {
            FatType::Fat12 => 12,
            FatType::Fat16 => 16,
            FatType::Fat32 => 32,
        }
    }
    fn label(self) -> &'static [u8; 8] {
        match self {
            FatType::Fat12 => b"FAT12   ",
            FatType::Fat16 => b"FAT16   ",
            FatType::Fat32 => b"FAT32   ",
        }
    }
    /// End-of-chain marker.
    fn eoc(self) -> u32 {
        match self {
            FatType::Fat12 => 0xFFF,
            FatType::Fat16 => 0xFFFF,
            FatType::Fat32 => 0x0FFF_FFFF,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Geometry {
    fat: FatType,
    sector: u64,
    total_sectors: u64,
    sectors_per_cluster: u64,
    reserved: u64,
    fats: u64,
    fat_sectors: u64,
    root_entries: u64,
    clusters: u64,
}

impl Geometry {
    fn cluster_bytes(&self) -> u64 {
        self.sectors_per_cluster * self.sector
    }
    fn root_sectors(&self) -> u64 {
        (self.root_entries * DIRENT as u64).div_ceil(self.sector)
    }
    fn fat_offset(&self, copy: u64) -> u64 {
        (self.reserved + copy * self.fat_sectors) * self.sector
    }
    fn root_offset(&self) -> u64 {
        self.fat_offset(self.fats)
    }
    fn data_offset(&self) -> u64 {
        self.root_offset() + self.root_sectors() * self.sector
    }
    /// Byte offset of cluster `c` (clusters are numbered from 2).
    fn cluster_offset(&self, c: u32) -> u64 {
        self.data_offset() + (u64::from(c) - 2) * self.cluster_bytes()
    }

    /// mkfs.fat-like geometry for `size` bytes of `sector`-byte sectors.
    fn new(size: u64, sector: u64) -> Result<Self> {
        let total = size / sector;
        if total > u64::from(u32::MAX) {
            bail!("{size} bytes is too large for FAT");
        }
        let spc = if size >= FAT32_FROM {
            let cluster = match size {
                s if s <= 8 << 30 => 4 << 10,
                s if s <= 16 << 30 => 8 << 10,
                s if s <= 32 << 30 => 16 << 10,
                _ => 32 << 10,
            };
            (cluster / sector).max(1)
        } else {
            let mut spc = SMALL_SECTORS_PER_CLUSTER;
            while total / spc > FAT16_MAX_CLUSTERS && spc * sector < MAX_CLUSTER {
                spc *= 2;
            }
            spc
        };
        let mut fat = if size >= FAT32_FROM {
            FatType::Fat32
        } else {
            FatType::of_clusters(total / spc)
        };
        for _ in 0..4 {
            let g = Self::fit(fat, total, sector, spc)?;
            let actual = FatType::of_clusters(g.clusters);
            if actual == fat {
                return Ok(g);
            }
            fat = actual;
        }
        bail!("no FAT type fits {size} bytes with {sector}-byte sectors")
    }

    /// Sizes for a given FAT type: FAT length and reserved sectors rounded
    /// so the data area starts on a cluster boundary, like mkfs.fat.
    fn fit(fat: FatType, total: u64, sector: u64, spc: u64) -> Result<Self> {
        let (min_reserved, root_entries) = match fat {
            FatType::Fat32 => (FAT32_MIN_RESERVED, 0),
            _ => (FAT16_MIN_RESERVED, ROOT_ENTRIES),
        };
        let fats = 2;
        let mut g = Geometry {
            fat,
            sector,
            total_sectors: total,
            sectors_per_cluster: spc,
            reserved: min_reserved,
            fats,
            fat_sectors: 0,
            root_entries,
            clusters: total / spc,
        };
        for _ in 0..16 {
            let fat_bytes = ((g.clusters + 2) * fat.bits()).div_ceil(8);
            g.fat_sectors = fat_bytes.div_ceil(sector).div_ceil(spc) * spc;
            g.reserved = min_reserved;
            while (g.reserved + fats * g.fat_sectors + g.root_sectors()) % spc != 0 {
                g.reserved += 1;
            }
            let meta = g.reserved + fats * g.fat_sectors + g.root_sectors();
            if meta + spc * 16 > total {
                bail!("{} bytes is too small for a FAT filesystem", total * sector);
            }
            let clusters = (total - meta) / spc;
            if clusters == g.clusters {
                break;
            }
            g.clusters = clusters;
        }
        // The FAT must cover every cluster (it may be a little larger).
        if g.fat_sectors * sector * 8 < (g.clusters + 2) * fat.bits() {
            bail!("internal error: FAT too small for {} clusters", g.clusters);
        }
        Ok(g)
    }
}

// ---- names and entries ------------------------------------------------------------

/// DOS date and time of the files: `SOURCE_DATE_EPOCH` when set (UTC), else
/// the FAT epoch 1980-01-01 00:00, so images are reproducible.
fn dos_timestamp() -> (u16, u16) {
    use chrono::{Datelike, Timelike};
    let t = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .and_then(|s| chrono::DateTime::from_timestamp(s, 0))
        .filter(|t| (1980..=2107).contains(&t.year()));
    match t {
        Some(t) => (
            (((t.year() - 1980) as u16) << 9) | ((t.month() as u16) << 5) | t.day() as u16,
            ((t.hour() as u16) << 11) | ((t.minute() as u16) << 5) | (t.second() as u16 / 2),
        ),
        None => ((1 << 5) | 1, 0),
    }
}

fn sfn_char_ok(b: u8) -> bool {
    b.is_ascii_uppercase() || b.is_ascii_digit() || SFN_SPECIAL.contains(&b)
}

/// The 11-byte short name when `name` already is a valid upper-case 8.3
/// name (then no long name is needed).
fn exact_short_name(name: &str) -> Option<[u8; 11]> {
    let (base, ext) = match name.rfind('.') {
        Some(i) => (&name[..i], &name[i + 1..]),
        None => (name, ""),
    };
    if base.is_empty()
        || base.len() > 8
        || ext.len() > 3
        || (name.contains('.') && ext.is_empty())
        || !base.bytes().chain(ext.bytes()).all(sfn_char_ok)
    {
        return None;
    }
    let mut s = [b' '; 11];
    s[..base.len()].copy_from_slice(base.as_bytes());
    s[8..8 + ext.len()].copy_from_slice(ext.as_bytes());
    Some(s)
}

/// A unique short name for a long name (the basis-name and numeric-tail
/// rules of the FAT spec, section 7.4).
fn generated_short_name(name: &str, taken: &std::collections::HashSet<[u8; 11]>) -> [u8; 11] {
    let upper = name.to_uppercase();
    let trimmed = upper.trim_start_matches('.');
    let (base, ext) = match trimmed.rfind('.') {
        Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
        None => (trimmed, ""),
    };
    let mut lossy = trimmed.len() != upper.len();
    let mut clean = |s: &str, max: usize| -> Vec<u8> {
        let mut out = Vec::new();
        for c in s.chars() {
            if c == ' ' || c == '.' {
                lossy = true;
                continue;
            }
            let b = if c.is_ascii() && sfn_char_ok(c as u8) {
                c as u8
            } else {
                lossy = true;
                b'_'
            };
            if out.len() == max {
                lossy = true;
                break;
            }
            out.push(b);
        }
        out
    };
    let b = clean(base, 8);
    let e = clean(ext, 3);
    let make = |base: &[u8]| {
        let mut s = [b' '; 11];
        s[..base.len()].copy_from_slice(base);
        s[8..8 + e.len()].copy_from_slice(&e);
        s
    };
    if !lossy && !b.is_empty() {
        let s = make(&b);
        if !taken.contains(&s) {
            return s;
        }
    }
    let b = if b.is_empty() { b"_".to_vec() } else { b };
    for n in 1u32.. {
        let tail = format!("~{n}");
        let keep = b.len().min(8 - tail.len());
        let mut nb = b[..keep].to_vec();
        nb.extend_from_slice(tail.as_bytes());
        let s = make(&nb);
        if !taken.contains(&s) {
            return s;
        }
    }
    unreachable!()
}

/// Checksum of a short name stored in its long-name entries.
fn sfn_checksum(s: &[u8; 11]) -> u8 {
    s.iter().fold(0u8, |sum, b| {
        ((sum & 1) << 7).wrapping_add(sum >> 1).wrapping_add(*b)
    })
}

fn short_entry(name: &[u8; 11], attr: u8, cluster: u32, size: u32, ts: (u16, u16)) -> [u8; DIRENT] {
    let mut e = [0u8; DIRENT];
    e[0..11].copy_from_slice(name);
    e[11] = attr;
    let (date, time) = ts;
    e[14..16].copy_from_slice(&time.to_le_bytes()); // creation time
    e[16..18].copy_from_slice(&date.to_le_bytes()); // creation date
    e[18..20].copy_from_slice(&date.to_le_bytes()); // last access date
    e[20..22].copy_from_slice(&((cluster >> 16) as u16).to_le_bytes());
    e[22..24].copy_from_slice(&time.to_le_bytes()); // write time
    e[24..26].copy_from_slice(&date.to_le_bytes()); // write date
    e[26..28].copy_from_slice(&(cluster as u16).to_le_bytes());
    e[28..32].copy_from_slice(&size.to_le_bytes());
    e
}

/// The long-name entries for `name`, in on-disk order (last part first).
fn long_entries(name: &str, sfn: &[u8; 11]) -> Vec<[u8; DIRENT]> {
    let mut units: Vec<u16> = name.encode_utf16().collect();
    if units.len() % 13 != 0 {
        units.push(0);
        while units.len() % 13 != 0 {
            units.push(0xFFFF);
        }
    }
    let parts = units.len() / 13;
    let sum = sfn_checksum(sfn);
    let mut out = Vec::new();
    for i in (0..parts).rev() {
        let mut e = [0u8; DIRENT];
        e[0] = (i + 1) as u8 | if i + 1 == parts { 0x40 } else { 0 };
        e[11] = ATTR_LONG_NAME;
        e[13] = sum;
        let chunk = &units[i * 13..i * 13 + 13];
        let put = |e: &mut [u8; DIRENT], at: usize, us: &[u16]| {
            for (k, u) in us.iter().enumerate() {
                e[at + 2 * k..at + 2 * k + 2].copy_from_slice(&u.to_le_bytes());
            }
        };
        put(&mut e, 1, &chunk[0..5]);
        put(&mut e, 14, &chunk[5..11]);
        put(&mut e, 28, &chunk[11..13]);
        out.push(e);
    }
    out
}

/// Number of directory entries a name takes.
fn entries_for(name: &str) -> u64 {
    if exact_short_name(name).is_some() {
        1
    } else {
        1 + (name.encode_utf16().count() as u64).div_ceil(13)
    }
}

// ---- layout and writing ---------------------------------------------------------

/// A contiguous run of clusters holding one directory or file.
struct Alloc {
    first: u32,
    count: u32,
}

/// The volume being written: geometry, the FAT, and the byte writer.
struct Volume<'a> {
    g: Geometry,
    disk: &'a File,
    offset: u64,
    size: u64,
    fat: Vec<u32>,
    next: u32,
    ts: (u16, u16),
}

impl Volume<'_> {
    fn write(&self, at: u64, data: &[u8]) -> Result<()> {
        if at + data.len() as u64 > self.size {
            bail!("internal error: write past the end of the ESP region");
        }
        self.disk
            .write_all_at(data, self.offset + at)
            .context("writing the ESP")
    }

    fn alloc(&mut self, bytes: u64) -> Result<Option<Alloc>> {
        if bytes == 0 {
            return Ok(None);
        }
        let count = bytes.div_ceil(self.g.cluster_bytes());
        let first = u64::from(self.next);
        if first - 2 + count > self.g.clusters {
            bail!(
                "the ESP is full: its {} clusters of {} bytes cannot hold the files",
                self.g.clusters,
                self.g.cluster_bytes()
            );
        }
        for c in first..first + count {
            self.fat[c as usize] = if c + 1 == first + count {
                self.g.fat.eoc()
            } else {
                (c + 1) as u32
            };
        }
        self.next = (first + count) as u32;
        Ok(Some(Alloc {
            first: first as u32,
            count: count as u32,
        }))
    }

    /// Write the directory `dir` at `here` (None = FAT12/16 root region),
    /// allocating and writing its children; returns the root entries.
    fn write_dir(&mut self, dir: &Dir, here: Option<(u32, u32)>, parent: u32) -> Result<Vec<u8>> {
        let mut ents: Vec<u8> = Vec::new();
        if let Some((me, _)) = here {
            ents.extend(short_entry(b".          ", ATTR_DIRECTORY, me, 0, self.ts));
            ents.extend(short_entry(
                b"..         ",
                ATTR_DIRECTORY,
                parent,
                0,
                self.ts,
            ));
        }
        let me = here.map(|h| h.0).unwrap_or(0);
        let mut taken = std::collections::HashSet::new();
        // Exact short names first so generated ones never take them.
        for (name, _) in dir.children.values() {
            if let Some(s) = exact_short_name(name) {
                taken.insert(s);
            }
        }
        for (name, node) in dir.children.values() {
            let (sfn, long) = match exact_short_name(name) {
                Some(s) => (s, false),
                None => {
                    let s = generated_short_name(name, &taken);
                    taken.insert(s);
                    (s, true)
                }
            };
            if long {
                for l in long_entries(name, &sfn) {
                    ents.extend(l);
                }
            }
            match node {
                Node::Dir(sub) => {
                    let bytes = dir_bytes(sub, true);
                    let a = self.alloc(bytes)?.expect("a directory has entries");
                    ents.extend(short_entry(&sfn, ATTR_DIRECTORY, a.first, 0, self.ts));
                    let content = self.write_dir(sub, Some((a.first, a.count)), me)?;
                    debug_assert!(content.is_empty());
                }
                Node::File(data) => {
                    let len = data.len();
                    let size = u32::try_from(len)
                        .with_context(|| format!("{name} is too large for FAT ({len} bytes)"))?;
                    let a = self.alloc(len)?;
                    let first = a.as_ref().map(|a| a.first).unwrap_or(0);
                    ents.extend(short_entry(&sfn, ATTR_ARCHIVE, first, size, self.ts));
                    if let Some(a) = a {
                        self.write_file(data, &a, name)?;
                    }
                }
            }
        }
        match here {
            Some((first, count)) => {
                let cap = u64::from(count) * self.g.cluster_bytes();
                debug_assert!(ents.len() as u64 <= cap);
                ents.resize(cap as usize, 0);
                self.write(self.g.cluster_offset(first), &ents)?;
                Ok(Vec::new())
            }
            None => Ok(ents),
        }
    }

    fn write_file(&self, data: &Data, a: &Alloc, name: &str) -> Result<()> {
        let at = self.g.cluster_offset(a.first);
        let cap = u64::from(a.count) * self.g.cluster_bytes();
        let len = data.len();
        match data {
            Data::Bytes(b) => self.write(at, b)?,
            Data::Path(p, _) => {
                use std::io::Read;
                let mut f = File::open(p).with_context(|| format!("opening {}", p.display()))?;
                let mut buf = vec![0u8; 1 << 20];
                let mut done = 0u64;
                loop {
                    let n = f
                        .read(&mut buf)
                        .with_context(|| format!("reading {}", p.display()))?;
                    if n == 0 {
                        break;
                    }
                    if done + n as u64 > len {
                        bail!("{} grew while it was copied to the ESP", p.display());
                    }
                    self.write(at + done, &buf[..n])?;
                    done += n as u64;
                }
                if done != len {
                    bail!("{} shrank while it was copied to the ESP", p.display());
                }
            }
        }
        // Zero the slack of the last cluster so images are reproducible.
        if cap > len {
            self.write(at + len, &vec![0u8; (cap - len) as usize])
                .with_context(|| format!("writing {name}"))?;
        }
        Ok(())
    }

    fn fat_bytes(&self) -> Vec<u8> {
        let mut b = vec![0u8; (self.g.fat_sectors * self.g.sector) as usize];
        for (n, v) in self.fat.iter().enumerate() {
            match self.g.fat {
                FatType::Fat12 => {
                    let i = n * 3 / 2;
                    let v = (*v & 0xFFF) as u16;
                    if n % 2 == 0 {
                        b[i] = v as u8;
                        b[i + 1] = (b[i + 1] & 0xF0) | (v >> 8) as u8;
                    } else {
                        b[i] = (b[i] & 0x0F) | ((v & 0xF) << 4) as u8;
                        b[i + 1] = (v >> 4) as u8;
                    }
                }
                FatType::Fat16 => b[2 * n..2 * n + 2].copy_from_slice(&(*v as u16).to_le_bytes()),
                FatType::Fat32 => b[4 * n..4 * n + 4].copy_from_slice(&v.to_le_bytes()),
            }
        }
        b
    }

    fn boot_sector(&self, volume_id: u32, label: &[u8; 11]) -> Vec<u8> {
        let g = &self.g;
        let mut s = vec![0u8; g.sector as usize];
        let fat32 = g.fat == FatType::Fat32;
        // Jump over the BPB to the boot code, which only asks the BIOS to
        // try the next device (int 18h) and halts: this volume is not
        // bootable by BIOS.
        let code_at: usize = if fat32 { 0x5A } else { 0x3E };
        s[0..3].copy_from_slice(&[0xEB, (code_at - 2) as u8, 0x90]);
        s[code_at..code_at + 4].copy_from_slice(&[0xCD, 0x18, 0xEB, 0xFE]);
        s[3..11].copy_from_slice(b"MSWIN4.1"); // the OEM name the spec recommends
        s[11..13].copy_from_slice(&(g.sector as u16).to_le_bytes());
        s[13] = g.sectors_per_cluster as u8;
        s[14..16].copy_from_slice(&(g.reserved as u16).to_le_bytes());
        s[16] = g.fats as u8;
        s[17..19].copy_from_slice(&(g.root_entries as u16).to_le_bytes());
        if g.total_sectors < 0x10000 && !fat32 {
            s[19..21].copy_from_slice(&(g.total_sectors as u16).to_le_bytes());
        } else {
            s[32..36].copy_from_slice(&(g.total_sectors as u32).to_le_bytes());
        }
        s[21] = MEDIA;
        if !fat32 {
            s[22..24].copy_from_slice(&(g.fat_sectors as u16).to_le_bytes());
        }
        s[24..26].copy_from_slice(&32u16.to_le_bytes()); // sectors per track (CHS, unused)
        s[26..28].copy_from_slice(&64u16.to_le_bytes()); // heads (CHS, unused)
                                                         // Hidden sectors stay 0, as mkfs.fat writes them on cosa's loop device.
        let ext = if fat32 {
            s[36..40].copy_from_slice(&(g.fat_sectors as u32).to_le_bytes());
            s[44..48].copy_from_slice(&2u32.to_le_bytes()); // root directory cluster
            s[48..50].copy_from_slice(&(FAT32_FSINFO_SECTOR as u16).to_le_bytes());
            s[50..52].copy_from_slice(&(FAT32_BACKUP_BOOT_SECTOR as u16).to_le_bytes());
            0x40
        } else {
            0x24
        };
        s[ext] = 0x80; // drive number: hard disk
        s[ext + 2] = 0x29; // extended boot signature: the next three fields are valid
        s[ext + 3..ext + 7].copy_from_slice(&volume_id.to_le_bytes());
        s[ext + 7..ext + 18].copy_from_slice(label);
        s[ext + 18..ext + 26].copy_from_slice(g.fat.label());
        s[510] = 0x55;
        s[511] = 0xAA;
        s
    }

    fn fsinfo(&self) -> Vec<u8> {
        let mut s = vec![0u8; self.g.sector as usize];
        s[0..4].copy_from_slice(&0x4161_5252u32.to_le_bytes());
        s[484..488].copy_from_slice(&0x6141_7272u32.to_le_bytes());
        let free = self.g.clusters + 2 - u64::from(self.next);
        s[488..492].copy_from_slice(&(free as u32).to_le_bytes());
        s[492..496].copy_from_slice(&self.next.to_le_bytes());
        s[508..512].copy_from_slice(&0xAA55_0000u32.to_le_bytes());
        s
    }
}

/// Bytes of directory entries of `dir` (with `.` and `..` for
/// subdirectories), rounded up to one entry at least.
fn dir_bytes(dir: &Dir, sub: bool) -> u64 {
    let mut n = if sub { 2 } else { 0 };
    for (name, _) in dir.children.values() {
        n += entries_for(name);
    }
    n.max(1) * DIRENT as u64
}

/// The 11-byte FAT volume label: upper case, space padded.
fn fat_label(label: &str) -> Result<[u8; 11]> {
    let up = label.to_ascii_uppercase();
    if up.is_empty() || up.len() > 11 || !up.bytes().all(|b| sfn_char_ok(b) || b == b' ') {
        bail!("'{label}' is not a valid FAT volume label (1-11 characters A-Z 0-9 - _ etc.)");
    }
    let mut l = [b' '; 11];
    l[..up.len()].copy_from_slice(up.as_bytes());
    Ok(l)
}

/// What [`build_esp`] formats.
#[derive(Debug, Clone, Copy)]
pub struct EspOptions<'a> {
    /// Bytes of the filesystem: the region's or the image file's length.
    pub size: u64,
    /// Logical sector size: 512 or 4096.
    pub sector_size: u16,
    pub volume_id: u32,
    /// Volume label, 1-11 characters (stored upper case).
    pub label: &'a str,
    /// The tree copied as `/EFI/`.
    pub efi_src: &'a Path,
    /// Files added after the tree, by path relative to the ESP root (e.g.
    /// `EFI/redhat/grub.cfg`); they replace tree files of the same name.
    pub extra: &'a [(String, Vec<u8>)],
}

/// Where [`build_esp`] writes the filesystem.
#[derive(Debug, Clone, Copy)]
pub enum EspTarget<'a> {
    /// `disk[offset .. offset + size)`: nothing outside the region is
    /// written, free clusters are left as they are, and `disk` is not
    /// synced.
    Region { disk: &'a File, offset: u64 },
    /// A standalone image file of `size` bytes (created or truncated,
    /// sparse, then fsynced), e.g. for the 4K variant or an `efiboot.img`.
    Image(&'a Path),
}

/// Format a FAT filesystem at `target` as `opts` say: the given size,
/// logical sector size, volume id and label, holding the tree `efi_src` as
/// `/EFI/` and then the `extra` files. Only directories and regular files
/// can be copied.
pub fn build_esp(target: EspTarget<'_>, opts: &EspOptions) -> Result<()> {
    match target {
        EspTarget::Region { disk, offset } => format_esp(disk, offset, opts),
        EspTarget::Image(path) => {
            let f = crate::io::create_sized(path, opts.size)?;
            format_esp(&f, 0, opts)
                .with_context(|| format!("building the ESP image {}", path.display()))?;
            f.sync_all()
                .with_context(|| format!("syncing {}", path.display()))?;
            Ok(())
        }
    }
}

/// [`build_esp`] into `disk[offset .. offset + opts.size)`.
fn format_esp(disk: &File, offset: u64, opts: &EspOptions) -> Result<()> {
    let EspOptions {
        size,
        sector_size,
        volume_id,
        label,
        efi_src,
        extra,
    } = *opts;
    if sector_size != 512 && sector_size != 4096 {
        bail!("ESP sector size {sector_size} is not supported (512 or 4096)");
    }
    let ss = u64::from(sector_size);
    if offset % ss != 0 || size % ss != 0 {
        bail!("ESP region {offset}+{size} is not aligned to {sector_size}-byte sectors");
    }
    let label = fat_label(label)?;
    if !efi_src.is_dir() {
        bail!(
            "the OS tree has no EFI directory {} (UEFI boot needs the OS's EFI binaries)",
            efi_src.display()
        );
    }
    let mut root = Dir::default();
    let files = root
        .subdir("EFI")?
        .add_tree(efi_src)
        .with_context(|| format!("reading the OS's EFI tree {}", efi_src.display()))?;
    for (path, data) in extra {
        let parts = components(path)?;
        let (name, dirs) = parts.split_last().expect("non-empty path");
        let mut d = &mut root;
        for p in dirs {
            d = d.subdir(p)?;
        }
        d.put(name, Data::Bytes(data.clone()))
            .with_context(|| format!("adding {path} to the ESP"))?;
    }

    let g = Geometry::new(size, ss)?;
    let mut v = Volume {
        g,
        disk,
        offset,
        size,
        fat: vec![0u32; (g.clusters + 2) as usize],
        next: 2,
        ts: dos_timestamp(),
    };
    v.fat[0] = match g.fat {
        FatType::Fat12 => 0xF00 | u32::from(MEDIA),
        FatType::Fat16 => 0xFF00 | u32::from(MEDIA),
        FatType::Fat32 => 0x0FFF_FF00 | u32::from(MEDIA),
    };
    v.fat[1] = g.fat.eoc();

    // The root directory: the volume label entry first, then the tree.
    let mut root_ents = short_entry(&label, ATTR_VOLUME_ID, 0, 0, v.ts).to_vec();
    if g.fat == FatType::Fat32 {
        let bytes = dir_bytes(&root, false) + DIRENT as u64;
        let a = v.alloc(bytes)?.expect("root has entries");
        // Root entries: label + children, written into the root clusters.
        let mut body = v.write_dir(&root, None, 0)?;
        root_ents.append(&mut body);
        let cap = u64::from(a.count) * g.cluster_bytes();
        root_ents.resize(cap as usize, 0);
        v.write(g.cluster_offset(a.first), &root_ents)?;
    } else {
        let mut body = v.write_dir(&root, None, 0)?;
        root_ents.append(&mut body);
        let cap = g.root_entries * DIRENT as u64;
        if root_ents.len() as u64 > cap {
            bail!(
                "too many names in the ESP root directory (at most {} entries)",
                g.root_entries
            );
        }
        root_ents.resize((g.root_sectors() * ss) as usize, 0);
        v.write(g.root_offset(), &root_ents)?;
    }

    // Reserved area (boot sector, FAT32 FSInfo and backups), then the FATs.
    let mut reserved = vec![0u8; (g.reserved * ss) as usize];
    let boot = v.boot_sector(volume_id, &label);
    reserved[..ss as usize].copy_from_slice(&boot);
    if g.fat == FatType::Fat32 {
        let info = v.fsinfo();
        let at = |s: u64| (s * ss) as usize..((s + 1) * ss) as usize;
        reserved[at(FAT32_FSINFO_SECTOR)].copy_from_slice(&info);
        reserved[at(FAT32_BACKUP_BOOT_SECTOR)].copy_from_slice(&boot);
        reserved[at(FAT32_BACKUP_BOOT_SECTOR + 1)].copy_from_slice(&info);
    }
    v.write(0, &reserved)?;
    let fat = v.fat_bytes();
    for copy in 0..g.fats {
        v.write(g.fat_offset(copy), &fat)?;
    }
    tracing::debug!(
        "ESP: {:?}, {} clusters of {} bytes, {} used; {} files from {} and {} extra",
        g.fat,
        g.clusters,
        g.cluster_bytes(),
        v.next - 2,
        files,
        efi_src.display(),
        extra.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    const MIB: u64 = 1 << 20;
    use std::process::Command;

    const VOLID: u32 = 0x7B77_95E7;

    /// Detaches the loop device when dropped.
    struct Loop(String);
    impl Drop for Loop {
        fn drop(&mut self) {
            let _ = Command::new("losetup").args(["-d", &self.0]).status();
        }
    }

    fn run(prog: &str, args: &[&str]) -> (bool, String) {
        let o = Command::new(prog)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{prog}: {e}"));
        let s = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        (o.status.success(), s)
    }

    /// A fake OS EFI tree shaped like RHCOS's, with pseudo-random contents.
    fn efi_tree(vendor: &str) -> (tempfile::TempDir, Vec<(String, Vec<u8>)>) {
        let d = tempfile::tempdir().unwrap();
        let mut seed = 0x1234_5678u32;
        let mut bytes = |n: usize| -> Vec<u8> {
            (0..n)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 17;
                    seed ^= seed << 5;
                    seed as u8
                })
                .collect()
        };
        let files = vec![
            ("BOOT/BOOTX64.EFI".to_string(), bytes(950_001)),
            ("BOOT/fbx64.efi".to_string(), bytes(86_000)),
            (format!("{vendor}/shimx64.efi"), bytes(950_001)),
            (format!("{vendor}/grubx64.efi"), bytes(2_500_123)),
            (format!("{vendor}/mmx64.efi"), bytes(850_000)),
            (format!("{vendor}/BOOTX64.CSV"), b"s\0h\0i\0m\0".to_vec()),
            (format!("{vendor}/fonts/unicode.pf2"), bytes(2_000)),
            (format!("{vendor}/empty"), vec![]),
        ];
        for (p, data) in &files {
            let full = d.path().join(p);
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            std::fs::write(full, data).unwrap();
        }
        (d, files)
    }

    #[test]
    fn refuses_symlinks_and_bad_input() {
        let (d, _) = efi_tree("testos");
        std::os::unix::fs::symlink("grubx64.efi", d.path().join("testos/link.efi")).unwrap();
        let img = tempfile::NamedTempFile::new().unwrap();
        let e = build_esp(
            EspTarget::Image(img.path()),
            &EspOptions {
                size: 127 * MIB,
                sector_size: 512,
                volume_id: VOLID,
                label: "EFI-SYSTEM",
                efi_src: d.path(),
                extra: &[],
            },
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("symlink"), "{e:#}");
        let (d, _) = efi_tree("testos");
        for (ss, label, extra) in [
            (1024u16, "EFI-SYSTEM", "x"),
            (512, "MUCH-TOO-LONG-LABEL", "x"),
            (512, "EFI-SYSTEM", "../escape"),
        ] {
            let r = build_esp(
                EspTarget::Image(img.path()),
                &EspOptions {
                    size: 127 * MIB,
                    sector_size: ss,
                    volume_id: VOLID,
                    label,
                    efi_src: d.path(),
                    extra: &[(extra.to_string(), vec![1])],
                },
            );
            assert!(r.is_err(), "{ss} {label} {extra}");
        }
    }

    /// Build into the middle of a sparse disk and read it back with
    /// dosfstools, mtools and blkid, for both sector sizes.
    #[test]
    #[cfg_attr(
        not(feature = "privileged"),
        ignore = "needs root: a loop device (--features privileged)"
    )]
    fn esp_reads_back_with_independent_tools() {
        for tool in ["minfo", "mcopy", "mdir", "blkid", "fsck.fat"] {
            assert!(
                crate::util::cmd::have(tool),
                "{tool} is needed for this test"
            );
        }
        for ss in [512u16, 4096] {
            let (src, files) = efi_tree("testos");
            let disk = tempfile::NamedTempFile::new().unwrap();
            let f = disk.as_file();
            let (off, size) = (2 * MIB, 127 * MIB);
            f.set_len(200 * MIB).unwrap();
            // Sentinels right outside the region must survive.
            f.write_at(&[0xAA], off - 1).unwrap();
            f.write_at(&[0xBB], off + size).unwrap();
            let stub = b"configfile $prefix/grub.cfg\n".to_vec();
            let extra = vec![
                ("EFI/testos/grub.cfg".to_string(), stub.clone()),
                ("/EFI/BOOT/fbx64.efi".to_string(), b"replaced".to_vec()),
            ];
            let opts = EspOptions {
                size,
                sector_size: ss,
                volume_id: VOLID,
                label: "EFI-SYSTEM",
                efi_src: src.path(),
                extra: &extra,
            };
            build_esp(
                EspTarget::Region {
                    disk: f,
                    offset: off,
                },
                &opts,
            )
            .unwrap();
            let mut b = [0u8; 1];
            f.read_at(&mut b, off - 1).unwrap();
            assert_eq!(b[0], 0xAA);
            f.read_at(&mut b, off + size).unwrap();
            assert_eq!(b[0], 0xBB);

            let img = format!("{}@@{}", disk.path().display(), off);
            let (ok, out) = run("minfo", &["-i", &img, "::"]);
            assert!(ok, "{out}");
            assert!(out.contains(&format!("sector size: {ss} bytes")), "{out}");
            assert!(out.contains("serial number: 7B7795E7"), "{out}");
            assert!(out.contains("disk label=\"EFI-SYSTEM \""), "{out}");
            assert!(out.contains("disk type=\"FAT16   \""), "{out}");
            assert!(out.contains("cluster size: 4 sectors"), "{out}");

            let (ok, out) = run("mdir", &["-/", "-b", "-i", &img, "::"]);
            assert!(ok, "{out}");
            for p in [
                "::/EFI/BOOT/BOOTX64.EFI",
                "::/EFI/testos/grubx64.efi",
                "::/EFI/testos/grub.cfg",
            ] {
                assert!(out.contains(p), "{p} missing in\n{out}");
            }
            let tmp = tempfile::tempdir().unwrap();
            let mut want: Vec<(String, Vec<u8>)> = files
                .iter()
                .filter(|(p, _)| p != "BOOT/fbx64.efi")
                .map(|(p, d)| (format!("EFI/{p}"), d.clone()))
                .collect();
            want.push(("EFI/testos/grub.cfg".into(), stub));
            want.push(("EFI/BOOT/fbx64.efi".into(), b"replaced".to_vec()));
            for (p, data) in &want {
                let out_path = tmp.path().join("f");
                let _ = std::fs::remove_file(&out_path);
                let (ok, out) = run(
                    "mcopy",
                    &[
                        "-n",
                        "-i",
                        &img,
                        &format!("::/{p}"),
                        out_path.to_str().unwrap(),
                    ],
                );
                assert!(ok, "mcopy {p}: {out}");
                assert!(
                    std::fs::read(&out_path).unwrap() == *data,
                    "{p} differs (ss {ss})"
                );
            }

            let (ok, out) = run(
                "blkid",
                &["-p", "-O", &off.to_string(), disk.path().to_str().unwrap()],
            );
            assert!(ok, "{out}");
            for want in [
                "TYPE=\"vfat\"",
                "LABEL=\"EFI-SYSTEM\"",
                "UUID=\"7B77-95E7\"",
            ] {
                assert!(out.contains(want), "{want} not in {out}");
            }

            // fsck.fat and blkid through a loop device with the same logical
            // sector size, as the kernel would see the partition.
            let o = Command::new("losetup")
                .args(["--find", "--show", "--offset", &off.to_string()])
                .args([
                    "--sizelimit",
                    &size.to_string(),
                    "--sector-size",
                    &ss.to_string(),
                ])
                .arg(disk.path())
                .output()
                .unwrap();
            assert!(
                o.status.success(),
                "losetup (needs root): {}",
                String::from_utf8_lossy(&o.stderr)
            );
            let dev = Loop(String::from_utf8(o.stdout).unwrap().trim().to_string());
            let (ok, out) = run("fsck.fat", &["-n", "-v", &dev.0]);
            assert!(ok, "fsck.fat: {out}");
            assert!(
                out.contains(&format!("{ss} bytes per logical sector")),
                "{out}"
            );
            assert!(!out.to_lowercase().contains("differ"), "{out}");
            let (ok, out) = run("blkid", &["-p", &dev.0]);
            assert!(ok && out.contains("UUID=\"7B77-95E7\""), "{out}");
            drop(dev);
        }
    }

    #[test]
    fn standalone_file_and_geometry() {
        let (src, _) = efi_tree("redhat");
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("esp.img");
        let opts = EspOptions {
            size: 127 * MIB,
            sector_size: 512,
            volume_id: VOLID,
            label: "EFI-SYSTEM",
            efi_src: src.path(),
            extra: &[],
        };
        build_esp(EspTarget::Image(&p), &opts).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 127 * MIB);
        let (ok, out) = run("fsck.fat", &["-n", "-v", p.to_str().unwrap()]);
        assert!(ok, "{out}");
        assert!(out.contains("2048 bytes per cluster"), "{out}");
        assert!(out.contains("16 bit entries"), "{out}");
        // Builds are reproducible.
        let a = std::fs::read(&p).unwrap();
        build_esp(EspTarget::Image(&p), &opts).unwrap();
        assert!(a == std::fs::read(&p).unwrap(), "two builds differ");
        // A big ESP falls back to FAT32.
        let opts = EspOptions {
            size: 600 * MIB,
            ..opts
        };
        build_esp(EspTarget::Image(&p), &opts).unwrap();
        let (ok, out) = run("fsck.fat", &["-n", "-v", p.to_str().unwrap()]);
        assert!(ok && out.contains("32 bit entries"), "{out}");
    }

    #[test]
    fn short_names_follow_the_fat_rules() {
        let mut taken = std::collections::HashSet::new();
        assert_eq!(exact_short_name("BOOTX64.EFI"), Some(*b"BOOTX64 EFI"));
        assert_eq!(exact_short_name("EFI"), Some(*b"EFI        "));
        for n in [
            "grubx64.efi",
            "a.b.c",
            "LONGERNAME.EFI",
            "X.EFIX",
            "A B",
            "A.",
        ] {
            assert_eq!(exact_short_name(n), None, "{n}");
        }
        let g = generated_short_name("grubx64.efi", &taken);
        assert_eq!(&g, b"GRUBX64 EFI");
        taken.insert(g);
        assert_eq!(&generated_short_name("GrubX64.efi", &taken), b"GRUBX6~1EFI");
        assert_eq!(
            &generated_short_name("my file.tar.gz", &taken),
            b"MYFILE~1GZ "
        );
        assert_eq!(&generated_short_name(".hidden", &taken), b"HIDDEN~1   ");
        assert_eq!(&generated_short_name("grüße.cfg", &taken), b"GR_SSE~1CFG");
        // Long-name entries: 13 UTF-16 units each, last one flagged 0x40.
        let l = long_entries("grubx64.efi", b"GRUBX64 EFI");
        assert_eq!(l.len(), 1);
        assert_eq!(l[0][0], 0x41);
        assert_eq!(l[0][11], ATTR_LONG_NAME);
        assert_eq!(l[0][13], sfn_checksum(b"GRUBX64 EFI"));
        assert_eq!(long_entries(&"x".repeat(26), b"X~1        ").len(), 2);
        assert!(check_long_name("a:b").is_err() && check_long_name("..").is_err());
    }

    #[test]
    fn geometry_matches_mkfs_fat() {
        // mkfs.fat 4.2 on 127 MiB: FAT16, 4 reserved, 4 sectors per cluster.
        let g = Geometry::new(127 * MIB, 512).unwrap();
        assert_eq!(
            (g.fat, g.reserved, g.sectors_per_cluster),
            (FatType::Fat16, 4, 4)
        );
        assert_eq!((g.fat_sectors, g.clusters), (256, 64887));
        let g = Geometry::new(127 * MIB, 4096).unwrap();
        assert_eq!(
            (g.fat, g.reserved, g.sectors_per_cluster),
            (FatType::Fat16, 4, 4)
        );
        assert_eq!((g.fat_sectors, g.clusters), (4, 8124));
        assert_eq!(Geometry::new(16 * MIB, 4096).unwrap().fat, FatType::Fat12);
        assert_eq!(Geometry::new(600 * MIB, 512).unwrap().fat, FatType::Fat32);
        assert!(Geometry::new(64 << 10, 4096).is_err());
    }

    /// FAT12 and small FAT16 volumes, a directory spanning several
    /// clusters, odd names; checked with fsck.fat and mtools.
    #[test]
    fn small_and_crowded_volumes() {
        let src = tempfile::tempdir().unwrap();
        let crowd = src.path().join("vendor/crowd");
        std::fs::create_dir_all(&crowd).unwrap();
        for i in 0..150 {
            std::fs::write(crowd.join(format!("file-number-{i}.txt")), format!("{i}\n")).unwrap();
        }
        for n in [
            "grüße.cfg",
            ".hidden",
            "multi.dot.name.efi",
            "grubx64.efi",
            "GrubX64.EFI.bak",
        ] {
            std::fs::write(src.path().join("vendor").join(n), n.as_bytes()).unwrap();
        }
        std::fs::create_dir_all(src.path().join("a/b/c/d")).unwrap();
        std::fs::write(src.path().join("a/b/c/d/deep.efi"), vec![7u8; 70_000]).unwrap();
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("small.img");
        for (size, ss, bits) in [
            (4 * MIB, 512u16, "12"),
            (20 * MIB, 512, "16"),
            (16 * MIB, 4096, "12"),
        ] {
            let opts = EspOptions {
                size,
                sector_size: ss,
                volume_id: VOLID,
                label: "efi-boot",
                efi_src: src.path(),
                extra: &[],
            };
            build_esp(EspTarget::Image(&p), &opts).unwrap();
            let (ok, out) = run("fsck.fat", &["-n", "-v", p.to_str().unwrap()]);
            assert!(ok, "{out}");
            assert!(out.contains(&format!("{bits} bit entries")), "{out}");
            let img = p.to_str().unwrap();
            let (ok, out) = run("mdir", &["-/", "-b", "-i", img, "::"]);
            assert!(ok, "{out}");
            assert_eq!(
                out.matches("::/EFI/vendor/crowd/file-number-").count(),
                150,
                "{out}"
            );
            for n in [
                "grüße.cfg",
                ".hidden",
                "multi.dot.name.efi",
                "GrubX64.EFI.bak",
            ] {
                assert!(out.contains(&format!("::/EFI/vendor/{n}")), "{n} in {out}");
            }
            let (ok, out) = run("minfo", &["-i", img, "::"]);
            assert!(ok && out.contains("disk label=\"EFI-BOOT   \""), "{out}");
            let o = d.path().join("deep");
            let _ = std::fs::remove_file(&o);
            let (ok, out) = run(
                "mcopy",
                &[
                    "-n",
                    "-i",
                    img,
                    "::/EFI/a/b/c/d/deep.efi",
                    o.to_str().unwrap(),
                ],
            );
            assert!(ok, "{out}");
            assert_eq!(std::fs::read(&o).unwrap(), vec![7u8; 70_000]);
        }
        // Content that does not fit is an error, not a broken filesystem.
        std::fs::write(src.path().join("big.bin"), vec![1u8; 5 << 20]).unwrap();
        let opts = EspOptions {
            size: 4 * MIB,
            sector_size: 512,
            volume_id: VOLID,
            label: "EFI",
            efi_src: src.path(),
            extra: &[],
        };
        let e = build_esp(EspTarget::Image(&p), &opts).unwrap_err();
        assert!(format!("{e:#}").contains("ESP is full"), "{e:#}");
    }
}
