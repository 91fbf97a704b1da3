//! Read-only views of a disk image: a sparse file, or a base image with some
//! byte ranges replaced by other files ("base + delta extents"). Encoders read
//! views, so a derived platform never copies the whole base disk.
use anyhow::{ensure, Context, Result};
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// A disk image as encoders see it. Bytes not covered by
/// [`DiskView::data_extents`] read as zeros.
pub trait DiskView: Sync + Send {
    /// Guest-visible size in bytes.
    fn len(&self) -> u64;
    /// Fill `buf` from `offset`; holes and bytes past the end read as zeros.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()>;
    /// Sorted, non-overlapping ranges that may hold non-zero data. May
    /// over-approximate (a range may contain zeros), never under-approximate.
    fn data_extents(&self) -> Result<Vec<Range<u64>>>;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Where the bytes of `r` come from, when they are shared between
    /// outputs (the unchanged regions of a base disk): a tag naming the
    /// source and the offset of `r` in it. Two views that give the same
    /// `(tag, offset)` for ranges of the same length hold the same bytes
    /// there, so work on them can be reused between outputs. `None`: not
    /// shared.
    fn shared_source(&self, _r: Range<u64>) -> Option<(u64, u64)> {
        None
    }
    /// The content is already compressed (a VMDK's grains): a compressor
    /// should not search it for matches.
    fn precompressed(&self) -> bool {
        false
    }
}

/// A whole (possibly sparse) file as a disk.
#[derive(Debug)]
pub struct FileView {
    file: File,
    path: PathBuf,
    len: u64,
}

impl FileView {
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        let len = file
            .metadata()
            .with_context(|| format!("reading size of {}", path.display()))?
            .len();
        Ok(FileView {
            file,
            path: path.to_owned(),
            len,
        })
    }
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl DiskView for FileView {
    fn len(&self) -> u64 {
        self.len
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        read_file_at(&self.file, buf, offset)
            .with_context(|| format!("reading {} at {offset}", self.path.display()))
    }
    fn data_extents(&self) -> Result<Vec<Range<u64>>> {
        file_extents(&self.file, 0..self.len)
            .with_context(|| format!("mapping data of {}", self.path.display()))
    }
}

/// Fill `buf` from `offset` of `file`; bytes past its end read as zeros.
pub fn read_file_at(file: &File, buf: &mut [u8], offset: u64) -> Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => {
                buf[done..].fill(0);
                break;
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Data extents of `file` within `range`, from `SEEK_DATA`/`SEEK_HOLE`.
pub fn file_extents(file: &File, range: Range<u64>) -> Result<Vec<Range<u64>>> {
    let fd = file.as_raw_fd();
    let mut out = Vec::new();
    let mut pos = range.start;
    while pos < range.end {
        // SAFETY: lseek on a valid, borrowed descriptor; pread is used for I/O.
        let data = unsafe { libc::lseek(fd, pos as libc::off_t, libc::SEEK_DATA) };
        if data < 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::ENXIO) {
                break;
            }
            return Err(err).context(format!("lseek(SEEK_DATA) at {pos}"));
        }
        let data = data as u64;
        if data >= range.end {
            break;
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, data as libc::off_t, libc::SEEK_HOLE) };
        if hole < 0 {
            return Err(std::io::Error::last_os_error())
                .context(format!("lseek(SEEK_HOLE) at {data}"));
        }
        let end = (hole as u64).min(range.end);
        out.push(data..end);
        pos = end;
    }
    Ok(out)
}

/// One replaced range: bytes `[at, at+len)` of the disk come from `file`
/// starting at `file_offset` (past its end: zeros).
#[derive(Debug)]
pub struct Patch {
    pub at: u64,
    pub len: u64,
    pub file: File,
    pub file_offset: u64,
    pub what: String,
}

impl Patch {
    /// The whole of `path` placed at `at`, covering `len` bytes.
    pub fn from_file(path: &Path, at: u64, len: u64) -> Result<Self> {
        let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        Ok(Patch {
            at,
            len,
            file,
            file_offset: 0,
            what: path.display().to_string(),
        })
    }
    fn range(&self) -> Range<u64> {
        self.at..self.at + self.len
    }
}

/// A base disk with ranges replaced by patches, and a possibly different
/// size (the base is cut or zero-extended).
pub struct Composite<'a> {
    base: &'a dyn DiskView,
    len: u64,
    patches: Vec<Patch>,
    tag: Option<u64>,
}

impl<'a> Composite<'a> {
    pub fn new(base: &'a dyn DiskView, len: u64, mut patches: Vec<Patch>) -> Result<Self> {
        patches.sort_by_key(|p| p.at);
        for w in patches.windows(2) {
            ensure!(
                w[0].at + w[0].len <= w[1].at,
                "overlapping disk patches {} and {}",
                w[0].what,
                w[1].what
            );
        }
        if let Some(last) = patches.last() {
            ensure!(
                last.at + last.len <= len,
                "patch {} ends past the disk",
                last.what
            );
        }
        Ok(Composite {
            base,
            len,
            patches,
            tag: None,
        })
    }

    /// Declare the base's unchanged ranges shared under `tag` (see
    /// [`DiskView::shared_source`]): every composite over the same base disk
    /// must use the same tag, and no other base may use it.
    pub fn shared(mut self, tag: u64) -> Self {
        self.tag = Some(tag);
        self
    }
}

impl DiskView for Composite<'_> {
    fn len(&self) -> u64 {
        self.len
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let mut pos = offset;
        let end = offset + buf.len() as u64;
        while pos < end {
            let out = &mut buf[(pos - offset) as usize..];
            // The patch covering pos, or the next one after it.
            let next = self.patches.iter().find(|p| p.at + p.len > pos);
            match next {
                Some(p) if p.at <= pos => {
                    let n = (p.at + p.len).min(end) - pos;
                    let dst = &mut out[..n as usize];
                    read_file_at(&p.file, dst, p.file_offset + (pos - p.at))
                        .with_context(|| format!("reading {} at {}", p.what, pos - p.at))?;
                    pos += n;
                }
                other => {
                    let stop = other.map_or(end, |p| p.at.min(end));
                    let n = stop - pos;
                    let dst = &mut out[..n as usize];
                    if pos >= self.len.min(self.base.len()) {
                        dst.fill(0);
                    } else {
                        let m = (self.base.len() - pos).min(n);
                        self.base.read_at(&mut dst[..m as usize], pos)?;
                        dst[m as usize..].fill(0);
                    }
                    pos += n;
                }
            }
        }
        Ok(())
    }
    fn shared_source(&self, r: Range<u64>) -> Option<(u64, u64)> {
        let tag = self.tag?;
        let inside = r.end <= self.base.len().min(self.len);
        let untouched = self
            .patches
            .iter()
            .all(|p| p.at + p.len <= r.start || p.at >= r.end);
        (inside && untouched).then_some((tag, r.start))
    }
    fn data_extents(&self) -> Result<Vec<Range<u64>>> {
        let mut all: Vec<Range<u64>> = Vec::new();
        // Base extents with the patched ranges cut out.
        for r in self.base.data_extents()? {
            let r = r.start..r.end.min(self.len);
            if r.start >= r.end {
                continue;
            }
            let mut pieces = vec![r];
            for p in &self.patches {
                let pr = p.range();
                pieces = pieces
                    .into_iter()
                    .flat_map(|q| {
                        let mut v = Vec::new();
                        if q.start < pr.start {
                            v.push(q.start..q.end.min(pr.start));
                        }
                        if q.end > pr.end {
                            v.push(q.start.max(pr.end)..q.end);
                        }
                        v
                    })
                    .filter(|q| q.start < q.end)
                    .collect();
            }
            all.extend(pieces);
        }
        for p in &self.patches {
            let flen = p.file.metadata().context("patch size")?.len();
            let fr = p.file_offset..(p.file_offset + p.len).min(flen.max(p.file_offset));
            for e in file_extents(&p.file, fr)? {
                all.push(p.at + (e.start - p.file_offset)..p.at + (e.end - p.file_offset));
            }
        }
        all.sort_by_key(|r| r.start);
        // Merge touching ranges.
        let mut merged: Vec<Range<u64>> = Vec::new();
        for r in all {
            match merged.last_mut() {
                Some(m) if m.end >= r.start => m.end = m.end.max(r.end),
                _ => merged.push(r),
            }
        }
        Ok(merged)
    }
}

/// An encoded file (a qcow2) that holds blocks of a shared source at
/// known places: block `i` of `blocks` is the `align` bytes at
/// `start + i * align`, and holds the source `blocks[i].0` from offset
/// `blocks[i].1` (see [`DiskView::shared_source`]). Ranges within one block
/// map into the source; everything else is not shared.
pub struct Remapped<'a> {
    pub inner: &'a dyn DiskView,
    pub start: u64,
    pub align: u64,
    /// `(tag, source offset)` of each block.
    pub blocks: &'a [(u64, u64)],
}

impl DiskView for Remapped<'_> {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn data_extents(&self) -> Result<Vec<Range<u64>>> {
        self.inner.data_extents()
    }
    fn shared_source(&self, r: Range<u64>) -> Option<(u64, u64)> {
        if self.align == 0 || r.start < self.start || r.is_empty() {
            return None;
        }
        let i = (r.start - self.start) / self.align;
        let block = self.start + i * self.align;
        let &(tag, src) = self.blocks.get(usize::try_from(i).ok()?)?;
        (r.end <= block + self.align).then_some((tag, src + (r.start - block)))
    }
}

/// A view whose content is already compressed ([`DiskView::precompressed`]).
pub struct Precompressed<'a>(pub &'a dyn DiskView);

impl DiskView for Precompressed<'_> {
    fn len(&self) -> u64 {
        self.0.len()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.0.read_at(buf, offset)
    }
    fn data_extents(&self) -> Result<Vec<Range<u64>>> {
        self.0.data_extents()
    }
    fn shared_source(&self, r: Range<u64>) -> Option<(u64, u64)> {
        self.0.shared_source(r)
    }
    fn precompressed(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Seek, SeekFrom, Write};

    fn sparse(path: &Path, len: u64, data: &[(u64, &[u8])]) {
        let mut f = File::create(path).unwrap();
        f.set_len(len).unwrap();
        for (at, d) in data {
            f.seek(SeekFrom::Start(*at)).unwrap();
            f.write_all(d).unwrap();
        }
    }

    #[test]
    fn composite_reads_base_patches_and_zero_extension() {
        let dir = tempfile::tempdir().unwrap();
        let b = dir.path().join("base");
        let p = dir.path().join("patch");
        sparse(&b, 8 << 20, &[(0, b"AAAA"), (4 << 20, &[b'B'; 8192])]);
        sparse(&p, 1 << 20, &[(10, b"PP")]);
        let base = FileView::open(&b).unwrap();
        let patch = Patch::from_file(&p, 4 << 20, 1 << 20).unwrap();
        let c = Composite::new(&base, 16 << 20, vec![patch]).unwrap();
        assert_eq!(c.len(), 16 << 20);
        let mut buf = vec![1u8; 16];
        c.read_at(&mut buf, (4 << 20) + 8).unwrap();
        assert_eq!(&buf[..4], &[0, 0, b'P', b'P']);
        assert!(
            buf[4..].iter().all(|&x| x == 0),
            "base bytes under the patch must not show"
        );
        let mut buf = vec![1u8; 8];
        c.read_at(&mut buf, (12 << 20) - 4).unwrap();
        assert_eq!(buf, vec![0; 8]);
        let mut buf = vec![0u8; 4];
        c.read_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"AAAA");
        let ext = c.data_extents().unwrap();
        assert_eq!(ext.first().unwrap().start, 0);
        // The base's B extent is hidden by the patch; the patch's data shows.
        assert!(ext.iter().any(|r| r.contains(&((4 << 20) + 10))));
        assert!(ext.iter().all(|r| r.end <= 16 << 20));
        assert!(!ext
            .iter()
            .any(|r| r.contains(&((4 << 20) + 4096 * 2 + 1)) && r.end > (5 << 20)));
    }
}
