//! The pipeline, stage by stage: resolve the release and import its OS,
//! plan (the dry plan, then the executable one), check, build the base disk
//! once, then per artifact derive -> encode -> compress -> publish
//! ([`build`]), then the metadata (meta.json, SHA256SUMS, stream.json).
//! Each stage is a function with typed inputs; `commands::generate` only
//! turns flags into [`Settings`] and calls [`run`].
mod build;
mod live;
pub mod load;

use crate::backend::{self, job::DiskJob, Chosen, Runner};
use crate::oscontainer::OsInfo;
use crate::plan::input;
use crate::plan::preflight;
use crate::plan::settings::Settings;
use crate::plan::{DryPlan, Plan, PlanArtifact, PlanInput};
use crate::platforms::{PlatformSpec, Upload};
use crate::publish::aws;
use crate::publish::meta::{self, Meta};
use crate::sys::workdir::WorkDir;
use crate::util::space::{self, Place};
use crate::util::{cancel, progress::Reporter};
use anyhow::{bail, Context, Result};
use build::{Base, Builder};
use load::Loaded;

/// What a run built from: its OS stream key
/// ([`crate::release::osimages::stream_key`]).
#[derive(Debug, Clone)]
pub struct Ran {
    pub os_stream: String,
}

/// Run `generate` with validated settings. A disk-full error anywhere
/// (ours or a tool's) comes back with one line in front naming the
/// filesystem, what the run needed there and what is free.
pub fn run(s: &Settings) -> Result<Ran> {
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
    run_stages(s, &mut places).map_err(|e| space::explain_places(e, &places))
}

fn run_stages(s: &Settings, places: &mut Vec<Place>) -> Result<Ran> {
    let chosen = backend::choose(s.backend)?;
    // Region and credentials from the AWS chain, before anything is built.
    let aws = s.aws.as_ref().map(aws::Session::connect).transpose()?;
    let reporter = Reporter::new(s.progress);
    let loaded = resolve_and_import(s)?;
    let ran = Ran {
        os_stream: crate::release::osimages::stream_key(
            loaded.resolved.os_stream_class.as_deref(),
            &loaded.resolved.os_tag,
        ),
    };
    let dry = dry_plan(s, &loaded, chosen, &reporter)?;
    if s.dry_run {
        println!("{}", serde_json::to_string_pretty(&dry)?);
        return Ok(ran);
    }
    let plan = Plan::executable(dry)?;
    let os = loaded.os.as_ref().context("the OS was imported")?;
    let ami_spec = match &s.aws {
        Some(a) => Some(preflight::aws_preflight(
            a,
            aws.as_ref(),
            &plan,
            os,
            &reporter,
        )?),
        None => None,
    };
    let commit = &os.commit;
    preflight::check_bootloader(&loaded.cache.repo, commit, &plan)?;
    let bootupd = preflight::check_bootupd(&loaded.cache.repo, os)?;
    let (syslinux, erofs) = if plan.artifacts.iter().any(|x| x.live.is_some()) {
        preflight::check_live(&loaded.cache.repo, os, &plan.release.arch)?
    } else {
        (None, None)
    };
    preflight::note_os_requests(os, bootupd.as_ref(), erofs.as_ref(), &reporter);
    let new_meta = build::start_meta(&plan, os, &loaded.resolved);
    check_output_meta(s, &new_meta)?;
    let work = WorkDir::adopt(loaded.cache.tempdir()?);
    *places = preflight::space_places(&plan, work.path(), &s.output);
    preflight::check_space(places)?;
    std::fs::create_dir_all(&s.output)
        .with_context(|| format!("creating output directory {}", s.output.display()))?;
    reporter.note(&format!(
        "building {} for {} {} (release {}), backend {}: {}",
        plan.artifacts
            .iter()
            .map(|x| x.platform.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        plan.name,
        plan.version,
        plan.release.version,
        plan.backend.name,
        plan.backend.reason
    ));
    let b = Builder {
        plan: &plan,
        os,
        resolved: &loaded.resolved,
        cache_repo: &loaded.cache.repo.path,
        work: work.path(),
        out: &s.output,
        r: &reporter,
        threads: s.threads,
        raw_dir: s.debug_raw_dir.as_deref(),
        chunks: crate::io::compress::ChunkCache::new(&work.path().join("chunks.cache"))?,
        syslinux,
        erofs,
        bootupd,
        image_labels: loaded
            .import
            .as_ref()
            .map(|(rec, _)| rec.labels.clone())
            .unwrap_or_default(),
        aws: aws.as_ref().zip(ami_spec.as_ref()),
    };
    let mut job = b.disk_job()?;
    let mut deployed_by;
    (job.buildroot, deployed_by) = deployer(s, &loaded, &plan, os, &reporter)?;
    // Layers merged here (an image with no ostree commit, or derived
    // layers): whose ostree wrote the merge commit, with whose labels.
    if let Some(by) = loaded
        .import
        .as_ref()
        .and_then(|(r, _)| r.committed_by.as_ref())
    {
        reporter.note(&format!(
            "OS image layers merged and labelled with the merged tree's SELinux policy by {by}"
        ));
        deployed_by.insert("import-committed-by".into(), by.clone().into());
    }
    let base = base_disk(s, &loaded, &plan, &job, &reporter)?;
    let osmets = b.pack_osmets(&base)?;
    let mut m = artifacts(&b, &base, &plan, &osmets, new_meta)?;
    // Each disk image records whose ostree deployed it (cosa's schema
    // allows keys of our own in `images` entries only).
    for art in plan.artifacts.iter().filter(|x| x.live.is_none()) {
        m.image_details
            .entry(art.meta_key.clone())
            .or_default()
            .insert(meta::DETAILS_KEY_DEPLOY.into(), deployed_by.clone().into());
    }
    if s.ostree_archive {
        let (key, entry) = b.ostree_archive(&s.input)?;
        m.images.insert(key, entry);
    }
    publish_metadata(s, &loaded, &plan, aws.as_ref(), m)?;
    let (chunks, bytes) = b.chunks.reused();
    if chunks > 0 {
        let by: Vec<String> = (b.chunks.reused_by().iter())
            .map(|(what, n, bytes)| format!("{what} {n} ({} MiB)", bytes >> 20))
            .collect();
        reporter.note(&format!(
            "shared work: {chunks} encoded chunks ({} MiB of disk) reused between platforms instead of encoded again: {}",
            bytes >> 20,
            by.join(", ")
        ));
    }
    drop(b);
    drop(base);
    work.close().context("removing the work directory")?;
    reporter.note(&format!(
        "done: {} (meta.json, stream.json, SHA256SUMS)",
        s.output.display()
    ));
    Ok(ran)
}

/// Stages resolve and import: the release, its OS image, and the OS commit
/// in the cache (not imported for a dry run unless already cached).
fn resolve_and_import(s: &Settings) -> Result<Loaded> {
    let loaded = cancel::block_on(load::load(&s.input, !s.dry_run))?;
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

/// The platforms to build (`all` expanded by the release's stream) and the
/// dry plan: everything decided before the base disk.
fn dry_plan(s: &Settings, loaded: &Loaded, chosen: Chosen, reporter: &Reporter) -> Result<DryPlan> {
    let os: Option<&OsInfo> = loaded.os.as_ref();
    let content = match os {
        Some(o) => Some(loaded.cache.repo.content_size(&o.commit)?.bytes),
        None => None,
    };
    preflight::check_arch(&s.named, &loaded.resolved.arch)?;
    let named_live = s.named.iter().any(|p| p.is_live());
    let mut specs: Vec<&'static PlatformSpec> = if s.all {
        preflight::expand_all(s.named.clone(), &loaded.resolved, reporter)
    } else {
        s.named.clone()
    };
    // `all` includes live only when the OS has what it needs; named
    // explicitly, live fails later with the reason instead.
    if s.all && !named_live {
        if let Some(o) = os.filter(|_| specs.iter().any(|p| p.is_live())) {
            if let Err(e) = preflight::check_live(&loaded.cache.repo, o, &loaded.resolved.arch) {
                reporter.note(&format!(
                    "all: leaving the live ISO and PXE files out: {e:#}"
                ));
                specs.retain(|p| !p.is_live());
            }
        }
    }
    DryPlan::build(PlanInput {
        resolved: &loaded.resolved,
        os,
        content_bytes: content,
        platforms: &specs,
        compressor: s.compressor,
        backend: chosen,
        output_dir: s.output.clone(),
    })
}

/// An output directory may only hold meta.json of this same build.
fn check_output_meta(s: &Settings, new_meta: &Meta) -> Result<()> {
    if let Some(old) = meta::read_meta(&s.output)? {
        if !old.same_build(new_meta) {
            bail!(
                "{} already holds meta.json of another build ({} {}, commit {}); use an empty output directory",
                s.output.display(),
                old.name,
                old.buildid,
                input::short(&old.ostree_commit)
            );
        }
    }
    Ok(())
}

/// Whose ostree lays the OS down (`--deploy-ostree`): the OS's own from a
/// buildroot of its tree when it ships `/usr/bin/ostree`, else this
/// machine's; said on the console, and recorded in meta.json's
/// `image_details` (returned).
fn deployer(
    s: &Settings,
    loaded: &Loaded,
    plan: &Plan,
    os: &OsInfo,
    reporter: &Reporter,
) -> Result<(
    Option<crate::oscontainer::buildroot::Buildroot>,
    serde_json::Map<String, serde_json::Value>,
)> {
    use crate::oscontainer::buildroot::{self, Buildroot};
    let repo = &loaded.cache.repo;
    let ships = buildroot::os_has_ostree(repo, &os.commit)?;
    let requires_cfs = repo
        .read_file(&os.commit, buildroot::PREPARE_ROOT_CONF)?
        .is_some_and(|c| buildroot::composefs_required(&String::from_utf8_lossy(&c)));
    let mut details = serde_json::Map::new();
    let vm = plan.backend.name.in_vm();
    if ships && s.deploy_with_os {
        let step = reporter.step("buildroot");
        let b = Buildroot::prepare(&loaded.cache.dir, repo, &os.commit, &plan.release.arch)?;
        step.done(&format!("ostree {}", b.ostree_version));
        // A foreign arch's programs run under qemu-user, called explicitly.
        let emulated = b.emulator.as_ref().map(|e| {
            let v = buildroot::emulator_version(e);
            details.insert("emulator".into(), format!("{} ({v})", e.display()).into());
            format!(
                ", its {} programs run by {} ({v}; no binfmt_misc registration needed)",
                plan.release.arch,
                e.display()
            )
        });
        reporter.note(&format!(
            "deploy: the OS's own ostree {} (its /{}, run in a buildroot of the OS tree{}{})",
            b.ostree_version,
            buildroot::OSTREE,
            if vm {
                ", shared read-only with the VM"
            } else {
                ""
            },
            emulated.unwrap_or_default()
        ));
        details.insert("tool".into(), "os".into());
        details.insert("ostree-version".into(), b.ostree_version.clone().into());
        return Ok((Some(b), details));
    }
    // This machine's ostree (the VM's, with a VM backend).
    let out = crate::util::cmd::run_str(&mut crate::util::cmd::new("ostree", ["--version"]))
        .unwrap_or_default();
    let host = buildroot::parse_ostree_version(&out).unwrap_or_else(|| "(version unknown)".into());
    let why = if !ships {
        "the OS image ships no /usr/bin/ostree".to_string()
    } else {
        "--deploy-ostree host".to_string()
    };
    let whose = if vm { "the VM's" } else { "this machine's" };
    reporter.note(&format!("deploy: {whose} ostree {host} ({why})"));
    if requires_cfs && !buildroot::has_composefs_feature(&out) {
        reporter.note(&format!(
            "warning: the OS requires a composefs root ({} [composefs] enabled) and this ostree writes no composefs image: its disks stop in the initramfs (ostree-prepare-root: composefs: failed to mount)",
            buildroot::PREPARE_ROOT_CONF
        ));
        details.insert("composefs-image".into(), false.into());
    }
    if ships
        && repo
            .read_file(&os.commit, "/usr/etc/selinux/config")?
            .is_some()
    {
        reporter.note(&format!(
            "SELinux: nothing labelled: the OS's setfiles runs only where its own ostree deploys ({why})"
        ));
        details.insert("selinux-labelled".into(), false.into());
    }
    details.insert("tool".into(), "host".into());
    details.insert("ostree-version".into(), host.into());
    details.insert("reason".into(), why.into());
    Ok((None, details))
}

/// Stage base disk: the privileged job, on this host or in a VM.
fn base_disk(
    s: &Settings,
    loaded: &Loaded,
    plan: &Plan,
    job: &DiskJob,
    reporter: &Reporter,
) -> Result<Base> {
    let out = match plan.backend.name {
        Runner::Loopback => job.run(reporter)?,
        Runner::Kvm => backend::vm::run(job, &s.vm, true, &loaded.cache.dir, reporter)?,
        Runner::Nokvm => backend::vm::run(job, &s.vm, false, &loaded.cache.dir, reporter)?,
    };
    Base::open(out, &job.disk.arch, job.disk.metal_size)
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
            if let Some(o) = &b.erofs {
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
        let entry = b.artifact(base, art)?;
        m.images.insert(art.meta_key.clone(), entry);
    }
    Ok(m)
}

/// Stage publish (metadata): the AMIs, meta.json (merged with an earlier
/// run's), SHA256SUMS and stream.json.
fn publish_metadata(
    s: &Settings,
    loaded: &Loaded,
    plan: &Plan,
    aws: Option<&aws::Session>,
    mut m: Meta,
) -> Result<()> {
    // AMIs registered by --aws-register (SPEC 6.3), with their snapshots.
    for r in aws.map(|s| s.results()).unwrap_or_default() {
        m.amis.retain(|x| x.name != r.region);
        m.amis.push(meta::Ami {
            name: r.region,
            hvm: r.ami,
            snapshot: r.snapshot,
        });
    }
    let pinned = &loaded.resolved.pinned_amis;
    if plan
        .artifacts
        .iter()
        .any(|x| x.spec.uploads_to(Upload::Aws))
    {
        // The release's own AMIs (SPEC 6.3); their `release` (in stream.json)
        // may be older than the OS built here.
        for p in pinned {
            if !m.amis.iter().any(|x| x.name == p.region) {
                m.amis.push(meta::Ami {
                    name: p.region.clone(),
                    hvm: p.image.clone(),
                    snapshot: String::new(),
                });
            }
        }
    }
    let written = meta::write_merged_meta(&s.output, m)?;
    meta::write_sha256sums(&s.output, &written.checksums())?;
    let stream_name = loaded
        .resolved
        .stream
        .as_ref()
        .and_then(|s| s.get("stream"))
        .and_then(|s| s.as_str())
        .map(str::to_string)
        .unwrap_or_else(|| plan.name.clone());
    let pinned: Vec<(String, String, String)> = pinned
        .iter()
        .map(|p| (p.region.clone(), p.image.clone(), p.release.clone()))
        .collect();
    let st =
        crate::publish::stream::from_meta(&written, &stream_name, s.base_url.as_deref(), &pinned);
    crate::publish::stream::write_stream(&s.output, &st)?;
    Ok(())
}
