//! The vocabulary of an observation: a fact or why it could not be read, and the shapes of the
//! facts the checks read (modules, sysctls, listeners, runtime roots), with the names they follow.

/// Something observed, or why it could not be.
pub(crate) type Seen<T> = Result<T, Unseen>;

/// Why a fact could not be read (`nodeward check` shows it in place of a verdict).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Unseen(pub String);

/// A check's verdict quotes it.
impl From<Unseen> for String {
    fn from(why: Unseen) -> String {
        why.0
    }
}

impl From<&str> for Unseen {
    fn from(why: &str) -> Unseen {
        Unseen(why.to_owned())
    }
}

impl From<String> for Unseen {
    fn from(why: String) -> Unseen {
        Unseen(why)
    }
}

/// Where a wanted module stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ModuleState {
    Loaded,
    BuiltIn,
    /// In the running kernel's module tree, loadable.
    Available,
    Missing(String),
}

/// One runtime root (`/var/lib/containers` …) and the filesystem under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RuntimeRoot {
    pub(crate) path: String,
    pub(crate) fs_type: String,
    /// The mount's source (`/dev/vda1`, `/dev/loop0`).
    pub(crate) source: String,
    /// Whether directory entries carry their type (overlay needs it: xfs `ftype=1`).
    pub(crate) d_type: Option<bool>,
    /// Percent of blocks and of inodes free.
    pub(crate) free_percent: Option<u64>,
    pub(crate) inodes_free_percent: Option<u64>,
}

/// A sysctl the network needs, as it is now and whether it survives a reboot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SysctlSeen {
    pub(crate) key: String,
    pub(crate) current: Option<String>,
    /// Set again at boot: by a sysctl.d file with the wanted value, or by nodeward's own unit.
    pub(crate) persisted: bool,
}

/// A TCP port something listens on, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Listener {
    pub(crate) port: u16,
    /// The owning process's name, when it could be found.
    pub(crate) owner: Option<String>,
}

/// The CRI endpoint nodeward's kubelet uses (Typhoon's: containerd).
pub(crate) const CRI_SOCKET: &str = "/run/containerd/containerd.sock";

/// The ports the kubelet listens on: its API and its health endpoint.
pub(crate) const KUBELET_PORTS: [u16; 2] = [10250, 10248];

/// The networking sysctls the checks follow: what kube-proxy and the CNIs break without.
pub(crate) const NETWORK_SYSCTLS: [&str; 4] = [
    "net.ipv4.ip_forward",
    "net.bridge.bridge-nf-call-iptables",
    "net.bridge.bridge-nf-call-ip6tables",
    "net.netfilter.nf_conntrack_max",
];

/// The roots container runtimes keep images and layers under.
pub(crate) const RUNTIME_ROOTS: [&str; 3] = ["/var/lib/containers", "/var/lib/containerd", "/var/lib/docker"];
