//! `generate ... aws --aws-register` against an AWS API we did not write:
//! moto in server mode on 127.0.0.1 (installed by scripts/install-deps.sh),
//! read back with boto3. The snapshot equals the aws disk block for block,
//! zero blocks are not sent, RegisterImage carries the docs/contract.md §6.3 parameters,
//! the AMI is tagged and reused by a second run, leftovers of a failed run
//! are deleted or reused, and every failure leaves nothing registered.
use crate::common::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const MOTO_VENV: &str = "/opt/bootimage-gen/moto";
const BLOCK: u64 = 512 << 10;
const REGION: &str = "us-iso-east-1";
const REGION2: &str = "us-gov-west-1";

/// moto_server on a free port of 127.0.0.1; stopped when dropped. Its
/// request recorder is started by [`Moto::record`] (the recorder appends
/// large bodies in several writes, so block uploads from parallel threads
/// are not recorded: they are checked by reading the snapshot back).
struct Moto {
    #[allow(dead_code)] // held for its drop: killed first
    child: ChildGuard,
    url: String,
    dir: PathBuf,
}

impl Moto {
    fn start(dir: &Path) -> Moto {
        let bin = Path::new(MOTO_VENV).join("bin/moto_server");
        assert!(
            bin.exists(),
            "{} is missing: run scripts/install-deps.sh (make deps) to install moto",
            bin.display()
        );
        std::fs::create_dir_all(dir).unwrap();
        let port = free_port();
        let child = Command::new(&bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .env("MOTO_RECORDER_FILEPATH", dir.join("recording.jsonl"))
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("moto.log")).unwrap())
            .spawn()
            .expect("starting moto_server");
        let m = Moto {
            child: ChildGuard(child),
            url: format!("http://127.0.0.1:{port}"),
            dir: dir.to_path_buf(),
        };
        let t = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(t.elapsed() < Duration::from_secs(60), "moto did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        m
    }

    /// Run the boto3 helper below; returns its JSON answer.
    fn py(&self, region: &str, args: &[&str]) -> Value {
        let script = self.dir.join("helper.py");
        std::fs::write(&script, HELPER).unwrap();
        let out = must(
            Command::new(Path::new(MOTO_VENV).join("bin/python"))
                .arg(&script)
                .arg(&self.url)
                .arg(region)
                .args(args),
        );
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
    }

    /// Snapshots and AMIs of the account in `region`.
    fn state(&self, region: &str) -> Value {
        self.py(region, &["state"])
    }

    /// Record every request from now on.
    fn record(&self) {
        self.py("us-east-1", &["record"]);
    }

    /// The recorded requests (method, url, body).
    fn recording(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.join("recording.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// boto3 (installed with moto) as the independent AWS client.
const HELPER: &str = r#"
import base64, hashlib, json, sys
import boto3
url, region, cmd = sys.argv[1], sys.argv[2], sys.argv[3]
kw = dict(region_name=region, endpoint_url=url,
          aws_access_key_id="testing", aws_secret_access_key="testing")
ec2 = boto3.client("ec2", **kw)
ebs = boto3.client("ebs", **kw)
tags = lambda x: {t["Key"]: t["Value"] for t in x.get("Tags", [])}
if cmd == "state":
    # Ours: moto also lists the snapshots it makes for its stock AMIs.
    snaps = ec2.describe_snapshots(OwnerIds=["self"], Filters=[
        {"Name": "tag-key", "Values": ["bootimage-gen:ami-name"]}])["Snapshots"]
    imgs = ec2.describe_images(Owners=["self"])["Images"]
    print(json.dumps({
        "snapshots": [{"id": s["SnapshotId"], "state": s["State"], "size": s["VolumeSize"],
                       "tags": tags(s)} for s in snaps],
        "images": [{"id": i["ImageId"], "name": i.get("Name"), "state": i.get("State"),
                    "tags": tags(i)} for i in imgs]}))
elif cmd == "readback":
    sid, out, size = sys.argv[4], sys.argv[5], int(sys.argv[6])
    lst = ebs.list_snapshot_blocks(SnapshotId=sid)
    idx, bad = [], 0
    with open(out, "wb") as f:
        f.truncate(size)
        for b in lst["Blocks"]:
            r = ebs.get_snapshot_block(SnapshotId=sid, BlockIndex=b["BlockIndex"],
                                       BlockToken=b["BlockToken"])
            data = r["BlockData"].read()
            if base64.b64encode(hashlib.sha256(data).digest()).decode() != r["Checksum"]:
                bad += 1
            if r.get("ChecksumAlgorithm") != "SHA256":
                bad += 1
            f.seek(b["BlockIndex"] * 524288)
            f.write(data)
            idx.append(b["BlockIndex"])
    print(json.dumps({"indices": sorted(idx), "volume_size": lst["VolumeSize"], "bad_checksums": bad}))
elif cmd == "plant":
    # What a run killed mid-upload leaves: a started snapshot with some blocks.
    s = ebs.start_snapshot(VolumeSize=10, Tags=[{"Key": "bootimage-gen:ami-name", "Value": sys.argv[4]}])
    ebs.put_snapshot_block(SnapshotId=s["SnapshotId"], BlockIndex=0, BlockData=b"x" * 524288,
                           DataLength=524288, Checksum=base64.b64encode(hashlib.sha256(b"x" * 524288).digest()).decode(),
                           ChecksumAlgorithm="SHA256")
    print(json.dumps({"id": s["SnapshotId"]}))
elif cmd == "record":
    import requests
    requests.post(url + "/moto-api/recorder/start-recording").raise_for_status()
    print("{}")
elif cmd == "deregister":
    ec2.deregister_image(ImageId=sys.argv[4])
    print("{}")
"#;

fn ami_name() -> String {
    format!(
        "{}-{}-x86_64",
        fx()["osname"].as_str().unwrap(),
        fx()["rhel_coreos"]["version"].as_str().unwrap()
    )
}

/// The CLI with fake credentials and no stray AWS settings.
fn cli(cache: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_bootimage-gen"));
    for (k, _) in std::env::vars() {
        if k.starts_with("AWS_") {
            c.env_remove(k);
        }
    }
    c.env("BOOTIMAGE_GEN_CACHE_DIR", cache)
        .env("HOME", cache)
        .env_remove("REGISTRY_AUTH_FILE")
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_EC2_METADATA_DISABLED", "true");
    c
}

fn generate_args(out: &Path, raw: Option<&Path>, extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = [
        "generate",
        &oci("release"),
        "aws",
        "-o",
        out.to_str().unwrap(),
        "--no-ostree-archive",
        "--progress",
        "plain",
        "--aws-register",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Some(r) = raw {
        v.push("--debug-raw-dir".into());
        v.push(r.to_str().unwrap().into());
    }
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn run_ok(cmd: &mut Command) -> String {
    let o = cmd.output().unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "generate failed:\n{err}");
    err
}

fn meta(out: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(out.join("meta.json")).unwrap()).unwrap()
}

fn stream(out: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(out.join("stream.json")).unwrap()).unwrap()
}

/// Indices of the 512 KiB blocks of `raw` that are not all zeros.
fn nonzero_blocks(raw: &Path) -> BTreeSet<u64> {
    let mut f = std::fs::File::open(raw).unwrap();
    let mut buf = vec![0u8; BLOCK as usize];
    let mut set = BTreeSet::new();
    let mut i = 0;
    loop {
        let mut n = 0;
        while n < buf.len() {
            let k = f.read(&mut buf[n..]).unwrap();
            if k == 0 {
                break;
            }
            n += k;
        }
        if n == 0 {
            break;
        }
        if buf[..n].iter().any(|&b| b != 0) {
            set.insert(i);
        }
        i += 1;
    }
    set
}

/// `uploaded N of M blocks (...) in S s` from the log, per region.
fn uploaded(log: &str, region: &str) -> Option<(u64, u64, f64)> {
    let l = log
        .lines()
        .find(|l| l.starts_with(&format!("aws upload {region}: uploaded ")))?;
    let w: Vec<&str> = l.split_whitespace().collect();
    let secs = l.split(" in ").nth(1)?.split(' ').next()?.parse().ok()?;
    Some((w[4].parse().ok()?, w[6].parse().ok()?, secs))
}

fn form(body: &str) -> Vec<(String, String)> {
    body.split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| {
            let dec = |s: &str| {
                let s = s.replace('+', " ");
                let b = s.as_bytes();
                let mut out = Vec::new();
                let mut i = 0;
                while i < b.len() {
                    if b[i] == b'%' && i + 3 <= b.len() {
                        out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap());
                        i += 3;
                    } else {
                        out.push(b[i]);
                        i += 1;
                    }
                }
                String::from_utf8(out).unwrap()
            };
            (dec(k), dec(v))
        })
        .collect()
}

fn body_of(req: &Value) -> String {
    let b = req["body"].as_str().unwrap_or("");
    if req["body_encoded"].as_bool() == Some(true) {
        use base64::Engine;
        String::from_utf8_lossy(&base64::engine::general_purpose::STANDARD.decode(b).unwrap())
            .into_owned()
    } else {
        b.to_string()
    }
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn register_uploads_the_disk_block_for_block_and_reuses_the_ami() {
    let root = scratch("generate-aws").join("register");
    let _ = std::fs::remove_dir_all(&root);
    let moto = Moto::start(&root.join("moto"));
    let (out, raw, cache) = (root.join("out"), root.join("raw"), root.join("cache"));
    let name = ami_name();
    // A run killed mid-upload left an unfinished snapshot for this AMI.
    let planted = moto.py(REGION, &["plant", &name])["id"]
        .as_str()
        .unwrap()
        .to_string();

    let t = Instant::now();
    let log = run_ok(cli(&cache).args(generate_args(
        &out,
        Some(&raw),
        &[
            "--aws-region",
            REGION,
            "--aws-region",
            REGION2,
            "--aws-endpoint-url",
            &moto.url,
        ],
    )));
    eprintln!("first run: {:.1?}\n{log}", t.elapsed());
    assert!(
        log.contains(&format!("deleted snapshot {planted} left unfinished")),
        "{log}"
    );
    let disk = raw.join("aws.raw");
    let disk_len = std::fs::metadata(&disk).unwrap().len();
    let want = nonzero_blocks(&disk);
    let total = disk_len.div_ceil(1 << 30) * (1 << 30) / BLOCK;
    assert!(!want.is_empty());

    let m = meta(&out);
    let st = stream(&out);
    let amis = m["amis"].as_array().unwrap();
    for region in [REGION, REGION2] {
        // Blocks sent versus blocks in the disk, as the tool reports them.
        let (sent, of, secs) =
            uploaded(&log, region).unwrap_or_else(|| panic!("no upload line for {region}:\n{log}"));
        assert_eq!(of, total, "{region}");
        assert_eq!(
            sent,
            want.len() as u64,
            "{region}: blocks sent = non-zero blocks"
        );
        eprintln!(
            "{region}: uploaded {sent} of {total} blocks ({} MiB) in {secs} s",
            (sent * BLOCK) >> 20
        );

        let s = moto.state(region);
        let snaps = s["snapshots"].as_array().unwrap();
        assert_eq!(snaps.len(), 1, "{region}: one snapshot: {s}");
        let snap = &snaps[0];
        let snap_id = snap["id"].as_str().unwrap();
        assert_ne!(snap_id, planted);
        assert_eq!(snap["size"], disk_len.div_ceil(1 << 30));
        assert_eq!(snap["tags"]["bootimage-gen:ami-name"], name.as_str());
        assert_eq!(snap["tags"]["bootimage-gen:upload"], "complete");
        assert_release_tags(&snap["tags"]);

        // ListSnapshotBlocks + GetSnapshotBlock read back equal the disk.
        let back = root.join(format!("readback-{region}.raw"));
        let rb = moto.py(
            region,
            &[
                "readback",
                snap_id,
                back.to_str().unwrap(),
                &disk_len.to_string(),
            ],
        );
        assert_eq!(rb["bad_checksums"], 0, "{rb}");
        let got: BTreeSet<u64> = rb["indices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(got, want, "{region}: exactly the non-zero blocks were sent");
        must(Command::new("cmp").arg(&disk).arg(&back));
        std::fs::remove_file(&back).ok();

        // DescribeImages: the AMI with its name and tags.
        let imgs = s["images"].as_array().unwrap();
        assert_eq!(imgs.len(), 1, "{s}");
        let img = &imgs[0];
        assert_eq!(img["name"], name.as_str());
        assert_eq!(img["tags"]["Name"], name.as_str());
        assert_eq!(img["tags"]["bootimage-gen:snapshot"], snap_id);
        assert_release_tags(&img["tags"]);
        let ami = img["id"].as_str().unwrap();

        // meta.json and stream.json.
        let a = amis
            .iter()
            .find(|a| a["name"] == region)
            .unwrap_or_else(|| panic!("{region} not in amis: {amis:?}"));
        assert_eq!(a["hvm"], ami);
        assert_eq!(a["snapshot"], snap_id);
        let r = &st["architectures"]["x86_64"]["images"]["aws"]["regions"][region];
        assert_eq!(r["image"], ami);
        assert_eq!(r["release"], fx()["rhel_coreos"]["version"]);
    }
    // The release's pinned AMIs stay, with their own release.
    assert_eq!(amis.len(), 4, "{amis:?}");
    let regions = &st["architectures"]["x86_64"]["images"]["aws"]["regions"];
    assert_eq!(regions["us-east-1"]["release"], fx()["pinned_release"]);
    assert_eq!(regions["eu-west-1"]["release"], fx()["pinned_release"]);

    // A second run reuses the AMIs: nothing uploaded or registered.
    moto.record();
    let before = moto.recording().len();
    let log2 = run_ok(cli(&cache).args(generate_args(
        &out,
        None,
        &[
            "--aws-region",
            REGION,
            "--aws-region",
            REGION2,
            "--aws-endpoint-url",
            &moto.url,
        ],
    )));
    for region in [REGION, REGION2] {
        assert!(
            log2.contains(&format!("aws {region}: AMI {name} already exists: reusing")),
            "{log2}"
        );
        assert_eq!(moto.state(region)["images"].as_array().unwrap().len(), 1);
        assert_eq!(moto.state(region)["snapshots"].as_array().unwrap().len(), 1);
    }
    let later = &moto.recording()[before..];
    assert!(!later
        .iter()
        .any(|r| r["method"] == "PUT" || body_of(r).contains("Action=RegisterImage")));
    let sorted = |v: &Value| {
        let mut a: Vec<String> = v["amis"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.to_string())
            .collect();
        a.sort();
        a
    };
    assert_eq!(
        sorted(&meta(&out)),
        sorted(&m),
        "the same AMIs and snapshots recorded"
    );

    // The AMI gone but its completed snapshot there: the snapshot is
    // reused, not uploaded again, and a new AMI registered from it.
    let s = moto.state(REGION);
    let (old_ami, snap) = (
        s["images"][0]["id"].as_str().unwrap().to_string(),
        s["snapshots"][0]["id"].as_str().unwrap().to_string(),
    );
    moto.py(REGION, &["deregister", &old_ami]);
    let log3 = run_ok(cli(&cache).args(generate_args(
        &out,
        None,
        &["--aws-region", REGION, "--aws-endpoint-url", &moto.url],
    )));
    assert!(
        log3.contains(&format!("reusing completed snapshot {snap}")),
        "{log3}"
    );
    assert!(uploaded(&log3, REGION).is_none(), "{log3}");
    // RegisterImage on the wire carried the docs/contract.md §6.3 parameters (moto
    // accepts them but keeps only the name, so the request is checked).
    let regs: Vec<Vec<(String, String)>> = moto
        .recording()
        .iter()
        .map(body_of)
        .filter(|b| b.contains("Action=RegisterImage"))
        .map(|b| form(&b))
        .collect();
    assert_eq!(regs.len(), 1, "one RegisterImage");
    for f in &regs {
        let get = |k: &str| {
            f.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.as_str())
                .unwrap_or_else(|| panic!("{k} missing in RegisterImage: {f:?}"))
        };
        assert_eq!(get("Name"), name);
        assert_eq!(get("VirtualizationType"), "hvm");
        assert_eq!(get("RootDeviceName"), "/dev/xvda");
        assert_eq!(get("BlockDeviceMapping.1.DeviceName"), "/dev/xvda");
        assert_eq!(get("BlockDeviceMapping.1.Ebs.SnapshotId"), snap);
        assert_eq!(get("BlockDeviceMapping.1.Ebs.DeleteOnTermination"), "true");
        // The fixture's image.json: gp3, uefi-preferred, IMDSv2 only.
        assert_eq!(get("BlockDeviceMapping.1.Ebs.VolumeType"), "gp3");
        assert_eq!(get("EnaSupport"), "true");
        assert_eq!(get("BootMode"), "uefi-preferred");
        assert_eq!(get("ImdsSupport"), "v2.0");
        assert_eq!(get("Architecture"), "x86_64");
    }
    let s = moto.state(REGION);
    let new_ami = s["images"][0]["id"].as_str().unwrap();
    assert_ne!(new_ami, old_ami);
    let m3 = meta(&out);
    let a = m3["amis"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == REGION)
        .unwrap();
    assert_eq!(
        (a["hvm"].as_str(), a["snapshot"].as_str()),
        (Some(new_ami), Some(snap.as_str()))
    );
    drop(moto);
    std::fs::remove_dir_all(&root).ok();
}

/// Ctrl-C during the upload stops it and deletes the unfinished snapshot.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn interrupt_during_upload_deletes_the_snapshot() {
    let root = scratch("generate-aws").join("interrupt");
    let _ = std::fs::remove_dir_all(&root);
    let moto = Moto::start(&root.join("moto"));
    let (out, cache) = (root.join("out"), root.join("cache"));
    let paused = run_until_paused(
        cli(&cache).args(generate_args(
            &out,
            None,
            &["--aws-region", REGION, "--aws-endpoint-url", &moto.url],
        )),
        "aws-upload",
        Duration::from_secs(600),
    );
    let log = &paused.log;
    // The snapshot exists while the upload runs.
    assert_eq!(
        moto.state(REGION)["snapshots"].as_array().unwrap().len(),
        1,
        "{log}"
    );
    let (st, log) = paused.signal(libc::SIGINT);
    assert_eq!(st.code(), Some(130), "{log}");
    assert!(log.contains("deleted unfinished snapshot"), "{log}");
    let s = moto.state(REGION);
    assert!(s["snapshots"].as_array().unwrap().is_empty(), "{s}");
    assert!(s["images"].as_array().unwrap().is_empty(), "{s}");
    assert!(!out.join("meta.json").exists());
    drop(moto);
    std::fs::remove_dir_all(&root).ok();
}

/// Exit 1 with one `error:` line naming `needle`; nothing written.
fn expect_failure(o: &Output, needle: &str, out: &Path) -> String {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains(needle), "'{needle}' not in: {}", lines[0]);
    assert!(
        !out.join("meta.json").exists(),
        "meta.json written after an error"
    );
    lines[0].to_string()
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn bad_endpoint_region_or_credentials_fail_clearly_and_register_nothing() {
    let root = scratch("generate-aws").join("errors");
    let _ = std::fs::remove_dir_all(&root);
    let moto = Moto::start(&root.join("moto"));
    let (out, cache) = (root.join("out"), root.join("cache"));

    // Missing credentials: refused before the release is even read.
    let t = Instant::now();
    let o = cli(&cache)
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .args(generate_args(
            &out,
            None,
            &["--aws-region", REGION, "--aws-endpoint-url", &moto.url],
        ))
        .output()
        .unwrap();
    let e = expect_failure(&o, "no AWS credentials", &out);
    assert!(e.contains("AWS_ACCESS_KEY_ID"), "{e}");
    eprintln!("missing credentials: {:.1?}: {e}", t.elapsed());

    // No region anywhere.
    let o = cli(&cache)
        .args(generate_args(
            &out,
            None,
            &["--aws-endpoint-url", &moto.url],
        ))
        .output()
        .unwrap();
    expect_failure(&o, "no AWS region", &out);

    // A malformed region name.
    let o = cli(&cache)
        .args(generate_args(
            &out,
            None,
            &[
                "--aws-region",
                "us-east-1x",
                "--aws-endpoint-url",
                &moto.url,
            ],
        ))
        .output()
        .unwrap();
    expect_failure(&o, "'us-east-1x' is not an AWS region name", &out);

    // A well-formed name of a region the endpoint does not serve.
    let t = Instant::now();
    let o = cli(&cache)
        .args(generate_args(
            &out,
            None,
            &[
                "--aws-region",
                "xx-nowhere-1",
                "--aws-endpoint-url",
                &moto.url,
            ],
        ))
        .output()
        .unwrap();
    let e = expect_failure(&o, "AWS region xx-nowhere-1", &out);
    eprintln!("unknown region: {:.1?}: {e}", t.elapsed());
    assert!(!stderr(&o).contains("base disk"), "failed after building");

    // Endpoint not listening: fails before the disk is built.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let t = Instant::now();
    let o = cli(&cache)
        .args(generate_args(
            &out,
            None,
            &["--aws-region", REGION, "--aws-endpoint-url", &dead],
        ))
        .output()
        .unwrap();
    let e = expect_failure(&o, &dead, &out);
    assert!(e.to_lowercase().contains("connect"), "{e}");
    assert!(!stderr(&o).contains("base disk"), "failed after building");
    eprintln!("endpoint not listening: {:.1?}: {e}", t.elapsed());

    // --aws-register without the aws platform.
    let o = cli(&cache)
        .args([
            "generate",
            &oci("release"),
            "qemu",
            "-o",
            out.to_str().unwrap(),
            "--aws-register",
            "--aws-region",
            REGION,
        ])
        .output()
        .unwrap();
    expect_failure(&o, "add the aws platform", &out);

    // Nothing was created in any region.
    for region in [REGION, "us-east-1"] {
        let s = moto.state(region);
        assert!(s["snapshots"].as_array().unwrap().is_empty(), "{s}");
        assert!(s["images"].as_array().unwrap().is_empty(), "{s}");
    }
    drop(moto);
    std::fs::remove_dir_all(&root).ok();
}

/// The release and OS version tags of our snapshots and AMIs.
fn assert_release_tags(tags: &Value) {
    assert_eq!(tags["bootimage-gen:release"], fx()["release"]["version"]);
    assert_eq!(
        tags["bootimage-gen:os-version"],
        fx()["rhel_coreos"]["version"]
    );
}
