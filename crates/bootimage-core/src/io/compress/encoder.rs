//! [`Encoder`]: one worker's compressor of whole chunks. A chunk in, one
//! complete gzip member, xz stream or zstd frame out, so the pieces can be
//! concatenated in order into a valid file. Holds the xz dictionary sizing.
use super::compressor::Compressor;
use crate::io::deflate::Deflater;
use anyhow::{bail, Context, Result};
use std::io::Write;

/// Largest LZMA2 dictionary used. The encoder needs about 11.5 times its
/// dictionary with the BT4 match finder of levels 5-9 (xz(1): `-6`, 8 MiB,
/// 94 MiB; `-9`, 64 MiB, 674 MiB), so an xz worker stays near 100 MiB;
/// levels 6-9, which differ only in dictionary size, become one. Measured
/// on 300 MiB of shared libraries with 2 threads: peak RSS 526 MiB and
/// 69,154,692 bytes with a 16 MiB dictionary, 299 MiB and 69,666,624 bytes
/// (+0.7%) with 8 MiB; `xz -9 -T2`: 1712 MiB and 67,433,096 bytes.
const XZ_MAX_DICT: u32 = 8 << 20;
/// LZMA2 dictionary sizes of the xz presets 0-9 (xz(1), "Presets").
const XZ_PRESET_DICT: [u32; 10] = [
    256 << 10,
    1 << 20,
    2 << 20,
    4 << 20,
    4 << 20,
    8 << 20,
    8 << 20,
    16 << 20,
    32 << 20,
    64 << 20,
];

/// One chunk's encoder; each worker owns one.
pub(super) enum Encoder {
    Gzip(Box<Deflater>),
    Xz { level: u32, chunk: usize },
    Zstd(Box<zstd::bulk::Compressor<'static>>),
}

impl Encoder {
    /// `precompressed`: the input is already compressed data
    /// ([`DiskView::precompressed`](crate::io::view::DiskView::precompressed));
    /// gzip then uses zlib's run-length strategy, which only codes runs
    /// (the padding around compressed blocks) and Huffman-codes the rest:
    /// the size of a full match search on such input, at several times its
    /// speed.
    pub(super) fn new(
        kind: Compressor,
        level: u32,
        chunk: usize,
        precompressed: bool,
    ) -> Result<Self> {
        Ok(match kind {
            Compressor::Gzip => Encoder::Gzip(Box::new(if precompressed {
                Deflater::gzip_rle(level)
            } else {
                Deflater::gzip(level)
            })),
            Compressor::Xz => Encoder::Xz { level, chunk },
            Compressor::Zstd => {
                let mut c = zstd::bulk::Compressor::new(level as i32)
                    .context("creating a zstd compressor")?;
                // Like the zstd tool: content size in the header, and an
                // xxhash64 of the content that `zstd -t` and `-d` check.
                c.set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(true))?;
                c.set_parameter(zstd::zstd_safe::CParameter::ContentSizeFlag(true))?;
                Encoder::Zstd(Box::new(c))
            }
            Compressor::None => bail!("no encoder for uncompressed output"),
        })
    }

    /// `data` as one complete gzip member / xz stream / zstd frame.
    pub(super) fn compress(&mut self, data: &[u8]) -> Result<Vec<u8>> {
        match self {
            Encoder::Gzip(z) => z.compress_vec(data),
            Encoder::Xz { level, chunk } => {
                let dict = XZ_PRESET_DICT[*level as usize]
                    .min(XZ_MAX_DICT)
                    .min(u32::try_from(*chunk).unwrap_or(u32::MAX))
                    // liblzma's minimum dictionary is 4 KiB.
                    .max(4096);
                let mut opts = xz2::stream::LzmaOptions::new_preset(*level)?;
                opts.dict_size(dict);
                let mut filters = xz2::stream::Filters::new();
                filters.lzma2(&opts);
                let stream =
                    xz2::stream::Stream::new_stream_encoder(&filters, xz2::stream::Check::Crc64)?;
                let buf = Vec::with_capacity(out_bound(data.len()));
                let mut e = xz2::write::XzEncoder::new_stream(buf, stream);
                e.write_all(data)?;
                Ok(e.finish()?)
            }
            Encoder::Zstd(c) => Ok(c.compress(data)?),
        }
    }
}

/// Capacity reserved for one compressed chunk: enough for incompressible
/// input (deflate and LZMA2 add well under 1% plus headers), so the buffer
/// never grows by copying. Pages never written cost no memory.
fn out_bound(len: usize) -> usize {
    len + len / 64 + 4096
}
