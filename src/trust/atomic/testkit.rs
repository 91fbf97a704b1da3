//! The test kit: real atomic signatures: written by `skopeo standalone-sign`
//! (containers/image's writer of the format) and by `gpg --sign` of JSON we
//! write, with throw-away keys made once per test binary; the real
//! verifier, `skopeo standalone-verify`, is asked too and must agree.
//! Every gpg step runs in a temporary GNUPGHOME removed (agent stopped)
//! before any test reads the results.
use super::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

pub(super) const REF: &str = "quay.io/openshift-release-dev/ocp-release:4.99.0-x86_64";

/// Everything made with gpg and skopeo, held in memory.
pub(super) struct Kit {
    pub digest: String,
    pub other_digest: String,
    /// Armored public keys by name: "a", "b", "past", "old".
    pub keys: BTreeMap<&'static str, Vec<u8>>,
    pub fprs: BTreeMap<&'static str, String>,
    /// Signatures by name.
    pub sigs: BTreeMap<&'static str, Vec<u8>>,
    /// skopeo standalone-verify's verdict by signature name.
    pub skopeo: BTreeMap<&'static str, bool>,
}

fn run(c: &mut Command) -> Vec<u8> {
    let out = c.output().unwrap_or_else(|e| panic!("{c:?}: {e}"));
    assert!(
        out.status.success(),
        "{c:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

pub(super) fn kit() -> &'static Kit {
    static KIT: OnceLock<Kit> = OnceLock::new();
    KIT.get_or_init(make_kit)
}

fn make_kit() -> Kit {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("g");
    std::fs::create_dir(&home).unwrap();
    std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let gpg = |args: &[&str]| {
        let mut c = Command::new("gpg");
        c.env("GNUPGHOME", &home)
            .args(["--batch", "--no-tty", "--passphrase", ""]);
        c.args(args);
        c
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let past = format!("{}!", now - 10 * 86400);
    let past_later = format!("{}!", now - 10 * 86400 + 3600);
    // a, b: ordinary keys (RSA and Ed25519); past: made 10 days ago, never
    // expires (for an expired signature); old: made 10 days ago, expired
    // after 1 day.
    run(&mut gpg(&[
        "--quick-gen-key",
        "Test A <a@example.com>",
        "rsa2048",
        "sign",
        "never",
    ]));
    run(&mut gpg(&[
        "--quick-gen-key",
        "Test B <b@example.com>",
        "ed25519",
        "sign",
        "never",
    ]));
    run(&mut gpg(&[
        "--faked-system-time",
        &past,
        "--quick-gen-key",
        "Past <past@example.com>",
        "rsa2048",
        "sign",
        "never",
    ]));
    run(&mut gpg(&[
        "--faked-system-time",
        &past,
        "--quick-gen-key",
        "Old <old@example.com>",
        "rsa2048",
        "sign",
        "1d",
    ]));
    let mut keys = BTreeMap::new();
    let mut fprs = BTreeMap::new();
    for (n, email) in [
        ("a", "a@example.com"),
        ("b", "b@example.com"),
        ("past", "past@example.com"),
        ("old", "old@example.com"),
    ] {
        let colons =
            String::from_utf8(run(&mut gpg(&["--with-colons", "--list-keys", email]))).unwrap();
        let fpr = colons
            .lines()
            .find_map(|l| {
                l.strip_prefix("fpr:")
                    .map(|r| r.trim_matches(':').to_string())
            })
            .unwrap();
        fprs.insert(n, fpr.clone());
        keys.insert(n, run(&mut gpg(&["--armor", "--export", &fpr])));
    }
    let d = tmp.path();
    let manifest = d.join("manifest.json");
    std::fs::write(&manifest, br#"{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json","config":{}}"#).unwrap();
    let other = d.join("other.json");
    std::fs::write(&other, br#"{"schemaVersion":2,"other":true}"#).unwrap();
    let digest_of = |p: &Path| {
        String::from_utf8(run(Command::new("skopeo").arg("manifest-digest").arg(p)))
            .unwrap()
            .trim()
            .to_string()
    };
    let digest = digest_of(&manifest);
    let other_digest = digest_of(&other);
    let mut sigs = BTreeMap::new();
    let skopeo_sign = |m: &Path, fpr: &str, out: &str| {
        let o = d.join(out);
        run(Command::new("skopeo")
            .env("GNUPGHOME", &home)
            .args(["standalone-sign", "--output"])
            .arg(&o)
            .arg(m)
            .args([REF, fpr]));
        std::fs::read(o).unwrap()
    };
    sigs.insert("good", skopeo_sign(&manifest, &fprs["a"], "good"));
    sigs.insert("good_b", skopeo_sign(&manifest, &fprs["b"], "good_b"));
    sigs.insert(
        "other_digest",
        skopeo_sign(&other, &fprs["a"], "other_digest"),
    );
    // Hand-written JSON, signed by gpg as skopeo does (an opaque signed message).
    let json = |crit_extra: &str, img_extra: &str, kind: &str| {
        format!(
            r#"{{"critical":{{"identity":{{"docker-reference":"{REF}"}},"image":{{"docker-manifest-digest":"{digest}"{img_extra}}},"type":"{kind}"{crit_extra}}},"optional":{{"creator":"test","timestamp":1700000000}}}}"#
        )
    };
    let gpg_sign = |name: &str, body: &str, extra: &[&str]| {
        let src = d.join(format!("{name}.json"));
        std::fs::write(&src, body).unwrap();
        let out = d.join(name);
        let (o, s) = (out.to_str().unwrap(), src.to_str().unwrap());
        let mut args: Vec<&str> = extra.to_vec();
        args.extend(["--output", o, "--sign", s]);
        run(&mut gpg(&args));
        std::fs::read(out).unwrap()
    };
    let a = fprs["a"].clone();
    let atomic = "atomic container signature";
    sigs.insert(
        "hand_good",
        gpg_sign("hand_good", &json("", "", atomic), &["-u", &a]),
    );
    sigs.insert(
        "unknown_field",
        gpg_sign(
            "unknown_field",
            &json("", r#","foo":"bar""#, atomic),
            &["-u", &a],
        ),
    );
    sigs.insert(
        "wrong_type",
        gpg_sign(
            "wrong_type",
            &json("", "", "cosign container image signature"),
            &["-u", &a],
        ),
    );
    sigs.insert(
        "uncompressed",
        gpg_sign(
            "uncompressed",
            &json("", "", atomic),
            &["-u", &a, "--compress-algo", "none"],
        ),
    );
    sigs.insert(
        "armored",
        gpg_sign("armored", &json("", "", atomic), &["-u", &a, "--armor"]),
    );
    let p = fprs["past"].clone();
    let past_sig = [
        "-u",
        &p,
        "--faked-system-time",
        &past_later,
        "--default-sig-expire",
        "1d",
    ];
    sigs.insert(
        "expired_sig",
        gpg_sign("expired_sig", &json("", "", atomic), &past_sig),
    );
    let o = fprs["old"].clone();
    sigs.insert(
        "expired_key",
        gpg_sign(
            "expired_key",
            &json("", "", atomic),
            &["-u", &o, "--faked-system-time", &past_later],
        ),
    );
    // The real verifier's verdicts.
    let mut skopeo = BTreeMap::new();
    for (name, key) in [
        ("good", "a"),
        ("other_digest", "a"),
        ("expired_sig", "past"),
        ("expired_key", "old"),
        ("hand_good", "a"),
    ] {
        let ok = Command::new("skopeo")
            .env("GNUPGHOME", &home)
            .arg("standalone-verify")
            .arg(&manifest)
            .args([REF, &fprs[key]])
            .arg(d.join(name))
            .output()
            .unwrap()
            .status
            .success();
        skopeo.insert(name, ok);
    }
    // Stop the agent gpg started in this home, then remove it all.
    let _ = Command::new("gpgconf")
        .env("GNUPGHOME", &home)
        .args(["--kill", "all"])
        .status();
    drop(tmp);
    Kit {
        digest,
        other_digest,
        keys,
        fprs,
        sigs,
        skopeo,
    }
}

pub(super) fn ring(name: &str) -> Keyring {
    Keyring {
        name: format!("verifier-public-key-{name}"),
        armored: kit().keys[name].clone(),
    }
}

pub(super) fn sig(name: &str) -> Signature {
    Signature {
        origin: name.to_string(),
        bytes: kit().sigs[name].clone(),
    }
}

pub(super) fn refusal(keyrings: &[Keyring], sigs: &[Signature]) -> String {
    let e = verify(keyrings, sigs, &kit().digest).expect_err("must be refused");
    format!("{e:#}")
}
