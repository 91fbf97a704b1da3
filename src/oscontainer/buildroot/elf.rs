//! What the buildroot reads of the OS's binaries without running them: the
//! ELF facts of a file ([`ElfInfo`]: its machine and interpreter) and paths
//! resolved inside the OS tree (its symlinks followed with the tree as `/`).
//! In: a file's first bytes, a tree and a path; out: those facts.
use crate::util::arch::Arch;
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// What the buildroot needs to know of an ELF file: its machine, by the
/// name qemu-user gives it where one is known, and its interpreter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElfInfo {
    /// `e_machine`.
    pub machine: u16,
    /// As `uname -m` and qemu-user name it (`None`: a machine this tool
    /// has no name for).
    pub arch: Option<Arch>,
    /// `PT_INTERP` (the dynamic loader); `None` for a static binary, or
    /// one whose program headers lie past `head`.
    pub interp: Option<String>,
}

/// The ELF facts of a file that starts with `head` (`None`: not ELF).
pub fn elf_info(head: &[u8]) -> Option<ElfInfo> {
    if head.len() < 20 || &head[..4] != b"\x7fELF" {
        return None;
    }
    let little = head[5] != 2;
    let wide = head[4] == 2;
    let num = |off: usize, len: usize| -> Option<u64> {
        let b = head.get(off..off + len)?;
        let mut v = 0u64;
        for i in 0..len {
            let byte = if little { b[len - 1 - i] } else { b[i] };
            v = (v << 8) | u64::from(byte);
        }
        Some(v)
    };
    let machine = num(18, 2)? as u16;
    let arch = match (machine, little) {
        (0x3e, _) => Some(Arch::X86_64),
        (0xb7, _) => Some(Arch::Aarch64),
        (0x15, true) => Some(Arch::Ppc64le),
        (0x15, false) => Some(Arch::other("ppc64")),
        (0x16, _) => Some(Arch::S390x),
        (0xf3, _) => Some(Arch::RISCV64),
        (0x03, _) => Some(Arch::other("i386")),
        (0x28, _) => Some(Arch::other("arm")),
        _ => None,
    };
    let interp = (|| {
        // e_phoff, e_phentsize, e_phnum; each header's p_type, p_offset, p_filesz.
        let (phoff, entsize, count) = match wide {
            true => (num(0x20, 8)?, num(0x36, 2)?, num(0x38, 2)?),
            false => (num(0x1c, 4)?, num(0x2a, 2)?, num(0x2c, 2)?),
        };
        for i in 0..count {
            let h = usize::try_from(phoff + i * entsize).ok()?;
            if num(h, 4)? != 3 {
                continue;
            }
            let (off, size) = match wide {
                true => (num(h + 8, 8)?, num(h + 0x20, 8)?),
                false => (num(h + 4, 4)?, num(h + 0x10, 4)?),
            };
            let b = head.get(usize::try_from(off).ok()?..usize::try_from(off + size).ok()?)?;
            let s = String::from_utf8_lossy(b)
                .trim_end_matches('\0')
                .to_string();
            return (!s.is_empty()).then_some(s);
        }
        None
    })();
    Some(ElfInfo {
        machine,
        arch,
        interp,
    })
}

/// The ELF machine of a binary, as `uname -m` names it (`None` if not ELF
/// or an unknown machine).
pub fn elf_arch(head: &[u8]) -> Option<Arch> {
    elf_info(head)?.arch
}

/// The first 64 KiB of a file: enough for an ELF header, its program
/// headers and the interpreter's name.
pub(super) fn head_of(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut head = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(64 << 10).read_to_end(&mut head))
        .with_context(|| format!("reading {}", path.display()))?;
    Ok(head)
}

/// `path` (absolute, as the tree sees it) resolved inside the tree at
/// `root`: symlinks followed with `root` as `/`, so an absolute link (Debian's
/// `/lib64/ld-linux-x86-64.so.2`) never escapes to the host's files. `None`
/// when some component is missing or the links loop.
pub fn resolve_in(root: &Path, path: &str) -> Option<PathBuf> {
    let mut todo: Vec<String> = path
        .split('/')
        .filter(|c| !c.is_empty())
        .rev()
        .map(str::to_string)
        .collect();
    let mut cur: Vec<String> = Vec::new();
    let mut hops = 0;
    while let Some(c) = todo.pop() {
        match c.as_str() {
            "." => continue,
            ".." => {
                cur.pop();
                continue;
            }
            _ => {}
        }
        let p = cur
            .iter()
            .fold(root.to_path_buf(), |p, c| p.join(c))
            .join(&c);
        let meta = std::fs::symlink_metadata(&p).ok()?;
        if meta.file_type().is_symlink() {
            hops += 1;
            if hops > 40 {
                return None;
            }
            let target = std::fs::read_link(&p).ok()?;
            let t = target.to_string_lossy();
            if t.starts_with('/') {
                cur.clear();
            }
            todo.extend(
                t.split('/')
                    .filter(|c| !c.is_empty())
                    .rev()
                    .map(str::to_string),
            );
        } else {
            cur.push(c);
        }
    }
    Some(cur.iter().fold(root.to_path_buf(), |p, c| p.join(c)))
}
