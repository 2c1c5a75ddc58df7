//! Checks of the running node: cgroups, swap, the networking sysctls and whether they survive a
//! reboot, SELinux labels, the kubelet's ports, the clock, a container host's needs, the CNI.

use super::model::{Check, Outcome};
use super::observe::Observation;
use crate::config::Settings;
use crate::config::sysctl::{SysctlPolicy, SysctlValue};

const NOT_LIVE: &str = "not the running system (--root without --kernel live)";

/// What the kubelet needs delegated (hugetlb only for huge pages: a warning).
const CGROUP_CONTROLLERS: [&str; 5] = ["cpu", "cpuset", "io", "memory", "pids"];
const CGROUP_V1_CONTROLLERS: [&str; 5] = ["cpu", "cpuset", "blkio", "memory", "pids"];

pub(crate) const CGROUPS: Check = Check {
    name: "cgroups",
    why: "the kubelet enforces pod limits through these controllers; cgroup v1 is in maintenance since 1.31",
    decide: cgroups,
};

fn cgroups(obs: &Observation, _: &Settings) -> Outcome {
    let (v2, controllers) = match &obs.cgroup {
        Ok(c) => c,
        Err(why) => return Outcome::skipped(why.clone()),
    };
    let wanted: &[&str] = if *v2 {
        &CGROUP_CONTROLLERS
    } else {
        &CGROUP_V1_CONTROLLERS
    };
    let missing: Vec<&str> = wanted
        .iter()
        .copied()
        .filter(|c| !controllers.contains(*c))
        .collect();
    let version = if *v2 { "v2" } else { "v1" };
    let expected = format!("cgroup v2 with {}", CGROUP_CONTROLLERS.join(", "));
    if !missing.is_empty() {
        return Outcome::fail(
            format!("cgroup {version} without {}", missing.join(", ")),
            expected,
            if obs.container.is_some() {
                "delegate them to the container (LXC: lxc.mount.auto = cgroup:rw; its host's cgroup2 hierarchy)"
            } else {
                "enable them on the kernel command line (cgroup_enable=…), or a kernel built with them"
            },
        );
    }
    if !*v2 {
        return Outcome::warn(
            "cgroup v1",
            expected,
            "boot with systemd.unified_cgroup_hierarchy=1 (the default on Fedora CoreOS and Flatcar)",
        );
    }
    let hugetlb = if controllers.contains("hugetlb") {
        ""
    } else {
        " (no hugetlb: no huge pages for pods)"
    };
    Outcome::pass(
        format!("cgroup v2 with {}{hugetlb}", CGROUP_CONTROLLERS.join(", ")),
        expected,
    )
}

pub(crate) const SWAP: Check = Check {
    name: "swap",
    why: "the kubelet refuses to start with swap on (failSwapOn) unless configured for it",
    decide: swap,
};

fn swap(obs: &Observation, _: &Settings) -> Outcome {
    match &obs.swaps {
        Err(why) => Outcome::skipped(why.clone()),
        Ok(s) if s.is_empty() => Outcome::pass("off", "off"),
        Ok(s) => Outcome::fail(
            format!("on: {}", s.join(", ")),
            "off",
            "swapoff -a and remove it from /etc/fstab (and zram-generator's config on Fedora)",
        ),
    }
}

pub(crate) const SYSCTLS: Check = Check {
    name: "network-sysctls",
    why: "without forwarding, bridge-nf and conntrack room, Services break far from the cause",
    decide: sysctls,
};

fn sysctls(obs: &Observation, settings: &Settings) -> Outcome {
    if !obs.live {
        return Outcome::skipped(NOT_LIVE);
    }
    if obs.sysctls.is_empty() {
        return Outcome::skipped("no networking sysctls configured (sysctl)");
    }
    let mut wrong = Vec::new();
    let mut transient = Vec::new();
    for seen in &obs.sysctls {
        let policy = settings
            .sysctls
            .iter()
            .find(|(k, _)| k.to_string() == seen.key)
            .map(|(_, p)| p);
        let ok = match (&seen.current, policy) {
            (Some(now), Some(SysctlPolicy::Exact(v))) => SysctlValue::new(now) == *v,
            (Some(now), Some(SysctlPolicy::Range { min, max })) => now
                .trim()
                .parse::<u64>()
                .is_ok_and(|n| min.is_none_or(|lo| n >= lo) && max.is_none_or(|hi| n <= hi)),
            _ => false,
        };
        match (&seen.current, policy) {
            (None, _) => wrong.push(format!("{}: absent (its module is not loaded)", seen.key)),
            (Some(now), Some(p)) if !ok => wrong.push(format!("{} = {now}, wanted {p}", seen.key)),
            _ if !seen.persisted => transient.push(seen.key.clone()),
            _ => {}
        }
    }
    let expected = "the configured values, set again at every boot".to_owned();
    if !wrong.is_empty() {
        Outcome::fail(
            wrong.join("; "),
            expected,
            "nodeward apply --only modules,sysctl (nodeward sets them; in a container, see its plan for the host's part)",
        )
    } else if !transient.is_empty() {
        Outcome::warn(
            format!("until the next reboot only: {}", transient.join(", ")),
            expected,
            "enable nodeward.service (its boot-time converge sets them), or list them in /etc/sysctl.d",
        )
    } else {
        Outcome::pass(
            format!("{} key(s) as configured, persisted", obs.sysctls.len()),
            expected,
        )
    }
}

pub(crate) const SELINUX: Check = Check {
    name: "selinux-labels",
    why: "with the wrong type on the kubelet's trees, secrets and volumes \"simply do not work\" in pods",
    decide: selinux,
};

fn selinux(obs: &Observation, settings: &Settings) -> Outcome {
    let Some(labels) = &obs.selinux else {
        return Outcome::skipped("SELinux labelling is off (not enabled, or selinux.labels = \"never\")");
    };
    let want = settings.selinux.context.to_string();
    let mode = match obs.selinux_enforcing {
        Some(true) => " (enforcing)",
        Some(false) => " (permissive)",
        None => "",
    };
    let wrong: Vec<String> = labels
        .iter()
        .filter(|(_, l)| l.as_deref() != Some(want.as_str()))
        .map(|(p, l)| format!("{p} is {}", l.as_deref().unwrap_or("(unlabelled)")))
        .collect();
    if wrong.is_empty() {
        Outcome::pass(format!("{} tree(s) labelled {want}{mode}", labels.len()), want)
    } else {
        Outcome::fail(
            format!("{}{mode}", wrong.join("; ")),
            want,
            "nodeward apply --only selinux (nodeward relabels them)",
        )
    }
}

pub(crate) const PORTS: Check = Check {
    name: "ports",
    why: "the kubelet serves its API on 10250 and its health on 10248: someone else there stops it",
    decide: ports,
};

fn ports(obs: &Observation, _: &Settings) -> Outcome {
    let listeners = match &obs.listeners {
        Ok(l) => l,
        Err(why) => return Outcome::skipped(why.clone()),
    };
    let expected = "10250 and 10248 free, or the kubelet's";
    let taken: Vec<String> = listeners
        .iter()
        .filter(|l| l.owner.as_deref() != Some("kubelet"))
        .map(|l| {
            format!(
                "{} held by {}",
                l.port,
                l.owner.as_deref().unwrap_or("an unknown process")
            )
        })
        .collect();
    if taken.is_empty() {
        let held = if listeners.is_empty() {
            "free"
        } else {
            "the kubelet's"
        };
        Outcome::pass(held, expected)
    } else {
        Outcome::fail(taken.join("; "), expected, "stop what listens there (ss -ltnp)")
    }
}

pub(crate) const TIME_SYNC: Check = Check {
    name: "time-sync",
    why: "certificates and tokens are checked against the clock: a drifting node is refused",
    decide: time_sync,
};

fn time_sync(obs: &Observation, _: &Settings) -> Outcome {
    match obs.clock_synced {
        Err(ref why) => Outcome::skipped(why.clone()),
        Ok(true) => Outcome::pass("synchronised", "synchronised"),
        Ok(false) => Outcome::warn(
            "not synchronised",
            "synchronised",
            "run chronyd or systemd-timesyncd with a reachable time source",
        ),
    }
}

pub(crate) const CONTAINER_HOST: Check = Check {
    name: "container-host",
    why: "in a container the kubelet needs a shared / and /dev/kmsg, which LXC does not give",
    decide: container_host,
};

fn container_host(obs: &Observation, _: &Settings) -> Outcome {
    let Some(c) = &obs.container else {
        return Outcome::skipped("not in a container");
    };
    let mut problems = Vec::new();
    match &obs.root_propagation {
        Ok(p) if p == "shared" => {}
        Ok(p) => problems.push(format!("/ is {p}")),
        Err(why) => problems.push(why.to_string()),
    }
    if !obs.kmsg {
        problems.push("no /dev/kmsg".into());
    }
    let expected = "/ shared, /dev/kmsg present";
    if problems.is_empty() {
        Outcome::pass(
            format!("{}: / shared, /dev/kmsg present", c.kind.name()),
            expected,
        )
    } else {
        Outcome::fail(
            format!("{}: {}", c.kind.name(), problems.join(", ")),
            expected,
            "nodeward apply --only container (nodeward makes / shared and links /dev/kmsg)",
        )
    }
}

pub(crate) const KUBE_PROXY_CONNTRACK: Check = Check {
    name: "conntrack-max",
    why: "kube-proxy raises nf_conntrack_max at start and exits when it cannot: in a container \
          (LXC, LXD) the key is the host's, read-only here",
    decide: kube_proxy_conntrack,
};

fn kube_proxy_conntrack(obs: &Observation, _: &Settings) -> Outcome {
    let (Some(c), Some(writable)) = (&obs.container, &obs.conntrack_writable) else {
        return Outcome::skipped("not in a container");
    };
    let expected = "nf_conntrack_max writable, or kube-proxy told not to write it";
    match writable {
        Err(why) => Outcome::skipped(why.to_string()),
        Ok(true) => Outcome::pass(format!("{}: nf_conntrack_max writable", c.kind.name()), expected),
        Ok(false) => Outcome::warn(
            format!(
                "{}: net.netfilter.nf_conntrack_max is read-only here",
                c.kind.name()
            ),
            expected,
            "set kube-proxy's `conntrack.maxPerCore: 0` (KubeProxyConfiguration; flag \
             --conntrack-max-per-core=0) so it leaves the limit alone, and raise it on the host",
        ),
    }
}

pub(crate) const CNI: Check = Check {
    name: "cni",
    why: "pods need the CNI's loopback plugin and a network configuration, once the CNI is up",
    decide: cni,
};

fn cni(obs: &Observation, _: &Settings) -> Outcome {
    let expected = "/opt/cni/bin/loopback and a configuration in /etc/cni/net.d";
    let (loopback, configs) = (&obs.cni.0, &obs.cni.1);
    // podman's own bridge network (Debian's podman ships it): the kubelet would take it as the
    // pod network, the first file by name winning.
    let podman = configs.iter().find(|c| c.contains("podman"));
    match (loopback, configs.is_empty()) {
        (true, false) if podman.is_none() => {
            Outcome::pass(format!("loopback, {}", configs.join(", ")), expected)
        }
        // Nothing yet: the CNI's daemonset installs both when it first runs here.
        (false, true) => {
            Outcome::skipped("the CNI has not run on this node yet (no plugin, no configuration)")
        }
        (true, true) => Outcome::warn(
            "the loopback plugin but no configuration",
            expected,
            "normal until the CNI's daemonset has run on this node; otherwise check the CNI's pods",
        ),
        // The trap: pods appear to work until one needs `lo`, or run on podman's bridge.
        _ => {
            let mut seen = Vec::new();
            if let Some(p) = podman {
                seen.push(format!("{p} (podman's own network, not a pod network)"));
            }
            if !loopback {
                seen.push(format!("{} but no loopback plugin", configs.join(", ")));
            }
            let fix = match podman {
                Some(p) => format!("remove /etc/cni/net.d/{p} (podman does not need it with netavark)"),
                None => "install the CNI plugins (containernetworking-plugins) in /opt/cni/bin".to_owned(),
            };
            Outcome::fail(seen.join("; "), expected, fix)
        }
    }
}

pub(crate) const CRI: Check = Check {
    name: "cri",
    why: "the kubelet talks to its container runtime over this socket; without it no pod starts",
    decide: cri,
};

fn cri(obs: &Observation, _: &Settings) -> Outcome {
    let expected = format!("{} accepting connections", super::observe::CRI_SOCKET);
    match &obs.cri {
        None => {
            Outcome::skipped("nodeward runs no kubelet here (kubelet.enabled = false, or no kubelet.image)")
        }
        Some(Ok(())) => Outcome::pass("accepting connections", expected),
        Some(Err(why)) if !obs.live => Outcome::skipped(why.clone()),
        Some(Err(why)) => Outcome::fail(
            why.clone(),
            expected,
            "enable and start the runtime (systemctl enable --now containerd)",
        ),
    }
}

pub(crate) const CGROUP_DRIVER: Check = Check {
    name: "cgroup-driver",
    why: "a kubelet and runtime on different cgroup drivers fight over the pods' cgroups",
    decide: cgroup_driver,
};

fn cgroup_driver(obs: &Observation, _: &Settings) -> Outcome {
    match &obs.cgroup_drivers {
        None => Outcome::skipped("the kubelet's configuration or containerd's is not there yet"),
        Some((kubelet, runtime)) if kubelet == runtime => {
            Outcome::pass(format!("both {kubelet}"), "the same driver in both")
        }
        Some((kubelet, runtime)) => Outcome::fail(
            format!("kubelet {kubelet}, containerd {runtime}"),
            "the same driver in both",
            "nodeward apply --only kubelet (nodeward renders the kubelet's from containerd's), or \
             [containerd] manage = true",
        ),
    }
}

pub(crate) const KUBELET: Check = Check {
    name: "kubelet",
    why: "the node's own kubelet: its image present and the container answering its health endpoint",
    decide: kubelet,
};

fn kubelet(obs: &Observation, _: &Settings) -> Outcome {
    use crate::kubelet::status::KubeletState;
    let expected = "running from its image, healthy";
    match &obs.kubelet {
        None => {
            Outcome::skipped("nodeward runs no kubelet here (kubelet.enabled = false, or no kubelet.image)")
        }
        Some(Err(why)) => Outcome::skipped(why.clone()),
        Some(Ok(k)) if k.state == KubeletState::Running && k.health == "healthy" => Outcome::pass(
            format!("running, healthy, image {}", k.image.as_deref().unwrap_or("?")),
            expected,
        ),
        Some(Ok(k)) if k.state == KubeletState::Running || k.state == KubeletState::Starting => {
            Outcome::warn(
                format!("{}: {}", k.state, k.health),
                expected,
                "give it its startup grace; otherwise see `nodeward status` and the kubelet's logs",
            )
        }
        Some(Ok(k)) => Outcome::fail(
            format!(
                "{}{}",
                k.state,
                k.error.as_deref().map(|e| format!(": {e}")).unwrap_or_default()
            ),
            expected,
            "see `nodeward status` (image pull, mounts) and `journalctl -u nodeward`",
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::super::model::Status;
    use super::super::observe::tests::{observation, settings};
    use super::super::observe::{Listener, SysctlSeen};
    use super::*;

    #[test]
    fn cgroup_versions_and_controllers() {
        let s = settings();
        let mut o = observation();
        assert_eq!(cgroups(&o, &s).status, Status::Pass);
        o.cgroup = Ok((true, BTreeSet::from(["cpu".into(), "memory".into()])));
        let out = cgroups(&o, &s);
        assert_eq!(out.status, Status::Fail);
        assert_eq!(out.observed, "cgroup v2 without cpuset, io, pids");
        o.cgroup = Ok((
            false,
            CGROUP_V1_CONTROLLERS.iter().map(|c| c.to_string()).collect(),
        ));
        assert_eq!(cgroups(&o, &s).status, Status::Warn);
    }

    #[test]
    fn swap_on_fails() {
        let s = settings();
        let mut o = observation();
        assert_eq!(swap(&o, &s).status, Status::Pass);
        o.swaps = Ok(vec!["/swapfile".into()]);
        let out = swap(&o, &s);
        assert_eq!(
            (out.status, out.observed.as_str()),
            (Status::Fail, "on: /swapfile")
        );
    }

    #[test]
    fn sysctls_wrong_now_or_only_until_reboot() {
        let s = settings();
        let mut o = observation();
        o.sysctls = vec![SysctlSeen {
            key: "net.ipv4.ip_forward".into(),
            current: Some("1".into()),
            persisted: true,
        }];
        assert_eq!(sysctls(&o, &s).status, Status::Pass);
        o.sysctls[0].persisted = false;
        assert_eq!(sysctls(&o, &s).status, Status::Warn);
        o.sysctls[0].current = Some("0".into());
        let out = sysctls(&o, &s);
        assert_eq!(out.status, Status::Fail);
        assert_eq!(out.observed, "net.ipv4.ip_forward = 0, wanted = 1");
        o.sysctls[0].current = None;
        assert!(sysctls(&o, &s).observed.contains("absent"));
    }

    #[test]
    fn selinux_labels() {
        let s = settings();
        let mut o = observation();
        assert_eq!(selinux(&o, &s).status, Status::Skipped);
        let want = s.selinux.context.to_string();
        o.selinux = Some(vec![("/var/lib/kubelet".into(), Some(want.clone()))]);
        assert_eq!(selinux(&o, &s).status, Status::Pass);
        o.selinux = Some(vec![(
            "/var/lib/kubelet".into(),
            Some("system_u:object_r:var_lib_t:s0".into()),
        )]);
        let out = selinux(&o, &s);
        assert_eq!(out.status, Status::Fail);
        assert_eq!(out.observed, "/var/lib/kubelet is system_u:object_r:var_lib_t:s0");
        assert!(out.fix.contains("--only selinux"));
    }

    #[test]
    fn ports_free_or_the_kubelets() {
        let s = settings();
        let mut o = observation();
        assert_eq!(ports(&o, &s).status, Status::Pass);
        o.listeners = Ok(vec![Listener {
            port: 10250,
            owner: Some("kubelet".into()),
        }]);
        assert_eq!(ports(&o, &s).status, Status::Pass);
        o.listeners = Ok(vec![Listener {
            port: 10248,
            owner: Some("nginx".into()),
        }]);
        assert_eq!(ports(&o, &s).observed, "10248 held by nginx");
    }

    /// An LXC container's view, through the real observation: the key the kernel makes 0444
    /// outside the initial network namespace; the same key writable is the control.
    #[test]
    fn kube_proxy_in_lxc_is_told_to_leave_conntrack_alone() {
        let f = crate::steps::context::fixture::Fixture::new();
        let marker = f.host.path().join("run/systemd/container");
        std::fs::create_dir_all(marker.parent().expect("parent")).expect("mkdir");
        std::fs::write(&marker, "lxc\n").expect("write");
        let key = "proc/sys/net/netfilter/nf_conntrack_max";
        f.kernel_file(key, "262144", 0o444);
        let ctx = f.context();
        let out = kube_proxy_conntrack(&Observation::gather(&ctx), &f.settings);
        assert_eq!(out.status, Status::Warn, "{out:?}");
        assert_eq!(
            out.observed,
            "lxc: net.netfilter.nf_conntrack_max is read-only here"
        );
        assert!(out.fix.contains("conntrack.maxPerCore: 0"), "{}", out.fix);
        f.kernel_file(key, "262144", 0o644);
        let out = kube_proxy_conntrack(&Observation::gather(&ctx), &f.settings);
        assert_eq!(out.status, Status::Pass, "{out:?}");
        std::fs::remove_file(&marker).expect("rm");
        let ctx = f.context();
        let out = kube_proxy_conntrack(&Observation::gather(&ctx), &f.settings);
        assert_eq!(out.status, Status::Skipped, "not in a container: {out:?}");
    }

    #[test]
    fn clock_container_and_cni() {
        let s = settings();
        let mut o = observation();
        o.clock_synced = Ok(false);
        assert_eq!(time_sync(&o, &s).status, Status::Warn);
        assert_eq!(container_host(&o, &s).status, Status::Skipped);
        o.container = Some(crate::host::container::Container {
            kind: crate::host::container::Kind::Lxc,
            privileged: true,
            user_namespace: crate::host::container::UserNamespace::Initial,
            evidence: "/run/systemd/container".into(),
        });
        o.root_propagation = Ok("private".into());
        o.kmsg = false;
        let out = container_host(&o, &s);
        assert_eq!(out.observed, "lxc: / is private, no /dev/kmsg");
        assert_eq!(out.status, Status::Fail);
        assert_eq!(cni(&o, &s).status, Status::Pass);
        o.cni = (false, vec![]);
        assert_eq!(cni(&o, &s).status, Status::Skipped);
        o.cni = (true, vec![]);
        assert_eq!(cni(&o, &s).status, Status::Warn);
        o.cni = (false, vec!["10-flannel.conflist".into()]);
        let out = cni(&o, &s);
        assert_eq!(
            (out.status, out.observed.as_str()),
            (Status::Fail, "10-flannel.conflist but no loopback plugin")
        );
        o.cni = (true, vec!["87-podman-bridge.conflist".into()]);
        let out = cni(&o, &s);
        assert_eq!(out.status, Status::Fail);
        assert!(
            out.fix
                .contains("remove /etc/cni/net.d/87-podman-bridge.conflist"),
            "{out:?}"
        );
        assert_eq!(cri(&o, &s).status, Status::Pass);
        o.cri = Some(Err(
            "/run/containerd/containerd.sock: No such file or directory".into()
        ));
        assert_eq!(cri(&o, &s).status, Status::Fail);
        o.cri = None;
        assert_eq!(cri(&o, &s).status, Status::Skipped);
        assert_eq!(cgroup_driver(&o, &s).status, Status::Pass);
        o.cgroup_drivers = Some(("cgroupfs".into(), "systemd".into()));
        let out = cgroup_driver(&o, &s);
        assert_eq!(
            (out.status, out.observed.as_str()),
            (Status::Fail, "kubelet cgroupfs, containerd systemd")
        );
    }

    #[test]
    fn the_nodes_own_kubelet() {
        use crate::kubelet::status::{KubeletState, KubeletStatus};
        let s = settings();
        let mut o = observation();
        assert_eq!(kubelet(&o, &s).status, Status::Skipped);
        let mut k = KubeletStatus {
            state: KubeletState::Running,
            health: "healthy".into(),
            image: Some("quay.io/poseidon/kubelet:v1.34.1".into()),
            ..KubeletStatus::default()
        };
        o.kubelet = Some(Ok(k.clone()));
        assert_eq!(kubelet(&o, &s).status, Status::Pass);
        k.health = "starting (connection refused)".into();
        o.kubelet = Some(Ok(k.clone()));
        assert_eq!(kubelet(&o, &s).status, Status::Warn);
        k.state = KubeletState::Failing;
        k.error = Some("image pull failed".into());
        o.kubelet = Some(Ok(k));
        let out = kubelet(&o, &s);
        assert_eq!(
            (out.status, out.observed.as_str()),
            (Status::Fail, "failing: image pull failed")
        );
    }
}
