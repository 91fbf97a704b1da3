//! Issue 28, the OS lays itself down: the faithful test OS (sid's ostree
//! 2026.x built with composefs, the real `ostree-prepare-root` in its
//! initramfs with `[composefs] enabled = yes` as RHCOS 10 ships it, the
//! SELinux reference policy and labels in its commit) is deployed by its own
//! ostree, run from a buildroot of its tree, and the judge is that OS's
//! `ostree-prepare-root`: the disks must boot with `/` on composefs (the
//! marker's `composefs=1`, read from the booted OS's mountinfo), under
//! SeaBIOS and OVMF. The negative case: the same release deployed by this
//! host's ostree (Debian 12: 2022.7, no composefs) stops in the initramfs
//! with prepare-root's own "composefs: failed to mount" message.
use crate::common::boot::{self, Firmware, Media, Mode};
use crate::common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const RELEASE: &str = "release-faithful";

fn build(
    cell: &'static OnceLock<Built>,
    name: &str,
    release: &str,
    extra: &[&str],
) -> &'static Built {
    build_platforms(cell, name, release, &["metal", "qemu"], extra)
}

fn build_platforms(
    cell: &'static OnceLock<Built>,
    name: &str,
    release: &str,
    platforms: &[&str],
    extra: &[&str],
) -> &'static Built {
    os();
    let release = oci(release);
    let mut args: Vec<&str> = vec![&release];
    args.extend(platforms);
    args.push("--no-ostree-archive");
    args.extend(extra);
    built_once(cell, name, &args, true)
}

/// Deployed by the OS's own ostree (the default).
fn own() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    build(&B, "faithful-own", RELEASE, &[])
}

/// The same OS commit, chunked (a layer per package), deployed by the OS.
fn chunked() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    build(&B, "faithful-chunked", "release-faithful-chunked", &[])
}

/// Deployed by this host's ostree.
fn host() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    build(&B, "faithful-host", RELEASE, &["--deploy-ostree", "host"])
}

fn os() -> &'static Value {
    let r = &fx()["release_faithful"];
    assert!(
        r.is_object(),
        "the fixture has no faithful OS (fixtures/build.sh builds it as root only)"
    );
    &r["os"]
}

/// The OS's ostree version as `ostree --version` prints it: the Debian
/// package version without its revision.
fn os_ostree_version() -> String {
    let v = os()["packages"]["ostree"].as_str().unwrap();
    v.rsplit_once('-').map_or(v, |(u, _)| u).to_string()
}

fn host_ostree_version() -> String {
    let out = must(Command::new("ostree").arg("--version"));
    out.lines()
        .find_map(|l| l.trim().strip_prefix("Version:"))
        .unwrap()
        .trim()
        .trim_matches('\'')
        .to_string()
}

/// A private copy of a raw disk (the firmware and the OS write to it).
fn copy_raw(b: &Built, name: &str, tag: &str) -> PathBuf {
    let copy = b.root.join(format!("boot-{tag}.raw"));
    must(
        Command::new("cp")
            .arg("--sparse=always")
            .arg(b.raw.join(format!("{name}.raw")))
            .arg(&copy),
    );
    copy
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn the_os_own_ostree_deploys_and_says_so() {
    let b = own();
    let want = os_ostree_version();
    assert!(
        b.log.contains(&format!(
            "deploy: the OS's own ostree {want} (its /usr/bin/ostree"
        )),
        "{}",
        b.log
    );
    for key in ["metal", "qemu"] {
        let d = &b.meta["images"][key]["ostree-deploy"];
        assert_eq!(d["tool"], "os", "{key}: {d}");
        assert_eq!(d["ostree-version"], want.as_str(), "{key}: {d}");
        assert!(d.get("reason").is_none(), "{d}");
    }
    // And the host's, when asked: said on the console and in meta.json.
    let h = host();
    let hv = host_ostree_version();
    assert_ne!(
        hv, want,
        "the host's ostree is the OS's: the negative case proves nothing"
    );
    assert!(
        h.log.contains(&format!(
            "deploy: this machine's ostree {hv} (--deploy-ostree host)"
        )),
        "{}",
        h.log
    );
    let d = &h.meta["images"]["metal"]["ostree-deploy"];
    assert_eq!(d["tool"], "host", "{d}");
    assert_eq!(d["reason"], "--deploy-ostree host", "{d}");
    // What that costs is said: no composefs image. The labels are still
    // the OS's: its setfiles runs from its buildroot.
    assert_eq!(d["composefs-image"], false, "{d}");
    assert!(d.get("selinux-labelled").is_none(), "{d}");
    assert!(
        h.log
            .contains("this ostree writes no composefs image: its disks stop in the initramfs"),
        "{}",
        h.log
    );
    assert!(
        h.log.contains(&format!(
            "SELinux: the OS's own setfiles labels what this machine's ostree lays down (from a buildroot of the OS tree, whose ostree is {want})"
        )),
        "{}",
        h.log
    );
    assert!(!h.log.contains("SELinux: nothing labelled"), "{}", h.log);
}

/// `b`'s metal disk mounted read-only: its root filesystem, its boot
/// filesystem (with `boot`), the stateroot and the deployment in it.
struct Metal {
    root: Mnt,
    boot: Option<Mnt>,
    stateroot: PathBuf,
    deployment: PathBuf,
}

fn metal(b: &Built, tag: &str, boot: bool) -> Metal {
    metal_of(
        &b.raw.join("metal.raw"),
        &b.root.join(format!("mnt-{tag}")),
        boot,
    )
}

/// The metal disk `raw` mounted read-only under `dir`.
fn metal_of(raw: &Path, dir: &Path, boot: bool) -> Metal {
    let root = mount_raw_root(raw, &dir.join("root"));
    let boot = boot.then(|| mount_raw_boot(raw, &dir.join("boot")));
    let stateroot = std::fs::read_dir(root.0.join("ostree/deploy"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let deployment = std::fs::read_dir(stateroot.join("deploy"))
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| e.path().is_dir())
        .unwrap()
        .path();
    Metal {
        root,
        boot,
        stateroot,
        deployment,
    }
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn only_the_os_ostree_writes_the_composefs_image() {
    // What prepare-root opens (the boots below are the judgement; this
    // says where the difference lies).
    let has = |b: &Built, tag: &str| {
        metal(b, tag, false)
            .deployment
            .join(".ostree.cfs")
            .is_file()
    };
    assert!(
        has(own(), "cfs-own"),
        "no .ostree.cfs in the deployment made by the OS's ostree"
    );
    assert!(
        !has(host(), "cfs-host"),
        "the host's ostree 2022.7 wrote a .ostree.cfs?"
    );
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn the_commit_carries_the_policy_labels_into_the_deployment() {
    let m = metal(own(), "labels", false);
    let label = must(
        Command::new("python3")
            .args([
                "-c",
                "import os, sys; print(os.getxattr(sys.argv[1], 'security.selinux').decode())",
            ])
            .arg(m.deployment.join("usr/bin/ostree")),
    );
    assert_eq!(
        label.trim().trim_end_matches('\0'),
        "system_u:object_r:bin_t:s0"
    );
}

/// How many files the OS's own setfiles, in no-act mode (`-n`), would
/// relabel in `host` seen as the node path `at`, leaving out `exclude`:
/// run in the good run's buildroot (the OS tree), in a private mount
/// namespace, with `host` bound read-only.
fn would_relabel(host: &Path, at: &str, exclude: &[&str]) -> (usize, String) {
    would_relabel_by(&buildroot_of(own()), host, at, exclude)
}

/// The buildroot a run made of its OS tree (its cache's only one).
fn buildroot_of(b: &Built) -> PathBuf {
    std::fs::read_dir(b.root.join("cache/buildroot"))
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| e.file_name().len() == 64)
        .unwrap()
        .path()
}

/// What the setfiles of the OS tree `br`, with that tree's policy, would
/// relabel under `host` (mounted at `at`).
fn would_relabel_by(br: &Path, host: &Path, at: &str, exclude: &[&str]) -> (usize, String) {
    let cfg = std::fs::read_to_string(br.join("usr/etc/selinux/config")).unwrap();
    let policy = cfg
        .lines()
        .find_map(|l| l.strip_prefix("SELINUXTYPE="))
        .unwrap()
        .trim();
    let target = format!("/run/t{}", at.trim_end_matches('/'));
    let mut args = vec!["-F".to_string(), "-v".into(), "-n".into()];
    for e in exclude {
        args.extend(["-e".into(), format!("/run/t{e}")]);
    }
    args.extend([
        "-r".into(),
        "/run/t".into(),
        format!("/etc/selinux/{policy}/contexts/files/file_contexts"),
        target.clone(),
    ]);
    let script = r#"set -e
br=$1; host=$2; target=$3; shift 3
mount --bind "$br" "$br"; mount -o remount,bind,ro "$br"
mount -t proc proc "$br/proc"
mount -t tmpfs tmpfs "$br/run"
mount --bind "$br/usr/etc" "$br/etc"
mkdir -p "$br$target"
mount --rbind "$host" "$br$target"; mount -o remount,bind,ro "$br$target"
exec chroot "$br" /usr/sbin/setfiles "$@""#;
    let out = must(
        Command::new("unshare")
            .args([
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                script,
                "sh",
            ])
            .arg(br)
            .arg(host)
            .arg(&target)
            .args(&args),
    );
    let n = out
        .lines()
        .filter(|l| l.starts_with("Would relabel "))
        .count();
    (n, out)
}

/// Whether a `Would relabel <path> ...` line of setfiles names one of the
/// sysroot repo's file objects (`objects/xx/<sha256>.file`): those are the
/// deployment's files (hardlinks), labelled from the commit and checked
/// there.
fn names_file_object(line: &str) -> bool {
    line.strip_prefix("Would relabel ")
        .and_then(|l| l.split(' ').next())
        .is_some_and(|p| p.contains("/ostree/repo/objects/") && p.ends_with(".file"))
}

/// What the OS's setfiles (`-n`) would relabel on a mounted metal disk,
/// per scope, with the policy of the OS tree `br`: the physical root (the
/// whole root filesystem, as a node's `/sysroot` holds it: the `/boot`
/// mount point, `/ostree`, the repo's directories, refs, config and
/// metadata objects, the origin files; not the deployment and the
/// stateroot's `/var`, scopes of their own, nor the repo's file objects,
/// which are the deployment's files), `/boot`, the deployment's `/etc`,
/// the stateroot's `/var`, and the deployment's `/usr`, whose files are
/// the repo's file objects: labelled from the commit, and relabelled by
/// nothing (the deployment's other files carry the commit's labels, which
/// need not be what setfiles says: the fixture's commit has `/proc`
/// `mnt_t`; what ostree adds there, `.ostree.cfs`, is found unlabelled by
/// [`unlabelled_of`]).
fn relabel_scopes(br: &Path, m: &Metal) -> Vec<(&'static str, usize, String)> {
    let boot = m.boot.as_ref().unwrap().0.clone();
    let node = |p: &Path| crate::common::labels::node_path(&m.root.0, p);
    let (dep, var) = (node(&m.deployment), node(&m.stateroot.join("var")));
    let mut v = Vec::new();
    for (what, host, at, ex) in [
        ("physical root", m.root.0.clone(), "/", vec![&*dep, &*var]),
        ("/boot", boot, "/boot", vec![]),
        ("/etc", m.deployment.join("etc"), "/etc", vec![]),
        ("/var", m.stateroot.join("var"), "/var", vec![]),
        ("/usr", m.deployment.join("usr"), "/usr", vec![]),
    ] {
        let (_, out) = would_relabel_by(br, &host, at, &ex);
        let lines: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with("Would relabel ") && !names_file_object(l))
            .collect();
        v.push((what, lines.len(), lines.join("\n")));
    }
    v
}

/// The entries of a mounted metal disk's root and boot filesystems that
/// carry no SELinux context at all.
fn unlabelled_of(m: &Metal) -> Vec<String> {
    let mut v = crate::common::labels::unlabelled(&m.root.0);
    let boot = &m.boot.as_ref().unwrap().0;
    v.extend(
        crate::common::labels::unlabelled(boot)
            .into_iter()
            .map(|p| format!("/boot{}", p.trim_end_matches('/'))),
    );
    v
}

/// `b`'s metal disk has every entry of its physical root and `/boot`
/// labelled, and labelled as the policy of the OS tree `br` says: no
/// entry without a context, and the OS's setfiles would relabel nothing
/// in any scope.
fn assert_labelled_by(br: &Path, b: &Built, what: &str) {
    let m = metal(b, &format!("labelled-{what}"), true);
    let none = unlabelled_of(&m);
    eprintln!(
        "{what}: {} entries without an SELinux context{}",
        none.len(),
        if none.is_empty() {
            String::new()
        } else {
            format!(":\n  {}", none.join("\n  "))
        }
    );
    let scopes = relabel_scopes(br, &m);
    for (scope, n, _) in &scopes {
        eprintln!("{what} {scope}: the OS's setfiles -n would relabel {n} entries");
    }
    assert!(
        none.is_empty(),
        "{what}: entries without an SELinux context:\n{}",
        none.join("\n")
    );
    for (scope, n, out) in scopes {
        assert_eq!(
            n, 0,
            "{what} {scope}: the OS's setfiles would relabel:\n{out}"
        );
    }
}

/// [`assert_labelled_by`] the policy of the good run's OS tree.
fn assert_labelled(b: &Built, what: &str) {
    assert_labelled_by(&buildroot_of(own()), b, what);
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn the_os_setfiles_would_relabel_nothing() {
    let b = own();
    assert_labelled(b, "own");
    assert!(
        b.log.contains("SELinux: labelled with the OS's policy "),
        "{}",
        b.log
    );
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn the_host_deployed_disk_is_labelled_by_the_os_setfiles() {
    // --deploy-ostree host: this machine's ostree (no SELinux here, so it
    // labels nothing it makes) lays the OS down, and the OS's own setfiles,
    // from its buildroot, labels it all the same.
    let b = host();
    assert_labelled(b, "host");
    assert!(
        b.log.contains("SELinux: labelled with the OS's policy "),
        "{}",
        b.log
    );
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn a_label_removed_from_one_file_fails_the_checks() {
    // A private copy of a good disk, one ref file of its sysroot repo
    // stripped of its label (as ostree leaves what it makes on a host
    // without SELinux): both checks name that file, and only it.
    let b = own();
    let copy = copy_raw(b, "metal", "unlabel");
    let dir = b.root.join("mnt-unlabel");
    let gone = {
        let rw = crate::common::labels::RwMount::raw_root(&copy, &dir.join("rw"));
        let refs = crate::common::labels::files_under(&rw.0.join("ostree/repo/refs"));
        let f = refs.first().expect("no ref file in the sysroot repo");
        crate::common::labels::remove_context(f);
        assert_eq!(crate::common::labels::context(f), None);
        crate::common::labels::node_path(&rw.0, f)
    };
    let m = metal_of(&copy, &dir, true);
    assert_eq!(unlabelled_of(&m), vec![gone.clone()]);
    let scopes = relabel_scopes(&buildroot_of(b), &m);
    for (scope, n, out) in &scopes {
        eprintln!("one label removed, {scope}: would relabel {n}:\n{out}");
    }
    let (_, n, out) = scopes.iter().find(|s| s.0 == "physical root").unwrap();
    assert_eq!(*n, 1, "{out}");
    assert!(
        out.contains(&format!("/run/t{gone} from <no context> to ")),
        "{out}"
    );
    assert!(scopes.iter().all(|s| s.0 == "physical root" || s.1 == 0));
    drop(m);
    // The content manifest records the label, so checking the disk
    // against it names that file too: an output directory holding the
    // stripped disk in place of the metal image.
    let out = b.root.join("out-unlabel");
    copy_output(&b.out, &out);
    let metal = b.meta["images"]["metal"]["path"].as_str().unwrap();
    let (line, text) = manifest_only_with_disk(&out, metal, &copy);
    assert!(line.contains("partition root (bytes "), "{text}");
    assert!(
        line.contains(&format!(
            "1 path(s) of its xfs differ: {gone}: xattrs {{\"security.selinux\":"
        )),
        "{text}"
    );
    std::fs::remove_dir_all(&out).ok();
    std::fs::remove_file(&copy).ok();
}

fn check_composefs_boot(r: &boot::BootResult, platform: &str) {
    assert_eq!(r.marker.mode, Mode::Disk, "{}", r.marker);
    assert_eq!(r.marker.platform, platform, "{}", r.marker);
    assert!(r.marker.firstboot, "{}", r.marker);
    assert_eq!(r.marker.version, os()["version"].as_str().unwrap());
    assert_eq!(
        r.marker.composefs,
        Some(true),
        "/ is not composefs: {}",
        r.marker
    );
    // (metal's kargs name no serial console: only the marker reaches it.)
    assert!(
        !r.has_karg("console=ttyS0,115200n8")
            || r.log.contains("running ostree-prepare-root /sysroot"),
        "the initramfs did not run the real prepare-root:\n{}",
        r.log
    );
}

/// Boot a private copy of `b`'s `platform` disk under `fw` and check that
/// the OS's prepare-root put `/` on composefs.
fn boots_on_composefs(b: &Built, platform: &str, fw: Firmware, what: &str) {
    let disk = copy_raw(b, platform, &format!("{what}-{fw:?}"));
    let r = boot::assert_boots(&[Media::disk(&disk)], fw, boot::default_timeout());
    eprintln!(
        "{what} {platform}, {fw:?}: {:.1} s ({})",
        r.duration.as_secs_f64(),
        r.marker
    );
    check_composefs_boot(&r, platform);
    std::fs::remove_file(&disk).ok();
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn metal_boots_on_composefs_under_seabios() {
    boots_on_composefs(own(), "metal", Firmware::Bios, "own");
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn qemu_boots_on_composefs_under_ovmf() {
    boots_on_composefs(own(), "qemu", Firmware::Uefi, "own");
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn the_host_deployed_disk_is_refused_by_prepare_root() {
    let b = host();
    let disk = copy_raw(b, "qemu", "host-bios");
    let e = boot::boot(
        &[Media::disk(&disk)],
        Firmware::Bios,
        boot::default_timeout(),
    )
    .expect_err("a disk without .ostree.cfs booted an OS that requires composefs");
    // prepare-root's own words (ostree src/libotcore/otcore-prepare-root.c).
    assert!(
        e.contains("ostree-prepare-root: Failed to mount composefs: composefs: failed to mount: No such file or directory"),
        "{e}"
    );
    std::fs::remove_file(&disk).ok();
}

/// Built by the nokvm backend: the OS's tools run in the appliance VM.
fn nokvm() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    build(&B, "faithful-nokvm", RELEASE, &["--backend", "nokvm"])
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn the_vm_backend_runs_the_os_tools_and_its_metal_boots_on_composefs() {
    let b = nokvm();
    assert!(
        b.log.contains(&format!(
            "deploy: the OS's own ostree {} (its /usr/bin/ostree, run in a buildroot of the OS tree, shared read-only with the VM)",
            os_ostree_version()
        )),
        "{}",
        b.log
    );
    let d = &b.meta["images"]["metal"]["ostree-deploy"];
    assert_eq!(d["tool"], "os", "{d}");
    assert!(metal(b, "nokvm-cfs", false)
        .deployment
        .join(".ostree.cfs")
        .is_file());
    assert_labelled(b, "nokvm");
    boots_on_composefs(b, "metal", Firmware::Bios, "nokvm");
}

/// A cache holding the faithful OS (imported by `inspect --import`) and a
/// buildroot of it copied from a good run's and damaged by `damage`.
fn damaged_buildroot(name: &str, damage: impl FnOnce(&Path)) -> PathBuf {
    let good = own().root.join("cache/buildroot");
    let good = std::fs::read_dir(&good)
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| e.file_name().len() == 64)
        .expect("no buildroot in the good run's cache")
        .path();
    let cache = scratch(name);
    let _ = std::fs::remove_dir_all(&cache);
    let info = ok_json(&cache, &["inspect", &oci(RELEASE), "--import", "--json"]);
    let commit = info["os"]["import-commit"].as_str().unwrap();
    let br = cache.join("buildroot").join(commit);
    std::fs::create_dir_all(br.parent().unwrap()).unwrap();
    must(Command::new("cp").arg("-a").arg(&good).arg(&br));
    damage(&br);
    cache
}

fn refused_with(cache: &Path, words: &[&str]) {
    let out = cache.join("out");
    let line = expect_error(
        cache,
        &[
            "generate",
            &oci(RELEASE),
            "qemu",
            "-o",
            out.to_str().unwrap(),
        ],
        words[0],
    );
    for w in words {
        assert!(line.contains(w), "'{w}' not in: {line}");
    }
    assert!(!out.exists(), "output directory created");
    assert_no_partial_buildroot(cache);
}

/// No half-made buildroot (`.<commit>.<pid>`) is left in the cache (its
/// mounts live in a namespace that ends with the command, so none can be
/// left on the host).
fn assert_no_partial_buildroot(cache: &Path) {
    let Ok(rd) = std::fs::read_dir(cache.join("buildroot")) else {
        return;
    };
    let partial: Vec<String> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(partial.is_empty(), "partial buildroots left: {partial:?}");
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn a_buildroot_whose_ostree_cannot_start_is_named() {
    // The ELF interpreter gone: named before anything runs.
    let cache = damaged_buildroot("faithful-noldso", |br| {
        std::fs::remove_file(br.join("usr/lib64/ld-linux-x86-64.so.2")).unwrap();
    });
    refused_with(
        &cache,
        &[
            "/usr/bin/ostree",
            "needs its ELF interpreter /lib64/ld-linux-x86-64.so.2",
            "remove",
        ],
    );
    // A library gone: the loader's own message, through the probe.
    let cache = damaged_buildroot("faithful-nolib", |br| {
        let lib = std::fs::read_dir(br.join("usr/lib/x86_64-linux-gnu"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.to_string_lossy().contains("libostree-1.so"))
            .expect("no libostree in the buildroot");
        std::fs::remove_file(lib).unwrap();
    });
    refused_with(
        &cache,
        &[
            "/usr/bin/ostree",
            "does not run in its buildroot",
            "libostree-1.so",
            "remove that directory",
        ],
    );
}

/// A buildroot command does not hold another run's disk: the loop-backed
/// filesystems its mount namespace copied from the host are let go, so an
/// unmount on the host shuts that filesystem down at once and its loop
/// device is released. (Held, the filesystem's last writes landed after
/// its run had read the disk: a suite run hashed a metal disk twice and got
/// two sha256.)
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn a_buildroot_command_lets_go_of_other_runs_disks() {
    use bootimage_gen::sys::loopback::backing_of;
    let good = std::fs::read_dir(own().root.join("cache/buildroot"))
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| e.file_name().len() == 64)
        .expect("no buildroot in the good run's cache")
        .path();
    let b = bootimage_gen::oscontainer::buildroot::Buildroot {
        dir: good,
        ostree_version: String::new(),
        emulator: None,
    };
    // Another run's disk, mounted on the host.
    let dir = scratch("faithful-held");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("mnt")).unwrap();
    let img = dir.join("disk.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(32 << 20)
        .unwrap();
    must(Command::new("mkfs.ext4").arg("-q").arg(&img));
    let dev = must(Command::new("losetup").args(["--find", "--show"]).arg(&img));
    let dev = PathBuf::from(dev.trim());
    must(Command::new("mount").arg(&dev).arg(dir.join("mnt")));
    // A command of the OS in its buildroot, started while that disk is mounted.
    let mut child = b
        .command(&[], &["/usr/bin/sleep", "30"])
        .unwrap()
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(3));
    must(Command::new("umount").arg(dir.join("mnt")));
    must(Command::new("losetup").arg("-d").arg(&dev));
    let t = std::time::Instant::now();
    while backing_of(&dev).is_some() && t.elapsed().as_secs() < 10 {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let held = backing_of(&dev).is_some();
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        !held,
        "{} stayed attached while a buildroot command ran",
        dev.display()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An ELF header of `machine` (little-endian, 64-bit, no program headers)
/// where the OS's x86_64 ostree was.
fn foreign_ostree(name: &str, machine: u8) -> PathBuf {
    damaged_buildroot(name, |br| {
        let bin = br.join("usr/bin/ostree");
        let mut head = vec![0u8; 64];
        head[..4].copy_from_slice(b"\x7fELF");
        head[4] = 2;
        head[5] = 1;
        head[18] = machine;
        std::fs::remove_file(&bin).unwrap();
        std::fs::write(&bin, head).unwrap();
    })
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn an_os_ostree_of_an_arch_qemu_user_lacks_names_binary_arch_and_package() {
    // IA-64 (EM_IA_64 = 0x32): no qemu-user emulates it.
    refused_with(
        &foreign_ostree("faithful-ia64", 0x32),
        &["/usr/bin/ostree", "ELF machine 0x32", "qemu-user-static"],
    );
    // aarch64: this host's static qemu-aarch64 runs it (no binfmt_misc
    // needed), and the fake binary fails: the probe names the emulator.
    refused_with(
        &foreign_ostree("faithful-aarch64", 0xb7),
        &[
            "/usr/bin/ostree",
            "aarch64, through",
            "qemu-aarch64",
            "does not run in its buildroot",
        ],
    );
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn aleph_and_repo_config_as_cosa_writes_them() {
    let root = metal(own(), "aleph", false).root;
    // osbuild org.osbuild.ostree.aleph: the file and its coreos_compat link.
    let link = std::fs::read_link(root.0.join(".coreos-aleph-version.json")).unwrap();
    assert_eq!(link, Path::new(".aleph-version.json"));
    let aleph: Value = serde_json::from_slice(&read(&root.0.join(".aleph-version.json"))).unwrap();
    let img = &aleph["container-image"];
    assert_eq!(img["image-digest"], os()["digest"], "{aleph}");
    assert_eq!(img["image-labels"]["containers.bootc"], "1", "{aleph}");
    assert_eq!(aleph["version"], os()["version"], "{aleph}");
    // cosa build.common.ipp.yaml's repo config (not s390x).
    let cfg = std::fs::read_to_string(root.0.join("ostree/repo/config")).unwrap();
    for line in [
        "bls-append-except-default=grub_users=\"\"",
        "readonly=true",
        "bootloader=none",
        "bootprefix=true",
    ] {
        assert!(cfg.lines().any(|l| l == line), "{line:?} not in:\n{cfg}");
    }
}

/// Processes whose command line names the buildroot's binds (the OS's
/// ostree or setfiles at work) and `of` (a run's cache: other tests run
/// beside this one), as `pid cmdline`.
fn buildroot_processes(of: &Path) -> Vec<String> {
    let of = of.display().to_string();
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(c) = std::fs::read(e.path().join("cmdline")) {
            let c = String::from_utf8_lossy(&c).replace('\0', " ");
            if c.contains("/run/bootimage/") && c.contains(&of) && !c.contains("unshare") {
                v.push(format!("{name} {c}"));
            }
        }
    }
    v
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn a_run_killed_while_the_os_tools_work_leaves_nothing() {
    // SIGKILL the run as soon as one of the OS's programs runs in the
    // buildroot: the PID namespace takes that program, the mount namespace
    // its mounts; then a run on the same cache must build.
    os();
    let root = scratch("faithful-kill");
    let _ = std::fs::remove_dir_all(&root);
    let cache = root.join("cache");
    let out = root.join("out");
    let mut caught = None;
    for attempt in 0..3 {
        let _ = std::fs::remove_dir_all(&out);
        let mut child = Command::new(env!("CARGO_BIN_EXE_bootimage-gen"))
            .args([
                "generate",
                &oci(RELEASE),
                "qemu",
                "--no-ostree-archive",
                "-o",
            ])
            .arg(&out)
            .env("BOOTIMAGE_GEN_CACHE_DIR", &cache)
            .env("HOME", &cache)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let t = std::time::Instant::now();
        while child.try_wait().unwrap().is_none() && t.elapsed().as_secs() < 300 {
            // The OS's `ostree admin deploy`: it runs for a second or more,
            // so whatever outlives the kill is seen below.
            let p: Vec<String> = buildroot_processes(&cache)
                .into_iter()
                .filter(|p| p.contains("/usr/bin/ostree admin deploy"))
                .collect();
            if !p.is_empty() {
                child.kill().unwrap();
                caught = Some(p);
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let _ = child.wait();
        if caught.is_some() {
            eprintln!("attempt {attempt}: killed the run while {caught:?} ran");
            break;
        }
    }
    let caught = caught.expect("the OS's ostree admin deploy not seen in 3 runs");
    // The namespace's processes die with the run (a moment to reap them;
    // far less than the deploy would have gone on for).
    let t = std::time::Instant::now();
    while !buildroot_processes(&cache).is_empty() && t.elapsed().as_millis() < 300 {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(
        buildroot_processes(&cache).is_empty(),
        "still running after the kill (was {caught:?}): {:?}",
        buildroot_processes(&cache)
    );
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let br = cache.join("buildroot").display().to_string();
    assert!(!mounts.contains(&br), "buildroot mounts left:\n{mounts}");
    // The next run recovers what the killed one left (loop devices, its
    // work directory) and builds.
    let _ = std::fs::remove_dir_all(&out);
    let o = run(
        &cache,
        &[
            "generate",
            &oci(RELEASE),
            "qemu",
            "--no-ostree-archive",
            "-o",
            out.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_no_partial_buildroot(&cache);
}

/// An empty bare-user repo at `dir` (whatever was there removed), open.
fn fresh_repo(dir: &Path) -> ostree_ext::ostree::Repo {
    let _ = std::fs::remove_dir_all(dir);
    must(
        Command::new("ostree")
            .arg("init")
            .arg("--mode=bare-user")
            .arg(format!("--repo={}", dir.display())),
    );
    let repo = ostree_ext::ostree::Repo::new_for_path(dir);
    repo.open(ostree_ext::gio::Cancellable::NONE).unwrap();
    repo
}

/// The image reference a node's origin names (`container-image-reference`
/// of the deployment's origin file, the key bootc and rpm-ostree read).
fn origin_imgref(m: &Metal) -> ostree_ext::container::OstreeImageReference {
    let mut origin = m.deployment.clone().into_os_string();
    origin.push(".origin");
    let text = std::fs::read_to_string(&origin).unwrap();
    let v = text
        .lines()
        .find_map(|l| l.strip_prefix("container-image-reference="))
        .unwrap_or_else(|| panic!("no container-image-reference in the origin:\n{text}"));
    ostree_ext::container::OstreeImageReference::try_from(v).unwrap()
}

/// How many layers of the OS image a pull into `repo` would fetch, as
/// ostree-ext's importer (rpm-ostree's and bootc's) decides before fetching.
fn layers_a_pull_would_fetch(repo: &ostree_ext::ostree::Repo, tag: &str) -> (usize, usize) {
    use ostree_ext::container::{store, OstreeImageReference};
    let src =
        OstreeImageReference::try_from(format!("ostree-unverified-image:{}", oci(tag)).as_str())
            .unwrap();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let mut imp = store::ImageImporter::new(repo, &src, Default::default())
            .await
            .unwrap();
        match imp.prepare().await.unwrap() {
            store::PrepareResult::AlreadyPresent(s) => (0, s.manifest.layers().len()),
            store::PrepareResult::Ready(p) => (p.layers_to_fetch().count(), p.all_layers().count()),
        }
    })
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn the_sysroot_repo_holds_the_image_as_a_node_that_pulled_it() {
    use ostree_ext::container::store;
    let m = metal(own(), "refs", false);
    let path = m.root.0.join("ostree/repo");
    let imgref = origin_imgref(&m);
    let repo = ostree_ext::ostree::Repo::new_for_path(&path);
    repo.open(ostree_ext::gio::Cancellable::NONE).unwrap();
    // bootc's and rpm-ostree's read of the booted image (ostree-ext
    // store::query_image: the image ref, the manifest in the merge commit's
    // metadata, the base layer's ref).
    let state = store::query_image(&repo, &imgref.imgref)
        .unwrap()
        .unwrap_or_else(|| panic!("no image ref for {imgref} in {}", path.display()));
    assert_eq!(
        state.manifest_digest.to_string(),
        os()["digest"].as_str().unwrap()
    );
    let dep = m
        .deployment
        .file_name()
        .unwrap()
        .to_string_lossy()
        .to_string();
    assert!(
        dep.starts_with(&format!("{}.", state.merge_commit)),
        "the image ref names merge commit {}, the deployment is {dep}",
        state.merge_commit
    );
    // `ostree refs`: the image ref and one ref per layer of the manifest.
    let refs = must(
        Command::new("ostree")
            .arg("refs")
            .arg(format!("--repo={}", path.display())),
    );
    let refs: Vec<&str> = refs.lines().collect();
    let n_layers = state.manifest.layers().len();
    assert_eq!(
        refs.iter()
            .filter(|r| r.starts_with("ostree/container/blob/"))
            .count(),
        n_layers,
        "{refs:#?}"
    );
    assert_eq!(
        refs.iter()
            .filter(|r| r.starts_with("ostree/container/image/"))
            .count(),
        1,
        "{refs:#?}"
    );
    // Pulling the image again fetches no layer.
    assert_eq!(
        layers_a_pull_would_fetch(&repo, "rhel-coreos-faithful"),
        (0, n_layers)
    );

    // The check bites: a repo holding only the merge commit (what a plain
    // `ostree pull-local` of it gives) has no image for bootc, and a pull
    // would fetch every layer.
    let bare = own().root.join("refs-negative-repo");
    let neg = fresh_repo(&bare);
    must(
        Command::new("ostree")
            .arg("pull-local")
            .arg("--commit-metadata-only")
            .arg(format!("--repo={}", bare.display()))
            .arg(&path)
            .arg(&state.merge_commit),
    );
    assert!(store::query_image(&neg, &imgref.imgref).unwrap().is_none());
    assert_eq!(
        layers_a_pull_would_fetch(&neg, "rhel-coreos-faithful"),
        (n_layers, n_layers)
    );
    std::fs::remove_dir_all(&bare).unwrap();
}

/// The image in a disk's sysroot repo as bootc reads it, and the number of
/// `ostree/container/blob/` refs there.
fn image_in_sysroot(m: &Metal) -> (Box<ostree_ext::container::store::LayeredImageState>, usize) {
    let path = m.root.0.join("ostree/repo");
    let repo = ostree_ext::ostree::Repo::new_for_path(&path);
    repo.open(ostree_ext::gio::Cancellable::NONE).unwrap();
    let state = ostree_ext::container::store::query_image(&repo, &origin_imgref(m).imgref)
        .unwrap()
        .unwrap_or_else(|| panic!("no image ref in {}", path.display()));
    let blobs = repo_refs(&path)
        .iter()
        .filter(|r| r.starts_with("ostree/container/blob/"))
        .count();
    (state, blobs)
}

/// `ostree refs` of the repo at `repo`.
fn repo_refs(repo: &Path) -> Vec<String> {
    must(
        Command::new("ostree")
            .arg("refs")
            .arg(format!("--repo={}", repo.display())),
    )
    .lines()
    .map(str::to_string)
    .collect()
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn a_chunked_os_image_lays_down_with_a_ref_per_layer_and_boots_on_composefs() {
    let c = &fx()["release_faithful"]["chunked"];
    let b = chunked();
    let m = metal(b, "chunked", false);
    let (state, blobs) = image_in_sysroot(&m);
    let layers = state.manifest.layers();
    // As rpm-ostree chunks RHCOS: a layer per component (Debian package
    // here) plus the commit's, each naming its components.
    let components = c["components"].as_u64().unwrap() as usize;
    assert!(
        layers.len() >= 64 && layers.len() > components,
        "{} layers for {components} components",
        layers.len()
    );
    let annotated = layers
        .iter()
        .filter(|l| {
            l.annotations()
                .as_ref()
                .is_some_and(|a| a.contains_key("ostree.components"))
        })
        .count();
    assert!(
        annotated >= components,
        "{annotated} layers name their components"
    );
    assert_eq!(
        state.manifest_digest.to_string(),
        c["os_digest"].as_str().unwrap()
    );
    assert_eq!(blobs, layers.len(), "a ref per layer");
    // The OS build's own commit under the chunks.
    assert_eq!(state.base_commit, os()["commit"].as_str().unwrap());
    let path = m.root.0.join("ostree/repo");
    let repo = ostree_ext::ostree::Repo::new_for_path(&path);
    repo.open(ostree_ext::gio::Cancellable::NONE).unwrap();
    assert_eq!(
        layers_a_pull_would_fetch(&repo, "rhel-coreos-faithful-chunked"),
        (0, layers.len())
    );
    assert!(m.deployment.join(".ostree.cfs").is_file());
    // (the repo holds the mount busy while open)
    drop(repo);
    drop(m);
    assert_labelled(b, "chunked");
    // Judged by the OS's prepare-root, on the firmware the unchunked
    // image's metal does not boot under.
    boots_on_composefs(b, "metal", Firmware::Uefi, "chunked");
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn a_policy_whose_setfiles_fails_names_the_file_and_setfiles_message() {
    // A file-contexts line with a path and no context: setfiles refuses
    // the whole specification ("line N is missing fields").
    let fc = "usr/etc/selinux/default/contexts/files/file_contexts";
    let cache = damaged_buildroot("faithful-badpolicy", |br| {
        let _ = std::fs::remove_file(br.join(format!("{fc}.bin")));
        let mut text = std::fs::read_to_string(br.join(fc)).unwrap();
        text.push_str("/bootimage-gen-test\n");
        std::fs::remove_file(br.join(fc)).unwrap();
        std::fs::write(br.join(fc), text).unwrap();
    });
    refused_with(
        &cache,
        &[
            "the OS's setfiles could not label",
            &format!("/{fc}"),
            "is missing fields",
        ],
    );
}

/// The live ISO and PXE files of the faithful OS.
fn live() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    build_platforms(&B, "faithful-live", RELEASE, &["live"], &[])
}

/// A published file of `b` whose name holds `-<what>.`.
fn published(b: &Built, what: &str) -> PathBuf {
    std::fs::read_dir(&b.out)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .contains(&format!("-{what}."))
        })
        .unwrap_or_else(|| panic!("no {what} in {}", b.out.display()))
}

fn check_live_boot(r: &boot::BootResult, mode: Mode) {
    assert_eq!(r.marker.mode, mode, "{}", r.marker);
    assert_eq!(r.marker.version, os()["version"].as_str().unwrap());
    // Upstream keeps composefs off for the live system (its root is the
    // rootfs image, not a deployment prepare-root mounts).
    assert_eq!(r.marker.composefs, Some(false), "{}", r.marker);
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn the_live_iso_and_pxe_of_the_faithful_os_boot() {
    let b = live();
    let iso = published(b, "live-iso");
    let r = boot::assert_boots(
        &[Media::Cdrom(iso)],
        Firmware::Bios,
        boot::default_timeout(),
    );
    eprintln!(
        "live ISO, SeaBIOS: {:.1} s ({})",
        r.duration.as_secs_f64(),
        r.marker
    );
    check_live_boot(&r, Mode::LiveIso);
    let kargs = must(
        Command::new("coreos-installer")
            .args(["iso", "kargs", "show"])
            .arg(published(b, "live-iso")),
    );
    let kargs: Vec<&str> = kargs
        .split_whitespace()
        .filter(|k| !k.starts_with("coreos.liveiso="))
        .collect();
    let pxe = Media::kernel(
        published(b, "live-kernel"),
        &[
            &published(b, "live-initramfs"),
            &published(b, "live-rootfs"),
        ],
        &format!("{} console=ttyS0", kargs.join(" ")),
    );
    let r = boot::assert_boots(&[pxe], Firmware::Uefi, boot::default_timeout());
    eprintln!(
        "live PXE, OVMF: {:.1} s ({})",
        r.duration.as_secs_f64(),
        r.marker
    );
    check_live_boot(&r, Mode::LivePxe);
}

/// The node image's shape over the faithful OS (3 derived layers).
fn node() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    build_platforms(
        &B,
        "faithful-node",
        "release-faithful-node",
        &["metal"],
        &[],
    )
}

/// Whether the merge commit ostree-ext makes from the node image, imported
/// into a fresh repo by this crate's ostree-ext for ostree `version`, holds
/// `path`.
fn imported_node_has(version: (u32, u32), path: &str) -> bool {
    use ostree_ext::container::{store, OstreeImageReference};
    let dir = node()
        .root
        .join(format!("import-{}.{}", version.0, version.1));
    let repo = fresh_repo(&dir);
    let src = OstreeImageReference::try_from(
        format!(
            "ostree-unverified-image:{}",
            oci("rhel-coreos-faithful-node")
        )
        .as_str(),
    )
    .unwrap();
    let merge = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let mut imp = store::ImageImporter::new(&repo, &src, Default::default())
            .await
            .unwrap();
        imp.set_ostree_version(version.0, version.1);
        match imp.prepare().await.unwrap() {
            store::PrepareResult::AlreadyPresent(s) => s.merge_commit,
            store::PrepareResult::Ready(p) => imp.import(p).await.unwrap().merge_commit,
        }
    });
    let ok = Command::new("ostree")
        .arg("ls")
        .arg(format!("--repo={}", dir.display()))
        .arg(&merge)
        .arg(path)
        .output()
        .unwrap()
        .status
        .success();
    drop(repo);
    std::fs::remove_dir_all(&dir).unwrap();
    ok
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn a_node_image_lays_down_as_a_node_would_have_it() {
    let c = &fx()["release_faithful"]["node"];
    let b = node();
    let m = metal(b, "node", false);
    let d = &m.deployment;
    // The COPY layer, the RUN layer's /etc edit and policy-store change.
    let marker = std::fs::read_to_string(d.join("usr/share/openshift/marker")).unwrap();
    assert!(marker.starts_with("node image payload"), "{marker}");
    assert!(d.join("etc/testos-node.conf").is_file());
    assert!(d
        .join("usr/etc/selinux/default/contexts/files/file_contexts.local")
        .is_file());
    // The image's refs: the base's and one per derived layer.
    let (state, blobs) = image_in_sysroot(&m);
    assert_eq!(
        state.manifest_digest.to_string(),
        c["os_digest"].as_str().unwrap()
    );
    assert_eq!(state.base_commit, os()["commit"].as_str().unwrap());
    assert_eq!(blobs, state.manifest.layers().len());
    assert_eq!(blobs, 1 + c["derived_layers"].as_u64().unwrap() as usize);
    // /var as the OS's ostree (2026.x) has it: `rm -rf /var && mkdir /var`
    // leaves /var empty in the commit, and nothing under
    // /usr/share/factory/var (where a libostree before 2024.3 moves a
    // derived layer's /var).
    assert!(
        !d.join("usr/share/factory/var").exists(),
        "the deployment has /usr/share/factory/var: the derived layers were imported as an ostree before 2024.3 would"
    );
    // The files carry the labels of the policy the node image ends with
    // (its RUN layer's `file_contexts.local` gives /usr/share/openshift
    // its own type): the merged tree's setfiles would change none, as
    // today's ostree-ext labels (bootc `write_merge_commit_impl`).
    assert!(
        b.log.contains(
            "layers merged and labelled with the merged tree's SELinux policy by the OS's ostree"
        ),
        "{}",
        b.log
    );
    let merged_policy = buildroot_of(b);
    for (at, host) in [
        ("/usr/share/openshift", d.join("usr/share/openshift")),
        ("/etc", d.join("etc")),
        ("/usr/lib", d.join("usr/lib")),
    ] {
        let (n, out) = would_relabel_by(&merged_policy, &host, at, &[]);
        assert_eq!(n, 0, "{at}: the OS's setfiles would relabel:\n{out}");
    }
    // The check bites: by the base's policy (what ostree-ext 0.15 labels
    // derived layers with), the COPY layer's files are labelled otherwise.
    let (n, out) = would_relabel(&d.join("usr/share/openshift"), "/usr/share/openshift", &[]);
    assert!(
        n >= 2,
        "the base policy agrees with the node's rule:\n{out}"
    );
    drop(m);
    // Every entry of the disk, by the policy the node image ends with.
    assert_labelled_by(&merged_policy, b, "node");
    // The check bites: imported for an ostree before 2024.3 (Debian 12's
    // libostree, this program's before this change), the /var the node
    // image emptied lands in /usr/share/factory/var.
    assert!(imported_node_has((2022, 7), "/usr/share/factory/var"));
    assert!(!imported_node_has((2026, 4), "/usr/share/factory/var"));
}

/// The same OS as chunkah splits it: no ostree commit in the image.
fn chunkah() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    build(&B, "faithful-chunkah", "release-faithful-chunkah", &[])
}

/// How many of the image's layers `repo` lacks a blob ref for: what
/// today's ostree-ext (bootc `store.rs` `prepare`, where an image with no
/// `ostree.final-diffid` has every layer derived) would fetch on a pull.
fn layers_without_ref(repo: &Path, layers: &[ostree_ext::oci_spec::image::Descriptor]) -> usize {
    let refs = repo_refs(repo);
    layers
        .iter()
        .filter(|l| {
            let r = ostree_ext::refescape::prefix_escape_for_ref(
                "ostree/container/blob",
                l.digest().as_ref(),
            )
            .unwrap();
            !refs.contains(&r)
        })
        .count()
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn a_chunkah_image_with_no_ostree_commit_lays_down_and_boots_on_composefs() {
    let c = &fx()["release_faithful"]["chunkah"];
    let b = chunkah();
    // Made by the OS's own ostree from the merged layers, and said so.
    assert!(
        b.log.contains(
            "layers merged and labelled with the merged tree's SELinux policy by the OS's ostree"
        ),
        "{}",
        b.log
    );
    let d = &b.meta["images"]["metal"]["ostree-deploy"];
    assert!(
        d["import-committed-by"]
            .as_str()
            .is_some_and(|s| s.contains(&os_ostree_version())),
        "{d}"
    );
    let m = metal(b, "chunkah", false);
    let (state, blobs) = image_in_sysroot(&m);
    let layers = state.manifest.layers();
    assert_eq!(
        state.manifest_digest.to_string(),
        c["os_digest"].as_str().unwrap()
    );
    // chunkah's shape: content layers named by component, no ostree commit.
    assert!(layers.len() > 8, "{} layers", layers.len());
    for l in layers {
        let a = l.annotations().clone().unwrap_or_default();
        assert!(a.contains_key("org.chunkah.component"), "{a:?}");
        assert!(!a.contains_key("ostree.components"), "{a:?}");
    }
    let labels = state
        .configuration
        .config()
        .as_ref()
        .and_then(|c| c.labels().clone())
        .unwrap_or_default();
    assert!(!labels.contains_key("ostree.commit") && !labels.contains_key("ostree.final-diffid"));
    assert_eq!(blobs, layers.len(), "a ref per layer");
    let path = m.root.0.join("ostree/repo");
    assert_eq!(layers_without_ref(&path, layers), 0);
    // The tree the layers merge into is the OS build's own: same files,
    // owners, modes, xattrs and SELinux labels (the build committed it
    // with the same policy by the same ostree), so the same root checksum.
    let tree = |repo: &Path, commit: &str| {
        must(
            Command::new("ostree")
                .arg(format!("--repo={}", repo.display()))
                .args(["ls", "-C", "-d", commit, "/"]),
        )
    };
    let cache_repo = b.root.join("cache/repo");
    let own_commit = os()["commit"].as_str().unwrap();
    let ours = tree(&path, &state.merge_commit);
    let build = tree(&fixture_dir().join("repo"), own_commit);
    must(
        Command::new("ostree")
            .arg(format!("--repo={}", cache_repo.display()))
            .arg("pull-local")
            .arg(fixture_dir().join("repo"))
            .arg(own_commit),
    );
    let diff = must(
        Command::new("ostree")
            .arg(format!("--repo={}", cache_repo.display()))
            .args(["diff", own_commit, &state.merge_commit]),
    );
    eprintln!("the OS build's commit vs the merged chunkah layers:\n{diff}");
    assert!(diff.trim().is_empty(), "{diff}");
    assert_eq!(
        ours.split_whitespace().nth(4),
        build.split_whitespace().nth(4)
    );
    // The disk's own judges.
    assert!(m.deployment.join(".ostree.cfs").is_file());
    drop(m);
    assert_labelled(b, "chunkah");
    boots_on_composefs(b, "qemu", Firmware::Bios, "chunkah");

    // The check bites: a repo with only the merge commit lacks every
    // layer.
    let bare = b.root.join("chunkah-negative-repo");
    fresh_repo(&bare);
    assert_eq!(layers_without_ref(&bare, layers), layers.len());
    std::fs::remove_dir_all(&bare).unwrap();
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn a_chunkah_image_with_no_kernel_says_so() {
    os();
    let root = scratch("faithful-chunkah-nokernel");
    let _ = std::fs::remove_dir_all(&root);
    let out = root.join("out");
    let line = expect_error(
        &root.join("cache"),
        &[
            "generate",
            &oci("release-faithful-chunkah-nokernel"),
            "metal",
            "-o",
            out.to_str().unwrap(),
        ],
        "no kernel",
    );
    for w in [
        "carries no ostree commit",
        "/usr/lib/modules",
        "not a bootable",
    ] {
        assert!(line.contains(w), "'{w}' not in: {line}");
    }
    assert!(!out.exists(), "output directory created");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(root.to_str().unwrap()), "{mounts}");
    let loops = must(Command::new("losetup").arg("-a"));
    assert!(!loops.contains(root.to_str().unwrap()), "{loops}");
    let _ = std::fs::remove_dir_all(&root);
}
