//! Tests of the EC2 client: parameter flattening, partition endpoints,
//! reading DescribeImages / DescribeSnapshots / error answers, and signed
//! calls against a canned local server (retries, pages, no retry of client
//! errors).
use super::*;

#[test]
fn params_flatten_lists_filters_and_tags() {
    let mut p = Params::new("DescribeImages");
    p.list("Owner", &["self"]).filter(1, "name", &["a b/c"]);
    p.tags("Tag", &[("k".into(), "v=1".into())]);
    assert_eq!(
            p.body(),
            "Action=DescribeImages&Version=2016-11-15&Owner.1=self&Filter.1.Name=name&Filter.1.Value.1=a%20b%2Fc&Tag.1.Key=k&Tag.1.Value=v%3D1"
        );
    set_token(&mut p, "t1".into());
    set_token(&mut p, "t2".into());
    assert_eq!(p.get("NextToken"), Some("t2"));
    assert_eq!(p.0.iter().filter(|(k, _)| k == "NextToken").count(), 1);
}

#[test]
fn endpoints_follow_the_partition() {
    assert_eq!(
        default_endpoint("us-east-1", false),
        "https://ec2.us-east-1.amazonaws.com"
    );
    assert_eq!(
        default_endpoint("us-gov-west-1", true),
        "https://ec2-fips.us-gov-west-1.amazonaws.com"
    );
    assert_eq!(
        default_endpoint("cn-north-1", false),
        "https://ec2.cn-north-1.amazonaws.com.cn"
    );
    assert_eq!(
        default_endpoint("us-iso-east-1", false),
        "https://ec2.us-iso-east-1.c2s.ic.gov"
    );
    assert_eq!(
        default_endpoint("us-isob-east-1", false),
        "https://ec2.us-isob-east-1.sc2s.sgov.gov"
    );
    assert_eq!(
        default_endpoint("eu-isoe-west-1", false),
        "https://ec2.eu-isoe-west-1.cloud.adc-e.uk"
    );
    assert_eq!(
        default_endpoint("us-isof-south-1", false),
        "https://ec2.us-isof-south-1.csp.hci.ic.gov"
    );
}

// The shape of the EC2 API reference's DescribeImages and
// DescribeSnapshots examples (namespace, nested item lists).
const IMAGES: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<DescribeImagesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
  <requestId>59dbff89-35bd-4eac-99ed-be587EXAMPLE</requestId>
  <imagesSet>
    <item>
      <imageId>ami-1a2b3c4d</imageId>
      <imageState>available</imageState>
      <name>rhcos-1-x86_64</name>
      <blockDeviceMapping>
        <item><deviceName>/dev/xvda</deviceName><ebs><snapshotId>snap-1</snapshotId><volumeSize>16</volumeSize></ebs></item>
        <item><deviceName>/dev/sdb</deviceName><virtualName>ephemeral0</virtualName></item>
      </blockDeviceMapping>
      <tagSet><item><key>bootimage-gen:snapshot</key><value>snap-9</value></item></tagSet>
    </item>
  </imagesSet>
  <nextToken>abc</nextToken>
</DescribeImagesResponse>"#;

#[test]
fn reads_images_with_tags_devices_and_token() {
    let (imgs, next) = parse_images(IMAGES).unwrap();
    assert_eq!(next.as_deref(), Some("abc"));
    assert_eq!(imgs.len(), 1);
    let i = &imgs[0];
    assert_eq!(i.id, "ami-1a2b3c4d");
    assert_eq!(i.name.as_deref(), Some("rhcos-1-x86_64"));
    assert_eq!(i.state.as_deref(), Some("available"));
    assert_eq!(i.tag("bootimage-gen:snapshot"), Some("snap-9"));
    assert_eq!(
        i.block_devices,
        [
            ("/dev/xvda".to_string(), Some("snap-1".to_string())),
            ("/dev/sdb".to_string(), None)
        ]
    );
    // An item without an id is not an image; a page without a token ends.
    let (imgs, next) = parse_images(
        &IMAGES
            .replace("<imageId>ami-1a2b3c4d</imageId>", "")
            .replace("<nextToken>abc</nextToken>", ""),
    )
    .unwrap();
    assert!(imgs.is_empty());
    assert_eq!(next, None);
}

#[test]
fn reads_snapshots() {
    let xml = r#"<DescribeSnapshotsResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
  <snapshotSet><item><snapshotId>snap-1</snapshotId><status>completed</status><volumeSize>16</volumeSize>
  <tagSet><item><key>bootimage-gen:upload</key><value>complete</value></item></tagSet></item>
  <item><snapshotId>snap-2</snapshotId><status>pending</status></item></snapshotSet>
</DescribeSnapshotsResponse>"#;
    let (s, next) = parse_snapshots(xml).unwrap();
    assert_eq!(next, None);
    assert_eq!(s.len(), 2);
    assert_eq!(
        (s[0].id.as_str(), s[0].state.as_deref(), s[0].volume_gib),
        ("snap-1", Some("completed"), Some(16))
    );
    assert_eq!(s[0].tag("bootimage-gen:upload"), Some("complete"));
    assert_eq!(
        (s[1].state.as_deref(), s[1].volume_gib, s[1].tags.len()),
        (Some("pending"), None, 0)
    );
    assert!(matches!(
        parse_snapshots("<not xml"),
        Err(Ec2Error::Local(_))
    ));
}

#[test]
fn error_answers_say_code_message_and_status_and_classify() {
    let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message></Error></Errors><RequestID>ea966190</RequestID></Response>"#;
    let e = parse_error(503, xml);
    assert_eq!(e.code(), Some("RequestLimitExceeded"));
    assert_eq!(
        e.to_string(),
        "RequestLimitExceeded: Request limit exceeded. (HTTP 503)"
    );
    assert_eq!(e.failure(), Failure::Throttled);
    let e = parse_error(
        400,
        &xml.replace("RequestLimitExceeded", "InvalidAMIName.Duplicate"),
    );
    assert_eq!(e.failure(), Failure::Permanent);
    assert_eq!(e.code(), Some("InvalidAMIName.Duplicate"));
    let e = parse_error(502, "<html>bad gateway</html>");
    assert_eq!(e.to_string(), "HTTP 502 without an EC2 error in the answer");
    assert_eq!(e.failure(), Failure::ServerError);
    assert_eq!(
        Ec2Error::Transport(TransportError::Connect("reset".into())).failure(),
        Failure::Transient
    );
    assert_eq!(
        Ec2Error::Transport(TransportError::Tls("unknown CA".into())).failure(),
        Failure::Permanent
    );
    assert_eq!(
        parse_image_id("<RegisterImageResponse><imageId>ami-5</imageId></RegisterImageResponse>")
            .unwrap()
            .as_deref(),
        Some("ami-5")
    );
    assert_eq!(parse_image_id("<RegisterImageResponse/>").unwrap(), None);
}

/// A server on 127.0.0.1 that answers each request with the next
/// canned (status, body) and keeps what it was sent.
fn serve(answers: Vec<(u16, String)>) -> (String, std::thread::JoinHandle<Vec<String>>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let h = std::thread::spawn(move || {
        let mut seen = Vec::new();
        for (status, body) in answers {
            let (s, _) = l.accept().unwrap();
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut head = String::new();
            let mut len = 0;
            loop {
                let mut line = String::new();
                r.read_line(&mut line).unwrap();
                if line == "\r\n" || line.is_empty() {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap();
                }
                head.push_str(&line);
            }
            let mut b = vec![0; len];
            r.read_exact(&mut b).unwrap();
            seen.push(head + &String::from_utf8(b).unwrap());
            let mut s = s;
            write!(
                s,
                "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
        }
        seen
    });
    (url, h)
}

fn client(url: &str) -> Client {
    let creds = Credentials::new("AKIDTEST", "secret", None, None, "test");
    let agent = http::agent(http::Trust::System, false, Duration::from_secs(10)).unwrap();
    let mut c = Client::new(
        url,
        "us-iso-east-1",
        SharedCredentialsProvider::new(creds),
        agent,
    );
    c.policy.base = Duration::from_millis(1);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_calls_retry_throttling_and_follow_pages() {
    let throttled = "<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>slow down</Message></Error></Errors></Response>";
    let page2 = IMAGES
        .replace("ami-1a2b3c4d", "ami-2")
        .replace("<nextToken>abc</nextToken>", "");
    let (url, h) = serve(vec![
        (503, throttled.into()),
        (200, IMAGES.into()),
        (200, page2),
    ]);
    let mut p = Params::new("DescribeImages");
    p.list("Owner", &["self"]);
    let imgs = client(&url).describe_images(&p).await.unwrap();
    assert_eq!(
        imgs.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(),
        ["ami-1a2b3c4d", "ami-2"]
    );
    let seen = h.join().unwrap();
    assert_eq!(seen.len(), 3);
    for req in &seen {
        assert!(req.starts_with("POST / HTTP/1.1"), "{req}");
        let auth = req
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with("authorization:"))
            .unwrap();
        assert!(
            auth.contains("AWS4-HMAC-SHA256 Credential=AKIDTEST/")
                && auth.contains("/us-iso-east-1/ec2/aws4_request"),
            "{auth}"
        );
        assert!(
            req.contains("Action=DescribeImages&Version=2016-11-15&Owner.1=self"),
            "{req}"
        );
    }
    assert!(!seen[1].contains("NextToken"));
    assert!(seen[2].ends_with("&NextToken=abc"), "{}", seen[2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_errors_are_not_retried() {
    let bad = "<Response><Errors><Error><Code>InvalidParameterValue</Code><Message>no</Message></Error></Errors></Response>";
    let (url, h) = serve(vec![(400, bad.into())]);
    let e = client(&url)
        .call(&Params::new("DeleteSnapshot"))
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "InvalidParameterValue: no (HTTP 400)");
    assert_eq!(h.join().unwrap().len(), 1);
    // Nobody listening: a transport error, retried, then said.
    let gone = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", gone.local_addr().unwrap());
    drop(gone);
    let e = client(&url)
        .call(&Params::new("DeleteSnapshot"))
        .await
        .unwrap_err();
    assert!(
        matches!(e, Ec2Error::Transport(TransportError::Connect(_))),
        "{e}"
    );
}
