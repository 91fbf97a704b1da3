//! The appliance's own `/init`, and the words it speaks: the shell script
//! that mounts the shares, keeps a heartbeat, runs the job and powers off,
//! with the constants both sides of the job channel agree on (the line
//! prefix [`MARK`], the kernel modules, the 9p message size). In: nothing
//! but these constants; out: the script's text, which `appliance.rs` packs
//! into the appliance (and hashes into its cache key) and whose lines
//! `watch.rs` reads back.

/// Bump when the appliance's make-up changes in a way the key does not see.
pub(super) const APPLIANCE_FORMAT: &str = "1";
/// Kernel modules the job needs beyond what supermin's init loads.
const MODULES: &[&str] = &["9pnet_virtio", "9p", "loop", "xfs", "ext4", "squashfs"];
/// Prefix of the lines the appliance itself writes on the job channel.
pub(super) const MARK: &str = "@@bootimage-gen ";
/// Seconds between heartbeats.
const HEARTBEAT_SECS: u32 = 5;
/// 9p message size: large messages make big sequential I/O cheaper.
const MSIZE: u32 = 1 << 20;
/// Env var that makes the appliance hang before the job (tests the watchdog).
pub const DEBUG_HANG_ENV: &str = "BOOTIMAGE_GEN_VM_DEBUG_HANG";

/// The appliance's /init: mount the shares, keep a heartbeat, run the job,
/// power off.
pub(super) fn init_script() -> String {
    format!(
        r#"#!/bin/sh
# bootimage-gen appliance init (written by bootimage-gen; format {APPLIANCE_FORMAT})
mkdir -p /proc /sys /dev /tmp /run
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
chan=/dev/ttyS1
say() {{ echo "{MARK}$*" > $chan; }}
off() {{ sync; echo o > /proc/sysrq-trigger; sleep 10; }}
say up
for a in $(cat /proc/cmdline); do
  case "$a" in
    bootimage_gen.work=*) work="${{a#*=}}" ;;
    bootimage_gen.repo=*) repo="${{a#*=}}" ;;
    bootimage_gen.hang=*) hang="${{a#*=}}" ;;
    bootimage_gen.ro=*) ro="$ro ${{a#*=}}" ;;
  esac
done
for m in {modules}; do modprobe "$m" 2>/dev/null; done
mkdir -p "$work" "$repo"
if ! mount -t 9p -o trans=virtio,version=9p2000.L,msize={MSIZE},cache=mmap work "$work"; then
  say "error mounting the work directory share"; off
fi
if ! mount -t 9p -o trans=virtio,version=9p2000.L,msize={MSIZE},ro repo "$repo"; then
  say "error mounting the OS repository share"; off
fi
for s in $ro; do
  mkdir -p "${{s#*:}}"
  if ! mount -t 9p -o trans=virtio,version=9p2000.L,msize={MSIZE},ro "${{s%%:*}}" "${{s#*:}}"; then
    say "error mounting the ${{s%%:*}} share"; off
  fi
done
( while :; do say alive; sleep {HEARTBEAT_SECS}; done ) &
beat=$!
if [ -n "$hang" ]; then
  kill $beat
  say "hanging on purpose ({DEBUG_HANG_ENV})"
  while :; do sleep 1000; done
fi
mkdir -p "$work/vm/tmp"
TMPDIR="$work/vm/tmp" PATH=/usr/sbin:/usr/bin:/sbin:/bin \
  "$work/vm/bootimage-gen" vm-job "$work/vm/job.json" "$work/vm/result.json" > $chan 2>&1
say "job exited $?"
kill $beat
for s in $ro; do umount "${{s#*:}}"; done
umount "$repo" "$work"
off
"#,
        modules = MODULES.join(" "),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_script_names_every_module_and_the_channel() {
        let s = init_script();
        for m in MODULES {
            assert!(s.contains(m), "{m}");
        }
        assert!(s.contains("vm-job"));
        assert!(s.contains("/dev/ttyS1"));
    }
}
