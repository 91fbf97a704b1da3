//! `verify`: rebuild a `generate` output from what it records and compare
//! every file byte for byte (docs/contract.md §9). The rebuild's flags are
//! read from the output itself: the release, arch and platforms from
//! meta.json, the compression from the disk files' names, the base URL
//! from stream.json's locations; the caller adds the rest after `--`.
use crate::cli::VerifyArgs;
use crate::publish::meta::{sha256_file, META_JSON, SHA256SUMS};
use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// How `verify` ended when not all matched: the exit status (1: differs,
/// 2: no rebuild) and what to say.
#[derive(Debug)]
pub struct Verdict {
    pub code: i32,
    pub message: String,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Verdict {}

fn verdict(code: i32, message: String) -> anyhow::Error {
    anyhow::Error::new(Verdict { code, message })
}

pub fn run(a: VerifyArgs) -> Result<()> {
    let (argv, recorded) = match rebuild_command(&a) {
        Ok(x) => x,
        Err(e) => {
            return Err(verdict(
                2,
                format!("cannot rebuild {}: {e:#}", a.dir.display()),
            ))
        }
    };
    let out = argv_output(&argv);
    crate::util::ui::status(format!("verify: bootimage-gen {}", argv[1..].join(" ")));
    let cli = <crate::cli::Cli as clap::Parser>::try_parse_from(&argv)
        .map_err(|e| verdict(2, format!("the rebuild's command line: {e}")))?;
    if let Err(e) = super::run(cli) {
        if e.downcast_ref::<super::Interrupted>().is_some() {
            return Err(e);
        }
        return Err(verdict(
            2,
            format!(
                "could not rebuild {} (kept in {}): {e:#}",
                a.dir.display(),
                out.display()
            ),
        ));
    }
    let rebuilt = read_json(&out.join(META_JSON))?;
    let digest = |m: &Value| {
        m["release-payload"]["digest"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    if digest(&rebuilt) != digest(&recorded) {
        return Err(verdict(
            2,
            format!(
                "the rebuild is of another release ({}) than {} was built from ({}): give that release",
                digest(&rebuilt),
                a.dir.display(),
                digest(&recorded)
            ),
        ));
    }
    let report = compare(&a.dir, &out)?;
    for (name, why) in &report.differ {
        println!("DIFFERS  {name}: {why}");
    }
    for name in &report.same {
        println!("same     {name}");
    }
    if report.differ.is_empty() {
        if a.rebuild_dir.is_none() {
            std::fs::remove_dir_all(&out)
                .with_context(|| format!("removing the rebuild {}", out.display()))?;
        }
        crate::util::ui::status(format!(
            "verify: all {} files of {} match the rebuild byte for byte",
            report.same.len(),
            a.dir.display()
        ));
        return Ok(());
    }
    Err(verdict(
        1,
        format!(
            "{} of {} files of {} differ from the rebuild (kept in {}): {}",
            report.differ.len(),
            report.differ.len() + report.same.len(),
            a.dir.display(),
            out.display(),
            report
                .differ
                .iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    ))
}

fn read_json(p: &Path) -> Result<Value> {
    let b = std::fs::read(p).with_context(|| format!("reading {}", p.display()))?;
    serde_json::from_slice(&b).with_context(|| format!("parsing {}", p.display()))
}

/// The `-o` of a command line.
fn argv_output(argv: &[String]) -> PathBuf {
    let i = argv.iter().position(|a| a == "-o").expect("-o is set");
    PathBuf::from(&argv[i + 1])
}

/// The `generate` command line that rebuilds `a.dir`, and its meta.json.
fn rebuild_command(a: &VerifyArgs) -> Result<(Vec<String>, Value)> {
    let meta = read_json(&a.dir.join(META_JSON))?;
    let release = match &a.release {
        Some(r) => r.clone(),
        None => meta["release-payload"]["image"]
            .as_str()
            .context("meta.json has no release-payload.image: give the release")?
            .to_string(),
    };
    let images = meta["images"]
        .as_object()
        .context("meta.json has no images")?;
    let mut platforms: Vec<String> = Vec::new();
    for key in images.keys() {
        let p = match key.as_str() {
            k if k.starts_with("live-") => "live",
            "ostree" => continue,
            k => k,
        };
        if !platforms.iter().any(|x| x == p) {
            platforms.push(p.to_string());
        }
    }
    if platforms.is_empty() {
        bail!("meta.json lists no platform image");
    }
    let out = match &a.rebuild_dir {
        Some(d) => {
            if d.exists() && std::fs::read_dir(d)?.next().is_some() {
                bail!("--rebuild-dir {} is not empty", d.display());
            }
            d.clone()
        }
        None => {
            let d = PathBuf::from(format!("{}.verify", a.dir.display()));
            if d.exists() {
                std::fs::remove_dir_all(&d)
                    .with_context(|| format!("removing an earlier rebuild {}", d.display()))?;
            }
            d
        }
    };
    let mut argv: Vec<String> = vec!["bootimage-gen".into(), "generate".into(), release];
    argv.extend(platforms);
    argv.extend(["-o".to_string(), out.display().to_string()]);
    if let Some(arch) = meta["coreos-assembler.basearch"].as_str() {
        argv.extend(["--arch".to_string(), arch.to_string()]);
    }
    if !images.contains_key("ostree") {
        argv.push("--no-ostree-archive".into());
    }
    if let Some(c) = compression(images) {
        argv.extend(["--compress".to_string(), c.to_string()]);
    }
    if let Some(u) = base_url(&read_json(&a.dir.join("stream.json"))?) {
        argv.extend(["--base-url".to_string(), u]);
    }
    argv.extend(a.generate_flags.iter().cloned());
    Ok((argv, meta))
}

/// The compression of the metal and qemu files (the one `--compress`
/// sets), from their names.
fn compression(images: &serde_json::Map<String, Value>) -> Option<&'static str> {
    let path = ["metal", "qemu"]
        .iter()
        .find_map(|k| images.get(*k)?["path"].as_str())?;
    Some(match path.rsplit('.').next()? {
        "gz" => "gzip",
        "xz" => "xz",
        "zst" => "zstd",
        _ => "none",
    })
}

/// The base URL of stream.json's locations, when they are URLs.
fn base_url(stream: &Value) -> Option<String> {
    fn first(v: &Value) -> Option<String> {
        match v {
            Value::Object(m) => m.iter().find_map(|(k, x)| match (k.as_str(), x) {
                ("location", Value::String(s)) if s.contains("://") => Some(s.clone()),
                _ => first(x),
            }),
            Value::Array(a) => a.iter().find_map(first),
            _ => None,
        }
    }
    let loc = first(stream)?;
    Some(loc.rsplit_once('/')?.0.to_string())
}

/// What matched and what differed.
#[derive(Default)]
pub(super) struct Report {
    pub(super) same: Vec<String>,
    pub(super) differ: Vec<(String, String)>,
}

/// Each disk image's content manifest in `meta` (image file, manifest file).
fn content_manifests(meta: &Value) -> Vec<(String, String)> {
    meta["images"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(_, v)| {
            Some((
                v["path"].as_str()?.to_string(),
                v["content-manifest"]["path"].as_str()?.to_string(),
            ))
        })
        .collect()
}

/// What the content manifests of `dir` and `rebuilt` say of image file
/// `name`: its first differing partition and paths.
fn explain(dir: &Path, rebuilt: &Path, name: &str, listed: &[(String, String)]) -> Option<String> {
    let (_, m) = listed.iter().find(|(f, _)| f == name)?;
    let a = crate::disk::manifest::Manifest::read(&dir.join(m)).ok()?;
    let b = crate::disk::manifest::Manifest::read(&rebuilt.join(m)).ok()?;
    let key = a.images.iter().find(|(_, i)| i.file == name)?.0.clone();
    crate::disk::manifest::explain(&a, &b, &key, 5)
}

/// Every file of `dir`'s SHA256SUMS, and meta.json, stream.json and
/// SHA256SUMS themselves, against `rebuilt`'s.
fn compare(dir: &Path, rebuilt: &Path) -> Result<Report> {
    let sums = std::fs::read_to_string(dir.join(SHA256SUMS))
        .with_context(|| format!("reading {}", dir.join(SHA256SUMS).display()))?;
    let mut names: Vec<String> = sums
        .lines()
        .filter_map(|l| l.split_once("  ").map(|(_, n)| n.to_string()))
        .collect();
    let listed = content_manifests(&read_json(&dir.join(META_JSON))?);
    let extra = listed.iter().map(|(_, m)| m.as_str());
    for n in extra.chain([META_JSON, "stream.json", SHA256SUMS]) {
        if !names.iter().any(|x| x == n) {
            names.push(n.to_string());
        }
    }
    let mut r = Report {
        same: Vec::new(),
        differ: Vec::new(),
    };
    for n in names {
        let (x, y) = (dir.join(&n), rebuilt.join(&n));
        if !y.exists() {
            r.differ.push((n, "the rebuild has no such file".into()));
            continue;
        }
        let (hx, sx) = sha256_file(&x)?;
        let (hy, sy) = sha256_file(&y)?;
        if hx == hy {
            r.same.push(n);
        } else {
            let mut why = format!("sha256 {hx} ({sx} bytes), rebuilt {hy} ({sy} bytes)");
            if let Some(e) = explain(dir, rebuilt, &n, &listed) {
                why.push_str(&format!("; {e}"));
            }
            r.differ.push((n, why));
        }
    }
    Ok(r)
}
