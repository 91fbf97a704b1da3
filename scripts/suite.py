#!/usr/bin/env python3
"""The test suite's runner (`make test`): compile every test target once,
build the fixtures once, then run the targets side by side on the machine's
cores, and end with a table of each target's wall time and the whole run's.

    scripts/suite.py [--jobs N] [--features boot] [--no-lint] [TARGET...]

Why not plain `cargo test`: it runs one target after another, and most of a
TCG boot or a qemu-img check is one core, so the second core idles for most
of the suite. Here each target is a job (a target: a unit-test binary, or
a module of the `fast` and `system` test binaries, each run as its own
process: modules_of), started longest first (times
learned from earlier runs and kept in the cache root (scripts/cache-root.sh),
or the defaults below),
under three rules:

- cores: each job's CPU use (CPU seconds over wall seconds, itself and the
  processes it waited for) is learned too; a job starts only while the
  running jobs' CPU use plus its own stays within the cores (N, default
  the machine's, plus half a core of slack). Two compile- or
  compression-bound targets thus run one after the other, and a boot-bound
  target (one core of TCG) fills the idle core beside them. The first run,
  with nothing learned, takes the defaults below.
- disk: a job starts only if the free space, less what the running jobs
  may still write (their scratch estimate), leaves room for its own scratch
  plus a margin; a job that does not fit waits (or runs alone). The suite
  thus needs the room of its two largest targets at most, never the sum.
- a job that fits no rule runs alone once nothing else runs.

Lint: `cargo fmt --check` is a job; clippy is not a job of its own but
lints while the tests compile (clippy-driver as the workspace's rustc
wrapper, `-D warnings`, the way `cargo clippy` runs it): one compile of the
crate instead of a second full `cargo check` of every dependency. Every
target `cargo clippy --all-targets` checks is compiled there (lib, bins,
tests, examples).

Each job's output goes to target/suite/NAME.log and is printed whole when
the job ends, so a CI log reads target by target. Every SUITE_HEARTBEAT
seconds (300) a line says what is running. The exit status is 1 if any job
failed. Environment: SUITE_JOBS, SUITE_DISK_MARGIN_MIB (2048),
SUITE_TIMES (the learned times file), SUITE_HANG_GRACE (900: a job
running past 2.5 times its expected time, and at least this much past it,
is stopped as hung; `hang_limit`).
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Per target: scratch it may write at its peak (MiB; measured in the stop 26
# run, docs/testing.md "Disk") and a default time (s) for ordering before anything
# is learned. Targets not named here get 512 MiB and 60 s.
DISK_MIB = {
    "generate_platforms": 7000,  # + the second run of the reproducibility test
    "multiarch": 3200,
    "backend_vm": 2400,
    "container": 1200,
    "generate_live": 700,
    "live_offline": 600,
    "generate": 500,
    "chaos": 1500,
    "faithful": 3500,
}
# Wall times (s) of the stop 52 run (a4c825f, nothing learned, other work
# beside it for part of the run), for the order and the hang limit before
# any is learned. Targets not named here get 60 s.
DEFAULT_SECS = {
    "faithful": 927,
    "generate_platforms": 828,
    "multiarch": 732,
    "container": 664,
    "rhel10": 510,
    "chaos": 428,
    "backend_vm": 367,
    "generate": 311,
    "boot_harness": 310,
    "conformance": 253,
    "generate_live": 229,
    "registry": 210,
    "live_offline": 206,
    "generate_aws": 162,
    "lib-bootimage_core": 138,
    "concurrency": 95,
    "trust": 70,
    "lib": 66,
    "generate_errors": 42,
    "generate_interrupt": 40,
    "fuzz_smoke": 37,
    "inspect": 22,
    "registry_faults": 22,
    "vsphere": 21,
    "fixture_smoke": 16,
}
# Cores a job is counted for before its own use is learned. The stop 51
# runs (33 targets, nothing learned) measured 0.4-0.7 for every target but
# the few-second ones, so 0.8 lets three run side by side on two cores
# (1.0 ran two, and left most of a core idle for the whole suite).
UNLEARNED_CPU = 0.8
# Cores a job keeps at least busy, whatever was learned: the container
# tier's work runs in podman's containers, whose CPU time wait4 never sees
# (it measured 0.08-0.18).
DEFAULT_CPU = {
    "container": 1.0,
}
# A job that runs past its limit is stopped and fails, naming the limit: a
# hang fails its target, not the whole run at CI's hard limit (stop 51: one
# hung target, 47 minutes). The limit: two and a half times its expected
# time, at least that plus HANG_GRACE_SECS, at most HANG_CAP_SECS (the
# longest target takes about 15 minutes on 2 busy cores).
HANG_GRACE_SECS = int(os.environ.get("SUITE_HANG_GRACE", "900"))
HANG_CAP_SECS = 2400


def hang_limit(expect):
    return min(max(2.5 * expect, expect + HANG_GRACE_SECS), max(HANG_CAP_SECS, expect + HANG_GRACE_SECS))


def cache_root():
    """scripts/cache-root.sh's root: the learned times live with the other
    caches outside the clone, so a fresh clone orders its jobs by them."""
    out = subprocess.run(["bash", "-c", '. "$1" && bootimage_cache_root', "sh",
                          os.path.join(TOP, "scripts", "cache-root.sh")],
                         capture_output=True, text=True)
    root = out.stdout.strip()
    return root if out.returncode == 0 and root else os.path.join(TOP, ".cache")


def say(msg):
    print(f"suite: {msg}", flush=True)


def free_mib(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize // (1 << 20)


def fmt_secs(s):
    s = int(round(s))
    return f"{s // 60}:{s % 60:02d}"


class Job:
    def __init__(self, name, argv, env=None, cwd=TOP):
        self.name = name
        self.argv = argv
        self.env = env
        self.cwd = cwd
        self.disk = DISK_MIB.get(name, 512)
        self.proc = None
        self.start = None
        self.secs = None
        self.cpu_secs = None
        self.rc = None
        self.log = os.path.join(TOP, "target", "suite", f"{name}.log")
        self.counts = ""
        self.timed_out = False

    def launch(self):
        os.makedirs(os.path.dirname(self.log), exist_ok=True)
        env = dict(os.environ)
        env.update(self.env or {})
        self.logf = open(self.log, "wb")
        self.start = time.monotonic()
        self.proc = subprocess.Popen(
            self.argv, cwd=self.cwd, env=env, stdout=self.logf,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)

    def poll(self):
        # wait4, not Popen.poll: the job's CPU time (and its waited-for
        # descendants') comes with its exit status.
        try:
            pid, status, ru = os.wait4(self.proc.pid, os.WNOHANG)
        except ChildProcessError:
            pid, status, ru = self.proc.pid, 0, None
        if pid == 0:
            return False
        rc = os.waitstatus_to_exitcode(status) if ru is not None else self.proc.poll()
        self.proc.returncode = rc
        self.rc = rc
        self.secs = time.monotonic() - self.start
        self.cpu_secs = (ru.ru_utime + ru.ru_stime) if ru is not None else None
        self.logf.close()
        text = open(self.log, "rb").read().decode("utf-8", "replace")
        passed = failed = ignored = 0
        for m in re.finditer(r"test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored", text):
            passed += int(m.group(1))
            failed += int(m.group(2))
            ignored += int(m.group(3))
        if re.search(r"test result:", text):
            self.counts = f"{passed} passed, {failed} failed, {ignored} ignored"
        bar = "=" * 20
        cpu = f", {self.cpu_secs / max(self.secs, 1):.2f} cores" if self.cpu_secs is not None else ""
        print(f"{bar} {self.name}: exit {rc} in {self.secs:.0f} s{cpu} {bar}", flush=True)
        sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")
        print(f"{bar} end of {self.name} {bar}", flush=True)
        return True

    def kill(self):
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 15)
            except ProcessLookupError:
                pass


ARCH_OF_FIRMWARE = {"bios": "x86_64", "uefi": "x86_64", "aavmf": "aarch64",
                    "slof": "ppc64le", "s390-ccw": "s390x"}


def boot_coverage(path):
    """The boots the harness recorded (tests/common/boot.rs), as a table of
    (arch, firmware, medium, platform, mode) with the targets that booted it;
    lines for combinations booted by more than one target."""
    try:
        lines = [json.loads(l) for l in open(path) if l.strip()]
    except OSError:
        return
    if not lines:
        return
    cover = {}
    for b in lines:
        media = []
        for m in b["media"]:
            d = m["medium"]
            if m["medium"] == "disk":
                d = f"disk {m['format']}" + (" 4k" if m.get("sector") == 4096 else "") \
                    + ("" if m.get("bus") == "virtio" else f" {m.get('bus')}")
            media.append(d)
        key = (ARCH_OF_FIRMWARE.get(b["firmware"], "?"), b["firmware"], " + ".join(media),
               b["platform"] or "-", b["mode"] or ("FAILED" if not b["ok"] else "-"))
        cover.setdefault(key, []).append(f"{b['target']}::{b['test']}")
    print()
    print(f"Boots: {len(lines)} in all, {len(cover)} different (arch, firmware, medium, platform, mode); "
          f"{sum(1 for b in lines if not b['ok'])} did not show the marker (negative tests included)")
    print("| arch | firmware | medium | platform | mode | boots | by")
    print("|---|---|---|---|---|---|---")
    for key in sorted(cover):
        by = sorted(set(cover[key]))
        print(f"| {' | '.join(key)} | {len(cover[key])} | {', '.join(by)}")
    multi = {k: v for k, v in cover.items() if len({t.split('::')[0] for t in v}) > 1}
    if multi:
        say(f"{len(multi)} combinations are booted by more than one target (see the table)")


def clippy_driver():
    """The toolchain's clippy-driver, or None."""
    try:
        sysroot = subprocess.run([os.environ.get("RUSTC", "rustc"), "--print", "sysroot"],
                                 capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    d = os.path.join(sysroot, "bin", "clippy-driver")
    return d if os.access(d, os.X_OK) else None


def modules_of(binary, exe):
    """The targets of a test binary whose tests are modules (tests/fast,
    tests/system: each module was a target of its own): module name ->
    the argv that runs that module's tests alone. A filter `MODULE::`
    where it selects exactly the module's tests, else the module's test
    names with --exact. Tests outside any module are the target
    `BINARY`."""
    out = subprocess.run([exe, "--list", "--format", "terse"], capture_output=True, text=True)
    if out.returncode != 0:
        say(f"{exe} --list failed:\n{out.stderr}")
        sys.exit(1)
    names = [l[: -len(": test")] for l in out.stdout.splitlines() if l.endswith(": test")]
    groups = {}
    for n in names:
        groups.setdefault(n.split("::")[0] if "::" in n else "", []).append(n)
    argvs = {}
    for module, tests in groups.items():
        prefix = f"{module}::"
        if module and sorted(n for n in names if prefix in n) == sorted(tests):
            argvs[module] = [exe, prefix]
        else:
            argvs[module or binary] = [exe, "--exact"] + tests
    return argvs


def compile_tests(features, lint):
    """`cargo test --no-run`: every test target, by name, as the argv that
    runs it (a test binary's modules are targets of their own:
    [`modules_of`]). With `lint`, clippy-driver compiles the workspace's
    own crates (deny warnings), as `cargo clippy` would check them."""
    argv = [os.environ.get("CARGO", "cargo"), "test", "--release", "--no-run", "--workspace",
            "--message-format=json-render-diagnostics"]
    if features:
        argv += ["--features", features]
    env = dict(os.environ)
    if lint:
        driver = clippy_driver()
        if not driver:
            say("clippy-driver not found in the toolchain (rustup component add clippy)")
            sys.exit(1)
        env["RUSTC_WORKSPACE_WRAPPER"] = driver
        # cargo-clippy's way of passing `-- -D warnings` to the driver.
        env["CLIPPY_ARGS"] = "-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
    p = subprocess.Popen(argv, cwd=TOP, stdout=subprocess.PIPE, env=env)
    exes = {}
    for line in p.stdout:
        try:
            m = json.loads(line)
        except ValueError:
            continue
        if m.get("reason") == "compiler-message" and "rendered" in m.get("message", {}):
            sys.stderr.write(m["message"]["rendered"])
        if m.get("reason") != "compiler-artifact" or not m.get("executable"):
            continue
        if not m.get("profile", {}).get("test"):
            continue
        t = m["target"]
        kind = t["kind"][0]
        # The tool's unit tests are `lib`; the leaf crate's `lib-bootimage_core`.
        if kind == "lib":
            name = "lib" if t["name"] == "bootimage_gen" else f"lib-{t['name']}"
        else:
            name = t["name"] if kind == "test" else f"{kind}-{t['name']}"
        # A binary made of modules (tests/NAME/main.rs: tests/fast,
        # tests/system) is one target per module.
        modular = kind == "test" and re.search(r"/tests/[^/]+/main\.rs$", t["src_path"])
        exes[name] = (modular, m["executable"])
    if p.wait() != 0:
        say("cargo test --no-run failed" + (" (a compile error or a clippy warning above)" if lint else ""))
        sys.exit(1)
    targets = {}
    for name, (modular, exe) in exes.items():
        if modular:
            targets.update(modules_of(name, exe))
        else:
            targets[name] = [exe]
    return targets


def load_times(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return {}


def on_term(signum, frame):
    raise KeyboardInterrupt


def main():
    signal.signal(signal.SIGTERM, on_term)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("SUITE_JOBS", os.cpu_count() or 2)))
    ap.add_argument("--features", default="boot")
    ap.add_argument("--no-lint", action="store_true", help="no rustfmt job, no clippy in the compile")
    ap.add_argument("--test-threads", default="2")
    ap.add_argument("--deps-secs", type=float, help="time the caller spent installing dependencies")
    ap.add_argument("targets", nargs="*", help="only these targets (lib, generate, ...)")
    a = ap.parse_args()
    margin = int(os.environ.get("SUITE_DISK_MARGIN_MIB", "2048"))
    heartbeat = int(os.environ.get("SUITE_HEARTBEAT", "300"))
    times_path = os.environ.get("SUITE_TIMES", os.path.join(cache_root(), "suite-times.json"))
    learned = load_times(times_path)
    t_all = time.monotonic()
    phases = []
    if a.deps_secs is not None:
        phases.append(("install-deps", a.deps_secs))

    say(f"{free_mib(TOP)} MiB free at {TOP}, {free_mib('/var/tmp')} MiB at /var/tmp; {a.jobs} jobs")
    t = time.monotonic()
    lint = not a.no_lint and not a.targets
    exes = compile_tests(a.features, lint)
    phases.append(("compile tests" + (" + clippy" if lint else ""), time.monotonic() - t))

    t = time.monotonic()
    fixture_tool = os.path.join(TOP, "target", "release", "bootimage-fixture")
    if a.features and os.path.exists(fixture_tool):
        r = subprocess.run(["bash", os.path.join(TOP, "fixtures", "build.sh")],
                           cwd=TOP, env=dict(os.environ, FIXTURE_TOOL=fixture_tool),
                           stdout=subprocess.DEVNULL)
        if r.returncode != 0:
            say("fixtures/build.sh failed")
            sys.exit(1)
    phases.append(("fixtures", time.monotonic() - t))

    boots = os.path.join(TOP, "target", "suite", "boots.jsonl")
    os.makedirs(os.path.dirname(boots), exist_ok=True)
    open(boots, "w").close()
    jobs = []
    unknown = sorted(set(a.targets) - set(exes))
    if unknown:
        say(f"no target {', '.join(unknown)}; the targets are: {' '.join(sorted(exes))}")
        sys.exit(2)
    for name, argv in sorted(exes.items()):
        if a.targets and name not in a.targets:
            continue
        jobs.append(Job(name, argv + [f"--test-threads={a.test_threads}"], env={
            "CARGO_MANIFEST_DIR": TOP, "SUITE_BOOT_RECORD": boots, "SUITE_TARGET": name}))
    if lint:
        jobs.append(Job("rustfmt", [os.environ.get("CARGO", "cargo"), "fmt", "--check"]))
        # The layering: module and file import cycles, upward imports,
        # unsafe without SAFETY (plain shell and Python, a second or two).
        jobs.append(Job("imports", ["bash", "scripts/check-imports.sh"]))
    for j in jobs:
        got = learned.get(j.name)
        if isinstance(got, (int, float)):  # the older file: seconds only
            got = {"secs": got}
        got = got or {}
        j.expect = got.get("secs", DEFAULT_SECS.get(j.name, 60))
        j.cpu = max(got.get("cpu", 0.0), DEFAULT_CPU.get(j.name, UNLEARNED_CPU if "cpu" not in got else 0.0))
        j.limit = hang_limit(j.expect)
    pending = sorted(jobs, key=lambda j: -j.expect)
    running, done = [], []
    cores = a.jobs + 0.5

    def busy(j):
        return bool(running) and sum(r.cpu for r in running) + min(j.cpu, a.jobs) > cores

    def fits(j):
        if not running:
            return True
        reserved = sum(r.disk for r in running)
        return free_mib(TOP) - reserved >= j.disk + margin

    last_beat = time.monotonic()
    try:
        while pending or running:
            for r in list(running):
                if not r.timed_out and time.monotonic() - r.start > r.limit:
                    say(f"{r.name}: running {fmt_secs(time.monotonic() - r.start)}, past its limit "
                        f"{fmt_secs(r.limit)} (its expected {fmt_secs(r.expect)}; SUITE_HANG_GRACE "
                        f"{HANG_GRACE_SECS} s): stopping it as hung")
                    r.timed_out = True
                    r.kill()
                    r.kill_at = time.monotonic() + 30
                if r.timed_out and time.monotonic() > r.kill_at:
                    r.kill_at = float("inf")
                    try:
                        os.killpg(r.proc.pid, 9)
                    except ProcessLookupError:
                        pass
                if r.poll():
                    running.remove(r)
                    done.append(r)
            started = True
            while started and pending:
                started = False
                for j in pending:
                    if busy(j) or not fits(j):
                        continue
                    pending.remove(j)
                    j.launch()
                    running.append(j)
                    say(f"start {j.name} (expected {fmt_secs(j.expect)}, {j.cpu:.1f} cores, scratch ~{j.disk} MiB; "
                        f"{free_mib(TOP)} MiB free)")
                    started = True
                    break
            if time.monotonic() - last_beat >= heartbeat:
                last_beat = time.monotonic()
                now = time.monotonic()
                say("running: " + ", ".join(f"{r.name} {fmt_secs(now - r.start)}" for r in running)
                    + f"; {len(done)} done, {len(pending)} waiting; {free_mib(TOP)} MiB free")
            time.sleep(0.5)
    except KeyboardInterrupt:
        say("interrupted: stopping " + (", ".join(r.name for r in running) or "nothing"))
        for r in running:
            r.kill()
        for r in running:
            try:
                r.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(r.proc.pid, 9)
        sys.exit(130)

    total = time.monotonic() - t_all + (a.deps_secs or 0)
    for j in done:
        if j.rc == 0 and not j.timed_out:
            learned[j.name] = {"secs": round(j.secs)}
            if j.cpu_secs is not None:
                learned[j.name]["cpu"] = round(j.cpu_secs / max(j.secs, 1), 2)
    try:
        os.makedirs(os.path.dirname(times_path), exist_ok=True)
        with open(times_path + ".tmp", "w") as f:
            json.dump(learned, f, indent=1, sort_keys=True)
        os.replace(times_path + ".tmp", times_path)
    except OSError as e:
        say(f"could not save the times to {times_path}: {e}")

    failed = [j for j in done if j.rc != 0 or j.timed_out]
    rows = [(n, "", fmt_secs(s), "", "") for n, s in phases]
    for j in sorted(done, key=lambda j: -j.secs):
        cpu = f"{j.cpu_secs / max(j.secs, 1):.2f}" if j.cpu_secs is not None else "?"
        res = "ok" if j.rc == 0 else ("FAILED (hung)" if j.timed_out else f"FAILED (exit {j.rc})")
        rows.append((j.name, res, fmt_secs(j.secs), cpu, j.counts))
    w = max(len(r[0]) for r in rows)
    print()
    print(f"| {'target':<{w}} | {'result':<17} | {'wall':>6} | cores | tests")
    print(f"|{'-' * (w + 2)}|{'-' * 19}|{'-' * 8}|-------|------")
    for n, res, s, cpu, c in rows:
        print(f"| {n:<{w}} | {res:<17} | {s:>6} | {cpu:>5} | {c}")
    serial = sum(j.secs for j in done)
    print(f"| {'whole run':<{w}} | {'FAILED' if failed else 'ok':<17} | {fmt_secs(total):>6} | "
          f"{len(done)} jobs on {a.jobs} cores; their sum {fmt_secs(serial)}")
    boot_coverage(boots)
    say(f"{free_mib(TOP)} MiB free at the end")
    if failed:
        say("failed: " + ", ".join(j.name for j in failed) + f" (logs in {os.path.join(TOP, 'target', 'suite')})")
        sys.exit(1)


if __name__ == "__main__":
    main()
