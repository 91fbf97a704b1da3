//! An xz writer for data that is mostly zeros (the packed image of an osmet
//! file: the free space of the root filesystem). One xz stream of
//! independent blocks (xz file format 1.0.4, tukaani.org `xz-file-format`:
//! stream header, blocks, index, stream footer), each block `BLOCK` bytes
//! of input compressed with liblzma at preset 9; a block of zeros is
//! compressed once and its bytes reused, so gigabytes of zeros cost
//! nothing while the data between them gets upstream's best preset. Any
//! xz reader reads it (coreos-installer reads one stream with
//! `xz2::bufread::XzDecoder`).
use anyhow::{ensure, Context, Result};
use std::io::Write;

/// The input is looked at in units of this size: a unit of zeros becomes
/// one (cached) block of its own.
pub const BLOCK: usize = 1 << 20;
/// Consecutive units with data are compressed together, up to this size
/// (so that repeats within them, e.g. the EFI binaries on the ESP, are
/// found).
pub const DATA_BLOCK_MAX: usize = 16 << 20;
/// liblzma preset for each block (coreos-installer `pack osmet` uses 9);
/// the dictionary is capped to the block size (a block is independent).
pub const PRESET: u32 = 9;

const MAGIC: [u8; 6] = [0xfd, b'7', b'z', b'X', b'Z', 0];
const FOOTER_MAGIC: [u8; 2] = *b"YZ";

fn varint(w: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        w.push((n as u8) | 0x80);
        n >>= 7;
    }
    w.push(n as u8);
}

fn read_varint(b: &[u8], at: &mut usize) -> Result<u64> {
    let mut n = 0u64;
    for i in 0..9 {
        let x = *b.get(*at).context("xz index truncated")?;
        *at += 1;
        n |= ((x & 0x7f) as u64) << (7 * i);
        if x & 0x80 == 0 {
            return Ok(n);
        }
    }
    anyhow::bail!("xz varint too long")
}

/// One compressed block: its bytes (padded to 4, with the check), the
/// unpadded size and the input size, for the index.
struct Block {
    bytes: Vec<u8>,
    unpadded: u64,
    uncompressed: u64,
}

/// Compress `data` as a one-block stream with liblzma and take the block
/// out of it (and its stream flags).
fn compress_block(data: &[u8]) -> Result<(Block, [u8; 2])> {
    let mut opts = xz2::stream::LzmaOptions::new_preset(PRESET).context("lzma preset")?;
    opts.dict_size((data.len() as u32).clamp(4096, 64 << 20));
    let mut filters = xz2::stream::Filters::new();
    filters.lzma2(&opts);
    let stream = xz2::stream::Stream::new_stream_encoder(&filters, xz2::stream::Check::Crc64)
        .context("xz encoder")?;
    let mut e = xz2::write::XzEncoder::new_stream(Vec::new(), stream);
    e.write_all(data)?;
    let s = e.finish()?;
    ensure!(
        s.len() >= 24 && s[..6] == MAGIC,
        "liblzma gave no xz stream"
    );
    let flags = [s[6], s[7]];
    let n = s.len();
    ensure!(s[n - 2..] == FOOTER_MAGIC, "xz stream without footer");
    let backward = u32::from_le_bytes(s[n - 8..n - 4].try_into().expect("4")) as usize;
    let index_len = (backward + 1) * 4;
    let index_at = n - 12 - index_len;
    let mut at = index_at + 1;
    ensure!(
        s[index_at] == 0 && read_varint(&s, &mut at)? == 1,
        "not a one-block xz stream"
    );
    let unpadded = read_varint(&s, &mut at)?;
    let uncompressed = read_varint(&s, &mut at)?;
    ensure!(uncompressed == data.len() as u64, "xz block size mismatch");
    let bytes = s[12..index_at].to_vec();
    ensure!(
        bytes.len() as u64 == unpadded.next_multiple_of(4),
        "xz block padding"
    );
    Ok((
        Block {
            bytes,
            unpadded,
            uncompressed,
        },
        flags,
    ))
}

/// The writer: [`Write`] the data, then [`XzBlocks::finish`].
pub struct XzBlocks<W: Write> {
    out: W,
    /// The unit being filled.
    buf: Vec<u8>,
    /// Units with data, not compressed yet.
    pending: Vec<u8>,
    records: Vec<(u64, u64)>,
    zero: Option<Block>,
    /// The stream flags, once the header is written.
    flags: Option<[u8; 2]>,
    total_in: u64,
    total_out: u64,
}

impl<W: Write> XzBlocks<W> {
    pub fn new(out: W) -> Self {
        XzBlocks {
            out,
            buf: Vec::with_capacity(BLOCK),
            pending: Vec::new(),
            records: Vec::new(),
            zero: None,
            flags: None,
            total_in: 0,
            total_out: 0,
        }
    }

    fn put(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.out.write_all(b)?;
        self.total_out += b.len() as u64;
        Ok(())
    }

    fn header(&mut self, flags: [u8; 2]) -> std::io::Result<()> {
        if self.flags.is_none() {
            self.flags = Some(flags);
            let mut h = MAGIC.to_vec();
            h.extend_from_slice(&flags);
            h.extend_from_slice(&crc32fast::hash(&flags).to_le_bytes());
            self.put(&h)?;
        }
        Ok(())
    }

    fn emit(&mut self, b: &Block) -> Result<()> {
        self.put(&b.bytes)?;
        self.records.push((b.unpadded, b.uncompressed));
        self.total_in += b.uncompressed;
        Ok(())
    }

    /// Compress the pending data as one block.
    fn flush_pending(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let (b, flags) = compress_block(&self.pending)?;
        self.header(flags)?;
        self.emit(&b)?;
        self.pending.clear();
        Ok(())
    }

    /// A full unit: zeros go out as the cached zero block, data joins the
    /// pending block.
    fn flush_block(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        if self.buf.len() == BLOCK && crate::io::buffers::is_zero(&self.buf) {
            self.flush_pending()?;
            let z = match self.zero.take() {
                Some(z) => z,
                None => {
                    let (z, flags) = compress_block(&self.buf)?;
                    self.header(flags)?;
                    z
                }
            };
            self.emit(&z)?;
            self.zero = Some(z);
        } else {
            self.pending.extend_from_slice(&self.buf);
            if self.pending.len() >= DATA_BLOCK_MAX {
                self.flush_pending()?;
            }
        }
        self.buf.clear();
        Ok(())
    }

    /// Write the last block, the index and the footer.
    pub fn finish(mut self) -> Result<(W, u64, u64)> {
        self.flush_block()?;
        self.flush_pending()?;
        if self.flags.is_none() {
            // No data: an empty stream, flags for CRC64.
            self.header([0, 0x04])?;
        }
        let flags = self.flags.expect("header written");
        let mut idx = vec![0u8];
        varint(&mut idx, self.records.len() as u64);
        for (u, c) in &self.records {
            varint(&mut idx, *u);
            varint(&mut idx, *c);
        }
        while idx.len() % 4 != 0 {
            idx.push(0);
        }
        let crc = crc32fast::hash(&idx);
        idx.extend_from_slice(&crc.to_le_bytes());
        let backward = (idx.len() / 4 - 1) as u32;
        let mut foot = Vec::with_capacity(12);
        let mut tail = backward.to_le_bytes().to_vec();
        tail.extend_from_slice(&flags);
        foot.extend_from_slice(&crc32fast::hash(&tail).to_le_bytes());
        foot.extend_from_slice(&tail);
        foot.extend_from_slice(&FOOTER_MAGIC);
        self.put(&idx)?;
        self.put(&foot)?;
        self.out.flush()?;
        Ok((self.out, self.total_in, self.total_out))
    }
}

impl<W: Write> Write for XzBlocks<W> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let n = (BLOCK - self.buf.len()).min(data.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == BLOCK {
            self.flush_block().map_err(std::io::Error::other)?;
        }
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn roundtrip(data: &[u8]) -> Vec<u8> {
        let mut w = XzBlocks::new(Vec::new());
        for c in data.chunks(1 << 20) {
            w.write_all(c).unwrap();
        }
        let (xz, tin, tout) = w.finish().unwrap();
        assert_eq!(tin, data.len() as u64);
        assert_eq!(tout, xz.len() as u64);
        // A single-stream reader, as coreos-installer's.
        let mut back = Vec::new();
        xz2::bufread::XzDecoder::new(&xz[..])
            .read_to_end(&mut back)
            .unwrap();
        assert_eq!(back, data);
        // And the xz tool checks it too.
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t.xz");
        std::fs::write(&p, &xz).unwrap();
        let ok = std::process::Command::new("xz")
            .arg("-t")
            .arg(&p)
            .status()
            .unwrap();
        assert!(ok.success());
        xz
    }

    #[test]
    fn zeros_and_data_round_trip() {
        let mut data = vec![0u8; 3 * BLOCK + 12345];
        for (i, b) in data[BLOCK + 100..BLOCK + 300_000].iter_mut().enumerate() {
            *b = (i * 7 % 251) as u8;
        }
        let xz = roundtrip(&data);
        assert!(xz.len() < 200_000, "{}", xz.len());
        roundtrip(b"");
        roundtrip(b"hello");
    }
}
