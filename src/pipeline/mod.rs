//! The pipeline, stage by stage: resolve the release and import its OS,
//! plan (the dry plan, then the executable one), check, build the base disk
//! once, then per artifact derive -> encode -> compress -> publish
//! ([`build`]), then the metadata (meta.json, SHA256SUMS, stream.json).
//! Each stage is a function with typed inputs; `commands::generate` only
//! turns flags into [`Settings`] and calls [`run`].
mod archive;
mod base;
mod build;
mod contents;
mod deploy;
mod live;
pub mod load;
mod planning;
mod publish;
mod staging;

use crate::backend::{self, job::DiskJob};
use crate::plan::settings::Settings;
use crate::plan::space;
use crate::plan::{Plan, PlanArtifact};
use crate::platforms::Upload;
use crate::publish::aws;
use crate::publish::meta::{self, Meta};
use crate::sys::workdir::WorkDir;
use crate::util::space::{explain_places, Place};
use crate::util::{cancel, progress::Reporter};
use anyhow::{bail, Context, Result};
use base::Base;
use build::Builder;
use load::Loaded;

/// What a run built and published, typed, so no caller reads it back from
/// the output directory.
#[derive(Debug, Clone)]
pub struct Ran {
    /// The OS stream it built from
    /// ([`crate::release::osimages::stream_key`]).
    pub os_stream: String,
    /// Each file written whose platform goes to an upload target (the
    /// platform table's `upload`), with that target. Empty for a dry run.
    pub uploads: Vec<(Upload, std::path::PathBuf)>,
    /// The stream.json written (`None` for a dry run).
    pub stream: Option<crate::publish::stream::Stream>,
}

impl Ran {
    /// The file that goes to `target`: exactly one, or an error naming
    /// what the run wrote for it.
    pub fn upload(&self, target: Upload) -> Result<&std::path::Path> {
        let mut files = self.uploads.iter().filter(|(t, _)| *t == target);
        match (files.next(), files.next()) {
            (Some((_, f)), None) => Ok(f),
            (None, _) => bail!("this run wrote no disk that goes to {target}"),
            (Some((_, a)), Some((_, b))) => bail!(
                "this run wrote more than one disk that goes to {target}: {} and {}",
                a.display(),
                b.display()
            ),
        }
    }
}

/// Run `generate` with validated settings, from the release as `loaded`
/// already resolved and imported (`--os-stream all` loads every stream at
/// once, [`load::load_all`]) or else resolving and importing it first. A
/// disk-full error anywhere (ours or a tool's) comes back with one line in
/// front naming the filesystem, what the run needed there and what is free.
pub fn run(s: &Settings, loaded: Option<Loaded>) -> Result<Ran> {
    let mut places = vec![
        Place {
            role: "cache".into(),
            path: s.input.cache_dir.clone(),
            need: 0,
            fix: "free some space there or use --cache-dir on a larger filesystem; an import cut short leaves no entry, so the cache stays valid".into(),
        },
        Place {
            role: "output directory".into(),
            path: s.output.clone(),
            need: 0,
            fix: "free some space there or choose another with -o".into(),
        },
    ];
    run_stages(s, loaded, &mut places).map_err(|e| explain_places(e, &places))
}

fn run_stages(s: &Settings, loaded: Option<Loaded>, places: &mut Vec<Place>) -> Result<Ran> {
    let chosen = backend::choose(s.backend)?;
    // Region and credentials from the AWS chain, before anything is built.
    let aws = s.aws.as_ref().map(aws::Session::connect).transpose()?;
    let reporter = Reporter::new(s.progress);
    let loaded = resolve_and_import(s, loaded)?;
    let mut ran = Ran {
        os_stream: loaded.stream_key(),
        uploads: Vec::new(),
        stream: None,
    };
    let dry = planning::dry_plan(s, &loaded, chosen, &reporter)?;
    if s.dry_run {
        println!("{}", serde_json::to_string_pretty(&dry.0)?);
        return Ok(ran);
    }
    let plan = planning::checked_plan(s, &loaded, dry, aws.as_ref(), &reporter)?;
    let new_meta = publish::start_meta(&plan);
    publish::check_output_meta(s, &new_meta)?;
    let work = WorkDir::adopt(loaded.cache.tempdir()?);
    let mkfs = staging::mkfs_tools(s, &reporter)?;
    let in_memory = staging::stage_place(s, &plan, mkfs.is_some(), &reporter)?;
    *places = space::space_places(&plan, work.path(), &s.output, mkfs.is_some() && !in_memory);
    space::check_space(places)?;
    // Mounted once the preflight passed: a refused run makes nothing.
    let stage = in_memory
        .then(|| staging::mount(work.path(), &plan))
        .transpose()?;
    std::fs::create_dir_all(&s.output)
        .with_context(|| format!("creating output directory {}", s.output.display()))?;
    reporter.note(&planning::building(&plan));
    let b = Builder {
        plan: &plan,
        cache_repo: &loaded.cache.repo.path,
        work: work.path(),
        out: &s.output,
        r: &reporter,
        threads: s.threads,
        raw_dir: s.debug_raw_dir.as_deref(),
        chunks: build::chunk_cache(work.path())?,
        aws: aws.as_ref(),
        contents: Default::default(),
    };
    let mut job = plan.disk_job(work.path(), &loaded.cache.repo.path, s.threads);
    let deployed_by;
    (job.buildroot, deployed_by) = deploy::deployer(s, &loaded, &plan, &reporter)?;
    job.mkfs = mkfs;
    job.stage_dir = stage.as_ref().map(|m| m.path().to_path_buf());
    let base = base_disk(s, &loaded, &plan, &job, &reporter)?;
    let osmets = b.pack_osmets(&base)?;
    let mut m = artifacts(&b, &base, &plan, &osmets, new_meta)?;
    publish::record_deployer(&mut m, &plan, deployed_by);
    if s.ostree_archive {
        let (key, entry) = b.ostree_archive(&s.input)?;
        m.images.insert(key, entry);
    }
    ran.stream = Some(publish::publish_metadata(
        s,
        &loaded.resolved,
        &plan,
        aws.as_ref(),
        m,
    )?);
    ran.uploads = plan
        .artifacts
        .iter()
        .filter_map(|a| a.spec.upload.map(|t| (t, s.output.join(&a.file))))
        .collect();
    publish::write_verification(s, &loaded.trust)?;
    b.note_shared_work();
    drop(b);
    drop(base);
    if let Some(m) = stage {
        m.close().context("unmounting the stage's tmpfs")?;
    }
    work.close().context("removing the work directory")?;
    reporter.note(&format!(
        "done: {} (meta.json, stream.json, SHA256SUMS)",
        s.output.display()
    ));
    Ok(ran)
}

/// Stages resolve and import: the release, its OS image, and the OS commit
/// in the cache (not imported for a dry run unless already cached), unless
/// the caller did (`loaded`).
fn resolve_and_import(s: &Settings, loaded: Option<Loaded>) -> Result<Loaded> {
    let loaded = match loaded {
        Some(l) => l,
        None => cancel::block_on(load::load(&s.input, !s.dry_run))?,
    };
    if let Some((rec, _)) = loaded
        .import
        .as_ref()
        .filter(|(r, _)| !r.dropped.is_empty())
    {
        bail!(
            "OS image {} is a derived image whose layers write outside /usr, /etc and /var ({}); ostree-ext, which imports it as rpm-ostree and bootc do, keeps only /usr, /etc and /var and drops the rest, so the bootimage would lack those files: move them under /usr (or /etc, /var) in the image's Containerfile",
            rec.image,
            rec.dropped.join(", ")
        );
    }
    Ok(loaded)
}

/// Stage base disk: the privileged job, on this host or in a VM.
fn base_disk(
    s: &Settings,
    loaded: &Loaded,
    plan: &Plan,
    job: &DiskJob,
    reporter: &Reporter,
) -> Result<Base> {
    let out = match plan.backend.name.vm() {
        None => job.run(reporter)?,
        Some(accel) => backend::vm::run(job, &s.vm, accel, &loaded.cache.dir, reporter)?,
    };
    Base::open(out, job.disk.arch, job.disk.metal_size)
}

/// Per artifact: derive -> encode -> compress -> publish; live last (its
/// rootfs holds the osmet files of the metal images).
fn artifacts(
    b: &Builder,
    base: &Base,
    plan: &Plan,
    osmets: &[live::Osmet],
    mut m: Meta,
) -> Result<Meta> {
    let (live_arts, disk_arts): (Vec<&PlanArtifact<u64>>, Vec<&PlanArtifact<u64>>) =
        plan.artifacts.iter().partition(|x| x.live.is_some());
    for art in disk_arts.into_iter().chain(live_arts) {
        cancel::check()?;
        if art.live.is_some() {
            for (key, entry) in b.live_artifacts(base, art, osmets, &m.images)? {
                m.images.insert(key, entry);
            }
            if let Some(o) = &plan.facts.erofs {
                let replaced: Vec<(String, String, String)> = o
                    .replaced
                    .iter()
                    .map(|x| (x.requested.clone(), x.used.clone(), x.reason.clone()))
                    .collect();
                m.image_details.insert(
                    meta::IMAGE_KEY_LIVE_ROOTFS.to_string(),
                    meta::live_rootfs_details(
                        "erofs",
                        &o.requested,
                        &o.host.describe(),
                        &o.used(),
                        &replaced,
                    ),
                );
            }
            continue;
        }
        let (entry, contents) = b.artifact(base, art)?;
        m.images.insert(art.meta_key.clone(), entry);
        m.image_details
            .entry(art.meta_key.clone())
            .or_default()
            .insert(contents::DETAILS_KEY.into(), contents);
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file for an upload target: the one the run wrote for it; none
    /// or two are errors naming the target (and both files).
    #[test]
    fn a_run_names_the_one_file_of_each_upload_target() {
        let mut ran = Ran {
            os_stream: "rhel-9.6".into(),
            uploads: vec![(Upload::Aws, "out/x-aws.x86_64.vmdk.gz".into())],
            stream: None,
        };
        assert_eq!(
            ran.upload(Upload::Aws).unwrap(),
            std::path::Path::new("out/x-aws.x86_64.vmdk.gz")
        );
        let e = ran.upload(Upload::Vsphere).unwrap_err().to_string();
        assert!(e.contains("no disk that goes to vSphere"), "{e}");
        ran.uploads
            .push((Upload::Aws, "out/y-aws.x86_64.vmdk.gz".into()));
        let e = ran.upload(Upload::Aws).unwrap_err().to_string();
        assert!(e.contains("x-aws") && e.contains("y-aws"), "{e}");
    }
}
