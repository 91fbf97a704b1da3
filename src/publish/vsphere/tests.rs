//! Unit tests of `vsphere import`'s pure parts: the annotation a template
//! carries, written and read back.
use super::*;

#[test]
fn annotation_round_trip() {
    let a = annotation("9.6.20251023-0", Some("quay.io/x/y@sha256:1"));
    assert_eq!(annotation_version(&a).as_deref(), Some("9.6.20251023-0"));
    assert_eq!(annotation_version("someone else's note"), None);
    assert_eq!(annotation_version(""), None);
}
