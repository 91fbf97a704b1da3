//! The EROFS live rootfs (RHCOS 10: image.json `live-rootfs-fstype: erofs`).
//!
//! Upstream (osbuild `stages/org.osbuild.coreos.live-artifacts.mono`) runs
//! `mkfs.erofs <live-rootfs-fsoptions split on ' '> root.erofs <tree>`, with
//! `--quiet` as the default options, and puts `root.erofs` first in the
//! rootfs cpio (its superblock, magic `e2e1f5e0`, at byte 124 + 1024).
//! rhel-coreos-config `image-rhel-10.2.yaml` asks for
//! `-zlzma,level=6 -Efragments -C1048576 --quiet`.
//!
//! The host's `mkfs.erofs` may be older than that: Debian 12 ships
//! erofs-utils 1.5, which has lz4 and lz4hc only (no lzma), knows neither
//! `-Efragments` nor `-Ededupe` (and ignores unknown `-E` options without a
//! word) and reads `-zX,level=N` as level 0. [`map_options`] turns the OS's
//! options into ones this host honours and lists every replacement, so the
//! run can say exactly what differs; options no mkfs.erofs knows are errors.
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The program and the Debian package that ships it.
pub const MKFS: &str = "mkfs.erofs";
pub const PACKAGE: &str = "erofs-utils";
/// File name of the image in the rootfs cpio (the dracut `35coreos-live`
/// module and osbuild require exactly this name).
pub const ROOT_EROFS: &str = "root.erofs";
/// EROFS superblock: at byte 1024 of the image, magic 0xE0F5E1E2 (little
/// endian; kernel `Documentation/filesystems/erofs.rst`, erofs_fs.h).
pub const SUPERBLOCK_OFFSET: u64 = 1024;
pub const MAGIC: [u8; 4] = [0xe2, 0xe1, 0xf5, 0xe0];
/// upstream default options for erofs (osbuild live-artifacts.mono).
pub const DEFAULT_OPTIONS: &str = "--quiet";

mod releases;
pub use releases::KNOWN_ALGORITHMS;
use releases::{
    release_str, EXTENDED_1_5, EXTENDED_LATER, EXTENDED_VALUES, LONG_1_5, LONG_LATER_TUNING,
    SHORT_1_5,
};

/// What the host's `mkfs.erofs` offers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Host {
    /// erofs-utils release, e.g. (1, 5).
    pub version: (u32, u32),
    /// Its patch release (1.8.5: 5); 0 when not printed.
    #[serde(default)]
    pub patch: u32,
    /// Compressors it was built with, from `--help`.
    pub compressors: Vec<String>,
}

impl Host {
    pub fn describe(&self) -> String {
        format!(
            "{MKFS} {}.{} (erofs-utils; compressors: {})",
            self.version.0,
            self.version.1,
            self.compressors.join(", ")
        )
    }

    fn has(&self, alg: &str) -> bool {
        self.compressors.iter().any(|c| c == alg)
    }

    fn at_least(&self, v: (u32, u32)) -> bool {
        self.version >= v
    }

    fn at_least3(&self, v: (u32, u32, u32)) -> bool {
        (self.version.0, self.version.1, self.patch) >= v
    }

    /// `1.8.5` or `1.5`.
    pub fn release(&self) -> String {
        release_str((self.version.0, self.version.1, self.patch))
    }

    /// Ask the `mkfs.erofs` on PATH: the compressors from `--help`, the
    /// release from the first line it prints when it runs (erofs-utils 1.5
    /// has no `--version`): an empty directory into a scratch file.
    pub fn probe() -> Result<Host> {
        if !crate::util::cmd::have(MKFS) {
            bail!("the OS's image.json asks for an EROFS live rootfs (live-rootfs-fstype: erofs) and this host has no {MKFS}: install the {PACKAGE} package (apt-get install {PACKAGE}, dnf install {PACKAGE})");
        }
        let help = std::process::Command::new(MKFS)
            .arg("--help")
            .output()
            .with_context(|| format!("running {MKFS} --help"))?;
        let mut text = String::from_utf8_lossy(&help.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&help.stderr));
        let scratch = tempfile::tempdir().context("a scratch directory for mkfs.erofs")?;
        let empty = scratch.path().join("empty");
        std::fs::create_dir(&empty)?;
        let out = std::process::Command::new(MKFS)
            .arg(scratch.path().join("probe.img"))
            .arg(&empty)
            .output()
            .with_context(|| format!("running {MKFS}"))?;
        let mut first = String::from_utf8_lossy(&out.stdout).into_owned();
        first.push_str(&String::from_utf8_lossy(&out.stderr));
        Host::parse(&first, &text)
    }

    /// From what `mkfs.erofs DIR` and `mkfs.erofs --help` printed.
    pub fn parse(run_output: &str, help: &str) -> Result<Host> {
        let (version, patch) = run_output
            .lines()
            .find_map(|l| l.trim().strip_prefix("mkfs.erofs "))
            .and_then(|v| {
                let mut it = v
                    .split(|c: char| !c.is_ascii_digit())
                    .filter(|s| !s.is_empty());
                let major = it.next()?.parse().ok()?;
                let minor = it.next()?.parse().ok()?;
                let patch = it.next().and_then(|p| p.parse().ok()).unwrap_or(0);
                Some(((major, minor), patch))
            })
            .with_context(|| {
                format!("cannot tell the erofs-utils release of {MKFS} (it printed {run_output:?})")
            })?;
        let after = help
            .split_once("Available compressors are:")
            .map(|(_, a)| a)
            .unwrap_or("");
        let mut compressors: Vec<String> = Vec::new();
        for w in after.split(|c: char| !(c.is_ascii_alphanumeric())) {
            if KNOWN_ALGORITHMS.contains(&w) && !compressors.iter().any(|c| c == w) {
                compressors.push(w.to_string());
            }
        }
        Ok(Host {
            version,
            patch,
            compressors,
        })
    }
}

/// One option the host cannot honour as the OS asked, and what is used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replacement {
    pub requested: String,
    /// Empty when the option is left out.
    pub used: String,
    pub reason: String,
}

impl Replacement {
    pub fn line(&self) -> String {
        if self.used.is_empty() {
            format!("{} left out: {}", self.requested, self.reason)
        } else {
            format!("{} -> {}: {}", self.requested, self.used, self.reason)
        }
    }
}

/// The options to run, from the OS's `live-rootfs-fsoptions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Options {
    /// What the OS asked for, verbatim.
    pub requested: String,
    /// The mkfs.erofs arguments (before output file and directory).
    pub args: Vec<String>,
    /// Options replaced or left out because of the host's mkfs.erofs.
    pub replaced: Vec<Replacement>,
    /// Options added so that the same tree gives the same bytes.
    pub added: Vec<String>,
    pub host: Host,
}

impl Options {
    pub fn used(&self) -> String {
        self.args.join(" ")
    }
}

/// Split a compression level spec: `level=N`, plain `N`, other `k=v` kept.
fn level_of(params: &[&str]) -> (Option<String>, Vec<String>) {
    let mut level = None;
    let mut other = Vec::new();
    for p in params {
        if let Some(n) = p.strip_prefix("level=") {
            level = Some(n.to_string());
        } else if !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()) {
            level = Some(p.to_string());
        } else if !p.is_empty() {
            other.push(p.to_string());
        }
    }
    (level, other)
}

/// Highest lz4hc level (erofs-utils `lz4hc` compressor, LZ4HC_CLEVEL_MAX).
const LZ4HC_MAX: u32 = 12;

/// Where the options come from, as error messages name it.
const SRC: &str = "image.json live-rootfs-fsoptions";

/// Map the OS's options onto this host's `mkfs.erofs`. `mtime` and `uuid`
/// are added (unless given) so the image does not depend on the clock.
pub fn map_options(requested: &str, host: &Host, mtime: i64, uuid: &str) -> Result<Options> {
    let mut m = Mapping {
        requested,
        host,
        words: requested.split_whitespace().collect(),
        i: 0,
        args: Vec::new(),
        replaced: Vec::new(),
        swapped: None,
    };
    while m.i < m.words.len() {
        let w = m.words[m.i];
        m.word(w)?;
        m.i += 1;
    }
    m.drop_cluster_sizes();
    let Mapping {
        mut args, replaced, ..
    } = m;
    let added = reproducible(&args, mtime, uuid);
    args.extend(added.iter().cloned());
    Ok(Options {
        requested: requested.to_string(),
        args,
        replaced,
        added,
        host: host.clone(),
    })
}

/// The OS's options being mapped, word after word: what is run so far and
/// what was replaced.
struct Mapping<'a> {
    /// What the OS asked for, verbatim (for error messages).
    requested: &'a str,
    host: &'a Host,
    words: Vec<&'a str>,
    /// The word being read.
    i: usize,
    args: Vec<String>,
    replaced: Vec<Replacement>,
    /// The algorithm asked for, when the host lacks it.
    swapped: Option<String>,
}

impl Mapping<'_> {
    /// The next word, the value of `opt` given apart (`-z lz4`).
    fn next_value(&mut self, opt: &str) -> Result<String> {
        let requested = self.requested;
        self.i += 1;
        self.words
            .get(self.i)
            .map(|s| s.to_string())
            .with_context(|| format!("{SRC} '{requested}': {opt} needs a value"))
    }

    /// One option word (and its value when given apart), by family.
    fn word(&mut self, w: &str) -> Result<()> {
        if let Some(spec) = w.strip_prefix("-z") {
            let spec = if spec.is_empty() {
                self.next_value("-z")?
            } else {
                spec.to_string()
            };
            self.compression(spec)
        } else if let Some(list) = w.strip_prefix("-E") {
            let list = if list.is_empty() {
                self.next_value("-E")?
            } else {
                list.to_string()
            };
            self.extended(list)
        } else if let Some(short) = SHORT_1_5.iter().find(|s| w.starts_with(**s)) {
            if w.len() == short.len() {
                let v = self.next_value(short)?;
                self.args.push(format!("{short}{v}"));
            } else {
                self.args.push(w.to_string());
            }
            Ok(())
        } else if w.starts_with("--") {
            self.long(w)
        } else {
            let requested = self.requested;
            bail!("{SRC} '{requested}': '{w}' is not a {MKFS} option");
        }
    }

    /// `-zALG[,LEVEL][:ALG...]`: the first algorithm at the level written as
    /// this host reads it, or the closest compressor the host has.
    fn compression(&mut self, spec: String) -> Result<()> {
        let (requested, host) = (self.requested, self.host);
        let asked = format!("-z{spec}");
        // Several algorithms (`-zlz4hc:lzma`) are a later feature: use the first.
        let first = spec.split(':').next().unwrap_or("");
        for alg in spec.split(':') {
            let name = alg.split(',').next().unwrap_or("");
            if !KNOWN_ALGORITHMS.contains(&name) {
                bail!("{SRC} '{requested}' asks for the EROFS compression algorithm '{name}', which no mkfs.erofs knows ({}); fix the OS's image.json", KNOWN_ALGORITHMS.join(", "));
            }
        }
        let mut parts = first.split(',');
        let alg = parts.next().unwrap_or("");
        let params: Vec<&str> = parts.collect();
        let (level, other) = level_of(&params);
        let used = self.compressor(alg, level.as_deref())?;
        if used != asked {
            let reason = compression_reason(host, alg, &spec, &other);
            self.replaced.push(Replacement {
                requested: asked,
                used: used.clone(),
                reason,
            });
        }
        self.args.push(used);
        Ok(())
    }

    /// The `-z` argument for `alg` at `level`: as asked when the host has
    /// `alg`, else lz4hc at its highest level (or lz4), noted in `swapped`.
    fn compressor(&mut self, alg: &str, level: Option<&str>) -> Result<String> {
        let (requested, host) = (self.requested, self.host);
        let level_syntax = host.at_least((1, 8));
        Ok(if host.has(alg) {
            let mut u = format!("-z{alg}");
            if let Some(l) = level {
                u.push_str(&if level_syntax {
                    format!(",level={l}")
                } else {
                    format!(",{l}")
                });
            }
            u
        } else if host.has("lz4hc") {
            self.swapped = Some(alg.to_string());
            format!("-zlz4hc,{LZ4HC_MAX}")
        } else if host.has("lz4") {
            self.swapped = Some(alg.to_string());
            "-zlz4".to_string()
        } else {
            bail!("{SRC} '{requested}' asks for {alg} compression and this host's {} has no compressor at all; install an {PACKAGE} built with lz4", host.describe());
        })
    }

    /// `-Eopt,opt=value,...`: the options this host's release knows are
    /// kept, later ones left out, unknown ones refused.
    fn extended(&mut self, list: String) -> Result<()> {
        let (requested, host) = (self.requested, self.host);
        let mut kept = Vec::new();
        for opt in list.split(',').filter(|s| !s.is_empty()) {
            let (name, value) = match opt.trim_start_matches('^').split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (opt.trim_start_matches('^'), None),
            };
            check_extended_value(requested, opt, name, value)?;
            if EXTENDED_1_5.contains(&name) {
                kept.push(opt.to_string());
            } else if let Some((_, since)) = EXTENDED_LATER.iter().find(|(n, _)| *n == name) {
                if host.at_least3(*since) {
                    kept.push(opt.to_string());
                } else {
                    let added = release_str(*since);
                    self.replaced.push(Replacement {
                        requested: format!("-E{opt}"),
                        used: String::new(),
                        reason: format!("added in erofs-utils {added}; this host's {MKFS} is {} (and would refuse or ignore it)", host.release()),
                    });
                }
            } else {
                bail!("{SRC} '{requested}' has the EROFS extended option -E{opt}, which no mkfs.erofs knows; fix the OS's image.json");
            }
        }
        if !kept.is_empty() {
            self.args.push(format!("-E{}", kept.join(",")));
        }
        Ok(())
    }

    /// `--name[=value]`: kept when erofs-utils 1.5 knows it, left out when
    /// it only tunes the build, refused otherwise.
    fn long(&mut self, w: &str) -> Result<()> {
        let (requested, host) = (self.requested, self.host);
        let name = w.split('=').next().unwrap_or(w);
        if LONG_1_5.contains(&name) {
            self.args.push(w.to_string());
        } else if LONG_LATER_TUNING.contains(&name) {
            self.replaced.push(Replacement {
                requested: w.to_string(),
                used: String::new(),
                reason: format!(
                    "unknown to this host's {MKFS} {}.{}; it tunes the build only",
                    host.version.0, host.version.1
                ),
            });
        } else {
            bail!("{SRC} '{requested}' has the option {name}, which this host's {} does not know; fix the OS's image.json or use a newer {PACKAGE}", host.describe());
        }
        Ok(())
    }

    /// Physical cluster sizes are picked for the algorithm asked for (RHCOS:
    /// 1 MiB for lzma). With lz4hc in its place, erofs-utils 1.5 spends an
    /// order of magnitude longer on big clusters for a few percent (measured
    /// on the test OS tree, 36 MiB: 90 s and 22.7 MB with -C1048576, 10 s and
    /// 24.0 MB without), which would take hours on a real OS: left out.
    fn drop_cluster_sizes(&mut self) {
        let host = self.host;
        if let Some(alg) = self.swapped.take() {
            let mut kept = Vec::new();
            for a in std::mem::take(&mut self.args) {
                if a.starts_with("-C") {
                    self.replaced.push(Replacement {
                        requested: a,
                        used: String::new(),
                        reason: format!("a cluster size chosen for {alg}; with lz4hc, {MKFS} {}.{} takes about 9 times longer on 1 MiB clusters for about 5% less size (measured on the test OS), too slow for a real OS", host.version.0, host.version.1),
                    });
                } else {
                    kept.push(a);
                }
            }
            self.args = kept;
        }
    }
}

/// Why the `-z` option asked for is not the one used.
fn compression_reason(host: &Host, alg: &str, spec: &str, other: &[String]) -> String {
    if !host.has(alg) {
        format!("this host's {} has no {alg}; lz4hc at its highest level is the closest it has (a larger image, faster to read)", host.describe())
    } else if spec.contains(':') {
        format!(
            "{MKFS} {}.{} takes one algorithm",
            host.version.0, host.version.1
        )
    } else if !other.is_empty() {
        format!(
            "{MKFS} {}.{} has no {alg} parameter {}",
            host.version.0,
            host.version.1,
            other.join(",")
        )
    } else {
        format!(
            "{MKFS} {}.{} writes the level as ',N' (it reads ',level=N' as level 0)",
            host.version.0, host.version.1
        )
    }
}

/// A value on an `-E` option: one `name` takes (`fragdedupe=inode`), or
/// none at all.
fn check_extended_value(requested: &str, opt: &str, name: &str, value: Option<&str>) -> Result<()> {
    if let (Some(v), Some((_, ok))) = (value, EXTENDED_VALUES.iter().find(|(n, _)| *n == name)) {
        if !ok.contains(&v) {
            bail!("{SRC} '{requested}' has -E{opt}, and {name} takes one of {} in mkfs.erofs; fix the OS's image.json", ok.join(", "));
        }
    } else if value.is_some() {
        bail!("{SRC} '{requested}' has -E{opt}, and no mkfs.erofs option {name} takes a value; fix the OS's image.json");
    }
    Ok(())
}

/// The options added (unless given) so that the same tree gives the same
/// bytes: the timestamp, the UUID, and `--quiet`.
fn reproducible(args: &[String], mtime: i64, uuid: &str) -> Vec<String> {
    let mut added = Vec::new();
    if !args.iter().any(|a| a.starts_with("-T")) {
        added.push(format!("-T{}", mtime.max(0)));
    }
    if !args.iter().any(|a| a.starts_with("-U")) {
        added.push(format!("-U{uuid}"));
    }
    if !args.iter().any(|a| a == "--quiet") {
        added.push("--quiet".to_string());
    }
    added
}

/// A UUID (RFC 4122 form) derived from `seed`: the same OS gives the same
/// filesystem UUID.
pub fn uuid_from(seed: &str) -> String {
    let h = crate::util::sha256_hex(seed.as_bytes());
    format!(
        "{}-{}-4{}-a{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

/// Make the EROFS image of `src` (the deployed metal root) at `dst`.
pub fn make_erofs(src: &Path, dst: &Path, opts: &Options) -> Result<()> {
    let mut c = crate::util::cmd::new(MKFS, &opts.args);
    c.arg(dst).arg(src);
    // As osbuild: temporary files on disk, not in a memory-backed /tmp.
    if let Some(dir) = dst.parent() {
        c.env("TMPDIR", dir);
    }
    crate::util::cmd::run(&mut c)
        .with_context(|| format!("making the EROFS image of {}", src.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests;
