//! `vsphere import`: an OVA into vCenter as a VM template, as openshift-
//! install (`pkg/infrastructure/vsphere/clusterapi/import.go`) and the MCO
//! (`pkg/controller/bootimage/vsphere_helpers.go`) import theirs (SPEC 7):
//! OvfManager.CreateImportSpec → ResourcePool.ImportVApp → the NFC lease
//! (the VMDK POSTed to its device URL, HttpNfcLeaseProgress as keep-alive,
//! HttpNfcLeaseComplete, or HttpNfcLeaseAbort and Destroy_Task on any
//! failure or signal) → ReconfigVM_Task (firmware and secure boot as the
//! OVF says, the annotation recording the RHCOS version) → MarkAsTemplate.
pub mod patches;
pub mod soap;

use anyhow::{anyhow, bail, Context, Result};
use soap::{Client, Endpoint, Fault, MoRef, TransportError};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Where and how to import; each field also read from govc's environment
/// names by the CLI.
#[derive(Debug, Clone)]
pub struct Settings {
    pub url: String,
    pub username: String,
    pub password: String,
    /// `--credentials FILE`, when the user and password came from it.
    pub credentials_file: Option<PathBuf>,
    pub insecure: bool,
    pub ca_file: Option<PathBuf>,
    pub datacenter: Option<String>,
    pub datastore: Option<String>,
    pub resource_pool: Option<String>,
    pub folder: Option<String>,
    pub network: Option<String>,
    /// thin, thick or eagerZeroedThick; `None`: the datastore's default.
    pub disk_provisioning: Option<String>,
    pub name: String,
    pub replace: bool,
    /// The release the OVA came from, recorded in the annotation.
    pub release: Option<String>,
}

/// The disk provisioning types CreateImportSpec accepts (vim25
/// `OvfCreateImportSpecParamsDiskProvisioningType`, as the installer maps them).
pub const DISK_PROVISIONING: &[&str] = &["thin", "thick", "eagerZeroedThick"];

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

/// The annotation our templates carry: a marker line, the RHCOS version,
/// the release and the SHA-256 of the uploaded VMDK.
pub fn annotation(rhcos_version: &str, release: Option<&str>) -> String {
    format!(
        "bootimage-gen template\nrhcos-version={rhcos_version}\nrelease={}\n",
        release.unwrap_or("")
    )
}

/// The RHCOS version an annotation records, if it is one of ours.
pub fn annotation_version(a: &str) -> Option<String> {
    let mut lines = a.lines();
    if lines.next()? != "bootimage-gen template" {
        return None;
    }
    lines
        .find_map(|l| l.strip_prefix("rhcos-version="))
        .map(str::to_string)
}

/// What an import did.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub name: String,
    pub vm: MoRef,
    pub inventory_path: String,
    pub rhcos_version: String,
    /// An existing template with the same version was kept.
    pub reused: bool,
    /// An existing template was replaced.
    pub replaced: bool,
    pub uploaded: u64,
}

/// Say a connection-level error in one line: the object, the cause, the fix.
fn connect_error(e: anyhow::Error, s: &Settings) -> anyhow::Error {
    let url = &s.url;
    if let Some(f) = e.downcast_ref::<Fault>() {
        if f.kind.contains("InvalidLogin") {
            return anyhow!(
                "vCenter {url}: login as {:?} refused: wrong user name or password; check {} (no retry was made)",
                s.username,
                match &s.credentials_file {
                    Some(f) => format!("the user and password in {}", f.display()),
                    None => "GOVC_USERNAME and GOVC_PASSWORD".into(),
                }
            );
        }
        return anyhow!("vCenter {url}: {f}");
    }
    if let Some(t) = e.downcast_ref::<TransportError>() {
        return match t {
            TransportError::Tls(cause) if cause.contains("URL names") => anyhow!(
                "vCenter {url}: TLS verification failed: {cause}; use a host name the certificate is for in GOVC_URL (or --insecure for a test system)"
            ),
            TransportError::Tls(cause) => anyhow!(
                "vCenter {url}: TLS verification failed: {cause}; set GOVC_TLS_CA_CERTS to the PEM of the CA that signed vCenter's certificate (or --insecure for a test system)"
            ),
            TransportError::Connect(cause) => anyhow!(
                "vCenter {url} unreachable: {cause}; check GOVC_URL (https://<vcenter>/sdk) and that this host can reach it"
            ),
        };
    }
    let msg = format!("{e:#}");
    if msg.contains("not a vSphere API endpoint") || msg.contains("not a vCenter") {
        return anyhow!(
            "{url}: {msg}; check GOVC_URL: it must be a vCenter's https://<vcenter>/sdk"
        );
    }
    anyhow!("vCenter {url}: {msg}")
}

/// A datacenter-scoped inventory.
struct Inventory<'c> {
    c: &'c mut Client,
    dc: MoRef,
    dc_path: String,
}

impl Inventory<'_> {
    /// Inventory paths of every `kind` object under the datacenter.
    fn paths(&mut self, kinds: &[&str]) -> Result<Vec<(String, MoRef)>> {
        let walk = [
            "Folder",
            "ClusterComputeResource",
            "ComputeResource",
            "ResourcePool",
            "Datastore",
            "Network",
            "DistributedVirtualPortgroup",
            "OpaqueNetwork",
        ];
        let all = self.c.list(&self.dc, &walk)?;
        // name and parent of each
        let mut parent = std::collections::HashMap::new();
        for k in walk {
            let objs: Vec<MoRef> = all
                .iter()
                .filter(|o| o.1.kind == k)
                .map(|o| o.1.clone())
                .collect();
            for oc in self.c.retrieve(k, &objs, &["name", "parent"])? {
                let p = oc.raw("parent").and_then(|r| {
                    roxmltree::Document::parse(r)
                        .ok()
                        .map(|d| soap::moref(d.root_element()))
                });
                parent.insert(
                    oc.obj.clone(),
                    (oc.get("name").unwrap_or("").to_string(), p),
                );
            }
        }
        let mut out = Vec::new();
        for (_, o) in all.iter().filter(|o| kinds.contains(&o.1.kind.as_str())) {
            let mut parts = Vec::new();
            let mut cur = Some(o.clone());
            while let Some(c) = cur {
                if c == self.dc {
                    break;
                }
                match parent.get(&c) {
                    Some((n, p)) => {
                        parts.push(n.clone());
                        cur = p.clone();
                    }
                    None => break,
                }
            }
            parts.reverse();
            out.push((format!("{}/{}", self.dc_path, parts.join("/")), o.clone()));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out.dedup();
        Ok(out)
    }

    /// [`Self::paths`] at or below `base`.
    fn under(&mut self, kinds: &[&str], base: &str) -> Result<Vec<(String, MoRef)>> {
        let sub = format!("{base}/");
        Ok(self
            .paths(kinds)?
            .into_iter()
            .filter(|p| p.0 == base || p.0.starts_with(&sub))
            .collect())
    }

    /// Find `what` (a name under `sub`, or an absolute inventory path) among
    /// `kinds`; `None` given: the only one there is (or `default` if it
    /// exists). Not found: an error listing what exists.
    #[allow(clippy::too_many_arguments)]
    fn resolve(
        &mut self,
        label: &str,
        flag: &str,
        env: &str,
        given: Option<&str>,
        sub: &str,
        kinds: &[&str],
        default: Option<&str>,
    ) -> Result<(String, MoRef)> {
        let base = format!("{}/{sub}", self.dc_path);
        let candidates = |given: &str| -> Vec<String> {
            if given.starts_with('/') {
                vec![given.to_string()]
            } else {
                vec![format!("{base}/{given}")]
            }
        };
        if let Some(g) = given.or(default) {
            for p in candidates(g) {
                if let Some(r) = self.c.find_by_inventory_path(&p)? {
                    if kinds.contains(&r.kind.as_str()) {
                        return Ok((p, r));
                    }
                }
            }
            if given.is_none() {
                // The default is absent: fall through to "the only one".
            } else {
                let have = self.under(kinds, &base)?;
                bail!(
                    "{label} {g:?} not found in datacenter {}; {}: set {flag} or {env}",
                    self.dc_path,
                    existing(&have, &base)
                );
            }
        }
        let have = self.under(kinds, &base)?;
        match have.len() {
            1 => Ok(have.into_iter().next().unwrap()),
            0 => bail!(
                "datacenter {} has no {label}: create one, then set {flag} or {env}",
                self.dc_path
            ),
            _ => bail!(
                "datacenter {} has more than one {label}; choose one with {flag} or {env}: {}",
                self.dc_path,
                names(&have, &base)
            ),
        }
    }
}

fn names(have: &[(String, MoRef)], base: &str) -> String {
    have.iter()
        .map(|h| {
            h.0.strip_prefix(&format!("{base}/"))
                .unwrap_or(&h.0)
                .to_string()
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn existing(have: &[(String, MoRef)], base: &str) -> String {
    if have.is_empty() {
        "there are none".into()
    } else {
        format!("existing: {}", names(have, base))
    }
}

/// Import `ova` as the template `s.name`. Connects, checks everything it
/// can before creating anything, and leaves nothing behind on failure.
pub fn import(s: &Settings, ova: &Ova, rhcos_version: &str) -> Result<Outcome> {
    if ova.networks.len() != 1 {
        bail!(
            "{}: the OVF has {} networks; the import maps exactly one (as the installer does)",
            ova.path.display(),
            ova.networks.len()
        );
    }
    if let Some(d) = &s.disk_provisioning {
        if !DISK_PROVISIONING.contains(&d.as_str()) {
            bail!(
                "disk provisioning {d:?} is not one of {}",
                DISK_PROVISIONING.join(", ")
            );
        }
    }
    let ep = Endpoint::parse(&s.url, s.insecure, s.ca_file.clone())?;
    let mut c = Client::connect(ep, &s.username, &s.password).map_err(|e| connect_error(e, s))?;
    let r = import_with(&mut c, s, ova, rhcos_version);
    c.logout();
    r
}

fn import_with(c: &mut Client, s: &Settings, ova: &Ova, rhcos_version: &str) -> Result<Outcome> {
    if c.sc.api_type != "VirtualCenter" {
        bail!(
            "{}: {} is not a vCenter (apiType {:?}): templates need vCenter; set GOVC_URL to the vCenter",
            s.url,
            c.sc.full_name,
            c.sc.api_type
        );
    }
    // Datacenter.
    let (dc_path, dc) = match &s.datacenter {
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
    };
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
    let c = inv.c;
    tracing::debug!(%ds_path, %net_path, %pool_path, %folder_path, "vSphere placement");

    // An existing VM of that name in the folder.
    let existing = c.find_child(&folder, &s.name)?;
    let mut replacing = None;
    if let Some(vm) = &existing {
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
            return Ok(Outcome {
                name: s.name.clone(),
                vm: vm.clone(),
                inventory_path: format!("{folder_path}/{}", s.name),
                rhcos_version: rhcos_version.into(),
                reused: true,
                replaced: false,
                uploaded: 0,
            });
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
        replacing = Some(vm.clone());
    }

    // Space: thin needs what the disk holds, thick its capacity.
    let needed = match s.disk_provisioning.as_deref() {
        Some("thick") | Some("eagerZeroedThick") => ova.capacity,
        _ => ova.populated.max(ova.disk_size),
    };
    let oc = c.retrieve(
        "Datastore",
        std::slice::from_ref(&ds),
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

    // Import under a temporary name when replacing, so the old template
    // stays until the new one is whole.
    let import_name = match &replacing {
        Some(_) => swap_name("new", &s.name),
        None => s.name.clone(),
    };
    let spec = c.create_import_spec(
        &ova.ovf,
        &pool,
        &ds,
        &import_name,
        &[(ova.networks[0].clone(), net.clone())],
        s.disk_provisioning.as_deref(),
    )?;
    crate::util::cancel::check()?;
    let lease = c.import_vapp(&pool, &spec, &folder)?;
    let mut vm: Option<MoRef> = None;
    let r = upload_and_finish(c, s, ova, rhcos_version, &lease, &mut vm);
    let uploaded = match r {
        Ok(n) => n,
        Err(e) => {
            // Abort the lease (vCenter then removes the VM itself), and
            // remove the VM in any case.
            let _ = c.lease_abort(&lease);
            let vm = vm.or_else(|| c.find_child(&folder, &import_name).ok().flatten());
            if let Some(vm) = vm {
                if let Err(d) = c.destroy(&vm) {
                    tracing::warn!("removing the half-imported VM {vm}: {d:#}");
                }
            }
            return Err(e);
        }
    };
    let vm = vm.expect("set once the lease is ready");
    if let Some(old) = &replacing {
        // The MCO's swap (vsphere_helpers.go swapTemplate): the old one
        // renamed away, the new one renamed in, then the old one removed,
        // so the name is absent only between two renames.
        let old_name = swap_name("old", &s.name);
        c.rename(old, &old_name)
            .with_context(|| format!("renaming the old template {folder_path}/{} away", s.name))?;
        if let Err(e) = c.rename(&vm, &s.name) {
            let _ = c.rename(old, &s.name);
            let _ = c.destroy(&vm);
            return Err(e.context(format!("renaming {import_name} to {}", s.name)));
        }
        c.destroy(old)
            .with_context(|| format!("removing the old template, now {folder_path}/{old_name}"))?;
    }
    Ok(Outcome {
        name: s.name.clone(),
        vm,
        inventory_path: format!("{folder_path}/{}", s.name),
        rhcos_version: rhcos_version.into(),
        reused: false,
        replaced: replacing.is_some(),
        uploaded,
    })
}

/// A short fixed-length name for the swap (vCenter names are at most 80
/// characters): `bootimage-gen-<what>-<8 hex of sha256(name)>`.
fn swap_name(what: &str, name: &str) -> String {
    use sha2::Digest;
    let h = sha2::Sha256::digest(name.as_bytes());
    format!("bootimage-gen-{what}-{}", hex::encode(&h[..4]))
}

/// A reader over the disk member that counts bytes and stops on a signal.
/// With `$BOOTIMAGE_GEN_PAUSE_AT=vsphere-upload-mid` (tests), it waits for
/// a signal once half the disk has been handed to the connection.
struct Counted {
    f: std::io::Take<File>,
    done: Arc<AtomicU64>,
    total: u64,
    pause_mid: bool,
}

impl Read for Counted {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let interrupted = || std::io::Error::other("interrupted by a signal");
        if crate::util::cancel::pending().is_some() {
            return Err(interrupted());
        }
        let d = self.done.load(Ordering::Relaxed);
        let half = self.total / 2;
        let mut len = buf.len();
        if self.pause_mid {
            if d >= half && d > 0 {
                self.pause_mid = false;
                let _ = crate::util::cancel::pause_point("vsphere-upload-mid");
                return Err(interrupted());
            }
            len = len.min((half - d).max(1) as usize);
        }
        let n = self.f.read(&mut buf[..len])?;
        self.done.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

fn upload_and_finish(
    c: &mut Client,
    s: &Settings,
    ova: &Ova,
    rhcos_version: &str,
    lease: &MoRef,
    vm: &mut Option<MoRef>,
) -> Result<u64> {
    let info = c.lease_wait(lease)?;
    *vm = Some(info.entity.clone());
    let disks: Vec<_> = info.devices.iter().filter(|d| d.disk).collect();
    if disks.len() != 1 {
        bail!(
            "the import lease offers {} disk URLs; the OVA has one disk",
            disks.len()
        );
    }
    let url = disks[0].url.clone();
    crate::util::cancel::pause_point("vsphere-upload")?;

    // Keep-alive: HttpNfcLeaseProgress every 2 s from a second session
    // handle (govmomi's LeaseUpdater does the same).
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let total = ova.disk_size;
    let keepalive = {
        let mut kc = c.clone_session();
        let (done, stop, lease) = (done.clone(), stop.clone(), lease.clone());
        std::thread::spawn(move || {
            let mut last = std::time::Instant::now();
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(50));
                if last.elapsed() >= std::time::Duration::from_secs(2) {
                    last = std::time::Instant::now();
                    let d = done.load(Ordering::Relaxed);
                    let pct = (d * 100 / total.max(1)).min(99) as u32;
                    let _ = kc.lease_progress(&lease, pct);
                    crate::util::ui::status(format!(
                        "vsphere: uploaded {} of {} MiB ({pct}%)",
                        d >> 20,
                        total >> 20
                    ));
                }
            }
        })
    };
    let mut f = File::open(&ova.path).with_context(|| format!("opening {}", ova.path.display()))?;
    f.seek(SeekFrom::Start(ova.disk_offset))?;
    let pause_mid =
        std::env::var(crate::util::cancel::PAUSE_ENV).is_ok_and(|p| p == "vsphere-upload-mid");
    let mut reader = Counted {
        f: f.take(total),
        done: done.clone(),
        total,
        pause_mid,
    };
    let r = c.upload(&url, total, &mut reader);
    stop.store(true, Ordering::Relaxed);
    let _ = keepalive.join();
    crate::util::cancel::check()?;
    r.with_context(|| format!("uploading {} to vCenter", ova.disk_name))?;
    c.lease_progress(lease, 100)?;
    c.lease_complete(lease)?;
    crate::util::cancel::check()?;
    let vmref = info.entity.clone();
    c.reconfigure(
        &vmref,
        &annotation(rhcos_version, s.release.as_deref()),
        ova.firmware.as_deref(),
        ova.secure_boot,
    )
    .context("setting the template's firmware, secure boot and version annotation")?;
    c.mark_as_template(&vmref)
        .context("marking the VM as a template")?;
    Ok(done.load(Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotation_round_trip() {
        let a = annotation("9.6.20251023-0", Some("quay.io/x/y@sha256:1"));
        assert_eq!(annotation_version(&a).as_deref(), Some("9.6.20251023-0"));
        assert_eq!(annotation_version("someone else's note"), None);
        assert_eq!(annotation_version(""), None);
    }
}
