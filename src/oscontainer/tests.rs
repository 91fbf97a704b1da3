//! Unit tests of the OS image module: the format told from labels, and
//! os-release parsing.
use super::*;
use std::collections::BTreeMap;
#[test]
fn formats_from_labels() {
    let mut l = BTreeMap::new();
    assert!(detect_format(&l, "x").is_err());
    l.insert(LABEL_LEGACY_COMMIT.to_string(), "a".repeat(64));
    assert_eq!(detect_format(&l, "x").unwrap(), OsFormat::Legacy);
    l.insert(LABEL_BOOTC.to_string(), "1".into());
    assert_eq!(detect_format(&l, "x").unwrap(), OsFormat::OstreeNative);
}
#[test]
fn os_release() {
    let m = parse_os_release("NAME=\"Test OS\"\nID=testos\n# c\nVERSION_ID='1.2'\n");
    assert_eq!(m["NAME"], "Test OS");
    assert_eq!(m["VERSION_ID"], "1.2");
}
