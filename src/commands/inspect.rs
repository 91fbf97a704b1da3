//! `bootimage-gen inspect`: what a release holds, as text or one JSON document
//! (schema `bootimage-gen/inspect/v1`, documented in docs/inspect-json.md).
use crate::cli::InspectArgs;
use crate::oscontainer::config::Setting;
use crate::pipeline::load::{load, Loaded};
use anyhow::Result;
use serde_json::{json, Value};

/// Schema id of the JSON document.
pub const SCHEMA: &str = "bootimage-gen/inspect/v1";

pub fn run(a: InspectArgs) -> Result<()> {
    let input = super::input_settings(&a.input)?;
    let loaded = super::block_on(load(&input, a.import))?;
    let doc = document(&loaded);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print_text(&doc);
    }
    Ok(())
}

fn setting<T: serde::Serialize>(s: &Setting<T>) -> Value {
    json!({"value": s.value, "default": s.is_default()})
}

/// Build the stable JSON document.
pub fn document(l: &Loaded) -> Value {
    let r = &l.resolved;
    let labels = &r.os_labels;
    let label = |k: &str| labels.get(k).cloned();
    let os = l.os.as_ref();
    // The OS's own commit, whatever the cache holds (the import's merge
    // commit is `import-commit`).
    let commit = os
        .map(|o| o.image_commit.clone())
        .or_else(|| label(crate::oscontainer::LABEL_OSTREE_COMMIT))
        .or_else(|| label(crate::oscontainer::LABEL_LEGACY_COMMIT));
    let version = os
        .map(|o| o.version.clone())
        .or_else(|| label("org.opencontainers.image.version"))
        .or_else(|| label("version"));
    // The kernel is the tree's (`/usr/lib/modules/<kver>/vmlinuz`): the
    // `ostree.linux` label of a node image is the literal `true`
    // (openshift/os Containerfile), so it is never shown as the kernel.
    let kernel = os.map(|o| o.kernel_version.clone());
    let osname = os
        .map(|o| o.osname.clone())
        .or_else(|| label(crate::oscontainer::LABEL_OSNAME));
    let config = os.map(|o| {
        let i = &o.config.image;
        json!({
            "sources": o.config.sources,
            "image-json-era": i.era,
            "cosa-keys": i.cosa_keys,
            "grub-script-bytes": i.grub_script.as_ref().map(|g| g.len()),
            "image": {
                "size": setting(&i.size),
                "extra-kargs": setting(&i.extra_kargs),
                "compressor": setting(&i.compressor),
                "vmware-os-type": setting(&i.vmware_os_type),
                "vmware-hw-version": setting(&i.vmware_hw_version),
                "vmware-secure-boot": setting(&i.vmware_secure_boot),
                "aws-imdsv2-only": setting(&i.aws_imdsv2_only),
                "aws-volume-type": setting(&i.aws_volume_type),
                "aws-x86-boot-mode": setting(&i.aws_x86_boot_mode),
                "live-rootfs-fstype": setting(&i.live_rootfs_fstype),
                "live-rootfs-fsoptions": setting(&i.live_rootfs_fsoptions),
                "bootc-install-to-fs": setting(&i.bootc_install_to_fs),
            },
            "bootupd": bootupd(l, &o.commit),
            "platforms": o.config.platforms.as_ref().map(|p| json!({
                "source": p.source,
                "shape": match p.shape {
                    crate::oscontainer::config::PlatformsShape::ByPlatform(_) => "by-platform",
                    crate::oscontainer::config::PlatformsShape::ByArch(_) => "by-arch",
                },
                "console": p.for_arch(r.arch).ok(),
            })),
            "live-templates": o.config.has_live_templates,
        })
    });
    json!({
        "schema": SCHEMA,
        "release": {
            "reference": r.release_ref,
            "digest": r.release_digest,
            "version": r.release_version,
            "architecture": r.arch,
            "metadata": r.payload.as_ref().and_then(|p| p.metadata.clone()),
            "index": r.release_index,
            "signature": l.trust,
        },
        "os-images": r.os_images,
        "os": {
            "tag": r.os_tag,
            "stream-class": r.os_stream_class,
            "chosen-because": r.os_choice,
            "pullspec": r.os_pullspec,
            "source": r.os_source,
            "digest": r.os_digest,
            "format": r.os_format,
            "commit": commit,
            "import-commit": os.map(|o| o.commit.clone()),
            "index": r.os_index,
            "derived": r.os_derived_layers.map(|n| n > 0),
            "derived-layers": r.os_derived_layers,
            "dropped-by-import": l.import.as_ref().map(|(rec, _)| rec.dropped.clone()),
            "version": version,
            "release-annotation": r.os_release_annotation,
            "kernel": kernel,
            "osname": osname,
            "osname-source": os.map(|o| o.osname_source.clone()),
            "imported": l.import.is_some(),
            "from-cache": l.import.as_ref().map(|(_, c)| *c).unwrap_or(false),
            "timestamp": os.map(|o| o.timestamp),
        },
        "bootimage-config": config,
        "pinned-amis": r.pinned_amis,
    })
}

/// bootupd in the OS: its metadata's versions and whether it ships static
/// GRUB configs; null when it ships no metadata.
fn bootupd(l: &Loaded, commit: &str) -> Value {
    use crate::disk::bootupd as b;
    let repo = &l.cache.repo;
    let version = |rel: &str| -> Value {
        match repo.read_file(commit, &format!("/{rel}")) {
            Ok(Some(raw)) => match b::parse_metadata(&raw, rel) {
                Ok(m) => m["version"].clone(),
                Err(e) => json!(format!("unreadable: {e}")),
            },
            _ => Value::Null,
        }
    };
    let (efi, bios) = (version(b::EFI_JSON), version(b::BIOS_JSON));
    if efi.is_null() && bios.is_null() {
        return Value::Null;
    }
    let static_configs = matches!(
        repo.list_dir(commit, &format!("/{}", b::STATIC_DIR)),
        Ok(Some(_))
    );
    json!({"efi": efi, "bios": bios, "static-configs": static_configs})
}

fn s(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The manifest list a reference named and the entry chosen, if any.
fn index_row(index: &Value) {
    if let Some(i) = index.as_object() {
        row(
            "manifest list",
            format!(
                "{} -> {} ({})",
                s(&i["index_digest"]),
                s(&i["digest"]),
                s(&i["platform"])
            ),
        );
    }
}

/// One `key value` line of the text report.
fn row(k: &str, v: String) {
    println!("  {k:<18} {v}");
}

/// The text report, section by section (the same document as `--json`).
fn print_text(d: &Value) {
    print_release(d);
    print_os_images(d);
    print_os(&d["os"]);
    print_config(&d["bootimage-config"]);
    print_amis(d);
}

fn print_release(d: &Value) {
    println!("Release");
    row("reference", s(&d["release"]["reference"]));
    row("version", s(&d["release"]["version"]));
    row("digest", s(&d["release"]["digest"]));
    index_row(&d["release"]["index"]);
    row("architecture", s(&d["release"]["architecture"]));
    let sig = &d["release"]["signature"];
    row(
        "signature",
        if sig["verified"] == true {
            "verified".to_string()
        } else {
            format!("not verified ({})", s(&sig["policy"]))
        },
    );
    for b in sig["by"].as_array().map(Vec::as_slice).unwrap_or_default() {
        row(
            "  verified by",
            format!(
                "{} key {} ({}) over {}, from {}",
                s(&b["mechanism"]),
                s(&b["key"]),
                s(&b["keyring"]),
                s(&b["digest"]),
                s(&b["origin"])
            ),
        );
    }
    for w in sig["warnings"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        row("  warning", s(w));
    }
    if !sig["os"].is_null() {
        row("  OS image", s(&sig["os"]));
    }
}

fn print_os_images(d: &Value) {
    println!("OS images (tags matching the MCO's OS pattern, and machine-os-content)");
    let found = d["os-images"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    // One column for every tag, however long the release's tag names are.
    let w = found.iter().map(|f| s(&f["tag"]).len()).max().unwrap_or(0);
    for f in found {
        println!(
            "  {:<w$} stream {:<8} {}{}",
            s(&f["tag"]),
            s(&f["stream-class"]),
            if f["bootable"] == true {
                "bootable"
            } else {
                "not bootable: "
            },
            if f["bootable"] == true {
                String::new()
            } else {
                s(&f["note"])
            }
        );
    }
}

fn print_os(o: &Value) {
    println!("OS image");
    row("tag", s(&o["tag"]));
    row("stream", s(&o["stream-class"]));
    row("chosen because", s(&o["chosen-because"]));
    row("pullspec", s(&o["pullspec"]));
    row("read from", s(&o["source"]));
    row("digest", s(&o["digest"]));
    index_row(&o["index"]);
    row("format", s(&o["format"]));
    row("ostree commit", s(&o["commit"]));
    if let Some(n) = o["derived-layers"].as_u64() {
        row(
            "derived",
            if n == 0 {
                "no (the ostree commit alone)".into()
            } else {
                format!("yes: {n} container layer(s) on the ostree commit")
            },
        );
    }
    row("version", s(&o["version"]));
    row(
        "kernel",
        if o["kernel"].is_null() {
            "- (read from the OS tree: pass --import)".into()
        } else {
            s(&o["kernel"])
        },
    );
    row("osname", s(&o["osname"]));
    row(
        "imported",
        if o["imported"] == true {
            if o["from-cache"] == true {
                "yes (cached)".into()
            } else {
                "yes".into()
            }
        } else {
            "no (pass --import to read the OS itself)".into()
        },
    );
}

fn print_config(config: &Value) {
    match config {
        Value::Null => println!("Bootimage configuration\n  (not read: pass --import)"),
        c => {
            let src: Vec<String> = c["sources"]
                .as_array()
                .map(|a| a.iter().map(s).collect())
                .unwrap_or_default();
            println!(
                "Bootimage configuration (from {})",
                if src.is_empty() {
                    "defaults only".into()
                } else {
                    src.join(", ")
                }
            );
            if let Some(m) = c["image"].as_object() {
                for (k, v) in m {
                    let mark = if v["default"] == true {
                        "  (default)"
                    } else {
                        ""
                    };
                    row(k, format!("{}{mark}", s(&v["value"])));
                }
            }
            row(
                "image.json era",
                match c["image-json-era"].as_str() {
                    Some("cosa") => {
                        "cosa (RHCOS 4.16-4.19: cosa's image-default.yaml merged in)".into()
                    }
                    other => other.unwrap_or("-").to_string(),
                },
            );
            for k in c["cosa-keys"].as_array().into_iter().flatten() {
                row("  cosa key", s(k));
            }
            match c["platforms"].as_object() {
                Some(p) => {
                    let names: Vec<String> = p
                        .get("console")
                        .and_then(|t| t.as_object())
                        .map(|m| m.keys().cloned().collect())
                        .unwrap_or_default();
                    row(
                        "platforms.json",
                        format!(
                            "{} ({}): console settings for {}",
                            s(&p["source"]),
                            s(&p["shape"]),
                            if names.is_empty() {
                                "none".into()
                            } else {
                                names.join(", ")
                            }
                        ),
                    );
                }
                None => row(
                    "platforms.json",
                    "(none: the OS ships no platforms.json)".into(),
                ),
            }
            let b = &c["bootupd"];
            row(
                "bootupd",
                if b.is_null() {
                    "no (the OS ships no bootupd metadata)".into()
                } else {
                    format!(
                        "yes: EFI {}, BIOS {}{}",
                        s(&b["efi"]),
                        s(&b["bios"]),
                        if b["static-configs"] == true {
                            ", static GRUB configs"
                        } else {
                            ""
                        }
                    )
                },
            );
            row(
                "live templates",
                if c["live-templates"] == true {
                    "yes".into()
                } else {
                    "no".into()
                },
            );
        }
    }
}

fn print_amis(d: &Value) {
    println!("AMIs pinned by the release");
    match d["pinned-amis"].as_array() {
        Some(a) if !a.is_empty() => {
            for x in a {
                println!(
                    "  {:<18} {:<24} release {}",
                    s(&x["region"]),
                    s(&x["image"]),
                    s(&x["release"])
                );
            }
        }
        _ => println!("  (none)"),
    }
}
