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

/// Compression algorithms some erofs-utils release knows (erofs-utils
/// `lib/compressor.c`): any other name is a mistake in the OS's options.
pub const KNOWN_ALGORITHMS: &[&str] = &["lz4", "lz4hc", "lzma", "deflate", "libdeflate", "zstd"];
/// `-E` options of erofs-utils 1.5 (`mkfs/main.c` `parse_extended_opts`).
const EXTENDED_1_5: &[&str] = &[
    "legacy-compress",
    "force-inode-compact",
    "force-inode-extended",
    "force-inode-blockmap",
    "force-chunk-indexes",
    "nosbcrc",
    "noinline_data",
    "ztailpacking",
];
/// `-E` options added later, with the release that added them.
const EXTENDED_LATER: &[(&str, (u32, u32, u32))] = &[
    ("fragments", (1, 6, 0)),
    ("dedupe", (1, 6, 0)),
    ("all-fragments", (1, 7, 0)),
    ("xattr-name-filter", (1, 7, 0)),
    // `-Efragdedupe=inode|full` (erofs-utils commit 06875b3, "mkfs: support
    // `-Efragdedupe=inode`", first released in 1.8.5; RHCOS 10.1 asked for
    // it from 2025-04 to 2025-11, rhel-coreos-config image-rhel-10.1.yaml).
    ("fragdedupe", (1, 8, 5)),
    ("48bit", (1, 9, 0)),
];
/// An erofs-utils release as its changelog names it: `1.8.5`, or `1.5`
/// for a `.0`.
fn release_str((major, minor, patch): (u32, u32, u32)) -> String {
    if patch > 0 {
        format!("{major}.{minor}.{patch}")
    } else {
        format!("{major}.{minor}")
    }
}
/// Values an extended option takes (`fragdedupe=`, erofs-utils mkfs/main.c).
const EXTENDED_VALUES: &[(&str, &[&str])] = &[("fragdedupe", &["off", "inode", "full"])];
/// Options of erofs-utils 1.5 taking their value in the same word
/// (`-C1048576`) or after `=`, kept as they are.
const SHORT_1_5: &[&str] = &["-C", "-T", "-U", "-x", "-d"];
const LONG_1_5: &[&str] = &[
    "--quiet",
    "--all-root",
    "--ignore-mtime",
    "--preserve-mtime",
    "--force-uid",
    "--force-gid",
    "--max-extent-bytes",
    "--chunksize",
    "--exclude-path",
    "--exclude-regex",
    "--compress-hints",
    "--file-contexts",
    "--blobdev",
];
/// Long options of later releases that only tune the build (threads,
/// progress) and can be left out without changing the image's contents.
const LONG_LATER_TUNING: &[&str] = &["--workers", "--zfeature-bits", "--sort", "--mkfs-time"];

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

/// Map the OS's options onto this host's `mkfs.erofs`. `mtime` and `uuid`
/// are added (unless given) so the image does not depend on the clock.
pub fn map_options(requested: &str, host: &Host, mtime: i64, uuid: &str) -> Result<Options> {
    let src = "image.json live-rootfs-fsoptions";
    let mut args: Vec<String> = Vec::new();
    let mut replaced = Vec::new();
    let words: Vec<&str> = requested.split_whitespace().collect();
    let mut i = 0;
    let next_value = |i: &mut usize, opt: &str| -> Result<String> {
        *i += 1;
        words
            .get(*i)
            .map(|s| s.to_string())
            .with_context(|| format!("{src} '{requested}': {opt} needs a value"))
    };
    let level_syntax = host.at_least((1, 8));
    // The algorithm asked for, when the host lacks it.
    let mut swapped: Option<String> = None;
    while i < words.len() {
        let w = words[i];
        if let Some(spec) = w.strip_prefix("-z") {
            let spec = if spec.is_empty() {
                next_value(&mut i, "-z")?
            } else {
                spec.to_string()
            };
            let asked = format!("-z{spec}");
            // Several algorithms (`-zlz4hc:lzma`) are a later feature: use the first.
            let first = spec.split(':').next().unwrap_or("");
            for alg in spec.split(':') {
                let name = alg.split(',').next().unwrap_or("");
                if !KNOWN_ALGORITHMS.contains(&name) {
                    bail!("{src} '{requested}' asks for the EROFS compression algorithm '{name}', which no mkfs.erofs knows ({}); fix the OS's image.json", KNOWN_ALGORITHMS.join(", "));
                }
            }
            let mut parts = first.split(',');
            let alg = parts.next().unwrap_or("");
            let params: Vec<&str> = parts.collect();
            let (level, other) = level_of(&params);
            let used = if host.has(alg) {
                let mut u = format!("-z{alg}");
                if let Some(l) = &level {
                    u.push_str(&if level_syntax {
                        format!(",level={l}")
                    } else {
                        format!(",{l}")
                    });
                }
                u
            } else if host.has("lz4hc") {
                swapped = Some(alg.to_string());
                format!("-zlz4hc,{LZ4HC_MAX}")
            } else if host.has("lz4") {
                swapped = Some(alg.to_string());
                "-zlz4".to_string()
            } else {
                bail!("{src} '{requested}' asks for {alg} compression and this host's {} has no compressor at all; install an {PACKAGE} built with lz4", host.describe());
            };
            if used != asked {
                let reason = if !host.has(alg) {
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
                };
                replaced.push(Replacement {
                    requested: asked,
                    used: used.clone(),
                    reason,
                });
            }
            args.push(used);
        } else if let Some(list) = w.strip_prefix("-E") {
            let list = if list.is_empty() {
                next_value(&mut i, "-E")?
            } else {
                list.to_string()
            };
            let mut kept = Vec::new();
            for opt in list.split(',').filter(|s| !s.is_empty()) {
                let (name, value) = match opt.trim_start_matches('^').split_once('=') {
                    Some((n, v)) => (n, Some(v)),
                    None => (opt.trim_start_matches('^'), None),
                };
                if let (Some(v), Some((_, ok))) =
                    (value, EXTENDED_VALUES.iter().find(|(n, _)| *n == name))
                {
                    if !ok.contains(&v) {
                        bail!("{src} '{requested}' has -E{opt}, and {name} takes one of {} in mkfs.erofs; fix the OS's image.json", ok.join(", "));
                    }
                } else if value.is_some() {
                    bail!("{src} '{requested}' has -E{opt}, and no mkfs.erofs option {name} takes a value; fix the OS's image.json");
                }
                if EXTENDED_1_5.contains(&name) {
                    kept.push(opt.to_string());
                } else if let Some((_, since)) = EXTENDED_LATER.iter().find(|(n, _)| *n == name) {
                    if host.at_least3(*since) {
                        kept.push(opt.to_string());
                    } else {
                        let added = release_str(*since);
                        replaced.push(Replacement {
                            requested: format!("-E{opt}"),
                            used: String::new(),
                            reason: format!("added in erofs-utils {added}; this host's {MKFS} is {} (and would refuse or ignore it)", host.release()),
                        });
                    }
                } else {
                    bail!("{src} '{requested}' has the EROFS extended option -E{opt}, which no mkfs.erofs knows; fix the OS's image.json");
                }
            }
            if !kept.is_empty() {
                args.push(format!("-E{}", kept.join(",")));
            }
        } else if let Some(short) = SHORT_1_5.iter().find(|s| w.starts_with(**s)) {
            if w.len() == short.len() {
                let v = next_value(&mut i, short)?;
                args.push(format!("{short}{v}"));
            } else {
                args.push(w.to_string());
            }
        } else if w.starts_with("--") {
            let name = w.split('=').next().unwrap_or(w);
            if LONG_1_5.contains(&name) {
                args.push(w.to_string());
            } else if LONG_LATER_TUNING.contains(&name) {
                replaced.push(Replacement {
                    requested: w.to_string(),
                    used: String::new(),
                    reason: format!(
                        "unknown to this host's {MKFS} {}.{}; it tunes the build only",
                        host.version.0, host.version.1
                    ),
                });
            } else {
                bail!("{src} '{requested}' has the option {name}, which this host's {} does not know; fix the OS's image.json or use a newer {PACKAGE}", host.describe());
            }
        } else {
            bail!("{src} '{requested}': '{w}' is not a {MKFS} option");
        }
        i += 1;
    }
    // Physical cluster sizes are picked for the algorithm asked for (RHCOS:
    // 1 MiB for lzma). With lz4hc in its place, erofs-utils 1.5 spends an
    // order of magnitude longer on big clusters for a few percent (measured
    // on the test OS tree, 36 MiB: 90 s and 22.7 MB with -C1048576, 10 s and
    // 24.0 MB without), which would take hours on a real OS: left out.
    if let Some(alg) = swapped {
        let mut kept = Vec::new();
        for a in std::mem::take(&mut args) {
            if a.starts_with("-C") {
                replaced.push(Replacement {
                    requested: a,
                    used: String::new(),
                    reason: format!("a cluster size chosen for {alg}; with lz4hc, {MKFS} {}.{} takes about 9 times longer on 1 MiB clusters for about 5% less size (measured on the test OS), too slow for a real OS", host.version.0, host.version.1),
                });
            } else {
                kept.push(a);
            }
        }
        args = kept;
    }
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
    args.extend(added.iter().cloned());
    Ok(Options {
        requested: requested.to_string(),
        args,
        replaced,
        added,
        host: host.clone(),
    })
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
mod tests {
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
}
