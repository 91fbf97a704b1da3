//! Stage plan: the platforms to build (`all` expanded by the release's
//! stream), the dry plan (`--dry-run` prints it), then the executable plan
//! made with the imported OS and checked against it ([`facts::check`]).
use super::load::Loaded;
use crate::backend::Chosen;
use crate::plan::facts::{self, LiveFound};
use crate::plan::preflight;
use crate::plan::settings::Settings;
use crate::plan::{DryPlan, Plan, PlanInput};
use crate::platforms::PlatformSpec;
use crate::publish::aws;
use crate::util::progress::Reporter;
use anyhow::{Context, Result};

/// The platforms to build (`all` expanded by the release's stream) and the
/// dry plan: everything decided before the base disk; with it, what the
/// live check found when `all` had to run it (kept for [`checked_plan`]).
pub(super) fn dry_plan(
    s: &Settings,
    loaded: &Loaded,
    chosen: Chosen,
    reporter: &Reporter,
) -> Result<(DryPlan, Option<LiveFound>)> {
    let os = loaded.os.as_ref();
    let content = match os {
        Some(o) => Some(loaded.cache.repo.content_size(&o.commit)?.bytes),
        None => None,
    };
    let arch = loaded.resolved.arch;
    preflight::check_arch(&s.named, arch)?;
    let named_live = s.named.iter().any(|p| p.is_live());
    let mut specs: Vec<&'static PlatformSpec> = if s.all {
        preflight::expand_all(s.named.clone(), &loaded.resolved, arch, reporter)
    } else {
        s.named.clone()
    };
    // `all` includes live only when the OS has what it needs; named
    // explicitly, live fails later with the reason instead.
    let mut live = None;
    if s.all && !named_live {
        if let Some(o) = os.filter(|_| specs.iter().any(|p| p.is_live())) {
            match facts::check_live(&loaded.cache.repo, o, arch) {
                Ok(found) => live = Some(found),
                Err(e) => {
                    reporter.note(&format!(
                        "all: leaving the live ISO and PXE files out: {e:#}"
                    ));
                    specs.retain(|p| !p.is_live());
                }
            }
        }
    }
    let dry = DryPlan::build(PlanInput {
        resolved: &loaded.resolved,
        os,
        content_bytes: content,
        platforms: &specs,
        compressor: s.compressor,
        backend: chosen,
        output_dir: s.output.clone(),
        signature: &loaded.trust.summary(),
    })?;
    Ok((dry, live))
}

/// The executable plan: the dry plan made with the imported OS, checked
/// against what the OS ships (the facts kept in it; the live check's result
/// from [`dry_plan`] reused). `aws`: the session `--aws-register` connected.
pub(super) fn checked_plan(
    s: &Settings,
    loaded: &Loaded,
    (dry, live): (DryPlan, Option<LiveFound>),
    aws: Option<&aws::Session>,
    reporter: &Reporter,
) -> Result<Plan> {
    let os = loaded.os.as_ref().context("the OS was imported")?;
    let labels = (loaded.import.as_ref())
        .map(|(rec, _)| rec.labels.clone())
        .unwrap_or_default();
    let plan = Plan::executable(dry, os, &loaded.resolved, labels)?;
    facts::check(
        plan,
        os,
        &loaded.cache.repo,
        s.aws.as_ref().zip(aws),
        live,
        reporter,
    )
}

/// What the run builds, said before the build.
pub(super) fn building(plan: &Plan) -> String {
    format!(
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
    )
}
