//! cosign signatures and attestations against the real cosign CLI, both
//! ways (src/trust/sigstore; UPSTREAM.md §29b): Debian trixie's cosign 2.5
//! and forky's 3.1 (tests/tools/cosign.sh), a docker-registry
//! (distribution 2.8, no referrers API: cosign 3's bundles go through the
//! `sha256-<hex>` tag schema) on 127.0.0.1 over HTTP, no transparency log.
//! - cosign signs (2: `.sig`; 3: a bundle referrer, and `.sig` with
//!   --new-bundle-format=false) → `verify_image` accepts with its key and
//!   refuses another key, a one-byte change, and a signature moved onto
//!   another image;
//! - we sign and attest → `cosign verify` / `verify-attestation --type
//!   slsaprovenance1` accept with the key, refuse another key, a changed
//!   signature or statement and a signature moved onto another image;
//! - `SigningKey::from_cosign_pem` reads the keys each cosign generates;
//!   a wrong password is one line.
use crate::common::cosign::{Cosign, PASSWORD};
use crate::common::Registry;
use base64::Engine;
use bootimage_gen::image::imageref::DockerRef;
use bootimage_gen::publish::registry::client::{Client, Options, MANIFEST_OCI};
use bootimage_gen::trust::sigstore::{self, PublicKey, SigningKey};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Output;

/// A registry on 127.0.0.1 (plain HTTP), our client of `repo` in it, and
/// the repository's name as cosign writes it.
fn setup(repo: &str) -> (Registry, Client, String) {
    let reg = Registry::start(false);
    let name = format!("{}/{repo}", reg.host());
    let opts = Options {
        insecure: true,
        ..Options::default()
    };
    let client = Client::connect(&DockerRef::parse(&name).unwrap(), &opts).unwrap();
    (reg, client, name)
}

/// A small OCI image (one layer, `content`) under `tag`; its digest.
fn push_image(c: &Client, tag: &str, content: &str) -> String {
    let (layer, _) = c.push_bytes(content.as_bytes()).unwrap();
    let config = serde_json::to_vec(&json!({
        "architecture": "amd64", "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": [layer]},
    }))
    .unwrap();
    let (cd, _) = c.push_bytes(&config).unwrap();
    let m = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_OCI,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer, "size": content.len()}],
    }))
    .unwrap();
    c.put_manifest(tag, MANIFEST_OCI, &m).unwrap()
}

fn manifest(c: &Client, reference: &str) -> Value {
    let m = c
        .get_manifest(reference)
        .unwrap()
        .unwrap_or_else(|| panic!("no manifest {reference}"));
    serde_json::from_slice(&m.bytes).unwrap()
}

fn put(c: &Client, reference: &str, v: &Value) -> String {
    let mt = v["mediaType"].as_str().unwrap().to_string();
    c.put_manifest(reference, &mt, &serde_json::to_vec(v).unwrap())
        .unwrap()
}

fn public(p: &Path, origin: &str) -> PublicKey {
    PublicKey::from_pem(&std::fs::read(p).unwrap(), origin).unwrap()
}

/// A base64 signature with one byte changed (still base64, still DER
/// length): the last byte of the decoded signature flipped.
fn flip_sig(b64: &str) -> String {
    let e = base64::engine::general_purpose::STANDARD;
    let mut s = e.decode(b64).unwrap();
    *s.last_mut().unwrap() ^= 1;
    e.encode(s)
}

fn err_of(r: anyhow::Result<Option<sigstore::Verified>>) -> String {
    match r {
        Err(e) => format!("{e:#}"),
        Ok(v) => panic!("expected a refusal, got {v:?}"),
    }
}

// ---- cosign signs, we verify ------------------------------------------------

/// cosign (`suite`) signs image A; `verify_image` accepts it with the key
/// and refuses the rest. `legacy`: cosign 3 writes `.sig` instead of a bundle.
fn cosign_signs_we_verify(suite: &str, legacy: bool) {
    let cosign = Cosign::new(suite);
    let (_reg, c, name) = setup("sig/cosign-signs");
    let a = push_image(&c, "a", "image A");
    let b = push_image(&c, "b", "image B");
    let (_d1, key1, pub1) = cosign.key_pair();
    let (_d2, _key2, pub2) = cosign.key_pair();
    let (k1, k2) = (public(&pub1, "k1.pub"), public(&pub2, "k2.pub"));
    let (only1, only2) = ([k1.clone()], [k2.clone()]);
    assert_eq!(
        sigstore::verify_image(&c, &a, &only1).unwrap(),
        None,
        "nothing signed yet"
    );

    cosign.sign(&key1, &format!("{name}@{a}"), legacy);
    let bundle = cosign.major >= 3 && !legacy;
    let v = sigstore::verify_image(&c, &a, &[k2.clone(), k1.clone()])
        .unwrap()
        .expect("verified");
    eprintln!("{suite} legacy={legacy}: {v:?}");
    assert_eq!(v.key_id, k1.id());
    if bundle {
        assert!(v.found.starts_with("bundle tag sha256-"), "{v:?}");
        assert_eq!(v.docker_reference, None);
    } else {
        assert!(v.found.starts_with(".sig tag sha256-"), "{v:?}");
        assert_eq!(v.docker_reference.as_deref(), Some(name.as_str()));
    }
    // Another key: refused, saying why.
    let e = err_of(sigstore::verify_image(&c, &a, &only2));
    assert!(e.contains("none verifies") && e.contains("k2.pub"), "{e}");
    assert_eq!(sigstore::verify_image(&c, &b, &only1).unwrap(), None);

    if bundle {
        // The fallback tag's index → the referrer manifest → the bundle.
        let ftag = sigstore::digest_tag(&a, "");
        let index = manifest(&c, &ftag);
        let rd = index["manifests"][0]["digest"]
            .as_str()
            .unwrap()
            .to_string();
        let referrer = manifest(&c, &rd);
        // The same bundle moved onto B (subject rewritten): its statement
        // still names A.
        let mut moved = referrer.clone();
        moved["subject"]["digest"] = b.clone().into();
        let md = put(&c, &sha(&moved), &moved);
        let mut ix = index.clone();
        ix["manifests"][0]["digest"] = md.into();
        ix["manifests"][0]["size"] = serde_json::to_vec(&moved).unwrap().len().into();
        put(&c, &sigstore::digest_tag(&b, ""), &ix);
        let e = err_of(sigstore::verify_image(&c, &b, &only1));
        assert!(e.contains("copied from another image"), "{e}");
        // One byte of the bundle's signature changed.
        let ld = referrer["layers"][0]["digest"].as_str().unwrap();
        let mut bun: Value = serde_json::from_slice(&c.blob_bytes(ld, 1 << 20).unwrap()).unwrap();
        let s = bun["dsseEnvelope"]["signatures"][0]["sig"]
            .as_str()
            .unwrap()
            .to_string();
        bun["dsseEnvelope"]["signatures"][0]["sig"] = flip_sig(&s).into();
        let bytes = serde_json::to_vec(&bun).unwrap();
        let (nd, _) = c.push_bytes(&bytes).unwrap();
        let mut r2 = referrer.clone();
        r2["layers"][0]["digest"] = nd.into();
        r2["layers"][0]["size"] = bytes.len().into();
        let r2d = put(&c, &sha(&r2), &r2);
        let mut ix = index.clone();
        ix["manifests"][0]["digest"] = r2d.into();
        ix["manifests"][0]["size"] = serde_json::to_vec(&r2).unwrap().len().into();
        put(&c, &ftag, &ix);
        let e = err_of(sigstore::verify_image(&c, &a, &only1));
        assert!(
            e.contains("does not verify") || e.contains("verifies with"),
            "{e}"
        );
    } else {
        let stag = sigstore::digest_tag(&a, ".sig");
        let sig = manifest(&c, &stag);
        // A's signature manifest copied to B's tag: it signs A.
        put(&c, &sigstore::digest_tag(&b, ".sig"), &sig);
        let e = err_of(sigstore::verify_image(&c, &b, &only1));
        assert!(e.contains(&format!("not {b}")), "{e}");
        // One byte of the signature changed.
        let mut t = sig.clone();
        let ann = &mut t["layers"][0]["annotations"]["dev.cosignproject.cosign/signature"];
        *ann = flip_sig(ann.as_str().unwrap()).into();
        put(&c, &stag, &t);
        let e = err_of(sigstore::verify_image(&c, &a, &only1));
        assert!(e.contains("does not verify"), "{e}");
    }
}

/// The sha256 digest of a manifest as we put it.
fn sha(v: &Value) -> String {
    use sha2::Digest;
    format!(
        "sha256:{}",
        hex::encode(sha2::Sha256::digest(serde_json::to_vec(v).unwrap()))
    )
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn cosign2_signs_sig_tag_we_verify_and_refuse() {
    cosign_signs_we_verify("trixie", true);
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn cosign3_signs_bundle_referrer_we_verify_and_refuse() {
    cosign_signs_we_verify("forky", false);
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn cosign3_signs_legacy_sig_tag_we_verify_and_refuse() {
    cosign_signs_we_verify("forky", true);
}

// ---- we sign and attest, cosign verifies ---------------------------------------

fn we_sign_cosign_verifies(suite: &str) {
    let cosign = Cosign::new(suite);
    let (_reg, c, name) = setup("sig/we-sign");
    let a = push_image(&c, "a", "image A");
    let b = push_image(&c, "b", "image B");
    let (_d1, key1, pub1) = cosign.key_pair();
    let (_d2, key2, pub2) = cosign.key_pair();
    let read = |k: &Path| {
        SigningKey::from_cosign_pem(
            &std::fs::read(k).unwrap(),
            PASSWORD.as_bytes(),
            "cosign.key",
        )
        .unwrap()
    };
    let (s1, s2) = (read(&key1), read(&key2));
    let (ia, ib) = (format!("{name}@{a}"), format!("{name}@{b}"));
    let ok = |o: &Output, what: &str| {
        assert!(o.status.success(), "{what}: {}", crate::common::stderr(o))
    };
    let refused = |o: &Output, what: &str| {
        assert!(
            !o.status.success(),
            "{what}: cosign accepted: {}",
            crate::common::stdout(o)
        )
    };

    // Signatures.
    sigstore::sign_image(&c, &name, &a, &s1).unwrap();
    let o = cosign.verify(&["verify"], &pub1, &ia);
    ok(&o, "cosign verify of our signature");
    assert!(
        crate::common::stdout(&o).contains(&a),
        "{}",
        crate::common::stdout(&o)
    );
    refused(&cosign.verify(&["verify"], &pub2, &ia), "another key");
    // A second signer appends; signing again with the first adds nothing.
    sigstore::sign_image(&c, &name, &a, &s2).unwrap();
    sigstore::sign_image(&c, &name, &a, &s1).unwrap();
    let stag = sigstore::digest_tag(&a, ".sig");
    assert_eq!(manifest(&c, &stag)["layers"].as_array().unwrap().len(), 2);
    ok(
        &cosign.verify(&["verify"], &pub1, &ia),
        "first signer after the second",
    );
    ok(&cosign.verify(&["verify"], &pub2, &ia), "second signer");
    // A's signatures moved onto B: cosign refuses them.
    put(&c, &sigstore::digest_tag(&b, ".sig"), &manifest(&c, &stag));
    refused(
        &cosign.verify(&["verify"], &pub1, &ib),
        "A's signature on B",
    );
    // One byte of each signature changed.
    let mut t = manifest(&c, &stag);
    for l in t["layers"].as_array_mut().unwrap() {
        let ann = &mut l["annotations"]["dev.cosignproject.cosign/signature"];
        *ann = flip_sig(ann.as_str().unwrap()).into();
    }
    put(&c, &stag, &t);
    refused(
        &cosign.verify(&["verify"], &pub1, &ia),
        "a changed signature",
    );

    // Attestations: a SLSA provenance v1 statement about A.
    let hex_a = a.trim_start_matches("sha256:").to_string();
    let st = sigstore::slsa_provenance(
        &[(name.clone(), hex_a)],
        &[(
            "docker://quay.io/openshift-release-dev/ocp-release".into(),
            b.clone(),
        )],
        "https://example.com/test-builder",
        json!({"platforms": ["metal"]}),
    );
    // A statement about another image is not attached to A.
    let e = sigstore::attest_image(&c, &b, &st, &s1).unwrap_err();
    assert!(
        format!("{e:#}").contains("does not name this digest"),
        "{e:#}"
    );
    sigstore::attest_image(&c, &a, &st, &s1).unwrap();
    let att = ["verify-attestation", "--type", "slsaprovenance1"];
    let o = cosign.verify(&att, &pub1, &ia);
    ok(&o, "cosign verify-attestation of our attestation");
    assert!(
        crate::common::stdout(&o).contains("dsse") || crate::common::stdout(&o).contains("payload"),
        "{}",
        crate::common::stdout(&o)
    );
    refused(
        &cosign.verify(&att, &pub2, &ia),
        "attestation with another key",
    );
    refused(
        &cosign.verify(&["verify-attestation", "--type", "spdxjson"], &pub1, &ia),
        "another predicate type",
    );
    // The statement changed under its signature.
    let atag = sigstore::digest_tag(&a, ".att");
    let mut m = manifest(&c, &atag);
    let ld = m["layers"][0]["digest"].as_str().unwrap().to_string();
    let mut env: Value = serde_json::from_slice(&c.blob_bytes(&ld, 1 << 20).unwrap()).unwrap();
    let mut stmt = st.clone();
    stmt["predicate"]["runDetails"]["builder"]["id"] = "https://example.com/evil".into();
    env["payload"] = base64::engine::general_purpose::STANDARD
        .encode(serde_json::to_vec(&stmt).unwrap())
        .into();
    let bytes = serde_json::to_vec(&env).unwrap();
    let (nd, _) = c.push_bytes(&bytes).unwrap();
    m["layers"][0]["digest"] = nd.into();
    m["layers"][0]["size"] = bytes.len().into();
    put(&c, &atag, &m);
    refused(&cosign.verify(&att, &pub1, &ia), "a changed statement");
    // Our DSSE check refuses it too.
    assert!(sigstore::dsse_verify(&env, &[s1.public()]).is_err());
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn we_sign_and_attest_cosign2_verifies_and_refuses() {
    we_sign_cosign_verifies("trixie");
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn we_sign_and_attest_cosign3_verifies_and_refuses() {
    we_sign_cosign_verifies("forky");
}

// ---- keys ---------------------------------------------------------------------

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn we_read_cosign2_and_cosign3_keys_and_refuse_a_wrong_password() {
    for suite in ["trixie", "forky"] {
        let cosign = Cosign::new(suite);
        let (_d, key, public_pem) = cosign.key_pair();
        let pem = std::fs::read(&key).unwrap();
        assert!(String::from_utf8_lossy(&pem)
            .starts_with("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----"));
        let k = SigningKey::from_cosign_pem(&pem, PASSWORD.as_bytes(), "cosign.key").unwrap();
        assert_eq!(
            k.public().id(),
            public(&public_pem, "cosign.pub").id(),
            "{suite}"
        );
        let e =
            SigningKey::from_cosign_pem(&pem, b"wrong", &key.display().to_string()).unwrap_err();
        assert!(
            format!("{e:#}").starts_with(&format!("wrong COSIGN_PASSWORD for {}: ", key.display())),
            "{e:#}"
        );
        // Our signature of a blob, checked by cosign verify-blob.
        let blob = key.with_file_name("blob");
        std::fs::write(&blob, b"a blob").unwrap();
        let sig = key.with_file_name("blob.sig");
        let b64 = base64::engine::general_purpose::STANDARD.encode(k.sign(b"a blob"));
        std::fs::write(&sig, &b64).unwrap();
        let vb = |blob: &Path| {
            let mut a = vec![
                "verify-blob",
                "--key",
                public_pem.to_str().unwrap(),
                "--signature",
                sig.to_str().unwrap(),
                "--insecure-ignore-tlog=true",
            ];
            if cosign.major >= 3 {
                a.push("--new-bundle-format=false");
            }
            a.push(blob.to_str().unwrap());
            cosign.run(&a, None)
        };
        let o = vb(&blob);
        assert!(
            o.status.success(),
            "{suite} verify-blob: {}",
            crate::common::stderr(&o)
        );
        std::fs::write(&blob, b"a blob!").unwrap();
        assert!(
            !vb(&blob).status.success(),
            "{suite}: verify-blob took a changed blob"
        );
        // A key we seal, read by cosign: it signs a blob cosign checks.
        let ours = SigningKey::generate("ours").unwrap();
        let d = key.parent().unwrap().join("ours");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            d.join("ours.key"),
            ours.to_cosign_pem(PASSWORD.as_bytes()).unwrap(),
        )
        .unwrap();
        std::fs::write(d.join("ours.pub"), ours.public().to_pem()).unwrap();
        let o = cosign.run(
            &["public-key", "--key", d.join("ours.key").to_str().unwrap()],
            None,
        );
        assert!(
            o.status.success(),
            "{suite} public-key of our sealed key: {}",
            crate::common::stderr(&o)
        );
        let theirs = PublicKey::from_pem(&o.stdout, "cosign public-key").unwrap();
        assert_eq!(theirs.id(), ours.public().id(), "{suite}");
    }
}
