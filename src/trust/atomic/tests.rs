//! verify() and the trust configuration, against real signatures
//! (testkit) and the real verifier's verdicts.
use super::testkit::{kit, refusal, ring, sig, REF};
use super::*;
use std::io::Write;
use std::process::Command;

#[test]
fn accepts_a_skopeo_signature_as_skopeo_does() {
    let k = kit();
    let v = verify(&[ring("a")], &[sig("good")], &k.digest).unwrap();
    assert_eq!(v.verified.len(), 1);
    let got = &v.verified[0];
    assert_eq!(got.keyring, "verifier-public-key-a");
    assert_eq!(got.fingerprint, k.fprs["a"]);
    assert_eq!(got.docker_reference, REF);
    assert_eq!(got.origin, "good");
    assert!(got.timestamp.is_some() && got.signed_at > 0);
    assert!(v.refused.is_empty());
    assert!(
        k.skopeo["good"],
        "skopeo standalone-verify refused the good signature"
    );
    // Our hand-made JSON is accepted too: the negative cases below differ
    // from it in one thing only.
    verify(&[ring("a")], &[sig("hand_good")], &k.digest).unwrap();
    assert!(k.skopeo["hand_good"]);
}

#[test]
fn refuses_a_key_not_in_the_keyring() {
    let e = refusal(&[ring("a")], &[sig("good_b")]);
    let want = format!(
        "key {} is not in keyring verifier-public-key-a",
        kit().fprs["b"]
    );
    assert!(e.contains(&want), "{e}");
    assert!(
        e.contains("no signature satisfies keyring verifier-public-key-a"),
        "{e}"
    );
}

#[test]
fn refuses_another_digest_as_skopeo_does() {
    let k = kit();
    let e = refusal(&[ring("a")], &[sig("other_digest")]);
    let want = format!(
        "other_digest: signed digest {} is not the release's {}",
        k.other_digest, k.digest
    );
    assert!(e.contains(&want), "{e}");
    assert!(
        !k.skopeo["other_digest"],
        "skopeo accepted a signature of another digest"
    );
    // And the same signature is good for the digest it names.
    verify(&[ring("a")], &[sig("other_digest")], &k.other_digest).unwrap();
}

#[test]
fn refuses_one_changed_byte() {
    // In a compressed message (skopeo's) and in the literal data of an
    // uncompressed one, where gpgv reports BADSIG.
    let mut s = sig("good");
    let n = s.bytes.len();
    s.bytes[n / 2] ^= 0x01;
    refusal(&[ring("a")], &[s]);
    let mut u = sig("uncompressed");
    let at = u.bytes.windows(8).position(|w| w == b"critical").unwrap();
    u.bytes[at] = b'C';
    let e = refusal(&[ring("a")], &[u]);
    assert!(e.contains("bad signature by key"), "{e}");
    verify(&[ring("a")], &[sig("uncompressed")], &kit().digest).unwrap();
}

#[test]
fn refuses_unknown_fields_and_the_wrong_type() {
    let e = refusal(&[ring("a")], &[sig("unknown_field")]);
    assert!(e.contains("unknown field \"foo\" in critical.image"), "{e}");
    let e = refusal(&[ring("a")], &[sig("wrong_type")]);
    assert!(
        e.contains("critical.type is \"cosign container image signature\""),
        "{e}"
    );
}

#[test]
fn refuses_expired_signatures_and_keys_as_skopeo_does() {
    let k = kit();
    let e = refusal(&[ring("past")], &[sig("expired_sig")]);
    assert!(e.contains("expired: the signature expired on"), "{e}");
    assert!(!k.skopeo["expired_sig"]);
    let e = refusal(&[ring("old")], &[sig("expired_key")]);
    assert!(
        e.contains(&format!("expired: key {} of keyring", k.fprs["old"])),
        "{e}"
    );
    assert!(!k.skopeo["expired_key"]);
}

#[test]
fn every_keyring_must_be_satisfied() {
    let k = kit();
    let e = refusal(&[ring("a"), ring("b")], &[sig("good")]);
    assert!(
        e.contains("no signature satisfies keyring verifier-public-key-b ("),
        "{e}"
    );
    assert!(
        e.contains(&format!(
            "key {} is not in keyring verifier-public-key-b",
            k.fprs["a"]
        )),
        "{e}"
    );
    let v = verify(
        &[ring("a"), ring("b")],
        &[sig("other_digest"), sig("good"), sig("good_b")],
        &k.digest,
    )
    .unwrap();
    let by: Vec<(&str, &str)> = v
        .verified
        .iter()
        .map(|v| (v.keyring.as_str(), v.origin.as_str()))
        .collect();
    assert_eq!(
        by,
        [
            ("verifier-public-key-a", "good"),
            ("verifier-public-key-b", "good_b")
        ]
    );
    assert_eq!(v.refused.len(), 1);
    assert_eq!(v.refused[0].0, "other_digest");
    // One keyring holding two keys (binary, as upstream also reads): either signs it.
    let mut both = armor::binary_keyring(&k.keys["a"], "a").unwrap();
    both.extend(armor::binary_keyring(&k.keys["b"], "b").unwrap());
    let r = Keyring {
        name: "verifier-public-key-both".into(),
        armored: both,
    };
    let v = verify(std::slice::from_ref(&r), &[sig("good_b")], &k.digest).unwrap();
    assert_eq!(v.verified[0].fingerprint, k.fprs["b"]);
    // No signatures at all.
    let e = refusal(&[ring("a")], &[]);
    assert!(e.contains("no signature found"), "{e}");
}

#[test]
fn refuses_armored_text_and_oversize_signatures() {
    let e = refusal(&[ring("a")], &[sig("armored")]);
    assert!(e.contains("armored: not an OpenPGP signed message"), "{e}");
    let mut big = sig("good");
    big.bytes.resize(MAX_SIGNATURE + 1, 0);
    let e = refusal(&[ring("a")], &[big]);
    assert!(e.contains("good: larger than 50 KiB"), "{e}");
}

// ------------------------------------------------------------ config

fn show_fingerprints(armored: &[u8]) -> Vec<String> {
    let home = tempfile::tempdir().unwrap();
    let mut c = Command::new("gpg");
    c.env("GNUPGHOME", home.path())
        .args(["--batch", "--with-colons", "--show-keys"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let mut ch = c.spawn().unwrap();
    ch.stdin.take().unwrap().write_all(armored).unwrap();
    let out = ch.wait_with_output().unwrap();
    // Primary keys only: the fpr line right after each pub line.
    let mut fprs = Vec::new();
    let mut after_pub = false;
    for l in String::from_utf8(out.stdout).unwrap().lines() {
        if l.starts_with("pub:") {
            after_pub = true;
        } else if let (true, Some(r)) = (after_pub, l.strip_prefix("fpr:")) {
            fprs.push(r.trim_matches(':').to_string());
            after_pub = false;
        }
    }
    fprs
}

#[test]
fn builtin_keyrings_are_the_published_keys() {
    let rh = builtin("redhat").unwrap();
    assert_eq!(rh.keyrings.len(), 1);
    assert_eq!(rh.keyrings[0].name, "verifier-public-key-redhat");
    // Red Hat release key 2 and beta key 2 (access.redhat.com/security/team/key).
    assert_eq!(
        show_fingerprints(&rh.keyrings[0].armored),
        [
            "567E347AD0044ADE55BA8A5F199E2F91FD431D51",
            "B08B659EE86AF623BC90E8DB938A80CAF21541EB"
        ]
    );
    let stores: Vec<&str> = rh.stores.iter().map(|s| s.1.as_str()).collect();
    assert_eq!(
        stores,
        [
            "https://storage.googleapis.com/openshift-release/official/signatures/openshift/release",
            "https://mirror.openshift.com/pub/openshift-v4/signatures/openshift/release"
        ]
    );
    let okd = builtin("okd").unwrap();
    assert_eq!(okd.keyrings[0].name, "verifier-public-key-ci");
    assert_eq!(
        show_fingerprints(&okd.keyrings[0].armored),
        [
            "D04761B116203B0C0859B61628B76E05B923888E",
            "20CCC7AD272DCD3AA169F12A65C28371F55D29A9",
            "FE526D8F6FEDC123BE219E45CF4B45E2071F0337",
            "6A9588F07F2D3AE7973AD2A9193E53CCD2E2F7A4"
        ]
    );
    assert_eq!(
        okd.stores[0].1,
        "https://storage.googleapis.com/openshift-ci-release/releases/signatures/openshift/release"
    );
    assert!(builtin("nope").is_none());
    // Our test key does not satisfy Red Hat's keyring.
    let e = format!(
        "{:#}",
        verify(&rh.keyrings, &[sig("good")], &kit().digest).unwrap_err()
    );
    assert!(
        e.contains("is not in keyring verifier-public-key-redhat"),
        "{e}"
    );
}

#[test]
fn verification_configmaps_parse_as_upstream_reads_them() {
    let k = kit();
    let armored = String::from_utf8(k.keys["a"].clone()).unwrap();
    let indented: String = armored.lines().map(|l| format!("    {l}\n")).collect();
    let yaml = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: release-verification\ndata:\n  release-repository-default: quay.io/x\n  store-b: ' file:///srv/sigs '\n  store-a: https://example.com/sigs\n  verifier-public-key-test: |\n{indented}");
    let c = parse_verification_config(yaml.as_bytes(), "test.yaml").unwrap();
    let want = Keyring {
        name: "verifier-public-key-test".into(),
        armored: armored.as_bytes().to_vec(),
    };
    assert_eq!(c.keyrings, [want]);
    assert_eq!(
        c.stores,
        [
            (
                "store-a".to_string(),
                "https://example.com/sigs".to_string()
            ),
            ("store-b".into(), "file:///srv/sigs".into())
        ]
    );
    let v = verify(&c.keyrings, &[sig("good")], &k.digest).unwrap();
    assert_eq!(v.verified[0].keyring, "verifier-public-key-test");
    // JSON too.
    let json = serde_json::json!({"kind": "ConfigMap", "apiVersion": "v1", "data": {"verifier-public-key-x": armored}});
    let c = parse_verification_config(json.to_string().as_bytes(), "x.json").unwrap();
    assert_eq!(c.keyrings[0].name, "verifier-public-key-x");
    // Refusals, each naming the origin.
    for (body, want) in [
        ("kind: Secret\ndata: {}\n".to_string(), "not a ConfigMap"),
        ("kind: ConfigMap\ndata:\n  store-a: https://x\n".to_string(), "has no data key verifier-public-key-*"),
        ("kind: ConfigMap\ndata:\n  verifier-public-key-a: nope\n".to_string(), "verifier-public-key-a of t.yaml is neither"),
        (format!("kind: ConfigMap\ndata:\n  store-a: ftp://x\n  verifier-public-key-a: |\n{indented}"), "store store-a = \"ftp://x\""),
        ("kind: [".to_string(), "not valid YAML"),
    ] {
        let e = format!("{:#}", parse_verification_config(body.as_bytes(), "t.yaml").unwrap_err());
        assert!(e.contains("t.yaml") && e.contains(want), "{e}");
    }
}

#[test]
fn digests_are_checked_as_upstream() {
    assert!(valid_digest("sha256:ab12"));
    assert!(valid_digest("sha256+b64:AB_="));
    for bad in [
        "",
        "sha256",
        "sha256:",
        ":ab",
        "SHA256:ab",
        "sha256:a b",
        "sha256:ab:cd",
    ] {
        assert!(!valid_digest(bad), "{bad}");
    }
    let e = verify(&[], &[], "sha256:ab").unwrap_err().to_string();
    assert!(e.contains("no keyring"), "{e}");
}
