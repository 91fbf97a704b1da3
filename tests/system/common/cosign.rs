//! The real cosign CLI as a test judge: Debian trixie's 2.5 or forky's
//! 3.1 (tests/tools/cosign.sh fetches and caches them), with a key pair
//! of its own, no transparency log, plain HTTP registries on 127.0.0.1.
#![allow(dead_code)] // not every module uses every part
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub const PASSWORD: &str = "correct horse";

/// The cosign of Debian `suite` (fetched once, cached).
pub fn cosign_bin(suite: &str) -> PathBuf {
    let tool = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tools/cosign.sh");
    PathBuf::from(super::must(Command::new(tool).arg(suite)).trim())
}

pub struct Cosign {
    pub bin: PathBuf,
    /// Major version: 2 or 3.
    pub major: u32,
    home: tempfile::TempDir,
}

impl Cosign {
    pub fn new(suite: &str) -> Cosign {
        let bin = cosign_bin(suite);
        let c = Cosign {
            bin,
            major: 0,
            home: tempfile::tempdir().unwrap(),
        };
        let v = String::from_utf8_lossy(&c.run(&["version"], None).stdout).to_string();
        let git = v
            .lines()
            .find(|l| l.starts_with("GitVersion"))
            .unwrap_or_default()
            .to_string();
        // Debian builds say "devel": the package version is in the path.
        let major = if c.bin.to_string_lossy().contains("cosign-trixie-2.") || git.contains("v2.") {
            2
        } else {
            3
        };
        eprintln!("cosign {suite}: {} ({git})", c.bin.display());
        Cosign { major, ..c }
    }

    pub fn run(&self, args: &[&str], dir: Option<&Path>) -> Output {
        let mut c = Command::new(&self.bin);
        c.args(args)
            .env("HOME", self.home.path())
            .env("COSIGN_PASSWORD", PASSWORD)
            .env("COSIGN_YES", "true")
            .env_remove("SIGSTORE_ROOT_FILE")
            .env_remove("DOCKER_CONFIG");
        if let Some(d) = dir {
            c.current_dir(d);
        }
        c.output().unwrap()
    }

    /// A key pair in a directory of its own: (cosign.key, cosign.pub).
    pub fn key_pair(&self) -> (tempfile::TempDir, PathBuf, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let o = self.run(&["generate-key-pair"], Some(d.path()));
        assert!(o.status.success(), "{}", super::stderr(&o));
        let (k, p) = (d.path().join("cosign.key"), d.path().join("cosign.pub"));
        (d, k, p)
    }

    pub const REG: [&'static str; 2] = ["--allow-insecure-registry", "--allow-http-registry"];

    /// `cosign sign --key` without a transparency log; `legacy` asks cosign
    /// 3 for the `.sig` layout instead of its bundle.
    pub fn sign(&self, key: &Path, image: &str, legacy: bool) {
        let mut a = vec![
            "sign",
            "--key",
            key.to_str().unwrap(),
            "--tlog-upload=false",
        ];
        a.extend(Self::REG);
        if self.major >= 3 {
            a.push("--use-signing-config=false");
            if legacy {
                a.push("--new-bundle-format=false");
            }
        }
        a.push(image);
        let o = self.run(&a, None);
        assert!(o.status.success(), "cosign sign: {}", super::stderr(&o));
    }

    /// `cosign verify[-attestation] --key`: its output.
    pub fn verify(&self, what: &[&str], public: &Path, image: &str) -> Output {
        let mut a = what.to_vec();
        a.extend([
            "--key",
            public.to_str().unwrap(),
            "--insecure-ignore-tlog=true",
            "--insecure-ignore-sct",
        ]);
        a.extend(Self::REG);
        a.push(image);
        self.run(&a, None)
    }
}
