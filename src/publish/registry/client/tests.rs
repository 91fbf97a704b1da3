//! Unit tests of the client's pure parts: challenge parsing and upload
//! URLs.
use super::challenge::challenge_params;
use super::wire::with_digest;

#[test]
fn bearer_challenges_parse() {
    let p = challenge_params(
        r#"realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push""#,
    );
    assert_eq!(
        p,
        [
            ("realm".into(), "https://auth.example/token".into()),
            ("service".into(), "registry.example".into()),
            ("scope".into(), "repository:a/b:pull,push".into())
        ]
    );
    assert_eq!(challenge_params("realm=x, service=y").len(), 2);
}

#[test]
fn upload_urls_get_the_digest() {
    assert_eq!(
        with_digest("https://r/v2/a/blobs/uploads/u?_state=x", "sha256:ab"),
        "https://r/v2/a/blobs/uploads/u?_state=x&digest=sha256%3Aab"
    );
    assert_eq!(with_digest("/u", "sha256:ab"), "/u?digest=sha256%3Aab");
}

/// A registry on 127.0.0.1 that answers `GET /v2/` and each manifest PUT
/// with the next of `answers` (status, distribution error body), the
/// last one repeated; how many PUTs it got. Plain HTTP: a TLS
/// ClientHello is closed, so `--insecure` falls back to HTTP.
fn manifest_registry(
    answers: Vec<(u16, &'static str)>,
) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{Read, Write};
    use std::sync::atomic::Ordering;
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let puts = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = puts.clone();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { return };
            let mut first = [0u8; 1];
            if c.peek(&mut first).ok() != Some(1) || first[0] == 0x16 {
                continue;
            }
            let mut head = Vec::new();
            let mut b = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && c.read(&mut b).unwrap_or(0) == 1 {
                head.push(b[0]);
            }
            let text = String::from_utf8_lossy(&head).to_lowercase();
            let len: usize = text
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            let mut body = vec![0u8; len];
            let _ = c.read_exact(&mut body);
            let (status, body) = if text.starts_with("put ") {
                let n = seen.fetch_add(1, Ordering::SeqCst);
                answers[n.min(answers.len() - 1)]
            } else {
                (200, "{}")
            };
            let _ = write!(
                c,
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (port, puts)
}

fn manifest_client(port: u16) -> super::Client {
    let r = crate::image::imageref::DockerRef::parse(&format!("127.0.0.1:{port}/ocp/b:t")).unwrap();
    let o = super::Options {
        insecure: true,
        ..Default::default()
    };
    let mut c = super::Client::connect(&r, &o).unwrap();
    c.retry.first = std::time::Duration::from_millis(50);
    c.retry.budget = std::time::Duration::from_secs(3);
    c
}

const RACE: &str = r#"{"errors":[{"code":"DIGEST_INVALID","message":"provided digest did not match uploaded content"}]}"#;

/// distribution 2.8 reads a link file another push is rewriting as empty
/// and refuses the PUT as DIGEST_INVALID; the PUT goes again and lands.
#[test]
fn a_manifest_put_refused_by_the_registrys_own_race_lands_when_sent_again() {
    use std::sync::atomic::Ordering;
    let (port, puts) = manifest_registry(vec![(400, RACE), (400, RACE), (201, "")]);
    let c = manifest_client(port);
    let d = c.put_manifest("race4", super::INDEX_OCI, b"{}").unwrap();
    assert_eq!(
        d,
        format!(
            "sha256:{}",
            hex::encode(crate::util::sha256::Sha256::digest(b"{}"))
        )
    );
    assert_eq!(puts.load(Ordering::SeqCst), 3);
}

/// Negative cases: a registry that keeps answering DIGEST_INVALID ends the
/// push within the retry budget, naming the cause; any other refusal is
/// final at once; a digest reference that is not the bytes' is refused
/// before anything is sent.
#[test]
fn a_manifest_put_refused_for_good_ends_the_push_naming_why() {
    use std::sync::atomic::Ordering;
    // The error of a PUT of `reference` to a registry answering `answer`,
    // and how many PUTs it got.
    let refused = |answer: (u16, &'static str), reference: &str| {
        let (port, puts) = manifest_registry(vec![answer]);
        let e = manifest_client(port)
            .put_manifest(reference, super::INDEX_OCI, b"{}")
            .unwrap_err();
        (format!("{e:#}"), puts.load(Ordering::SeqCst))
    };
    let (e, n) = refused((400, RACE), "t");
    assert!(
        e.contains("gave up after") && e.contains("concurrent write"),
        "{e}"
    );
    assert!(n >= 2);

    let invalid = r#"{"errors":[{"code":"MANIFEST_INVALID","message":"manifest invalid"}]}"#;
    let (e, n) = refused((400, invalid), "t");
    assert!(
        e.contains("refused the manifest t") && e.contains("does not take OCI artifacts"),
        "{e}"
    );
    assert_eq!(n, 1);

    let (e, n) = refused((201, ""), "sha256:00");
    assert!(e.contains("its bytes have digest"), "{e}");
    assert_eq!(n, 0);
}
