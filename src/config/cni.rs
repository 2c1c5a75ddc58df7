//! CNI profiles: the host settings that depend on which CNI the cluster runs.
//!
//! Typhoon defaults to Cilium, offers flannel, and dropped Calico in late 2024; older clusters still
//! run Calico. The settings that differ are reverse-path filtering, the interfaces NetworkManager
//! must leave alone, flannel's MAC address policy, and the kubelet's `/var/lib/calico` mount.
//!
//! A node whose CNI is not declared (`node.cni` unset, shown as `any`) gets settings that are safe
//! under every supported CNI: rp_filter 0 (Cilium needs it, Calico and flannel accept it), the union
//! of the NetworkManager lists, and flannel's link file (it matches only `flannel*` devices).

use crate::types::Invalid;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::sysctl::{SysctlPolicy, SysctlSection, SysctlValue};

/// The CNI a node runs (`[node] cni`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Cni {
    /// Not declared: settings safe under every CNI below.
    #[default]
    Any,
    Cilium,
    Flannel,
    Calico,
    /// No CNI-specific host settings at all (a CNI nodeward does not know, or none yet).
    None,
}

impl Cni {
    pub const ALL: [Cni; 5] = [Cni::Any, Cni::Cilium, Cni::Flannel, Cni::Calico, Cni::None];

    pub fn name(self) -> &'static str {
        match self {
            Cni::Any => "any",
            Cni::Cilium => "cilium",
            Cni::Flannel => "flannel",
            Cni::Calico => "calico",
            Cni::None => "none",
        }
    }
}

impl fmt::Display for Cni {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Cni {
    fn parse_str(s: &str) -> Result<Self, String> {
        Cni::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| format!("{s:?} is not one of any, cilium, flannel, calico, none"))
    }
}

impl FromStr for Cni {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<Self, Invalid> {
        Self::parse_str(s).map_err(Invalid)
    }
}

/// Calico's interfaces: workload veths, IPIP, VXLAN (v4/v6) and WireGuard (v4/v6).
pub(crate) const CALICO_UNMANAGED: &[&str] = &[
    "interface-name:cali*",
    "interface-name:tunl*",
    "interface-name:vxlan.calico",
    "interface-name:vxlan-v6.calico",
    "interface-name:wireguard.cali",
    "interface-name:wg-v6.cali",
];

/// Cilium's interfaces: `cilium_host`/`cilium_net`/`cilium_vxlan`/`cilium_geneve`/`cilium_wg0`,
/// and the per-endpoint veths `lxc*` (with `lxc_health`), as Cilium's NetworkManager notes list.
pub(crate) const CILIUM_UNMANAGED: &[&str] = &["interface-name:cilium_*", "interface-name:lxc*"];

/// flannel's interfaces: its VXLAN device (`flannel.1`, `flannel-v6.1`, `flannel-wg`), the `cni0`
/// bridge of the bridge plugin, and the pods' host-side veths.
pub(crate) const FLANNEL_UNMANAGED: &[&str] = &[
    "interface-name:flannel*",
    "interface-name:cni0",
    "interface-name:veth*",
];

/// The NetworkManager `unmanaged-devices` specs for a profile.
pub fn unmanaged(cni: Cni) -> Vec<String> {
    let lists: &[&[&str]] = match cni {
        Cni::Any => &[CALICO_UNMANAGED, CILIUM_UNMANAGED, FLANNEL_UNMANAGED],
        Cni::Cilium => &[CILIUM_UNMANAGED],
        Cni::Flannel => &[FLANNEL_UNMANAGED],
        Cni::Calico => &[CALICO_UNMANAGED],
        Cni::None => &[],
    };
    lists
        .iter()
        .flat_map(|l| l.iter())
        .map(|s| (*s).to_owned())
        .collect()
}

/// The host's distribution, where Typhoon's configs for it differ in what nodeward lays down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distro {
    /// Flatcar Container Linux: Typhoon's Flatcar configs leave reverse-path filtering to the
    /// distribution (systemd's loose `2`); Cilium and flannel run with it.
    Flatcar,
    /// Fedora CoreOS, Debian-like hosts and anything else.
    Other,
}

impl Distro {
    /// From `/etc/os-release` text (`ID=flatcar`).
    pub fn from_os_release(text: &str) -> Distro {
        let flatcar = text.lines().any(|l| {
            l.strip_prefix("ID=")
                .is_some_and(|v| v.trim().trim_matches(['"', '\'']) == "flatcar")
        });
        if flatcar { Distro::Flatcar } else { Distro::Other }
    }
}

/// The same interfaces as interface-name globs (systemd-networkd's `[Match] Name=`).
pub fn interface_names(cni: Cni) -> Vec<String> {
    unmanaged(cni)
        .iter()
        .filter_map(|s| s.strip_prefix("interface-name:").map(str::to_owned))
        .collect()
}

/// The reverse-path filter sysctls of a profile: `(key, policy, why)`.
///
/// The kernel filters with max(all, interface), so `all = 1` makes every interface strict whatever
/// its own value: Cilium's would drop pod traffic (cilium#12217). Typhoon writes `default` and the
/// `*` glob (which includes `all`) to 0 for every CNI. Calico's Felix accepts 0 or 1 and refuses the
/// distros' loose 2, so the Calico profile keeps the strict 1 it always had. On Flatcar, Typhoon
/// writes nothing: the Cilium and flannel profiles keep the distribution's loose 2 there (Cilium
/// turns its own devices to 0); Calico still needs 0 or 1, and `any` must serve Calico too.
pub fn rp_filter(cni: Cni, distro: Distro) -> Vec<(&'static str, SysctlPolicy, &'static str)> {
    let exact = |v: &str| SysctlPolicy::Exact(SysctlValue::new(v));
    match cni {
        Cni::Cilium | Cni::Flannel if distro == Distro::Flatcar => Vec::new(),
        Cni::Any | Cni::Cilium | Cni::Flannel => vec![
            (
                "net.ipv4.conf.default.rp_filter",
                exact("0"),
                "interfaces created later start without reverse-path filtering (Cilium needs it off)",
            ),
            (
                "net.ipv4.conf.*.rp_filter",
                exact("0"),
                "every interface and `all` off: the kernel uses max(all, interface)",
            ),
        ],
        Cni::Calico => vec![
            (
                "net.ipv4.conf.all.rp_filter",
                exact("1"),
                "Calico refuses loose reverse-path filtering (2), the distro default",
            ),
            (
                "net.ipv4.conf.default.rp_filter",
                exact("1"),
                "interfaces created later start strict too",
            ),
        ],
        Cni::None => Vec::new(),
    }
}

/// Whether flannel's `50-flannel.link` is written: its VXLAN device must keep the MAC flannel gives
/// it (systemd-udev's `MACAddressPolicy=persistent` would change it under flannel's feet).
pub(crate) fn flannel_link(cni: Cni) -> bool {
    matches!(cni, Cni::Any | Cni::Flannel)
}

/// Whether `/var/lib/calico` is created and mounted into the kubelet (Calico's node name file).
pub(crate) fn calico_state(cni: Cni) -> bool {
    matches!(cni, Cni::Any | Cni::Calico)
}

/// kube-proxy's conntrack sizing (`--conntrack-max-per-core` 32768, `--conntrack-min` 131072: the
/// larger of the two), capped at 1,048,576 entries so a large host does not reserve memory for a
/// table it will never fill (about 300 bytes an entry).
pub(crate) fn kube_proxy_conntrack_max(cpus: u64) -> u64 {
    (32_768 * cpus).clamp(131_072, 1_048_576)
}

/// The built-in sysctls for a CNI profile: `(key, policy, why)`. Kept in one table so docs/hosts.md and
/// code agree. Reverse-path filtering depends on the CNI (see `cni::rp_filter`).
pub fn defaults(cpus: u64, cni: Cni, distro: Distro) -> Vec<(&'static str, SysctlPolicy, &'static str)> {
    let exact = |v: &str| SysctlPolicy::Exact(SysctlValue::new(v));
    let min = |n: u64| SysctlPolicy::Range {
        min: Some(n),
        max: None,
    };
    let mut out = rp_filter(cni, distro);
    out.extend([
        (
            "net.bridge.bridge-nf-call-iptables",
            exact("1"),
            "bridged pod traffic must traverse iptables (Services, NetworkPolicy); needs br_netfilter",
        ),
        (
            "net.bridge.bridge-nf-call-ip6tables",
            exact("1"),
            "the same for IPv6; needs br_netfilter",
        ),
        ("net.ipv4.ip_forward", exact("1"), "nodes route pod traffic"),
        (
            "net.netfilter.nf_conntrack_max",
            min(kube_proxy_conntrack_max(cpus)),
            "what kube-proxy would set, raise only (never lower a larger host value)",
        ),
        (
            "fs.inotify.max_user_watches",
            min(524_288),
            "kubelet, runtimes and log agents watch many files",
        ),
        (
            "fs.inotify.max_user_instances",
            min(8_192),
            "one inotify instance per watcher; the 128 default runs out with many pods",
        ),
        (
            "vm.overcommit_memory",
            exact("1"),
            "kubelet protectKernelDefaults",
        ),
        (
            "vm.panic_on_oom",
            exact("0"),
            "kubelet protectKernelDefaults: the OOM killer, not a panic",
        ),
        (
            "kernel.panic",
            exact("10"),
            "kubelet protectKernelDefaults: reboot 10 s after a panic",
        ),
        (
            "kernel.panic_on_oops",
            exact("1"),
            "kubelet protectKernelDefaults",
        ),
        (
            "kernel.keys.root_maxkeys",
            exact("1000000"),
            "kubelet protectKernelDefaults (checked for equality)",
        ),
        (
            "kernel.keys.root_maxbytes",
            exact("25000000"),
            "kubelet protectKernelDefaults: 25 bytes per key",
        ),
    ]);
    out
}

/// Built-in host tuning that a node runs without: the inotify limits and the values the kubelet's
/// `protectKernelDefaults` checks (nodeward leaves that option off). Inside a container these are
/// the host's to set, so an unmet one is reported with the host's fix rather than failing the
/// step. Networking keys (conntrack, forwarding, bridge-nf) are never advisory. A configured key
/// with exactly the built-in policy counts as built in.
pub(crate) fn advisory_in_container(key: &str, policy: &SysctlPolicy) -> bool {
    !key.starts_with("net.")
        && defaults(1, Cni::Any, Distro::Other)
            .iter()
            .any(|(k, p, _)| *k == key && p == policy)
}

/// The defaults as the config section.
pub(crate) fn default_section(cpus: u64, cni: Cni, distro: Distro) -> SysctlSection {
    SysctlSection(
        defaults(cpus, cni, distro)
            .into_iter()
            .map(|(k, p, _)| {
                (
                    k.parse().unwrap_or_else(|e| panic!("built-in sysctl {k}: {e}")),
                    Some(p),
                )
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for c in Cni::ALL {
            assert_eq!(c.name().parse::<Cni>(), Ok(c));
        }
        assert!("weave".parse::<Cni>().unwrap_err().0.contains("cilium"));
    }

    #[test]
    fn any_is_the_union_and_never_strict() {
        let any = unmanaged(Cni::Any);
        for c in [Cni::Cilium, Cni::Flannel, Cni::Calico] {
            for spec in unmanaged(c) {
                assert!(any.contains(&spec), "{spec} missing from the default list");
            }
        }
        for distro in [Distro::Other, Distro::Flatcar] {
            for (key, policy, _) in rp_filter(Cni::Any, distro) {
                assert_eq!(policy, SysctlPolicy::Exact(SysctlValue::new("0")), "{key}");
            }
        }
    }

    #[test]
    fn flatcar_keeps_its_own_rp_filter_except_where_calico_needs_one() {
        let flatcar = Distro::from_os_release(
            "NAME=\"Flatcar Container Linux by Kinvolk\"\nID=flatcar\nID_LIKE=coreos\n",
        );
        assert_eq!(flatcar, Distro::Flatcar);
        assert_eq!(
            Distro::from_os_release("ID=fedora\nVARIANT_ID=coreos\n"),
            Distro::Other
        );
        assert!(rp_filter(Cni::Cilium, flatcar).is_empty());
        assert!(rp_filter(Cni::Flannel, flatcar).is_empty());
        assert_eq!(
            rp_filter(Cni::Calico, flatcar),
            rp_filter(Cni::Calico, Distro::Other)
        );
        assert_eq!(rp_filter(Cni::Cilium, Distro::Other).len(), 2);
    }

    #[test]
    fn calico_list_is_unchanged() {
        assert_eq!(unmanaged(Cni::Calico), CALICO_UNMANAGED);
    }

    #[test]
    fn kube_proxy_conntrack_value() {
        assert_eq!(kube_proxy_conntrack_max(1), 131_072);
        assert_eq!(kube_proxy_conntrack_max(4), 131_072);
        assert_eq!(kube_proxy_conntrack_max(8), 262_144);
        assert_eq!(kube_proxy_conntrack_max(32), 1_048_576);
        assert_eq!(kube_proxy_conntrack_max(128), 1_048_576);
    }

    #[test]
    fn defaults_round_trip() {
        let d = default_section(4, Cni::Any, Distro::Other);
        let text = toml::to_string(&toml::Table::from_iter([(
            "sysctl".to_owned(),
            toml::Value::try_from(&d).expect("ser"),
        )]))
        .expect("toml");
        #[derive(serde::Deserialize)]
        struct Doc {
            sysctl: SysctlSection,
        }
        assert_eq!(toml::from_str::<Doc>(&text).expect("parse").sysctl, d);
    }
}
