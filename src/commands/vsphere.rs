//! `vsphere import`: settings from flags and govc's environment, the OVA
//! read, the import, then the cluster patches printed (and written).
use crate::cli::{VsphereCommand, VsphereImportArgs, VsphereTarget};
use crate::publish::vsphere::{self, patches, Outcome, Settings};
use anyhow::{anyhow, Result};
use std::path::Path;

pub fn run(c: VsphereCommand) -> Result<()> {
    match c {
        VsphereCommand::Import(a) => import(a),
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// govc's boolean: 1/true/yes.
fn env_true(name: &str) -> bool {
    env(name).is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes"))
}

/// The settings: vCenter and credentials from govc's environment names only
/// (a password is never a flag), placement from the flags (which clap also
/// reads from GOVC_*).
pub fn settings(
    t: &VsphereTarget,
    name: &str,
    insecure: bool,
    release: Option<String>,
) -> Result<Settings> {
    let url = env("GOVC_URL")
        .ok_or_else(|| anyhow!("GOVC_URL is not set: export GOVC_URL=https://<vcenter>/sdk (and GOVC_USERNAME, GOVC_PASSWORD)"))?;
    let username = env("GOVC_USERNAME").ok_or_else(|| {
        anyhow!("GOVC_USERNAME is not set: export the vCenter user (and GOVC_PASSWORD)")
    })?;
    let password = env("GOVC_PASSWORD").ok_or_else(|| {
        anyhow!(
            "GOVC_PASSWORD is not set: export the password of {username:?} (it is never a flag)"
        )
    })?;
    let insecure = insecure || env_true("GOVC_INSECURE");
    if insecure {
        crate::util::ui::status(format!(
            "vsphere: WARNING: TLS verification of {url} is OFF (--insecure / GOVC_INSECURE)"
        ));
    }
    if name.trim().is_empty() || name.contains('/') {
        return Err(anyhow!(
            "template name {name:?} is empty or has a '/': give a plain --name"
        ));
    }
    Ok(Settings {
        url,
        username,
        password,
        insecure,
        ca_file: env("GOVC_TLS_CA_CERTS").map(Into::into),
        datacenter: nonempty(&t.datacenter),
        datastore: nonempty(&t.datastore),
        resource_pool: nonempty(&t.resource_pool),
        folder: nonempty(&t.folder),
        network: nonempty(&t.network),
        disk_provisioning: t.disk_provisioning.clone(),
        name: name.into(),
        replace: t.replace,
        release,
    })
}

/// An empty flag or variable (`GOVC_FOLDER=`) means unset, as in govc.
fn nonempty(v: &Option<String>) -> Option<String> {
    v.clone().filter(|v| !v.trim().is_empty())
}

fn import(a: VsphereImportArgs) -> Result<()> {
    crate::util::cancel::install()?;
    let s = settings(&a.target, &a.name, a.insecure, None)?;
    import_ova(&s, &a.ova, &a.target)?;
    Ok(())
}

/// Import, then print (and write) the patches. Shared with `generate`.
pub fn import_ova(s: &Settings, ova: &Path, t: &VsphereTarget) -> Result<Outcome> {
    let o = vsphere::read_ova(ova)?;
    let version = patches::rhcos_version(
        &o.os_version,
        &format!("the OVF ProductSection Version of {}", ova.display()),
    )?;
    crate::util::ui::status(format!(
        "vsphere: importing {} (RHCOS {version}, disk {} MiB) into {} as template {:?}",
        ova.display(),
        o.disk_size >> 20,
        s.url,
        s.name
    ));
    let t0 = std::time::Instant::now();
    let out = vsphere::import(s, &o, &version)?;
    let how = if out.reused {
        "reused (same RHCOS version)".to_string()
    } else {
        format!(
            "{} ({} MiB in {:.1?})",
            if out.replaced { "replaced" } else { "imported" },
            out.uploaded >> 20,
            t0.elapsed()
        )
    };
    crate::util::ui::status(format!(
        "vsphere: template {} {how}: {} ({})",
        out.inventory_path, out.vm.value, out.rhcos_version
    ));
    print!(
        "{}",
        patches::commands(&out.name, &t.machinesets, &out.rhcos_version)
    );
    if let Some(dir) = &t.write_patches {
        for f in patches::write(dir, &out.name, &t.machinesets, &out.rhcos_version)? {
            crate::util::ui::status(format!("vsphere: wrote {}", f.display()));
        }
    }
    Ok(out)
}
