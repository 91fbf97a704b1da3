//! The disk job run right here, with loop devices and mounts: partition the
//! base disk, make its filesystems, deploy the OS through its own tools,
//! install the bootloaders (`bootloaders.rs`), derive each boot setting's
//! boot filesystem (`boot_fs.rs`), and stage the live files
//! (`live_stage.rs`, `live_tree.rs`). The base disk's partitions and
//! filesystems are made in `base_fs.rs`. The VM backends run this same
//! code inside their VM.
use super::job::*;
use super::live_tree::{LiveEfi, LiveTreeSrc};
use crate::disk::selinux::Labeller;
use crate::disk::{deploy, derive, layout::Layout, manifest};
use crate::live;
use crate::sys::loopback::{LoopDevice, Mounted};
use crate::util::{cancel, progress::Reporter};
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

impl DiskJob {
    /// Run the job with loop devices and mounts on this machine.
    pub fn run(&self, r: &Reporter) -> Result<DiskOutput> {
        let labeller = self.labeller(r)?;
        let (mut out, map) = self.build_base(r, labeller.as_ref())?;
        // zipl (s390x) runs from the deployment, the extents of a metal
        // image's own boot filesystem are matched against its objects, and
        // the content manifest lists it: the base disk's root, mounted
        // read-only once.
        let zipl = self.boots.iter().any(|b| b.zipl_block_size.is_some());
        let osmet_boots = map.is_some() && self.mkfs.is_some();
        let root = self.mount_base_root(&out)?;
        let res = (|| -> Result<()> {
            let sysroot = match zipl {
                true => Some(deploy::deployment_root(root.path())?),
                false => None,
            };
            for b in &self.boots {
                cancel::check()?;
                let (img, ipl) = self.boot_image(&out, b, sysroot.as_deref(), labeller.as_ref())?;
                out.boots.insert(b.key(), img);
                if let Some(p) = ipl {
                    out.ipls.insert(b.key(), p);
                }
            }
            if let (Some(mut map), Some(p), true) = (map, &out.extent_map, osmet_boots) {
                for b in self.boots.iter().filter(|b| b.osmet) {
                    let m = self.mount_boot_image(&out.boots[&b.key()], &b.key())?;
                    let scanned = live::osmet::scan_boot(&map, root.path(), m.path());
                    m.close()?;
                    map.platform_boot.insert(b.key(), scanned?.0);
                }
                super::live_stage::write_map(p, &map)?;
            }
            out.contents = self.list_contents(root.path(), &out.boots)?;
            Ok(())
        })();
        let closed = root.close();
        res?;
        closed?;
        Ok(out)
    }

    /// The OS's SELinux labeller, when the job has the OS's buildroot
    /// (whichever ostree deploys) and it ships a policy and setfiles (else
    /// the run says why nothing is labelled).
    fn labeller(&self, r: &Reporter) -> Result<Option<Labeller<'_>>> {
        let Some(t) = &self.buildroot else {
            return Ok(None);
        };
        Ok(match Labeller::new(&t.buildroot)? {
            Ok(l) => Some(l),
            Err(why) => {
                r.note(&format!("SELinux: nothing labelled: {why}"));
                None
            }
        })
    }

    /// The base disk's root filesystem, read-only.
    fn mount_base_root(&self, base: &DiskOutput) -> Result<Mounted> {
        let layout = Layout::new(self.disk.arch, self.disk.metal_size, 512)?;
        mount_ro(&base.base, &layout, "root", &self.work.join("base-root"))
    }

    /// The content manifest's filesystems ([`manifest`]): the base disk's
    /// root (mounted at `root`) and each platform boot filesystem, each
    /// walked read-only into `<work>/contents-<key>.json`.
    fn list_contents(
        &self,
        root: &Path,
        boots: &BTreeMap<String, PathBuf>,
    ) -> Result<BTreeMap<String, PathBuf>> {
        let mut out = BTreeMap::new();
        let mut write = |key: String, fs: &str, dir: &Path| -> Result<()> {
            let f = manifest::Filesystem {
                fs: fs.into(),
                entries: manifest::walk(dir)?,
            };
            let p = self.work.join(format!("contents-{key}.json"));
            std::fs::write(&p, serde_json::to_vec(&f)?)
                .with_context(|| format!("writing {}", p.display()))?;
            out.insert(key, p);
            Ok(())
        };
        write(manifest::ROOT_KEY.into(), "xfs", root)?;
        for (key, img) in boots {
            cancel::check()?;
            let m = self.mount_boot_image(img, key)?;
            let res = write(manifest::boot_key(key), "ext4", m.path());
            m.close()?;
            res?;
        }
        Ok(out)
    }

    /// A platform's boot filesystem image, read-only.
    fn mount_boot_image(&self, img: &Path, key: &str) -> Result<Mounted> {
        let size = std::fs::metadata(img)
            .with_context(|| format!("reading {}", img.display()))?
            .len();
        let dev = LoopDevice::attach(img, 0, size, 512)?;
        Mounted::new(
            dev,
            &self.work.join(format!("mnt-ro-{key}")),
            "ext4",
            "ro,noload",
        )
    }

    /// The base disk's root and boot filesystems, read-only: root at
    /// `<work>/base-root`, boot at `<work>/base-boot`.
    fn mount_base(&self, disk: &Path, layout: &Layout) -> Result<(Mounted, Mounted)> {
        let root = mount_ro(disk, layout, "root", &self.work.join("base-root"))?;
        let boot = mount_ro(disk, layout, "boot", &self.work.join("base-boot"))?;
        Ok((root, boot))
    }

    /// GPT, filesystems, deployment, bootloaders.
    fn build_base(
        &self,
        r: &Reporter,
        labeller: Option<&Labeller>,
    ) -> Result<(DiskOutput, Option<live::osmet::ExtentMap>)> {
        let d = &self.disk;
        let step = r.step("base disk");
        let path = self.work.join("base.raw");
        let (file, layout) = self.partition(&path)?;
        let (root_m, boot_m, first) = self.make_filesystems(&path, &layout, labeller)?;
        let dep = self.deploy_os(root_m.path(), labeller)?;
        cancel::check()?;
        let tree = root_m.path().join(&dep.deploy_dir);
        let boot = boot_m.path().to_path_buf();
        let entries = derive::read_entries(&boot, &dep.entries)?;
        let installed = self.install_bootloaders(&file, &layout, &tree, &boot)?;
        // /boot last, once everything on it is written (osbuild's
        // org.osbuild.ostree.selinux labels /boot after the deploy).
        if let Some(l) = labeller {
            label_boot(l, &boot, first, &dep, r)?;
        }
        file.sync_all()?;
        // The stage is complete: the base disk's filesystems are made from
        // it, and read back from the disk, as shipped, from here on.
        let made = self.final_filesystems(&path, &layout, root_m, boot_m)?;
        r.note(&format!("filesystems: {made}"));
        // The live files and the osmet extents are read from the base
        // disk's filesystems, as shipped (mounted read-only for them only).
        let (extent_map, map, live) = match &self.live {
            Some(l) => {
                let (root_m, boot_m) = self.mount_base(&path, &layout)?;
                let tree = root_m.path().join(&dep.deploy_dir);
                let efi_src = tree.join(OS_EFI_DIR);
                // The extents of the ostree objects on the base disk's root
                // and boot (the osmet files are packed from them).
                let (p, m) = self.extent_map(root_m.path(), boot_m.path(), r)?;
                boot_m.close()?;
                let live = self.live_stage(
                    l,
                    r,
                    &LiveTreeSrc {
                        disk: &file,
                        layout: &layout,
                        root: root_m.path(),
                        tree: &tree,
                        efi: installed.efi.as_ref().map(|(vendor, stub)| LiveEfi {
                            src: &efi_src,
                            vendor,
                            esp_files: stub,
                        }),
                    },
                )?;
                root_m.close()?;
                (Some(p), Some(m), Some(live))
            }
            None => (None, None, None),
        };
        step.done(&format!(
            "{} MiB disk, {} MiB of OS content, kernel {}",
            d.metal_size >> 20,
            d.content_bytes >> 20,
            self.kernel_version
        ));
        Ok((
            DiskOutput {
                base: path,
                entries,
                esp4k: installed.esp4k,
                boots: BTreeMap::new(),
                ipls: BTreeMap::new(),
                live,
                static_grub: installed.static_grub,
                extent_map,
                contents: BTreeMap::new(),
            },
            map,
        ))
    }

    /// The OS deployed on the mounted root at `root`, by the OS's own
    /// ostree when the job's buildroot is there to deploy.
    fn deploy_os(&self, root: &Path, labeller: Option<&Labeller>) -> Result<deploy::Deployed> {
        let d = &self.disk;
        deploy::deploy(
            root,
            &deploy::Deploy {
                source_repo: &self.cache_repo,
                commit: &self.commit,
                osname: &self.osname,
                kargs: &d.kargs,
                origin: self.origin.clone(),
                aleph: self.aleph.clone(),
                platforms_json: self.platforms_json.as_deref(),
                zipl: crate::platforms::arch_boot(d.arch).zipl,
                tool: match &self.buildroot {
                    Some(t) if t.deploys => deploy::Tool::Os(&t.buildroot),
                    _ => deploy::Tool::Host,
                },
                labeller,
                image_refs: self.image_refs.as_ref(),
            },
        )
    }
}

/// The partition `label` of `disk` mounted read-only at `at` (XFS root:
/// `nouuid`, as every disk has the same UUID; ext4: `noload`, no journal
/// replayed, nothing written).
fn mount_ro(disk: &Path, layout: &Layout, label: &str, at: &Path) -> Result<Mounted> {
    let p = layout.part(label);
    let (fstype, opts) = match p.spec.fs {
        crate::disk::layout::Fs::Xfs => ("xfs", "ro,nouuid,norecovery"),
        _ => ("ext4", "ro,noload"),
    };
    let dev = LoopDevice::attach(disk, p.start, p.size, 512)?;
    Mounted::new(dev, at, fstype, opts)
}

/// Label `/boot` with the OS's policy, and say what was labelled (`first`:
/// files of the empty physical root, before the deploy).
fn label_boot(
    l: &Labeller,
    boot: &Path,
    first: usize,
    dep: &deploy::Deployed,
    r: &Reporter,
) -> Result<()> {
    let n = l.label(boot, "/boot")?;
    let mut done = vec![format!("/ before the deploy {first}")];
    done.extend(dep.labelled.iter().map(|(at, n)| match at.as_str() {
        "/" => format!("/ after it {n}"),
        _ => format!("{at} {n}"),
    }));
    done.push(format!("/boot {n}"));
    r.note(&format!(
        "SELinux: labelled with the OS's policy {} and setfiles (files per tree: {})",
        l.policy,
        done.join(", ")
    ));
    Ok(())
}
