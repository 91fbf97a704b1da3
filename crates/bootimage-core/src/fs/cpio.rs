//! A small writer of "newc" cpio archives (the format the Linux kernel
//! unpacks as an initramfs; `man 5 cpio`, kernel
//! `Documentation/driver-api/early-userspace/buffer-format.rst`): a 110-byte
//! ASCII header per entry, the NUL-terminated name padded to 4 bytes, the
//! data padded to 4 bytes, and a `TRAILER!!!` entry at the end.
use anyhow::{bail, Context, Result};
use std::io::{Read, Write};

/// Magic of a newc header (no checksum).
pub const NEWC_MAGIC: &[u8; 6] = b"070701";
/// Magic of a newc header with checksums ("crc" format); the kernel reads both.
pub const CRC_MAGIC: &[u8; 6] = b"070702";
/// Size of a newc header.
pub const HEADER_LEN: usize = 110;
/// Name of the last entry.
const TRAILER: &str = "TRAILER!!!";
/// File type bits (`st_mode`).
pub const S_IFREG: u32 = 0o100000;
pub const S_IFDIR: u32 = 0o040000;

fn pad4(n: u64) -> usize {
    ((4 - n % 4) % 4) as usize
}

/// Writes entries in order; [`Writer::finish`] adds the trailer.
pub struct Writer<W: Write> {
    out: W,
    /// Bytes written so far (for alignment).
    pos: u64,
    ino: u32,
    mtime: u32,
}

impl<W: Write> Writer<W> {
    /// Every entry gets `mtime` (seconds since the epoch), owner 0:0.
    pub fn new(out: W, mtime: u32) -> Self {
        Writer {
            out,
            pos: 0,
            ino: 0,
            mtime,
        }
    }

    fn write(&mut self, b: &[u8]) -> Result<()> {
        self.out.write_all(b).context("writing the cpio archive")?;
        self.pos += b.len() as u64;
        Ok(())
    }

    fn header(&mut self, name: &str, mode: u32, nlink: u32, size: u64) -> Result<()> {
        if name.is_empty() || name.starts_with('/') || name.contains('\0') {
            bail!("cpio entry name {name:?} must be relative and non-empty");
        }
        let size = u32::try_from(size)
            .with_context(|| format!("{name}: newc cpio entries are limited to 4 GiB"))?;
        self.ino += 1;
        let namesize = name.len() as u32 + 1;
        let fields = [
            self.ino, mode, 0, 0, nlink, self.mtime, size, 0, 0, 0, 0, namesize, 0,
        ];
        let mut h = String::with_capacity(HEADER_LEN);
        h.push_str(std::str::from_utf8(NEWC_MAGIC).expect("ascii"));
        for f in fields {
            h.push_str(&format!("{f:08X}"));
        }
        debug_assert_eq!(h.len(), HEADER_LEN);
        self.write(h.as_bytes())?;
        self.write(name.as_bytes())?;
        self.write(&[0])?;
        let p = pad4(self.pos);
        self.write(&[0; 3][..p])?;
        Ok(())
    }

    fn pad(&mut self) -> Result<()> {
        let p = pad4(self.pos);
        self.write(&[0; 3][..p])
    }

    /// A directory entry (mode bits without the type, e.g. 0o755).
    pub fn dir(&mut self, name: &str, perm: u32) -> Result<()> {
        self.header(name, S_IFDIR | perm, 2, 0)
    }

    /// A regular file holding `data`.
    pub fn file(&mut self, name: &str, perm: u32, data: &[u8]) -> Result<()> {
        self.header(name, S_IFREG | perm, 1, data.len() as u64)?;
        self.write(data)?;
        self.pad()
    }

    /// A regular file of `len` bytes read from `src` (which must yield
    /// exactly that many). Returns the archive offset of its first byte.
    pub fn file_from(&mut self, name: &str, perm: u32, len: u64, src: impl Read) -> Result<u64> {
        self.header(name, S_IFREG | perm, 1, len)?;
        let at = self.pos;
        let n = std::io::copy(&mut src.take(len), &mut self.out)
            .with_context(|| format!("copying {name} into the cpio archive"))?;
        if n != len {
            bail!("{name}: expected {len} bytes, read {n}");
        }
        self.pos += n;
        self.pad()?;
        Ok(at)
    }

    /// Write the trailer and return the inner writer.
    pub fn finish(mut self) -> Result<W> {
        self.header(TRAILER, 0, 1, 0)?;
        self.out.flush().context("flushing the cpio archive")?;
        Ok(self.out)
    }
}

/// The names of the entries of an uncompressed newc archive (up to the
/// trailer), for checks and tests.
pub fn list(data: &[u8]) -> Result<Vec<String>> {
    let mut names = Vec::new();
    let mut at = 0usize;
    let field = |h: &[u8], i: usize| -> Result<u64> {
        let s = std::str::from_utf8(&h[6 + 8 * i..14 + 8 * i]).context("cpio header field")?;
        u64::from_str_radix(s, 16).context("cpio header field is not hex")
    };
    loop {
        let h = data
            .get(at..at + HEADER_LEN)
            .context("cpio archive truncated (no trailer)")?;
        if &h[..6] != NEWC_MAGIC && &h[..6] != CRC_MAGIC {
            bail!("no newc cpio header at byte {at}");
        }
        let size = field(h, 6)? as usize;
        let namesize = field(h, 11)? as usize;
        let name_end = at + HEADER_LEN + namesize;
        let name = data
            .get(at + HEADER_LEN..name_end - 1)
            .context("cpio name truncated")?;
        let name = String::from_utf8_lossy(name).into_owned();
        let data_at = name_end + pad4(name_end as u64);
        at = data_at + size + pad4((data_at + size) as u64);
        if name == TRAILER {
            return Ok(names);
        }
        names.push(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    fn sample() -> Vec<u8> {
        let mut w = Writer::new(Vec::new(), 1_700_000_000);
        w.dir("etc", 0o755).unwrap();
        w.file("etc/hello", 0o644, b"hello\n").unwrap();
        w.file_from("etc/big", 0o600, 5, &b"12345"[..]).unwrap();
        w.finish().unwrap()
    }

    #[test]
    fn offsets_and_padding() {
        let mut w = Writer::new(Vec::new(), 0);
        let at = w
            .file_from("root.squashfs", 0o644, 4, &b"hsqs"[..])
            .unwrap();
        // 110-byte header + 14-byte name: the data starts at byte 124.
        assert_eq!(at, 124);
        let v = w.finish().unwrap();
        assert_eq!(&v[124..128], b"hsqs");
        assert_eq!(v.len() % 4, 0);
        assert_eq!(list(&v).unwrap(), ["root.squashfs"]);
    }

    #[test]
    fn gnu_cpio_reads_it() {
        let v = sample();
        assert_eq!(list(&v).unwrap(), ["etc", "etc/hello", "etc/big"]);
        let d = tempfile::tempdir().unwrap();
        let mut c = Command::new("cpio")
            .args(["-idmu", "--quiet", "--no-absolute-filenames"])
            .current_dir(d.path())
            .stdin(Stdio::piped())
            .spawn()
            .expect("cpio (GNU cpio) installed");
        std::io::Write::write_all(c.stdin.as_mut().unwrap(), &v).unwrap();
        drop(c.stdin.take());
        assert!(c.wait().unwrap().success());
        assert_eq!(
            std::fs::read(d.path().join("etc/hello")).unwrap(),
            b"hello\n"
        );
        assert_eq!(std::fs::read(d.path().join("etc/big")).unwrap(), b"12345");
        use std::os::unix::fs::PermissionsExt;
        let m = std::fs::metadata(d.path().join("etc/big")).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o600);
    }

    #[test]
    fn short_reader_is_an_error() {
        let mut w = Writer::new(Vec::new(), 0);
        assert!(w.file_from("x", 0o644, 10, &b"abc"[..]).is_err());
    }
}
