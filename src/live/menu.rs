//! The live boot menus (docs/contract.md §5): the OS's `live/` templates or our built-in
//! ISOLINUX and GRUB ones, placed per firmware, with their placeholders
//! filled and the karg embed areas that `coreos/kargs.json` describes
//! (coreos-installer `src/live/embed.rs` rewrites them).
use anyhow::{bail, Context, Result};
use serde_json::json;
use std::path::{Path, PathBuf};

/// `#` characters of a karg embed area line after the kernel arguments
/// (docs/contract.md §5; coreos-installer `src/live/embed.rs`).
pub const KARG_EMBED_PAD: usize = 1024;
/// Marker after the pad of a karg embed area line.
pub const KARG_EMBED_MARKER: &str = " COREOS_KARG_EMBED_AREA";
/// coreos-installer refuses karg embed areas larger than this.
pub const KARG_EMBED_MAX: usize = 2048;
/// Placeholders of the OS's `live/` menu templates (cosa `live/`).
pub const PH_KARGS: &str = "@@KERNEL-ARGS@@";
pub const PH_VOLID: &str = "@@VOLUME-ID@@";
pub const PH_VERSION: &str = "@@VERSION@@";
/// Menu files of the built-in templates (relative to the ISO root).
pub const ISOLINUX_CFG: &str = "isolinux/isolinux.cfg";

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

/// Built-in menus (docs/contract.md §5) for an OS without `live/` templates: ISOLINUX
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
    /// `coreos/kargs.json` (docs/contract.md §5): default kargs, areas sorted by path,
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
    use crate::live::kargs::live_kargs;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
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
