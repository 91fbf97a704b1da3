//! Unit tests of the bootimage configuration: defaults and their marks,
//! the cosa-era image.json, bad values, both platforms.json shapes and the
//! legacy bootimage.json.
use super::*;
use crate::util::arch::Arch;
#[test]
fn defaults_are_marked() {
    let c = ImageConfig::from_json(Some(&json!({"size": 10, "compressor": "xz"})), "image.json")
        .unwrap();
    assert_eq!(c.size.value, 10);
    assert_eq!(c.size.source, "image.json");
    assert_eq!(c.vmware_hw_version.value, 15);
    assert!(c.vmware_hw_version.is_default());
    assert_eq!(c.aws_volume_type.value, "gp2");
    let c = ImageConfig::from_json(None, "x").unwrap();
    assert_eq!(c.compressor.value, "gzip");
    assert_eq!(c.size.value, 16);
}
#[test]
fn live_rootfs_and_bootc_keys() {
    let c = ImageConfig::from_json(None, "x").unwrap();
    assert_eq!(c.live_rootfs_fstype.value, "squashfs");
    assert_eq!(c.live_rootfs_fsoptions.value, "-comp zstd");
    assert!(c.live_rootfs_fsoptions.is_default());
    assert!(!c.bootc_install_to_fs.value);
    // rhel-coreos-config image-rhel-10.2.yaml.
    let c = ImageConfig::from_json(
        Some(&json!({"live-rootfs-fstype": "erofs", "live-rootfs-fsoptions": "-zlzma,level=6 -Efragments -C1048576 --quiet", "bootc-install-to-fs": true})),
        "image.json",
    )
    .unwrap();
    assert_eq!(c.live_rootfs_fstype.value, "erofs");
    assert_eq!(c.live_rootfs_fsoptions.source, "image.json");
    assert!(c.bootc_install_to_fs.value);
    let c = ImageConfig::from_json(Some(&json!({"live-rootfs-fstype": "erofs"})), "i").unwrap();
    assert_eq!(c.live_rootfs_fsoptions.value, "--quiet");
    assert!(ImageConfig::from_json(Some(&json!({"bootc-install-to-fs": "yes"})), "i").is_err());
}
#[test]
fn cosa_era_image_json() {
    // coreos-assembler rhcos-4.17 image-default.yaml merged under the
    // OS's keys, plus grub-script (cosalib/cmdlib.py).
    let script = "set timeout=1\n# CONSOLE-SETTINGS-START\n# CONSOLE-SETTINGS-END\nblscfg\n";
    let c = ImageConfig::from_json(
        Some(
            &json!({"bootfs": "ext4", "rootfs": "xfs", "rootfs-args": "", "composefs": false,
            "ostree-format": "oci-chunked-v1", "deploy-via-container": false,
            "squashfs-compression": "zstd", "grub-script": script, "size": 16}),
        ),
        "image.json",
    )
    .unwrap();
    assert_eq!(c.era, "cosa");
    assert_eq!(c.grub_script.as_deref(), Some(script));
    assert_eq!(c.live_rootfs_fsoptions.value, "-comp zstd");
    assert_eq!(
        c.live_rootfs_fsoptions.source,
        "image.json squashfs-compression"
    );
    assert!(c
        .cosa_keys
        .iter()
        .any(|k| k.starts_with("grub-script=") && k.contains("grub.cfg")));
    let c = ImageConfig::from_json(Some(&json!({"squashfs-compression": "gzip"})), "i").unwrap();
    assert_eq!(c.live_rootfs_fsoptions.value, "-comp gzip");
    let c = ImageConfig::from_json(Some(&json!({"size": 16})), "i").unwrap();
    assert_eq!(c.era, "current");
    assert!(c.grub_script.is_none());
    // Filesystems this tool does not build, and a script without the
    // console marker, are refused naming the key.
    let e = ImageConfig::from_json(Some(&json!({"rootfs": "luks"})), "image.json")
        .unwrap_err()
        .to_string();
    assert!(e.contains("'rootfs' is 'luks'") && e.contains("xfs"), "{e}");
    let e = ImageConfig::from_json(Some(&json!({"bootfs": "xfs"})), "image.json")
        .unwrap_err()
        .to_string();
    assert!(e.contains("'bootfs'"), "{e}");
    let e = ImageConfig::from_json(Some(&json!({"grub-script": "blscfg\n"})), "image.json")
        .unwrap_err()
        .to_string();
    assert!(e.contains("CONSOLE-SETTINGS-START"), "{e}");
}

#[test]
fn bad_values_are_named() {
    let e = ImageConfig::from_json(Some(&json!({"size": "big"})), "image.json")
        .unwrap_err()
        .to_string();
    assert!(e.contains("'size'"), "{e}");
    let e = ImageConfig::from_json(Some(&json!({"compressor": "lz4"})), "image.json")
        .unwrap_err()
        .to_string();
    assert!(e.contains("lz4"), "{e}");
    assert!(ImageConfig::from_json(Some(&json!([1])), "image.json").is_err());
}
#[test]
fn platforms_upstream_shape() {
    // fedora-coreos-config's per-arch output: keyed by platform, no metal.
    let p = Platforms::parse(br#"{"qemu":{"grub_commands":["serial --speed=115200"],"kernel_arguments":["console=tty0","console=ttyS0,115200n8"]},"azure":{"kernel_arguments":["console=ttyS0,115200n8"]},"gcp":null}"#, "p").unwrap();
    let x = p.for_arch(Arch::X86_64).unwrap();
    assert_eq!(
        x["qemu"].kernel_arguments,
        vec!["console=tty0", "console=ttyS0,115200n8"]
    );
    assert_eq!(x["qemu"].grub_commands, vec!["serial --speed=115200"]);
    assert!(x["azure"].grub_commands.is_empty());
    assert!(x.contains_key("gcp"));
    assert!(!x.contains_key("metal"));
    assert!(matches!(p.shape, PlatformsShape::ByPlatform(_)));
    // Copied verbatim to /boot/coreos/platforms.json.
    assert_eq!(p.boot_json(Arch::Aarch64).unwrap(), p.raw);
    // Unknown keys inside an entry are ignored (readers use two keys).
    let p = Platforms::parse(br#"{"aws":{"kernel_arguments":["a"],"comment":"x"}}"#, "p").unwrap();
    assert_eq!(
        p.for_arch(Arch::X86_64).unwrap()["aws"].kernel_arguments,
        vec!["a"]
    );
    // An empty file is a valid (empty) table.
    assert!(Platforms::parse(b"{}", "p")
        .unwrap()
        .for_arch(Arch::S390x)
        .unwrap()
        .is_empty());
}
#[test]
fn platforms_arch_keyed_shape() {
    let p = Platforms::parse(br#"{"x86_64":{"metal":{},"qemu":{"grub_commands":["serial"],"kernel_arguments":["console=ttyS0"]},"azure":null},"aarch64":{"qemu":{"kernel_arguments":["console=ttyAMA0"]}}}"#, "p").unwrap();
    let x = p.for_arch(Arch::X86_64).unwrap();
    assert_eq!(x["qemu"].kernel_arguments, vec!["console=ttyS0"]);
    assert!(x["metal"].grub_commands.is_empty());
    assert_eq!(
        p.for_arch(Arch::Aarch64).unwrap()["qemu"].kernel_arguments,
        vec!["console=ttyAMA0"]
    );
    let e = format!("{:#}", p.for_arch(Arch::S390x).unwrap_err());
    assert!(
        e.contains("no entry for s390x") && e.contains("x86_64, aarch64")
            || e.contains("aarch64, x86_64"),
        "{e}"
    );
    // /boot/coreos/platforms.json gets the arch's part, in upstream's shape.
    let b: Value = serde_json::from_slice(&p.boot_json(Arch::Aarch64).unwrap()).unwrap();
    assert_eq!(
        b,
        json!({"qemu": {"grub_commands": [], "kernel_arguments": ["console=ttyAMA0"]}})
    );
}
/// An arch-keyed file with arches this tool does not know (riscv64, which
/// fedora-coreos-config keys, and one no file has yet): parsed, and the
/// build arch's table taken; a key that is no arch name is refused.
#[test]
fn platforms_arch_keyed_with_unseen_arches() {
    let p = Platforms::parse(br#"{"x86_64":{"qemu":{"kernel_arguments":["console=ttyS0"]}},"riscv64":{"qemu":{}},"loongarch64":{"qemu":{}}}"#, "p").unwrap();
    let PlatformsShape::ByArch(m) = &p.shape else {
        panic!("{:?}", p.shape)
    };
    let keys: Vec<String> = m.keys().map(Arch::to_string).collect();
    assert_eq!(keys, ["loongarch64", "riscv64", "x86_64"]);
    assert_eq!(
        p.for_arch(Arch::X86_64).unwrap()["qemu"].kernel_arguments,
        vec!["console=ttyS0"]
    );
    assert!(p.for_arch(Arch::RISCV64).unwrap().contains_key("qemu"));
    let e = format!("{:#}", p.for_arch(Arch::S390x).unwrap_err());
    assert!(e.contains("it has loongarch64, riscv64, x86_64"), "{e}");
    // riscv64 alone is arch-keyed too.
    let p = Platforms::parse(br#"{"riscv64":{"qemu":{}}}"#, "p").unwrap();
    assert!(matches!(p.shape, PlatformsShape::ByArch(_)));
    for bad in [
        &br#"{"x86_64":{"qemu":{}},"Not An Arch":{"qemu":{}}}"#[..],
        br#"{"x86_64":{"qemu":{}},"amd64":{"qemu":{}}}"#,
    ] {
        let e = format!("{:#}", Platforms::parse(bad, "p").unwrap_err());
        assert!(e.contains("arch-keyed shape"), "{e}");
    }
}

#[test]
fn platforms_neither_shape_names_file_and_both_shapes() {
    for bad in [
        &b"[]"[..],
        br#"{"qemu":"console=ttyS0"}"#,
        br#"{"qemu":{"kernel_arguments":"console=ttyS0"}}"#,
        br#"{"x86_64":["qemu"]}"#,
        br#"{"qemu":{"kernel_arguments":[1]}}"#,
        b"not json",
    ] {
        let e = format!(
            "{:#}",
            Platforms::parse(bad, "/usr/share/coreos-assembler/platforms.json").unwrap_err()
        );
        assert!(
            e.contains("/usr/share/coreos-assembler/platforms.json"),
            "{e}"
        );
        assert!(
            e.contains("upstream shape") && e.contains("arch-keyed shape"),
            "{e}"
        );
    }
}
#[test]
fn legacy_bootimage_json() {
    let c = OsBootConfig::from_files(
        None,
        None,
        Some(br#"{"size": 20, "vmware-hw-version": 13}"#),
        false,
    )
    .unwrap();
    assert_eq!(c.image.size.value, 20);
    assert_eq!(c.image.size.source, "bootimage.json");
    assert_eq!(c.sources, vec!["/bootimage.json"]);
}
