//! Signature sources: stores over HTTP (an in-process server on
//! 127.0.0.1) and file://, and files in every shape upstream writes.
use super::testkit::{kit, refusal, ring};
use super::*;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::sync::{Arc, Mutex};

// ---------------------------------------------------------------- stores

/// A one-thread HTTP server on 127.0.0.1 answering GETs from a map, with
/// `Connection: close`; records the paths asked; stopped on drop.
struct Server {
    addr: std::net::SocketAddr,
    asked: Arc<Mutex<Vec<String>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    fn start(routes: BTreeMap<String, Vec<u8>>) -> Server {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (a, s) = (asked.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            for conn in l.incoming() {
                if s.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                let Ok(mut conn) = conn else { continue };
                let mut line = String::new();
                let mut r = BufReader::new(conn.try_clone().unwrap());
                if r.read_line(&mut line).is_err() {
                    continue;
                }
                let mut h = String::new();
                while r.read_line(&mut h).is_ok_and(|n| n > 2) {
                    h.clear();
                }
                let path = line.split(' ').nth(1).unwrap_or("").to_string();
                a.lock().unwrap().push(path.clone());
                let (status, body) = match routes.get(&path) {
                    Some(b) => ("200 OK", b.clone()),
                    None => ("404 Not Found", b"not found".to_vec()),
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = conn.write_all(head.as_bytes());
                let _ = conn.write_all(&body);
            }
        });
        Server {
            addr,
            asked,
            stop,
            thread: Some(thread),
        }
    }
    fn url(&self) -> String {
        format!("http://{}/sigs", self.addr)
    }
    fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = std::net::TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(std::time::Duration::from_secs(10)))
        .build()
        .into()
}

fn lookaside_path(n: usize) -> String {
    let hex = kit().digest.strip_prefix("sha256:").unwrap();
    format!("/sigs/sha256={hex}/signature-{n}")
}

#[test]
fn http_store_reads_until_the_first_miss() {
    let k = kit();
    let mut routes = BTreeMap::new();
    routes.insert(lookaside_path(1), k.sigs["good"].clone());
    routes.insert(lookaside_path(2), k.sigs["good_b"].clone());
    routes.insert(lookaside_path(4), k.sigs["good"].clone()); // after the miss: never read
    let srv = Server::start(routes);
    let got = signatures_from_store(&format!("{}/", srv.url()), &k.digest, &agent()).unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].origin, format!("signature-1 from {}/", srv.url()));
    assert_eq!(got[1].bytes, k.sigs["good_b"]);
    assert_eq!(
        srv.asked(),
        [lookaside_path(1), lookaside_path(2), lookaside_path(3)]
    );
    let v = verify(&[ring("a"), ring("b")], &got, &k.digest).unwrap();
    assert_eq!(v.verified.len(), 2);
}

#[test]
fn http_store_reads_at_most_nine_and_refuses_oversize() {
    let k = kit();
    let routes = (1..=12)
        .map(|n| (lookaside_path(n), k.sigs["other_digest"].clone()))
        .collect();
    let srv = Server::start(routes);
    let got = signatures_from_store(&srv.url(), &k.digest, &agent()).unwrap();
    assert_eq!(got.len(), MAX_SIGNATURES);
    assert_eq!(srv.asked().last().unwrap(), &lookaside_path(9));
    drop(srv);
    let mut routes = BTreeMap::new();
    routes.insert(lookaside_path(1), vec![0xA3; 60 * 1024]);
    let srv = Server::start(routes);
    let got = signatures_from_store(&srv.url(), &k.digest, &agent()).unwrap();
    assert_eq!(got[0].bytes.len(), MAX_SIGNATURE + 1);
    let e = refusal(&[ring("a")], &got);
    assert!(
        e.contains(&format!(
            "signature-1 from {}: larger than 50 KiB",
            srv.url()
        )),
        "{e}"
    );
}

#[test]
fn unreachable_and_file_stores() {
    let k = kit();
    // A port nobody listens on (bound, then closed).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let e = signatures_from_store(&format!("http://127.0.0.1:{port}/x"), &k.digest, &agent())
        .unwrap_err();
    assert!(format!("{e:#}").contains("is unreachable"), "{e:#}");
    let e = signatures_from_store("ftp://x/y", &k.digest, &agent()).unwrap_err();
    assert!(e.to_string().contains("scheme"), "{e}");
    // file:// lookaside
    let t = tempfile::tempdir().unwrap();
    let hex = k.digest.strip_prefix("sha256:").unwrap();
    let dir = t.path().join(format!("sha256={hex}"));
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("signature-1"), &k.sigs["good"]).unwrap();
    std::fs::write(dir.join("signature-2"), &k.sigs["good_b"]).unwrap();
    std::fs::write(dir.join("signature-4"), &k.sigs["good"]).unwrap();
    let store = format!("file://{}", t.path().display());
    let got = signatures_from_store(&store, &k.digest, &agent()).unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].origin, format!("signature-1 from {store}"));
    verify(&[ring("a"), ring("b")], &got, &k.digest).unwrap();
    assert!(signatures_from_store(&store, &k.other_digest, &agent())
        .unwrap()
        .is_empty());
    let e = signatures_from_store(&format!("{store}/nope"), &k.digest, &agent()).unwrap_err();
    assert!(e.to_string().contains("is unreachable"), "{e}");
}

// ------------------------------------------------------------ files

fn b64(b: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// What `oc adm release mirror --release-image-signature-to-dir` writes:
/// library-go `verify.GetSignaturesAsConfigmap` (name `sha256-<hex>`,
/// binaryData `sha256-<hex>-N` from 1) encoded by `util.ConfigMapAsBytes`
/// (the core/v1 legacy codec: JSON) to `signature-sha256-<16 hex>.json`.
fn oc_configmap(digest: &str, sigs: &[&[u8]]) -> (String, String) {
    let hex = digest.strip_prefix("sha256:").unwrap();
    let data: Vec<String> = sigs
        .iter()
        .enumerate()
        .map(|(i, s)| format!("\"sha256-{hex}-{}\":\"{}\"", i + 1, b64(s)))
        .collect();
    let json = format!(
        r#"{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"name":"sha256-{hex}","namespace":"openshift-config-managed","creationTimestamp":null,"labels":{{"release.openshift.io/verification-signatures":""}}}},"binaryData":{{{}}}}}"#,
        data.join(",")
    );
    (format!("signature-sha256-{}.json", &hex[..16]), json)
}

/// What oc-mirror v2 writes to `cluster-resources/signature-configmap.yaml`
/// (`internal/pkg/clusterresources/clusterresources.go`
/// `GenerateSignatureConfigMap`: one ConfigMap `mirrored-release-signatures`
/// for every release, keys `sha256-<hex>-<id>` with one id counter across
/// releases; sigs.k8s.io/yaml, so keys sorted).
fn oc_mirror_yaml(entries: &[(&str, usize, &[u8])]) -> String {
    let mut s = String::from("apiVersion: v1\nbinaryData:\n");
    for (digest, id, sig) in entries {
        let hex = digest.strip_prefix("sha256:").unwrap();
        s.push_str(&format!("  sha256-{hex}-{id}: {}\n", b64(sig)));
    }
    s.push_str("kind: ConfigMap\nmetadata:\n  annotations:\n    createdAt: \"2026-01-01T00:00:00Z\"\n    createdBy: oc-mirror v2\n    oc-mirror_version: v0.0.0\n  labels:\n    release.openshift.io/verification-signatures: \"\"\n  name: mirrored-release-signatures\n  namespace: openshift-config-managed\n");
    s
}

#[test]
fn signature_files_in_every_upstream_shape() {
    let k = kit();
    let (good, good_b, other) = (
        &k.sigs["good"][..],
        &k.sigs["good_b"][..],
        &k.sigs["other_digest"][..],
    );
    let t = tempfile::tempdir().unwrap();
    let p = |n: &str| t.path().join(n);
    // oc's JSON, one per digest.
    let (name, json) = oc_configmap(&k.digest, &[good, good_b]);
    std::fs::write(p(&name), json).unwrap();
    let (oname, ojson) = oc_configmap(&k.other_digest, &[other]);
    std::fs::write(p(&oname), ojson).unwrap();
    let got = signatures_from_files(&[p(&name)], &k.digest).unwrap();
    assert_eq!(got.len(), 2);
    let hex = k.digest.strip_prefix("sha256:").unwrap();
    assert!(
        got[0]
            .origin
            .ends_with(&format!("ConfigMap sha256-{hex} binaryData sha256-{hex}-1")),
        "{}",
        got[0].origin
    );
    verify(&[ring("a"), ring("b")], &got, &k.digest).unwrap();
    // The other digest's file holds nothing for this digest: skipped, not an error.
    assert!(signatures_from_files(&[p(&oname)], &k.digest)
        .unwrap()
        .is_empty());
    // oc-mirror's YAML: two releases, one id counter.
    let mirror = p("signature-configmap.yaml");
    std::fs::write(
        &mirror,
        oc_mirror_yaml(&[(&k.other_digest, 1, other), (&k.digest, 2, good_b)]),
    )
    .unwrap();
    let got = signatures_from_files(std::slice::from_ref(&mirror), &k.digest).unwrap();
    assert_eq!(got.len(), 1);
    assert!(got[0]
        .origin
        .contains("ConfigMap mirrored-release-signatures"));
    verify(&[ring("b")], &got, &k.digest).unwrap();
    // A List of ConfigMaps (`oc get configmap -l … -o yaml`).
    let list = p("list.yaml");
    let hexo = k.other_digest.strip_prefix("sha256:").unwrap();
    std::fs::write(&list, format!("apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {{name: one}}\n  binaryData:\n    sha256-{hexo}-1: {}\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {{name: two}}\n  binaryData:\n    sha256-{hex}-1: {}\n", b64(other), b64(good))).unwrap();
    let got = signatures_from_files(std::slice::from_ref(&list), &k.digest).unwrap();
    assert_eq!(got.len(), 1);
    assert!(got[0].origin.contains("ConfigMap two"));
    // A directory of those, with a non-ConfigMap manifest (skipped) and a
    // raw signature named as oc-mirror's cache names them.
    std::fs::write(
        p("idms-oc-mirror.yaml"),
        "apiVersion: config.openshift.io/v1\nkind: ImageDigestMirrorSet\nmetadata: {name: x}\n",
    )
    .unwrap();
    std::fs::write(p(&format!("4.99.0-x86_64-sha256-{hex}")), good).unwrap();
    std::fs::write(p("README"), "not a signature").unwrap();
    let got = signatures_from_files(&[t.path().to_path_buf()], &k.digest).unwrap();
    // 1 raw + 1 list + 2 oc + 1 oc-mirror
    assert_eq!(
        got.len(),
        5,
        "{:?}",
        got.iter().map(|s| &s.origin).collect::<Vec<_>>()
    );
    // A lookaside directory: given as its root or as the digest's directory.
    let la = tempfile::tempdir().unwrap();
    let dd = la.path().join(format!("sha256={hex}"));
    std::fs::create_dir(&dd).unwrap();
    std::fs::write(dd.join("signature-1"), good).unwrap();
    std::fs::create_dir(la.path().join(format!("sha256={hexo}"))).unwrap();
    assert_eq!(
        signatures_from_files(&[la.path().to_path_buf()], &k.digest)
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        signatures_from_files(std::slice::from_ref(&dd), &k.digest)
            .unwrap()
            .len(),
        1
    );
    assert!(
        signatures_from_files(std::slice::from_ref(&dd), &k.other_digest)
            .unwrap()
            .is_empty()
    );
    // One raw signature file.
    let raw = p(&format!("4.99.0-x86_64-sha256-{hex}"));
    assert_eq!(
        signatures_from_files(std::slice::from_ref(&raw), &k.digest).unwrap()[0].bytes,
        good
    );
}

#[test]
fn malformed_signature_files_are_named() {
    let k = kit();
    let t = tempfile::tempdir().unwrap();
    let check = |name: &str, body: &[u8], want: &str| {
        let f = t.path().join(name);
        std::fs::write(&f, body).unwrap();
        let e = format!(
            "{:#}",
            signatures_from_files(std::slice::from_ref(&f), &k.digest).unwrap_err()
        );
        assert!(
            e.contains(&f.display().to_string()) && e.contains(want),
            "{e}"
        );
    };
    check("bad.yaml", b"kind: [unclosed", "not valid YAML");
    check("bad.json", b"{\"kind\":", "not a valid JSON");
    check(
        "idms.yaml",
        b"kind: ImageDigestMirrorSet\n",
        "not a ConfigMap of signatures",
    );
    let hex = k.digest.strip_prefix("sha256:").unwrap();
    check(
        "b64.yaml",
        format!("kind: ConfigMap\nbinaryData:\n  sha256-{hex}-1: '***'\n").as_bytes(),
        "not valid base64",
    );
    check("armored.sig", &k.sigs["armored"], "ASCII-armored");
    let missing = t.path().join("missing");
    let e = signatures_from_files(&[missing], &k.digest)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("missing") && e.contains("give an existing file"),
        "{e}"
    );
}
