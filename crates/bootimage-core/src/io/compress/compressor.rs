//! [`Compressor`]: the compression kinds of released disk images (none,
//! gzip, xz, zstd), their names as `image.json` spells them, file
//! extensions, default levels and level ranges, and the size of the
//! independently compressed chunks each kind is cut into.
use anyhow::{anyhow, Result};

pub(super) const MIB: usize = 1 << 20;
/// gzip chunk: deflate's window is 32 KiB, so a new member every 4 MiB
/// loses ~0.03% against one member (measured on 128 MiB of shared
/// libraries: 39,629,957 vs 39,616,802 bytes at 16 MiB chunks).
const GZIP_CHUNK: usize = 4 * MIB;
/// zstd chunk: level 10 has a window of several MiB; 8 MiB chunks cost ~1%
/// against one frame (4 MiB: 2.3%, 16 MiB: 0.4%), for half the buffer
/// memory of 16 MiB.
const ZSTD_CHUNK: usize = 8 * MIB;
/// xz chunk. Sizes of 128 MiB of shared libraries at level 9, in chunks
/// (chunk/dictionary) against one stream (25,518,664 bytes): 16/16 MiB
/// +2.9%, 32/8 MiB +2.7%, 32/16 MiB +2.1%, 64/16 MiB +1.0%, 64/64 MiB
/// +0.2%. A fresh stream's probability models cost more than a smaller
/// dictionary, so chunks are larger than the dictionary; 32 MiB keeps the
/// buffers in flight (`threads + 2` chunks) small next to the encoders.
const XZ_CHUNK: usize = 32 * MIB;

/// Compression applied to a released disk image.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Compressor {
    None,
    Gzip,
    Xz,
    Zstd,
}

impl Compressor {
    pub const ALL: [Compressor; 4] = [
        Compressor::None,
        Compressor::Gzip,
        Compressor::Xz,
        Compressor::Zstd,
    ];

    /// Parse `none`, `gzip`, `xz` or `zstd` (the names of `image.json`'s
    /// `compressor`).
    pub fn parse(s: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| anyhow!("unknown compressor {s:?}: valid are none, gzip, xz, zstd"))
    }

    pub fn name(&self) -> &'static str {
        match self {
            Compressor::None => "none",
            Compressor::Gzip => "gzip",
            Compressor::Xz => "xz",
            Compressor::Zstd => "zstd",
        }
    }

    /// File name extension added to compressed artifacts, without the dot.
    pub fn extension(&self) -> Option<&'static str> {
        match self {
            Compressor::None => None,
            Compressor::Gzip => Some("gz"),
            Compressor::Xz => Some("xz"),
            Compressor::Zstd => Some("zst"),
        }
    }

    /// The compressor whose extension ends `path` (`None` if no known one
    /// does).
    pub fn of_file(path: &str) -> Compressor {
        Self::ALL
            .into_iter()
            .find(|c| {
                c.extension()
                    .is_some_and(|e| path.strip_suffix(e).is_some_and(|p| p.ends_with('.')))
            })
            .unwrap_or(Compressor::None)
    }

    /// Default level. gzip 6 and xz 9 are what RHCOS and FCOS publish with
    /// (cosa `image.json`: `gzip -6`, `xz -9`). zstd 10 runs at about the
    /// speed of `gzip -6` and writes ~13% less (300 MiB of shared libraries,
    /// 2 threads: 87 vs 65 MiB/s, 87.9 vs 100.9 MB); pass 3 for speed
    /// (380 MiB/s, 97.8 MB) or 19 for size.
    pub fn default_level(&self) -> u32 {
        match self {
            Compressor::None => 0,
            Compressor::Gzip => 6,
            Compressor::Xz => 9,
            Compressor::Zstd => 10,
        }
    }

    /// Levels accepted by [`compress_view`](super::compress_view) (the ranges
    /// of the CLI tools).
    pub fn levels(&self) -> std::ops::RangeInclusive<u32> {
        match self {
            Compressor::None => 0..=0,
            Compressor::Gzip => 1..=9,
            Compressor::Xz => 0..=9,
            Compressor::Zstd => 1..=22,
        }
    }

    /// The independent-chunk size used for this kind (0 for `None`).
    pub fn chunk_size(&self) -> usize {
        match self {
            Compressor::None => 0,
            Compressor::Gzip => GZIP_CHUNK,
            Compressor::Xz => XZ_CHUNK,
            Compressor::Zstd => ZSTD_CHUNK,
        }
    }
}

impl std::fmt::Display for Compressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Compressor {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        Self::parse(s)
    }
}
