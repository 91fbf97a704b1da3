//! `stream merge`: several runs' stream documents into one (runs split
//! by arch, by stream, or by platform group of one build).
use crate::cli::StreamMergeArgs;
use crate::publish::merge::{self, Doc};
use crate::publish::stream::{STREAMS_JSON, STREAM_JSON};
use crate::util::arch::Arch;
use anyhow::{bail, Result};
use std::path::{Path, PathBuf};

/// A merge input given as a directory: its stream.json, else its
/// streams.json.
fn document(p: &Path) -> Result<PathBuf> {
    if !p.is_dir() {
        return Ok(p.to_path_buf());
    }
    for name in [STREAM_JSON, STREAMS_JSON] {
        let f = p.join(name);
        if f.is_file() {
            return Ok(f);
        }
    }
    bail!(
        "{}: no {STREAM_JSON} or {} (is it a generate output directory?)",
        p.display(),
        STREAMS_JSON
    )
}

/// Two inputs of one arch from two builds (the OS commits of the
/// meta.json beside their stream.json differ) are refused naming both:
/// runs split by platform merge only when they are one build. (A stream
/// document records the OS version, not the commit.)
fn one_build_per_arch(inputs: &[merge::Input]) -> Result<()> {
    let mut seen: std::collections::BTreeMap<Arch, (String, &Path)> = Default::default();
    for i in inputs {
        if !matches!(i.doc, Doc::One(_)) {
            continue;
        }
        let Some(dir) = i.path.parent() else { continue };
        let Ok(b) = std::fs::read(dir.join(crate::publish::meta::META_JSON)) else {
            continue;
        };
        let Ok(m) = serde_json::from_slice::<serde_json::Value>(&b) else {
            continue;
        };
        let (Some(arch), Some(commit)) = (
            (m["coreos-assembler.basearch"].as_str()).and_then(|a| Arch::parse(a).ok()),
            m["ostree-commit"].as_str(),
        ) else {
            continue;
        };
        match seen.get(&arch) {
            Some((c0, p0)) if c0 != commit => bail!(
                "arch {arch} is in both {} (ostree commit {c0}) and {} (ostree commit {commit}): two builds; a stream holds one build per arch",
                p0.display(),
                i.path.display()
            ),
            Some(_) => {}
            None => {
                seen.insert(arch, (commit.to_string(), &i.path));
            }
        }
    }
    Ok(())
}

pub fn merge(a: StreamMergeArgs) -> Result<()> {
    let inputs = a
        .inputs
        .iter()
        .map(|p| merge::read(&document(p)?))
        .collect::<Result<Vec<_>>>()?;
    one_build_per_arch(&inputs)?;
    let keyed = matches!(inputs.first().map(|i| &i.doc), Some(Doc::Keyed(_)));
    // -o: a .json file, or a directory that gets the document's usual name.
    let (dir, name) = if a.output.extension().is_some_and(|x| x == "json") {
        let name = a.output.file_name().unwrap().to_string_lossy().into_owned();
        let dir = a.output.parent().filter(|d| !d.as_os_str().is_empty());
        (dir.unwrap_or(Path::new(".")).to_path_buf(), name)
    } else {
        let name = if keyed { STREAMS_JSON } else { STREAM_JSON };
        (a.output.clone(), name.to_string())
    };
    let doc = merge::merge(&inputs, &dir, a.base_url.as_deref(), a.stream.as_deref())?;
    let arches = |s: &crate::publish::stream::Stream| {
        Arch::join(&s.architectures.keys().copied().collect::<Vec<_>>())
    };
    let (mut data, said) = match &doc {
        Doc::One(s) => (
            serde_json::to_vec_pretty(s)?,
            format!("stream {}: {}", s.stream, arches(s)),
        ),
        Doc::Keyed(m) => (
            serde_json::to_vec_pretty(m)?,
            m.iter()
                .map(|(k, s)| format!("{}: {}", if k.is_empty() { "\"\"" } else { k }, arches(s)))
                .collect::<Vec<_>>()
                .join("; "),
        ),
    };
    data.push(b'\n');
    std::fs::create_dir_all(&dir)
        .map_err(|e| anyhow::anyhow!("creating {}: {e}", dir.display()))?;
    crate::publish::meta::write_atomic(&dir, &name, &data)?;
    crate::util::ui::status(format!(
        "merged {} documents into {} ({said})",
        inputs.len(),
        dir.join(&name).display()
    ));
    Ok(())
}
