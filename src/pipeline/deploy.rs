//! Stage deploy, its choice: whose ostree lays the OS down on the base
//! disk. In: the settings, the loaded OS (its cache, its import record)
//! and the plan; out: the OS's buildroot (when its own ostree deploys, or
//! its own setfiles labels what this machine's ostree lays down) and what
//! meta.json records of the choice (and of whose ostree merged the image's
//! layers on import).
use super::load::Loaded;
use crate::backend::job::OsTools;
use crate::oscontainer::buildroot::{self, Buildroot};
use crate::oscontainer::Cache;
use crate::plan::settings::Settings;
use crate::plan::Plan;
use crate::util::{cmd, progress::Reporter};
use anyhow::Result;

/// Whose ostree lays the OS down (`--deploy-ostree`): the OS's own from a
/// buildroot of its tree when it ships `/usr/bin/ostree`, else this
/// machine's; said on the console, and recorded in meta.json's
/// `image_details` (returned).
pub(super) fn deployer(
    s: &Settings,
    loaded: &Loaded,
    plan: &Plan,
    reporter: &Reporter,
) -> Result<(Option<OsTools>, Details)> {
    let (buildroot, mut details) = whose_ostree(s, &loaded.cache, plan, reporter)?;
    // Layers merged here (an image with no ostree commit, or derived
    // layers): whose ostree wrote the merge commit, with whose labels.
    if let Some(by) = (loaded.import.as_ref()).and_then(|(r, _)| r.committed_by.as_ref()) {
        reporter.note(&format!(
            "OS image layers merged and labelled with the merged tree's SELinux policy by {by}"
        ));
        details.insert("import-committed-by".into(), by.clone().into());
    }
    Ok((buildroot, details))
}

/// What meta.json records of the deploy.
type Details = serde_json::Map<String, serde_json::Value>;

/// The OS's own ostree, from a buildroot of its tree, when it ships one
/// and `--deploy-ostree` allows; else this machine's (or the VM's), with
/// the buildroot still made, when the OS has an SELinux policy, for its
/// setfiles.
fn whose_ostree(
    s: &Settings,
    cache: &Cache,
    plan: &Plan,
    reporter: &Reporter,
) -> Result<(Option<OsTools>, Details)> {
    let repo = &cache.repo;
    let commit = &plan.os.commit;
    let ships = buildroot::os_has_ostree(repo, commit)?;
    let requires_cfs = repo
        .read_file(commit, buildroot::PREPARE_ROOT_CONF)?
        .is_some_and(|c| buildroot::composefs_required(&String::from_utf8_lossy(&c)));
    let mut details = serde_json::Map::new();
    let vm = plan.backend.name.in_vm();
    if ships && s.deploy_with_os {
        let (b, emulated) = prepare(cache, plan, reporter, &mut details)?;
        reporter.note(&format!(
            "deploy: the OS's own ostree {} (its /{}, run in a buildroot of the OS tree{}{})",
            b.ostree_version,
            buildroot::OSTREE,
            if vm {
                ", shared read-only with the VM"
            } else {
                ""
            },
            emulated
        ));
        details.insert("tool".into(), "os".into());
        details.insert("ostree-version".into(), b.ostree_version.clone().into());
        let tools = OsTools {
            buildroot: b,
            deploys: true,
        };
        return Ok((Some(tools), details));
    }
    // This machine's ostree (the VM's, with a VM backend).
    let out = cmd::run_str(&mut cmd::new("ostree", ["--version"])).unwrap_or_default();
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
    let tools = if repo.read_file(commit, "/usr/etc/selinux/config")?.is_some() {
        labeller(ships, &why, whose, cache, plan, reporter, &mut details)?
    } else {
        None
    };
    details.insert("tool".into(), "host".into());
    details.insert("ostree-version".into(), host.into());
    details.insert("reason".into(), why.into());
    Ok((tools, details))
}

/// The buildroot of the OS tree, and how its programs run here (a foreign
/// arch's under qemu-user, called explicitly: said, and recorded).
fn prepare(
    cache: &Cache,
    plan: &Plan,
    reporter: &Reporter,
    details: &mut Details,
) -> Result<(Buildroot, String)> {
    let step = reporter.step("buildroot");
    let b = Buildroot::prepare(&cache.dir, &cache.repo, &plan.os.commit, plan.release.arch)?;
    step.done(&format!("ostree {}", b.ostree_version));
    let emulated = b.emulator.as_ref().map(|e| {
        let v = buildroot::emulator_version(e);
        details.insert("emulator".into(), format!("{} ({v})", e.display()).into());
        format!(
            ", its {} programs run by {} ({v}; no binfmt_misc registration needed)",
            plan.release.arch,
            e.display()
        )
    });
    Ok((b, emulated.unwrap_or_default()))
}

/// When `whose` ostree (not the OS's) deploys an OS with an SELinux
/// policy: the OS's own setfiles labels the disk all the same, from a
/// buildroot of its tree, which is made for an OS that ships an ostree
/// (the buildroot is checked by running it). When there is none, or it
/// cannot run here, the disk goes unlabelled: said, and recorded (the
/// deploy goes on, as it did before the OS's tools were asked for).
fn labeller(
    ships: bool,
    why: &str,
    whose: &str,
    cache: &Cache,
    plan: &Plan,
    reporter: &Reporter,
    details: &mut Details,
) -> Result<Option<OsTools>> {
    let made = match ships {
        true => prepare(cache, plan, reporter, details).map_err(|e| format!("{e:#}")),
        false => Err(format!(
            "the OS's setfiles runs from a buildroot of the OS tree, made only for an OS that ships /{} ({why})",
            buildroot::OSTREE
        )),
    };
    match made {
        Ok((b, emulated)) => {
            reporter.note(&format!(
                "SELinux: the OS's own setfiles labels what {whose} ostree lays down (from a buildroot of the OS tree, whose ostree is {}{emulated})",
                b.ostree_version
            ));
            Ok(Some(OsTools {
                buildroot: b,
                deploys: false,
            }))
        }
        Err(e) => {
            // An interrupted run stops here, not unlabelled.
            crate::util::cancel::check()?;
            reporter.note(&format!("SELinux: nothing labelled: {e}"));
            details.insert("selinux-labelled".into(), false.into());
            Ok(None)
        }
    }
}
