//! `push` and `pull`: generate outputs into and out of a registry.
use crate::cli::{PullArgs, PushArgs, RegistryArgs};
use crate::image::imageref::DockerRef;
use crate::publish::registry::{client, pull as pl, push as ps};
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
    let t = PushTarget::connect(&a.reference, &options(&a.registry, a.chunk_mib << 20))?;
    t.push(&a.dir, a.stream.as_deref())
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

    /// Push `dir` (a generate output) and say what went where.
    pub fn push(&self, dir: &std::path::Path, stream: Option<&str>) -> Result<()> {
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
        .map(crate::release::parse_arch)
        .transpose()?;
    let c = client::Client::connect(&r, &options(&a.registry, 0))?;
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
