//! The configuration schema as operators write it, with the built-in defaults.
//!
//! Every table denies unknown keys. Every field has a default, so a fragment may set any subset and
//! an empty configuration describes a Fedora CoreOS worker. Fragments are merged as TOML tables
//! (see `merge`) and the result is deserialised into [`ConfigInput`] once more.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::cni::{self, Cni};
pub use super::metrics::MetricsInput;
use super::modules::ModuleName;
pub use super::network::{NetworkManagerInput, NetworkdInput, NmPolicy};
use super::sysctl::SysctlSection;
pub use crate::bundle::settings::{BundleInput, LayoutChoice};
pub use crate::containerd::settings::ContainerdInput;
pub(crate) use crate::registration::input::NodeInput;
pub use crate::types::Role;
use crate::types::{AbsPath, AccountRef, Mode, SelinuxContext};

/// The whole configuration, as merged from the drop-ins.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct ConfigInput {
    pub(crate) node: NodeInput,
    /// Directories keyed by host path. A fragment can change one field of a default entry, add an
    /// entry, or drop a default with `enabled = false`.
    pub(crate) dirs: BTreeMap<AbsPath, DirInput>,
    pub(crate) selinux: SelinuxInput,
    pub(crate) daemon: DaemonInput,
    /// Sysctls keyed by name: a value means exactly that value; `{ min = N }`, `{ max = N }` or both
    /// a range (raise-only limits); `{ enabled = false }` drops a default.
    pub(crate) sysctl: SysctlSection,
    pub(crate) modules: ModulesInput,
    pub(crate) bundle: BundleInput,
    pub(crate) networkmanager: NetworkManagerInput,
    pub(crate) networkd: NetworkdInput,
    pub(crate) kubelet: crate::kubelet::settings::input::KubeletInput,
    pub(crate) containerd: ContainerdInput,
    pub(crate) images: crate::images::settings::ImagesInput,
    pub(crate) check: CheckInput,
    pub(crate) metrics: MetricsInput,
    pub(crate) fleet_lock: crate::fleetlock::FleetLockInput,
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
    "localhost",
    "ports",
    "time-sync",
    "container-host",
    "conntrack-max",
    "cni",
    "cri",
    "images",
    "kubelet",
    "certificates",
];

/// `[check]`: preflight checks (`nodeward check`, and after every converge of the daemon).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct CheckInput {
    /// Checks whose failures and warnings are shown as `ignored` and not counted, as kubeadm's
    /// `--ignore-preflight-errors`.
    pub(crate) ignore: Vec<String>,
}

/// Kernel modules loaded at every converge and at boot (modules-load.d).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct ModulesInput {
    /// Modules to load (dependencies are resolved from modules.dep).
    pub(crate) load: Vec<ModuleName>,
    /// Modules to leave out of `load` (handy for dropping one default without restating the list).
    pub(crate) skip: Vec<ModuleName>,
    /// The kernel whose `/lib/modules/VERSION` is used; default: the running kernel (`uname -r`),
    /// or with `--root` the only version installed in the root.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) kernel_version: Option<String>,
}

impl Default for ModulesInput {
    fn default() -> Self {
        ModulesInput {
            load: ModuleName::defaults(),
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
    pub(crate) interval_seconds: u64,
    /// The window over which a fleet's first requests to a shared server (the bundle download, a
    /// kubelet image pull) spread after the daemon starts: each node's from its machine id.
    pub(crate) boot_spread_seconds: u64,
}

impl Default for DaemonInput {
    fn default() -> Self {
        DaemonInput {
            interval_seconds: 60,
            boot_spread_seconds: DEFAULT_BOOT_SPREAD_SECONDS,
        }
    }
}

/// `daemon.boot_spread_seconds` unset: a fleet powered on in one second reaches its servers over
/// five (a fifth of it in each), and a node's first pass (modules, sysctls, the bundle: seconds)
/// has usually passed its own phase before its kubelet needs a pull.
pub(crate) const DEFAULT_BOOT_SPREAD_SECONDS: u64 = 5;

/// The largest `daemon.boot_spread_seconds`: an hour.
pub(crate) const MAX_BOOT_SPREAD_SECONDS: u64 = 3600;

/// One directory the node needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DirInput {
    /// Its permission bits (default `0755`).
    #[serde(default = "default_dir_mode")]
    pub(crate) mode: Mode,
    /// Its owner, a name or a uid (default `root`).
    #[serde(default = "root_account")]
    pub(crate) owner: AccountRef,
    /// Its group, a name or a gid (default `root`).
    #[serde(default = "root_account")]
    pub(crate) group: AccountRef,
    /// `false` drops the entry (a default the admin does not want managed).
    #[serde(default = "enabled")]
    pub(crate) enabled: bool,
}

/// SELinux labelling of the trees containers share.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct SelinuxInput {
    /// `auto`: label when the kernel has SELinux enabled; `always`: label even when it does not (image
    /// builds with `--root`); `never`: leave labels alone.
    pub(crate) labels: LabelPolicy,
    /// The file context set on the trees: `container_file_t` at level `s0` without MCS categories,
    /// so every container can share them (a private `:Z` pair made static pods hang).
    pub(crate) context: SelinuxContext,
    /// Trees labelled recursively (not crossing into other mounts).
    pub(crate) relabel: Vec<AbsPath>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub(crate) enum LabelPolicy {
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

/// A path of a built-in table; the tables are proved valid when the crate compiles (below).
fn p(s: &'static str) -> AbsPath {
    AbsPath::from_checked_const(s)
}

const _: () = {
    let mut i = 0;
    while i < DEFAULT_DIRS.len() {
        assert!(
            AbsPath::is_valid_const(DEFAULT_DIRS[i].0),
            "a built-in directory is not an absolute path"
        );
        i += 1;
    }
    assert!(
        AbsPath::all_valid_const(DEFAULT_RELABEL),
        "a built-in relabelled tree is not an absolute path"
    );
    assert!(
        SelinuxContext::is_valid_const(DEFAULT_CONTEXT),
        "the built-in context is invalid"
    );
};

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

pub(crate) use crate::kubelet::spec::CALICO_DIR;

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
            kubelet: crate::kubelet::settings::input::KubeletInput::default(),
            containerd: ContainerdInput::default(),
            images: crate::images::settings::ImagesInput::default(),
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

impl Default for SelinuxInput {
    fn default() -> Self {
        SelinuxInput {
            labels: LabelPolicy::Auto,
            context: SelinuxContext::from_checked_const(DEFAULT_CONTEXT),
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
