//! Inputs exactly as upstream ships them (issue 14, docs/contract.md §1.3/§1.4): release
//! images whose config has only the OCI-required fields, Docker schema 2,
//! zstd layers, `-multi` manifest lists, derived OS images, and credential
//! files the user cannot read. Each is generated from or resolved, and the
//! result checked with tools we did not write (sfdisk, debugfs, skopeo).
use crate::common::*;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// An unprivileged uid of its own (no other test uses it).
const UID: &str = "65533";

fn cache() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// `fixture.json` key `k` (panics naming it when absent).
fn fxk(k: &str) -> &'static Value {
    let v = &fx()[k];
    assert!(!v.is_null(), "fixture.json has no {k}: {:#}", fx());
    v
}

/// The partition table of a raw disk, read by sfdisk.
fn sfdisk(disk: &Path) -> Value {
    let o = must(Command::new("sfdisk").arg("--json").arg(disk));
    serde_json::from_str(&o).unwrap()
}

/// The BLS entry's `options` line of a metal disk, read with debugfs from
/// the boot partition (partition 3).
fn bls_options(disk: &Path) -> String {
    let t = sfdisk(disk);
    let p3 = &t["partitiontable"]["partitions"][2];
    let (start, size) = (
        p3["start"].as_u64().unwrap() * 512,
        p3["size"].as_u64().unwrap() * 512,
    );
    let l = Loop::new(disk, start, Some(size), 512);
    let ls = must(Command::new("debugfs").args(["-R", "ls -p /loader/entries", &l.0]));
    let entry = ls
        .lines()
        .filter_map(|x| x.split('/').nth(5))
        .find(|n| n.ends_with(".conf"))
        .unwrap_or_else(|| panic!("no BLS entry: {ls}"))
        .to_string();
    let bls =
        must(Command::new("debugfs").args(["-R", &format!("cat /loader/entries/{entry}"), &l.0]));
    bls.lines()
        .find_map(|x| x.strip_prefix("options "))
        .unwrap_or_else(|| panic!("no options in {bls}"))
        .to_string()
}

/// `generate metal --compress none` from `release`; returns the raw disk.
fn generate_metal(cache: &Path, release: &str, flag: &str, out: &Path) -> std::path::PathBuf {
    let o = run(
        cache,
        &[
            "generate",
            release,
            flag,
            "metal",
            "--compress",
            "none",
            "-o",
            out.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "generate {release}:\n{}", stderr(&o));
    let meta: Value =
        serde_json::from_slice(&std::fs::read(out.join("meta.json")).unwrap()).unwrap();
    image_file(&meta, out, "metal")
}

fn check_metal(disk: &Path) {
    let t = sfdisk(disk);
    let parts = t["partitiontable"]["partitions"].as_array().unwrap();
    let names: Vec<&str> = parts.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["BIOS-BOOT", "EFI-SYSTEM", "boot", "root"], "{t:#}");
    let opts = bls_options(disk);
    assert!(opts.contains("ignition.platform.id=metal"), "{opts}");
}

/// The fixture release as an OCI layout at `dir` whose layers are stored
/// uncompressed (`application/vnd.oci.image.layer.v1.tar`).
fn plain_layout(dir: &Path) {
    use sha2::Digest as _;
    use std::io::Read;
    let mut m = fixture_manifest("release");
    std::fs::create_dir_all(dir.join("blobs/sha256")).unwrap();
    let put = |data: &[u8]| -> (String, usize) {
        let d = format!("sha256:{}", hex::encode(sha2::Sha256::digest(data)));
        std::fs::write(dir.join("blobs/sha256").join(&d[7..]), data).unwrap();
        (d, data.len())
    };
    let cfg = std::fs::read(fixture_blob(m["config"]["digest"].as_str().unwrap())).unwrap();
    put(&cfg);
    for l in m["layers"].as_array_mut().unwrap() {
        let mut tar = Vec::new();
        flate2::read::GzDecoder::new(
            std::fs::File::open(fixture_blob(l["digest"].as_str().unwrap())).unwrap(),
        )
        .read_to_end(&mut tar)
        .unwrap();
        let (d, n) = put(&tar);
        *l = serde_json::json!({"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": d, "size": n});
    }
    let (d, n) = put(&serde_json::to_vec(&m).unwrap());
    std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    let idx = serde_json::json!({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": d, "size": n,
        "annotations": {"org.opencontainers.image.ref.name": "release"}}]});
    std::fs::write(dir.join("index.json"), serde_json::to_vec(&idx).unwrap()).unwrap();
}

/// A release whose image config has only `architecture`, `os` and `rootfs`
/// (no history, created or config), one in Docker schema 2, and one whose
/// payload layer is zstd: each resolves and generates.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn optional_fields_schema2_and_zstd_releases_generate() {
    let c = cache();
    let root = tempfile::tempdir().unwrap();
    // Docker schema 2 cannot sit in an OCI layout for skopeo 1.9 (its oci:
    // transport skips non-OCI media types): the fixture keeps it as a dir:
    // image, served here by a registry next to the OS it names.
    let reg = Registry::start(false);
    let v2 = fxk("release_v2s2");
    let v2dir = fixture_dir().join(v2["dir"].as_str().unwrap());
    reg.push(&format!("dir:{}", v2dir.display()), "ocp/release:v2s2");
    reg.push(&oci("rhel-coreos"), "ocp/release:rhel-coreos");
    let v2ref = format!("docker://{}/ocp/release:v2s2", reg.host());
    // Uncompressed layers (media type ...tar): the release with its gzip
    // layers stored decompressed (diff ids, and so the config, unchanged),
    // beside the OS it names.
    let plain = root.path().join("plain");
    plain_layout(&plain);
    must(
        Command::new("skopeo")
            .args(["copy", "--quiet", "--preserve-digests", &oci("rhel-coreos")])
            .arg(format!("oci:{}:rhel-coreos", plain.display())),
    );
    let plain_ref = format!("oci:{}:release", plain.display());
    for (tag, rel) in [
        ("release-nohistory", oci("release-nohistory")),
        ("release-v2s2", v2ref.clone()),
        ("release-zstd", oci("release-zstd")),
        ("release-plain", plain_ref.clone()),
    ] {
        // The shape is really what it claims (read by skopeo, not by us).
        let tls = "--tls-verify=false";
        let raw = must(Command::new("skopeo").args(["inspect", tls, "--raw", &rel]));
        let cfg = must(Command::new("skopeo").args(["inspect", tls, "--config", "--raw", &rel]));
        let m: Value = serde_json::from_str(&raw).unwrap();
        let cfg: Value = serde_json::from_str(&cfg).unwrap();
        match tag {
            "release-nohistory" => {
                assert!(
                    cfg.get("history").is_none()
                        && cfg.get("config").is_none()
                        && cfg.get("created").is_none(),
                    "{cfg:#}"
                );
            }
            "release-v2s2" => assert_eq!(
                m["mediaType"],
                "application/vnd.docker.distribution.manifest.v2+json"
            ),
            "release-plain" => assert_eq!(
                m["layers"].as_array().unwrap().last().unwrap()["mediaType"],
                "application/vnd.oci.image.layer.v1.tar",
                "{m:#}"
            ),
            _ => assert!(
                m["layers"].as_array().unwrap().last().unwrap()["mediaType"]
                    .as_str()
                    .unwrap()
                    .ends_with("+zstd"),
                "{m:#}"
            ),
        }
        let insecure = "--insecure";
        let doc = ok_json(c.path(), &["inspect", &rel, insecure, "--json"]);
        assert_eq!(doc["os"]["tag"], "rhel-coreos", "{tag}");
        assert_eq!(doc["release"]["architecture"], "x86_64", "{tag}");
        if tag != "release-plain" {
            assert_eq!(
                doc["release"]["digest"],
                fxk(&tag.replace('-', "_"))["digest"],
                "{tag}"
            );
        }
        let out = root.path().join(tag);
        check_metal(&generate_metal(c.path(), &rel, insecure, &out));
    }
}

/// A `-multi` payload: an OCI index whose entries are per-arch releases
/// whose OS is itself an index. `--arch` picks, the digests are printed,
/// and a missing arch lists the ones there are. Through a registry too
/// (where the index comes from `skopeo inspect --raw`).
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn multi_arch_manifest_lists() {
    let m = fxk("release_multi");
    let c = cache();
    let doc = ok_json(
        c.path(),
        &["inspect", &oci("release-multi"), "--json", "--import"],
    );
    assert_eq!(doc["release"]["index"]["index_digest"], m["digest"]);
    assert_eq!(doc["release"]["digest"], m["manifests"]["amd64"]);
    assert_eq!(doc["release"]["index"]["platform"], "linux/amd64");
    assert_eq!(doc["release"]["architecture"], "x86_64");
    assert_eq!(doc["os"]["index"]["index_digest"], m["os"]["digest"]);
    assert_eq!(doc["os"]["digest"], fx()["rhel_coreos"]["digest"]);
    assert_eq!(doc["os"]["commit"], fx()["rhel_coreos"]["commit"]);
    // The second arch: resolved (not built: its OS is metadata only).
    let arm = ok_json(
        c.path(),
        &[
            "inspect",
            &oci("release-multi"),
            "--arch",
            "aarch64",
            "--json",
        ],
    );
    assert_eq!(arm["release"]["digest"], m["manifests"]["arm64"]);
    assert_eq!(arm["release"]["architecture"], "aarch64");
    // The fixture's arm64 entries carry variant v8, as real ones do.
    assert!(
        arm["os"]["index"]["platform"]
            .as_str()
            .unwrap()
            .starts_with("linux/arm64"),
        "{arm:#}"
    );
    assert_eq!(arm["os"]["digest"], m["os"]["manifests"]["arm64"]);
    let text = stdout(&run(
        c.path(),
        &["inspect", &oci("release-multi"), "--arch", "arm64"],
    ));
    assert!(
        text.contains(m["digest"].as_str().unwrap()) && text.contains("linux/arm64"),
        "{text}"
    );
    // A missing arch: one line listing what the list has.
    let e = expect_error(
        c.path(),
        &["inspect", &oci("release-multi-partial"), "--arch", "s390x"],
        "s390x",
    );
    assert!(
        e.contains("linux/amd64") && e.contains("linux/arm64") && e.contains("--arch"),
        "{e}"
    );
    expect_error(
        c.path(),
        &["inspect", &oci("release-multi"), "--arch", "mips"],
        "--arch mips",
    );
    // A single-arch release with another --arch.
    expect_error(
        c.path(),
        &["inspect", &oci("release"), "--arch", "aarch64"],
        "single-architecture",
    );
    // The same through a registry.
    let reg = Registry::start(false);
    for (src, dst) in [
        ("release-multi", "ocp/release:multi"),
        ("rhel-coreos-multi", "ocp/release:os-multi"),
    ] {
        let o = Command::new("skopeo")
            .args([
                "copy",
                "--quiet",
                "--all",
                "--preserve-digests",
                "--dest-tls-verify=false",
                &oci(src),
            ])
            .arg(format!("docker://{}/{dst}", reg.host()))
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "push {src}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let rel = format!("{}/ocp/release:multi", reg.host());
    let d = ok_json(
        c.path(),
        &["inspect", &rel, "--insecure", "--arch", "aarch64", "--json"],
    );
    assert_eq!(d["release"]["index"]["index_digest"], m["digest"]);
    assert_eq!(d["release"]["digest"], m["manifests"]["arm64"]);
    assert_eq!(d["os"]["digest"], m["os"]["manifests"]["arm64"]);
    let d = ok_json(c.path(), &["inspect", &rel, "--insecure", "--json"]);
    assert_eq!(d["os"]["digest"], fx()["rhel_coreos"]["digest"]);
}

/// platforms.json in the arch-keyed shape (hand-made OS images): the build
/// arch's console settings land in the BLS entry and console.cfg; the
/// multi-arch release's amd64 entry generates like the plain release.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn arch_keyed_platforms_and_multi_generate() {
    let c = cache();
    let root = tempfile::tempdir().unwrap();
    let out = root.path().join("archkeyed");
    let raw = root.path().join("raw");
    let o = run(
        c.path(),
        &[
            "generate",
            &oci("release-archkeyed"),
            "qemu",
            "--debug-raw-dir",
            raw.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let opts = bls_options(&raw.join("qemu.raw"));
    assert!(opts.contains("ignition.platform.id=qemu"), "{opts}");
    assert!(
        opts.contains("console=ttyS0,115200n8"),
        "the arch-keyed file's qemu kargs: {opts}"
    );
    let multi = root.path().join("multi");
    check_metal(&generate_metal(
        c.path(),
        &oci("release-multi"),
        "--quiet",
        &multi,
    ));
    let meta: Value =
        serde_json::from_slice(&std::fs::read(multi.join("meta.json")).unwrap()).unwrap();
    assert_eq!(meta["coreos-assembler.basearch"], "x86_64");
    assert_eq!(meta["ostree-commit"], fx()["rhel_coreos"]["commit"]);
    // The OS container shipped beside it is the list's entry for the arch.
    let archive = image_file(&meta, &multi, "ostree");
    let i: Value = serde_json::from_str(&must(
        Command::new("skopeo").args(["inspect", &format!("oci-archive:{}", archive.display())]),
    ))
    .unwrap();
    assert_eq!(i["Architecture"], "amd64", "{i:#}");
    assert_eq!(
        i["Digest"],
        fxk("release_multi")["os"]["manifests"]["amd64"],
        "{i:#}"
    );
}

/// A derived OS image (ordinary container layers on the ostree commit):
/// inspect says so; the layer's files are in the deployed root of metal;
/// the disk boots.
#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn derived_os_image_is_deployed_with_its_layers() {
    let d = fxk("rhel_coreos_derived");
    let c = cache();
    let doc = ok_json(
        c.path(),
        &["inspect", &oci("release-derived"), "--json", "--import"],
    );
    assert_eq!(doc["os"]["derived"], true, "{doc:#}");
    assert_eq!(doc["os"]["derived-layers"], 1);
    // The OS's own commit is the base's; the deployed one is the merge.
    assert_eq!(doc["os"]["commit"], fx()["rhel_coreos"]["commit"]);
    assert_ne!(doc["os"]["import-commit"], doc["os"]["commit"]);
    let text = stdout(&run(c.path(), &["inspect", &oci("release-derived")]));
    assert!(
        text.contains("1 container layer(s) on the ostree commit"),
        "{text}"
    );
    let out = tempfile::tempdir().unwrap();
    let disk = generate_metal(c.path(), &oci("release-derived"), "--quiet", out.path());
    check_metal(&disk);
    // Mount the root read-only and look into the deployment.
    let t = sfdisk(&disk);
    let p4 = &t["partitiontable"]["partitions"][3];
    let mnt = tempfile::tempdir().unwrap();
    let m = Mnt::new(
        &disk,
        p4["start"].as_u64().unwrap() * 512,
        p4["size"].as_u64().unwrap() * 512,
        "xfs",
        "ro,norecovery",
        mnt.path(),
    );
    let deploys = must(Command::new("sh").arg("-c").arg(format!(
        "ls -d {}/ostree/deploy/*/deploy/*.0",
        m.0.display()
    )));
    let dep = Path::new(deploys.lines().next().unwrap());
    for (path, want) in d["files"].as_object().unwrap() {
        let want = want.as_str().unwrap();
        // /etc of the image is /usr/etc in the commit (ostree-ext), /etc once deployed.
        let rel = path.trim_start_matches('/');
        let got = std::fs::read_to_string(dep.join(rel))
            .or_else(|_| std::fs::read_to_string(dep.join("usr").join(rel)))
            .unwrap_or_else(|e| panic!("{path} not in the deployment {}: {e}", dep.display()));
        assert_eq!(got, want, "{path}");
    }
    drop(m);
    let r = boot::assert_boots(
        &[boot::Media::disk(&disk)],
        boot::Firmware::Bios,
        boot::default_timeout(),
    );
    assert_eq!(r.marker.platform, "metal", "{}", r.log);
}

/// A derived layer that writes outside /usr, /etc and /var: said plainly.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn derived_layer_outside_usr_etc_var() {
    let c = cache();
    let out = c.path().join("out");
    let o = run(
        c.path(),
        &[
            "generate",
            &oci("release-derived-bad"),
            "metal",
            "-o",
            out.to_str().unwrap(),
        ],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let e: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(e.len(), 1, "{err}");
    assert!(
        e[0].contains("outside /usr, /etc and /var")
            && e[0].contains("ostree-ext")
            && e[0].contains("file(s)"),
        "{err}"
    );
    assert!(!out.exists());
    // inspect shows it rather than failing.
    let doc = ok_json(
        c.path(),
        &["inspect", &oci("release-derived-bad"), "--import", "--json"],
    );
    assert_eq!(doc["os"]["derived"], true);
    assert!(
        !doc["os"]["dropped-by-import"]
            .as_array()
            .unwrap()
            .is_empty(),
        "{doc:#}"
    );
}

/// A user who cannot read the default credentials file (root-only
/// /run/containers, as left by root's podman) still pulls anonymously,
/// told why; an unreadable --registry-config is named with its errno.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn unreadable_credentials() {
    use std::os::unix::fs::PermissionsExt;
    let reg = Registry::start(false);
    reg.push(&oci("release"), "ocp/release:4.18.0-test");
    reg.push(&oci("rhel-coreos"), "ocp/release:rhel-coreos");
    let rundir = Path::new("/run/containers").join(UID);
    std::fs::create_dir_all(&rundir).unwrap();
    std::fs::write(rundir.join("auth.json"), r#"{"auths":{}}"#).unwrap();
    std::fs::set_permissions(&rundir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let _g = RmDir(rundir.clone());
    let c = cache();
    std::fs::set_permissions(c.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let as_user = |args: &[&str]| {
        Command::new("setpriv")
            .args([
                &format!("--reuid={UID}"),
                &format!("--regid={UID}"),
                "--clear-groups",
            ])
            .arg(env!("CARGO_BIN_EXE_bootimage-gen"))
            .args(args)
            .env("BOOTIMAGE_GEN_CACHE_DIR", c.path())
            .env("HOME", c.path())
            .env_remove("XDG_RUNTIME_DIR")
            .env_remove("REGISTRY_AUTH_FILE")
            .output()
            .unwrap()
    };
    let rel = format!("{}/ocp/release:4.18.0-test", reg.host());
    let o = as_user(&["inspect", &rel, "--insecure", "--json"]);
    let err = stderr(&o);
    assert!(o.status.success(), "anonymous pull failed: {err}");
    assert!(
        err.contains(&format!("/run/containers/{UID}/auth.json"))
            && err.contains("ermission denied"),
        "{err}"
    );
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["release"]["digest"], fx()["release"]["digest"]);
    // An explicit file the user cannot read: named, with the cause.
    let f = c.path().join("auth.json");
    std::fs::write(&f, r#"{"auths":{}}"#).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o000)).unwrap();
    let o = as_user(&[
        "inspect",
        &rel,
        "--insecure",
        "--registry-config",
        f.to_str().unwrap(),
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(
        err.lines().filter(|l| l.starts_with("error:")).count(),
        1,
        "{err}"
    );
    assert!(
        err.contains(f.to_str().unwrap()) && err.contains("ermission denied"),
        "{err}"
    );
}

/// An RHCOS 4.16/4.17-style OS: cosa's merged image.json (its
/// image-default.yaml keys, `grub-script`): inspect names the era and the
/// keys; `--dry-run` says where grub.cfg comes from; the metal disk's
/// `/boot/grub2/grub.cfg` is the grub-script (metal has no console
/// commands to insert).
#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn cosa_era_image_json_grub_script() {
    let f = fxk("release_cosa417");
    let c = cache();
    let rel = oci("release-cosa417");
    let doc = ok_json(c.path(), &["inspect", &rel, "--json", "--import"]);
    let cfg = &doc["bootimage-config"];
    assert_eq!(cfg["image-json-era"], "cosa", "{cfg:#}");
    let script = std::fs::read_to_string(top().join("fixtures/os/cosa-4.17/grub.cfg")).unwrap();
    assert_eq!(cfg["grub-script-bytes"], script.len());
    let keys: Vec<&str> = cfg["cosa-keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    assert!(
        keys.iter()
            .any(|k| k.starts_with("ostree-format='oci-chunked-v1'")),
        "{keys:?}"
    );
    assert!(
        keys.iter().any(|k| k.starts_with("bootfs='ext4'")),
        "{keys:?}"
    );
    // The OS's own image.yaml keys win over cosa's defaults.
    assert_eq!(cfg["image"]["size"]["value"], 10);
    assert_eq!(cfg["image"]["live-rootfs-fsoptions"]["value"], "-comp zstd");
    let out = tempfile::tempdir().unwrap();
    let o = run(
        c.path(),
        &[
            "generate",
            &rel,
            "metal",
            "--dry-run",
            "-o",
            out.path().to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let plan: Value = serde_json::from_slice(&o.stdout).unwrap();
    let g = plan["os"]["grub_cfg"].as_str().unwrap();
    assert!(g.contains("image.json grub-script"), "{g}");
    let disk = generate_metal(c.path(), &rel, "--quiet", out.path());
    check_metal(&disk);
    let t = sfdisk(&disk);
    let p3 = &t["partitiontable"]["partitions"][2];
    let l = Loop::new(
        &disk,
        p3["start"].as_u64().unwrap() * 512,
        Some(p3["size"].as_u64().unwrap() * 512),
        512,
    );
    let got = must(Command::new("debugfs").args(["-R", "cat /grub2/grub.cfg", &l.0]));
    assert_eq!(
        got,
        script.trim_end(),
        "grub.cfg of {} ({})",
        disk.display(),
        f["os"]["digest"]
    );
    drop(l);
    // It boots as those bootimages did: that grub.cfg, whose `blscfg`
    // makes the menu from the BLS entries (the variant is the faithful OS
    // with GRUB 2.14's BLS support), under both firmwares.
    for fw in [boot::Firmware::Bios, boot::Firmware::Uefi] {
        let r = boot::assert_boots(&[boot::Media::disk(&disk)], fw, boot::default_timeout());
        assert_eq!(r.marker.mode, boot::Mode::Disk, "{fw:?}: {}", r.log);
        assert_eq!(r.marker.platform, "metal", "{fw:?}: {}", r.log);
        // ignition.firstboot comes from the grub-script's first-boot block.
        assert!(r.marker.firstboot, "{fw:?}: {}", r.log);
        eprintln!("cosa-era metal ({fw:?}): booted in {:.1?}", r.duration);
    }
}

/// `--os-stream all` on the OCP 5-style dual-stream payload: one output
/// tree per stream (each with its meta.json and stream.json), and
/// streams.json shaped like the ConfigMap's `data.streams`, which
/// coreos-stream-metadata reads for both streams.
///
/// Both streams are reproducible (docs/contract.md §9): the same command
/// again, on another cache, output path and TMPDIR, in another time zone,
/// on one CPU, writes every file of both trees byte for byte the same; and
/// `verify` of the rhel-10 tree (`-- --os-stream rhel-10`) exits 0.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn os_stream_all_builds_every_stream() {
    let f = fxk("release_ocp5");
    let c = cache();
    let out = tempfile::tempdir().unwrap();
    let release = oci("release-ocp5");
    let args = |o: &Path| -> Vec<String> {
        [
            "generate",
            &release,
            "metal",
            "--os-stream",
            "all",
            "--compress",
            "none",
            "--no-ostree-archive",
            "-o",
            o.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let a = args(out.path());
    let o = run(c.path(), &a.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(o.status.success(), "{}", stderr(&o));
    // The release is read and its signature checked once for both streams
    // (each stream's run used to resolve it again: three checks), and each
    // stream's OS image is chosen once.
    let err = stderr(&o);
    let checks = err
        .lines()
        .filter(|l| l.trim_start().starts_with("release ") && l.contains(": "))
        .count();
    assert_eq!(checks, 1, "the release's check, once:\n{err}");
    let chosen = err.matches("OS image: release tag ").count();
    assert_eq!(chosen, 2, "each stream's OS image chosen once:\n{err}");
    let again = tempfile::tempdir().unwrap();
    let (out2, tmp) = (again.path().join("out"), again.path().join("tmp"));
    std::fs::create_dir_all(&tmp).unwrap();
    let exe = env!("CARGO_BIN_EXE_bootimage-gen");
    let o2 = Command::new("taskset")
        .args(["-c", "0", exe])
        .args(args(&out2))
        .arg("--cache-dir")
        .arg(again.path().join("cache"))
        .env("TZ", "America/St_Johns")
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    assert!(o2.status.success(), "the second run: {}", stderr(&o2));
    let mut files = Vec::new();
    for d in ["", "rhel-9", "rhel-10"] {
        for e in std::fs::read_dir(out.path().join(d)).unwrap() {
            let p = e.unwrap().path();
            if p.is_file() {
                files.push(p.strip_prefix(out.path()).unwrap().to_path_buf());
            }
        }
    }
    assert!(files.len() >= 7, "{files:?}");
    for rel in &files {
        assert!(
            std::fs::read(out.path().join(rel)).unwrap() == std::fs::read(out2.join(rel)).unwrap(),
            "{} differs between the two runs of both streams",
            rel.display()
        );
    }
    let v = Command::new(exe)
        .arg("verify")
        .arg(out.path().join("rhel-10"))
        .args(["--", "--os-stream", "rhel-10", "--cache-dir"])
        .arg(c.path())
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&v.stdout), stderr(&v));
    assert_eq!(
        v.status.code(),
        Some(0),
        "verify of the rhel-10 tree:\n{text}"
    );
    let raw = std::fs::read(out.path().join("streams.json")).unwrap();
    let all: serde_json::Map<String, Value> = serde_json::from_slice(&raw).unwrap();
    // Both streams, keyed as the ConfigMap's data.streams (order: the runs').
    let mut keys: Vec<_> = all.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["rhel-10", "rhel-9"]);
    for (stream, key) in [("rhel-9", "rhel9"), ("rhel-10", "rhel10")] {
        let dir = out.path().join(stream);
        let meta: Value =
            serde_json::from_slice(&std::fs::read(dir.join("meta.json")).unwrap()).unwrap();
        assert_eq!(meta["ostree-version"], f[key]["version"], "{stream}");
        check_metal(&image_file(&meta, &dir, "metal"));
        let s: coreos_stream_metadata::Stream =
            serde_json::from_value(all[stream].clone()).unwrap();
        let metal = &s.architectures["x86_64"].artifacts["metal"];
        let loc = &metal.formats["raw"]["disk"].location;
        assert!(
            loc.contains(f[key]["version"].as_str().unwrap()),
            "{stream}: {loc}"
        );
        // streams.json is its stream's stream.json with every location
        // seen from streams.json: `<stream>/<file>`, and the file is there.
        let mut on_disk: Value =
            serde_json::from_slice(&std::fs::read(dir.join("stream.json")).unwrap()).unwrap();
        let mut n = 0;
        for p in on_disk["architectures"]["x86_64"]["artifacts"]
            .as_object_mut()
            .unwrap()
            .values_mut()
        {
            for f in p["formats"].as_object_mut().unwrap().values_mut() {
                for a in f.as_object_mut().unwrap().values_mut() {
                    let l = format!("{stream}/{}", a["location"].as_str().unwrap());
                    assert!(out.path().join(&l).is_file(), "{l}");
                    a["location"] = l.into();
                    n += 1;
                }
            }
        }
        assert!(n > 0, "{stream}: no artifacts in stream.json");
        assert_eq!(on_disk, all[stream], "{stream}");
    }
}

/// The MCO's default stream of each payload shape, as a user runs it: no
/// `--os-stream`, `generate metal live`. OCP 5's dual-stream payload picks
/// rhel-10 (its OS is the RHEL 10-shaped test OS, booted under OVMF), OKD's
/// picks `stream-coreos`, its only stream (booted under SeaBIOS). Each disk
/// boots to the OS's marker: the OS chosen is the one laid down.
#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn each_payloads_default_stream_builds_a_disk_that_boots() {
    let ocp5 = fxk("release_ocp5");
    let okd = fxk("release_okd");
    for (release, tag, version, fw) in [
        (
            "release-ocp5",
            "rhel-coreos-10 (stream rhel-10): the MCO's default stream for OCP 5.x is rhel-10",
            &ocp5["rhel10"]["version"],
            boot::Firmware::Uefi,
        ),
        (
            "release-okd",
            "stream-coreos: stream-coreos is the release's only OS stream",
            &okd["os"]["version"],
            boot::Firmware::Bios,
        ),
    ] {
        let c = cache();
        let out = c.path().join("out");
        let o = run(
            c.path(),
            &[
                "generate",
                &oci(release),
                "metal",
                "live",
                "--compress",
                "none",
                "--no-ostree-archive",
                "-o",
                out.to_str().unwrap(),
            ],
        );
        let log = stderr(&o);
        assert!(o.status.success(), "{release}: {log}");
        assert!(
            log.contains(&format!("OS image: release tag {tag}")),
            "{release}: {log}"
        );
        let meta: Value = serde_json::from_slice(&read(&out.join("meta.json"))).unwrap();
        assert_eq!(&meta["ostree-version"], version, "{release}");
        for k in ["live-iso", "live-kernel", "live-initramfs", "live-rootfs"] {
            assert!(image_file(&meta, &out, k).is_file(), "{release}: {k}");
        }
        let disk = image_file(&meta, &out, "metal");
        let r = boot::assert_boots(&[boot::Media::disk(&disk)], fw, boot::default_timeout());
        assert_eq!(r.marker.mode, boot::Mode::Disk, "{release}: {}", r.log);
        assert_eq!(r.marker.platform, "metal", "{release}: {}", r.log);
        assert!(r.marker.firstboot, "{release}: {}", r.log);
        // The booted OS is the stream's: the test OS prints its version.
        assert_eq!(
            r.marker.version,
            version.as_str().unwrap(),
            "{release}: {}",
            r.log
        );
        eprintln!(
            "{release}: {tag}: metal booted ({fw:?}) in {:.1?}",
            r.duration
        );
    }
}
