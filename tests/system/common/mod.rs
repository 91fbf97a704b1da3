//! Shared test support: the fixture release, the CLI binary, and a local
//! docker-registry (127.0.0.1 only; plain HTTP or TLS + htpasswd) that is
//! stopped when dropped. The drop guards (processes, loop devices, mounts)
//! are in `guards`.
#![allow(dead_code)]
pub mod boot;
pub mod cosign;
pub mod faults;
pub mod guards;
pub mod labels;
pub mod qmp;
pub mod scratch;
pub mod tekton;
#[allow(unused_imports)] // not every target uses every guard
pub use guards::{ChildGuard, Loop, Mnt, RmDir, ServerThread};
#[allow(unused_imports)] // not every target uses scratch dirs
pub use scratch::{scratch, scratch_at};
use serde_json::Value;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A file's bytes (the panic names the file).
pub fn read(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// SHA-256 of a file, streamed, in lower-case hex.
pub fn sha256_file(p: &Path) -> String {
    bootimage_gen::publish::meta::sha256_file(p).unwrap().0
}

/// A file of an OS commit in the fixture's ostree repo (`ostree cat`).
pub fn fixture_os_file(commit: &str, path: &str) -> Vec<u8> {
    let o = Command::new("ostree")
        .arg(format!("--repo={}", fixture_dir().join("repo").display()))
        .args(["cat", commit, path])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "ostree cat {commit} {path}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o.stdout
}

/// `generate ARGS -o ROOT/out --progress plain` with its cache in
/// ROOT/cache: asserts success and prints its log and time; gives the
/// output directory, its meta.json and the log.
pub fn generate_logged(root: &Path, args: &[&str]) -> (PathBuf, Value, String) {
    let out = root.join("out");
    let t = Instant::now();
    let mut a = vec!["generate"];
    a.extend_from_slice(args);
    a.extend(["-o", out.to_str().unwrap(), "--progress", "plain"]);
    let o = run(&root.join("cache"), &a);
    let log = stderr(&o);
    assert!(o.status.success(), "generate {args:?} failed:\n{log}");
    eprintln!(
        "generate {args:?}: {:.1} s\n{log}",
        t.elapsed().as_secs_f64()
    );
    let meta = serde_json::from_slice(&read(&out.join("meta.json"))).unwrap();
    (out, meta, log)
}

/// One `generate` run that a test target's tests share.
pub struct Built {
    /// `scratch(name)`: the run's cache, output and raw disks are under it.
    pub root: PathBuf,
    /// `ROOT/out`, the output directory.
    pub out: PathBuf,
    /// `ROOT/raw`, the raw disks (`--debug-raw-dir`), when asked for.
    pub raw: PathBuf,
    pub meta: Value,
    pub log: String,
}

impl Built {
    /// The file of meta.json's image `key`.
    pub fn artifact(&self, key: &str) -> PathBuf {
        image_file(&self.meta, &self.out, key)
    }
}

/// `generate ARGS` once per `cell` ([`generate_logged`]), into a fresh
/// `scratch(name)`; with `raw`, the raw disks are kept in ROOT/raw.
pub fn built_once(
    cell: &'static OnceLock<Built>,
    name: &str,
    args: &[&str],
    raw: bool,
) -> &'static Built {
    cell.get_or_init(|| {
        let root = scratch(name);
        let _ = std::fs::remove_dir_all(&root);
        let raw_dir = root.join("raw");
        let raw_s = raw_dir.to_str().unwrap().to_string();
        let mut a = args.to_vec();
        if raw {
            a.extend(["--debug-raw-dir", &raw_s]);
        }
        let (out, meta, log) = generate_logged(&root, &a);
        Built {
            root,
            out,
            raw: raw_dir,
            meta,
            log,
        }
    })
}

/// `gzip -dc SRC > DST`.
pub fn gunzip(src: &Path, dst: &Path) {
    must(Command::new("sh").arg("-c").arg(format!(
        "gzip -dc '{}' > '{}'",
        src.display(),
        dst.display()
    )));
}

/// The file of `images.<key>` of a run's `meta.json`, in its output `out`.
pub fn image_file(meta: &Value, out: &Path, key: &str) -> PathBuf {
    let p = meta["images"][key]["path"]
        .as_str()
        .unwrap_or_else(|| panic!("no images.{key} in {meta}"));
    out.join(p)
}

/// A `generate` run stopped at a pause point (`BOOTIMAGE_GEN_PAUSE_AT`).
pub struct Paused {
    pub child: Child,
    pub err: std::io::BufReader<std::process::ChildStderr>,
    /// Its stderr so far.
    pub log: String,
}

/// Spawn `cmd` with `BOOTIMAGE_GEN_PAUSE_AT=point` and read its stderr
/// until it says it paused there (within `limit`).
pub fn run_until_paused(cmd: &mut Command, point: &str, limit: Duration) -> Paused {
    use std::io::BufRead;
    let mut child = cmd
        .env("BOOTIMAGE_GEN_PAUSE_AT", point)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut log = String::new();
    let t = Instant::now();
    loop {
        let mut line = String::new();
        let n = err.read_line(&mut line).unwrap_or(0);
        log.push_str(&line);
        if line.contains(&format!("paused at {point}")) {
            return Paused { child, err, log };
        }
        let why = if n == 0 {
            "generate ended before pausing"
        } else if t.elapsed() > limit {
            "no pause"
        } else {
            continue;
        };
        let _ = child.kill();
        let _ = child.wait();
        panic!("{why} at {point}:\n{log}");
    }
}

/// Send `signal` to our own child process (the one `unsafe` of the tests'
/// signal sending).
pub fn send_signal(child: &std::process::Child, signal: i32) {
    // SAFETY: kill(2) takes plain integers; the PID is our own child's,
    // not yet waited for, so it names no other process.
    unsafe { libc::kill(child.id() as i32, signal) };
}

impl Paused {
    /// Send `signal`; its exit status and its whole stderr.
    pub fn signal(mut self, signal: i32) -> (std::process::ExitStatus, String) {
        send_signal(&self.child, signal);
        std::io::Read::read_to_string(&mut self.err, &mut self.log).unwrap();
        (self.child.wait().unwrap(), self.log)
    }
}

pub fn top() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Where the suite keeps what outlives a clone, keyed by its inputs (the
/// same root as scripts/cache-root.sh): `BOOTIMAGE_CACHE`, else
/// /var/cache/bootimage-gen as root, else ~/.cache/bootimage-gen.
pub fn cache_root() -> PathBuf {
    if let Some(d) = std::env::var_os("BOOTIMAGE_CACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return PathBuf::from("/var/cache/bootimage-gen");
    }
    let xdg = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from);
    xdg.unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache")
    })
    .join("bootimage-gen")
}

/// The fixture directory (built once per test process, cached across runs).
pub fn fixture() -> &'static (PathBuf, Value) {
    static F: OnceLock<(PathBuf, Value)> = OnceLock::new();
    F.get_or_init(|| {
        let out = Command::new("bash")
            .arg(top().join("fixtures/build.sh"))
            .env("FIXTURE_TOOL", fixture_tool_path())
            .stderr(Stdio::inherit())
            .output()
            .expect("running fixtures/build.sh");
        assert!(out.status.success(), "fixtures/build.sh failed");
        let dir = PathBuf::from(
            String::from_utf8(out.stdout)
                .unwrap()
                .trim()
                .lines()
                .last()
                .unwrap(),
        );
        let v: Value =
            serde_json::from_slice(&std::fs::read(dir.join("fixture.json")).unwrap()).unwrap();
        (dir, v)
    })
}

pub fn fx() -> &'static Value {
    &fixture().1
}

pub fn fixture_dir() -> &'static Path {
    &fixture().0
}

/// A blob of the fixture's OCI layout, by digest.
pub fn fixture_blob(digest: &str) -> PathBuf {
    fixture_dir()
        .join("oci/blobs/sha256")
        .join(digest.trim_start_matches("sha256:"))
}

/// The manifest the fixture's OCI layout holds under `tag`, read from its
/// index.json and blobs.
pub fn fixture_manifest(tag: &str) -> Value {
    let read = |p: &Path| -> Value { serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap() };
    let index = read(&fixture_dir().join("oci/index.json"));
    let desc = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["annotations"]["org.opencontainers.image.ref.name"] == tag)
        .unwrap_or_else(|| panic!("no {tag} in the fixture layout"))
        .clone();
    read(&fixture_blob(desc["digest"].as_str().unwrap()))
}

pub fn oci(tag: &str) -> String {
    format!("oci:{}:{tag}", fixture_dir().join("oci").display())
}

/// The fixture tool's binary (crates/bootimage-fixture, a package of its
/// own: `cargo test --workspace` builds it for its own tests, and the
/// suite compiles the workspace).
pub fn fixture_tool_path() -> PathBuf {
    let p = top().join("target/release/bootimage-fixture");
    assert!(
        p.is_file(),
        "{} is missing: cargo build --release --workspace --bins",
        p.display()
    );
    p
}

pub fn fixture_tool() -> Command {
    Command::new(fixture_tool_path())
}

/// Run a helper command, fail the test with its stderr if it fails, and
/// return its trimmed stdout.
pub fn must(cmd: &mut Command) -> String {
    let o = cmd
        .output()
        .unwrap_or_else(|e| panic!("starting {cmd:?}: {e}"));
    assert!(
        o.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// Run the CLI with its own cache dir.
pub fn run(cache: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bootimage-gen"))
        .args(args)
        .env("BOOTIMAGE_GEN_CACHE_DIR", cache)
        .env_remove("REGISTRY_AUTH_FILE")
        .env("HOME", cache) // no stray credentials from the user's home
        .output()
        .expect("running bootimage-gen")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Run and expect success; returns the parsed JSON (for --json) or Null.
pub fn ok_json(cache: &Path, args: &[&str]) -> Value {
    let o = run(cache, args);
    assert!(
        o.status.success(),
        "bootimage-gen {args:?} failed:\n{}",
        stderr(&o)
    );
    serde_json::from_slice(&o.stdout).unwrap_or(Value::Null)
}

/// Run and expect the failure contract: exit 1, one `error:` line naming
/// `needle`, no panic or backtrace. Returns the error line.
pub fn expect_error(cache: &Path, args: &[&str], needle: &str) -> String {
    let before = var_tmp_oci();
    let o = run(cache, args);
    let leaked: Vec<_> = var_tmp_oci().difference(&before).cloned().collect();
    assert!(
        leaked.is_empty(),
        "temporary dirs left in /var/tmp: {leaked:?}"
    );
    let line = one_error(&o, needle);
    assert_cache_clean(cache);
    line
}

/// The failure contract of a finished run: exit 1, one `error:` line
/// naming `needle` (case aside), no panic or backtrace. The line.
pub fn one_error(o: &Output, needle: &str) -> String {
    let err = stderr(o);
    assert_eq!(
        o.status.code(),
        Some(1),
        "expected exit 1, got {:?}\nstderr:\n{err}",
        o.status.code()
    );
    assert!(
        !err.contains("panicked")
            && !err.contains("RUST_BACKTRACE")
            && !err.contains("stack backtrace"),
        "panic/backtrace:\n{err}"
    );
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(lines.len(), 1, "expected exactly one error line:\n{err}");
    assert!(
        lines[0].to_lowercase().contains(&needle.to_lowercase()),
        "error line does not mention '{needle}':\n{}",
        lines[0]
    );
    lines[0].to_string()
}

/// skopeo's extraction dirs in /var/tmp (we point it at our scratch dir, so
/// none may appear).
fn var_tmp_oci() -> std::collections::BTreeSet<String> {
    std::fs::read_dir("/var/tmp")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("oci"))
                .collect()
        })
        .unwrap_or_default()
}

/// Nothing left in the cache's scratch area, and no import record.
pub fn assert_cache_clean(cache: &Path) {
    let tmp = cache.join("tmp");
    if tmp.exists() {
        let left: Vec<_> = std::fs::read_dir(&tmp)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert!(left.is_empty(), "scratch dirs left behind: {left:?}");
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A docker-registry on 127.0.0.1.
pub struct Registry {
    #[allow(dead_code)] // held for its drop: killed first
    child: ChildGuard,
    pub dir: tempfile::TempDir,
    pub port: u16,
    pub tls: bool,
    pub user: Option<(String, String)>,
}

impl Registry {
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
    pub fn cert_dir(&self) -> PathBuf {
        self.dir.path().join("certs")
    }

    /// Start plain HTTP (`tls=false`) or TLS with a self-signed CA and htpasswd auth.
    pub fn start(tls: bool) -> Registry {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let d = dir.path();
        std::fs::create_dir_all(d.join("storage")).unwrap();
        let mut cfg = format!(
            "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n",
            d.join("storage").display()
        );
        let mut user = None;
        if tls {
            let certs = d.join("certs");
            std::fs::create_dir_all(&certs).unwrap();
            let sh = format!(
                r#"set -e
cd {certs}
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj /CN=bootimage-gen-test-ca 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=127.0.0.1 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\n' > ext.cnf
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 2 -extfile ext.cnf 2>/dev/null
htpasswd -Bbn tester s3cret > ../htpasswd
rm -f server.csr ext.cnf ca.srl
"#,
                certs = certs.display()
            );
            let st = Command::new("sh").arg("-c").arg(&sh).status().unwrap();
            assert!(st.success(), "creating test certificates");
            // skopeo's --cert-dir takes *.crt as CAs and pairs *.cert/*.key as client certs:
            // keep only the CA there.
            let server = d.join("server");
            std::fs::create_dir_all(&server).unwrap();
            for f in ["server.crt", "server.key", "ca.key"] {
                std::fs::rename(certs.join(f), server.join(f)).unwrap();
            }
            cfg.push_str(&format!(
                "  tls:\n    certificate: {}\n    key: {}\nauth:\n  htpasswd:\n    realm: test\n    path: {}\n",
                server.join("server.crt").display(),
                server.join("server.key").display(),
                d.join("htpasswd").display()
            ));
            user = Some(("tester".to_string(), "s3cret".to_string()));
        }
        std::fs::write(d.join("config.yml"), cfg).unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(d.join("config.yml"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(d.join("registry.log")).unwrap())
            .spawn()
            .expect("starting docker-registry (apt-get install docker-registry)");
        let r = Registry {
            child: ChildGuard(child),
            dir,
            port,
            tls,
            user,
        };
        let t = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "docker-registry did not start"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        r
    }

    /// An auth.json for this registry (`password` may be wrong on purpose).
    pub fn auth_file(&self, password: &str) -> PathBuf {
        use base64::Engine;
        let (u, _) = self.user.clone().unwrap_or_default();
        let tok = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{password}"));
        let p = self.dir.path().join(format!("auth-{password}.json"));
        // Written to a file of its own, then renamed: tests that push from
        // two threads at once each ask for it, and a reader must never see
        // the other's half-written file (the race test once read it empty).
        let tmp = tempfile::NamedTempFile::new_in(self.dir.path()).unwrap();
        std::fs::write(
            tmp.path(),
            format!(r#"{{"auths":{{"{}":{{"auth":"{tok}"}}}}}}"#, self.host()),
        )
        .unwrap();
        tmp.persist(&p).unwrap();
        p
    }

    /// Push `src` (a containers transport ref) to `repo:tag`, keeping digests.
    pub fn push(&self, src: &str, repo_tag: &str) {
        let mut c = Command::new("skopeo");
        c.args(["copy", "--quiet", "--preserve-digests"]);
        if self.tls {
            c.arg(format!("--dest-cert-dir={}", self.cert_dir().display()));
            let (u, p) = self.user.clone().unwrap();
            c.arg(format!("--dest-creds={u}:{p}"));
        } else {
            c.arg("--dest-tls-verify=false");
        }
        c.arg(src)
            .arg(format!("docker://{}/{repo_tag}", self.host()));
        let o = c.output().unwrap();
        assert!(
            o.status.success(),
            "push {src} -> {repo_tag}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// Where the root filesystem (XFS, from 513 MiB to 1 MiB before the end)
/// of a raw x86_64 disk this project built lies: (offset, length).
pub fn raw_root_extent(raw: &Path) -> (u64, u64) {
    const MIB: u64 = 1 << 20;
    let len = std::fs::metadata(raw).unwrap().len();
    (513 * MIB, len - 513 * MIB - MIB)
}

/// The root filesystem of a raw x86_64 disk this project built
/// ([`raw_root_extent`]), mounted read-only at `at`.
pub fn mount_raw_root(raw: &Path, at: &Path) -> Mnt {
    let (offset, len) = raw_root_extent(raw);
    Mnt::new(raw, offset, len, "xfs", "ro,norecovery,nouuid", at)
}

/// Its boot filesystem (ext4, 384 MiB at 129 MiB), mounted read-only.
pub fn mount_raw_boot(raw: &Path, at: &Path) -> Mnt {
    const MIB: u64 = 1 << 20;
    Mnt::new(raw, 129 * MIB, 384 * MIB, "ext4", "ro,noload", at)
}

/// `bootimage-gen verify --manifest-only DIR` (as `nobody` when
/// `unprivileged`): its exit code and output.
pub fn verify_manifest_only(dir: &Path, unprivileged: bool) -> (Option<i32>, String) {
    let exe = env!("CARGO_BIN_EXE_bootimage-gen");
    let mut c = match unprivileged {
        true => {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", exe]);
            c
        }
        false => Command::new(exe),
    };
    let o = c
        .args(["verify", "--manifest-only"])
        .arg(dir)
        .env("TMPDIR", "/var/tmp")
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    (o.status.code(), text)
}

/// A copy of the output directory `src` (its files) at `dst`.
pub fn copy_output(src: &Path, dst: &Path) {
    let _ = std::fs::remove_dir_all(dst);
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
    }
}

/// The raw disk `raw` written (gzip) as the file `file` of the output
/// directory `dir`, then `verify --manifest-only DIR`, which must exit 1:
/// its line for `file` and its whole output.
pub fn manifest_only_with_disk(dir: &Path, file: &str, raw: &Path) -> (String, String) {
    must(Command::new("sh").arg("-c").arg(format!(
        "gzip -1 -c '{}' > '{}'",
        raw.display(),
        dir.join(file).display()
    )));
    let (code, text) = verify_manifest_only(dir, false);
    assert_eq!(code, Some(1), "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("DIFFERS  {file}")))
        .unwrap_or_default()
        .to_string();
    (line, text)
}
