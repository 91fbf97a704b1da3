//! CoreOS stream metadata (`stream.json`): the document that tells
//! installers where each artifact of a release is and how to check it.
//!
//! The shape and every JSON key follow coreos/stream-metadata-go
//! `stream/stream.go` (the reference; the Rust crate
//! `coreos-stream-metadata` reads the same document, and
//! `tests/stream_metadata.rs` parses our output with it):
//!
//! ```text
//! {stream, metadata: {last-modified, generator},
//!  architectures: {<arch>: {
//!    artifacts: {<platform>: {release, formats: {<format>:
//!      {disk|kernel|initramfs|rootfs: {location, signature?, sha256, uncompressed-sha256?}}}}},
//!    images: {aws: {regions: {<region>: {release, image}}}},
//!    rhel-coreos-extensions?}}}
//! ```
//!
//! [`from_meta`] maps a build's `meta.json` images the way cosa's release
//! metadata does (cosa `src/cmd-generate-release-meta`): each platform's
//! stream place comes from the platform table ([`crate::platforms`]): the
//! format key is the artifact suffix (`qcow2.gz`, `vmdk.gz`, `ova`,
//! `vhd.gz`, `tar.gz`, `ociarchive`), with metal special: `raw.gz`,
//! `4k.raw.gz` (metal4k lives under `metal`), `iso`, and `pxe` holding
//! `kernel`, `initramfs` and `rootfs`.
use crate::io::compress::Compressor;
use crate::publish::meta::{ImageEntry, Meta};
use crate::util::arch;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// File name of the stream metadata written next to meta.json.
pub const STREAM_JSON: &str = "stream.json";
/// Several streams of one release, shaped like the coreos-bootimages
/// ConfigMap's `data.streams` (installer `hack/build-coreos-manifest.go`):
/// stream key to stream document.
pub const STREAMS_JSON: &str = "streams.json";
/// `metadata.generator`: this tool and its version.
pub const GENERATOR: &str = concat!(env!("CARGO_PKG_NAME"), " ", env!("CARGO_PKG_VERSION"));

/// Artifact kinds inside a format (stream.go `ImageFormat`).
pub const KIND_DISK: &str = "disk";
pub const KIND_KERNEL: &str = "kernel";
pub const KIND_INITRAMFS: &str = "initramfs";
pub const KIND_ROOTFS: &str = "rootfs";

/// Top-level stream document (stream.go `Stream`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stream {
    /// Stream name, e.g. `rhcos-4.18` or `stable`.
    pub stream: String,
    pub metadata: Metadata,
    /// By architecture (`x86_64`, `aarch64`, ...).
    pub architectures: BTreeMap<arch::Arch, Arch>,
}

/// stream.go `Metadata`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metadata {
    /// RFC 3339, UTC (`2025-01-22T13:27:00Z`).
    #[serde(rename = "last-modified")]
    pub last_modified: String,
    /// The tool that wrote the document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generator: Option<String>,
}

/// One architecture's artifacts and cloud images (stream.go `Arch`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Arch {
    /// By platform (`metal`, `qemu`, `aws`, ...).
    pub artifacts: BTreeMap<String, PlatformArtifacts>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<Images>,
    /// RHCOS-specific data (stream.go `rhcos.Extensions`, e.g.
    /// `azure-disk`), kept as it was read.
    #[serde(
        rename = "rhel-coreos-extensions",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub rhel_coreos_extensions: Option<serde_json::Value>,
}

/// stream.go `PlatformArtifacts`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlatformArtifacts {
    /// OS version of the artifacts.
    pub release: String,
    /// By format key (`raw.gz`, `qcow2.gz`, `pxe`, ...), then by kind
    /// ([`KIND_DISK`], [`KIND_KERNEL`], ...).
    pub formats: BTreeMap<String, BTreeMap<String, Artifact>>,
}

/// One downloadable file (stream.go `Artifact`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Artifact {
    /// URL, or a file name relative to the stream's directory.
    pub location: String,
    /// Detached signature URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// SHA-256 of the file as downloaded.
    pub sha256: String,
    /// SHA-256 after decompression, for compressed artifacts.
    #[serde(
        rename = "uncompressed-sha256",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub uncompressed_sha256: Option<String>,
}

/// Images already in clouds (stream.go `Images`). Only AWS is modelled;
/// other clouds (`gcp`, `aliyun`, `ibmcloud`, ...) are kept as read.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Images {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aws: Option<ReplicatedImage>,
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

/// An image in each region of an AWS-like cloud (stream.go
/// `ReplicatedImage`, alias `AwsImage`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicatedImage {
    #[serde(default)]
    pub regions: BTreeMap<String, SingleImage>,
}

/// stream.go `SingleImage` (alias `AwsRegionImage`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SingleImage {
    /// OS version of the image.
    pub release: String,
    /// Image id, e.g. `ami-0123456789abcdef0`.
    pub image: String,
}

/// Where a meta.json image goes in the stream: (platform, format key,
/// kind), from the platform table; `None` for images without a stream
/// place (`ostree`, `oci-manifest`). The compression part of a format key
/// is the compressor whose extension the (compressed) file carries.
fn place(key: &str, entry: &ImageEntry) -> Option<(String, String, &'static str)> {
    if let Some(&(_, format, kind)) = crate::platforms::LIVE_PLACES.iter().find(|l| l.0 == key) {
        let metal = crate::platforms::find("metal")?.stream_platform;
        return Some((metal.to_string(), format.to_string(), kind));
    }
    let spec = crate::platforms::by_meta_key(key)?;
    let compressor = if entry.uncompressed_sha256.is_some() {
        Compressor::of_file(&entry.path)
    } else {
        Compressor::None
    };
    Some((
        spec.stream_platform.to_string(),
        spec.stream_format(compressor),
        KIND_DISK,
    ))
}

/// The stream for one build: every image of `meta` that has a stream
/// place (the platform table's meta keys; others such as `ostree` are
/// left out) under `meta`'s architecture, `release` being the OS
/// version. Locations are `base_url/<file>` or the bare file name.
///
/// `images.aws.regions` holds `pinned_amis`, given as `(region, ami id,
/// release)` (the release's own AMIs, keeping their release even when
/// meta.json lists them too), then the other AMIs of `meta.amis` (ours,
/// release = this build), which win for a region listed in both.
///
/// `last-modified` is meta's build time stamp (now when it has none), so
/// the same build gives the same document.
pub fn from_meta(
    meta: &Meta,
    stream_name: &str,
    base_url: Option<&str>,
    pinned_amis: &[(String, String, String)],
) -> Stream {
    let release = meta.ostree_version.clone();
    let arch_name = meta.coreos_assembler.basearch;
    let mut artifacts: BTreeMap<String, PlatformArtifacts> = BTreeMap::new();
    for (key, entry) in &meta.images {
        let Some((platform, format, kind)) = place(key, entry) else {
            continue;
        };
        artifacts
            .entry(platform)
            .or_insert_with(|| PlatformArtifacts {
                release: release.clone(),
                formats: BTreeMap::new(),
            })
            .formats
            .entry(format)
            .or_default()
            .insert(kind.to_string(), artifact(entry, base_url));
    }

    let mut regions: BTreeMap<String, SingleImage> = pinned_amis
        .iter()
        .map(|(region, image, rel)| {
            (
                region.clone(),
                SingleImage {
                    release: rel.clone(),
                    image: image.clone(),
                },
            )
        })
        .collect();
    for ami in &meta.amis {
        // A pinned AMI recorded in meta.json keeps the pinned release.
        if pinned_amis
            .iter()
            .any(|(region, image, _)| *region == ami.name && *image == ami.hvm)
        {
            continue;
        }
        regions.insert(
            ami.name.clone(),
            SingleImage {
                release: release.clone(),
                image: ami.hvm.clone(),
            },
        );
    }
    let images = (!regions.is_empty()).then(|| Images {
        aws: Some(ReplicatedImage { regions }),
        other: BTreeMap::new(),
    });

    let last_modified = meta
        .coreos_assembler
        .build_timestamp
        .clone()
        .unwrap_or_else(|| meta.ostree_timestamp.clone());
    Stream {
        stream: stream_name.to_string(),
        metadata: Metadata {
            last_modified,
            generator: Some(GENERATOR.to_string()),
        },
        architectures: BTreeMap::from([(
            arch_name,
            Arch {
                artifacts,
                images,
                rhel_coreos_extensions: None,
            },
        )]),
    }
}

/// The stream entry for one meta.json image.
fn artifact(entry: &ImageEntry, base_url: Option<&str>) -> Artifact {
    let location = match base_url {
        Some(base) if !base.is_empty() => {
            format!("{}/{}", base.trim_end_matches('/'), entry.path)
        }
        _ => entry.path.clone(),
    };
    Artifact {
        location,
        signature: None,
        sha256: entry.sha256.clone(),
        uncompressed_sha256: entry.uncompressed_sha256.clone(),
    }
}

/// Writes `dir/stream.json` atomically (temporary file in `dir`, fsync,
/// mode 0644, rename, fsync of `dir`), pretty-printed with a final newline.
pub fn write_stream(dir: &Path, stream: &Stream) -> Result<()> {
    let mut data = serde_json::to_vec_pretty(stream).context("serialising stream.json")?;
    data.push(b'\n');
    crate::publish::meta::write_atomic(dir, STREAM_JSON, &data)
}

/// Reads `dir/stream.json`.
pub fn read_stream(dir: &Path) -> Result<Stream> {
    let path = dir.join(STREAM_JSON);
    let data = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_slice(&data).with_context(|| format!("parsing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platforms::meta_keys;
    use crate::publish::meta::Ami;

    const V: &str = "418.94.202501221327-0";

    fn hash(c: char) -> String {
        std::iter::repeat(c).take(64).collect()
    }

    /// File names as this tool (and cosa) writes them.
    fn file_name(key: &str) -> String {
        match key {
            "metal" | "metal4k" => format!("rhcos-{V}-{key}.x86_64.raw.gz"),
            "qemu" | "openstack" => format!("rhcos-{V}-{key}.x86_64.qcow2.gz"),
            "aws" => format!("rhcos-{V}-aws.x86_64.vmdk.gz"),
            "vmware" => format!("rhcos-{V}-vmware.x86_64.ova"),
            "azure" => format!("rhcos-{V}-azure.x86_64.vhd.gz"),
            "gcp" => format!("rhcos-{V}-gcp.x86_64.tar.gz"),
            "live" => unreachable!(),
            "live-iso" => format!("rhcos-{V}-live.x86_64.iso"),
            "live-kernel" => format!("rhcos-{V}-live-kernel-x86_64"),
            "live-initramfs" => format!("rhcos-{V}-live-initramfs.x86_64.img"),
            "live-rootfs" => format!("rhcos-{V}-live-rootfs.x86_64.img"),
            k => {
                let p = crate::platforms::by_meta_key(k).unwrap();
                p.file_name("rhcos", V, arch::Arch::X86_64, Compressor::Gzip)
            }
        }
    }

    fn full_meta() -> Meta {
        let mut m = Meta::new(
            "rhcos",
            V,
            &hash('c'),
            "2025-01-22T13:27:00Z",
            arch::Arch::X86_64,
        );
        m.coreos_assembler.build_timestamp = Some("2025-02-01T10:00:00Z".into());
        for (i, key) in meta_keys().iter().enumerate() {
            let c = char::from(b'a' + (i % 26) as u8);
            let compressed = file_name(key).ends_with(".gz");
            m.images.insert(
                key.to_string(),
                ImageEntry {
                    path: file_name(key),
                    sha256: hash(c),
                    size: 100 + i as u64,
                    uncompressed_sha256: compressed.then(|| hash(c.to_ascii_uppercase())),
                    uncompressed_size: compressed.then_some(1000),
                    skip_compression: None,
                },
            );
        }
        m.images.insert(
            "ostree".into(),
            ImageEntry {
                path: format!("rhcos-{V}-ostree.x86_64.ociarchive"),
                sha256: hash('0'),
                size: 1,
                uncompressed_sha256: None,
                uncompressed_size: None,
                skip_compression: None,
            },
        );
        m
    }

    #[test]
    fn every_image_key_has_a_place() {
        let m = full_meta();
        let keys = meta_keys();
        assert!(!keys.is_empty(), "no image keys to check");
        for key in keys {
            assert!(place(key, &m.images[key]).is_some(), "{key}");
        }
    }

    #[test]
    fn formats_and_locations() {
        let s = from_meta(
            &full_meta(),
            "rhcos-4.18",
            Some("https://example.com/b/"),
            &[],
        );
        assert_eq!(s.metadata.last_modified, "2025-02-01T10:00:00Z");
        assert_eq!(s.metadata.generator.as_deref(), Some(GENERATOR));
        let a = &s.architectures["x86_64"];
        let got: Vec<(String, String, String)> = a
            .artifacts
            .iter()
            .flat_map(|(p, pa)| {
                assert_eq!(pa.release, V);
                pa.formats.iter().flat_map(move |(f, kinds)| {
                    kinds.keys().map(move |k| (p.clone(), f.clone(), k.clone()))
                })
            })
            .collect();
        let want: Vec<(String, String, String)> = [
            ("aws", "vmdk.gz", "disk"),
            ("azure", "vhd.gz", "disk"),
            ("gcp", "tar.gz", "disk"),
            ("metal", "4k.raw.gz", "disk"),
            ("metal", "iso", "disk"),
            ("metal", "pxe", "initramfs"),
            ("metal", "pxe", "kernel"),
            ("metal", "pxe", "rootfs"),
            ("metal", "raw.gz", "disk"),
            ("openstack", "qcow2.gz", "disk"),
            ("qemu", "qcow2.gz", "disk"),
            ("vmware", "ova", "disk"),
        ]
        .iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect();
        for w in &want {
            assert!(got.contains(w), "{w:?} missing from {got:?}");
        }
        assert_eq!(
            got.len(),
            meta_keys().len(),
            "ostree is not a stream artifact"
        );
        for (p, f) in [
            ("azurestack", "vhd.gz"),
            ("ibmcloud", "qcow2.gz"),
            ("kubevirt", "ociarchive"),
            ("nutanix", "qcow2"),
            ("virtualbox", "ova"),
            ("hyperv", "vhdx.gz"),
        ] {
            assert!(a.artifacts[p].formats.contains_key(f), "{p} {f}");
        }
        let k = &a.artifacts["metal"].formats["pxe"]["kernel"];
        assert_eq!(
            k.location,
            format!("https://example.com/b/rhcos-{V}-live-kernel-x86_64")
        );
        assert_eq!(k.uncompressed_sha256, None);
        let q = &a.artifacts["qemu"].formats["qcow2.gz"]["disk"];
        assert_eq!(q.sha256, hash('c'));
        assert_eq!(q.uncompressed_sha256, Some(hash('C')));
        assert!(a.images.is_none());
    }

    #[test]
    fn json_keys_follow_stream_go() {
        let mut m = full_meta();
        m.amis.push(Ami {
            name: "us-east-1".into(),
            hvm: "ami-ours".into(),
            snapshot: "snap-1".into(),
        });
        let pinned = [
            (
                "us-east-1".to_string(),
                "ami-pinned".to_string(),
                "x".to_string(),
            ),
            (
                "eu-west-1".to_string(),
                "ami-eu".to_string(),
                "417.1".to_string(),
            ),
        ];
        let s = from_meta(&m, "rhcos-4.18", None, &pinned);
        let v = serde_json::to_value(&s).unwrap();
        assert!(v["metadata"]["last-modified"].is_string());
        assert_eq!(v["metadata"]["generator"], GENERATOR);
        let a = &v["architectures"]["x86_64"];
        let disk = &a["artifacts"]["metal"]["formats"]["raw.gz"]["disk"];
        assert_eq!(disk["location"], format!("rhcos-{V}-metal.x86_64.raw.gz"));
        assert!(disk["uncompressed-sha256"].is_string());
        assert!(disk.get("signature").is_none());
        assert!(a.get("rhel-coreos-extensions").is_none());
        let r = &a["images"]["aws"]["regions"];
        assert_eq!(r["us-east-1"]["image"], "ami-ours", "our AMI wins");
        assert_eq!(r["us-east-1"]["release"], V);
        assert_eq!(r["eu-west-1"]["image"], "ami-eu");
        assert_eq!(r["eu-west-1"]["release"], "417.1");
        // generate also lists the pinned AMIs in meta.json: they keep
        // their own release.
        m.amis.push(Ami {
            name: "eu-west-1".into(),
            hvm: "ami-eu".into(),
            snapshot: String::new(),
        });
        let v = serde_json::to_value(from_meta(&m, "rhcos-4.18", None, &pinned)).unwrap();
        let r = &v["architectures"]["x86_64"]["images"]["aws"]["regions"];
        assert_eq!(r["eu-west-1"]["release"], "417.1");
        assert_eq!(r["us-east-1"]["release"], V);
    }

    #[test]
    fn write_read_round_trip_keeps_unknown_clouds() {
        let d = tempfile::tempdir().unwrap();
        let mut s = from_meta(&full_meta(), "rhcos-4.18", None, &[]);
        let arch = s.architectures.get_mut("x86_64").unwrap();
        arch.images = Some(Images {
            aws: None,
            other: BTreeMap::from([(
                "gcp".to_string(),
                serde_json::json!({"release": V, "project": "rhcos-cloud", "name": "rhcos-418"}),
            )]),
        });
        arch.rhel_coreos_extensions =
            Some(serde_json::json!({"azure-disk": {"release": V, "url": "https://x/y.vhd"}}));
        write_stream(d.path(), &s).unwrap();
        let text = std::fs::read_to_string(d.path().join(STREAM_JSON)).unwrap();
        assert!(text.ends_with("}\n"));
        assert_eq!(read_stream(d.path()).unwrap(), s);
        let names: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [STREAM_JSON], "no temporary file left");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(d.path().join(STREAM_JSON))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o644);
    }

    #[test]
    fn compression_comes_from_the_file() {
        let mut m = full_meta();
        m.images.get_mut("metal4k").unwrap().path = format!("rhcos-{V}-metal4k.x86_64.raw.xz");
        let s = from_meta(&m, "s", None, &[]);
        assert!(s.architectures["x86_64"].artifacts["metal"]
            .formats
            .contains_key("4k.raw.xz"));
    }

    #[test]
    fn errors_name_the_directory() {
        let s = from_meta(&full_meta(), "s", None, &[]);
        let err = write_stream(Path::new("/nonexistent/dir"), &s).unwrap_err();
        assert!(format!("{err:#}").contains("/nonexistent/dir"), "{err:#}");
    }
}
