//! The fixed names `--aws-register` writes: the tags we put on snapshots
//! and AMIs (the AMI name, the release and OS version, the snapshot an AMI
//! came from, the upload-complete mark) and the AMIs' root device.

/// Tags we put on snapshots and AMIs. `Name` is the AMI name.
pub const TAG_NAME: &str = "Name";
/// The AMI name the snapshot was uploaded for (finds leftovers of a run).
pub const TAG_AMI_NAME: &str = "bootimage-gen:ami-name";
/// OpenShift release version the OS came from.
pub const TAG_RELEASE: &str = "bootimage-gen:release";
/// OS (CoreOS) version.
pub const TAG_OS_VERSION: &str = "bootimage-gen:os-version";
/// On an AMI: the snapshot it was registered from. EC2 also says so in
/// the AMI's block device mapping, but an AMI reused by a later run is
/// recorded from this tag first (moto, the test endpoint, does not keep
/// RegisterImage's block device mapping and reports a snapshot of its own).
pub const TAG_SNAPSHOT: &str = "bootimage-gen:snapshot";
/// Set to [`UPLOAD_COMPLETE`] on a snapshot once every block is in and EC2
/// reports it `completed`: only such a snapshot is ever reused.
pub const TAG_UPLOAD: &str = "bootimage-gen:upload";
pub const UPLOAD_COMPLETE: &str = "complete";
/// Root device of CoreOS AMIs (docs/contract.md §6.3; cosa/ore `RegisterImage`).
pub const ROOT_DEVICE: &str = "/dev/xvda";

pub type Tags = Vec<(String, String)>;
