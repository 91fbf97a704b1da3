//! One function per parser of untrusted bytes: each takes arbitrary input,
//! runs the parser and what the tool does next with its result, and must
//! return (errors are fine) without panicking, hanging or allocating over
//! the limit. `TARGETS` names them; the corpus of each is
//! `fuzz/corpus/<name>/`.
use bootimage_gen::image::{fetch, idms, imageref, index, layers, layout};
use bootimage_gen::oscontainer::config as osconfig;
use bootimage_gen::util::arch::Arch;
use bootimage_gen::{fs, live, oscontainer, release};
use std::collections::BTreeMap;

pub type Target = fn(&[u8]);

pub const TARGETS: &[(&str, Target)] = &[
    ("image_references", image_references),
    ("release_metadata", release_metadata),
    ("bootimages", bootimages),
    ("stream_json", stream_json),
    ("idms", idms_yaml),
    ("imageref", image_ref),
    ("oci_index", oci_index),
    ("oci_manifest", oci_manifest),
    ("oci_config", oci_config),
    ("image_json", image_json),
    ("platforms_json", platforms_json),
    ("layer_tar", layer_tar),
    ("cpio", cpio),
    ("live_templates", live_templates),
    ("os_release", os_release),
];

#[allow(dead_code)] // the libFuzzer binary uses it; the smoke test does not
pub fn by_name(name: &str) -> Option<Target> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// The arches tried: every one the tool knows, and one it does not.
fn arches() -> impl Iterator<Item = Arch> {
    Arch::KNOWN.into_iter().chain([Arch::RISCV64])
}

fn payload(files: &[(&str, &[u8])]) {
    let m: BTreeMap<String, Vec<u8>> = files
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_vec()))
        .collect();
    if let Ok(p) = release::Payload::from_files(&m) {
        for s in [None, Some("rhel-coreos"), Some("machine-os-content")] {
            for c in p.os_candidates(s) {
                let _ = imageref::ImageRef::parse(&c.pullspec);
                let class = release::osimages::installer_stream_for_tag(&c.tag);
                if let Some(st) = p.stream_for(class) {
                    for a in arches() {
                        let _ = release::stream_platforms(st, a);
                        let _ = release::pinned_amis(st, a);
                    }
                }
            }
            let _ = release::osimages::default_stream(&p.version);
        }
    }
}

const REFS: &[u8] = br#"{"kind":"ImageStream","apiVersion":"image.openshift.io/v1","metadata":{"name":"4.18.0"},"spec":{"tags":[{"name":"rhel-coreos","annotations":{"io.openshift.build.versions":"machine-os=418.94"},"from":{"kind":"DockerImage","name":"quay.io/o/r@sha256:0000000000000000000000000000000000000000000000000000000000000000"}}]}}"#;

/// `release-manifests/image-references` (an ImageStream).
pub fn image_references(data: &[u8]) {
    payload(&[(release::IMAGE_REFERENCES, data)]);
}

/// `release-manifests/release-metadata`.
pub fn release_metadata(data: &[u8]) {
    payload(&[
        (release::IMAGE_REFERENCES, REFS),
        (release::RELEASE_METADATA, data),
    ]);
}

/// The coreos-bootimages ConfigMap (YAML holding the stream JSON).
pub fn bootimages(data: &[u8]) {
    payload(&[
        (release::IMAGE_REFERENCES, REFS),
        (release::BOOTIMAGES_CONFIGMAP, data),
    ]);
}

/// A stream JSON on its own (the ConfigMap's `data.stream`, an earlier
/// run's stream.json).
pub fn stream_json(data: &[u8]) {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) {
        for a in arches() {
            let _ = release::stream_platforms(&v, a);
            let _ = release::pinned_amis(&v, a);
        }
    }
    let _ = serde_json::from_slice::<bootimage_gen::publish::stream::Stream>(data);
}

/// IDMS / ICSP YAML (`--idms`), then mirror candidates for a digest ref.
pub fn idms_yaml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(m) = idms::Mirrors::parse(text) {
        for r in [
            "quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:0000000000000000000000000000000000000000000000000000000000000000",
            "registry.example.com:5000/a/b/c@sha256:1111111111111111111111111111111111111111111111111111111111111111",
        ] {
            if let Ok(d) = imageref::DockerRef::parse(r) {
                let _ = m.candidates(&d);
            }
        }
    }
}

/// Image references (pullspecs in image-references, the CLI's RELEASE).
pub fn image_ref(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(r) = imageref::ImageRef::parse(s) {
        let _ = r.to_transport_string();
        let _ = r.registry();
        let _ = r.to_string();
    }
    if let Ok(d) = imageref::DockerRef::parse(s) {
        let _ = d.name();
        let shown = d.to_string();
        let _ = d
            .with_digest("sha256:2222222222222222222222222222222222222222222222222222222222222222");
        // What we print must parse back to the same reference.
        let again = imageref::DockerRef::parse(&shown)
            .unwrap_or_else(|e| panic!("{s:?} parsed, its display {shown:?} does not: {e:#}"));
        assert_eq!(again.to_string(), shown, "display of {s:?} is not stable");
    }
    let _ = imageref::is_sha256_digest(s);
}

/// An OCI image index / Docker manifest list: choose an arch, and the
/// layout's index.json reader.
pub fn oci_index(data: &[u8]) {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) {
        for a in arches() {
            let _ = index::choose(&v, "sha256:00", a, "fuzz");
        }
    }
    let Ok(d) = tempfile::tempdir() else { return };
    if std::fs::write(d.path().join("index.json"), data).is_ok() {
        let _ = layout::tags_in_dir(d.path());
        let _ = layout::tag_for_digest(d.path(), false, "sha256:00");
    }
}

/// An image manifest (OCI or Docker schema 2).
pub fn oci_manifest(data: &[u8]) {
    let _ = fetch::parse_json::<ostree_ext::oci_spec::image::ImageManifest>(data, "fuzz");
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) {
        let _ = index::choose(&v, "sha256:00", Arch::X86_64, "fuzz");
    }
}

/// An image configuration (labels, arch).
pub fn oci_config(data: &[u8]) {
    if let Ok(c) = fetch::parse_config(data, "fuzz") {
        let labels: BTreeMap<String, String> = c
            .config()
            .as_ref()
            .and_then(|c| c.labels().clone())
            .unwrap_or_default()
            .into_iter()
            .collect();
        let _ = oscontainer::detect_format(&labels, "fuzz");
    }
}

/// `/usr/share/coreos-assembler/image.json` (and the legacy bootimage.json).
pub fn image_json(data: &[u8]) {
    let _ = osconfig::OsBootConfig::from_files(Some(data), None, None, true);
    let _ = osconfig::OsBootConfig::from_files(None, None, Some(data), false);
}

/// `/usr/share/coreos-assembler/platforms.json`.
pub fn platforms_json(data: &[u8]) {
    if let Ok(p) = osconfig::Platforms::parse(data, "fuzz") {
        for a in arches() {
            if p.for_arch(a).is_ok() {
                let _ = p.boot_json(a);
            }
        }
    }
    let _ = osconfig::OsBootConfig::from_files(None, Some(data), None, true);
}

/// A layer tar (plain or compressed): the release's manifests layer read
/// into memory, and a legacy OS layer extracted with whiteouts.
pub fn layer_tar(data: &[u8]) {
    let Ok(d) = tempfile::tempdir() else { return };
    let blob = d.path().join("blob");
    if std::fs::write(&blob, data).is_err() {
        return;
    }
    let _ = layers::read_files(&blob, release::MANIFESTS_DIR, 4 << 20);
    let root = d.path().join("root");
    if std::fs::create_dir(&root).is_ok() {
        let _ = layers::extract(&blob, &root, &|_| true);
    }
}

/// The OS's initramfs (cpio, or compressed cpio) and our cpio reader.
pub fn cpio(data: &[u8]) {
    let _ = live::check_initramfs(data, "fuzz");
    let _ = fs::cpio::list(data);
}

/// The OS's live menu templates. The input is split into files at each
/// line `=== <path>`.
pub fn live_templates(data: &[u8]) {
    let mut templates = Vec::new();
    let mut cur: Option<live::Template> = None;
    for line in data.split_inclusive(|&b| b == b'\n') {
        if let Some(p) = line.strip_prefix(b"=== ") {
            templates.extend(cur.take());
            cur = Some(live::Template {
                path: String::from_utf8_lossy(p).trim().to_string(),
                data: Vec::new(),
            });
        } else {
            cur.get_or_insert_with(|| live::Template {
                path: "isolinux/isolinux.cfg".into(),
                data: Vec::new(),
            })
            .data
            .extend_from_slice(line);
        }
    }
    templates.extend(cur);
    let kargs = vec![
        "ignition.platform.id=metal".to_string(),
        "console=ttyS0".to_string(),
    ];
    if let Ok(r) = live::render(&templates, "rhcos-418.94", "418.94", &kargs) {
        let _ = r.kargs_json();
        let _ = r.area_size();
    }
}

/// `/usr/lib/os-release`.
pub fn os_release(data: &[u8]) {
    let _ = oscontainer::parse_os_release(&String::from_utf8_lossy(data));
}
