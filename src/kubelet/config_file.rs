//! The kubelet's own configuration file (a KubeletConfiguration), as Typhoon writes it, except that
//! /healthz is served on 127.0.0.1:10248 so nodeward can probe it.

use std::fmt::Write;

use crate::kubelet::settings::KubeletSettings;
use crate::types::Taint;

/// The first line of a file nodeward wrote; a file without it belongs to someone else.
pub(crate) const MARKER: &str = "# Written by nodeward from its [kubelet] configuration.";

pub(crate) const HEALTHZ_PORT: u16 = 10248;

/// Host facts the file depends on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConfigFacts {
    /// The systemd cgroup driver, as containerd is configured to use (see `containerd`).
    pub(crate) systemd_cgroup: bool,
    /// systemd-resolved's upstream resolv.conf exists (pods must not get the 127.0.0.53 stub).
    pub(crate) resolved: bool,
    /// Runs in a container with its own (mapped) user namespace, as an unprivileged LXC/LXD one:
    /// the kubelet must not expect to be the host's root (KubeletInUserNamespace, as k3s and kind
    /// set for rootless and user-namespaced nodes).
    pub(crate) user_namespaced: bool,
}

/// Renders the KubeletConfiguration. It carries what would otherwise be deprecated flags: the
/// runtime's endpoint and the taints the node registers with (one list, as the kubelet keeps it).
pub(crate) fn render(k: &KubeletSettings, taints: &[Taint], facts: ConfigFacts) -> String {
    let mut s = String::new();
    s.push_str(MARKER);
    s.push_str(
        "\n# Edits are overwritten; to manage this file yourself, set kubelet.render_config = \"never\".\n",
    );
    s.push_str(
        "apiVersion: kubelet.config.k8s.io/v1beta1\n\
         kind: KubeletConfiguration\n\
         authentication:\n  anonymous:\n    enabled: false\n  webhook:\n    enabled: true\n  \
         x509:\n    clientCAFile: /etc/kubernetes/ca.crt\n\
         authorization:\n  mode: Webhook\n",
    );
    let driver = if facts.systemd_cgroup {
        "systemd"
    } else {
        "cgroupfs"
    };
    let _ = writeln!(s, "cgroupDriver: {driver}");
    s.push_str("clusterDNS:\n");
    for ip in &k.cluster_dns {
        let _ = writeln!(s, "  - {ip}");
    }
    let _ = writeln!(s, "clusterDomain: {}", k.cluster_domain);
    let _ = writeln!(
        s,
        "containerRuntimeEndpoint: unix://{}",
        crate::kubelet::spec::RUNTIME_SOCKET
    );
    if k.healthz {
        let _ = writeln!(s, "healthzBindAddress: 127.0.0.1\nhealthzPort: {HEALTHZ_PORT}");
    } else {
        s.push_str("healthzPort: 0\n");
    }
    s.push_str("rotateCertificates: true\nserializeImagePulls: false\n");
    // Typhoon: 45 s, of which critical pods get the last 30 (two thirds). logind's inhibitor delay
    // (the hostfiles step) is rendered from the same setting.
    let grace = k.tuning.stop_grace.as_secs();
    let _ = writeln!(
        s,
        "shutdownGracePeriod: {grace}s\nshutdownGracePeriodCriticalPods: {}s",
        grace * 2 / 3
    );
    s.push_str("staticPodPath: /etc/kubernetes/manifests\nreadOnlyPort: 0\n");
    if !taints.is_empty() {
        s.push_str("registerWithTaints:\n");
        for t in taints {
            let _ = writeln!(s, "  - key: {}", t.key());
            if !t.value().is_empty() {
                let _ = writeln!(s, "    value: \"{}\"", t.value());
            }
            let _ = writeln!(s, "    effect: {}", t.effect());
        }
    }
    let resolv = if facts.resolved {
        "/run/systemd/resolve/resolv.conf"
    } else {
        "/etc/resolv.conf"
    };
    let _ = writeln!(s, "resolvConf: {resolv}");
    s.push_str("volumePluginDir: /var/lib/kubelet/volumeplugins\n");
    if facts.user_namespaced {
        // Errors the kubelet cannot avoid there (sysctls, oom_score_adj) become warnings.
        s.push_str("featureGates:\n  KubeletInUserNamespace: true\n");
    }
    s
}

/// nodeward's drop-in in `kubelet.config_dir`: late in the order, so it wins over earlier ones.
pub(crate) const HEALTHZ_DROPIN: &str = "90-nodeward-healthz.conf";

/// The drop-in that turns /healthz on (loopback only) for a KubeletConfiguration that turns it off.
/// The kubelet merges `--config-dir` files over `--config` (1.30+: beta and on by default; GA 1.35).
pub(crate) fn render_healthz_dropin() -> String {
    format!(
        "# Written by nodeward: /healthz for its supervision, over a kubelet configuration that\n\
         # disables it (kubelet.healthz = false to supervise exits only).\n\
         apiVersion: kubelet.config.k8s.io/v1beta1\n\
         kind: KubeletConfiguration\n\
         healthzBindAddress: 127.0.0.1\n\
         healthzPort: {HEALTHZ_PORT}\n"
    )
}

/// Whether a file was written by nodeward.
pub(crate) fn is_ours(text: &str) -> bool {
    text.starts_with(MARKER)
}

/// The healthz endpoint a KubeletConfiguration enables, read from its top-level keys (the kubelet's
/// defaults: port 10248 on 127.0.0.1; 0 disables it). Only `host:port` for plain loopback probes.
pub(crate) fn healthz_endpoint(text: &str) -> Option<(String, u16)> {
    let mut port: u16 = HEALTHZ_PORT;
    let mut host = "127.0.0.1".to_owned();
    for line in text.lines() {
        if line.starts_with([' ', '\t', '#']) {
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value
            .split('#')
            .next()
            .unwrap_or("")
            .trim()
            .trim_matches(['"', '\'']);
        match key.trim() {
            "healthzPort" => port = value.parse().ok()?,
            "healthzBindAddress" => host = value.to_owned(),
            _ => {}
        }
    }
    if port == 0 {
        return None;
    }
    // 0.0.0.0 / :: listen everywhere, including loopback.
    if host == "0.0.0.0" || host.is_empty() {
        host = "127.0.0.1".into();
    } else if host == "::" {
        host = "::1".into();
    }
    Some((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::settings::input::KubeletInput;

    fn settings(k: KubeletInput) -> KubeletSettings {
        KubeletSettings::from_input(k, true).expect("valid [kubelet]")
    }

    /// Typhoon's Fedora CoreOS kubelet.yaml with cluster values filled in, changed only where this
    /// agent needs it: healthz on 127.0.0.1:10248 (Typhoon sets healthzPort: 0) and the marker.
    const GOLDEN: &str = "\
# Written by nodeward from its [kubelet] configuration.
# Edits are overwritten; to manage this file yourself, set kubelet.render_config = \"never\".
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/ca.crt
authorization:
  mode: Webhook
cgroupDriver: systemd
clusterDNS:
  - 10.3.0.10
clusterDomain: cluster.local
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
healthzBindAddress: 127.0.0.1
healthzPort: 10248
rotateCertificates: true
serializeImagePulls: false
shutdownGracePeriod: 45s
shutdownGracePeriodCriticalPods: 30s
staticPodPath: /etc/kubernetes/manifests
readOnlyPort: 0
resolvConf: /run/systemd/resolve/resolv.conf
volumePluginDir: /var/lib/kubelet/volumeplugins
";

    #[test]
    fn the_healthz_dropin_turns_on_what_typhoons_file_turns_off() {
        let typhoon = "kind: KubeletConfiguration\nhealthzPort: 0\nreadOnlyPort: 0\n";
        assert_eq!(healthz_endpoint(typhoon), None);
        let dropin = render_healthz_dropin();
        assert_eq!(
            dropin,
            "# Written by nodeward: /healthz for its supervision, over a kubelet configuration that\n\
             # disables it (kubelet.healthz = false to supervise exits only).\n\
             apiVersion: kubelet.config.k8s.io/v1beta1\n\
             kind: KubeletConfiguration\n\
             healthzBindAddress: 127.0.0.1\n\
             healthzPort: 10248\n"
        );
        assert_eq!(healthz_endpoint(&dropin), Some(("127.0.0.1".into(), 10248)));
    }

    #[test]
    fn golden_fedora_coreos_defaults() {
        let text = render(
            &settings(KubeletInput::default()),
            &[],
            ConfigFacts {
                systemd_cgroup: true,
                resolved: true,
                user_namespaced: false,
            },
        );
        assert_eq!(text, GOLDEN);
        assert!(is_ours(&text));
        assert_eq!(healthz_endpoint(&text), Some(("127.0.0.1".into(), 10248)));
    }

    #[test]
    fn cgroupfs_resolv_conf_dual_stack_dns_no_healthz_and_a_user_namespace() {
        let k = KubeletInput {
            cluster_dns: vec!["10.96.0.10".parse().expect("ip"), "fd00::a".parse().expect("ip")],
            cluster_domain: "k8s.example".into(),
            healthz: false,
            ..KubeletInput::default()
        };
        let k = settings(k);
        let taints: Vec<Taint> = [
            "node-role.kubernetes.io/controller=:NoSchedule",
            "example.com/dedicated=infra:NoExecute",
        ]
        .iter()
        .map(|t| t.parse().expect("taint"))
        .collect();
        let text = render(
            &k,
            &taints,
            ConfigFacts {
                systemd_cgroup: false,
                resolved: false,
                user_namespaced: true,
            },
        );
        for want in [
            "featureGates:\n  KubeletInUserNamespace: true\n",
            "cgroupDriver: cgroupfs\n",
            "clusterDNS:\n  - 10.96.0.10\n  - fd00::a\n",
            "clusterDomain: k8s.example\n",
            "healthzPort: 0\n",
            "resolvConf: /etc/resolv.conf\n",
            "registerWithTaints:\n  - key: node-role.kubernetes.io/controller\n    effect: NoSchedule\n  \
             - key: example.com/dedicated\n    value: \"infra\"\n    effect: NoExecute\n",
        ] {
            assert!(text.contains(want), "{want:?} missing from\n{text}");
        }
        assert!(!text.contains("healthzBindAddress"));
        assert_eq!(healthz_endpoint(&text), None);
    }

    #[test]
    fn healthz_of_files_written_by_others() {
        // Typhoon's own file disables healthz.
        assert_eq!(
            healthz_endpoint("kind: KubeletConfiguration\nhealthzPort: 0\n"),
            None
        );
        // The kubelet's defaults apply when the keys are absent.
        assert_eq!(
            healthz_endpoint("kind: KubeletConfiguration\n"),
            Some(("127.0.0.1".into(), 10248))
        );
        assert_eq!(
            healthz_endpoint("healthzBindAddress: \"0.0.0.0\"\nhealthzPort: 10256 # comment\n"),
            Some(("127.0.0.1".into(), 10256))
        );
        // Nested keys with the same name are not top-level settings.
        assert_eq!(
            healthz_endpoint("x:\n  healthzPort: 0\n"),
            Some(("127.0.0.1".into(), 10248))
        );
        assert!(!is_ours("apiVersion: kubelet.config.k8s.io/v1beta1\n"));
    }
}
