//! CNI profiles: the host settings that depend on which CNI the cluster runs.
//!
//! Typhoon defaults to Cilium, offers flannel, and dropped Calico in late 2024; older clusters still
//! run Calico. The settings that differ are reverse-path filtering, the interfaces NetworkManager
//! must leave alone, flannel's MAC address policy, and the kubelet's `/var/lib/calico` mount.
//!
//! A node whose CNI is not declared (`node.cni` unset, shown as `any`) gets settings that are safe
//! under every supported CNI: rp_filter 0 (Cilium needs it, Calico and flannel accept it), the union
//! of the NetworkManager lists, and flannel's link file (it matches only `flannel*` devices).

use super::sysctl::{SysctlPolicy, SysctlSection, SysctlValue};

pub(crate) use crate::types::Cni;

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

/// Reverse-path filtering a profile asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RpFilter {
    /// `default` and every interface (the `*` glob, `all` included) 0: what Cilium needs.
    Off,
    /// `all` and `default` 1: Calico refuses the distros' loose 2.
    Strict,
    /// Nothing written: the distribution's own.
    Distro,
}

/// One CNI profile: every host setting that depends on the CNI.
#[derive(Debug)]
pub(crate) struct Profile {
    pub(crate) cni: Cni,
    /// NetworkManager `unmanaged-devices` specs of the CNI's own interfaces (and, as globs,
    /// systemd-networkd's). `None`: the union of every other profile's, in table order.
    pub(crate) unmanaged: Option<&'static [&'static str]>,
    /// Reverse-path filtering on most distributions, and on Flatcar (whose Typhoon configs leave
    /// it to the distribution).
    pub(crate) rp_filter: RpFilter,
    pub(crate) rp_filter_flatcar: RpFilter,
    /// flannel's `50-flannel.link`: its VXLAN device keeps the MAC flannel gives it.
    pub(crate) flannel_link: bool,
    /// `/var/lib/calico` created and mounted into the kubelet (Calico's node name file).
    pub(crate) calico_state: bool,
}

/// The profiles (`node.cni`). `any` is the union of the others' interface lists and keeps rp_filter
/// off everywhere, Flatcar included (it must serve Calico and Cilium alike).
pub(crate) const PROFILES: [Profile; 5] = [
    Profile {
        cni: Cni::Any,
        unmanaged: None,
        rp_filter: RpFilter::Off,
        rp_filter_flatcar: RpFilter::Off,
        flannel_link: true,
        calico_state: true,
    },
    Profile {
        cni: Cni::Calico,
        unmanaged: Some(CALICO_UNMANAGED),
        rp_filter: RpFilter::Strict,
        rp_filter_flatcar: RpFilter::Strict,
        flannel_link: false,
        calico_state: true,
    },
    Profile {
        cni: Cni::Cilium,
        unmanaged: Some(CILIUM_UNMANAGED),
        rp_filter: RpFilter::Off,
        rp_filter_flatcar: RpFilter::Distro,
        flannel_link: false,
        calico_state: false,
    },
    Profile {
        cni: Cni::Flannel,
        unmanaged: Some(FLANNEL_UNMANAGED),
        rp_filter: RpFilter::Off,
        rp_filter_flatcar: RpFilter::Distro,
        flannel_link: true,
        calico_state: false,
    },
    Profile {
        cni: Cni::None,
        unmanaged: Some(&[]),
        rp_filter: RpFilter::Distro,
        rp_filter_flatcar: RpFilter::Distro,
        flannel_link: false,
        calico_state: false,
    },
];

/// The profile of `cni` (every `Cni` has its row; a test checks it).
pub(crate) fn profile(cni: Cni) -> &'static Profile {
    PROFILES.iter().find(|p| p.cni == cni).unwrap_or(&PROFILES[0])
}

/// The NetworkManager `unmanaged-devices` specs for a profile.
pub(crate) fn unmanaged(cni: Cni) -> Vec<String> {
    let own = |p: &Profile| p.unmanaged.unwrap_or(&[]).iter().map(|s| (*s).to_owned());
    match profile(cni).unmanaged {
        Some(_) => own(profile(cni)).collect(),
        None => PROFILES.iter().flat_map(own).collect(),
    }
}

/// The host's distribution, where Typhoon's configs for it differ in what nodeward lays down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Distro {
    /// Flatcar Container Linux: Typhoon's Flatcar configs leave reverse-path filtering to the
    /// distribution (systemd's loose `2`); Cilium and flannel run with it.
    Flatcar,
    /// Fedora CoreOS, Debian-like hosts and anything else.
    Other,
}

impl Distro {
    /// From `/etc/os-release` text (`ID=flatcar`).
    pub(crate) fn from_os_release(text: &str) -> Distro {
        let flatcar = text.lines().any(|l| {
            l.strip_prefix("ID=")
                .is_some_and(|v| v.trim().trim_matches(['"', '\'']) == "flatcar")
        });
        if flatcar { Distro::Flatcar } else { Distro::Other }
    }
}

/// The same interfaces as interface-name globs (systemd-networkd's `[Match] Name=`).
pub(crate) fn interface_names(cni: Cni) -> Vec<String> {
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
pub(crate) fn rp_filter(cni: Cni, distro: Distro) -> Vec<(&'static str, SysctlPolicy, &'static str)> {
    let exact = |v: &str| SysctlPolicy::Exact(SysctlValue::new(v));
    let p = profile(cni);
    let rule = if distro == Distro::Flatcar {
        p.rp_filter_flatcar
    } else {
        p.rp_filter
    };
    match rule {
        RpFilter::Distro => Vec::new(),
        RpFilter::Off => vec![
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
        RpFilter::Strict => vec![
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
    }
}

/// Whether flannel's `50-flannel.link` is written: its VXLAN device must keep the MAC flannel gives
/// it (systemd-udev's `MACAddressPolicy=persistent` would change it under flannel's feet).
pub(crate) fn flannel_link(cni: Cni) -> bool {
    profile(cni).flannel_link
}

/// Whether `/var/lib/calico` is created and mounted into the kubelet (Calico's node name file).
pub(crate) fn calico_state(cni: Cni) -> bool {
    profile(cni).calico_state
}

/// kube-proxy's conntrack sizing (`--conntrack-max-per-core` 32768, `--conntrack-min` 131072: the
/// larger of the two), capped at 1,048,576 entries so a large host does not reserve memory for a
/// table it will never fill (about 300 bytes an entry).
pub(crate) fn kube_proxy_conntrack_max(cpus: u64) -> u64 {
    (32_768 * cpus).clamp(131_072, 1_048_576)
}

/// A built-in sysctl's policy, as data.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Builtin {
    Exact(&'static str),
    AtLeast(u64),
    /// kube-proxy's conntrack sizing for this host's CPUs, raise only.
    ConntrackMax,
}

/// The sysctls every node gets whatever its CNI: `(key, policy, why)`.
pub(crate) const HOST_SYSCTLS: &[(&str, Builtin, &str)] = &[
    (
        "net.bridge.bridge-nf-call-iptables",
        Builtin::Exact("1"),
        "bridged pod traffic must traverse iptables (Services, NetworkPolicy); needs br_netfilter",
    ),
    (
        "net.bridge.bridge-nf-call-ip6tables",
        Builtin::Exact("1"),
        "the same for IPv6; needs br_netfilter",
    ),
    (
        "net.ipv4.ip_forward",
        Builtin::Exact("1"),
        "nodes route pod traffic",
    ),
    (
        "net.netfilter.nf_conntrack_max",
        Builtin::ConntrackMax,
        "what kube-proxy would set, raise only (never lower a larger host value)",
    ),
    (
        "fs.inotify.max_user_watches",
        Builtin::AtLeast(524_288),
        "kubelet, runtimes and log agents watch many files",
    ),
    (
        "fs.inotify.max_user_instances",
        Builtin::AtLeast(8_192),
        "one inotify instance per watcher; the 128 default runs out with many pods",
    ),
    (
        "vm.overcommit_memory",
        Builtin::Exact("1"),
        "kubelet protectKernelDefaults",
    ),
    (
        "vm.panic_on_oom",
        Builtin::Exact("0"),
        "kubelet protectKernelDefaults: the OOM killer, not a panic",
    ),
    (
        "kernel.panic",
        Builtin::Exact("10"),
        "kubelet protectKernelDefaults: reboot 10 s after a panic",
    ),
    (
        "kernel.panic_on_oops",
        Builtin::Exact("1"),
        "kubelet protectKernelDefaults",
    ),
    (
        "kernel.keys.root_maxkeys",
        Builtin::Exact("1000000"),
        "kubelet protectKernelDefaults (checked for equality)",
    ),
    (
        "kernel.keys.root_maxbytes",
        Builtin::Exact("25000000"),
        "kubelet protectKernelDefaults: 25 bytes per key",
    ),
];

/// The built-in sysctls for a CNI profile: `(key, policy, why)`: the profile's reverse-path
/// filtering (see [`rp_filter`]), then [`HOST_SYSCTLS`].
pub(crate) fn defaults(
    cpus: u64,
    cni: Cni,
    distro: Distro,
) -> Vec<(&'static str, SysctlPolicy, &'static str)> {
    let mut out = rp_filter(cni, distro);
    out.extend(HOST_SYSCTLS.iter().map(|(key, builtin, why)| {
        let policy = match builtin {
            Builtin::Exact(v) => SysctlPolicy::Exact(SysctlValue::new(v)),
            Builtin::AtLeast(n) => SysctlPolicy::Range {
                min: Some(*n),
                max: None,
            },
            Builtin::ConntrackMax => SysctlPolicy::Range {
                min: Some(kube_proxy_conntrack_max(cpus)),
                max: None,
            },
        };
        (*key, policy, *why)
    }));
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
            // Every built-in key parses (a unit test checks each one).
            .filter_map(|(k, p, _)| Some((k.parse().ok()?, Some(p))))
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
        // One profile per CNI, in the names' order.
        let table: Vec<Cni> = PROFILES.iter().map(|p| p.cni).collect();
        assert_eq!(table, Cni::ALL.to_vec());
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
    fn every_cni_has_one_row_and_every_built_in_key_parses() {
        for c in Cni::ALL {
            assert_eq!(PROFILES.iter().filter(|p| p.cni == c).count(), 1, "{c}");
            assert_eq!(profile(c).cni, c);
        }
        for cni in Cni::ALL {
            for distro in [Distro::Other, Distro::Flatcar] {
                let all = defaults(4, cni, distro);
                for (k, _, _) in &all {
                    assert!(k.parse::<super::super::sysctl::SysctlKey>().is_ok(), "{k}");
                }
                assert_eq!(default_section(4, cni, distro).0.len(), all.len());
            }
        }
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

    /// The docs' row for a profile, rendered from the table.
    fn doc_row(p: &Profile) -> String {
        let rp = |r: RpFilter| match r {
            RpFilter::Off => "`default` = 0, `*` = 0",
            RpFilter::Strict => "`all` = 1, `default` = 1",
            RpFilter::Distro => "not managed",
        };
        let mut rp_cell = rp(p.rp_filter).to_owned();
        if p.rp_filter_flatcar != p.rp_filter {
            rp_cell.push_str(&format!(
                " (Flatcar: {})",
                match p.rp_filter_flatcar {
                    RpFilter::Distro => "the distribution's",
                    other => rp(other),
                }
            ));
        }
        let unmanaged = match p.unmanaged {
            None => "the union of the others".to_owned(),
            Some([]) => "nothing (no drop-in)".to_owned(),
            Some(list) => list
                .iter()
                .map(|s| format!("`{}`", s.trim_start_matches("interface-name:")))
                .collect::<Vec<_>>()
                .join(", "),
        };
        let yes = |b: bool| if b { "yes" } else { "no" };
        format!(
            "| `{}` | {rp_cell} | {unmanaged} | {} | {} |",
            p.cni.name(),
            yes(p.flannel_link),
            yes(p.calico_state)
        )
    }

    /// The docs' row for a built-in host sysctl, rendered from the table.
    fn sysctl_row((key, builtin, why): &(&str, Builtin, &str)) -> String {
        let policy = match builtin {
            Builtin::Exact(v) => format!("= {v}"),
            Builtin::AtLeast(n) => format!("≥ {n}"),
            Builtin::ConntrackMax => "≥ max(131072, 32768 × CPUs), at most 1048576".to_owned(),
        };
        format!("| `{key}` | {policy} | {why} |")
    }

    #[test]
    fn the_docs_tables_are_the_code_tables() {
        let hosts = include_str!("../../docs/hosts.md");
        for p in &PROFILES {
            let row = doc_row(p);
            assert!(
                hosts.lines().any(|l| l == row),
                "docs/hosts.md lacks the row\n{row}"
            );
        }
        let node = include_str!("../../docs/node.md");
        for entry in HOST_SYSCTLS {
            let row = sysctl_row(entry);
            assert!(
                node.lines().any(|l| l == row),
                "docs/node.md lacks the row\n{row}"
            );
        }
        // A planted difference is caught: the row of a profile that links flannel's file, said not to.
        let planted = hosts.replace(
            &doc_row(&PROFILES[0]),
            &doc_row(&PROFILES[0]).replace("| yes | yes |", "| no | yes |"),
        );
        assert!(!planted.lines().any(|l| l == doc_row(&PROFILES[0])));
    }
}
