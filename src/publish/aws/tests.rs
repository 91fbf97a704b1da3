//! Tests of the `--aws-*` checks (region names, AMI names, endpoint URLs)
//! and of the AMI spec made from the plan and image.json.
use super::*;
use crate::util::arch::Arch;

#[test]
fn region_names() {
    for ok in [
        "us-east-1",
        "us-gov-west-1",
        "cn-north-1",
        "us-iso-east-1",
        "us-isob-east-1",
        "eu-isoe-west-1",
        "ap-southeast-5",
        "xx-nowhere-1",
    ] {
        check_region_name(ok).unwrap();
    }
    for bad in [
        "",
        "us",
        "useast1",
        "us-east",
        "US-EAST-1",
        "us-east-1x",
        "us-east-123",
        "us--east-1",
        "nowhere",
        "usa-east-1",
        "us_east_1",
    ] {
        let e = check_region_name(bad).unwrap_err().to_string();
        assert!(e.contains("not an AWS region name"), "{bad}: {e}");
    }
}

#[test]
fn ami_names_and_endpoints() {
    check_ami_name("rhcos-418.94.202501221327-0-x86_64").unwrap();
    check_ami_name("my image (test) [1]/a@b_c'd").unwrap();
    assert!(check_ami_name("ab").is_err());
    assert!(check_ami_name(&"a".repeat(129)).is_err());
    assert!(check_ami_name("bad*name").is_err());
    check_endpoint_url("http://127.0.0.1:5000").unwrap();
    check_endpoint_url("https://ec2.us-iso-east-1.c2s.ic.gov/").unwrap();
    assert!(check_endpoint_url("127.0.0.1:5000").is_err());
    assert!(check_endpoint_url("http://").is_err());
    assert!(check_endpoint_url("ftp://x").is_err());
}

fn image(boot: &str, vt: &str, imds: bool) -> crate::oscontainer::config::ImageConfig {
    let v = serde_json::json!({
        "aws-x86-boot-mode": boot, "aws-volume-type": vt, "aws-imdsv2-only": imds
    });
    crate::oscontainer::config::ImageConfig::from_json(Some(&v), "image.json").unwrap()
}

#[test]
fn ami_spec_from_plan_and_image_json() {
    let s = Settings {
        regions: vec![],
        endpoint_url: None,
        ami_name: None,
    };
    let a = AmiSpec::new(
        &s,
        "rhcos",
        "418.94.1",
        Arch::X86_64,
        "4.18.0",
        &image("uefi-preferred", "gp3", true),
    )
    .unwrap();
    assert_eq!(a.name, "rhcos-418.94.1-x86_64");
    assert_eq!(a.arch, "x86_64");
    assert_eq!(a.boot_mode, "uefi-preferred");
    assert_eq!(a.volume_type, "gp3");
    assert!(a.imdsv2_only);
    assert!(a
        .tags
        .contains(&(TAG_RELEASE.to_string(), "4.18.0".to_string())));
    assert!(a
        .tags
        .contains(&(TAG_OS_VERSION.to_string(), "418.94.1".to_string())));
    let s = Settings {
        ami_name: Some("custom".into()),
        ..s
    };
    let a = AmiSpec::new(
        &s,
        "rhcos",
        "1",
        Arch::Aarch64,
        "4",
        &image("legacy-bios", "gp2", false),
    )
    .unwrap();
    assert_eq!(
        (a.name.as_str(), a.arch.as_str(), a.boot_mode.as_str()),
        ("custom", "arm64", "uefi")
    );
    for bad in [image("bios", "gp2", false), image("uefi", "ssd", false)] {
        assert!(AmiSpec::new(&s, "rhcos", "1", Arch::X86_64, "4", &bad).is_err());
    }
}
