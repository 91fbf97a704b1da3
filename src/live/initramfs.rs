//! The live initramfs (docs/contract.md §5, §5.1): the checks of the OS's own initramfs,
//! the gzip-compressed cpio appended to it (version stamp, features.json,
//! the rootfs stream hash) and their concatenation; `coreos/features.json`
//! from the OS's coreos-installer example config; the stream hash of
//! `rootfs.img` that the initramfs checks it against.
use crate::fs::cpio;
use anyhow::{bail, Context, Result};
use serde_json::json;
use std::io::Read;
use std::path::Path;

/// Files of the appended live initramfs cpio (docs/contract.md §5).
pub const LIVE_INITRAMFS_STAMP: &str = "etc/coreos-live-initramfs";
pub const FEATURES_IN_INITRAMFS: &str = "etc/coreos/features.json";
/// The rootfs image's stream hash in the live initramfs (docs/contract.md §5.1; osbuild
/// `make_stream_hash`, read by `rdcore stream-hash` in fedora-coreos-config
/// `coreos-livepxe-rootfs.sh`).
pub const WANT_ROOTFS: &str = "etc/coreos-live-want-rootfs";
/// Chunk size of the stream hash (osbuild `make_stream_hash` `bufsize`).
pub const STREAM_HASH_CHUNK: usize = 2 * 1024 * 1024;
/// coreos-installer's example config in the OS tree; its top-level keys are
/// features.json `installer-config-directives` (osbuild `get_os_features`).
pub const EXAMPLE_CONFIG: &str = "usr/share/coreos-installer/example-config.yaml";

/// `coreos/features.json` (and `etc/coreos/features.json` in the
/// initramfs), as osbuild's `get_os_features` writes it (indent 2, sorted
/// keys, a newline): `installer-config-directives` holds `true` for each
/// top-level key of the OS's example config, when the OS ships one.
pub fn features_json(directives: Option<&[String]>) -> Vec<u8> {
    let mut m = serde_json::Map::new();
    if let Some(d) = directives {
        let mut keys: Vec<&String> = d.iter().collect();
        keys.sort();
        keys.dedup();
        let obj: serde_json::Map<String, serde_json::Value> = keys
            .into_iter()
            .map(|k| (k.clone(), serde_json::Value::Bool(true)))
            .collect();
        m.insert("installer-config".into(), json!(true));
        m.insert(
            "installer-config-directives".into(),
            serde_json::Value::Object(obj),
        );
    } else {
        m.insert("installer-config".into(), json!(true));
    }
    m.insert("live-initrd-network".into(), json!(true));
    let mut v = serde_json::to_vec_pretty(&serde_json::Value::Object(m)).expect("json");
    v.push(b'\n');
    v
}

/// The top-level keys of an example config (`usr/share/coreos-installer/
/// example-config.yaml`); `what` names the file in errors.
pub fn config_directives(yaml: &[u8], what: &str) -> Result<Vec<String>> {
    let v: serde_yaml_ng::Value = serde_yaml_ng::from_slice(yaml)
        .with_context(|| format!("{what} is not YAML; the live ISO's features.json lists its keys as installer-config-directives (osbuild get_os_features); fix the OS's coreos-installer package"))?;
    let m = v.as_mapping().with_context(|| {
        format!("{what} is not a YAML mapping of installer directives; fix the OS's coreos-installer package")
    })?;
    m.keys()
        .map(|k| {
            k.as_str().map(str::to_string).with_context(|| {
                format!("{what} has a key that is not a string ({k:?}); fix the OS's coreos-installer package")
            })
        })
        .collect()
}

/// The stream hash of `path` (osbuild `make_stream_hash`): a header line
/// `stream-hash sha256 2097152`, then the hex sha256 of each 2 MiB chunk
/// (the last one may be shorter).
pub fn stream_hash(path: &Path) -> Result<Vec<u8>> {
    use sha2::Digest;
    let mut f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut out = format!("stream-hash sha256 {STREAM_HASH_CHUNK}\n").into_bytes();
    let mut buf = vec![0u8; STREAM_HASH_CHUNK];
    loop {
        let mut n = 0;
        while n < buf.len() {
            let r = f
                .read(&mut buf[n..])
                .with_context(|| format!("reading {}", path.display()))?;
            if r == 0 {
                break;
            }
            n += r;
        }
        if n == 0 {
            break;
        }
        out.extend_from_slice(hex::encode(sha2::Sha256::digest(&buf[..n])).as_bytes());
        out.push(b'\n');
        if n < buf.len() {
            break;
        }
    }
    Ok(out)
}

/// What an initramfs file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitrdFormat {
    Cpio,
    Gzip,
    Xz,
    Zstd,
}

/// Check that `data` is a newc cpio archive, or one compressed with gzip, xz
/// or zstd (what dracut and the kernel use), by its first archive header.
pub fn check_initramfs(data: &[u8], what: &str) -> Result<InitrdFormat> {
    let fix = "the live initramfs is the OS's own initramfs with a cpio appended, so it must be one; the OS image looks broken: use a release whose OS ships a dracut initramfs";
    let head: Vec<u8> = data.iter().take(8).copied().collect();
    let hex = hex::encode(&head);
    let (fmt, mut r): (InitrdFormat, Box<dyn Read + '_>) = match data {
        [b'0', b'7', b'0', b'7', b'0', b'1' | b'2', ..] => return Ok(InitrdFormat::Cpio),
        [0x1f, 0x8b, ..] => (
            InitrdFormat::Gzip,
            Box::new(flate2::read::MultiGzDecoder::new(data)),
        ),
        [0xfd, b'7', b'z', b'X', b'Z', 0, ..] => {
            (InitrdFormat::Xz, Box::new(xz2::read::XzDecoder::new(data)))
        }
        [0x28, 0xb5, 0x2f, 0xfd, ..] => (
            InitrdFormat::Zstd,
            Box::new(zstd::stream::read::Decoder::new(data)?),
        ),
        [] => bail!("{what} is empty; {fix}"),
        _ => bail!(
            "{what} is not a cpio archive, nor a gzip-, xz- or zstd-compressed one (it starts with bytes {hex}); {fix}"
        ),
    };
    let mut magic = [0u8; 6];
    r.read_exact(&mut magic).with_context(|| {
        format!("{what} looks {fmt:?}-compressed but does not decompress; {fix}")
    })?;
    if &magic != cpio::NEWC_MAGIC && &magic != cpio::CRC_MAGIC {
        bail!(
            "{what} is {fmt:?}-compressed but holds no newc cpio archive (it starts with {}); {fix}",
            String::from_utf8_lossy(&magic).escape_debug()
        );
    }
    Ok(fmt)
}

/// The gzip-compressed newc cpio appended to the OS's initramfs (docs/contract.md §5,
/// 5.1): the version stamp, features.json and the rootfs stream hash.
pub fn live_initramfs_addon(
    version: &str,
    features: &[u8],
    want_rootfs: &[u8],
    mtime: u32,
) -> Result<Vec<u8>> {
    let mut w = cpio::Writer::new(Vec::new(), mtime);
    w.dir("etc", 0o755)?;
    w.dir("etc/coreos", 0o755)?;
    w.file(
        LIVE_INITRAMFS_STAMP,
        0o644,
        format!("{version}\n").as_bytes(),
    )?;
    w.file(FEATURES_IN_INITRAMFS, 0o644, features)?;
    w.file(WANT_ROOTFS, 0o644, want_rootfs)?;
    let raw = w.finish()?;
    // mtime 0 in the gzip header: the same input gives the same bytes.
    let mut gz = flate2::GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), flate2::Compression::best());
    std::io::Write::write_all(&mut gz, &raw)?;
    Ok(gz.finish()?)
}

/// Alignment of each archive in a concatenated initramfs: the kernel only
/// recognises an uncompressed newc header at a 4-byte boundary of the whole
/// (`init/initramfs.c`), and skips NUL bytes between archives.
pub const INITRD_ALIGN: usize = 4;

/// The live initramfs: the OS's one, then the addon, each padded with NULs
/// to a 4-byte boundary. A compressed archive is found at any offset, but
/// what follows the file may be an uncompressed cpio: PXE appends
/// rootfs.img (`initrd=initramfs,rootfs`), and loaders that concatenate
/// initrds without aligning them (the kernel's EFI stub reading `initrd=`
/// from the command line) would put its header off the boundary.
pub fn live_initramfs(os_initrd: &[u8], addon: &[u8]) -> Vec<u8> {
    let pad = |v: &mut Vec<u8>| v.resize(v.len().next_multiple_of(INITRD_ALIGN), 0);
    let mut v = os_initrd.to_vec();
    pad(&mut v);
    v.extend_from_slice(addon);
    pad(&mut v);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initramfs_formats() {
        let mut w = cpio::Writer::new(Vec::new(), 0);
        w.file("init", 0o755, b"#!/bin/sh\n").unwrap();
        let raw = w.finish().unwrap();
        assert_eq!(check_initramfs(&raw, "x").unwrap(), InitrdFormat::Cpio);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &raw).unwrap();
        let gz = gz.finish().unwrap();
        assert_eq!(check_initramfs(&gz, "x").unwrap(), InitrdFormat::Gzip);
        let zst = zstd::encode_all(&raw[..], 3).unwrap();
        assert_eq!(check_initramfs(&zst, "x").unwrap(), InitrdFormat::Zstd);
        let mut xz = xz2::write::XzEncoder::new(Vec::new(), 1);
        std::io::Write::write_all(&mut xz, &raw).unwrap();
        let xz = xz.finish().unwrap();
        assert_eq!(check_initramfs(&xz, "x").unwrap(), InitrdFormat::Xz);
        let e = check_initramfs(b"not an initramfs", "the OS's initramfs")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a cpio archive"), "{e}");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, b"hello world, no cpio").unwrap();
        let e = format!(
            "{:#}",
            check_initramfs(&gz.finish().unwrap(), "i").unwrap_err()
        );
        assert!(e.contains("holds no newc cpio"), "{e}");
        assert!(check_initramfs(&gz_trunc(), "i").is_err());
    }

    fn gz_trunc() -> Vec<u8> {
        vec![0x1f, 0x8b, 8, 0]
    }

    #[test]
    fn addon_is_a_gzip_cpio_with_the_live_files() {
        let a = live_initramfs_addon(
            "1.2.3",
            &features_json(None),
            b"stream-hash sha256 2097152\n",
            0,
        )
        .unwrap();
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(&a[..])
            .read_to_end(&mut raw)
            .unwrap();
        assert_eq!(
            cpio::list(&raw).unwrap(),
            [
                "etc",
                "etc/coreos",
                LIVE_INITRAMFS_STAMP,
                FEATURES_IN_INITRAMFS,
                WANT_ROOTFS
            ]
        );
        // Each part starts and the whole ends on a 4-byte boundary, NUL-padded.
        let joined = live_initramfs(b"abcde", &a);
        assert_eq!(&joined[..8], b"abcde\0\0\0");
        assert_eq!(&joined[8..8 + a.len()], &a[..]);
        assert_eq!(joined.len() % INITRD_ALIGN, 0);
        assert!(joined[8 + a.len()..].iter().all(|&b| b == 0));
        assert_eq!(live_initramfs(b"abcd", b"wxyz"), b"abcdwxyz");
        assert_eq!(
            a,
            live_initramfs_addon(
                "1.2.3",
                &features_json(None),
                b"stream-hash sha256 2097152\n",
                0
            )
            .unwrap(),
            "reproducible"
        );
    }

    #[test]
    fn features_and_stream_hash() {
        let keys = config_directives(b"# c\nstream: name\nimage-url: URL\nconsole: [a, b]\n", "x")
            .unwrap();
        assert_eq!(keys, ["stream", "image-url", "console"]);
        let f: serde_json::Value = serde_json::from_slice(&features_json(Some(&keys))).unwrap();
        assert_eq!(
            f,
            json!({"installer-config": true, "installer-config-directives": {"console": true, "image-url": true, "stream": true}, "live-initrd-network": true})
        );
        // osbuild's json.dumps(indent=2, sort_keys=True) + "\n"
        let text = String::from_utf8(features_json(Some(&keys))).unwrap();
        assert!(text.starts_with("{\n  \"installer-config\": true,\n  \"installer-config-directives\": {\n    \"console\": true,"), "{text}");
        assert!(text.ends_with("}\n"));
        assert!(config_directives(b"- a\n- b\n", "x").is_err());
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("r");
        let data: Vec<u8> = (0..STREAM_HASH_CHUNK * 2 + 5)
            .map(|i| (i % 251) as u8)
            .collect();
        std::fs::write(&p, &data).unwrap();
        let h = String::from_utf8(stream_hash(&p).unwrap()).unwrap();
        let lines: Vec<&str> = h.lines().collect();
        assert_eq!(lines[0], "stream-hash sha256 2097152");
        assert_eq!(lines.len(), 4);
        use sha2::Digest;
        assert_eq!(
            lines[3],
            hex::encode(sha2::Sha256::digest(&data[STREAM_HASH_CHUNK * 2..]))
        );
        assert_eq!(
            lines[1],
            hex::encode(sha2::Sha256::digest(&data[..STREAM_HASH_CHUNK]))
        );
    }
}
