//! `coreos/miniso.dat` (docs/contract.md §5.1): what lets `coreos-installer iso extract
//! minimal-iso` rebuild the minimal ISO (the same ISO without
//! `images/pxeboot/rootfs.img`, for `coreos.live.rootfs_url=`) from the full
//! one. The format is coreos-installer's (`src/miniso.rs`), the code here is
//! our own:
//!
//! - a header: magic `MINISO\0\0`, version 1, the writer's version;
//! - a table of byte ranges of the minimal ISO that are found in the full
//!   ISO (`minimal` and `full` ISO sector numbers, `length` in bytes),
//!   sorted, not overlapping;
//! - the minimal ISO's sha256, and the minimal ISO with those ranges left
//!   out, xz-compressed.
//!
//! bincode 1 with coreos-installer's options, as for osmet (see
//! [`super::osmet`]); the whole must fit the 16 KiB file reserved in the
//! ISO (osbuild `MINISO_DATA_FILE_SIZE`).
//!
//! Upstream (`coreos-installer pack minimal-iso`) matches ISO9660 files by
//! path. So do we, and we also match the copy of `images/efiboot.img` that
//! our hybrid layout appends after the ISO9660 volume as the GPT/MBR EFI
//! partition (upstream's `isohybrid --uefi` points the partition into the
//! file instead): without it the minimal ISO's EFI image would have to be
//! xz'd into the 16 KiB.
use anyhow::{bail, ensure, Context, Result};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

// miniso.dat is bincode 1 with varint integers, as osmet is.
use super::osmet::varint;

/// coreos-installer `src/miniso.rs` `HEADER_MAGIC`, `HEADER_VERSION`.
pub const MAGIC: [u8; 8] = *b"MINISO\0\0";
pub const VERSION: u32 = 1;
/// Size of `coreos/miniso.dat` (osbuild `MINISO_DATA_FILE_SIZE`).
pub const DATA_FILE_SIZE: u64 = 16 * 1024;
/// Where it sits in the ISO, and its primary (8.3) name.
pub const DATA_FILE: &str = "coreos/miniso.dat";
pub const DATA_FILE_ISO9660: &str = "COREOS/MINISO.DAT;1";
const SECTOR: u64 = 2048;

/// A file of an ISO9660 volume (primary directory tree).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IsoFile {
    pub sector: u32,
    pub length: u32,
}

/// The files of the primary volume of `f`, by path (`DIR/NAME.EXT;1`).
pub fn iso_files(f: &std::fs::File) -> Result<BTreeMap<String, IsoFile>> {
    let mut pvd = [0u8; SECTOR as usize];
    f.read_exact_at(&mut pvd, 16 * SECTOR)
        .context("reading the primary volume descriptor")?;
    ensure!(
        pvd[0] == 1 && &pvd[1..6] == b"CD001",
        "no ISO9660 primary volume descriptor at sector 16"
    );
    let root = &pvd[156..190];
    let mut out = BTreeMap::new();
    let mut stack = vec![(
        String::new(),
        u32::from_le_bytes(root[2..6].try_into().expect("4")),
        u32::from_le_bytes(root[10..14].try_into().expect("4")),
    )];
    let mut seen = std::collections::HashSet::new();
    while let Some((prefix, sector, len)) = stack.pop() {
        ensure!(
            seen.insert(sector),
            "directory at sector {sector} appears twice"
        );
        let mut d = vec![0u8; len as usize];
        f.read_exact_at(&mut d, sector as u64 * SECTOR)
            .with_context(|| format!("reading directory {prefix:?}"))?;
        let mut i = 0usize;
        while i < d.len() {
            let rl = d[i] as usize;
            if rl == 0 {
                i = (i / SECTOR as usize + 1) * SECTOR as usize;
                continue;
            }
            let r = d.get(i..i + rl).context("directory record truncated")?;
            ensure!(rl >= 34, "directory record too short");
            let nl = r[32] as usize;
            let name = r
                .get(33..33 + nl)
                .context("directory record name truncated")?;
            let at = u32::from_le_bytes(r[2..6].try_into().expect("4"));
            let size = u32::from_le_bytes(r[10..14].try_into().expect("4"));
            let flags = r[25];
            i += rl;
            if name == [0] || name == [1] {
                continue;
            }
            let path = format!("{prefix}{}", String::from_utf8_lossy(name));
            if flags & 0x02 != 0 {
                stack.push((format!("{path}/"), at, size));
            } else {
                ensure!(
                    flags & 0x80 == 0,
                    "{path} spans several extents; not supported"
                );
                out.insert(
                    path,
                    IsoFile {
                        sector: at,
                        length: size,
                    },
                );
            }
        }
    }
    Ok(out)
}

/// One range of the minimal ISO found in the full one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Entry {
    pub minimal: u32,
    pub full: u32,
    pub length: u32,
}

/// The EFI partitions (MBR type 0xEF) of a hybrid ISO: byte offset, length.
fn mbr_efi_partitions(f: &std::fs::File) -> Result<Vec<(u64, u64)>> {
    let mut mbr = [0u8; 512];
    f.read_exact_at(&mut mbr, 0).context("reading the MBR")?;
    if mbr[510..512] != [0x55, 0xaa] {
        return Ok(Vec::new());
    }
    Ok((0..4)
        .map(|i| &mbr[446 + 16 * i..446 + 16 * (i + 1)])
        .filter(|e| e[4] == 0xef)
        .map(|e| {
            let lba = u32::from_le_bytes(e[8..12].try_into().expect("4")) as u64;
            let n = u32::from_le_bytes(e[12..16].try_into().expect("4")) as u64;
            (lba * 512, n * 512)
        })
        .collect())
}

fn same_bytes(
    a: &std::fs::File,
    a_at: u64,
    b: &std::fs::File,
    b_at: u64,
    len: u64,
) -> Result<bool> {
    let mut x = vec![0u8; 1 << 20];
    let mut y = vec![0u8; 1 << 20];
    let mut done = 0u64;
    while done < len {
        let n = ((len - done) as usize).min(x.len());
        a.read_exact_at(&mut x[..n], a_at + done)?;
        b.read_exact_at(&mut y[..n], b_at + done)?;
        if x[..n] != y[..n] {
            return Ok(false);
        }
        done += n as u64;
    }
    Ok(true)
}

/// The table: every file of the minimal ISO at its place in the full one,
/// and the appended EFI partition at the full ISO's `images/efiboot.img`.
pub fn table(full: &std::fs::File, minimal: &std::fs::File) -> Result<Vec<Entry>> {
    let ff = iso_files(full).context("reading the full ISO's directory tree")?;
    let mf = iso_files(minimal).context("reading the minimal ISO's directory tree")?;
    let mut v = Vec::new();
    for (path, m) in &mf {
        let f = ff
            .get(path)
            .with_context(|| format!("{path} of the minimal ISO is not in the full ISO"))?;
        ensure!(
            f.length == m.length,
            "{path} has {} bytes in the full ISO and {} in the minimal one",
            f.length,
            m.length
        );
        v.push(Entry {
            minimal: m.sector,
            full: f.sector,
            length: m.length,
        });
    }
    let files_end = mf
        .values()
        .map(|f| f.sector as u64 * SECTOR + f.length as u64)
        .max()
        .unwrap_or(0);
    for (at, len) in mbr_efi_partitions(minimal)? {
        if at < files_end || at % SECTOR != 0 {
            continue;
        }
        for f in ff.values() {
            let flen = f.length as u64;
            if flen == 0 || flen > len {
                continue;
            }
            if same_bytes(minimal, at, full, f.sector as u64 * SECTOR, flen)? {
                v.push(Entry {
                    minimal: u32::try_from(at / SECTOR).context("ISO too large")?,
                    full: f.sector,
                    length: f.length,
                });
                break;
            }
        }
    }
    v.retain(|e| e.length > 0);
    v.sort();
    v.dedup();
    for w in v.windows(2) {
        ensure!(
            w[0].minimal as u64 * SECTOR + w[0].length as u64 <= w[1].minimal as u64 * SECTOR,
            "ranges at sectors {} and {} of the minimal ISO overlap",
            w[0].minimal,
            w[1].minimal
        );
    }
    ensure!(
        !v.is_empty(),
        "the minimal and the full ISO have no file in common"
    );
    Ok(v)
}

/// What a pack did.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub entries: usize,
    pub matched: u64,
    pub packed: u64,
    pub packed_xz: u64,
    pub data_size: u64,
}

/// `miniso.dat` for `minimal` against `full`: header, table, digest, xz.
pub fn pack(full: &Path, minimal: &Path, app_version: &str) -> Result<(Vec<u8>, Stats)> {
    let ff = std::fs::File::open(full).with_context(|| format!("opening {}", full.display()))?;
    let mut mf =
        std::fs::File::open(minimal).with_context(|| format!("opening {}", minimal.display()))?;
    let entries = table(&ff, &mf)?;
    let mut h = Sha256::new();
    std::io::copy(&mut mf, &mut h).with_context(|| format!("reading {}", minimal.display()))?;
    let digest = h.finalize();
    mf.rewind()?;
    let len = mf.metadata()?.len();
    let mut xz = xz2::write::XzEncoder::new(Vec::new(), 9);
    let mut st = Stats {
        entries: entries.len(),
        ..Default::default()
    };
    let mut pos = 0u64;
    let copy =
        |mf: &mut std::fs::File, xz: &mut xz2::write::XzEncoder<Vec<u8>>, n: u64| -> Result<()> {
            let c = std::io::copy(&mut mf.take(n), xz)?;
            ensure!(c == n, "minimal ISO shorter than expected");
            Ok(())
        };
    for e in &entries {
        let at = e.minimal as u64 * SECTOR;
        copy(&mut mf, &mut xz, at - pos)?;
        st.packed += at - pos;
        mf.seek(SeekFrom::Current(e.length as i64))?;
        st.matched += e.length as u64;
        pos = at + e.length as u64;
    }
    copy(&mut mf, &mut xz, len - pos)?;
    st.packed += len - pos;
    let packed = xz.finish().context("finishing the xz stream")?;
    st.packed_xz = packed.len() as u64;
    let mut w = Vec::new();
    w.extend_from_slice(&MAGIC);
    varint(&mut w, VERSION as u64);
    varint(&mut w, app_version.len() as u64);
    w.extend_from_slice(app_version.as_bytes());
    varint(&mut w, entries.len() as u64);
    for e in &entries {
        varint(&mut w, e.minimal as u64);
        varint(&mut w, e.full as u64);
        varint(&mut w, e.length as u64);
    }
    w.extend_from_slice(&digest);
    varint(&mut w, packed.len() as u64);
    w.extend_from_slice(&packed);
    st.data_size = w.len() as u64;
    // Check that it rebuilds the minimal ISO before anyone relies on it.
    let mut un = xz2::read::XzDecoder::new(&packed[..]);
    let mut h = Sha256::new();
    let mut pos = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    for e in &entries {
        let at = e.minimal as u64 * SECTOR;
        let n = std::io::copy(&mut (&mut un).take(at - pos), &mut h)?;
        ensure!(n == at - pos, "packed minimal ISO too short");
        let mut left = e.length as u64;
        let mut src = e.full as u64 * SECTOR;
        while left > 0 {
            let n = (left as usize).min(buf.len());
            ff.read_exact_at(&mut buf[..n], src)?;
            h.update(&buf[..n]);
            src += n as u64;
            left -= n as u64;
        }
        pos = at + e.length as u64;
    }
    std::io::copy(&mut un, &mut h)?;
    ensure!(
        h.finalize() == digest,
        "the miniso data does not rebuild the minimal ISO"
    );
    Ok((w, st))
}

/// Write `data` into `coreos/miniso.dat` of the ISO `full` (its 16 KiB are
/// reserved when the ISO is made).
pub fn embed(full: &Path, data: &[u8]) -> Result<()> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(full)
        .with_context(|| format!("opening {}", full.display()))?;
    let files = iso_files(&f)?;
    let e = files
        .get(DATA_FILE_ISO9660)
        .with_context(|| format!("{} has no {DATA_FILE}", full.display()))?;
    if data.len() as u64 > e.length as u64 {
        bail!(
            "the minimal ISO data takes {} bytes, more than the {} of {DATA_FILE}: the minimal ISO differs too much from the full one",
            data.len(),
            e.length
        );
    }
    let mut padded = data.to_vec();
    padded.resize(e.length as usize, 0);
    f.write_all_at(&padded, e.sector as u64 * SECTOR)?;
    f.sync_all()?;
    let _ = (&f).flush();
    Ok(())
}
