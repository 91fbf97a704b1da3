//! VHDX (dynamic) writer: cosa's `hyperv` artifact (`platform.hyperv.ipp.yaml`:
//! osbuild `org.osbuild.qemu` format `vhdx`, i.e. `qemu-img convert -O vhdx`
//! with its defaults: a dynamic disk, 512-byte logical sectors).
//!
//! Every structure below is from Microsoft's [MS-VHDX] specification, v1:
//!
//! ```text
//! 0        file type identifier ("vhdxfile" + creator)
//! 64 KiB   header 1, 128 KiB header 2 ("head", CRC-32C, sequence number)
//! 192 KiB  region table 1, 256 KiB region table 2 ("regi": BAT, metadata)
//! 1 MiB    log (1 MiB, empty: LogGuid zero means nothing to replay)
//! 2 MiB    metadata region ("metadata" table + 5 items)
//! 3 MiB    BAT (payload block entries, a sector-bitmap entry after each
//!          chunk, zero as there is no parent)
//! ...      payload blocks, 1 MiB aligned, only those holding data
//! ```
//!
//! All integers are little-endian; GUIDs in the Windows mixed-endian layout.
use crate::io::buffers::is_zero;
use crate::io::sparse::clamped_extents;
use crate::io::view::DiskView;
use anyhow::{ensure, Context, Result};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::Path;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
/// Payload block size: Hyper-V's default for dynamic disks (32 MiB).
pub const BLOCK_SIZE: u64 = 32 * MIB;
pub const LOGICAL_SECTOR: u64 = 512;
pub const PHYSICAL_SECTOR: u64 = 4096;
/// Structure offsets and sizes (MS-VHDX 2.1).
const HEADER1: u64 = 64 * KIB;
const HEADER2: u64 = 128 * KIB;
const HEADER_SIZE: usize = 4 * KIB as usize;
const REGION1: u64 = 192 * KIB;
const REGION2: u64 = 256 * KIB;
const REGION_SIZE: usize = 64 * KIB as usize;
const LOG_OFFSET: u64 = MIB;
const LOG_LENGTH: u64 = MIB;
const METADATA_OFFSET: u64 = 2 * MIB;
const METADATA_LENGTH: u64 = MIB;
const BAT_OFFSET: u64 = 3 * MIB;
/// Metadata items start 64 KiB into the region (MS-VHDX 2.6.1.2).
const METADATA_ITEMS: u64 = 64 * KIB;
/// BAT entry states (MS-VHDX 2.5.1.1).
const PAYLOAD_BLOCK_FULLY_PRESENT: u64 = 6;
/// Region and metadata item GUIDs (MS-VHDX 2.3.1.1, 2.6.2).
const BAT_GUID: &str = "2DC27766-F623-4200-9D64-115E9BFD4A08";
const METADATA_GUID: &str = "8B7CA206-4790-4B9A-B8FE-575F050F886E";
const FILE_PARAMETERS: &str = "CAA16737-FA36-4D43-B3B6-33F0AA44E76B";
const VIRTUAL_DISK_SIZE: &str = "2FA54224-CD1B-4876-B211-5DBED83BF4B8";
const PAGE83_DATA: &str = "BECA12AB-B2E6-4523-93EF-C309E000C746";
const LOGICAL_SECTOR_SIZE: &str = "8141BF1D-A96F-4709-BA47-F233A8FAAB5F";
const PHYSICAL_SECTOR_SIZE: &str = "CDA348C7-445D-4471-9CC9-E9885251C556";
/// Metadata entry flags: IsVirtualDisk (bit 1), IsRequired (bit 2).
const MD_VIRTUAL_DISK: u32 = 1 << 1;
const MD_REQUIRED: u32 = 1 << 2;

/// What [`write_vhdx`] produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VhdxStats {
    pub virtual_size: u64,
    pub blocks_written: u64,
    pub file_size: u64,
}

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as VHDX uses.
fn crc32c(data: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut t = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 {
                    (c >> 1) ^ 0x82F6_3B78
                } else {
                    c >> 1
                };
                k += 1;
            }
            t[i] = c;
            i += 1;
        }
        t
    };
    let mut c = !0u32;
    for &b in data {
        c = TABLE[((c ^ b as u32) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

fn guid(s: &str) -> [u8; 16] {
    uuid::Uuid::parse_str(s)
        .expect("a GUID constant")
        .to_bytes_le()
}

/// Write `view` as a dynamic VHDX at `out` (created or truncated, fsynced;
/// the caller renames). Blocks holding only zeros are left out. The
/// identifiers are derived from the content, so the output is reproducible.
pub fn write_vhdx(
    view: &dyn DiskView,
    out: &Path,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<VhdxStats> {
    let file = File::create(out).with_context(|| format!("creating VHDX {}", out.display()))?;
    let s =
        write(view, &file, progress).with_context(|| format!("writing VHDX {}", out.display()))?;
    file.sync_all()
        .with_context(|| format!("syncing VHDX {}", out.display()))?;
    Ok(s)
}

fn write(view: &dyn DiskView, file: &File, progress: &(dyn Fn(u64) + Sync)) -> Result<VhdxStats> {
    let layout = Layout::of(view.len())?;
    let mut w = BufWriter::with_capacity(4 << 20, file);
    let payload = write_payload(view, &mut w, &layout, progress)?;
    let ids = identifiers(&payload.bat, layout.virtual_size);
    at(&mut w, 0, &file_identifier())?;
    // Headers: the one with the higher sequence number is current.
    for (off, seq) in [(HEADER1, 0u64), (HEADER2, 1u64)] {
        at(&mut w, off, &header(seq, &ids))?;
    }
    // Region tables (two identical copies).
    let rt = region_table(layout.bat_len);
    at(&mut w, REGION1, &rt)?;
    at(&mut w, REGION2, &rt)?;
    // The log: zeros.
    at(&mut w, LOG_OFFSET, &vec![0u8; LOG_LENGTH as usize])?;
    at(
        &mut w,
        METADATA_OFFSET,
        &metadata(layout.virtual_size, &ids[2]),
    )?;
    at(&mut w, BAT_OFFSET, &payload.bat)?;
    w.flush()?;
    drop(w);
    // The file ends after the last payload block (or the BAT).
    file.set_len(payload.next)?;
    Ok(VhdxStats {
        virtual_size: layout.virtual_size,
        blocks_written: payload.written,
        file_size: payload.next,
    })
}

/// Where the BAT and the payload go, from the disk's size.
struct Layout {
    /// The disk's size, rounded up to a logical sector.
    virtual_size: u64,
    /// Payload blocks per sector-bitmap entry.
    chunk_ratio: u64,
    bat_len: u64,
    /// The first payload block's offset, right after the BAT.
    data_start: u64,
}

impl Layout {
    fn of(len: u64) -> Result<Layout> {
        let virtual_size = len
            .checked_next_multiple_of(LOGICAL_SECTOR)
            .context("disk size overflows")?;
        ensure!(virtual_size > 0, "cannot write an empty disk as VHDX");
        let blocks = virtual_size.div_ceil(BLOCK_SIZE);
        // Payload blocks per sector-bitmap entry (MS-VHDX 2.5: chunk ratio).
        let chunk_ratio = ((1u64 << 23) * LOGICAL_SECTOR) / BLOCK_SIZE;
        let bat_entries = blocks + (blocks - 1) / chunk_ratio;
        let bat_len = (bat_entries * 8).next_multiple_of(MIB);
        let data_start = BAT_OFFSET + bat_len;
        Ok(Layout {
            virtual_size,
            chunk_ratio,
            bat_len,
            data_start,
        })
    }
}

/// What [`write_payload`] left: the BAT, where the file ends, and how
/// many blocks it holds.
struct Payload {
    bat: Vec<u8>,
    next: u64,
    written: u64,
}

/// Write the payload blocks from `layout.data_start` on and fill the BAT
/// entries that place them.
fn write_payload(
    view: &dyn DiskView,
    w: &mut BufWriter<&File>,
    layout: &Layout,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Payload> {
    let Layout {
        virtual_size,
        chunk_ratio,
        bat_len,
        data_start,
    } = *layout;
    // Payload: every block with a non-zero byte, in order.
    let mut bat = vec![0u8; bat_len as usize];
    w.seek(SeekFrom::Start(data_start))?;
    let mut next = data_start;
    let mut buf = vec![0u8; BLOCK_SIZE as usize];
    let mut written = 0u64;
    let mut last_block = None;
    for r in clamped_extents(view).context("mapping the disk's data")? {
        for b in r.start / BLOCK_SIZE..r.end.div_ceil(BLOCK_SIZE) {
            if last_block.is_some_and(|l| b <= l) {
                continue;
            }
            last_block = Some(b);
            crate::util::cancel::check()?;
            let pos = b * BLOCK_SIZE;
            buf.fill(0);
            let n = (virtual_size - pos).min(BLOCK_SIZE) as usize;
            view.read_at(&mut buf[..n], pos)
                .with_context(|| format!("reading the disk at offset {pos}"))?;
            progress(pos + n as u64);
            if is_zero(&buf) {
                continue;
            }
            w.write_all(&buf)?;
            let i = (b + b / chunk_ratio) as usize;
            let e = ((next / MIB) << 20) | PAYLOAD_BLOCK_FULLY_PRESENT;
            bat[i * 8..i * 8 + 8].copy_from_slice(&e.to_le_bytes());
            next += BLOCK_SIZE;
            written += 1;
        }
    }
    Ok(Payload { bat, next, written })
}

/// Identifiers from the content: the BAT and the size. Three GUIDs:
/// FileWriteGuid, DataWriteGuid, the page 83 data.
fn identifiers(bat: &[u8], virtual_size: u64) -> Vec<[u8; 16]> {
    let id = Sha256::new()
        .chain_update(bat)
        .chain_update(virtual_size.to_le_bytes())
        .finalize();
    (0..3u8)
        .map(|k| {
            let mut g = [0u8; 16];
            g.copy_from_slice(&Sha256::new().chain_update(id).chain_update([k]).finalize()[..16]);
            // A version 4, RFC 4122 variant GUID.
            g[7] = (g[7] & 0x0f) | 0x40;
            g[8] = (g[8] & 0x3f) | 0x80;
            g
        })
        .collect()
}

/// Write `data` at `off`.
fn at(w: &mut BufWriter<&File>, off: u64, data: &[u8]) -> Result<()> {
    w.seek(SeekFrom::Start(off))?;
    w.write_all(data)?;
    Ok(())
}

/// File type identifier.
fn file_identifier() -> Vec<u8> {
    let mut ident = vec![0u8; 64 * KIB as usize];
    ident[..8].copy_from_slice(b"vhdxfile");
    for (i, u) in concat!("bootimage-gen ", env!("CARGO_PKG_VERSION"))
        .encode_utf16()
        .enumerate()
    {
        ident[8 + 2 * i..10 + 2 * i].copy_from_slice(&u.to_le_bytes());
    }
    ident
}

/// The header with sequence number `seq`, its checksum filled in. LogGuid
/// (48..64) stays zero: no log to replay.
fn header(seq: u64, ids: &[[u8; 16]]) -> Vec<u8> {
    let mut h = vec![0u8; HEADER_SIZE];
    h[..4].copy_from_slice(b"head");
    h[8..16].copy_from_slice(&seq.to_le_bytes());
    h[16..32].copy_from_slice(&ids[0]); // FileWriteGuid
    h[32..48].copy_from_slice(&ids[1]); // DataWriteGuid
    h[64..66].copy_from_slice(&0u16.to_le_bytes()); // LogVersion
    h[66..68].copy_from_slice(&1u16.to_le_bytes()); // Version
    h[68..72].copy_from_slice(&(LOG_LENGTH as u32).to_le_bytes());
    h[72..80].copy_from_slice(&LOG_OFFSET.to_le_bytes());
    let c = crc32c(&h);
    h[4..8].copy_from_slice(&c.to_le_bytes());
    h
}

/// The region table: the BAT and the metadata region, both required.
fn region_table(bat_len: u64) -> Vec<u8> {
    let mut rt = vec![0u8; REGION_SIZE];
    rt[..4].copy_from_slice(b"regi");
    rt[8..12].copy_from_slice(&2u32.to_le_bytes());
    for (i, (g, off, len)) in [
        (BAT_GUID, BAT_OFFSET, bat_len),
        (METADATA_GUID, METADATA_OFFSET, METADATA_LENGTH),
    ]
    .into_iter()
    .enumerate()
    {
        let e = &mut rt[16 + 32 * i..48 + 32 * i];
        e[..16].copy_from_slice(&guid(g));
        e[16..24].copy_from_slice(&off.to_le_bytes());
        e[24..28].copy_from_slice(&(len as u32).to_le_bytes());
        e[28..32].copy_from_slice(&1u32.to_le_bytes()); // Required
    }
    let c = crc32c(&rt);
    rt[4..8].copy_from_slice(&c.to_le_bytes());
    rt
}

/// Metadata: table, then the items from 64 KiB on.
fn metadata(virtual_size: u64, page83: &[u8; 16]) -> Vec<u8> {
    let mut md = vec![0u8; METADATA_LENGTH as usize];
    md[..8].copy_from_slice(b"metadata");
    let mut items: Vec<(&str, Vec<u8>, u32)> = vec![
        (
            FILE_PARAMETERS,
            [(BLOCK_SIZE as u32).to_le_bytes(), 0u32.to_le_bytes()].concat(),
            MD_REQUIRED,
        ),
        (
            VIRTUAL_DISK_SIZE,
            virtual_size.to_le_bytes().to_vec(),
            MD_VIRTUAL_DISK | MD_REQUIRED,
        ),
        (PAGE83_DATA, page83.to_vec(), MD_VIRTUAL_DISK | MD_REQUIRED),
    ];
    items.push((
        LOGICAL_SECTOR_SIZE,
        (LOGICAL_SECTOR as u32).to_le_bytes().to_vec(),
        MD_VIRTUAL_DISK | MD_REQUIRED,
    ));
    items.push((
        PHYSICAL_SECTOR_SIZE,
        (PHYSICAL_SECTOR as u32).to_le_bytes().to_vec(),
        MD_VIRTUAL_DISK | MD_REQUIRED,
    ));
    md[10..12].copy_from_slice(&(items.len() as u16).to_le_bytes());
    let mut off = METADATA_ITEMS;
    for (i, (g, data, flags)) in items.iter().enumerate() {
        let e = &mut md[32 + 32 * i..64 + 32 * i];
        e[..16].copy_from_slice(&guid(g));
        e[16..20].copy_from_slice(&(off as u32).to_le_bytes());
        e[20..24].copy_from_slice(&(data.len() as u32).to_le_bytes());
        e[24..28].copy_from_slice(&flags.to_le_bytes());
        md[off as usize..off as usize + data.len()].copy_from_slice(data);
        off += data.len() as u64;
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::view::FileView;
    use crate::util::cmd;
    use std::os::unix::fs::FileExt;

    #[test]
    fn crc32c_known_value() {
        // RFC 3720 B.4: 32 bytes of zeros.
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    }

    /// qemu-img reads it as vhdx (check: no errors), with the raw disk's
    /// bytes and size.
    #[test]
    fn qemu_img_reads_it_back() {
        let d = tempfile::tempdir().unwrap();
        let raw = d.path().join("d.raw");
        let f = File::create(&raw).unwrap();
        let size = 100 * MIB + 4096;
        f.set_len(size).unwrap();
        f.write_all_at(&[0x5a; 70_000], 3 * MIB + 7).unwrap();
        f.write_all_at(&[0xa5; 4096], 40 * MIB).unwrap();
        f.write_all_at(&[1; 4096], size - 4096).unwrap();
        drop(f);
        let out = d.path().join("d.vhdx");
        let s = write_vhdx(&FileView::open(&raw).unwrap(), &out, &|_| {}).unwrap();
        assert_eq!(s.blocks_written, 3);
        let (r, o) = (raw.to_str().unwrap(), out.to_str().unwrap());
        let info: serde_json::Value = serde_json::from_slice(
            &cmd::run(&mut cmd::new(
                "qemu-img",
                ["info", "--output=json", "-f", "vhdx", o],
            ))
            .unwrap(),
        )
        .unwrap();
        assert_eq!(info["format"], "vhdx", "{info}");
        assert_eq!(info["virtual-size"], size, "{info}");
        cmd::run(&mut cmd::new("qemu-img", ["check", "-f", "vhdx", o])).unwrap();
        cmd::run(&mut cmd::new(
            "qemu-img",
            ["compare", "-f", "raw", "-F", "vhdx", r, o],
        ))
        .unwrap();
    }
}
