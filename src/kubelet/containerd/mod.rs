//! containerd's configuration as Typhoon writes it, and the one cgroup driver the kubelet and
//! containerd must agree on.
//!
//! The kubelet's `cgroupDriver` and containerd's runc `SystemdCgroup` must name the same driver:
//! when they differ, pods are created under one hierarchy and accounted under another, and the
//! kubelet evicts or fails them. The systemd driver works on cgroup v1 and v2 alike wherever
//! systemd is PID 1, which is every host nodeward runs on, so it is the default; a containerd
//! configuration nodeward does not manage decides instead.

use std::fmt::Write;

pub(crate) mod settings;

/// The first line of a file nodeward wrote.
pub(crate) const MARKER: &str = "# Written by nodeward from its [containerd] configuration.";

/// Facts the rendered file depends on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Facts {
    /// SELinux is enabled: the CRI plugin labels containers (Typhoon's `enable_selinux = true`).
    pub(crate) selinux: bool,
}

/// Typhoon's `/etc/containerd/config.toml` (version 2).
pub(crate) fn render(facts: Facts) -> String {
    let mut s = String::new();
    s.push_str(MARKER);
    s.push_str("\n# Edits are overwritten; to manage this file yourself, set containerd.manage = false.\n");
    s.push_str(
        "version = 2\n\
         root = \"/var/lib/containerd\"\n\
         state = \"/run/containerd\"\n\
         subreaper = true\n\
         oom_score = -999\n\
         [grpc]\n\
         address = \"/run/containerd/containerd.sock\"\n\
         uid = 0\n\
         gid = 0\n\
         [plugins.\"io.containerd.grpc.v1.cri\"]\n",
    );
    let _ = writeln!(s, "enable_selinux = {}", facts.selinux);
    s.push_str(
        "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n\
         runtime_type = \"io.containerd.runc.v2\"\n\
         [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n\
         SystemdCgroup = true\n",
    );
    s
}

/// The cgroup driver a containerd configuration file gives runc: `Some(true)` for systemd,
/// `Some(false)` for cgroupfs (containerd's default when the key is absent), `None` when the
/// text is not TOML (the caller keeps its default and says so).
pub(crate) fn systemd_cgroup(config: &str) -> Option<bool> {
    let table: toml::Table = config.parse().ok()?;
    fn find(v: &toml::Value) -> Option<bool> {
        match v {
            toml::Value::Table(t) => t.iter().find_map(|(k, v)| match (k.as_str(), v) {
                ("SystemdCgroup", toml::Value::Boolean(b)) => Some(*b),
                _ => find(v),
            }),
            _ => None,
        }
    }
    Some(find(&toml::Value::Table(table)).unwrap_or(false))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Typhoon's Fedora CoreOS file, with the marker; `enable_selinux` follows the host.
    const GOLDEN: &str = "\
# Written by nodeward from its [containerd] configuration.
# Edits are overwritten; to manage this file yourself, set containerd.manage = false.
version = 2
root = \"/var/lib/containerd\"
state = \"/run/containerd\"
subreaper = true
oom_score = -999
[grpc]
address = \"/run/containerd/containerd.sock\"
uid = 0
gid = 0
[plugins.\"io.containerd.grpc.v1.cri\"]
enable_selinux = true
[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]
runtime_type = \"io.containerd.runc.v2\"
[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]
SystemdCgroup = true
";

    #[test]
    fn golden_typhoon_config() {
        assert_eq!(render(Facts { selinux: true }), GOLDEN);
        assert!(render(Facts { selinux: false }).contains("enable_selinux = false\n"));
        assert_eq!(
            systemd_cgroup(GOLDEN),
            Some(true),
            "the rendered file is valid TOML"
        );
    }

    #[test]
    fn driver_from_someone_elses_file() {
        assert_eq!(
            systemd_cgroup("version = 2\n"),
            Some(false),
            "containerd's default"
        );
        assert_eq!(
            systemd_cgroup(
                "version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\nSystemdCgroup = true\n"
            ),
            Some(true)
        );
        assert_eq!(systemd_cgroup("not [toml"), None);
    }
}
