//! Tests of the EROFS option mapping: the host's `mkfs.erofs` probe output
//! parsed, RHCOS's options mapped onto erofs-utils 1.5 and later releases,
//! options no mkfs.erofs knows refused, and the derived filesystem UUID.
use super::*;

fn debian12() -> Host {
    Host::parse(
        "mkfs.erofs 1.5\n<E> erofs: whatever\n",
        "usage: [options] FILE DIRECTORY\n\nAvailable compressors are: lz4hc, lz4\n",
    )
    .unwrap()
}

#[test]
fn probe_output_parses() {
    let h = debian12();
    assert_eq!(h.version, (1, 5));
    assert_eq!(h.compressors, ["lz4hc", "lz4"]);
    let newer = Host::parse(
        "mkfs.erofs (erofs-utils) 1.8.5\n",
        "Available compressors are:\n  lz4\n  lz4hc, [<0-12>]\n  lzma, [<0-109>]\n  deflate\n",
    )
    .unwrap();
    assert_eq!(newer.version, (1, 8));
    assert_eq!(newer.compressors, ["lz4", "lz4hc", "lzma", "deflate"]);
    assert!(Host::parse("nothing", "").is_err());
}

#[test]
fn rhcos_10_options_on_erofs_utils_1_5() {
    // rhel-coreos-config image-rhel-10.2.yaml.
    let o = map_options(
        "-zlzma,level=6 -Efragments -C1048576 --quiet",
        &debian12(),
        1_700_000_000,
        "u",
    )
    .unwrap();
    assert_eq!(o.args, ["-zlz4hc,12", "--quiet", "-T1700000000", "-Uu"]);
    assert_eq!(o.replaced.len(), 3);
    assert_eq!(o.replaced[2].requested, "-C1048576");
    assert!(o.replaced[2].reason.contains("lzma"), "{:?}", o.replaced);
    assert_eq!(o.replaced[0].requested, "-zlzma,level=6");
    assert_eq!(o.replaced[0].used, "-zlz4hc,12");
    assert!(o.replaced[0].reason.contains("no lzma"), "{:?}", o.replaced);
    assert_eq!(o.replaced[1].requested, "-Efragments");
    assert_eq!(o.replaced[1].used, "");
    assert!(o.replaced[1].line().contains("left out"));
    assert_eq!(o.added, ["-T1700000000", "-Uu"]);
}

#[test]
fn rhcos_10_1_fragdedupe_options() {
    // rhel-coreos-config image-rhel-10.1.yaml, 2025-04 to 2025-11.
    let asked = "-zlzma,level=6 -Eall-fragments,fragdedupe=inode -C1048576 --quiet";
    let o = map_options(asked, &debian12(), 0, "u").unwrap();
    assert_eq!(o.args, ["-zlz4hc,12", "--quiet", "-T0", "-Uu"]);
    let left: Vec<&str> = o.replaced.iter().map(|r| r.requested.as_str()).collect();
    assert_eq!(
        left,
        [
            "-zlzma,level=6",
            "-Eall-fragments",
            "-Efragdedupe=inode",
            "-C1048576"
        ]
    );
    assert!(
        o.replaced[2].reason.contains("1.8.5"),
        "{:?}",
        o.replaced[2]
    );
    // 1.8.4 lacks fragdedupe, 1.8.5 has it.
    let h = |patch| Host {
        version: (1, 8),
        patch,
        compressors: vec!["lz4hc".into(), "lzma".into()],
    };
    let o = map_options(asked, &h(4), 0, "u").unwrap();
    assert_eq!(
        o.args[..3],
        ["-zlzma,level=6", "-Eall-fragments", "-C1048576"]
    );
    assert_eq!(o.replaced.len(), 1);
    assert_eq!(o.replaced[0].requested, "-Efragdedupe=inode");
    let o = map_options(asked, &h(5), 0, "u").unwrap();
    assert!(o.replaced.is_empty(), "{:?}", o.replaced);
    assert_eq!(o.args[1], "-Eall-fragments,fragdedupe=inode");
    // A value fragdedupe does not take, a value on an option without one.
    let e = map_options("-Efragdedupe=sometimes", &h(5), 0, "u")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("inode") && e.contains("fragdedupe=sometimes"),
        "{e}"
    );
    let e = map_options("-Ededupe=yes", &h(5), 0, "u")
        .unwrap_err()
        .to_string();
    assert!(e.contains("takes a value"), "{e}");
    let p = Host::parse("mkfs.erofs (erofs-utils) 1.8.5\n", "").unwrap();
    assert_eq!(
        (p.version, p.patch, p.release()),
        ((1, 8), 5, "1.8.5".to_string())
    );
}

#[test]
fn supported_options_pass_and_levels_are_rewritten() {
    let h = debian12();
    let o = map_options("--quiet", &h, 0, "u").unwrap();
    assert!(o.replaced.is_empty());
    assert_eq!(o.args, ["--quiet", "-T0", "-Uu"]);
    let o = map_options("-zlz4hc,level=9 -Eztailpacking -T5", &h, 0, "u").unwrap();
    assert_eq!(
        o.args,
        ["-zlz4hc,9", "-Eztailpacking", "-T5", "-Uu", "--quiet"]
    );
    assert_eq!(o.replaced[0].requested, "-zlz4hc,level=9");
    let o = map_options("-z lz4 -C 65536", &h, 0, "u").unwrap();
    assert_eq!(o.args[..2], ["-zlz4", "-C65536"]);
    assert!(o.replaced.is_empty());
    // A newer host keeps everything.
    let newer = Host {
        version: (1, 8),
        patch: 5,
        compressors: vec!["lz4".into(), "lzma".into()],
    };
    let o = map_options("-zlzma,level=6 -Efragments", &newer, 0, "u").unwrap();
    assert!(o.replaced.is_empty(), "{:?}", o.replaced);
    assert_eq!(o.args[..2], ["-zlzma,level=6", "-Efragments"]);
}

#[test]
fn options_no_mkfs_knows_are_errors() {
    let h = debian12();
    let e = map_options("-zfoo,level=3", &h, 0, "u")
        .unwrap_err()
        .to_string();
    assert!(e.contains("'foo'") && e.contains("algorithm"), "{e}");
    let e = map_options("-Ebogus", &h, 0, "u").unwrap_err().to_string();
    assert!(e.contains("-Ebogus"), "{e}");
    let e = map_options("--frobnicate", &h, 0, "u")
        .unwrap_err()
        .to_string();
    assert!(e.contains("--frobnicate"), "{e}");
    let e = map_options("-z", &h, 0, "u").unwrap_err().to_string();
    assert!(e.contains("needs a value"), "{e}");
    let e = map_options("rootfs", &h, 0, "u").unwrap_err().to_string();
    assert!(e.contains("'rootfs'"), "{e}");
}

#[test]
fn uuid_is_stable_and_well_formed() {
    let u = uuid_from("abc");
    assert_eq!(u, uuid_from("abc"));
    assert_eq!(u.len(), 36);
    assert_eq!(u.matches('-').count(), 4);
    assert_ne!(u, uuid_from("abd"));
}
