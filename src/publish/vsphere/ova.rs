//! What `vsphere import` reads from an OVA without extracting it: the OVF
//! descriptor (its network, RHCOS version, firmware, secure boot, guest
//! type, hardware version and disk sizes) and where the disk member's data
//! lies in the archive. An OVA path in, an [`Ova`] out.
use anyhow::{anyhow, bail, Context, Result};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// What the OVA holds that the import needs.
#[derive(Debug, Clone)]
pub struct Ova {
    pub path: PathBuf,
    pub ovf: String,
    /// The OVF's networks (`NetworkSection`).
    pub networks: Vec<String>,
    /// ProductSection `Version`.
    pub os_version: String,
    /// `vmw:Config firmware`, `bootOptions.efiSecureBootEnabled`.
    pub firmware: Option<String>,
    pub secure_boot: Option<bool>,
    pub os_type: Option<String>,
    pub hw_version: Option<String>,
    /// The disk member: its name, offset of its data in the OVA, size.
    pub disk_name: String,
    pub disk_offset: u64,
    pub disk_size: u64,
    /// OVF `ovf:capacity` and `ovf:populatedSize` of the disk.
    pub capacity: u64,
    pub populated: u64,
}

/// Read an OVA (a ustar archive: the `.ovf` descriptor first, then its
/// disk) without extracting it.
pub fn read_ova(path: &Path) -> Result<Ova> {
    let f = File::open(path).with_context(|| format!("opening the OVA {}", path.display()))?;
    let mut ar = tar::Archive::new(f);
    let mut ovf = None;
    let mut members = Vec::new();
    for e in ar
        .entries_with_seek()
        .with_context(|| format!("{}: not an OVA (tar) archive", path.display()))?
    {
        let mut e = e.with_context(|| format!("{}: not an OVA (tar) archive", path.display()))?;
        let name = e.path()?.to_string_lossy().into_owned();
        if name.ends_with(".ovf") && ovf.is_none() {
            let mut s = String::new();
            e.read_to_string(&mut s)
                .with_context(|| format!("{}: reading {name}", path.display()))?;
            ovf = Some(s);
        } else {
            members.push((name, e.raw_file_position(), e.size()));
        }
    }
    let ovf = ovf.ok_or_else(|| {
        anyhow!(
            "{}: no .ovf descriptor in the archive: give the OVA of `generate … vmware`",
            path.display()
        )
    })?;
    let doc = roxmltree::Document::parse(&ovf)
        .with_context(|| format!("{}: the OVF descriptor is not XML", path.display()))?;
    let el = |name: &'static str| {
        doc.descendants()
            .filter(move |n| n.is_element() && n.tag_name().name() == name)
    };
    let attr = |n: roxmltree::Node, a: &str| {
        n.attributes()
            .find(|x| x.name() == a)
            .map(|x| x.value().to_string())
    };
    let networks: Vec<String> = el("Network").filter_map(|n| attr(n, "name")).collect();
    let os_version = el("ProductSection")
        .flat_map(|p| p.children())
        .find(|c| c.is_element() && c.tag_name().name() == "Version")
        .and_then(|v| v.text())
        .unwrap_or("")
        .trim()
        .to_string();
    let config = |key: &str| {
        el("Config")
            .filter(|c| {
                c.parent()
                    .is_some_and(|p| p.tag_name().name() == "VirtualHardwareSection")
            })
            .find(|c| attr(*c, "key").as_deref() == Some(key))
            .and_then(|c| attr(c, "value"))
    };
    let firmware = config("firmware");
    let secure_boot = config("bootOptions.efiSecureBootEnabled").map(|v| v == "true");
    let os_type = el("OperatingSystemSection").find_map(|n| attr(n, "osType"));
    let hw_version = el("VirtualSystemType").find_map(|n| n.text().map(str::to_string));
    let file = el("File")
        .next()
        .ok_or_else(|| anyhow!("{}: the OVF names no disk file", path.display()))?;
    let href = attr(file, "href").unwrap_or_default();
    let disk = el("Disk").next();
    let num = |n: Option<roxmltree::Node>, a: &str| {
        n.and_then(|n| attr(n, a))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let capacity = num(disk, "capacity");
    let populated = num(disk, "populatedSize");
    let (disk_name, disk_offset, disk_size) =
        members.into_iter().find(|m| m.0 == href).ok_or_else(|| {
            anyhow!(
                "{}: the OVF's disk {href:?} is not in the archive",
                path.display()
            )
        })?;
    if el("File").count() != 1 {
        bail!(
            "{}: the OVF has more than one file; an RHCOS OVA has one disk",
            path.display()
        );
    }
    Ok(Ova {
        path: path.to_path_buf(),
        ovf,
        networks,
        os_version,
        firmware,
        secure_boot,
        os_type,
        hw_version,
        disk_name,
        disk_offset,
        disk_size,
        capacity,
        populated,
    })
}
