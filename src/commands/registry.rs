//! `push` and `pull`: generate outputs into and out of a registry.
use crate::cli::{PullArgs, PushArgs, RegistryArgs};
use crate::image::imageref::DockerRef;
use crate::publish::registry::{client, pull as pl, push as ps};
use crate::trust::{provenance, sigstore};
use anyhow::Result;
use std::sync::Mutex;
use std::time::Instant;

/// A push or pull REF (`docker://` accepted).
pub fn reference(s: &str) -> Result<DockerRef> {
    DockerRef::parse(s.strip_prefix("docker://").unwrap_or(s))
}

fn options(a: &RegistryArgs, chunk: u64) -> client::Options {
    client::Options {
        authfile: a.authfile.clone(),
        insecure: a.insecure,
        ca_file: a.ca_file.clone(),
        ca_dir: a.cert_dir.clone(),
        chunk,
    }
}

/// A progress line per file every few seconds, and one when it is done.
struct Progress {
    start: Instant,
    last: Mutex<(String, Instant)>,
}

impl Progress {
    fn new() -> Self {
        Progress {
            start: Instant::now(),
            last: Mutex::new((String::new(), Instant::now())),
        }
    }
    fn report(&self, verb: &str, name: &str, done: u64, total: u64) {
        let mut l = self.last.lock().unwrap();
        let now = Instant::now();
        let new_file = l.0 != name;
        if new_file || done == total || now.duration_since(l.1).as_secs() >= 5 {
            if new_file && done < total {
                crate::util::ui::status(format!("{verb} {name} ({} MiB)", total >> 20));
            } else if done == total {
                crate::util::ui::status(format!("{verb} {name}: done ({} MiB)", total >> 20));
            } else {
                crate::util::ui::status(format!(
                    "{verb} {name}: {} of {} MiB",
                    done >> 20,
                    total >> 20
                ));
            }
            *l = (name.to_string(), now);
        }
    }
}

pub fn push(a: PushArgs) -> Result<()> {
    crate::util::cancel::install()?;
    if a.chunk_mib == 0 {
        anyhow::bail!("--chunk-mib must be at least 1");
    }
    // The key is read (and its password checked) before anything is sent.
    let key = signing_key(a.sign_key.as_deref())?;
    let t = PushTarget::connect(&a.reference, &options(&a.registry, a.chunk_mib << 20))?;
    t.push(&a.dir, a.stream.as_deref(), key.as_ref())
}

/// A cosign private key from FILE, its password from COSIGN_PASSWORD (as
/// cosign reads it; empty when unset).
pub fn signing_key(path: Option<&std::path::Path>) -> Result<Option<sigstore::SigningKey>> {
    let Some(p) = path else { return Ok(None) };
    let pem = std::fs::read(p)
        .map_err(|e| anyhow::anyhow!("--sign-key {}: cannot read it: {e}", p.display()))?;
    let password = std::env::var("COSIGN_PASSWORD").unwrap_or_default();
    sigstore::SigningKey::from_cosign_pem(&pem, password.as_bytes(), &p.display().to_string())
        .map(Some)
}

/// A reference to push to and the registry reached: checked before a
/// build (`generate --push`), so a wrong host, tag or credential fails in
/// seconds rather than after the build.
pub struct PushTarget {
    r: DockerRef,
    c: client::Client,
}

/// A push REF parsed, with its tag (a digest or a bare repository is
/// refused).
pub fn push_reference(reference_text: &str) -> Result<(DockerRef, String)> {
    let r = reference(reference_text)?;
    let tag = ps::tag_of(&r)?;
    Ok((r, tag))
}

impl PushTarget {
    pub fn connect(reference_text: &str, o: &client::Options) -> Result<Self> {
        let (r, _) = push_reference(reference_text)?;
        let c = client::Client::connect(&r, o)?;
        Ok(PushTarget { r, c })
    }

    /// Push `dir` (a generate output) and say what went where; with `key`,
    /// sign the index and what it lists and attest the provenance.
    pub fn push(
        &self,
        dir: &std::path::Path,
        stream: Option<&str>,
        key: Option<&sigstore::SigningKey>,
    ) -> Result<()> {
        let (r, c) = (&self.r, &self.c);
        let p = Progress::new();
        let s = ps::push(c, r, dir, stream, &|n, d, t| p.report("push", n, d, t))?;
        crate::util::ui::status(format!(
            "pushed {} artifacts in {:.1?}: {} MiB sent, {} MiB the registry had",
            s.artifacts,
            p.start.elapsed(),
            s.uploaded >> 20,
            s.existed >> 20
        ));
        for i in &s.images {
            crate::util::ui::status(format!("image: {i}"));
        }
        if let Some(k) = key {
            self.sign(dir, stream, &s, k).map_err(|e| {
                e.context(format!(
                    "{}/{}@{} is pushed but not signed: run the push again with --sign-key",
                    r.registry, r.repository, s.index_digest
                ))
            })?;
        }
        println!(
            "{}/{}:{}@{} ({} entries)",
            r.registry,
            r.repository,
            r.tag.as_deref().unwrap_or(""),
            s.index_digest,
            s.index_entries
        );
        Ok(())
    }
}

impl PushTarget {
    /// Sign the index written, this push's own entries and the images in
    /// its OCI archives (cosign's `.sig` scheme; other runs' entries in a
    /// shared index are signed by those runs, and the index pins them by
    /// digest), and attach the provenance of its builds to the index
    /// (`.att`): every artifact and its sha256, and the index, as subjects.
    fn sign(
        &self,
        dir: &std::path::Path,
        stream: Option<&str>,
        s: &ps::Summary,
        key: &sigstore::SigningKey,
    ) -> Result<()> {
        let (r, c) = (&self.r, &self.c);
        let repo = format!("{}/{}", r.registry, r.repository);
        let mut digests = vec![s.index_digest.clone()];
        for d in s.entry_digests.iter().chain(&s.image_digests) {
            if !digests.contains(d) {
                digests.push(d.clone());
            }
        }
        for d in &digests {
            sigstore::sign_image(c, &repo, d, key)?;
        }
        let metas: Vec<serde_json::Value> = ps::runs(dir, stream)?
            .into_iter()
            .map(|run| run.meta)
            .collect();
        let mut statement = provenance::statement(&metas.iter().collect::<Vec<_>>())?;
        if let Some(subjects) = statement["subject"].as_array_mut() {
            subjects.insert(
                0,
                serde_json::json!({
                    "name": format!("{repo}:{}", r.tag.as_deref().unwrap_or("")),
                    "digest": {"sha256": s.index_digest.trim_start_matches("sha256:")}
                }),
            );
        }
        sigstore::attest_image(c, &s.index_digest, &statement, key)?;
        crate::util::ui::status(format!(
            "signed the index and {} manifests of this push with key {} (cosign verify --key), and attached its SLSA provenance (cosign verify-attestation --type slsaprovenance1)",
            digests.len() - 1,
            key.public().id()
        ));
        Ok(())
    }
}

/// `generate --push REF`: the release's own registry flags reach the
/// mirror too (`--registry-config`, `--insecure`, `--cert-dir`).
pub fn generate_target(reference_text: &str, input: &crate::cli::InputArgs) -> Result<PushTarget> {
    let o = client::Options {
        authfile: input.registry_config.clone(),
        insecure: input.insecure,
        ca_file: None,
        ca_dir: input.cert_dir.clone(),
        chunk: client::DEFAULT_CHUNK,
    };
    PushTarget::connect(reference_text, &o)
        .map_err(|e| e.context(format!("--push {reference_text}")))
}

pub fn pull(a: PullArgs) -> Result<()> {
    crate::util::cancel::install()?;
    let r = reference(&a.reference)?;
    let arch = a
        .arch
        .as_deref()
        .map(crate::util::arch::parse_known)
        .transpose()?;
    let c = client::Client::connect(&r, &options(&a.registry, 0))?;
    // Verified, the index is pulled by its digest: the tag cannot move
    // between the check and the pull.
    let r = match verify_pull(&c, &r, &a.sigstore_key)? {
        Some(d) => r.with_digest(&d),
        None => r,
    };
    let p = Progress::new();
    let sel = pl::Selection {
        arch,
        stream: a.stream.clone(),
        platforms: a.platforms.clone(),
    };
    let got = pl::pull(
        &c,
        &r,
        &a.output,
        &sel,
        a.base_url.as_deref(),
        &|n, d, t| p.report("pull", n, d, t),
    )?;
    for (dir, files) in &got.dirs {
        crate::util::ui::status(format!(
            "{}: {} files, meta.json, stream.json, SHA256SUMS",
            dir.display(),
            files.len()
        ));
    }
    if let Some(m) = &got.merged {
        crate::util::ui::status(format!(
            "{}: every arch and stream pulled, in one document",
            m.display()
        ));
    }
    crate::util::ui::status(format!(
        "pulled {} MiB in {:.1?}",
        got.bytes >> 20,
        p.start.elapsed()
    ));
    Ok(())
}

/// `pull --sigstore-key`: the index (by the tag's digest, or the digest
/// given) must carry a cosign signature by one of the keys; checked
/// before anything is written. The index pins what it lists by digest.
fn verify_pull(
    c: &client::Client,
    r: &DockerRef,
    keys: &[std::path::PathBuf],
) -> Result<Option<String>> {
    if keys.is_empty() {
        return Ok(None);
    }
    let mut k = Vec::new();
    for p in keys {
        let pem = std::fs::read(p)
            .map_err(|e| anyhow::anyhow!("--sigstore-key {}: cannot read it: {e}", p.display()))?;
        k.push(sigstore::PublicKey::from_pem(
            &pem,
            &p.display().to_string(),
        )?);
    }
    let reference = r
        .digest
        .clone()
        .or_else(|| r.tag.clone())
        .unwrap_or_default();
    let m = c.get_manifest(&reference)?.ok_or_else(|| {
        anyhow::anyhow!("{}/{}:{reference}: no such index", r.registry, r.repository)
    })?;
    match sigstore::verify_image(c, &m.digest, &k)? {
        // The signature names the repository it was made for: one made
        // for another repository does not vouch for this one.
        Some(v)
            if v
                .docker_reference
                .as_deref()
                .is_some_and(|d| d != format!("{}/{}", r.registry, r.repository)) =>
        {
            anyhow::bail!(
                "{}/{}@{}: its cosign signature (key {}) was made for {}, not this repository; nothing was pulled",
                r.registry,
                r.repository,
                m.digest,
                v.key_id,
                v.docker_reference.as_deref().unwrap_or_default()
            )
        }
        Some(v) => {
            crate::util::ui::status(format!(
                "{}/{}@{}: signature verified (key {}, {})",
                r.registry, r.repository, m.digest, v.key_id, v.found
            ));
            Ok(Some(m.digest))
        }
        None => anyhow::bail!(
            "{}/{}@{}: no cosign signature; nothing was pulled (push it with --sign-key, or pull without --sigstore-key)",
            r.registry,
            r.repository,
            m.digest
        ),
    }
}
