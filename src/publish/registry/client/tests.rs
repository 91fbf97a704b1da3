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
