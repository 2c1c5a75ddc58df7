//! The steps of convergence, named: the change model's index. What each step does lives in
//! `steps/`; this is the vocabulary every layer above can share.

use std::fmt;

use serde::Serialize;

/// A step of convergence. The order of the variants is the order they run in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Step {
    /// What a container host may lack and the kubelet needs: `/` a shared mount, `/dev/kmsg`.
    Container,
    /// Directories Kubernetes needs, with mode and owner.
    Dirs,
    /// The assets bundle, installed all or nothing.
    Bundle,
    /// Host files derived from the configuration or from delivered files (ca.crt from the
    /// kubeconfig, logind's inhibitor delay, flannel's link file), after the bundle.
    Hostfiles,
    /// SELinux labels on the trees containers share.
    Selinux,
    /// Kernel modules, before the sysctls some of them provide.
    Modules,
    /// Kernel values, after the modules that provide them.
    Sysctl,
    /// Image archives shipped with the node, imported into containerd and the kubelet's engine
    /// before the kubelet needs them.
    Images,
    /// The kubelet's configuration file and container: it needs everything above. The daemon
    /// hands the kubelet to its supervisor as soon as this step is done, before the steps below.
    Kubelet,
    /// NetworkManager kept off the CNI's interfaces. After the kubelet: those interfaces appear
    /// only once the kubelet runs the CNI's pods, tens of seconds after its start at the least.
    Nm,
    /// systemd-networkd kept off the same interfaces.
    Networkd,
}

impl Step {
    pub(crate) const ALL: [Step; 11] = [
        Step::Container,
        Step::Dirs,
        Step::Bundle,
        Step::Hostfiles,
        Step::Selinux,
        Step::Modules,
        Step::Sysctl,
        Step::Images,
        Step::Kubelet,
        Step::Nm,
        Step::Networkd,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Step::Container => "container",
            Step::Dirs => "dirs",
            Step::Bundle => "bundle",
            Step::Hostfiles => "hostfiles",
            Step::Selinux => "selinux",
            Step::Modules => "modules",
            Step::Sysctl => "sysctl",
            Step::Nm => "nm",
            Step::Networkd => "networkd",
            Step::Images => "images",
            Step::Kubelet => "kubelet",
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
