//! Where the kubelet reads what the node registers with, decided in one place: the command line,
//! or the KubeletConfiguration when nodeward writes it (the taints there are `registerWithTaints`,
//! read without the deprecated flag). What goes where, and each flag's one spelling.

use super::{Registration, Resolved};
use crate::types::Taint;

/// The kubelet flags a registration sets. The kubelet keeps the last of a repeated flag (and
/// `--register-with-taints` replaces its whole list), so `kubelet.extra_args` may not repeat them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flag {
    HostnameOverride,
    ProviderId,
    RegisterWithTaints,
    NodeIp,
}

impl Flag {
    pub(crate) const ALL: [Flag; 4] = [
        Flag::HostnameOverride,
        Flag::ProviderId,
        Flag::RegisterWithTaints,
        Flag::NodeIp,
    ];

    /// The flag as the kubelet's flag set names it.
    pub(crate) fn flag(self) -> &'static str {
        match self {
            Flag::HostnameOverride => "--hostname-override",
            Flag::ProviderId => "--provider-id",
            Flag::RegisterWithTaints => "--register-with-taints",
            Flag::NodeIp => "--node-ip",
        }
    }

    /// The setting an operator uses instead.
    pub(crate) fn setting(self) -> &'static str {
        match self {
            Flag::HostnameOverride => "node.hostname",
            Flag::ProviderId => "node.provider_id",
            Flag::RegisterWithTaints => "node.taints",
            Flag::NodeIp => "node.ip",
        }
    }

    /// `--flag=value`, the one way nodeward writes it.
    pub(crate) fn arg(self, value: impl std::fmt::Display) -> String {
        format!("{}={value}", self.flag())
    }
}

/// Who reads the registration's file-borne fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Someone else's KubeletConfiguration: everything is a flag.
    Flags,
    /// nodeward's own KubeletConfiguration: the taints are in it.
    ConfigFile,
}

/// The registration as the kubelet is given it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routed {
    /// `--hostname-override=<name>`.
    pub name: String,
    /// The other flags, in their fixed order (provider id, labels, taints on the flag route,
    /// address). A flag appears only when its setting is set: a new key never changes the command
    /// line (and the spec hash) of a node that does not use it.
    pub flags: Vec<String>,
}

impl Registration {
    /// The registration's flags for `route`.
    pub fn route(&self, resolved: &Resolved, route: Route) -> Routed {
        let mut flags = Vec::new();
        if let Some(id) = &resolved.provider_id {
            flags.push(Flag::ProviderId.arg(id));
        }
        if !self.labels.is_empty() {
            // Not owned: the kubelet merges repeated --node-labels.
            flags.push(format!(
                "--node-labels={}",
                super::policy::labels_flag(&self.labels)
            ));
        }
        if route == Route::Flags && !self.taints.is_empty() {
            let list: Vec<String> = self.taints.iter().map(ToString::to_string).collect();
            flags.push(Flag::RegisterWithTaints.arg(list.join(",")));
        }
        if let Some(ip) = &self.ip {
            flags.push(Flag::NodeIp.arg(ip));
        }
        Routed {
            name: Flag::HostnameOverride.arg(&resolved.name),
            flags,
        }
    }

    /// The taints nodeward's KubeletConfiguration carries (`registerWithTaints`).
    pub(crate) fn file_taints(&self) -> &[Taint] {
        &self.taints
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_flag_is_spelled_once() {
        let mut flags: Vec<&str> = Flag::ALL.iter().map(|f| f.flag()).collect();
        flags.sort_unstable();
        flags.dedup();
        assert_eq!(flags.len(), Flag::ALL.len());
        for f in Flag::ALL {
            assert!(f.setting().starts_with("node."), "{f:?}");
        }
    }

    #[test]
    fn taints_take_one_route_and_new_keys_appear_only_when_set() {
        let controller = Registration {
            role: crate::types::Role::Controller,
            labels: super::super::policy::role_labels(crate::types::Role::Controller),
            taints: super::super::policy::role_taints(crate::types::Role::Controller),
            ..Registration::default()
        };
        let resolved = Resolved {
            name: "c1".into(),
            provider_id: None,
        };
        let by_flag = controller.route(&resolved, Route::Flags);
        assert_eq!(by_flag.name, "--hostname-override=c1");
        assert_eq!(
            by_flag.flags,
            [
                "--node-labels=node.kubernetes.io/controller=true",
                "--register-with-taints=node-role.kubernetes.io/controller=:NoSchedule"
            ]
        );
        let by_file = controller.route(&resolved, Route::ConfigFile);
        assert_eq!(
            by_file.flags,
            ["--node-labels=node.kubernetes.io/controller=true"]
        );
        assert_eq!(controller.file_taints().len(), 1);
        let with_ip = Registration {
            ip: Some("10.0.5.11,fd00::11".parse().expect("ip")),
            ..controller
        };
        assert_eq!(
            with_ip
                .route(&resolved, Route::ConfigFile)
                .flags
                .last()
                .map(String::as_str),
            Some("--node-ip=10.0.5.11,fd00::11")
        );
    }
}
