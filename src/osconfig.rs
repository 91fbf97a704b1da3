//! The bootimage configuration that travels with the OS: `image.json`,
//! `platforms.json` (coreos-assembler / fedora-coreos-config), or the legacy
//! `/bootimage.json`. Missing keys take the RHCOS defaults (SPEC 1.2), and
//! each value remembers whether it came from the OS or is a default.
use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// Where the OS keeps its disk-build configuration (coreos-assembler).
pub const IMAGE_JSON: &str = "/usr/share/coreos-assembler/image.json";
pub const PLATFORMS_JSON: &str = "/usr/share/coreos-assembler/platforms.json";
pub const LIVE_DIR: &str = "/usr/share/coreos-assembler/live";
/// Legacy machine-os-content: the bootimage-updates enhancement, phase 1.
pub const LEGACY_BOOTIMAGE_JSON: &str = "/bootimage.json";

/// One configuration value and where it came from.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Setting<T> {
    pub value: T,
    /// `image.json`, `bootimage.json` or `default`.
    pub source: String,
}

impl<T> Setting<T> {
    pub fn is_default(&self) -> bool {
        self.source == "default"
    }
}

/// The keys of image.json this tool uses.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ImageConfig {
    /// Disk size of cloud/virt images, GiB.
    pub size: Setting<u64>,
    #[serde(rename = "extra-kargs")]
    pub extra_kargs: Setting<Vec<String>>,
    pub compressor: Setting<String>,
    #[serde(rename = "vmware-os-type")]
    pub vmware_os_type: Setting<String>,
    #[serde(rename = "vmware-hw-version")]
    pub vmware_hw_version: Setting<u64>,
    #[serde(rename = "vmware-secure-boot")]
    pub vmware_secure_boot: Setting<bool>,
    #[serde(rename = "aws-imdsv2-only")]
    pub aws_imdsv2_only: Setting<bool>,
    #[serde(rename = "aws-volume-type")]
    pub aws_volume_type: Setting<String>,
    #[serde(rename = "aws-x86-boot-mode")]
    pub aws_x86_boot_mode: Setting<String>,
    #[serde(rename = "live-rootfs-fstype")]
    pub live_rootfs_fstype: Setting<String>,
}

/// RHCOS defaults (SPEC 1.2).
fn defaults() -> Map<String, Value> {
    let v = json!({
        "size": 16,
        "extra-kargs": [],
        "compressor": "gzip",
        "vmware-os-type": "rhel8_64Guest",
        "vmware-hw-version": 15,
        "vmware-secure-boot": false,
        "aws-imdsv2-only": false,
        "aws-volume-type": "gp2",
        "aws-x86-boot-mode": "legacy-bios",
        "live-rootfs-fstype": "squashfs",
    });
    v.as_object().cloned().unwrap_or_default()
}

/// Known compressors and the file suffix they give.
pub const COMPRESSORS: [(&str, &str); 3] = [("gzip", "gz"), ("xz", "xz"), ("zstd", "zst")];

impl ImageConfig {
    /// Build from an image.json object (`None` = absent); `source` names it.
    pub fn from_json(obj: Option<&Value>, source: &str) -> Result<Self> {
        let empty = Map::new();
        let obj = match obj {
            Some(Value::Object(m)) => m,
            Some(_) => bail!("{source} is not a JSON object"),
            None => &empty,
        };
        let d = defaults();
        let pick = |k: &str| -> (Value, String) {
            match obj.get(k) {
                Some(v) if !v.is_null() => (v.clone(), source.to_string()),
                _ => (d[k].clone(), "default".to_string()),
            }
        };
        let u = |k: &str| -> Result<Setting<u64>> {
            let (v, s) = pick(k);
            let n = v
                .as_u64()
                .or_else(|| v.as_str().and_then(|x| x.parse().ok()));
            let n =
                n.with_context(|| format!("{source}: '{k}' must be a whole number, got {v}"))?;
            Ok(Setting {
                value: n,
                source: s,
            })
        };
        let st = |k: &str| -> Result<Setting<String>> {
            let (v, s) = pick(k);
            let x = v
                .as_str()
                .with_context(|| format!("{source}: '{k}' must be a string, got {v}"))?;
            Ok(Setting {
                value: x.to_string(),
                source: s,
            })
        };
        let b = |k: &str| -> Result<Setting<bool>> {
            let (v, s) = pick(k);
            let x = v
                .as_bool()
                .with_context(|| format!("{source}: '{k}' must be true or false, got {v}"))?;
            Ok(Setting {
                value: x,
                source: s,
            })
        };
        let (kv, ks) = pick("extra-kargs");
        let kargs = match kv {
            Value::Array(a) => a
                .iter()
                .map(|x| {
                    x.as_str().map(String::from).with_context(|| {
                        format!("{source}: 'extra-kargs' must be a list of strings")
                    })
                })
                .collect::<Result<Vec<_>>>()?,
            Value::String(s) => s.split_whitespace().map(String::from).collect(),
            other => bail!("{source}: 'extra-kargs' must be a list of strings, got {other}"),
        };
        let cfg = ImageConfig {
            size: u("size")?,
            extra_kargs: Setting {
                value: kargs,
                source: ks,
            },
            compressor: st("compressor")?,
            vmware_os_type: st("vmware-os-type")?,
            vmware_hw_version: u("vmware-hw-version")?,
            vmware_secure_boot: b("vmware-secure-boot")?,
            aws_imdsv2_only: b("aws-imdsv2-only")?,
            aws_volume_type: st("aws-volume-type")?,
            aws_x86_boot_mode: st("aws-x86-boot-mode")?,
            live_rootfs_fstype: st("live-rootfs-fstype")?,
        };
        if cfg.size.value == 0 || cfg.size.value > 64 * 1024 {
            bail!(
                "{source}: 'size' of {} GiB is not a sensible disk size",
                cfg.size.value
            );
        }
        if !COMPRESSORS.iter().any(|(c, _)| *c == cfg.compressor.value) {
            bail!(
                "{source}: compressor '{}' is not supported (one of: {})",
                cfg.compressor.value,
                COMPRESSORS
                    .iter()
                    .map(|c| c.0)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        Ok(cfg)
    }
}

/// One platform's console settings (fedora-coreos-config `platforms.yaml`).
#[derive(Debug, Clone, Default, Serialize, PartialEq, serde::Deserialize)]
pub struct PlatformConsole {
    #[serde(default)]
    pub grub_commands: Vec<String>,
    #[serde(default)]
    pub kernel_arguments: Vec<String>,
}

/// `platforms.json`: arch → platform → console settings.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Platforms {
    pub arches: BTreeMap<String, BTreeMap<String, PlatformConsole>>,
    /// The raw bytes, copied as-is to `/boot/coreos/platforms.json`.
    #[serde(skip)]
    pub raw: Vec<u8>,
}

impl Platforms {
    pub fn parse(raw: &[u8], source: &str) -> Result<Self> {
        let arches: BTreeMap<String, BTreeMap<String, Option<PlatformConsole>>> = serde_json::from_slice(raw)
            .with_context(|| format!("{source} is not a platforms table ({{arch: {{platform: {{grub_commands, kernel_arguments}}}}}})"))?;
        let arches = arches
            .into_iter()
            .map(|(a, p)| {
                (
                    a,
                    p.into_iter()
                        .map(|(k, v)| (k, v.unwrap_or_default()))
                        .collect(),
                )
            })
            .collect();
        Ok(Platforms {
            arches,
            raw: raw.to_vec(),
        })
    }

    /// The platforms listed for an architecture.
    pub fn for_arch(&self, arch: &str) -> Option<&BTreeMap<String, PlatformConsole>> {
        self.arches.get(arch)
    }
}

/// Everything the OS says about how to build its bootimages.
#[derive(Debug, Clone, Serialize)]
pub struct OsBootConfig {
    pub image: ImageConfig,
    /// `None` when the OS ships no platforms table.
    pub platforms: Option<Platforms>,
    /// Files the configuration was read from.
    pub sources: Vec<String>,
    /// The OS ships ISO menu templates under `live/`.
    pub has_live_templates: bool,
}

impl OsBootConfig {
    /// From the files found in the OS (each `None` when absent).
    pub fn from_files(
        image_json: Option<&[u8]>,
        platforms_json: Option<&[u8]>,
        legacy: Option<&[u8]>,
        has_live: bool,
    ) -> Result<Self> {
        let mut sources = Vec::new();
        let mut platforms = None;
        let image = if let Some(raw) = image_json {
            sources.push(IMAGE_JSON.to_string());
            let v: Value = serde_json::from_slice(raw)
                .with_context(|| format!("{IMAGE_JSON} in the OS is not valid JSON"))?;
            ImageConfig::from_json(Some(&v), "image.json")?
        } else if let Some(raw) = legacy {
            sources.push(LEGACY_BOOTIMAGE_JSON.to_string());
            let v: Value = serde_json::from_slice(raw)
                .context("/bootimage.json of the OS image is not valid JSON")?;
            if let Some(p) = v.get("platforms") {
                platforms = Some(Platforms::parse(
                    &serde_json::to_vec(p)?,
                    "bootimage.json platforms",
                )?);
            }
            let img = v.get("image").unwrap_or(&v);
            ImageConfig::from_json(Some(img), "bootimage.json")?
        } else {
            ImageConfig::from_json(None, "defaults")?
        };
        if let Some(raw) = platforms_json {
            sources.push(PLATFORMS_JSON.to_string());
            platforms = Some(Platforms::parse(raw, PLATFORMS_JSON)?);
        }
        Ok(OsBootConfig {
            image,
            platforms,
            sources,
            has_live_templates: has_live,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn defaults_are_marked() {
        let c =
            ImageConfig::from_json(Some(&json!({"size": 10, "compressor": "xz"})), "image.json")
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
    fn platforms_table() {
        let p = Platforms::parse(br#"{"x86_64":{"metal":{},"qemu":{"grub_commands":["serial"],"kernel_arguments":["console=ttyS0"]},"azure":null}}"#, "p").unwrap();
        let x = p.for_arch("x86_64").unwrap();
        assert_eq!(x["qemu"].kernel_arguments, vec!["console=ttyS0"]);
        assert!(x["metal"].grub_commands.is_empty());
        assert!(x.contains_key("azure"));
        assert!(Platforms::parse(b"[]", "p").is_err());
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
}
