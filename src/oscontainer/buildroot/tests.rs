//! Unit tests of the buildroot: `ostree --version` and prepare-root.conf
//! parsing, ELF facts, paths resolved in a tree, and the emulator choice.
use super::*;

#[test]
fn version_line() {
    let out = "libostree:\n Version: '2026.4'\n Git: v2026.4\n Features:\n  - libcurl\n";
    assert_eq!(parse_ostree_version(out).as_deref(), Some("2026.4"));
    assert_eq!(parse_ostree_version("libostree:\n Git: x\n"), None);
    assert_eq!(parse_ostree_version(" Version: ''\n"), None);
}

#[test]
fn composefs_requirement() {
    let yes = "# rhel-coreos-config\n[composefs]\nenabled = yes\n";
    assert!(composefs_required(yes));
    assert!(composefs_required("[composefs]\nenabled=verity\n"));
    assert!(composefs_required(
        "[sysroot]\nreadonly=true\n[composefs]\nenabled = true\n"
    ));
    assert!(!composefs_required("[composefs]\nenabled = maybe\n"));
    assert!(!composefs_required("[composefs]\nenabled = no\n"));
    assert!(!composefs_required("[sysroot]\nenabled = yes\n"));
    assert!(!composefs_required(""));
    let v = "libostree:\n Version: '2026.4'\n Features:\n  - libcurl\n  - composefs\n";
    assert!(has_composefs_feature(v));
    assert!(!has_composefs_feature(
        " Features:\n  - libcurl\n  - composefs-like\n"
    ));
}

#[test]
fn elf_machine() {
    let mut h = [0u8; 20];
    h[..4].copy_from_slice(b"\x7fELF");
    h[5] = 1;
    h[18] = 0x3e;
    assert_eq!(elf_arch(&h), Some(Arch::X86_64));
    h[18] = 0xb7;
    assert_eq!(elf_arch(&h), Some(Arch::Aarch64));
    h[5] = 2;
    h[18] = 0;
    h[19] = 0x16;
    assert_eq!(elf_arch(&h), Some(Arch::S390x));
    h[19] = 0x99;
    assert_eq!(elf_arch(&h), None);
    assert_eq!(elf_arch(b"#!/bin/sh\n echo not elf.."), None);
}

/// An ELF64 little-endian header for `machine`, with a PT_INTERP of
/// `interp` when given.
fn elf64(machine: u16, interp: Option<&str>) -> Vec<u8> {
    let mut h = vec![0u8; 64];
    h[..4].copy_from_slice(b"\x7fELF");
    h[4] = 2;
    h[5] = 1;
    h[18..20].copy_from_slice(&machine.to_le_bytes());
    if let Some(i) = interp {
        h[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        h[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        h[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        let mut ph = vec![0u8; 56];
        ph[..4].copy_from_slice(&3u32.to_le_bytes());
        ph[8..16].copy_from_slice(&120u64.to_le_bytes());
        ph[0x20..0x28].copy_from_slice(&(i.len() as u64 + 1).to_le_bytes());
        h.extend(ph);
        h.extend(i.as_bytes());
        h.push(0);
    }
    h
}

#[test]
fn elf_interpreter() {
    let e = elf_info(&elf64(0xb7, Some("/lib/ld-linux-aarch64.so.1"))).unwrap();
    assert_eq!(e.arch, Some(Arch::Aarch64));
    assert_eq!(e.interp.as_deref(), Some("/lib/ld-linux-aarch64.so.1"));
    let e = elf_info(&elf64(0x32, None)).unwrap();
    assert_eq!((e.machine, e.arch, e.interp), (0x32, None, None));
    // Program headers past the bytes read: no interpreter claimed.
    let mut cut = elf64(0x3e, Some("/lib64/ld-linux-x86-64.so.2"));
    cut.truncate(100);
    assert_eq!(elf_info(&cut).unwrap().interp, None);
}

#[test]
fn paths_resolve_inside_the_tree() {
    let d = tempfile::tempdir().unwrap();
    let r = d.path();
    std::fs::create_dir_all(r.join("usr/lib/x86_64-linux-gnu")).unwrap();
    std::fs::write(r.join("usr/lib/x86_64-linux-gnu/ld.so"), "x").unwrap();
    std::os::unix::fs::symlink("usr/lib", r.join("lib")).unwrap();
    std::fs::create_dir(r.join("usr/lib64")).unwrap();
    std::os::unix::fs::symlink("usr/lib64", r.join("lib64")).unwrap();
    // Absolute, as Debian ships /lib64/ld-linux-x86-64.so.2.
    std::os::unix::fs::symlink("/lib/x86_64-linux-gnu/ld.so", r.join("usr/lib64/ld.so")).unwrap();
    assert_eq!(
        resolve_in(r, "/lib64/ld.so"),
        Some(r.join("usr/lib/x86_64-linux-gnu/ld.so"))
    );
    std::fs::remove_file(r.join("usr/lib/x86_64-linux-gnu/ld.so")).unwrap();
    assert_eq!(resolve_in(r, "/lib64/ld.so"), None);
    std::os::unix::fs::symlink("loop", r.join("loop")).unwrap();
    assert_eq!(resolve_in(r, "/loop/x"), None);
    assert_eq!(resolve_in(r, "/usr/../lib"), Some(r.join("usr/lib")));
}

#[test]
fn foreign_binaries_run_through_a_static_qemu_user() {
    let host = Arch::host();
    let other = if host == Arch::S390x {
        Arch::Aarch64
    } else {
        Arch::S390x
    };
    let machine = |a: Arch| match a {
        Arch::Aarch64 => 0xb7,
        _ => 0x16,
    };
    let ostree = |a: Arch| ElfInfo {
        machine: machine(a),
        arch: Some(if a == other { other } else { Arch::X86_64 }),
        interp: None,
    };
    let bin = tempfile::tempdir().unwrap();
    let binfmt = tempfile::tempdir().unwrap();
    let search = [bin.path().to_path_buf()];
    let what = "the OS's /usr/bin/ostree";
    if host == Arch::X86_64 {
        assert_eq!(
            runner(what, &ostree(Arch::X86_64), &search, binfmt.path()),
            Ok(None)
        );
    }
    // No emulator, no handler: the binary, the arch and the package.
    let why = runner(what, &ostree(other), &search, binfmt.path()).unwrap_err();
    for w in [
        what,
        other.as_str(),
        "qemu-user-static",
        &format!("qemu-{other}-static"),
    ] {
        assert!(why.contains(w), "{w:?} not in {why}");
    }
    // A handler without F (its interpreter looked up inside the tree).
    let handler = binfmt.path().join(format!("qemu-{other}"));
    std::fs::write(&handler, "enabled\ninterpreter /usr/bin/q\nflags: OP\n").unwrap();
    assert!(runner(what, &ostree(other), &search, binfmt.path()).is_err());
    std::fs::write(&handler, "disabled\ninterpreter /usr/bin/q\nflags: OPF\n").unwrap();
    assert!(runner(what, &ostree(other), &search, binfmt.path()).is_err());
    std::fs::write(&handler, "enabled\ninterpreter /usr/bin/q\nflags: OPF\n").unwrap();
    assert_eq!(
        runner(what, &ostree(other), &search, binfmt.path()),
        Ok(None)
    );
    std::fs::remove_file(&handler).unwrap();
    // A dynamically linked qemu cannot start inside the OS's tree.
    let dynamic = bin.path().join(format!("qemu-{other}"));
    std::fs::write(&dynamic, elf64(0x3e, Some("/lib64/ld-linux-x86-64.so.2"))).unwrap();
    let why = runner(what, &ostree(other), &search, binfmt.path()).unwrap_err();
    assert!(why.contains("dynamically linked"), "{why}");
    // A static one is run explicitly.
    let stat = bin.path().join(format!("qemu-{other}-static"));
    std::fs::write(&stat, elf64(0x3e, None)).unwrap();
    assert_eq!(
        runner(what, &ostree(other), &search, binfmt.path()),
        Ok(Some(stat))
    );
    // A machine qemu-user is not used for.
    let ia64 = ElfInfo {
        machine: 0x32,
        arch: None,
        interp: None,
    };
    let why = runner(what, &ia64, &search, binfmt.path()).unwrap_err();
    for w in [what, "ELF machine 0x32", "qemu-user-static"] {
        assert!(why.contains(w), "{w:?} not in {why}");
    }
}
