//! Where signatures come from: files and directories the user gave (a
//! signature ConfigMap as `oc adm release mirror
//! --release-image-signature-to-dir` or oc-mirror v2 write it, a List of
//! ConfigMaps, a lookaside directory, a directory of those, a binary
//! signature) and stores (`<store>/sha256=<hex>/signature-N` over http(s)
//! or file://, N from 1 to the first miss, at most 9: library-go
//! `pkg/verify/store/sigstore/sigstore.go`, `pkg/verify/verify.go` fileStore).
//! In: paths or a store URL, the release digest. Out: [`Signature`]s, each
//! read up to one byte past the 50 KiB limit so `verify` refuses it by name.
use super::{Signature, MAX_SIGNATURE, MAX_SIGNATURES};
use anyhow::{bail, Result};
use base64::Engine;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The most we read of a ConfigMap file (Kubernetes objects stay under
/// 1.5 MiB; oc-mirror puts every release's signatures in one).
const MAX_MANIFEST: usize = 8 << 20;

/// The digest's names in stores and ConfigMaps (library-go
/// `pkg/verify/util/util.go` `DigestToKeyPrefix`: ':' becomes '=' in
/// lookaside paths and '-' in ConfigMap keys).
pub(super) struct DigestKeys {
    /// `sha256=<hex>`
    pub lookaside: String,
    /// `sha256-<hex>`: a binaryData key is ours when it starts with this.
    pub cm_prefix: String,
    /// `<hex>`
    pub hex: String,
}

pub(super) fn digest_keys(digest: &str) -> Result<DigestKeys> {
    match digest.split_once(':') {
        Some((algo, hex)) if !algo.is_empty() && !hex.is_empty() && !hex.contains(':') => {
            Ok(DigestKeys {
                lookaside: format!("{algo}={hex}"),
                cm_prefix: format!("{algo}-{hex}"),
                hex: hex.to_string(),
            })
        }
        _ => bail!("release digest {digest:?} is not of the form ALGO:HASH (sha256:<hex>): give the release by digest"),
    }
}

/// Read at most `cap + 1` bytes of `path`.
fn read_capped(path: &Path, cap: usize) -> std::io::Result<Vec<u8>> {
    let mut v = Vec::new();
    std::fs::File::open(path)?
        .take(cap as u64 + 1)
        .read_to_end(&mut v)?;
    Ok(v)
}

/// Signatures for `digest` from the given files and directories.
pub fn signatures_from_files(paths: &[PathBuf], digest: &str) -> Result<Vec<Signature>> {
    let keys = digest_keys(digest)?;
    let mut out = Vec::new();
    for p in paths {
        match std::fs::metadata(p) {
            Ok(m) if m.is_dir() => from_dir(p, &keys, &mut out)?,
            Ok(_) => from_file(p, &keys, true, &mut out)?,
            Err(e) => bail!(
                "signatures {}: {e}: give an existing file or directory",
                p.display()
            ),
        }
    }
    Ok(out)
}

fn from_dir(dir: &Path, keys: &DigestKeys, out: &mut Vec<Signature>) -> Result<()> {
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
    // The digest's own lookaside directory, or another digest's.
    if is_lookaside_name(name) {
        if name == keys.lookaside {
            lookaside(
                dir,
                |i| dir.join(format!("signature-{i}")).display().to_string(),
                out,
            )?;
        }
        return Ok(());
    }
    let rd = std::fs::read_dir(dir).map_err(|e| {
        anyhow::anyhow!(
            "signatures directory {}: {e}: make it readable",
            dir.display()
        )
    })?;
    let mut entries: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for e in entries {
        let n = e.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if e.is_dir() {
            if n == keys.lookaside {
                lookaside(
                    &e,
                    |i| e.join(format!("signature-{i}")).display().to_string(),
                    out,
                )?;
            }
            continue;
        }
        let manifest = [".json", ".yaml", ".yml"].iter().any(|x| n.ends_with(x));
        // oc-mirror's cache names raw signatures `<tag>-sha256-<hex>`.
        if manifest || n.contains(&keys.hex) {
            from_file(&e, keys, false, out)?;
        } else {
            tracing::debug!(
                "signatures: skipping {} (not a ConfigMap file nor named after the digest)",
                e.display()
            );
        }
    }
    Ok(())
}

/// `ALGO=HEX`: a lookaside directory of some digest.
fn is_lookaside_name(name: &str) -> bool {
    name.split_once('=').is_some_and(|(a, h)| {
        !a.is_empty()
            && !h.is_empty()
            && a.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            && h.bytes().all(|b| b.is_ascii_hexdigit())
    })
}

/// `signature-1`, `signature-2`, … of a lookaside directory until the first
/// missing one (at most [`MAX_SIGNATURES`]).
pub(super) fn lookaside(
    dir: &Path,
    origin: impl Fn(usize) -> String,
    out: &mut Vec<Signature>,
) -> Result<()> {
    for i in 1..=MAX_SIGNATURES {
        let f = dir.join(format!("signature-{i}"));
        match read_capped(&f, MAX_SIGNATURE) {
            Ok(bytes) => out.push(Signature {
                origin: origin(i),
                bytes,
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
            Err(e) => bail!("signature {}: {e}: make it readable", f.display()),
        }
    }
    Ok(())
}

fn from_file(
    path: &Path,
    keys: &DigestKeys,
    explicit: bool,
    out: &mut Vec<Signature>,
) -> Result<()> {
    let p = path.display();
    let bytes = read_capped(path, MAX_MANIFEST)
        .map_err(|e| anyhow::anyhow!("signatures file {p}: {e}: make it readable"))?;
    if bytes.len() > MAX_MANIFEST {
        bail!("signatures file {p} is larger than {} MiB: it is neither a signature nor a ConfigMap of signatures", MAX_MANIFEST >> 20);
    }
    if bytes.first().is_some_and(|b| b & 0x80 != 0) {
        let mut bytes = bytes;
        bytes.truncate(MAX_SIGNATURE + 1);
        out.push(Signature {
            origin: p.to_string(),
            bytes,
        });
        return Ok(());
    }
    let text_start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(0);
    if bytes[text_start..].starts_with(b"-----BEGIN PGP") {
        bail!("signatures file {p} is ASCII-armored; OpenShift reads binary signatures only: convert it with `gpg --dearmor < {p} > {p}.gpg`");
    }
    let objs = super::objects::parse(&bytes).map_err(|e| {
        anyhow::anyhow!("signatures file {p} is {e}: give a ConfigMap with binaryData keys sha256-<hex>-N, a lookaside directory or a binary signature")
    })?;
    for o in &objs {
        match o.kind() {
            "ConfigMap" => from_configmap(o, &p.to_string(), keys, out)?,
            k if k.ends_with("List") => {
                for item in o.items.iter().flatten().filter(|i| i.kind() == "ConfigMap") {
                    from_configmap(item, &p.to_string(), keys, out)?;
                }
            }
            k if explicit => bail!(
                "signatures file {p} holds a {k:?}, not a ConfigMap of signatures: give the ConfigMap `oc adm release mirror` or oc-mirror wrote"
            ),
            k => tracing::debug!("signatures: skipping {k} in {p}"),
        }
    }
    Ok(())
}

/// The ConfigMap's `binaryData` entries whose key starts with `sha256-<hex>`
/// (library-go `pkg/verify/store/configmap/configmap.go`), ordered by their
/// `-N` suffix; other digests' entries are skipped.
fn from_configmap(
    o: &super::objects::Object,
    file: &str,
    keys: &DigestKeys,
    out: &mut Vec<Signature>,
) -> Result<()> {
    let name = o.name();
    let mut ours: Vec<(&String, &serde_json::Value)> = o
        .binary_data
        .iter()
        .flatten()
        .filter(|(k, _)| k.starts_with(&keys.cm_prefix))
        .collect();
    let n = |k: &str| k.rsplit('-').next().and_then(|s| s.parse::<u64>().ok());
    ours.sort_by_key(|(k, _)| (n(k), k.to_string()));
    for (k, v) in ours {
        let Some(s) = v.as_str() else {
            bail!("signatures file {file}: ConfigMap {name} binaryData {k} is not a string: it must be base64");
        };
        let clean: String = s.chars().filter(|c| !c.is_ascii_whitespace()).collect();
        let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(clean) else {
            bail!("signatures file {file}: ConfigMap {name} binaryData {k} is not valid base64: write it again from the source");
        };
        out.push(Signature {
            origin: format!("{file}: ConfigMap {name} binaryData {k}"),
            bytes,
        });
    }
    Ok(())
}

/// Signatures for `digest` from a store (http://, https://, file://).
pub fn signatures_from_store(
    store: &str,
    digest: &str,
    agent: &ureq::Agent,
) -> Result<Vec<Signature>> {
    let keys = digest_keys(digest)?;
    let s = store.trim();
    let scheme = |p: &str| s.get(..p.len()).is_some_and(|x| x.eq_ignore_ascii_case(p));
    let mut out = Vec::new();
    if scheme("file://") {
        // As Go's url.Path: the host part, if any, is dropped.
        let rest = &s["file://".len()..];
        let Some(root) = rest.find('/').map(|i| Path::new(&rest[i..])) else {
            bail!("signature store {s} has no path: write it as file:///DIR");
        };
        if !root.is_dir() {
            bail!(
                "signature store {s} is unreachable: {} is not a directory",
                root.display()
            );
        }
        lookaside(
            &root.join(&keys.lookaside),
            |i| format!("signature-{i} from {s}"),
            &mut out,
        )?;
        return Ok(out);
    }
    if !scheme("http://") && !scheme("https://") {
        bail!("signature store {s:?} is not a URL with scheme http://, https:// or file://: fix the URL");
    }
    let base = format!("{}/{}/signature-", s.trim_end_matches('/'), keys.lookaside);
    let mut problems = Vec::new();
    for i in 1..=MAX_SIGNATURES {
        let url = format!("{base}{i}");
        let status = match agent.get(&url).call() {
            Ok(mut resp) => {
                let st = resp.status().as_u16();
                if (200..300).contains(&st) {
                    let mut b = Vec::new();
                    let read = resp
                        .body_mut()
                        .as_reader()
                        .take(MAX_SIGNATURE as u64 + 1)
                        .read_to_end(&mut b);
                    match read {
                        // An empty answer is skipped, as upstream does.
                        Ok(_) if b.is_empty() => {}
                        Ok(_) => out.push(Signature {
                            origin: format!("signature-{i} from {s}"),
                            bytes: b,
                        }),
                        Err(e) => problems.push(format!("{url}: reading the answer: {e}")),
                    }
                    continue;
                }
                st
            }
            Err(ureq::Error::StatusCode(st)) => st,
            Err(e) => {
                let cause = crate::util::http::transport(e);
                if out.is_empty() && problems.is_empty() {
                    bail!("signature store {s} is unreachable ({cause}): check the URL and the network, or give the signatures with --signatures");
                }
                problems.push(format!("{url}: {cause}"));
                break;
            }
        };
        // The first miss ends the search; another status is skipped, as upstream does.
        if status == 404 {
            break;
        }
        problems.push(format!("{url}: HTTP {status}"));
    }
    if out.is_empty() && !problems.is_empty() {
        bail!(
            "signature store {s} gave no signature for {digest}: {}",
            problems.join("; ")
        );
    }
    for p in &problems {
        tracing::warn!("signature store {s}: {p}");
    }
    Ok(out)
}
