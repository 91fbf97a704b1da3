//! `push` and `pull`: generate outputs into and out of a registry.
use crate::cli::{PullArgs, PushArgs, RegistryArgs};
use crate::image::imageref::DockerRef;
use crate::publish::registry::{client, pull as pl, push as ps};
use anyhow::Result;
use std::sync::Mutex;
use std::time::Instant;

fn reference(s: &str) -> Result<DockerRef> {
    DockerRef::parse(s.strip_prefix("docker://").unwrap_or(s))
}

fn options(a: &RegistryArgs, chunk: u64) -> client::Options {
    client::Options {
        authfile: a.authfile.clone(),
        insecure: a.insecure,
        ca_file: a.ca_file.clone(),
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
    let r = reference(&a.reference)?;
    if a.chunk_mib == 0 {
        anyhow::bail!("--chunk-mib must be at least 1");
    }
    let c = client::Client::connect(&r, &options(&a.registry, a.chunk_mib << 20))?;
    let p = Progress::new();
    let s = ps::push(&c, &r, &a.dir, a.stream.as_deref(), &|n, d, t| {
        p.report("push", n, d, t)
    })?;
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
    crate::util::ui::status(format!(
        "pulled {} MiB in {:.1?}",
        got.bytes >> 20,
        p.start.elapsed()
    ));
    Ok(())
}
