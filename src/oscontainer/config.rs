//! The bootimage configuration that travels with the OS: `image.json`,
//! `platforms.json` (coreos-assembler / fedora-coreos-config), or the legacy
//! `/bootimage.json`. Missing keys take the RHCOS defaults (SPEC 1.2), and
//! each value remembers whether it came from the OS or is a default.
use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// The first line of `console.cfg` (cosa / SPEC 2), and the line a cosa-era
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
            live_rootfs_fsoptions: Setting {
                value: String::new(),
                source: String::new(),
            },
            bootc_install_to_fs: b("bootc-install-to-fs")?,
            grub_script: None,
            era: "current".into(),
            cosa_keys: Vec::new(),
        };
        let mut cfg = cfg;
        cosa_era(obj, source, &mut cfg)?;
        // The default options depend on the fstype (osbuild: `-comp zstd`
        // for squashfs, else `--quiet`); cosa-era images name the squashfs
        // compressor in `squashfs-compression` (cosa `cmd-buildextend-live`
        // ran `mksquashfs -comp <it>`).
        let squashfs_comp = obj.get("squashfs-compression").and_then(|v| v.as_str());
        cfg.live_rootfs_fsoptions = match obj.get("live-rootfs-fsoptions") {
            Some(Value::String(v)) => Setting {
                value: v.clone(),
                source: source.to_string(),
            },
            None | Some(Value::Null)
                if cfg.live_rootfs_fstype.value == "squashfs" && squashfs_comp.is_some() =>
            {
                Setting {
                    value: format!("-comp {}", squashfs_comp.unwrap_or_default()),
                    source: format!("{source} squashfs-compression"),
                }
            }
            None | Some(Value::Null) => Setting {
                value: if cfg.live_rootfs_fstype.value == "squashfs" {
                    "-comp zstd".to_string()
                } else {
                    "--quiet".to_string()
                },
                source: "default".to_string(),
            },
            Some(v) => bail!("{source}: 'live-rootfs-fsoptions' must be a string, got {v}"),
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

/// One platform's console settings (fedora-coreos-config `platforms.yaml`).
#[derive(Debug, Clone, Default, Serialize, PartialEq, serde::Deserialize)]
pub struct PlatformConsole {
    #[serde(default)]
    pub grub_commands: Vec<String>,
    #[serde(default)]
    pub kernel_arguments: Vec<String>,
}

/// One platform → console settings table.
pub type ConsoleTable = BTreeMap<String, PlatformConsole>;

/// Architecture names that may key an arch-keyed platforms table.
pub const ARCH_KEYS: [&str; 5] = ["x86_64", "aarch64", "ppc64le", "s390x", "riscv64"];

/// The two shapes of `platforms.json` this tool reads.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PlatformsShape {
    /// `{platform: {grub_commands, kernel_arguments}}`: what upstream ships
    /// in the OS tree, already cut to the build arch (fedora-coreos-config
    /// `build-rootfs` writes `platforms.yaml[arch]`; osbuild's
    /// `org.osbuild.coreos.platform` and coreos-installer read `data[platform]`).
    ByPlatform(ConsoleTable),
    /// `{arch: {platform: {...}}}`: the shape of `platforms.yaml` itself,
    /// which hand-made OS images sometimes ship.
    ByArch(BTreeMap<String, ConsoleTable>),
}

/// `platforms.json`: console settings per platform (SPEC 1.3). Never the
/// list of platforms an OS supports: an unlisted platform has no console
/// settings, nothing more.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Platforms {
    pub shape: PlatformsShape,
    /// Where it was read from (for messages).
    pub source: String,
    /// The raw bytes, copied as-is to `/boot/coreos/platforms.json` when the
    /// file already has upstream's shape.
    #[serde(skip)]
    pub raw: Vec<u8>,
}

const PLATFORMS_SHAPES: &str = "expected the upstream shape {\"<platform>\": {\"grub_commands\": [...], \"kernel_arguments\": [...]}} (fedora-coreos-config writes the build arch's part of platforms.yaml), or the arch-keyed shape {\"<arch>\": {\"<platform>\": {...}}}";

/// One platform entry: an object (or null) whose `grub_commands` and
/// `kernel_arguments`, when present, are lists of strings. Other keys are
/// ignored (upstream readers use only these two).
fn console_entry(v: &Value, path: &str) -> std::result::Result<PlatformConsole, String> {
    let obj = match v {
        Value::Null => return Ok(PlatformConsole::default()),
        Value::Object(m) => m,
        other => return Err(format!("{path} is {}, not an object", kind(other))),
    };
    let list = |k: &str| -> std::result::Result<Vec<String>, String> {
        match obj.get(k) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(a)) => a
                .iter()
                .enumerate()
                .map(|(i, x)| {
                    x.as_str()
                        .map(String::from)
                        .ok_or_else(|| format!("{path}.{k}[{i}] is {}, not a string", kind(x)))
                })
                .collect(),
            Some(other) => Err(format!(
                "{path}.{k} is {}, not a list of strings",
                kind(other)
            )),
        }
    };
    Ok(PlatformConsole {
        grub_commands: list("grub_commands")?,
        kernel_arguments: list("kernel_arguments")?,
    })
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn console_table(m: &Map<String, Value>, path: &str) -> std::result::Result<ConsoleTable, String> {
    m.iter()
        .map(|(k, v)| Ok((k.clone(), console_entry(v, &format!("{path}.{k}"))?)))
        .collect()
}

impl Platforms {
    pub fn parse(raw: &[u8], source: &str) -> Result<Self> {
        let v: Value = serde_json::from_slice(raw)
            .with_context(|| format!("{source} is not valid JSON ({PLATFORMS_SHAPES})"))?;
        let Value::Object(top) = &v else {
            bail!(
                "{source} is {}, not a platforms table: {PLATFORMS_SHAPES}",
                kind(&v)
            );
        };
        let arch_keyed = !top.is_empty() && top.keys().all(|k| ARCH_KEYS.contains(&k.as_str()));
        let shape = if arch_keyed {
            let mut arches = BTreeMap::new();
            for (a, t) in top {
                let Value::Object(t) = t else {
                    bail!(
                        "{source}: .{a} is {}, not a table of platforms: {PLATFORMS_SHAPES}",
                        kind(t)
                    );
                };
                let table = console_table(t, a)
                    .map_err(|e| anyhow!("{source}: {e}: {PLATFORMS_SHAPES}"))?;
                arches.insert(a.clone(), table);
            }
            PlatformsShape::ByArch(arches)
        } else {
            let table =
                console_table(top, "").map_err(|e| anyhow!("{source}: {e}: {PLATFORMS_SHAPES}"))?;
            PlatformsShape::ByPlatform(table)
        };
        Ok(Platforms {
            shape,
            source: source.to_string(),
            raw: raw.to_vec(),
        })
    }

    /// The console table for the OS's architecture. An upstream-shaped file
    /// is already the build arch's; an arch-keyed one must have `arch`.
    pub fn for_arch(&self, arch: &str) -> Result<&ConsoleTable> {
        match &self.shape {
            PlatformsShape::ByPlatform(t) => Ok(t),
            PlatformsShape::ByArch(m) => m.get(arch).with_context(|| {
                format!(
                    "{} is keyed by architecture and has no entry for {arch} (it has {}); add a {arch} entry, or ship it in the upstream shape {{\"<platform>\": {{...}}}}",
                    self.source,
                    m.keys().cloned().collect::<Vec<_>>().join(", ")
                )
            }),
        }
    }

    /// What goes to `/boot/coreos/platforms.json` (read by coreos-installer
    /// as `data[platform]`): the file itself in upstream's shape, else the
    /// arch's part of an arch-keyed file, in upstream's shape.
    pub fn boot_json(&self, arch: &str) -> Result<Vec<u8>> {
        match &self.shape {
            PlatformsShape::ByPlatform(_) => Ok(self.raw.clone()),
            PlatformsShape::ByArch(_) => Ok(serde_json::to_vec_pretty(self.for_arch(arch)?)?),
        }
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
        let c =
            ImageConfig::from_json(Some(&json!({"squashfs-compression": "gzip"})), "i").unwrap();
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
        let x = p.for_arch("x86_64").unwrap();
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
        assert_eq!(p.boot_json("aarch64").unwrap(), p.raw);
        // Unknown keys inside an entry are ignored (readers use two keys).
        let p =
            Platforms::parse(br#"{"aws":{"kernel_arguments":["a"],"comment":"x"}}"#, "p").unwrap();
        assert_eq!(
            p.for_arch("x86_64").unwrap()["aws"].kernel_arguments,
            vec!["a"]
        );
        // An empty file is a valid (empty) table.
        assert!(Platforms::parse(b"{}", "p")
            .unwrap()
            .for_arch("s390x")
            .unwrap()
            .is_empty());
    }
    #[test]
    fn platforms_arch_keyed_shape() {
        let p = Platforms::parse(br#"{"x86_64":{"metal":{},"qemu":{"grub_commands":["serial"],"kernel_arguments":["console=ttyS0"]},"azure":null},"aarch64":{"qemu":{"kernel_arguments":["console=ttyAMA0"]}}}"#, "p").unwrap();
        let x = p.for_arch("x86_64").unwrap();
        assert_eq!(x["qemu"].kernel_arguments, vec!["console=ttyS0"]);
        assert!(x["metal"].grub_commands.is_empty());
        assert_eq!(
            p.for_arch("aarch64").unwrap()["qemu"].kernel_arguments,
            vec!["console=ttyAMA0"]
        );
        let e = format!("{:#}", p.for_arch("s390x").unwrap_err());
        assert!(
            e.contains("no entry for s390x") && e.contains("x86_64, aarch64")
                || e.contains("aarch64, x86_64"),
            "{e}"
        );
        // /boot/coreos/platforms.json gets the arch's part, in upstream's shape.
        let b: Value = serde_json::from_slice(&p.boot_json("aarch64").unwrap()).unwrap();
        assert_eq!(
            b,
            json!({"qemu": {"grub_commands": [], "kernel_arguments": ["console=ttyAMA0"]}})
        );
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
}
