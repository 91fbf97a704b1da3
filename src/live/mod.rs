//! Live ISO and PXE artifacts (SPEC 5): the PXE kernel, initramfs and rootfs,
//! and a hybrid ISO holding them, shaped like the CoreOS ones so that
//! `coreos-installer iso|pxe ...` can customise them. Sources: osbuild
//! `org.osbuild.coreos.live-artifacts.mono`, coreos-installer `src/live/`
//! (what it reads: `coreos/igninfo.json`, `coreos/kargs.json`, the embed
//! areas); the code here is our own.
//!
//! - [`crate::fs::cpio`]: our newc writer (the rootfs image and the appended initramfs).
//! - [`iso`]: the ISO tree and xorriso (El Torito BIOS + EFI, hybrid MBR/GPT).
//! - here: volume id, kernel arguments, initramfs checks, boot menu
//!   templates and their karg embed areas, the squashfs.
pub mod erofs;
pub mod iso;
pub mod miniso;
pub mod osmet;
pub mod xzblocks;

use crate::fs::cpio;
use anyhow::{bail, Context, Result};
use serde_json::json;
use std::io::Read;
use std::path::{Path, PathBuf};

/// ISO9660 volume ids hold at most 32 characters (ECMA-119 8.4.6); SPEC 5
/// cuts `<osname>-<version>` there.
pub const VOLUME_ID_MAX: usize = 32;
/// Size of `images/ignition.img`, the Ignition embed area (SPEC 5).
pub const IGNITION_IMG_SIZE: u64 = 256 * 1024;
/// `#` characters of a karg embed area line after the kernel arguments
/// (SPEC 5; coreos-installer `src/live/embed.rs`).
pub const KARG_EMBED_PAD: usize = 1024;
/// Marker after the pad of a karg embed area line.
pub const KARG_EMBED_MARKER: &str = " COREOS_KARG_EMBED_AREA";
/// coreos-installer refuses karg embed areas larger than this.
pub const KARG_EMBED_MAX: usize = 2048;
/// Placeholders of the OS's `live/` menu templates (cosa `live/`).
pub const PH_KARGS: &str = "@@KERNEL-ARGS@@";
pub const PH_VOLID: &str = "@@VOLUME-ID@@";
pub const PH_VERSION: &str = "@@VERSION@@";
/// The OS's initramfs and kernel, relative to `/usr/lib/modules/<kver>/`.
pub const KERNEL_NAME: &str = "vmlinuz";
pub const INITRAMFS_NAME: &str = "initramfs.img";
/// Where the rootfs cpio puts the squashfs (kernel unpacks it to `/root.squashfs`).
pub const ROOT_SQUASHFS: &str = "root.squashfs";
/// Byte offset of the squashfs in `rootfs.img` (newc header + name).
pub const ROOT_SQUASHFS_OFFSET: u64 = 124;
/// Files of the appended live initramfs cpio (SPEC 5).
pub const LIVE_INITRAMFS_STAMP: &str = "etc/coreos-live-initramfs";
pub const FEATURES_IN_INITRAMFS: &str = "etc/coreos/features.json";
/// The rootfs image's stream hash in the live initramfs (SPEC 5.1; osbuild
/// `make_stream_hash`, read by `rdcore stream-hash` in fedora-coreos-config
/// `coreos-livepxe-rootfs.sh`).
pub const WANT_ROOTFS: &str = "etc/coreos-live-want-rootfs";
/// Chunk size of the stream hash (osbuild `make_stream_hash` `bufsize`).
pub const STREAM_HASH_CHUNK: usize = 2 * 1024 * 1024;
/// The version stamp in rootfs.img (osbuild: "confirming that initramfs and
/// rootfs are from the same build").
pub const LIVE_ROOTFS_STAMP: &str = "etc/coreos-live-rootfs";
/// coreos-installer's example config in the OS tree; its top-level keys are
/// features.json `installer-config-directives` (osbuild `get_os_features`).
pub const EXAMPLE_CONFIG: &str = "usr/share/coreos-installer/example-config.yaml";
/// Menu files of the built-in templates (relative to the ISO root).
pub const ISOLINUX_CFG: &str = "isolinux/isolinux.cfg";

/// `coreos/features.json` (and `etc/coreos/features.json` in the
/// initramfs), as osbuild's `get_os_features` writes it (indent 2, sorted
/// keys, a newline): `installer-config-directives` holds `true` for each
/// top-level key of the OS's example config, when the OS ships one.
pub fn features_json(directives: Option<&[String]>) -> Vec<u8> {
    let mut m = serde_json::Map::new();
    if let Some(d) = directives {
        let mut keys: Vec<&String> = d.iter().collect();
        keys.sort();
        keys.dedup();
        let obj: serde_json::Map<String, serde_json::Value> = keys
            .into_iter()
            .map(|k| (k.clone(), serde_json::Value::Bool(true)))
            .collect();
        m.insert("installer-config".into(), json!(true));
        m.insert(
            "installer-config-directives".into(),
            serde_json::Value::Object(obj),
        );
    } else {
        m.insert("installer-config".into(), json!(true));
    }
    m.insert("live-initrd-network".into(), json!(true));
    let mut v = serde_json::to_vec_pretty(&serde_json::Value::Object(m)).expect("json");
    v.push(b'\n');
    v
}

/// The top-level keys of an example config (`usr/share/coreos-installer/
/// example-config.yaml`); `what` names the file in errors.
pub fn config_directives(yaml: &[u8], what: &str) -> Result<Vec<String>> {
    let v: serde_yaml_ng::Value = serde_yaml_ng::from_slice(yaml)
        .with_context(|| format!("{what} is not YAML; the live ISO's features.json lists its keys as installer-config-directives (osbuild get_os_features); fix the OS's coreos-installer package"))?;
    let m = v.as_mapping().with_context(|| {
        format!("{what} is not a YAML mapping of installer directives; fix the OS's coreos-installer package")
    })?;
    m.keys()
        .map(|k| {
            k.as_str().map(str::to_string).with_context(|| {
                format!("{what} has a key that is not a string ({k:?}); fix the OS's coreos-installer package")
            })
        })
        .collect()
}

/// The stream hash of `path` (osbuild `make_stream_hash`): a header line
/// `stream-hash sha256 2097152`, then the hex sha256 of each 2 MiB chunk
/// (the last one may be shorter).
pub fn stream_hash(path: &Path) -> Result<Vec<u8>> {
    use sha2::Digest;
    let mut f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut out = format!("stream-hash sha256 {STREAM_HASH_CHUNK}\n").into_bytes();
    let mut buf = vec![0u8; STREAM_HASH_CHUNK];
    loop {
        let mut n = 0;
        while n < buf.len() {
            let r = f
                .read(&mut buf[n..])
                .with_context(|| format!("reading {}", path.display()))?;
            if r == 0 {
                break;
            }
            n += r;
        }
        if n == 0 {
            break;
        }
        out.extend_from_slice(hex::encode(sha2::Sha256::digest(&buf[..n])).as_bytes());
        out.push(b'\n');
        if n < buf.len() {
            break;
        }
    }
    Ok(out)
}

/// `coreos/igninfo.json`.
pub fn igninfo_json() -> Vec<u8> {
    let mut v =
        serde_json::to_vec_pretty(&json!({"file": "images/ignition.img"})).expect("static json");
    v.push(b'\n');
    v
}

/// ISO volume id: `<osname>-<version>` cut to 32 characters (SPEC 5). Only
/// ASCII characters are kept (a volume id is ASCII).
pub fn volume_id(osname: &str, version: &str) -> String {
    format!("{osname}-{version}")
        .chars()
        .filter(|c| c.is_ascii() && !c.is_ascii_control())
        .take(VOLUME_ID_MAX)
        .collect()
}

/// Live kernel arguments (SPEC 5): metal's minus `$ignition_firstboot`,
/// `console=`, `ignition.platform.id=` and `ostree=`, plus
/// `coreos.liveiso=<volid> ignition.firstboot ignition.platform.id=metal`.
pub fn live_kargs(metal: &[String], volid: &str) -> Result<Vec<String>> {
    if volid.contains(char::is_whitespace) {
        bail!("volume id '{volid}' holds white space; it cannot be a kernel argument value");
    }
    let mut k: Vec<String> = metal
        .iter()
        .filter(|a| {
            let name = a.split_once('=').map_or(a.as_str(), |(n, _)| n);
            !(a.as_str() == "$ignition_firstboot"
                || name == "console"
                || name == "ignition.platform.id"
                || name == "ostree"
                || name == "coreos.liveiso"
                || name == "ignition.firstboot")
        })
        .cloned()
        .collect();
    k.push(format!("coreos.liveiso={volid}"));
    k.push("ignition.firstboot".into());
    k.push("ignition.platform.id=metal".into());
    Ok(k)
}

/// What an initramfs file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitrdFormat {
    Cpio,
    Gzip,
    Xz,
    Zstd,
}

/// Check that `data` is a newc cpio archive, or one compressed with gzip, xz
/// or zstd (what dracut and the kernel use), by its first archive header.
pub fn check_initramfs(data: &[u8], what: &str) -> Result<InitrdFormat> {
    let fix = "the live initramfs is the OS's own initramfs with a cpio appended, so it must be one; the OS image looks broken: use a release whose OS ships a dracut initramfs";
    let head: Vec<u8> = data.iter().take(8).copied().collect();
    let hex = hex::encode(&head);
    let (fmt, mut r): (InitrdFormat, Box<dyn Read + '_>) = match data {
        [b'0', b'7', b'0', b'7', b'0', b'1' | b'2', ..] => return Ok(InitrdFormat::Cpio),
        [0x1f, 0x8b, ..] => (
            InitrdFormat::Gzip,
            Box::new(flate2::read::MultiGzDecoder::new(data)),
        ),
        [0xfd, b'7', b'z', b'X', b'Z', 0, ..] => {
            (InitrdFormat::Xz, Box::new(xz2::read::XzDecoder::new(data)))
        }
        [0x28, 0xb5, 0x2f, 0xfd, ..] => (
            InitrdFormat::Zstd,
            Box::new(zstd::stream::read::Decoder::new(data)?),
        ),
        [] => bail!("{what} is empty; {fix}"),
        _ => bail!(
            "{what} is not a cpio archive, nor a gzip-, xz- or zstd-compressed one (it starts with bytes {hex}); {fix}"
        ),
    };
    let mut magic = [0u8; 6];
    r.read_exact(&mut magic).with_context(|| {
        format!("{what} looks {fmt:?}-compressed but does not decompress; {fix}")
    })?;
    if &magic != cpio::NEWC_MAGIC && &magic != cpio::CRC_MAGIC {
        bail!(
            "{what} is {fmt:?}-compressed but holds no newc cpio archive (it starts with {}); {fix}",
            String::from_utf8_lossy(&magic).escape_debug()
        );
    }
    Ok(fmt)
}

/// The gzip-compressed newc cpio appended to the OS's initramfs (SPEC 5,
/// 5.1): the version stamp, features.json and the rootfs stream hash.
pub fn live_initramfs_addon(
    version: &str,
    features: &[u8],
    want_rootfs: &[u8],
    mtime: u32,
) -> Result<Vec<u8>> {
    let mut w = cpio::Writer::new(Vec::new(), mtime);
    w.dir("etc", 0o755)?;
    w.dir("etc/coreos", 0o755)?;
    w.file(
        LIVE_INITRAMFS_STAMP,
        0o644,
        format!("{version}\n").as_bytes(),
    )?;
    w.file(FEATURES_IN_INITRAMFS, 0o644, features)?;
    w.file(WANT_ROOTFS, 0o644, want_rootfs)?;
    let raw = w.finish()?;
    // mtime 0 in the gzip header: the same input gives the same bytes.
    let mut gz = flate2::GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), flate2::Compression::best());
    std::io::Write::write_all(&mut gz, &raw)?;
    Ok(gz.finish()?)
}

/// Alignment of each archive in a concatenated initramfs: the kernel only
/// recognises an uncompressed newc header at a 4-byte boundary of the whole
/// (`init/initramfs.c`), and skips NUL bytes between archives.
pub const INITRD_ALIGN: usize = 4;

/// The live initramfs: the OS's one, then the addon, each padded with NULs
/// to a 4-byte boundary. A compressed archive is found at any offset, but
/// what follows the file may be an uncompressed cpio: PXE appends
/// rootfs.img (`initrd=initramfs,rootfs`), and loaders that concatenate
/// initrds without aligning them (the kernel's EFI stub reading `initrd=`
/// from the command line) would put its header off the boundary.
pub fn live_initramfs(os_initrd: &[u8], addon: &[u8]) -> Vec<u8> {
    let pad = |v: &mut Vec<u8>| v.resize(v.len().next_multiple_of(INITRD_ALIGN), 0);
    let mut v = os_initrd.to_vec();
    pad(&mut v);
    v.extend_from_slice(addon);
    pad(&mut v);
    v
}

/// Memory mksquashfs may use for its caches and queues. Its default is a
/// quarter of the machine's memory (2 GiB peak RSS measured on the 3 GB
/// large test OS); with 512 MiB it squashes 2 GB of shared libraries in the
/// same time into the same bytes, at 190 MiB peak RSS.
const MKSQUASHFS_MEM: &str = "512M";

/// Squash `src` (the deployed metal root) into `dst` with zstd on `threads`
/// cores; every time stamp (files and the superblock) is `mtime`, so the
/// same tree gives the same bytes.
pub fn make_squashfs(src: &Path, dst: &Path, mtime: i64, threads: usize) -> Result<()> {
    let t = mtime.max(0).to_string();
    let mut c = crate::util::cmd::new("mksquashfs", [src.as_os_str(), dst.as_os_str()]);
    c.args(["-noappend", "-no-progress", "-comp", "zstd", "-processors"])
        .arg(threads.max(1).to_string())
        .args(["-mkfs-time", &t, "-all-time", &t])
        .args(["-mem", MKSQUASHFS_MEM]);
    crate::util::cmd::run(&mut c)
        .with_context(|| format!("squashing the deployed tree {}", src.display()))?;
    Ok(())
}

/// `rootfs.img` (SPEC 5.1): an uncompressed newc cpio whose first entry is
/// the root image (`root.squashfs` or `root.erofs`), so the image starts at
/// byte 124; its magic must be where the live initramfs looks (squashfs
/// `hsqs` at 124, EROFS `e2e1f5e0` at 124 + 1024, as osbuild checks). Then
/// `etc/coreos-live-rootfs` (the version) and the osmet files (`extras`:
/// name in the archive, file).
pub fn write_rootfs_img(
    image: &Path,
    version: &str,
    extras: &[(String, PathBuf)],
    dst: &Path,
    mtime: u32,
) -> Result<()> {
    let name = image
        .file_name()
        .and_then(|n| n.to_str())
        .context("root image name")?;
    let (magic_at, magic): (u64, &[u8]) = match name {
        ROOT_SQUASHFS => (0, b"hsqs"),
        erofs::ROOT_EROFS => (erofs::SUPERBLOCK_OFFSET, &erofs::MAGIC),
        other => bail!(
            "{other} is neither {ROOT_SQUASHFS} nor {}",
            erofs::ROOT_EROFS
        ),
    };
    let mut f =
        std::fs::File::open(image).with_context(|| format!("opening {}", image.display()))?;
    let len = f.metadata()?.len();
    let mut head = vec![0u8; (magic_at + 4) as usize];
    f.read_exact(&mut head)
        .with_context(|| format!("reading {}", image.display()))?;
    if &head[magic_at as usize..] != magic {
        bail!("{} has no {name} magic at byte {magic_at}", image.display());
    }
    std::io::Seek::rewind(&mut f)?;
    let out = std::fs::File::create(dst).with_context(|| format!("creating {}", dst.display()))?;
    let mut w = cpio::Writer::new(std::io::BufWriter::with_capacity(1 << 20, out), mtime);
    let at = w.file_from(name, 0o644, len, std::io::BufReader::new(f))?;
    if at != ROOT_SQUASHFS_OFFSET {
        bail!("{name} landed at byte {at} of rootfs.img, not {ROOT_SQUASHFS_OFFSET}");
    }
    w.dir("etc", 0o755)?;
    w.file(LIVE_ROOTFS_STAMP, 0o644, format!("{version}\n").as_bytes())?;
    for (n, p) in extras {
        let f = std::fs::File::open(p).with_context(|| format!("opening {}", p.display()))?;
        let len = f.metadata()?.len();
        w.file_from(n, 0o644, len, std::io::BufReader::new(f))?;
    }
    let out = w
        .finish()?
        .into_inner()
        .map_err(|e| e.into_error())
        .with_context(|| format!("writing {}", dst.display()))?;
    out.sync_all()?;
    Ok(())
}

/// A boot menu template (or any file of the OS's `live/` tree), by its path
/// in the ISO.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Template {
    pub path: String,
    pub data: Vec<u8>,
}

/// The OS's `live/` tree as ISO files. `EFI/<dir>/` other than `EFI/BOOT`
/// becomes `EFI/<vendor>/` (the OS's own vendor directory), as the menu
/// must sit next to the EFI GRUB that reads it.
pub fn read_templates(live_dir: &Path, vendor: &str) -> Result<Vec<Template>> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = live_dir.join(&rel);
        let rd = std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?;
        for e in rd {
            let e = e.with_context(|| format!("reading {}", dir.display()))?;
            let r = rel.join(e.file_name());
            let ft = e.file_type()?;
            if ft.is_dir() {
                stack.push(r);
            } else if ft.is_file() {
                let data = std::fs::read(e.path())
                    .with_context(|| format!("reading {}", e.path().display()))?;
                let s = r
                    .to_str()
                    .with_context(|| format!("{}: name is not UTF-8", e.path().display()))?;
                let mut parts: Vec<&str> = s.split('/').collect();
                if parts.len() > 2 && parts[0] == "EFI" && !parts[1].eq_ignore_ascii_case("BOOT") {
                    parts[1] = vendor;
                }
                out.push(Template {
                    path: parts.join("/"),
                    data,
                });
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// Built-in menus (SPEC 5) for an OS without `live/` templates: ISOLINUX
/// for BIOS, GRUB for UEFI next to the OS's EFI GRUB (`EFI/<vendor>/`).
/// Both on the serial console and the screen.
pub fn builtin_templates(vendor: &str, title: &str) -> Vec<Template> {
    let title = title.replace(['\'', '\n'], "");
    let isolinux = format!(
        "\
# Live ISO boot menu for BIOS (ISOLINUX), built in to bootimage-gen.
serial 0 115200
default live
prompt 0
timeout 20

label live
  menu label {title} (Live)
  kernel /images/pxeboot/vmlinuz
  append initrd=/images/pxeboot/initrd.img,/images/ignition.img {PH_KARGS}
"
    );
    let grub = format!(
        "\
# Live ISO boot menu for UEFI (GRUB), built in to bootimage-gen.
serial --speed=115200
terminal_input serial console
terminal_output serial console
set default=0
set timeout=2
search --no-floppy --set=root --label '{PH_VOLID}'

menuentry '{title} (Live)' {{
  linux /images/pxeboot/vmlinuz {PH_KARGS}
  initrd /images/pxeboot/initrd.img /images/ignition.img
}}
"
    );
    vec![
        Template {
            path: format!("EFI/{vendor}/grub.cfg"),
            data: grub.into_bytes(),
        },
        Template {
            path: ISOLINUX_CFG.into(),
            data: isolinux.into_bytes(),
        },
    ]
}

/// The s390x kernel parameter template (fedora-coreos-config `live/`);
/// osbuild uses it for s390x's `images/*.prm` and drops it from every ISO.
pub const ZIPL_PRM: &str = "zipl.prm";
/// Where an Open Firmware ISO's GRUB menu goes (osbuild
/// `genisoargs_ppc64le`; GRUB's CD image reads `()/boot/grub/grub.cfg`).
pub const OF_GRUB_CFG: &str = "boot/grub/grub.cfg";

/// The templates as the ISO of an arch carries them (osbuild
/// `org.osbuild.coreos.live-artifacts.mono`): `zipl.prm` never goes in
/// (s390x makes its `.prm` files from it, not built here). With
/// `open_firmware` (ppc64le) the one `EFI/<vendor>/grub.cfg` becomes
/// `boot/grub/grub.cfg`, and `EFI/` and `isolinux/` are dropped (GRUB for
/// Open Firmware boots the ISO; there is no EFI or BIOS boot).
pub fn place_templates(templates: Vec<Template>, open_firmware: bool) -> Result<Vec<Template>> {
    let mut out: Vec<Template> = templates
        .into_iter()
        .filter(|t| t.path != ZIPL_PRM)
        .collect();
    if !open_firmware {
        return Ok(out);
    }
    let is_efi_cfg = |t: &Template| {
        let p: Vec<&str> = t.path.split('/').collect();
        p.len() == 3 && p[0] == "EFI" && !p[1].eq_ignore_ascii_case("BOOT") && p[2] == "grub.cfg"
    };
    let cfgs: Vec<String> = out
        .iter()
        .filter(|t| is_efi_cfg(t))
        .map(|t| t.path.clone())
        .collect();
    if cfgs.len() != 1 {
        bail!(
            "the live menu templates must have exactly one EFI/<vendor>/grub.cfg to become the \
             Open Firmware ISO's {OF_GRUB_CFG} (as osbuild moves it); found {}",
            if cfgs.is_empty() {
                "none".to_string()
            } else {
                cfgs.join(", ")
            }
        );
    }
    for t in &mut out {
        if is_efi_cfg(t) {
            t.path = OF_GRUB_CFG.to_string();
        }
    }
    out.retain(|t| !t.path.starts_with("EFI/") && !t.path.starts_with("isolinux/"));
    Ok(out)
}

/// One karg embed area: `path` in the ISO, `offset` of the kargs in it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EmbedArea {
    pub path: String,
    pub offset: u64,
}

/// Menus rendered, and where their karg embed areas are.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Rendered {
    pub files: Vec<Template>,
    pub areas: Vec<EmbedArea>,
    pub kargs: String,
}

impl Rendered {
    /// `coreos/kargs.json` (SPEC 5): default kargs, areas sorted by path,
    /// size = kargs + newline + 1023 pad bytes.
    pub fn kargs_json(&self) -> Vec<u8> {
        let files: Vec<_> = self
            .areas
            .iter()
            .map(|a| json!({"path": a.path, "offset": a.offset, "pad": "#", "end": "\n"}))
            .collect();
        let mut v = serde_json::to_vec_pretty(&json!({
            "default": self.kargs,
            "files": files,
            "size": self.area_size(),
        }))
        .expect("json");
        v.push(b'\n');
        v
    }

    pub fn area_size(&self) -> usize {
        self.kargs.len() + 1 + KARG_EMBED_PAD - 1
    }
}

/// True for a karg embed area line: `#`s then ` COREOS_KARG_EMBED_AREA`.
fn is_embed_line(line: &str) -> bool {
    line.strip_suffix(KARG_EMBED_MARKER)
        .is_some_and(|pad| !pad.is_empty() && pad.bytes().all(|b| b == b'#'))
}

/// Fill the placeholders of the templates: `@@VOLUME-ID@@`, `@@VERSION@@`,
/// and `@@KERNEL-ARGS@@`. Upstream's templates (osbuild
/// `org.osbuild.coreos.live-artifacts.mono`; fedora-coreos-config `live/`)
/// put fixed kargs after the placeholder on the same line
/// (`@@KERNEL-ARGS@@ ignition.firstboot ignition.platform.id=metal`) and the
/// embed area line (`#`s + ` COREOS_KARG_EMBED_AREA`) on the next: the
/// kargs line becomes our kargs (minus those the template already has) and
/// the template's, followed by our embed area line of 1024 `#`. A template
/// with nothing after the placeholder and no embed line gets both added.
/// Every kargs line must come out the same (it is `kargs.json`'s default).
/// Any other `@@NAME@@` left is an error, as is a template set without a
/// kernel argument placeholder.
pub fn render(
    templates: &[Template],
    volid: &str,
    version: &str,
    kargs: &[String],
) -> Result<Rendered> {
    let mut files = Vec::new();
    let mut areas = Vec::new();
    let mut line_kargs: Option<(String, String)> = None;
    // Upstream's templates carry their embed area lines: then, as in
    // osbuild, only a placeholder followed by one becomes an embed area and
    // any other (in a comment, say) is just replaced by the kargs.
    let upstream = templates.iter().any(|t| {
        std::str::from_utf8(&t.data)
            .is_ok_and(|x| x.lines().any(|l| is_embed_line(l.trim_end_matches('\r'))))
    });
    for t in templates {
        let Ok(text) = std::str::from_utf8(&t.data) else {
            // Binary files (splash images, ...) are copied as they are.
            files.push(t.clone());
            continue;
        };
        let text = text.replace(PH_VOLID, volid).replace(PH_VERSION, version);
        let out = fill_kargs(&t.path, &text, kargs, upstream, &mut line_kargs, &mut areas)?;
        if let Some(p) = leftover_placeholder(&out) {
            bail!(
                "live template {} holds the placeholder {p}, which this tool does not know ({PH_KARGS}, {PH_VOLID} and {PH_VERSION} are filled in)",
                t.path
            );
        }
        files.push(Template {
            path: t.path.clone(),
            data: out.into_bytes(),
        });
    }
    let Some((kargs, _)) = line_kargs else {
        bail!(
            "the live menu templates hold no {PH_KARGS}: the ISO needs the kernel arguments in its boot menus (templates: {})",
            templates.iter().map(|t| t.path.as_str()).collect::<Vec<_>>().join(", ")
        );
    };
    areas.sort_by(|a, b| a.path.cmp(&b.path).then(a.offset.cmp(&b.offset)));
    Ok(Rendered {
        files,
        areas,
        kargs,
    })
}

/// Fill each `@@KERNEL-ARGS@@` of the template at `path` (its `text` with
/// the other placeholders filled): a kargs line and our embed area (noted
/// in `areas`), or with `upstream` templates and no embed line after it,
/// the kargs alone. `line_kargs` holds the first kargs line and its file.
fn fill_kargs(
    path: &str,
    text: &str,
    kargs: &[String],
    upstream: bool,
    line_kargs: &mut Option<(String, String)>,
    areas: &mut Vec<EmbedArea>,
) -> Result<String> {
    let mut out = String::with_capacity(text.len() + 2048);
    let mut rest = text;
    while let Some(i) = rest.find(PH_KARGS) {
        out.push_str(&rest[..i]);
        let after = &rest[i + PH_KARGS.len()..];
        let eol = after.find('\n').unwrap_or(after.len());
        let embed_next = past_embed_line(&after[eol..]).is_some();
        if upstream && !embed_next {
            out.push_str(&kargs.join(" "));
            rest = after;
            continue;
        }
        let line = kargs_line(path, &after[..eol], kargs)?;
        agree_kargs(line_kargs, &line, path)?;
        areas.push(EmbedArea {
            path: path.to_string(),
            offset: out.len() as u64,
        });
        out.push_str(&line);
        out.push('\n');
        out.push_str(&"#".repeat(KARG_EMBED_PAD));
        out.push_str(KARG_EMBED_MARKER);
        rest = &after[eol..];
        // The template's own embed area line is replaced by ours.
        if let Some(past) = past_embed_line(rest) {
            rest = past;
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// When `s` is a newline and then a karg embed area line, what follows
/// that line (from its own newline on).
fn past_embed_line(s: &str) -> Option<&str> {
    let next = s.strip_prefix('\n')?;
    let end = next.find('\n').unwrap_or(next.len());
    if is_embed_line(next[..end].trim_end_matches('\r')) {
        Some(&next[end..])
    } else {
        None
    }
}

/// The kargs line of the template at `path`: our kargs but those the
/// template puts after its placeholder (`after_ph`, to its line's end),
/// then those.
fn kargs_line(path: &str, after_ph: &str, kargs: &[String]) -> Result<String> {
    let fixed: Vec<&str> = after_ph.split_whitespace().collect();
    if fixed.iter().any(|k| k.contains("@@")) {
        bail!(
            "live template {}: another placeholder follows {PH_KARGS} on its line ({:?})",
            path,
            after_ph
        );
    }
    let mut line: Vec<&str> = kargs
        .iter()
        .map(String::as_str)
        .filter(|k| !fixed.contains(k))
        .collect();
    line.extend(fixed.iter().copied());
    let line = line.join(" ");
    if line.len() + KARG_EMBED_PAD > KARG_EMBED_MAX {
        bail!(
            "the live kernel arguments are {} bytes long; coreos-installer accepts karg embed areas of at most {KARG_EMBED_MAX} bytes, so they must stay under {} bytes: shorten image.json extra-kargs",
            line.len(),
            KARG_EMBED_MAX - KARG_EMBED_PAD
        );
    }
    Ok(line)
}

/// Check the kargs `line` of the template at `this` against the first one
/// (`line_kargs`, kept with its file), or keep it as the first.
fn agree_kargs(line_kargs: &mut Option<(String, String)>, line: &str, this: &str) -> Result<()> {
    if let Some((first, path)) = line_kargs.as_ref() {
        if *first != line {
            bail!(
                "live templates {path} and {} give different kernel arguments ({first:?} and {line:?}); coreos/kargs.json has one default, so their kargs lines must agree",
                this
            );
        }
        return Ok(());
    }
    *line_kargs = Some((line.to_string(), this.to_string()));
    Ok(())
}

fn leftover_placeholder(s: &str) -> Option<String> {
    let mut rest = s;
    while let Some(i) = rest.find("@@") {
        let after = &rest[i + 2..];
        if let Some(j) = after.find("@@") {
            let name = &after[..j];
            if !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '-' || c == '_')
            {
                return Some(format!("@@{name}@@"));
            }
        }
        rest = after;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn volume_id_is_cut_to_32() {
        assert_eq!(volume_id("rhcos", "418.94.1"), "rhcos-418.94.1");
        let long = volume_id("fedora-coreos", "40.20240101.3.0-extra-long-suffix");
        assert_eq!(long.len(), VOLUME_ID_MAX);
        assert_eq!(long, "fedora-coreos-40.20240101.3.0-ex");
    }

    #[test]
    fn kargs_follow_spec() {
        let metal = s(&[
            "rw",
            "$ignition_firstboot",
            "mitigations=auto,nosmt",
            "ignition.platform.id=metal",
            "console=ttyS0,115200n8",
            "ostree=/ostree/boot.1/x/y/0",
        ]);
        assert_eq!(
            live_kargs(&metal, "rhcos-1").unwrap(),
            s(&[
                "rw",
                "mitigations=auto,nosmt",
                "coreos.liveiso=rhcos-1",
                "ignition.firstboot",
                "ignition.platform.id=metal"
            ])
        );
    }

    #[test]
    fn initramfs_formats() {
        let mut w = cpio::Writer::new(Vec::new(), 0);
        w.file("init", 0o755, b"#!/bin/sh\n").unwrap();
        let raw = w.finish().unwrap();
        assert_eq!(check_initramfs(&raw, "x").unwrap(), InitrdFormat::Cpio);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &raw).unwrap();
        let gz = gz.finish().unwrap();
        assert_eq!(check_initramfs(&gz, "x").unwrap(), InitrdFormat::Gzip);
        let zst = zstd::encode_all(&raw[..], 3).unwrap();
        assert_eq!(check_initramfs(&zst, "x").unwrap(), InitrdFormat::Zstd);
        let mut xz = xz2::write::XzEncoder::new(Vec::new(), 1);
        std::io::Write::write_all(&mut xz, &raw).unwrap();
        let xz = xz.finish().unwrap();
        assert_eq!(check_initramfs(&xz, "x").unwrap(), InitrdFormat::Xz);
        let e = check_initramfs(b"not an initramfs", "the OS's initramfs")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a cpio archive"), "{e}");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, b"hello world, no cpio").unwrap();
        let e = format!(
            "{:#}",
            check_initramfs(&gz.finish().unwrap(), "i").unwrap_err()
        );
        assert!(e.contains("holds no newc cpio"), "{e}");
        assert!(check_initramfs(&gz_trunc(), "i").is_err());
    }

    fn gz_trunc() -> Vec<u8> {
        vec![0x1f, 0x8b, 8, 0]
    }

    #[test]
    fn addon_is_a_gzip_cpio_with_the_live_files() {
        let a = live_initramfs_addon(
            "1.2.3",
            &features_json(None),
            b"stream-hash sha256 2097152\n",
            0,
        )
        .unwrap();
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(&a[..])
            .read_to_end(&mut raw)
            .unwrap();
        assert_eq!(
            cpio::list(&raw).unwrap(),
            [
                "etc",
                "etc/coreos",
                LIVE_INITRAMFS_STAMP,
                FEATURES_IN_INITRAMFS,
                WANT_ROOTFS
            ]
        );
        // Each part starts and the whole ends on a 4-byte boundary, NUL-padded.
        let joined = live_initramfs(b"abcde", &a);
        assert_eq!(&joined[..8], b"abcde\0\0\0");
        assert_eq!(&joined[8..8 + a.len()], &a[..]);
        assert_eq!(joined.len() % INITRD_ALIGN, 0);
        assert!(joined[8 + a.len()..].iter().all(|&b| b == 0));
        assert_eq!(live_initramfs(b"abcd", b"wxyz"), b"abcdwxyz");
        assert_eq!(
            a,
            live_initramfs_addon(
                "1.2.3",
                &features_json(None),
                b"stream-hash sha256 2097152\n",
                0
            )
            .unwrap(),
            "reproducible"
        );
    }

    #[test]
    fn features_and_stream_hash() {
        let keys = config_directives(b"# c\nstream: name\nimage-url: URL\nconsole: [a, b]\n", "x")
            .unwrap();
        assert_eq!(keys, ["stream", "image-url", "console"]);
        let f: serde_json::Value = serde_json::from_slice(&features_json(Some(&keys))).unwrap();
        assert_eq!(
            f,
            json!({"installer-config": true, "installer-config-directives": {"console": true, "image-url": true, "stream": true}, "live-initrd-network": true})
        );
        // osbuild's json.dumps(indent=2, sort_keys=True) + "\n"
        let text = String::from_utf8(features_json(Some(&keys))).unwrap();
        assert!(text.starts_with("{\n  \"installer-config\": true,\n  \"installer-config-directives\": {\n    \"console\": true,"), "{text}");
        assert!(text.ends_with("}\n"));
        assert!(config_directives(b"- a\n- b\n", "x").is_err());
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("r");
        let data: Vec<u8> = (0..STREAM_HASH_CHUNK * 2 + 5)
            .map(|i| (i % 251) as u8)
            .collect();
        std::fs::write(&p, &data).unwrap();
        let h = String::from_utf8(stream_hash(&p).unwrap()).unwrap();
        let lines: Vec<&str> = h.lines().collect();
        assert_eq!(lines[0], "stream-hash sha256 2097152");
        assert_eq!(lines.len(), 4);
        use sha2::Digest;
        assert_eq!(
            lines[3],
            hex::encode(sha2::Sha256::digest(&data[STREAM_HASH_CHUNK * 2..]))
        );
        assert_eq!(
            lines[1],
            hex::encode(sha2::Sha256::digest(&data[..STREAM_HASH_CHUNK]))
        );
    }

    #[test]
    fn render_embed_areas() {
        let t = builtin_templates("redhat", "RHCOS");
        let kargs = s(&["coreos.liveiso=rhcos-1", "ignition.firstboot"]);
        let r = render(&t, "rhcos-1", "1", &kargs).unwrap();
        assert_eq!(r.areas.len(), 2);
        assert_eq!(r.areas[0].path, "EFI/redhat/grub.cfg");
        assert_eq!(r.areas[1].path, "isolinux/isolinux.cfg");
        for a in &r.areas {
            let f = r.files.iter().find(|f| f.path == a.path).unwrap();
            let at = a.offset as usize;
            let region = &f.data[at..at + r.area_size()];
            let want = format!("{}\n{}", r.kargs, "#".repeat(KARG_EMBED_PAD - 1));
            assert_eq!(region, want.as_bytes());
            let tail = std::str::from_utf8(&f.data[at + r.area_size()..]).unwrap();
            assert!(
                tail.starts_with(&format!("#{KARG_EMBED_MARKER}\n")),
                "{tail}"
            );
        }
        let grub = String::from_utf8(r.files[0].data.clone()).unwrap();
        assert!(grub.contains("--label 'rhcos-1'"), "{grub}");
        let j: serde_json::Value = serde_json::from_slice(&r.kargs_json()).unwrap();
        assert_eq!(j["default"], r.kargs);
        assert_eq!(j["size"], r.kargs.len() + 1 + 1023);
        assert_eq!(j["files"][1]["offset"], r.areas[1].offset);
    }

    #[test]
    fn templates_are_placed_per_firmware() {
        let t = |p: &str| Template {
            path: p.into(),
            data: b"x".to_vec(),
        };
        let all = vec![
            t("EFI/redhat/grub.cfg"),
            t("EFI/BOOT/grub.cfg"),
            t("isolinux/isolinux.cfg"),
            t("zipl.prm"),
            t("README.txt"),
        ];
        let paths = |v: Vec<Template>| v.into_iter().map(|t| t.path).collect::<Vec<_>>();
        assert_eq!(
            paths(place_templates(all.clone(), false).unwrap()),
            [
                "EFI/redhat/grub.cfg",
                "EFI/BOOT/grub.cfg",
                "isolinux/isolinux.cfg",
                "README.txt"
            ]
        );
        assert_eq!(
            paths(place_templates(all, true).unwrap()),
            [OF_GRUB_CFG, "README.txt"]
        );
        let e = place_templates(vec![t("isolinux/isolinux.cfg")], true)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("EFI/<vendor>/grub.cfg") && e.contains("none"),
            "{e}"
        );
    }

    #[test]
    fn templates_follow_the_os_vendor_dir() {
        let d = tempfile::tempdir().unwrap();
        let live = d.path();
        std::fs::create_dir_all(live.join("EFI/fedora")).unwrap();
        std::fs::create_dir_all(live.join("isolinux")).unwrap();
        std::fs::write(
            live.join("EFI/fedora/grub.cfg"),
            "linux x @@KERNEL-ARGS@@\n",
        )
        .unwrap();
        std::fs::write(
            live.join("isolinux/isolinux.cfg"),
            "append @@KERNEL-ARGS@@\n",
        )
        .unwrap();
        std::fs::write(live.join("isolinux/splash.png"), [0x89, b'P', 0xff, 0xfe]).unwrap();
        let t = read_templates(live, "redhat").unwrap();
        let paths: Vec<&str> = t.iter().map(|t| t.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "EFI/redhat/grub.cfg",
                "isolinux/isolinux.cfg",
                "isolinux/splash.png"
            ]
        );
        let r = render(&t, "v", "1", &s(&["a=b"])).unwrap();
        // Binary files pass unchanged.
        assert_eq!(r.files[2].data, [0x89, b'P', 0xff, 0xfe]);
        assert_eq!(r.areas.len(), 2);
        assert_eq!(r.areas[0].offset, "linux x ".len() as u64);
    }

    /// Upstream's templates (fedora-coreos-config `live/`, rendered by osbuild
    /// `org.osbuild.coreos.live-artifacts.mono`): fixed kargs after the
    /// placeholder, the embed area line already in the file.
    #[test]
    fn render_upstream_templates() {
        let pad = format!("{}{KARG_EMBED_MARKER}", "#".repeat(1024));
        let grub = format!("# the only placeholder is @@KERNEL-ARGS@@; the next line is the area\nmenuentry 'X (Live)' {{\n\tlinux /images/pxeboot/vmlinuz @@KERNEL-ARGS@@ ignition.firstboot ignition.platform.id=metal\n{pad}\n\tinitrd /images/pxeboot/initrd.img /images/ignition.img\n}}\n");
        let isolinux = format!("label linux\n  append initrd=/images/pxeboot/initrd.img,/images/ignition.img @@KERNEL-ARGS@@ ignition.firstboot ignition.platform.id=metal\n{pad}\n\nlabel check\n");
        let t = vec![
            Template {
                path: "EFI/redhat/grub.cfg".into(),
                data: grub.into_bytes(),
            },
            Template {
                path: "isolinux/isolinux.cfg".into(),
                data: isolinux.into_bytes(),
            },
        ];
        // live_kargs already ends with the two the template has: not repeated.
        let k = live_kargs(
            &s(&[
                "rw",
                "$ignition_firstboot",
                "mitigations=auto,nosmt",
                "ignition.platform.id=metal",
            ]),
            "testos-1",
        )
        .unwrap();
        let r = render(&t, "testos-1", "1", &k).unwrap();
        assert_eq!(r.kargs, "rw mitigations=auto,nosmt coreos.liveiso=testos-1 ignition.firstboot ignition.platform.id=metal");
        assert_eq!(r.areas.len(), 2, "the comment is no embed area");
        for f in &r.files {
            let text = std::str::from_utf8(&f.data).unwrap();
            assert_eq!(text.matches(KARG_EMBED_MARKER).count(), 1, "{text}");
            assert!(!text.contains(PH_KARGS), "{text}");
            let a = r.areas.iter().find(|a| a.path == f.path).unwrap();
            let at = a.offset as usize;
            assert_eq!(
                &f.data[at..at + r.kargs.len() + 1],
                format!("{}\n", r.kargs).as_bytes()
            );
            assert!(text[at + r.kargs.len() + 1..].starts_with(&pad), "{text}");
        }
        let iso = std::str::from_utf8(&r.files[1].data).unwrap();
        assert!(iso.ends_with(&format!("{pad}\n\nlabel check\n")), "{iso}");
    }

    #[test]
    fn render_rejects_bad_templates() {
        let t = |d: &str| {
            vec![Template {
                path: "isolinux/isolinux.cfg".into(),
                data: d.as_bytes().to_vec(),
            }]
        };
        let k = s(&["a"]);
        let e = render(&t("append @@KERNEL-ARGS@@ @@X@@\n"), "v", "1", &k).unwrap_err();
        assert!(e.to_string().contains("another placeholder"), "{e}");
        // Two menus whose fixed kargs differ cannot share one default.
        let two = vec![
            Template {
                path: "a.cfg".into(),
                data: b"x @@KERNEL-ARGS@@ quiet\n".to_vec(),
            },
            Template {
                path: "b.cfg".into(),
                data: b"y @@KERNEL-ARGS@@\n".to_vec(),
            },
        ];
        let e = render(&two, "v", "1", &k).unwrap_err();
        assert!(e.to_string().contains("a.cfg and b.cfg"), "{e}");
        let e = render(&t("append x\n"), "v", "1", &k).unwrap_err();
        assert!(e.to_string().contains("no @@KERNEL-ARGS@@"), "{e}");
        let e = render(&t("append @@KERNEL-ARGS@@\n@@FOO@@\n"), "v", "1", &k).unwrap_err();
        assert!(e.to_string().contains("@@FOO@@"), "{e}");
        let long = s(&[&"x".repeat(1100)]);
        assert!(render(&t("append @@KERNEL-ARGS@@\n"), "v", "1", &long).is_err());
    }
}
