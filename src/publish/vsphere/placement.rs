//! Where a template goes: the datacenter (named, or the only one), then
//! the datastore, network, resource pool and folder in it, each from its
//! flag or govc variable (or the only one there is). The session and the
//! [`Settings`] in, a [`Placement`] out, or an error naming what exists
//! and which setting to change.
use anyhow::{anyhow, bail, Result};

use super::inventory::Inventory;
use super::ova::Ova;
use super::soap::{Client, MoRef};
use super::types::Settings;

/// The inventory objects an import places the template on.
pub(super) struct Placement {
    pub(super) ds_path: String,
    pub(super) ds: MoRef,
    pub(super) net: MoRef,
    pub(super) pool: MoRef,
    pub(super) folder_path: String,
    pub(super) folder: MoRef,
}

/// The datacenter: `--datacenter` (a name or a path), or the only one.
fn find_datacenter(c: &mut Client, s: &Settings) -> Result<(String, MoRef)> {
    Ok(match &s.datacenter {
        Some(d) => {
            let p = if d.starts_with('/') {
                d.clone()
            } else {
                format!("/{d}")
            };
            match c.find_by_inventory_path(&p)? {
                Some(r) if r.kind == "Datacenter" => (p, r),
                _ => {
                    let root = c.sc.root_folder.clone();
                    let have = c.list(&root, &["Datacenter"])?;
                    bail!(
                        "datacenter {d:?} not found; existing: {}: set --datacenter or GOVC_DATACENTER",
                        have.iter().map(|h| h.0.as_str()).collect::<Vec<_>>().join(", ")
                    );
                }
            }
        }
        None => {
            let root = c.sc.root_folder.clone();
            let have = c.list(&root, &["Datacenter"])?;
            match have.len() {
                1 => (format!("/{}", have[0].0), have[0].1.clone()),
                0 => bail!("vCenter {} has no datacenter", s.url),
                _ => bail!(
                    "vCenter {} has more than one datacenter; choose one with --datacenter or GOVC_DATACENTER: {}",
                    s.url,
                    have.iter().map(|h| h.0.as_str()).collect::<Vec<_>>().join(", ")
                ),
            }
        }
    })
}

/// Resolve the datacenter, then the datastore, network (the OVF's network
/// name as the default), resource pool and folder (the datacenter's `vm`
/// folder by default), in that order.
pub(super) fn place(c: &mut Client, s: &Settings, ova: &Ova) -> Result<Placement> {
    let (dc_path, dc) = find_datacenter(c, s)?;
    let mut inv = Inventory { c, dc, dc_path };
    let (ds_path, ds) = inv.resolve(
        "datastore",
        "--datastore",
        "GOVC_DATASTORE",
        s.datastore.as_deref(),
        "datastore",
        &["Datastore"],
        None,
    )?;
    let net_kinds = ["Network", "DistributedVirtualPortgroup", "OpaqueNetwork"];
    let (net_path, net) = inv.resolve(
        "network",
        "--network",
        "GOVC_NETWORK",
        s.network.as_deref(),
        "network",
        &net_kinds,
        Some(&ova.networks[0]),
    )?;
    let (pool_path, pool) = inv.resolve(
        "resource pool",
        "--resource-pool",
        "GOVC_RESOURCE_POOL",
        s.resource_pool.as_deref(),
        "host",
        &["ResourcePool"],
        None,
    )?;
    let (folder_path, folder) = match &s.folder {
        Some(_) => inv.resolve(
            "folder",
            "--folder",
            "GOVC_FOLDER",
            s.folder.as_deref(),
            "vm",
            &["Folder"],
            None,
        )?,
        None => {
            let p = format!("{}/vm", inv.dc_path);
            let r = inv
                .c
                .find_by_inventory_path(&p)?
                .ok_or_else(|| anyhow!("datacenter {} has no vm folder", inv.dc_path))?;
            (p, r)
        }
    };
    tracing::debug!(%ds_path, %net_path, %pool_path, %folder_path, "vSphere placement");
    Ok(Placement {
        ds_path,
        ds,
        net,
        pool,
        folder_path,
        folder,
    })
}
