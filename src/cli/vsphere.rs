//! `vsphere` arguments: the `vsphere import` subcommand, and `VsphereTarget`,
//! the placement and credential flags it shares with `generate … vmware
//! --vsphere-template`. Handled by `commands::vsphere`.
use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub enum VsphereCommand {
    /// Import an OVA (from `generate … vmware`) into vCenter as a VM template,
    /// as openshift-install and the MCO do, then print the `oc patch` of the
    /// MachineSets and the MachineConfiguration skew record.
    ///
    /// vCenter and credentials come from govc's environment: GOVC_URL,
    /// GOVC_USERNAME, GOVC_PASSWORD (never a flag), GOVC_TLS_CA_CERTS,
    /// GOVC_TLS_KNOWN_HOSTS, GOVC_INSECURE, or from --credentials FILE. TLS
    /// trust is govc's: a certificate in GOVC_TLS_CA_CERTS (a CA's, or the
    /// server's own self-signed one) or the system store, else a
    /// `host[:port] thumbprint` line of a GOVC_TLS_KNOWN_HOSTS file (the
    /// SHA-1 of the certificate, AB:CD:… as `govc about.cert -thumbprint`
    /// prints it); ESXi hosts the upload goes to are also trusted by the
    /// thumbprint vCenter gives for them. A template of that name with the
    /// same RHCOS version is reused; a different one is refused unless
    /// --replace. On failure or Ctrl-C nothing is left in vCenter.
    ///
    /// Example: GOVC_URL=https://vc.example.com/sdk GOVC_USERNAME=admin GOVC_PASSWORD=... bootimage-gen vsphere import rhcos.ova --name rhcos-4.20
    Import(VsphereImportArgs),
}

#[derive(Debug, Args)]
pub struct VsphereImportArgs {
    /// The OVA.
    #[arg(value_name = "OVA")]
    pub ova: PathBuf,
    /// Name of the template.
    #[arg(long, value_name = "NAME")]
    pub name: String,
    /// Skip TLS verification of vCenter (test systems only; said on
    /// stderr). Also GOVC_INSECURE=1.
    #[arg(long)]
    pub insecure: bool,
    #[command(flatten)]
    pub target: VsphereTarget,
}

/// Where a vSphere template goes and what is printed about it (shared by
/// `vsphere import` and `generate … vmware --vsphere-template`).
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "vSphere")]
pub struct VsphereTarget {
    /// Datacenter (name or inventory path). Default: the only one.
    #[arg(long = "datacenter", env = "GOVC_DATACENTER", value_name = "DC")]
    pub datacenter: Option<String>,
    /// Datastore (name or inventory path). Default: the only one.
    #[arg(long = "datastore", env = "GOVC_DATASTORE", value_name = "DS")]
    pub datastore: Option<String>,
    /// Resource pool, e.g. CLUSTER/Resources (or an inventory path).
    /// Default: the only one.
    #[arg(
        long = "resource-pool",
        env = "GOVC_RESOURCE_POOL",
        value_name = "POOL"
    )]
    pub resource_pool: Option<String>,
    /// VM folder (name under the datacenter's vm folder, or an inventory
    /// path). Default: the datacenter's vm folder.
    #[arg(long = "folder", env = "GOVC_FOLDER", value_name = "FOLDER")]
    pub folder: Option<String>,
    /// Network the OVA's one network is mapped to. Default: the OVA's
    /// network name if it exists, else the only one.
    #[arg(long = "network", env = "GOVC_NETWORK", value_name = "NET")]
    pub network: Option<String>,
    /// Disk provisioning: thin, thick or eagerZeroedThick. Default: the
    /// datastore's.
    #[arg(long = "disk-provisioning", value_name = "TYPE", value_parser = ["thin", "thick", "eagerZeroedThick"])]
    pub disk_provisioning: Option<String>,
    /// vCenter credentials from a file instead of the environment: govc's
    /// GOVC_URL, GOVC_USERNAME, GOVC_PASSWORD, GOVC_TLS_CA_CERTS,
    /// GOVC_TLS_KNOWN_HOSTS, GOVC_INSECURE as NAME=value lines, or the cluster's own Secret
    /// (oc get secret -n kube-system vsphere-creds -o yaml). Its values win
    /// over the environment. Keep it mode 600.
    #[arg(long = "credentials", value_name = "FILE")]
    pub credentials: Option<PathBuf>,
    /// Replace a template of that name holding another RHCOS version.
    #[arg(long = "replace")]
    pub replace: bool,
    /// MachineSet to print the `oc patch` for (repeat). Default: a loop over
    /// every MachineSet.
    #[arg(long = "machineset", value_name = "NAME")]
    pub machinesets: Vec<String>,
    /// Also write the patches as files into DIR.
    #[arg(long = "write-patches", value_name = "DIR")]
    pub write_patches: Option<PathBuf>,
}
