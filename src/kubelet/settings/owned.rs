//! The kubelet flags nodeward passes from its own settings: named once here, written into the
//! kubelet's command line from here (`kubelet::spec`) and refused in `kubelet.extra_args` from here
//! (`rules::check_extra_args`). The kubelet keeps the last of a repeated flag (and
//! `--register-with-taints` replaces its whole list), so one of these in `extra_args` would
//! silently undo the setting it comes from. The node's identity flags are the registration's
//! (`registration::Flag`), owned here too.

use crate::registration::route::Flag;

/// A flag nodeward owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owned {
    BootstrapKubeconfig,
    Config,
    ConfigDir,
    Kubeconfig,
    CloudProvider,
    /// A flag of the node's registration.
    Node(Flag),
}

impl Owned {
    /// The kubelet's own; [`Owned::all`] adds the registration's.
    const OWN: [Owned; 5] = [
        Owned::BootstrapKubeconfig,
        Owned::Config,
        Owned::ConfigDir,
        Owned::Kubeconfig,
        Owned::CloudProvider,
    ];

    /// Every owned flag: the kubelet's own, then each of the registration's.
    pub(crate) fn all() -> impl Iterator<Item = Owned> {
        Owned::OWN
            .into_iter()
            .chain(Flag::ALL.into_iter().map(Owned::Node))
    }

    /// The flag as the kubelet's flag set names it.
    pub(crate) fn flag(self) -> &'static str {
        match self {
            Owned::BootstrapKubeconfig => "--bootstrap-kubeconfig",
            Owned::Config => "--config",
            Owned::ConfigDir => "--config-dir",
            Owned::Kubeconfig => "--kubeconfig",
            Owned::CloudProvider => "--cloud-provider",
            Owned::Node(f) => f.flag(),
        }
    }

    /// What an operator sets instead of passing the flag.
    pub(crate) fn setting(self) -> &'static str {
        match self {
            Owned::BootstrapKubeconfig => "/etc/kubernetes/kubeconfig",
            Owned::Config => "kubelet.config_file",
            Owned::ConfigDir => "kubelet.config_dir",
            Owned::Kubeconfig => "the kubelet's kubeconfig, /var/lib/kubelet/kubeconfig",
            Owned::CloudProvider => "kubelet.cloud_provider",
            Owned::Node(f) => f.setting(),
        }
    }

    /// `--flag=value`, the one way nodeward writes it.
    pub(crate) fn arg(self, value: impl std::fmt::Display) -> String {
        format!("{}={value}", self.flag())
    }

    /// The owned flag `name` (as `rules::flag_name` spells it), if it is one.
    pub(crate) fn named(name: &str) -> Option<Owned> {
        Owned::all().find(|o| o.flag() == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_owned_flag_is_named_once_and_found_by_its_name() {
        for o in Owned::all() {
            assert_eq!(Owned::named(o.flag()), Some(o));
            assert_eq!(o.arg("x"), format!("{}=x", o.flag()));
        }
        let mut flags: Vec<&str> = Owned::all().map(|o| o.flag()).collect();
        flags.sort_unstable();
        flags.dedup();
        assert_eq!(flags.len(), Owned::all().count());
        assert_eq!(Owned::named("--node-labels"), None, "labels merge: not owned");
        for f in Flag::ALL {
            assert_eq!(Owned::named(f.flag()), Some(Owned::Node(f)), "{f:?} owned");
        }
    }
}
