//! The steps of one import on a connected session, in order: the server
//! must be a vCenter; the placement is resolved; an existing VM of the
//! template's name is kept (same RHCOS version), refused (no `--replace`)
//! or marked for replacement; the datastore's free space is checked; the
//! OVA is imported (under a temporary name when replacing); and a replaced
//! template is swapped out as the MCO does. Settings, OVA and RHCOS version
//! in, an [`Outcome`] out.
use anyhow::{bail, Context, Result};

use super::annotation::annotation_version;
use super::ova::Ova;
use super::placement::{place, Placement};
use super::soap::{Client, MoRef};
use super::types::{Outcome, Settings};
use super::upload::import_and_upload;

/// What is already at the template's name in the folder.
enum Existing {
    /// Nothing: import under the name itself.
    Absent,
    /// A template of the same RHCOS version: kept, nothing imported.
    Reuse(Outcome),
    /// Something else, replaced as `--replace` asks.
    Replace(MoRef),
}

/// Check everything that can be checked before creating anything, import,
/// and swap a replaced template out.
pub(super) fn import_with(
    c: &mut Client,
    s: &Settings,
    ova: &Ova,
    rhcos_version: &str,
) -> Result<Outcome> {
    if c.sc.api_type != "VirtualCenter" {
        bail!(
            "{}: {} is not a vCenter (apiType {:?}): templates need vCenter; set GOVC_URL to the vCenter",
            s.url,
            c.sc.full_name,
            c.sc.api_type
        );
    }
    let at = place(c, s, ova)?;
    let replacing = match check_existing(c, s, &at, rhcos_version)? {
        Existing::Reuse(outcome) => return Ok(outcome),
        Existing::Replace(vm) => Some(vm),
        Existing::Absent => None,
    };
    check_space(c, s, ova, &at)?;

    // Import under a temporary name when replacing, so the old template
    // stays until the new one is whole.
    let import_name = match &replacing {
        Some(_) => swap_name("new", &s.name),
        None => s.name.clone(),
    };
    let (vm, uploaded) = import_and_upload(c, s, ova, rhcos_version, &at, &import_name)?;
    if let Some(old) = &replacing {
        swap_in(c, s, &at.folder_path, old, &vm, &import_name)?;
    }
    Ok(Outcome {
        name: s.name.clone(),
        vm,
        inventory_path: format!("{}/{}", at.folder_path, s.name),
        rhcos_version: rhcos_version.into(),
        reused: false,
        replaced: replacing.is_some(),
        uploaded,
    })
}

/// An existing VM of that name in the folder: kept when it is our template
/// of this RHCOS version, an error unless `--replace`, else replaced.
fn check_existing(
    c: &mut Client,
    s: &Settings,
    at: &Placement,
    rhcos_version: &str,
) -> Result<Existing> {
    let folder_path = &at.folder_path;
    let existing = c.find_child(&at.folder, &s.name)?;
    let Some(vm) = &existing else {
        return Ok(Existing::Absent);
    };
    let oc = c.retrieve(
        &vm.kind.clone(),
        std::slice::from_ref(vm),
        &["config.annotation", "config.template"],
    )?;
    let o = oc.first();
    let ann = o.and_then(|o| o.get("config.annotation")).unwrap_or("");
    let is_template = o.and_then(|o| o.get("config.template")) == Some("true");
    let theirs = annotation_version(ann);
    if is_template && theirs.as_deref() == Some(rhcos_version) {
        return Ok(Existing::Reuse(Outcome {
            name: s.name.clone(),
            vm: vm.clone(),
            inventory_path: format!("{folder_path}/{}", s.name),
            rhcos_version: rhcos_version.into(),
            reused: true,
            replaced: false,
            uploaded: 0,
        }));
    }
    if !s.replace {
        bail!(
            "{} {folder_path}/{} already exists with {}, not {rhcos_version}: pass --replace to replace it, or choose another --name",
            if is_template { "template" } else { "VM" },
            s.name,
            match theirs {
                Some(v) => format!("RHCOS version {v}"),
                None => "no bootimage-gen version record".into(),
            }
        );
    }
    Ok(Existing::Replace(vm.clone()))
}

/// Space: thin needs what the disk holds, thick its capacity.
fn check_space(c: &mut Client, s: &Settings, ova: &Ova, at: &Placement) -> Result<()> {
    let ds_path = &at.ds_path;
    let needed = match s.disk_provisioning.as_deref() {
        Some("thick") | Some("eagerZeroedThick") => ova.capacity,
        _ => ova.populated.max(ova.disk_size),
    };
    let oc = c.retrieve(
        "Datastore",
        std::slice::from_ref(&at.ds),
        &["summary.freeSpace", "summary.accessible"],
    )?;
    if let Some(free) = oc
        .first()
        .and_then(|o| o.get("summary.freeSpace"))
        .and_then(|v| v.parse::<u64>().ok())
    {
        if needed > free {
            bail!(
                "datastore {ds_path} has not enough space: the template needs {needed} bytes ({}), {free} are free: free space or choose another --datastore",
                s.disk_provisioning.as_deref().unwrap_or("thin")
            );
        }
    }
    Ok(())
}

/// The MCO's swap (vsphere_helpers.go swapTemplate): the old one renamed
/// away, the new one renamed in, then the old one removed, so the name is
/// absent only between two renames.
fn swap_in(
    c: &mut Client,
    s: &Settings,
    folder_path: &str,
    old: &MoRef,
    vm: &MoRef,
    import_name: &str,
) -> Result<()> {
    let old_name = swap_name("old", &s.name);
    c.rename(old, &old_name)
        .with_context(|| format!("renaming the old template {folder_path}/{} away", s.name))?;
    if let Err(e) = c.rename(vm, &s.name) {
        let _ = c.rename(old, &s.name);
        let _ = c.destroy(vm);
        return Err(e.context(format!("renaming {import_name} to {}", s.name)));
    }
    c.destroy(old)
        .with_context(|| format!("removing the old template, now {folder_path}/{old_name}"))?;
    Ok(())
}

/// A short fixed-length name for the swap (vCenter names are at most 80
/// characters): `bootimage-gen-<what>-<8 hex of sha256(name)>`.
fn swap_name(what: &str, name: &str) -> String {
    use sha2::Digest;
    let h = sha2::Sha256::digest(name.as_bytes());
    format!("bootimage-gen-{what}-{}", hex::encode(&h[..4]))
}
