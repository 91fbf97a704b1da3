//! Unit tests without a registry: PAE against the DSSE spec's example,
//! sign/verify round trips (each with its negative), RSA and P-384 against
//! openssl, cosign's encrypted key format, the built-in OpenShift key.
use super::*;
use base64::Engine;
use std::process::Command;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// A decimal number as big-endian bytes, left-padded to `len`.
fn decimal_bytes(s: &str, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    for d in s.bytes() {
        let mut carry = (d - b'0') as u32;
        for b in out.iter_mut().rev() {
            let v = *b as u32 * 10 + carry;
            *b = v as u8;
            carry = v >> 8;
        }
        assert_eq!(carry, 0, "{s} does not fit {len} bytes");
    }
    out
}

#[test]
fn pae_and_signature_match_the_dsse_spec_example() {
    // secure-systems-lab/dsse protocol.md "Test Vectors".
    let t = "http://example.com/HelloWorld";
    assert_eq!(
        pae(t, b"hello world"),
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world".to_vec()
    );
    let mut point = vec![4u8];
    point.extend(decimal_bytes(
        "46950820868899156662930047687818585632848591499744589407958293238635476079160",
        32,
    ));
    point.extend(decimal_bytes(
        "5640078356564379163099075877009565129882514886557779369047442380624545832820",
        32,
    ));
    let sig = B64
        .decode("A3JqsQGtVsJ2O2xqrI5IcnXip5GToJ3F+FnZ+O88SjtR6rDAajabZKciJTfUiHqJPcIAriEGAHTVeCUjW2JIZA==")
        .unwrap();
    // The vector's signature is r||s, not DER: ring's FIXED verifier.
    let k =
        ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_FIXED, &point);
    assert!(k.verify(&pae(t, b"hello world"), &sig).is_ok());
    assert!(k.verify(&pae(t, b"hello world!"), &sig).is_err());
    assert!(k
        .verify(&pae("http://example.com/Other", b"hello world"), &sig)
        .is_err());
}

#[test]
fn sign_and_verify_round_trip_and_refusals() {
    let k = SigningKey::generate("k1").unwrap();
    let other = SigningKey::generate("k2").unwrap();
    assert_eq!(k.public().kind(), KeyKind::EcdsaP256);
    let sig = k.sign(b"payload");
    assert!(k.public().verify(b"payload", &sig));
    assert!(!k.public().verify(b"payloaD", &sig));
    assert!(!other.public().verify(b"payload", &sig));
    let mut bad = sig.clone();
    *bad.last_mut().unwrap() ^= 1;
    assert!(!k.public().verify(b"payload", &bad));
    // PEM round trip keeps the key and its id.
    let again = PublicKey::from_pem(k.public().to_pem().as_bytes(), "again").unwrap();
    assert_eq!(again.id(), k.public().id());
    assert!(again.verify(b"payload", &sig));
}

#[test]
fn dsse_round_trip_and_tampering() {
    let k = SigningKey::generate("k1").unwrap();
    let other = SigningKey::generate("k2").unwrap();
    let env = dsse_sign(INTOTO_PAYLOAD_TYPE, b"{\"a\":1}", &k);
    assert_eq!(env["payloadType"], INTOTO_PAYLOAD_TYPE);
    assert_eq!(env["signatures"][0]["keyid"], "");
    assert_eq!(dsse_verify(&env, &[k.public()]).unwrap(), b"{\"a\":1}");
    // Also with the other key in the list, and URL-safe base64.
    let mut url = env.clone();
    let sig = B64
        .decode(env["signatures"][0]["sig"].as_str().unwrap())
        .unwrap();
    url["signatures"][0]["sig"] = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(sig)
        .into();
    assert!(dsse_verify(&url, &[other.public(), k.public()]).is_ok());
    let e = dsse_verify(&env, &[other.public()])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("does not verify") || e.contains("verifies with"),
        "{e}"
    );
    let mut tampered = env.clone();
    tampered["payload"] = B64.encode(b"{\"a\":2}").into();
    assert!(dsse_verify(&tampered, &[k.public()]).is_err());
    let mut retyped = env.clone();
    retyped["payloadType"] = "text/plain".into();
    assert!(dsse_verify(&retyped, &[k.public()]).is_err());
}

fn openssl(dir: &std::path::Path, args: &[&str]) {
    let o = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn rsa_and_p384_against_openssl_both_ways() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    std::fs::write(p.join("msg"), b"a message signed by openssl").unwrap();
    for (name, genopts, dgst, kind) in [
        (
            "rsa",
            vec!["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:3072"],
            "-sha256",
            KeyKind::Rsa(3072),
        ),
        (
            "p384",
            vec!["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384"],
            "-sha384",
            KeyKind::EcdsaP384,
        ),
    ] {
        let key = format!("{name}.key");
        let mut a = vec!["genpkey", "-out", &key];
        a.extend(genopts);
        openssl(p, &a);
        openssl(
            p,
            &[
                "pkey",
                "-in",
                &key,
                "-pubout",
                "-out",
                &format!("{name}.pub"),
            ],
        );
        openssl(
            p,
            &[
                "dgst",
                dgst,
                "-sign",
                &key,
                "-out",
                &format!("{name}.sig"),
                "msg",
            ],
        );
        let public =
            PublicKey::from_pem(&std::fs::read(p.join(format!("{name}.pub"))).unwrap(), name)
                .unwrap();
        assert_eq!(public.kind(), kind);
        let sig = std::fs::read(p.join(format!("{name}.sig"))).unwrap();
        assert!(
            public.verify(b"a message signed by openssl", &sig),
            "{name}"
        );
        assert!(!public.verify(b"another message", &sig), "{name}");
        // Ours, from the same PKCS#8 PEM, verified by openssl.
        let sk =
            SigningKey::from_cosign_pem(&std::fs::read(p.join(&key)).unwrap(), b"", name).unwrap();
        assert_eq!(sk.public().id(), public.id());
        std::fs::write(
            p.join(format!("{name}.ours")),
            sk.sign(b"a message signed by openssl"),
        )
        .unwrap();
        openssl(
            p,
            &[
                "dgst",
                dgst,
                "-verify",
                &format!("{name}.pub"),
                "-signature",
                &format!("{name}.ours"),
                "msg",
            ],
        );
        let o = Command::new("openssl")
            .args([
                "dgst",
                dgst,
                "-verify",
                &format!("{name}.pub"),
                "-signature",
                &format!("{name}.ours"),
            ])
            .arg(p.join(format!("{name}.pub")))
            .current_dir(p)
            .output()
            .unwrap();
        assert!(
            !o.status.success(),
            "openssl took our signature over another file"
        );
    }
}

#[test]
fn encrypted_key_round_trip_and_wrong_password() {
    let k = SigningKey::generate("gen").unwrap();
    let pem = k.to_cosign_pem(b"s3cret").unwrap();
    assert!(
        pem.starts_with("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\n"),
        "{pem}"
    );
    let back = SigningKey::from_cosign_pem(pem.as_bytes(), b"s3cret", "test.key").unwrap();
    assert_eq!(back.public().id(), k.public().id());
    assert_eq!(back.public().origin(), "test.key");
    let e = SigningKey::from_cosign_pem(pem.as_bytes(), b"wrong", "test.key").unwrap_err();
    assert!(format!("{e:#}").starts_with("wrong COSIGN_PASSWORD for test.key: set COSIGN_PASSWORD"));
    // The older label reads the same.
    let old = pem.replace("SIGSTORE", "COSIGN");
    assert!(SigningKey::from_cosign_pem(old.as_bytes(), b"s3cret", "old.key").is_ok());
    // A public key given as the private key: one line saying so.
    let e =
        SigningKey::from_cosign_pem(k.public().to_pem().as_bytes(), b"", "cosign.pub").unwrap_err();
    assert!(format!("{e:#}").contains("PUBLIC KEY block"), "{e:#}");
    let e = PublicKey::from_pem(pem.as_bytes(), "cosign.key").unwrap_err();
    assert!(format!("{e:#}").contains("not the private key"), "{e:#}");
}

#[test]
fn builtin_openshift_key_is_rsa_4096_with_its_scopes() {
    let k = builtin_openshift_key();
    assert_eq!(k.kind(), KeyKind::Rsa(4096));
    assert!(k.origin().contains("ClusterImagePolicy"));
    assert_eq!(
        builtin_openshift_scopes(),
        [
            "quay.io/openshift-release-dev/ocp-release",
            "quay.io/openshift-release-dev/ocp-v4.0-art-dev",
            "quay.io/openshift-release-dev/ocp-v5.0-art-dev"
        ]
    );
    // Not any RSA key: a signature by another key is refused.
    let other = SigningKey::generate("other").unwrap();
    assert!(!k.verify(b"x", &other.sign(b"x")));
}

#[test]
fn slsa_provenance_is_a_statement_v1() {
    let s = slsa_provenance(
        &[("rhcos-metal.raw.gz".into(), "ab".repeat(32))],
        &[(
            "docker://quay.io/x/y".into(),
            format!("sha256:{}", "cd".repeat(32)),
        )],
        "https://example.com/builder",
        serde_json::json!({"platforms": ["metal"]}),
    );
    assert_eq!(s["_type"], "https://in-toto.io/Statement/v1");
    assert_eq!(s["predicateType"], "https://slsa.dev/provenance/v1");
    assert_eq!(s["subject"][0]["digest"]["sha256"], "ab".repeat(32));
    let bd = &s["predicate"]["buildDefinition"];
    assert_eq!(bd["buildType"], SLSA_BUILD_TYPE);
    assert_eq!(bd["externalParameters"]["platforms"][0], "metal");
    assert_eq!(
        bd["resolvedDependencies"][0]["digest"]["sha256"],
        "cd".repeat(32)
    );
    assert_eq!(
        s["predicate"]["runDetails"]["builder"]["id"],
        "https://example.com/builder"
    );
}

#[test]
fn digest_tags() {
    let d = format!("sha256:{}", "0f".repeat(32));
    assert_eq!(
        digest_tag(&d, ".sig"),
        format!("sha256-{}.sig", "0f".repeat(32))
    );
    assert_eq!(digest_tag(&d, ""), format!("sha256-{}", "0f".repeat(32)));
}
