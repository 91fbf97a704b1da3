//! Unit tests of the SOAP client's pure parts: the `GOVC_URL` forms an
//! [`Endpoint`] accepts, and the escaping of what goes into a request.
use super::*;

#[test]
fn endpoint_forms() {
    let e = Endpoint::parse("vc.example.com", false, None).unwrap();
    assert_eq!(e.sdk, "https://vc.example.com/sdk");
    let e = Endpoint::parse("https://127.0.0.1:8989/sdk", false, None).unwrap();
    assert_eq!(
        (e.sdk.as_str(), e.authority.as_str()),
        ("https://127.0.0.1:8989/sdk", "127.0.0.1:8989")
    );
    assert!(Endpoint::parse("https://u:p@vc/sdk", false, None)
        .unwrap_err()
        .to_string()
        .contains("GOVC_PASSWORD"));
    assert!(Endpoint::parse("http://vc/sdk", false, None).is_err());
    assert!(Endpoint::parse("", false, None).is_err());
}

#[test]
fn escapes() {
    assert_eq!(esc("a<b>&\"'"), "a&lt;b&gt;&amp;&quot;&apos;");
    assert_eq!(
        MoRef::new("Folder", "g&1").xml("x"),
        "<x type=\"Folder\">g&amp;1</x>"
    );
}
