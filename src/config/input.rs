//! The configuration schema as operators write it, with the built-in defaults.
//!
//! Every table denies unknown keys. Every field has a default, so a fragment may set any subset and
//! an empty configuration describes a Fedora CoreOS worker. Fragments are merged as TOML tables
//! (see `merge`) and the result is deserialised into [`ConfigInput`] once more.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::cni::{self, Cni};
use super::modules::{DEFAULT_MODULES, ModuleName};
use super::sysctl::SysctlSection;
use crate::bundle::fetch::{Sha256Hex, Source};
use crate::bundle::layout::{Rule, Unmatched};
use crate::types::{AbsPath, AccountRef, Hostname, LabelKey, LabelValue, Mode, SelinuxContext, Taint};

/// The whole configuration, as merged from the drop-ins.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct ConfigInput {
    pub node: NodeInput,
    /// Directories keyed by host path. A fragment can change one field of a default entry, add an
    /// entry, or drop a default with `enabled = false`.
    pub dirs: BTreeMap<AbsPath, DirInput>,
    pub selinux: SelinuxInput,
    pub daemon: DaemonInput,
    /// Sysctls keyed by name: a value means exactly that value; `{ min = N }`, `{ max = N }` or both
    /// a range (raise-only limits); `{ enabled = false }` drops a default.
    pub sysctl: SysctlSection,
    pub modules: ModulesInput,
    pub bundle: BundleInput,
    pub networkmanager: NetworkManagerInput,
    pub networkd: NetworkdInput,
    pub kubelet: super::kubelet::KubeletInput,
    pub containerd: ContainerdInput,
    pub check: CheckInput,
    pub metrics: MetricsInput,
    pub fleet_lock: crate::fleetlock::FleetLockInput,
}

/// The names of `nodeward check`'s checks, in the order they run: the vocabulary `check.ignore`
/// is validated against (the check layer implements each; a test keeps the two lists equal).
pub(crate) const CHECK_NAMES: &[&str] = &[
    "kernel-version",
    "kernel-config",
    "kernel-modules",
    "cgroups",
    "cgroup-driver",
    "swap",
    "network-sysctls",
    "runtime-storage",
    "selinux-labels",
    "hostname",
    "machine-id",
    "product-uuid",
    "ports",
    "time-sync",
    "container-host",
    "conntrack-max",
    "cni",
    "cri",
    "kubelet",
    "certificates",
];

/// `[check]`: preflight checks (`nodeward check`, and after every converge of the daemon).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct CheckInput {
    /// Checks whose failures and warnings are shown as `ignored` and not counted, as kubeadm's
    /// `--ignore-preflight-errors`.
    pub ignore: Vec<String>,
}

/// containerd's configuration file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ContainerdInput {
    /// Write Typhoon's `config.toml` (and restart containerd when it changes). Off by default: the
    /// OS or Ignition usually provides it, and nodeward then reads its cgroup driver from it.
    pub manage: bool,
    /// containerd's configuration file (written with `manage`, else read for its cgroup driver).
    pub config_file: AbsPath,
}

impl Default for ContainerdInput {
    fn default() -> Self {
        ContainerdInput {
            manage: false,
            config_file: p("/etc/containerd/config.toml"),
        }
    }
}

/// Keeping NetworkManager off the interfaces the CNI manages.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetworkManagerInput {
    /// `auto`: when NetworkManager is installed; `never`: leave it alone.
    pub manage: NmPolicy,
    /// NetworkManager device specs to leave unmanaged (keyfile `unmanaged-devices`).
    pub unmanaged: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum NmPolicy {
    #[default]
    Auto,
    Never,
}

impl NetworkManagerInput {
    /// The defaults for a CNI profile.
    pub(crate) fn for_cni(cni: Cni) -> Self {
        NetworkManagerInput {
            manage: NmPolicy::Auto,
            unmanaged: cni::unmanaged(cni),
        }
    }
}

/// `[networkd]`: systemd-networkd (Flatcar's network manager) kept off the CNI's interfaces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetworkdInput {
    /// `auto`: where systemd-networkd is installed; `never`: leave it alone.
    pub manage: NmPolicy,
    /// Interface names (globs, as `.network` `[Match] Name=` takes them) networkd must not manage.
    pub unmanaged: Vec<String>,
}

impl NetworkdInput {
    /// The defaults for a CNI profile: the same interfaces as NetworkManager's.
    pub(crate) fn for_cni(cni: Cni) -> Self {
        NetworkdInput {
            manage: NmPolicy::Auto,
            unmanaged: cni::interface_names(cni),
        }
    }
}

impl Default for NetworkdInput {
    fn default() -> Self {
        NetworkdInput::for_cni(Cni::Any)
    }
}

impl Default for NetworkManagerInput {
    fn default() -> Self {
        NetworkManagerInput::for_cni(Cni::Any)
    }
}

/// The assets bundle: where it comes from and where its files go.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BundleInput {
    /// An absolute path (below `--root`) or an `https://` URL; unset: no bundle.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<Source>,
    /// Required for URLs; checked before anything is written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<Sha256Hex>,
    /// `auto` (from node.role), `controller`, `worker` or `custom` (`rules`).
    pub layout: LayoutChoice,
    /// Rules for `layout = "custom"`, first match wins.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<Rule>,
    /// An entry no rule places: `error` (refuse the bundle) or `ignore`.
    pub unmatched: Unmatched,
    /// The controller layout's owner of etcd's server and peer material.
    pub etcd_user: AccountRef,
    /// The controller layout's group for /etc/kubernetes/pki files (the static pods' gid).
    pub pki_group: AccountRef,
    /// For https: trust only the CAs in this PEM file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<AbsPath>,
    /// Accept a plain `http://` source (a server inside the cluster; the sha256 still pins it).
    pub allow_http: bool,
    /// A whole download attempt's deadline (1 to 3600).
    pub timeout_seconds: u64,
    /// Attempts after the first within one fetch (at most 100), each a random time below a
    /// doubling bound capped at 5 minutes.
    pub retries: u32,
    /// The largest bundle accepted, in bytes.
    pub max_bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LayoutChoice {
    #[default]
    Auto,
    Controller,
    Worker,
    Custom,
}

impl Default for BundleInput {
    fn default() -> Self {
        BundleInput {
            source: None,
            sha256: None,
            layout: LayoutChoice::Auto,
            rules: Vec::new(),
            unmatched: Unmatched::Error,
            etcd_user: AccountRef::Name("etcd".into()),
            pki_group: AccountRef::Id(65534),
            ca_file: None,
            allow_http: false,
            timeout_seconds: 30,
            retries: 3,
            max_bytes: 256 << 20,
        }
    }
}

/// Kernel modules loaded at every converge and at boot (modules-load.d).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct ModulesInput {
    /// Modules to load (dependencies are resolved from modules.dep).
    pub load: Vec<ModuleName>,
    /// Modules to leave out of `load` (handy for dropping one default without restating the list).
    pub skip: Vec<ModuleName>,
    /// The kernel whose `/lib/modules/VERSION` is used; default: the running kernel (`uname -r`),
    /// or with `--root` the only version installed in the root.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_version: Option<String>,
}

impl Default for ModulesInput {
    fn default() -> Self {
        ModulesInput {
            load: DEFAULT_MODULES
                .iter()
                .map(|(m, _)| m.parse().unwrap_or_else(|e| panic!("built-in module {m}: {e}")))
                .collect(),
            skip: Vec::new(),
            kernel_version: None,
        }
    }
}

/// How `nodeward run` behaves.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct DaemonInput {
    /// Seconds between drift checks (each one re-applies whatever drifted).
    pub interval_seconds: u64,
}

impl Default for DaemonInput {
    fn default() -> Self {
        DaemonInput { interval_seconds: 60 }
    }
}

/// `[metrics]`: Prometheus metrics, off unless an address or a textfile is set.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsInput {
    /// Where to serve `GET /metrics` (`127.0.0.1:9101`; a node IP for in-cluster scraping).
    pub listen: Option<std::net::SocketAddr>,
    /// A node-exporter textfile collector file (`…/nodeward.prom`), rewritten atomically.
    pub textfile: Option<AbsPath>,
    /// Trees whose certificates (`*.crt`, `*.pem`, kubeconfigs) get an expiry metric.
    pub certificates: Vec<AbsPath>,
}

impl Default for MetricsInput {
    fn default() -> Self {
        MetricsInput {
            listen: None,
            textfile: None,
            certificates: vec![
                p("/etc/kubernetes"),
                p("/etc/ssl/etcd"),
                p("/var/lib/kubelet/pki"),
            ],
        }
    }
}

impl MetricsInput {
    pub fn enabled(&self) -> bool {
        self.listen.is_some() || self.textfile.is_some()
    }
}

/// What this node is in the cluster.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct NodeInput {
    /// `worker` or `controller`: the kubelet's role label and taint (Typhoon's), and the bundle's layout with `bundle.layout = "auto"`.
    pub role: Role,
    /// The cluster's CNI; decides the CNI-dependent defaults (`any`: safe under every one).
    pub cni: Cni,
    /// Overrides the node name the kubelet registers (`--hostname-override`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<Hostname>,
    /// Extra node labels (`--node-labels`), as Typhoon's `worker_node_labels`.
    pub labels: BTreeMap<LabelKey, LabelValue>,
    /// Taints registered with the node (`--register-with-taints`), `key=value:Effect`.
    pub taints: Vec<Taint>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Controller,
    #[default]
    Worker,
}

impl Role {
    /// Typhoon's role labels: `node.kubernetes.io/controller=true` (Typhoon writes
    /// `controller="true"`; systemd strips the quotes, so the kubelet sees this) or
    /// `node.kubernetes.io/node`.
    pub fn labels(self) -> Vec<(LabelKey, LabelValue)> {
        let (key, value) = match self {
            Role::Controller => ("node.kubernetes.io/controller", "true"),
            Role::Worker => ("node.kubernetes.io/node", ""),
        };
        key.parse().ok().zip(value.parse().ok()).into_iter().collect()
    }

    /// Typhoon's role taints: controllers keep workloads off with
    /// `node-role.kubernetes.io/controller`.
    pub fn taints(self) -> Vec<Taint> {
        match self {
            Role::Controller => "node-role.kubernetes.io/controller=:NoSchedule"
                .parse()
                .ok()
                .into_iter()
                .collect(),
            Role::Worker => Vec::new(),
        }
    }
}

/// One directory the node needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DirInput {
    /// Its permission bits (default `0755`).
    #[serde(default = "default_dir_mode")]
    pub mode: Mode,
    /// Its owner, a name or a uid (default `root`).
    #[serde(default = "root_account")]
    pub owner: AccountRef,
    /// Its group, a name or a gid (default `root`).
    #[serde(default = "root_account")]
    pub group: AccountRef,
    /// `false` drops the entry (a default the admin does not want managed).
    #[serde(default = "enabled")]
    pub enabled: bool,
}

/// SELinux labelling of the trees containers share.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct SelinuxInput {
    /// `auto`: label when the kernel has SELinux enabled; `always`: label even when it does not (image
    /// builds with `--root`); `never`: leave labels alone.
    pub labels: LabelPolicy,
    /// The file context set on the trees: `container_file_t` at level `s0` without MCS categories,
    /// so every container can share them (a private `:Z` pair made static pods hang).
    pub context: SelinuxContext,
    /// Trees labelled recursively (not crossing into other mounts).
    pub relabel: Vec<AbsPath>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LabelPolicy {
    #[default]
    Auto,
    Always,
    Never,
}

fn default_dir_mode() -> Mode {
    Mode::new(0o755)
}
fn root_account() -> AccountRef {
    AccountRef::Name("root".to_owned())
}
fn enabled() -> bool {
    true
}

/// Parses a path constant. The built-in tables are fixed strings, checked by the `defaults_parse`
/// unit test, so a failure here is a programming error.
fn p(s: &str) -> AbsPath {
    s.parse().unwrap_or_else(|e| panic!("built-in path {s}: {e}"))
}

/// The directories a Kubernetes node needs, with why. Modes follow what the owning component would
/// create itself, so nodeward never fights it.
pub(crate) const DEFAULT_DIRS: &[(&str, u32, &str)] = &[
    (
        "/etc/kubernetes",
        0o755,
        "kubelet config, bootstrap kubeconfig, CA",
    ),
    (
        "/etc/kubernetes/manifests",
        0o755,
        "static pod manifests (staticPodPath)",
    ),
    // Traversable: the static control-plane pods run as uid 65534 and read pki/*; the key files
    // carry their own restrictive modes.
    ("/etc/kubernetes/pki", 0o755, "control-plane TLS material"),
    (
        "/etc/cni/net.d",
        0o755,
        "CNI network configs (written by Calico's install-cni)",
    ),
    ("/opt/cni/bin", 0o755, "CNI plugin binaries"),
    // kubelet creates its root 0750 itself; pod volumes below it hold secrets.
    ("/var/lib/kubelet", 0o750, "kubelet state, pod volumes"),
    (
        "/var/lib/kubelet/volumeplugins",
        0o755,
        "flexvolume plugin dir mounted by the kubelet",
    ),
    // Only for the `calico` and `any` CNI profiles (see `ConfigInput::for_node`).
    (CALICO_DIR, 0o755, "calico-node's node name and state"),
    // containerd creates its root 0711; it must exist before the kubelet container mounts it.
    (
        "/var/lib/containerd",
        0o711,
        "container runtime state, mounted into the kubelet",
    ),
    ("/var/log/pods", 0o755, "pod logs (kubelet)"),
    ("/var/log/containers", 0o755, "container log symlinks (kubelet)"),
];

pub(crate) const CALICO_DIR: &str = "/var/lib/calico";

/// Trees labelled `container_file_t:s0` by default.
pub(crate) const DEFAULT_RELABEL: &[&str] = &[
    "/etc/kubernetes",
    "/var/lib/kubelet",
    "/opt/cni/bin",
    "/etc/cni/net.d",
];

pub(crate) const DEFAULT_CONTEXT: &str = "system_u:object_r:container_file_t:s0";

impl Default for ConfigInput {
    fn default() -> Self {
        ConfigInput::for_node(Cni::Any, cni::Distro::Other)
    }
}

impl ConfigInput {
    /// The built-in defaults for a CNI profile: what an empty configuration means on such a node.
    pub(crate) fn for_node(cni: Cni, distro: cni::Distro) -> Self {
        ConfigInput {
            node: NodeInput {
                cni,
                ..NodeInput::default()
            },
            dirs: DEFAULT_DIRS
                .iter()
                .filter(|(path, _, _)| *path != CALICO_DIR || cni::calico_state(cni))
                .map(|&(path, mode, _why)| {
                    (
                        p(path),
                        DirInput {
                            mode: Mode::new(mode),
                            owner: root_account(),
                            group: root_account(),
                            enabled: true,
                        },
                    )
                })
                .collect(),
            selinux: SelinuxInput::default(),
            daemon: DaemonInput::default(),
            sysctl: cni::default_section(host_cpus(), cni, distro),
            modules: ModulesInput::default(),
            bundle: BundleInput::default(),
            networkmanager: NetworkManagerInput::for_cni(cni),
            networkd: NetworkdInput::for_cni(cni),
            kubelet: super::kubelet::KubeletInput::default(),
            containerd: ContainerdInput::default(),
            check: CheckInput::default(),
            metrics: MetricsInput::default(),
            fleet_lock: crate::fleetlock::FleetLockInput::default(),
        }
    }
}

/// CPUs this process may run on, as kube-proxy counts them for conntrack sizing.
pub(crate) fn host_cpus() -> u64 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u64)
}

impl Default for NodeInput {
    fn default() -> Self {
        NodeInput {
            role: Role::Worker,
            cni: Cni::Any,
            hostname: None,
            labels: BTreeMap::new(),
            taints: Vec::new(),
        }
    }
}

impl Default for SelinuxInput {
    fn default() -> Self {
        SelinuxInput {
            labels: LabelPolicy::Auto,
            context: DEFAULT_CONTEXT
                .parse()
                .unwrap_or_else(|e| panic!("built-in context: {e}")),
            relabel: DEFAULT_RELABEL.iter().map(|s| p(s)).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_parse() {
        let d = ConfigInput::default();
        assert_eq!(d.dirs.len(), DEFAULT_DIRS.len());
        assert_eq!(d.selinux.relabel.len(), DEFAULT_RELABEL.len());
        assert_eq!(d.node.role, Role::Worker);
    }

    #[test]
    fn defaults_round_trip_through_toml() {
        let table = toml::Table::try_from(ConfigInput::default()).expect("serialise defaults");
        let back: ConfigInput = table.try_into().expect("deserialise defaults");
        assert_eq!(back.dirs.len(), DEFAULT_DIRS.len());
    }
}
