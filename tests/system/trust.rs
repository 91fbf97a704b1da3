//! The release's signature as the user meets it: `inspect` and `generate`
//! over the test release in a registry on 127.0.0.1, signed by the real
//! writers (`skopeo standalone-sign`, containers/image's writer of the
//! atomic format, with a throwaway GPG key; the `cosign` CLI), its
//! signatures served from a lookaside store (python3's http.server on
//! 127.0.0.1) or given as the files `oc adm release mirror` and oc-mirror
//! write. Official releases (by the pull spec's IDMS source) are refused
//! unverified; every bad input is one line.
/// cosign both ways at the library level (src/trust/sigstore).
mod cosign;
use crate::common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A throwaway RSA GPG key in its own GNUPGHOME.
struct Key {
    home: tempfile::TempDir,
    fpr: String,
    armored: String,
}

fn key(name: &str) -> Key {
    let home = tempfile::tempdir().unwrap();
    let gpg = |args: &[&str]| {
        must(
            Command::new("gpg")
                .arg("--homedir")
                .arg(home.path())
                .args([
                    "--batch",
                    "--quiet",
                    "--pinentry-mode",
                    "loopback",
                    "--passphrase",
                    "",
                ])
                .args(args),
        )
    };
    gpg(&[
        "--quick-gen-key",
        &format!("{name} <{name}@test.invalid>"),
        "rsa2048",
        "sign",
        "never",
    ]);
    let fpr = gpg(&["--with-colons", "--list-keys"])
        .lines()
        .find_map(|l| l.strip_prefix("fpr:::::::::"))
        .map(|f| f.trim_end_matches(':').to_string())
        .unwrap();
    let armored = gpg(&["--armor", "--export", &fpr]);
    Key { home, fpr, armored }
}

fn keys() -> &'static (Key, Key) {
    static K: OnceLock<(Key, Key)> = OnceLock::new();
    K.get_or_init(|| (key("release-signer"), key("someone-else")))
}

/// `skopeo standalone-sign` of `manifest` as `reference` by `k`.
fn sign(k: &Key, manifest: &[u8], reference: &str) -> Vec<u8> {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("manifest.json"), manifest).unwrap();
    must(
        Command::new("skopeo")
            .env("GNUPGHOME", k.home.path())
            .args(["standalone-sign", "--output"])
            .arg(d.path().join("sig"))
            .arg(d.path().join("manifest.json"))
            .arg(reference)
            .arg(&k.fpr),
    );
    read(&d.path().join("sig"))
}

/// The test release in a registry: `ocp/release:4.18.0-test` and its OS
/// images beside it, as `oc adm release mirror` leaves them.
struct Release {
    reg: Registry,
    /// The release's manifest as the registry serves it, and its digest.
    manifest: Vec<u8>,
    digest: String,
    /// Another manifest (the legacy release's), for a signature of
    /// something else.
    other: Vec<u8>,
}

/// Each test its own registry, stopped when the test ends (a registry
/// held in a static is never dropped: it outlived the test process).
fn release() -> Release {
    {
        let reg = Registry::start(false);
        reg.push(&oci("release"), "ocp/release:4.18.0-test");
        reg.push(&oci("release-legacy"), "ocp/release:4.11.0-test");
        for t in ["rhel-coreos", "rhel-coreos-10", "machine-os-content"] {
            reg.push(&oci(t), &format!("ocp/release:{t}"));
        }
        let raw = |tag: &str| -> Vec<u8> {
            let o = Command::new("skopeo")
                .args(["inspect", "--raw", "--tls-verify=false"])
                .arg(format!("docker://{}/ocp/release:{tag}", reg.host()))
                .output()
                .unwrap();
            assert!(o.status.success());
            o.stdout
        };
        let manifest = raw("4.18.0-test");
        let other = raw("4.11.0-test");
        let digest = sha256_digest(&manifest);
        assert_eq!(digest, fx()["release"]["digest"].as_str().unwrap());
        Release {
            reg,
            manifest,
            digest,
            other,
        }
    }
}

/// [`run`] with more environment.
fn run_env(cache: &Path, env: &[(&str, &str)], args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_bootimage-gen"))
        .args(args)
        .env("BOOTIMAGE_GEN_CACHE_DIR", cache)
        .env_remove("REGISTRY_AUTH_FILE")
        .env("HOME", cache)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn sha256_digest(b: &[u8]) -> String {
    use sha2::Digest;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(b)))
}

impl Release {
    fn pull_spec(&self) -> String {
        format!("{}/ocp/release:4.18.0-test", self.reg.host())
    }
    fn hex(&self) -> &str {
        self.digest.trim_start_matches("sha256:")
    }
}

/// A lookaside store: `DIR/sha256=<hex>/signature-N`, served over HTTP on
/// 127.0.0.1 by python3's http.server (stopped when dropped).
struct Store {
    _dir: tempfile::TempDir,
    port: u16,
    _server: ChildGuard,
}

impl Store {
    fn serve(sigs: &[Vec<u8>], hex: &str) -> Store {
        let dir = tempfile::tempdir().unwrap();
        write_lookaside(dir.path(), sigs, hex);
        let port = free_port();
        let child = Command::new("python3")
            .args(["-m", "http.server", "--bind", "127.0.0.1", "--directory"])
            .arg(dir.path())
            .arg(port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let t = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "http.server did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Store {
            _dir: dir,
            port,
            _server: ChildGuard(child),
        }
    }
    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

fn write_lookaside(dir: &Path, sigs: &[Vec<u8>], hex: &str) {
    let d = dir.join(format!("sha256={hex}"));
    std::fs::create_dir_all(&d).unwrap();
    for (i, s) in sigs.iter().enumerate() {
        std::fs::write(d.join(format!("signature-{}", i + 1)), s).unwrap();
    }
}

/// A release-verification ConfigMap as OpenShift ships it
/// (cluster-update-keys' manifests): keyrings under `verifier-public-key-*`,
/// stores under `store-*`.
fn config_map(dir: &Path, keys: &[&Key], stores: &[String]) -> PathBuf {
    let mut data = String::new();
    for (i, k) in keys.iter().enumerate() {
        data.push_str(&format!("  verifier-public-key-test-{i}: |\n"));
        for l in k.armored.lines() {
            data.push_str(&format!("    {l}\n"));
        }
    }
    for (i, s) in stores.iter().enumerate() {
        data.push_str(&format!("  store-test-{i}: {s}\n"));
    }
    let p = dir.join(format!(
        "release-verification-{}.yaml",
        keys.len() * 10 + stores.len()
    ));
    std::fs::write(
        &p,
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: release-verification\n  namespace: openshift-config-managed\n  annotations:\n    release.openshift.io/verification-config-map: \"\"\ndata:\n{data}"
        ),
    )
    .unwrap();
    p
}

/// The ConfigMap `oc adm release mirror --release-image-signature-to-dir`
/// writes (`signature-sha256-<16 hex>.json`): `binaryData`
/// `sha256-<hex>-N`, base64.
fn oc_signature_file(dir: &Path, sigs: &[Vec<u8>], hex: &str) -> PathBuf {
    use base64::Engine;
    let mut bin = serde_json::Map::new();
    for (i, s) in sigs.iter().enumerate() {
        bin.insert(
            format!("sha256-{hex}-{}", i + 1),
            base64::engine::general_purpose::STANDARD.encode(s).into(),
        );
    }
    let doc = serde_json::json!({
        "kind": "ConfigMap",
        "apiVersion": "v1",
        "metadata": {
            "name": format!("sha256-{hex}"),
            "namespace": "openshift-config-managed",
            "creationTimestamp": null,
            "labels": {"release.openshift.io/verification-signatures": ""}
        },
        "binaryData": bin
    });
    let p = dir.join(format!("signature-sha256-{}.json", &hex[..16]));
    std::fs::write(&p, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    p
}

fn inspect(r: &Release, cache: &Path, extra: &[&str]) -> Output2 {
    let mut args = vec![
        "inspect".to_string(),
        r.pull_spec(),
        "--insecure".into(),
        "--json".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = run(cache, &a);
    Output2 {
        ok: o.status.success(),
        doc: serde_json::from_slice(&o.stdout).unwrap_or(Value::Null),
        err: stderr(&o),
        out: o,
    }
}

struct Output2 {
    ok: bool,
    doc: Value,
    err: String,
    out: std::process::Output,
}

fn verified_by(o: &Output2) -> &Value {
    assert!(o.ok, "inspect failed:\n{}", o.err);
    let sig = &o.doc["release"]["signature"];
    assert_eq!(sig["verified"], true, "{sig:#}");
    &sig["by"][0]
}

/// `inspect` with a ConfigMap and signature files: verified by GPG, the
/// signature found in a file whose path holds `origin`.
fn verified_from(
    r: &Release,
    cache: &Path,
    config: &Path,
    signatures: &Path,
    origin: &str,
) -> Output2 {
    let o = inspect(
        r,
        cache,
        &[
            "--verification-config",
            config.to_str().unwrap(),
            "--signatures",
            signatures.to_str().unwrap(),
        ],
    );
    let by = verified_by(&o);
    assert_eq!(by["mechanism"], "gpg");
    assert!(by["origin"].as_str().unwrap().contains(origin), "{by:#}");
    o
}

fn refused(o: &Output2, needle: &str) -> String {
    one_error(&o.out, needle)
}

/// A GPG-signed release verifies from a store, from oc's signature
/// ConfigMap and from a lookaside directory; an unreachable store is a
/// warning when the files verify it.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn a_gpg_signed_release_verifies_from_a_store_and_from_files() {
    let r = &release();
    let (k, _) = keys();
    let sig = sign(k, &r.manifest, &format!("{}/ocp/release", r.reg.host()));
    let c = tempfile::tempdir().unwrap();
    let store = Store::serve(std::slice::from_ref(&sig), r.hex());

    // The store named by the ConfigMap.
    let cm = config_map(c.path(), &[k], &[store.url()]);
    let o = inspect(
        r,
        c.path(),
        &["--verification-config", cm.to_str().unwrap()],
    );
    let by = verified_by(&o);
    assert_eq!(by["mechanism"], "gpg");
    assert_eq!(by["key"].as_str().unwrap().to_uppercase(), k.fpr);
    assert_eq!(by["digest"], r.digest.as_str());
    assert!(
        by["origin"].as_str().unwrap().contains(&store.url()),
        "{by:#}"
    );
    assert!(o.err.contains("signature verified: gpg key"), "{}", o.err);

    // oc's ConfigMap file, with the store out of reach: a warning.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let cm_dead = config_map(c.path(), &[k], std::slice::from_ref(&dead));
    let oc = oc_signature_file(c.path(), std::slice::from_ref(&sig), r.hex());
    let o = verified_from(r, c.path(), &cm_dead, &oc, "signature-sha256-");
    let warnings = o.doc["release"]["signature"]["warnings"].to_string();
    assert!(
        warnings.contains(&dead) && warnings.contains("could not be read"),
        "{warnings}"
    );

    // oc-mirror's signature ConfigMap (cluster-resources/
    // signature-configmap.yaml: one ConfigMap for every release mirrored,
    // keys numbered by one counter across them).
    let mirror_dir = tempfile::tempdir().unwrap();
    let cm_yaml = mirror_dir.path().join("signature-configmap.yaml");
    {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD.encode(&sig);
        std::fs::write(
            &cm_yaml,
            format!(
                "apiVersion: v1\nbinaryData:\n  sha256-{other}-1: {b64}\n  sha256-{hex}-2: {b64}\nkind: ConfigMap\nmetadata:\n  annotations:\n    createdBy: oc-mirror\n  labels:\n    release.openshift.io/verification-signatures: \"\"\n  name: mirrored-release-signatures\n  namespace: openshift-config-managed\n",
                other = sha256_digest(&r.other).trim_start_matches("sha256:"),
                hex = r.hex()
            ),
        )
        .unwrap();
    }
    verified_from(r, c.path(), &cm_dead, &cm_yaml, "signature-configmap.yaml");

    // A lookaside directory, and the text form.
    let look = tempfile::tempdir().unwrap();
    write_lookaside(look.path(), std::slice::from_ref(&sig), r.hex());
    let cm_none = config_map(c.path(), &[k], &[]);
    let args = [
        "inspect",
        &r.pull_spec(),
        "--insecure",
        "--verification-config",
        cm_none.to_str().unwrap(),
        "--signatures",
        look.path().to_str().unwrap(),
    ];
    let o = run(c.path(), &args);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("signature") && text.contains("verified by"),
        "{text}"
    );
    assert!(
        text.contains(&k.fpr) || text.contains(&k.fpr.to_lowercase()),
        "{text}"
    );
    drop(store);
}

/// Each bad signature is refused in one line naming why: another key's,
/// one over another digest, one changed byte; and no signature at all
/// under --require-signature, --signatures without keys.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn bad_gpg_signatures_are_refused_in_one_line() {
    let r = &release();
    let (k, other) = keys();
    let name = format!("{}/ocp/release", r.reg.host());
    let c = tempfile::tempdir().unwrap();
    let cm = config_map(c.path(), &[k], &[]);
    let cm_s = cm.to_str().unwrap();
    let case = |sigs: Vec<Vec<u8>>, what: &str| -> String {
        let d = tempfile::tempdir().unwrap();
        write_lookaside(d.path(), &sigs, r.hex());
        let o = inspect(
            r,
            c.path(),
            &[
                "--verification-config",
                cm_s,
                "--signatures",
                d.path().to_str().unwrap(),
            ],
        );
        assert!(!o.ok, "{what}: accepted");
        refused(&o, "its signature is not verified")
    };
    let e = case(vec![sign(other, &r.manifest, &name)], "another key");
    assert!(
        e.contains("is not in keyring verifier-public-key-test-0"),
        "{e}"
    );
    eprintln!("another key: {e}");
    let e = case(vec![sign(k, &r.other, &name)], "another digest");
    assert!(e.contains(&r.digest[7..19]) || e.contains("digest"), "{e}");
    eprintln!("another digest: {e}");
    let mut bent = sign(k, &r.manifest, &name);
    let n = bent.len() / 2;
    bent[n] ^= 1;
    let e = case(vec![bent], "one byte changed");
    assert!(
        e.contains("not an OpenPGP signed message") || e.contains("bad signature"),
        "{e}"
    );
    eprintln!("one byte changed: {e}");

    // Two keyrings, one satisfied: refused (every keyring must be).
    let cm2 = config_map(c.path(), &[k, other], &[]);
    let d = tempfile::tempdir().unwrap();
    write_lookaside(d.path(), &[sign(k, &r.manifest, &name)], r.hex());
    let o = inspect(
        r,
        c.path(),
        &[
            "--verification-config",
            cm2.to_str().unwrap(),
            "--signatures",
            d.path().to_str().unwrap(),
        ],
    );
    eprintln!("two keyrings: {}", refused(&o, "not verified"));

    // A re-pushed release: the tag now names another manifest, and the
    // signatures of the one signed are no signatures of it.
    r.reg.push(&oci("release-legacy"), "ocp/release:repushed");
    let oc = oc_signature_file(c.path(), &[sign(k, &r.manifest, &name)], r.hex());
    let o = run(
        c.path(),
        &[
            "inspect",
            &format!("{}/ocp/release:repushed", r.reg.host()),
            "--insecure",
            "--verification-config",
            cm_s,
            "--signatures",
            oc.to_str().unwrap(),
        ],
    );
    let e = one_error(&o, "its signature is not verified");
    assert!(e.contains("(0 found)"), "{e}");
    eprintln!("re-pushed: {e}");

    // Nothing to check with.
    let o = inspect(r, c.path(), &["--signatures", d.path().to_str().unwrap()]);
    refused(&o, "--verification-config");
    let o = inspect(r, c.path(), &["--require-signature"]);
    let e = refused(&o, "--require-signature");
    assert!(e.contains("--no-verify-signature"), "{e}");

    // And a release that is not official, with no keys: built unverified,
    // which the record says.
    let o = inspect(r, c.path(), &[]);
    assert!(o.ok, "{}", o.err);
    let sig = &o.doc["release"]["signature"];
    assert_eq!(sig["verified"], false);
    assert!(
        sig["policy"].as_str().unwrap().contains("not required"),
        "{sig:#}"
    );
}

/// A release named by a mirror of Red Hat's repository (its IDMS source)
/// is official: unverified, it is refused; --no-verify-signature builds it,
/// recorded as such; the user's own keys and signatures verify it.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn an_official_release_by_its_idms_source_must_verify() {
    let r = &release();
    let (k, _) = keys();
    let c = tempfile::tempdir().unwrap();
    let idms = c.path().join("idms.yaml");
    std::fs::write(
        &idms,
        format!(
            "apiVersion: config.openshift.io/v1\nkind: ImageDigestMirrorSet\nmetadata:\n  name: release-0\nspec:\n  imageDigestMirrors:\n  - mirrors:\n    - {}/ocp/release\n    source: quay.io/openshift-release-dev/ocp-release\n",
            r.reg.host()
        ),
    )
    .unwrap();
    let idms_s = idms.to_str().unwrap();
    let o = inspect(r, c.path(), &["--idms-file", idms_s]);
    let e = refused(
        &o,
        "an official release (quay.io/openshift-release-dev/ocp-release)",
    );
    assert!(
        e.contains("--signatures") && e.contains("--no-verify-signature"),
        "{e}"
    );
    eprintln!("official, unverified: {e}");

    let o = inspect(
        r,
        c.path(),
        &["--idms-file", idms_s, "--no-verify-signature"],
    );
    assert!(o.ok, "{}", o.err);
    let sig = &o.doc["release"]["signature"];
    assert_eq!(sig["verified"], false);
    assert_eq!(sig["official"], "redhat");
    assert_eq!(sig["policy"], "--no-verify-signature");

    let sig = sign(k, &r.manifest, "quay.io/openshift-release-dev/ocp-release");
    let cm = config_map(c.path(), &[k], &[]);
    let oc = oc_signature_file(c.path(), &[sig], r.hex());
    let o = inspect(
        r,
        c.path(),
        &[
            "--idms-file",
            idms_s,
            "--verification-config",
            cm.to_str().unwrap(),
            "--signatures",
            oc.to_str().unwrap(),
        ],
    );
    let by = verified_by(&o);
    assert_eq!(
        by["signed-reference"],
        "quay.io/openshift-release-dev/ocp-release"
    );
    // The user's keys replace the built-in ones and each must verify: the
    // ConfigMap does, a --sigstore-key nothing is signed by does not.
    let (_kd, _, cosign_pub) = crate::common::cosign::Cosign::new("trixie").key_pair();
    let o = inspect(
        r,
        c.path(),
        &[
            "--idms-file",
            idms_s,
            "--verification-config",
            cm.to_str().unwrap(),
            "--signatures",
            oc.to_str().unwrap(),
            "--sigstore-key",
            cosign_pub.to_str().unwrap(),
        ],
    );
    let e = refused(&o, "not satisfied: a cosign signature by a --sigstore-key");
    eprintln!("one of the user's keys unmet: {e}");
}

/// A release signed by the real cosign (Debian forky's 3.1, its default
/// bundle) verifies with `--sigstore-key`; another key is refused in one
/// line.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn a_cosign_signed_release_verifies_with_its_key() {
    use crate::common::cosign::Cosign;
    let r = &release();
    let cosign = Cosign::new("forky");
    let (_k1, key, public) = cosign.key_pair();
    let (_k2, _, other) = cosign.key_pair();
    // A repository of its own, so the other tests' release stays unsigned.
    r.reg.push(&oci("release"), "signed/release:4.18.0-test");
    for t in ["rhel-coreos", "rhel-coreos-10", "machine-os-content"] {
        r.reg.push(&oci(t), &format!("signed/release:{t}"));
    }
    cosign.sign(
        &key,
        &format!("{}/signed/release@{}", r.reg.host(), r.digest),
        false,
    );
    let c = tempfile::tempdir().unwrap();
    let spec = format!("{}/signed/release:4.18.0-test", r.reg.host());
    let o = run(
        c.path(),
        &[
            "inspect",
            &spec,
            "--insecure",
            "--json",
            "--sigstore-key",
            public.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    let by = &doc["release"]["signature"]["by"][0];
    assert_eq!(by["mechanism"], "sigstore", "{doc:#}");
    assert_eq!(by["digest"], r.digest.as_str());
    assert!(by["origin"].as_str().unwrap().contains("bundle"), "{by:#}");
    let refused_with = |key: &Path, what: &str| {
        let o = run(
            c.path(),
            &[
                "inspect",
                &spec,
                "--insecure",
                "--sigstore-key",
                key.to_str().unwrap(),
            ],
        );
        let e = one_error(&o, "its signature is not verified");
        eprintln!("{what}: {e}");
    };
    refused_with(&other, "another cosign key");
    // Re-pushed: the tag names another release; its signature is not there.
    r.reg
        .push(&oci("release-legacy"), "signed/release:4.18.0-test");
    refused_with(&public, "re-pushed, cosign");
}

/// `generate` records the verification: meta.json's release-payload
/// comment in one line, release-verification.json whole.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn generate_records_what_verified_the_release() {
    let r = &release();
    let (k, _) = keys();
    let c = scratch("trust-generate");
    let _ = std::fs::remove_dir_all(&c);
    std::fs::create_dir_all(&c).unwrap();
    let sig = sign(k, &r.manifest, &format!("{}/ocp/release", r.reg.host()));
    let cm = config_map(&c, &[k], &[]);
    let oc = oc_signature_file(&c, &[sig], r.hex());
    let out = c.join("out");
    let cosign = crate::common::cosign::Cosign::new("trixie");
    let (_k, sign_key, public) = cosign.key_pair();
    let o = run_env(
        &c.join("cache"),
        &[("COSIGN_PASSWORD", crate::common::cosign::PASSWORD)],
        &[
            "generate",
            &r.pull_spec(),
            "metal",
            "--insecure",
            "-o",
            out.to_str().unwrap(),
            "--verification-config",
            cm.to_str().unwrap(),
            "--signatures",
            oc.to_str().unwrap(),
            "--sign-key",
            sign_key.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let meta: Value = serde_json::from_slice(&read(&out.join("meta.json"))).unwrap();
    let comment = meta["release-payload"]["comment"].as_str().unwrap();
    assert!(comment.contains("signature verified: gpg key"), "{comment}");
    assert!(comment.to_uppercase().contains(&k.fpr), "{comment}");
    let rec: Value = serde_json::from_slice(&read(&out.join("release-verification.json"))).unwrap();
    assert_eq!(rec["verified"], true);
    assert_eq!(rec["digest"], r.digest.as_str());
    assert!(rec["by"][0]["origin"]
        .as_str()
        .unwrap()
        .contains("signature-sha256-"));
    // The provenance beside meta.json, as cosign checks a blob's: the
    // metal disk is a subject of the signed statement, meta.json is not.
    let metal = image_file(&meta, &out, "metal");
    let check = |file: &Path, key: &Path| {
        cosign.run(
            &[
                "verify-blob-attestation",
                "--key",
                key.to_str().unwrap(),
                "--signature",
                out.join("provenance.dsse.json").to_str().unwrap(),
                "--type",
                "slsaprovenance1",
                "--insecure-ignore-tlog=true",
                file.to_str().unwrap(),
            ],
            None,
        )
    };
    let v = check(&metal, &public);
    assert!(
        v.status.success(),
        "cosign verify-blob-attestation: {}",
        stderr(&v)
    );
    let v = check(&out.join("meta.json"), &public);
    assert!(
        !v.status.success(),
        "meta.json is not a subject, yet it verified"
    );
    let (_k2, _, other) = cosign.key_pair();
    let v = check(&metal, &other);
    assert!(!v.status.success(), "another key verified the provenance");
    let st: Value = serde_json::from_slice(&read(&out.join("provenance.intoto.json"))).unwrap();
    assert_eq!(st["predicateType"], "https://slsa.dev/provenance/v1");
    let _ = std::fs::remove_dir_all(&c);
}

/// A local layout whose signed list blob was replaced under its old name is
/// refused before anything is read from it: the digest a signature names
/// must be the bytes'.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn a_layout_index_whose_bytes_are_not_its_digest_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let lay = d.path().join("oci");
    let list = fixture_manifest("release-multi");
    let raw = serde_json::to_vec(&list).unwrap();
    let digest = sha256_digest(&raw);
    let blobs = lay.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    // The bytes as stored: valid, and their own digest.
    std::fs::write(blobs.join(&digest[7..]), &raw).unwrap();
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "digest": digest,
            "size": raw.len(),
            "annotations": {"org.opencontainers.image.ref.name": "release-multi"}
        }]
    });
    std::fs::write(lay.join("index.json"), serde_json::to_vec(&index).unwrap()).unwrap();
    std::fs::write(lay.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    let spec = format!("oci:{}:release-multi", lay.display());
    let c = tempfile::tempdir().unwrap();
    // Control: with the right bytes, the list is read (and its entries,
    // absent from this small layout, are what fails).
    let o = run(c.path(), &["inspect", &spec, "--arch", "x86_64"]);
    assert!(!stderr(&o).contains("holds other bytes"), "{}", stderr(&o));
    // Replaced: another valid list under the old name.
    let mut other = list.clone();
    other["annotations"] = serde_json::json!({"replaced": "yes"});
    std::fs::write(
        blobs.join(&digest[7..]),
        serde_json::to_vec(&other).unwrap(),
    )
    .unwrap();
    let o = run(c.path(), &["inspect", &spec, "--arch", "x86_64"]);
    one_error(&o, "holds other bytes");
}
