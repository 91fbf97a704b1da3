//! `platforms.json`: the console settings per platform the OS ships, in
//! upstream's shape (keyed by platform) or arch-keyed, checked entry by
//! entry. In: the file's bytes; out: [`Platforms`], its console table for an
//! arch and what goes to `/boot/coreos/platforms.json`.
use crate::util::arch::Arch;
use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

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

/// Architecture names that make a platforms table arch-keyed: the arches
/// this tool knows ([`Arch::KNOWN`]) and riscv64, which Fedora CoreOS's
/// `platforms.yaml` also keys. In such a table every key is an arch, one
/// this tool does not know included.
pub fn is_arch_key(k: &str) -> bool {
    Arch::parse(k).is_ok_and(|a| a.is_known() || a == Arch::RISCV64)
}

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
    ByArch(BTreeMap<Arch, ConsoleTable>),
}

/// `platforms.json`: console settings per platform (docs/contract.md §1.3). Never the
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
        let arch_keyed = top.keys().any(|k| is_arch_key(k));
        let shape = if arch_keyed {
            let mut arches = BTreeMap::new();
            for (a, t) in top {
                let arch = Arch::parse(a).map_err(|e| {
                    anyhow!("{source}: key {a:?} of an arch-keyed table: {e}: {PLATFORMS_SHAPES}")
                })?;
                let Value::Object(t) = t else {
                    bail!(
                        "{source}: .{a} is {}, not a table of platforms: {PLATFORMS_SHAPES}",
                        kind(t)
                    );
                };
                let table = console_table(t, a)
                    .map_err(|e| anyhow!("{source}: {e}: {PLATFORMS_SHAPES}"))?;
                if arches.insert(arch, table).is_some() {
                    bail!("{source}: two keys name {arch}: {PLATFORMS_SHAPES}");
                }
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
    pub fn for_arch(&self, arch: Arch) -> Result<&ConsoleTable> {
        match &self.shape {
            PlatformsShape::ByPlatform(t) => Ok(t),
            PlatformsShape::ByArch(m) => m.get(&arch).with_context(|| {
                format!(
                    "{} is keyed by architecture and has no entry for {arch} (it has {}); add a {arch} entry, or ship it in the upstream shape {{\"<platform>\": {{...}}}}",
                    self.source,
                    Arch::join(&m.keys().copied().collect::<Vec<_>>())
                )
            }),
        }
    }

    /// What goes to `/boot/coreos/platforms.json` (read by coreos-installer
    /// as `data[platform]`): the file itself in upstream's shape, else the
    /// arch's part of an arch-keyed file, in upstream's shape.
    pub fn boot_json(&self, arch: Arch) -> Result<Vec<u8>> {
        match &self.shape {
            PlatformsShape::ByPlatform(_) => Ok(self.raw.clone()),
            PlatformsShape::ByArch(_) => Ok(serde_json::to_vec_pretty(self.for_arch(arch)?)?),
        }
    }
}
