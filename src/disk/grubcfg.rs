//! GRUB configuration texts (docs/contract.md §2): the config on the boot filesystem
//! (`/grub2/grub.cfg`), the platform console snippet (`/grub2/console.cfg`),
//! the stub config next to the vendor GRUB on the ESP, and the Boot Loader
//! Specification (BLS, Type #1) entries ostree writes under
//! `/boot/loader/entries/`. Pure functions, no I/O.
//!
//! The logic follows what CoreOS boots with (coreos-assembler `src/grub.cfg`,
//! bootupd `src/grub2/grub-static-{pre,efi}.cfg`, fedora-coreos-config's
//! Ignition first-boot glue): the boot filesystem is found by its label
//! `boot`, `console.cfg` is sourced, `$ignition_firstboot` is set while the
//! stamp file `/ignition.firstboot` exists, and the BLS entries are booted.
use anyhow::{bail, Result};

/// Label of the boot filesystem both GRUBs search for (layout table).
pub const BOOT_LABEL: &str = "boot";
/// Directory of the GRUB config on the boot filesystem.
pub const GRUB_DIR: &str = "grub2";
/// First and last line of `console.cfg` (cosa / docs/contract.md §2); the first is also
/// the line a cosa-era `grub-script` marks its console place with, so it
/// lives with image.json's reader.
pub use crate::oscontainer::config::{is_console_start, CONSOLE_START};
pub const CONSOLE_END: &str = "# CONSOLE-SETTINGS-END";
/// Stamp file on the boot filesystem that marks the first boot (Ignition).
pub const FIRSTBOOT_STAMP: &str = "ignition.firstboot";
/// The RAID1 device CoreOS uses for a mirrored /boot (Ignition
/// `boot_device.mirror`); when present GRUB must read the array, not a member.
const MD_BOOT: &str = "md/md-boot";

/// One BLS Type #1 entry (`key value` lines).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BlsEntry {
    pub title: String,
    pub version: String,
    /// Kernel path as written by ostree (e.g. `/boot/ostree/<os>-<csum>/vmlinuz-<kver>`).
    pub linux: String,
    /// Initramfs paths, in order.
    pub initrd: Vec<String>,
    /// Kernel command line, verbatim (may hold `$ignition_firstboot`).
    pub options: String,
    /// Every other key (`aboot`, `abootcfg`, `devicetree`, `grub_users`, …),
    /// in file order.
    pub other: Vec<(String, String)>,
}

impl BlsEntry {
    /// Parse an entry. Blank lines and `#` comments are skipped; `initrd` and
    /// `options` may repeat (BLS allows both); an entry without `linux` is
    /// rejected.
    pub fn parse(text: &str) -> Result<Self> {
        let mut e = BlsEntry::default();
        let mut options: Vec<String> = Vec::new();
        for (n, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (key, value) = match line.find(char::is_whitespace) {
                Some(i) => (&line[..i], line[i..].trim()),
                None => (line, ""),
            };
            match key {
                "title" => e.title = value.to_string(),
                "version" => e.version = value.to_string(),
                "linux" => e.linux = value.to_string(),
                "initrd" => e
                    .initrd
                    .extend(value.split_whitespace().map(str::to_string)),
                "options" => {
                    if !value.is_empty() {
                        options.push(value.to_string())
                    }
                }
                _ => {
                    if key.chars().any(|c| c.is_control()) {
                        bail!("BLS entry line {}: bad key {key:?}", n + 1);
                    }
                    e.other.push((key.to_string(), value.to_string()))
                }
            }
        }
        e.options = options.join(" ");
        if e.linux.is_empty() {
            bail!("BLS entry has no `linux` line (not a boot entry):\n{text}");
        }
        Ok(e)
    }

    /// Render in the order ostree writes (title, version, options, linux,
    /// initrd), then the other keys. Empty fields are left out.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let mut kv = |k: &str, v: &str| {
            if !v.is_empty() {
                s.push_str(k);
                s.push(' ');
                s.push_str(v);
                s.push('\n');
            }
        };
        kv("title", &self.title);
        kv("version", &self.version);
        kv("options", &self.options);
        kv("linux", &self.linux);
        for i in &self.initrd {
            kv("initrd", i);
        }
        for (k, v) in &self.other {
            kv(k, v);
        }
        s
    }
}

/// Quote a string as one GRUB script word: single quotes, with each `'`
/// written as `'\''` (close, escaped quote, reopen), as in POSIX sh.
pub fn grub_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A path as one GRUB word: as is when it holds nothing GRUB's lexer treats
/// specially (the normal case for ostree paths), else quoted.
fn grub_word(p: &str) -> String {
    let plain = !p.is_empty()
        && p.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+,:=@%~".contains(c));
    if plain {
        p.to_string()
    } else {
        grub_quote(p)
    }
}

/// One explicit `menuentry` for a GRUB without the `blscfg` command.
fn menuentry(e: &BlsEntry) -> String {
    let title = if e.title.trim().is_empty() {
        format!("{} {}", e.linux, e.version)
    } else {
        e.title.clone()
    };
    let mut s = format!("  menuentry {} {{\n", grub_quote(title.trim()));
    // Options verbatim and unquoted: `$ignition_firstboot` is expanded by
    // GRUB when the entry runs, to nothing when it is unset. (A BLS value is
    // one line; line breaks are flattened only for safety.)
    let options = e.options.replace(['\n', '\r'], " ");
    s.push_str(&format!(
        "    linux {} {}\n",
        grub_word(&e.linux),
        options.trim()
    ));
    if !e.initrd.is_empty() {
        let words: Vec<String> = e.initrd.iter().map(|i| grub_word(i)).collect();
        s.push_str(&format!("    initrd {}\n", words.join(" ")));
    }
    s.push_str("  }\n");
    s
}

/// Explicit `menuentry`s for the BLS entries (a GRUB without `blscfg`).
pub fn menuentries(entries: &[BlsEntry]) -> String {
    if entries.is_empty() {
        return "  echo \"bootimage-gen: this GRUB has no blscfg and no boot entries were written\"\n"
            .to_string();
    }
    entries.iter().map(menuentry).collect()
}

/// The GRUB config at `/grub2/grub.cfg` on the boot filesystem.
///
/// Both bootloaders arrive here with `$root` = the boot filesystem and
/// `$prefix` = `($root)/grub2`: the BIOS core image from its embedded config
/// (see `bios.rs`), UEFI GRUB from [`efi_stub_cfg`]. When the OS's GRUB has
/// the `blscfg` command (Fedora/RHEL GRUB) the BLS entries on the disk are
/// booted as they are; otherwise (upstream GRUB, e.g. Debian's) the given
/// `entries` are written as explicit menu entries, so this text must be
/// rendered again whenever the entries change (e.g. per-platform kargs).
pub fn boot_grub_cfg(entries: &[BlsEntry]) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "\
# GRUB configuration of the CoreOS boot filesystem (written by bootimage-gen).
# BIOS GRUB (embedded config of its core image) and UEFI GRUB (stub grub.cfg
# on the ESP) both come here with $root = the filesystem labelled
# '{BOOT_LABEL}' and $prefix = ($root)/{GRUB_DIR}.
set pager=1

# A mirrored /boot (RAID1, superblock 1.0): read the array, not one member.
if [ -d ({MD_BOOT})/{GRUB_DIR} ]; then
  set root={MD_BOOT}
  set prefix=($root)/{GRUB_DIR}
fi

# Console settings of the platform (serial for cloud images).
if [ -f $prefix/console.cfg ]; then
  source $prefix/console.cfg
fi

set timeout_style=menu
set timeout=1
set default=0

# First boot: while the stamp file exists Ignition must run. The stamp may
# set ignition_network_kcmdline (e.g. by coreos-installer --firstboot-args).
set ignition_firstboot=\"\"
if [ -f ($root)/{FIRSTBOOT_STAMP} ]; then
  set ignition_network_kcmdline=\"\"
  source ($root)/{FIRSTBOOT_STAMP}
  set ignition_firstboot=\"{FIRSTBOOT_STAMP} ${{ignition_network_kcmdline}}\"
fi

# Settings of the machine's owner.
if [ -f $prefix/user.cfg ]; then
  source $prefix/user.cfg
fi

# Called by the entries blscfg generates.
function load_video {{
  insmod all_video
}}

# Fedora/RHEL GRUB has the blscfg command: it makes the menu from the BLS
# entries under /loader/entries. A GRUB command takes precedence over a
# function of the same name (and `insmod` reports no failure), so this
# function only runs when the OS's GRUB has no blscfg; then the entries
# below are used.
if [ -f $prefix/$grub_cpu-$grub_platform/blscfg.mod ]; then
  insmod blscfg
fi
set bootimage_no_blscfg=0
function blscfg {{
  set bootimage_no_blscfg=1
}}
blscfg
if [ \"$bootimage_no_blscfg\" = 1 ]; then
"
    ));
    if entries.is_empty() {
        s.push_str(
            "  echo \"bootimage-gen: this GRUB has no blscfg and no boot entries were written\"\n",
        );
    }
    for e in entries {
        s.push_str(&menuentry(e));
    }
    s.push_str("fi\n");
    s
}

/// A cosa-era OS's `grub-script` (image.json) as the disk's grub.cfg: the
/// platform's GRUB console commands inserted after the
/// `# CONSOLE-SETTINGS-START` line, the rest as it is (cosa rhcos-4.16
/// `create_disk.sh` `install_grub_cfg`, `printf "%s\n"` of the script).
pub fn from_script(script: &str, grub_commands: &[String]) -> String {
    let mut out = String::with_capacity(script.len() + 128);
    for line in script.trim_end_matches('\n').split('\n') {
        out.push_str(line);
        out.push('\n');
        if is_console_start(line) {
            for c in grub_commands {
                out.push_str(c);
                out.push('\n');
            }
        }
    }
    out
}

/// `/grub2/console.cfg`: the platform's GRUB console commands between the
/// markers (docs/contract.md §2); no commands gives just the two marker lines.
pub fn console_cfg(grub_commands: &[String]) -> String {
    let mut s = String::from(CONSOLE_START);
    s.push('\n');
    for c in grub_commands {
        let c = c.trim_end();
        if !c.is_empty() {
            s.push_str(c);
            s.push('\n');
        }
    }
    s.push_str(CONSOLE_END);
    s.push('\n');
    s
}

/// The `grub.cfg` that goes on the ESP next to the vendor `grubx64.efi` (its
/// built-in prefix is that directory): find the boot filesystem by label,
/// point `$prefix` at its `/grub2` and continue with the config there.
/// `root` and `prefix` are exported GRUB variables, so they survive
/// `configfile`'s new context.
pub fn efi_stub_cfg() -> String {
    format!(
        "\
# UEFI GRUB stub (written by bootimage-gen): hand over to the GRUB config of
# the boot filesystem.
if [ -d ({MD_BOOT})/{GRUB_DIR} ]; then
  set root={MD_BOOT}
else
  search --no-floppy --label {BOOT_LABEL} --set root
fi
set prefix=($root)/{GRUB_DIR}
configfile $prefix/grub.cfg
"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::process::{Command, Stdio};

    const OSTREE_ENTRY: &str = "\
title Test OS 418.94.202611210000-0 (ostree:0)
version 1
options rw $ignition_firstboot ignition.platform.id=qemu console=tty0 console=ttyS0,115200n8 ostree=/ostree/boot.1/testos/0123abcd/0
linux /boot/ostree/testos-0123abcd/vmlinuz-6.1.0-56-amd64
initrd /boot/ostree/testos-0123abcd/initramfs-6.1.0-56-amd64.img
aboot /ostree/deploy/testos/deploy/0123.0/usr/lib/ostree-boot/aboot.img
";

    /// Run grub-script-check (grub-common) on a config: a precondition of
    /// these tests (a host without it fails them rather than passing them
    /// unchecked).
    fn script_check(cfg: &str) {
        assert!(
            crate::util::cmd::have("grub-script-check"),
            "grub-script-check missing: install grub-common to run this test"
        );
        let mut c = Command::new("grub-script-check")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(cfg.as_bytes()).unwrap();
        let o = c.wait_with_output().unwrap();
        assert!(
            o.status.success(),
            "grub-script-check rejected:\n{cfg}\n{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }

    #[test]
    fn bls_parse_and_render_round_trip() {
        let e = BlsEntry::parse(OSTREE_ENTRY).unwrap();
        assert_eq!(e.title, "Test OS 418.94.202611210000-0 (ostree:0)");
        assert_eq!(e.version, "1");
        assert!(e
            .options
            .starts_with("rw $ignition_firstboot ignition.platform.id=qemu"));
        assert_eq!(
            e.linux,
            "/boot/ostree/testos-0123abcd/vmlinuz-6.1.0-56-amd64"
        );
        assert_eq!(
            e.initrd,
            vec!["/boot/ostree/testos-0123abcd/initramfs-6.1.0-56-amd64.img"]
        );
        assert_eq!(e.other.len(), 1);
        assert_eq!(e.other[0].0, "aboot");
        assert_eq!(e.render(), OSTREE_ENTRY);
        assert_eq!(BlsEntry::parse(&e.render()).unwrap(), e);
    }

    #[test]
    fn bls_parse_tolerates_comments_tabs_and_repeats() {
        let e = BlsEntry::parse(
            "# comment\n\ntitle\tX  Y\nlinux /vmlinuz\ninitrd /a.img\ninitrd /b.img /c.img\noptions a=1\noptions  b=2\n",
        )
        .unwrap();
        assert_eq!(e.title, "X  Y");
        assert_eq!(e.initrd, vec!["/a.img", "/b.img", "/c.img"]);
        assert_eq!(e.options, "a=1 b=2");
        assert!(BlsEntry::parse("title nothing to boot\n").is_err());
    }

    #[test]
    fn grub_script_gets_the_console_commands() {
        let script = "set timeout=1\n# CONSOLE-SETTINGS-START\n# CONSOLE-SETTINGS-END\nblscfg\n";
        assert_eq!(from_script(script, &[]), script);
        let c = from_script(
            script,
            &[
                "serial --speed=115200".into(),
                "terminal_input serial console".into(),
            ],
        );
        assert_eq!(
            c,
            "set timeout=1\n# CONSOLE-SETTINGS-START\nserial --speed=115200\nterminal_input serial console\n# CONSOLE-SETTINGS-END\nblscfg\n"
        );
        // printf "%s\n": one final newline whatever the script ends with.
        assert_eq!(
            from_script("a\n# CONSOLE-SETTINGS-START", &[]),
            "a\n# CONSOLE-SETTINGS-START\n"
        );
    }

    #[test]
    fn console_cfg_has_the_markers() {
        assert_eq!(
            console_cfg(&[]),
            "# CONSOLE-SETTINGS-START\n# CONSOLE-SETTINGS-END\n"
        );
        let cmds: Vec<String> = [
            "serial --speed=115200",
            "terminal_input serial console",
            "terminal_output serial console",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let c = console_cfg(&cmds);
        assert_eq!(
            c,
            "# CONSOLE-SETTINGS-START\nserial --speed=115200\nterminal_input serial console\nterminal_output serial console\n# CONSOLE-SETTINGS-END\n"
        );
        script_check(&c);
    }

    #[test]
    fn boot_cfg_logic_and_syntax() {
        let e = BlsEntry::parse(OSTREE_ENTRY).unwrap();
        let mut e2 = e.clone();
        e2.title = "It's \"quoted\" & odd".into();
        e2.initrd.push("/boot/extra.img".into());
        for entries in [vec![], vec![e.clone()], vec![e.clone(), e2]] {
            let cfg = boot_grub_cfg(&entries);
            script_check(&cfg);
            assert!(cfg.contains("source $prefix/console.cfg"));
            assert!(cfg.contains("if [ -f ($root)/ignition.firstboot ]; then"));
            assert!(cfg.contains("source ($root)/ignition.firstboot"));
            assert!(cfg.contains(
                "set ignition_firstboot=\"ignition.firstboot ${ignition_network_kcmdline}\""
            ));
            assert!(cfg.contains("function blscfg {\n  set bootimage_no_blscfg=1\n}\nblscfg\n"));
            assert!(cfg.contains("if [ \"$bootimage_no_blscfg\" = 1 ]; then\n"));
            assert!(cfg.contains("set timeout=1\n"));
            assert!(cfg.contains("set default=0\n"));
            assert_eq!(cfg.matches("menuentry ").count(), entries.len());
        }
        let cfg = boot_grub_cfg(std::slice::from_ref(&e));
        // The variable stays unquoted on the linux line.
        assert!(cfg.contains(
            "    linux /boot/ostree/testos-0123abcd/vmlinuz-6.1.0-56-amd64 rw $ignition_firstboot ignition.platform.id=qemu"
        ));
        assert!(
            cfg.contains("    initrd /boot/ostree/testos-0123abcd/initramfs-6.1.0-56-amd64.img\n")
        );
        assert!(cfg.contains("menuentry 'Test OS 418.94.202611210000-0 (ostree:0)' {"));
        // Quotes in titles are escaped.
        assert_eq!(grub_quote("It's"), r"'It'\''s'");
        // Paths GRUB would split are quoted.
        let odd = BlsEntry {
            linux: "/vm linuz".into(),
            options: "a=1\nb=2".into(),
            ..Default::default()
        };
        let cfg = boot_grub_cfg(&[odd]);
        script_check(&cfg);
        assert!(cfg.contains("    linux '/vm linuz' a=1 b=2\n"));
    }

    #[test]
    fn efi_stub_finds_boot_by_label() {
        let s = efi_stub_cfg();
        script_check(&s);
        assert!(s.contains("search --no-floppy --label boot --set root\n"));
        assert!(s.contains("set prefix=($root)/grub2\n"));
        assert!(s.trim_end().ends_with("configfile $prefix/grub.cfg"));
    }
}
