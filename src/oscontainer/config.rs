//! The bootimage configuration that travels with the OS: `image.json`,
//! `platforms.json` (coreos-assembler / fedora-coreos-config), or the legacy
//! `/bootimage.json`. Missing keys take the RHCOS defaults (docs/contract.md §1.2), and
//! each value remembers whether it came from the OS or is a default.
//!
//! `platforms.json` is read in `platforms` (re-exported here).
mod platforms;

pub use platforms::{is_arch_key, ConsoleTable, PlatformConsole, Platforms, PlatformsShape};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::{json, Map, Value};

/// The first line of `console.cfg` (cosa / docs/contract.md §2), and the line a cosa-era
/// `grub-script` marks the place of the platform's console commands with.
pub const CONSOLE_START: &str = "# CONSOLE-SETTINGS-START";

/// Whether `line` is the console marker a grub-script's console commands
/// follow (the one rule for checking a script and for writing it).
pub fn is_console_start(line: &str) -> bool {
    line.trim() == CONSOLE_START
}

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
    /// Options of mkfs for the live rootfs (osbuild live-artifacts.mono:
    /// default `-comp zstd` for squashfs, `--quiet` for erofs).
    #[serde(rename = "live-rootfs-fsoptions")]
    pub live_rootfs_fsoptions: Setting<String>,
    /// The OS asks to be installed by its own `bootc install to-filesystem`
    /// (cosa `cmd-osbuild`: `getconfig_def "bootc-install-to-fs" "false"`).
    #[serde(rename = "bootc-install-to-fs")]
    pub bootc_install_to_fs: Setting<bool>,
    /// The GRUB config a cosa-built OS (RHCOS 4.16, 4.17) carries in its
    /// image.json (cosa `cosalib/cmdlib.py` `generate_image_json`): written
    /// as the disk's `/boot/grub2/grub.cfg`, the platform's console commands
    /// after its `# CONSOLE-SETTINGS-START` line (cosa `create_disk.sh`).
    #[serde(rename = "grub-script")]
    pub grub_script: Option<String>,
    /// Which shape the image.json has: `cosa` (4.16-4.19: cosa's
    /// image-default.yaml merged in), or `current` (4.20+).
    pub era: String,
    /// cosa-merged keys read and what became of them (`key=value: note`).
    #[serde(rename = "cosa-keys")]
    pub cosa_keys: Vec<String>,
}

/// Keys cosa's `image-default.yaml` (branches rhcos-4.16 to 4.19) merges
/// into every image.json; their presence marks the cosa era.
pub const COSA_KEYS: [&str; 9] = [
    "bootfs",
    "rootfs",
    "rootfs-args",
    "composefs",
    "ostree-format",
    "ostree-container-inject-openshift-cvo-labels",
    "deploy-via-container",
    "squashfs-compression",
    "grub-script",
];

/// The live rootfs filesystems upstream builds (osbuild live-artifacts.mono).
pub const LIVE_ROOTFS_FSTYPES: [&str; 2] = ["squashfs", "erofs"];

/// RHCOS defaults (docs/contract.md §1.2).
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
        "bootc-install-to-fs": false,
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
        let keys = Keys {
            obj,
            source,
            defaults: defaults(),
        };
        let mut cfg = keys.plain_settings()?;
        cosa_era(obj, source, &mut cfg)?;
        cfg.live_rootfs_fsoptions =
            live_rootfs_fsoptions(obj, source, &cfg.live_rootfs_fstype.value)?;
        check_size_and_compressor(&cfg, source)?;
        Ok(cfg)
    }
}

/// One image.json object, read key by key with the RHCOS defaults for the
/// keys it lacks; `source` names it in errors.
struct Keys<'a> {
    obj: &'a Map<String, Value>,
    source: &'a str,
    defaults: Map<String, Value>,
}

impl Keys<'_> {
    /// The value of `k` and where it came from (the object, or `default`).
    fn pick(&self, k: &str) -> (Value, String) {
        match self.obj.get(k) {
            Some(v) if !v.is_null() => (v.clone(), self.source.to_string()),
            _ => (self.defaults[k].clone(), "default".to_string()),
        }
    }

    /// Key `k` as a whole number (a JSON number or a string of digits).
    fn whole_number(&self, k: &str) -> Result<Setting<u64>> {
        let source = self.source;
        let (v, s) = self.pick(k);
        let n = v
            .as_u64()
            .or_else(|| v.as_str().and_then(|x| x.parse().ok()));
        let n = n.with_context(|| format!("{source}: '{k}' must be a whole number, got {v}"))?;
        Ok(Setting {
            value: n,
            source: s,
        })
    }

    /// Key `k` as a string.
    fn string(&self, k: &str) -> Result<Setting<String>> {
        let source = self.source;
        let (v, s) = self.pick(k);
        let x = v
            .as_str()
            .with_context(|| format!("{source}: '{k}' must be a string, got {v}"))?;
        Ok(Setting {
            value: x.to_string(),
            source: s,
        })
    }

    /// Key `k` as `true` or `false`.
    fn flag(&self, k: &str) -> Result<Setting<bool>> {
        let source = self.source;
        let (v, s) = self.pick(k);
        let x = v
            .as_bool()
            .with_context(|| format!("{source}: '{k}' must be true or false, got {v}"))?;
        Ok(Setting {
            value: x,
            source: s,
        })
    }

    /// `extra-kargs`: a list of strings, or one string split at whitespace.
    fn extra_kargs(&self) -> Result<Setting<Vec<String>>> {
        let source = self.source;
        let (kv, ks) = self.pick("extra-kargs");
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
        Ok(Setting {
            value: kargs,
            source: ks,
        })
    }

    /// The settings read from one key each, in the `current` era's shape;
    /// the live rootfs options and the cosa-era keys are filled in after.
    fn plain_settings(&self) -> Result<ImageConfig> {
        let extra_kargs = self.extra_kargs()?;
        Ok(ImageConfig {
            size: self.whole_number("size")?,
            extra_kargs,
            compressor: self.string("compressor")?,
            vmware_os_type: self.string("vmware-os-type")?,
            vmware_hw_version: self.whole_number("vmware-hw-version")?,
            vmware_secure_boot: self.flag("vmware-secure-boot")?,
            aws_imdsv2_only: self.flag("aws-imdsv2-only")?,
            aws_volume_type: self.string("aws-volume-type")?,
            aws_x86_boot_mode: self.string("aws-x86-boot-mode")?,
            live_rootfs_fstype: self.string("live-rootfs-fstype")?,
            live_rootfs_fsoptions: Setting {
                value: String::new(),
                source: String::new(),
            },
            bootc_install_to_fs: self.flag("bootc-install-to-fs")?,
            grub_script: None,
            era: "current".into(),
            cosa_keys: Vec::new(),
        })
    }
}

/// `live-rootfs-fsoptions`, or when absent the options for the live rootfs
/// `fstype` (from `squashfs-compression`, or the osbuild default).
fn live_rootfs_fsoptions(
    obj: &Map<String, Value>,
    source: &str,
    fstype: &str,
) -> Result<Setting<String>> {
    // The default options depend on the fstype (osbuild: `-comp zstd`
    // for squashfs, else `--quiet`); cosa-era images name the squashfs
    // compressor in `squashfs-compression` (cosa `cmd-buildextend-live`
    // ran `mksquashfs -comp <it>`).
    let squashfs_comp = obj.get("squashfs-compression").and_then(|v| v.as_str());
    Ok(match obj.get("live-rootfs-fsoptions") {
        Some(Value::String(v)) => Setting {
            value: v.clone(),
            source: source.to_string(),
        },
        None | Some(Value::Null) if fstype == "squashfs" && squashfs_comp.is_some() => Setting {
            value: format!("-comp {}", squashfs_comp.unwrap_or_default()),
            source: format!("{source} squashfs-compression"),
        },
        None | Some(Value::Null) => Setting {
            value: if fstype == "squashfs" {
                "-comp zstd".to_string()
            } else {
                "--quiet".to_string()
            },
            source: "default".to_string(),
        },
        Some(v) => bail!("{source}: 'live-rootfs-fsoptions' must be a string, got {v}"),
    })
}

/// Refuse a disk size that makes no sense and a compressor not supported.
fn check_size_and_compressor(cfg: &ImageConfig, source: &str) -> Result<()> {
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
    Ok(())
}

/// Read the cosa-merged keys of a 4.16-4.19 image.json: the filesystems
/// must be the ones this tool builds (cosa's defaults, ext4 /boot and XFS
/// root), `grub-script` is kept, the rest is recorded.
fn cosa_era(obj: &Map<String, Value>, source: &str, cfg: &mut ImageConfig) -> Result<()> {
    let mut seen = Vec::new();
    for k in COSA_KEYS {
        let Some(v) = obj.get(k).filter(|v| !v.is_null()) else {
            continue;
        };
        let shown = match v {
            Value::String(s) if k == "grub-script" => format!("{} bytes", s.len()),
            Value::String(s) => format!("'{s}'"),
            other => other.to_string(),
        };
        let note = match k {
            "bootfs" | "rootfs" => {
                let want = if k == "bootfs" { "ext4" } else { "xfs" };
                let got = v
                    .as_str()
                    .with_context(|| format!("{source}: '{k}' must be a string, got {v}"))?;
                if got != want {
                    bail!("{source}: '{k}' is '{got}', and bootimage-gen builds the {want} {} cosa builds by default; rebuild the OS with {k}: {want} (or without the key)", if k == "bootfs" { "/boot" } else { "root filesystem" });
                }
                "built so"
            }
            "grub-script" => {
                let text = v.as_str().with_context(|| {
                    format!("{source}: 'grub-script' must be a string, got {v}")
                })?;
                if !text.lines().any(is_console_start) {
                    bail!("{source}: 'grub-script' has no '{}' line, where the platform's console commands go (cosa create_disk.sh); fix the OS's image.json", CONSOLE_START);
                }
                cfg.grub_script = Some(text.to_string());
                "becomes the disk's /boot/grub2/grub.cfg"
            }
            "squashfs-compression" => {
                "the live squashfs compressor when live-rootfs-fsoptions is absent"
            }
            "rootfs-args" if v.as_str().is_some_and(|s| !s.trim().is_empty()) => {
                "not applied: the root is made as cosa's osbuild manifests make it"
            }
            _ => "read; nothing to do for a bootimage",
        };
        seen.push(format!("{k}={shown}: {note}"));
    }
    if !seen.is_empty() {
        cfg.era = "cosa".into();
    }
    cfg.cosa_keys = seen;
    Ok(())
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
mod tests;
