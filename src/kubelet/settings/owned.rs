//! The kubelet flags nodeward passes from its own settings: named once here, written into the
//! kubelet's command line from here (`kubelet::spec`) and refused in `kubelet.extra_args` from here
//! (`rules::check_extra_args`). The kubelet keeps the last of a repeated flag (and
//! `--register-with-taints` replaces its whole list), so one of these in `extra_args` would
//! silently undo the setting it comes from.

/// A flag nodeward owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owned {
    BootstrapKubeconfig,
    Config,
    ConfigDir,
    HostnameOverride,
    Kubeconfig,
    CloudProvider,
    ProviderId,
    RegisterWithTaints,
}

impl Owned {
    pub(crate) const ALL: [Owned; 8] = [
        Owned::BootstrapKubeconfig,
        Owned::Config,
        Owned::ConfigDir,
        Owned::HostnameOverride,
        Owned::Kubeconfig,
        Owned::CloudProvider,
        Owned::ProviderId,
        Owned::RegisterWithTaints,
    ];

    /// The flag as the kubelet's flag set names it.
    pub(crate) fn flag(self) -> &'static str {
        match self {
            Owned::BootstrapKubeconfig => "--bootstrap-kubeconfig",
            Owned::Config => "--config",
            Owned::ConfigDir => "--config-dir",
            Owned::HostnameOverride => "--hostname-override",
            Owned::Kubeconfig => "--kubeconfig",
            Owned::CloudProvider => "--cloud-provider",
            Owned::ProviderId => "--provider-id",
            Owned::RegisterWithTaints => "--register-with-taints",
        }
    }

    /// What an operator sets instead of passing the flag.
    pub(crate) fn setting(self) -> &'static str {
        match self {
            Owned::BootstrapKubeconfig => "/etc/kubernetes/kubeconfig",
            Owned::Config => "kubelet.config_file",
            Owned::ConfigDir => "kubelet.config_dir",
            Owned::HostnameOverride => "node.hostname",
            Owned::Kubeconfig => "the kubelet's kubeconfig, /var/lib/kubelet/kubeconfig",
            Owned::CloudProvider => "kubelet.cloud_provider",
            Owned::ProviderId => "kubelet.provider_id",
            Owned::RegisterWithTaints => "node.taints",
        }
    }

    /// `--flag=value`, the one way nodeward writes it.
    pub(crate) fn arg(self, value: impl std::fmt::Display) -> String {
        format!("{}={value}", self.flag())
    }

    /// The owned flag `name` (as `rules::flag_name` spells it), if it is one.
    pub(crate) fn named(name: &str) -> Option<Owned> {
        Owned::ALL.into_iter().find(|o| o.flag() == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_owned_flag_is_named_once_and_found_by_its_name() {
        for o in Owned::ALL {
            assert_eq!(Owned::named(o.flag()), Some(o));
            assert_eq!(o.arg("x"), format!("{}=x", o.flag()));
        }
        let mut flags: Vec<&str> = Owned::ALL.iter().map(|o| o.flag()).collect();
        flags.sort_unstable();
        flags.dedup();
        assert_eq!(flags.len(), Owned::ALL.len());
        assert_eq!(Owned::named("--node-labels"), None, "labels merge: not owned");
    }
}
