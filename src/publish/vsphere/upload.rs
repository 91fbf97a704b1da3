//! The import proper, on a placement already checked: OvfManager.
//! CreateImportSpec, ResourcePool.ImportVApp, then the NFC lease (the VMDK
//! member of the OVA streamed to the lease's disk URL, HttpNfcLeaseProgress
//! as keep-alive and progress output, HttpNfcLeaseComplete), then
//! ReconfigVM_Task and MarkAsTemplate. On any failure or signal the lease
//! is aborted and the half-imported VM destroyed. The session, settings,
//! OVA and placement in; the new template and the bytes uploaded out.
use anyhow::{bail, Context, Result};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use super::annotation::annotation;
use super::ova::Ova;
use super::placement::Placement;
use super::soap::{Client, MoRef};
use super::types::Settings;

/// CreateImportSpec and ImportVApp for `import_name`, then the upload
/// through the lease: the new VM and the bytes uploaded. On failure, abort
/// the lease and remove the VM.
pub(super) fn import_and_upload(
    c: &mut Client,
    s: &Settings,
    ova: &Ova,
    rhcos_version: &str,
    at: &Placement,
    import_name: &str,
) -> Result<(MoRef, u64)> {
    let spec = c.create_import_spec(
        &ova.ovf,
        &at.pool,
        &at.ds,
        import_name,
        &[(ova.networks[0].clone(), at.net.clone())],
        s.disk_provisioning.as_deref(),
    )?;
    crate::util::cancel::check()?;
    let lease = c.import_vapp(&at.pool, &spec, &at.folder)?;
    let mut vm: Option<MoRef> = None;
    let r = upload_and_finish(c, s, ova, rhcos_version, &lease, &mut vm);
    let uploaded = match r {
        Ok(n) => n,
        Err(e) => {
            // Abort the lease (vCenter then removes the VM itself), and
            // remove the VM in any case.
            let _ = c.lease_abort(&lease);
            let vm = vm.or_else(|| c.find_child(&at.folder, import_name).ok().flatten());
            if let Some(vm) = vm {
                if let Err(d) = c.destroy(&vm) {
                    tracing::warn!("removing the half-imported VM {vm}: {d:#}");
                }
            }
            return Err(e);
        }
    };
    let vm = vm.expect("set once the lease is ready");
    Ok((vm, uploaded))
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
    r.with_context(|| format!("uploading {} through the import lease", ova.disk_name))?;
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
