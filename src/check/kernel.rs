//! Kernel checks: the version, the build options the kubelet and runtimes need, and the modules
//! nodeward is configured to load.

use super::model::{Check, Outcome};
use super::observe::ModuleState;
use super::observe::Observation;
use crate::config::Settings;

/// cgroup v2 as Kubernetes uses it needs 5.8 (its docs); below 4.19 kubeadm refuses.
const WARN_BELOW: (u64, u64) = (5, 8);
const FAIL_BELOW: (u64, u64) = (4, 19);

pub(crate) const VERSION: Check = Check {
    name: "kernel-version",
    why: "cgroup v2 as the kubelet uses it needs Linux 5.8; older kernels miss fixes runtimes rely on",
    decide: version,
};

fn version(obs: &Observation, _: &Settings) -> Outcome {
    let release = match &obs.kernel_release {
        Ok(r) => r,
        Err(why) => return Outcome::skipped(why.clone()),
    };
    let expected = format!("≥ {}.{}", WARN_BELOW.0, WARN_BELOW.1);
    let Some(v) = major_minor(release) else {
        return Outcome::warn(release.clone(), expected, "a kernel release nodeward can read");
    };
    if v < FAIL_BELOW {
        Outcome::fail(release.clone(), expected, "upgrade the host's kernel")
    } else if v < WARN_BELOW {
        Outcome::warn(release.clone(), expected, "upgrade the host's kernel")
    } else {
        Outcome::pass(release.clone(), expected)
    }
}

fn major_minor(release: &str) -> Option<(u64, u64)> {
    let mut parts = release.split(['.', '-']);
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// Build options, as moby's and k3s's check-config list them for a node (built in or a module).
const REQUIRED_OPTIONS: &[&str] = &[
    "NAMESPACES",
    "NET_NS",
    "PID_NS",
    "IPC_NS",
    "UTS_NS",
    "CGROUPS",
    "CGROUP_CPUACCT",
    "CGROUP_DEVICE",
    "CGROUP_SCHED",
    "CGROUP_PIDS",
    "CPUSETS",
    "MEMCG",
    "KEYS",
    "VETH",
    "BRIDGE",
    "BRIDGE_NETFILTER",
    "NF_CONNTRACK",
    "NF_NAT",
    "IP_NF_FILTER",
    "IP_NF_NAT",
    "NETFILTER_XT_MATCH_ADDRTYPE",
    "NETFILTER_XT_MATCH_CONNTRACK",
    "POSIX_MQUEUE",
    "OVERLAY_FS",
    "SECCOMP",
];

/// kube-proxy's IPVS mode: a warning only, since iptables/nftables modes do without.
const IPVS_OPTIONS: &[&str] = &["IP_VS", "IP_VS_RR", "IP_VS_WRR", "IP_VS_SH", "IP_VS_NFCT"];

pub(crate) const CONFIG: Check = Check {
    name: "kernel-config",
    why: "namespaces, cgroups, overlay, netfilter/conntrack and bridging are what pods run on",
    decide: config,
};

fn config(obs: &Observation, _: &Settings) -> Outcome {
    let options = match &obs.kernel_config {
        Ok(o) => o,
        Err(why) => return Outcome::skipped(why.clone()),
    };
    let missing = |list: &[&'static str]| -> Vec<&'static str> {
        list.iter()
            .copied()
            .filter(|o| !matches!(options.get(*o).map(String::as_str), Some("y" | "m")))
            .collect()
    };
    let (required, ipvs) = (missing(REQUIRED_OPTIONS), missing(IPVS_OPTIONS));
    let expected = format!(
        "{} options set (y or m)",
        REQUIRED_OPTIONS.len() + IPVS_OPTIONS.len()
    );
    let names = |l: &[&str]| {
        l.iter()
            .map(|o| format!("CONFIG_{o}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !required.is_empty() {
        Outcome::fail(
            format!("not set: {}", names(&required)),
            expected,
            "a kernel built with these options (the distribution's stock kernel has them)",
        )
    } else if !ipvs.is_empty() {
        Outcome::warn(
            format!("not set: {} (kube-proxy's IPVS mode)", names(&ipvs)),
            expected,
            "run kube-proxy in iptables or nftables mode, or a kernel with IPVS",
        )
    } else {
        Outcome::pass("all set", expected)
    }
}

pub(crate) const MODULES: Check = Check {
    name: "kernel-modules",
    why: "bridge-nf, conntrack, overlay and IPVS come from modules that must exist for this kernel",
    decide: modules,
};

fn modules(obs: &Observation, settings: &Settings) -> Outcome {
    if !obs.live {
        return Outcome::skipped("not the running system (--root without --kernel live)");
    }
    if settings.modules.load.is_empty() {
        return Outcome::skipped("modules.load is empty");
    }
    let missing: Vec<String> = obs
        .modules
        .iter()
        .filter_map(|(m, s)| match s {
            ModuleState::Missing(why) => Some(format!("{m} ({why})")),
            _ => None,
        })
        .collect();
    let expected = format!(
        "{} module(s) loaded, built in or in this kernel's tree",
        obs.modules.len()
    );
    if missing.is_empty() {
        return Outcome::pass(format!("{} available", obs.modules.len()), expected);
    }
    let fix = if obs.container.is_some() {
        "load them on the container's host (see `nodeward plan --only modules` for the exact command)"
    } else {
        "install the kernel's extra modules package, or drop them from modules.load"
    };
    Outcome::fail(format!("missing: {}", missing.join("; ")), expected, fix)
}

#[cfg(test)]
mod tests {
    use super::super::model::Status;
    use super::super::observe::tests::{observation, settings};
    use super::*;

    #[test]
    fn versions() {
        let s = settings();
        let mut o = observation();
        for (release, status) in [
            ("6.1.0-27-cloud-amd64", Status::Pass),
            ("5.8.0", Status::Pass),
            ("5.4.0-200-generic", Status::Warn),
            ("4.18.0-553.el8", Status::Fail),
        ] {
            o.kernel_release = Ok(release.into());
            assert_eq!(version(&o, &s).status, status, "{release}");
        }
        o.kernel_release = Err("not live".into());
        assert_eq!(version(&o, &s).status, Status::Skipped);
    }

    #[test]
    fn config_options() {
        let s = settings();
        let mut o = observation();
        let mut all: std::collections::BTreeMap<String, String> = REQUIRED_OPTIONS
            .iter()
            .chain(IPVS_OPTIONS)
            .map(|k| (k.to_string(), "m".to_string()))
            .collect();
        o.kernel_config = Ok(all.clone());
        assert_eq!(config(&o, &s).status, Status::Pass);
        all.remove("IP_VS_SH");
        o.kernel_config = Ok(all.clone());
        let warn = config(&o, &s);
        assert_eq!(warn.status, Status::Warn);
        assert!(warn.observed.contains("CONFIG_IP_VS_SH"), "{warn:?}");
        all.insert("OVERLAY_FS".into(), "n".into());
        o.kernel_config = Ok(all);
        let fail = config(&o, &s);
        assert_eq!(fail.status, Status::Fail);
        assert_eq!(fail.observed, "not set: CONFIG_OVERLAY_FS");
    }

    #[test]
    fn modules_missing_from_the_tree_fail_with_their_names() {
        let s = settings();
        let mut o = observation();
        o.modules = vec![
            ("br_netfilter".into(), ModuleState::Loaded),
            ("overlay".into(), ModuleState::BuiltIn),
            ("ip_vs".into(), ModuleState::Available),
        ];
        assert_eq!(modules(&o, &s).status, Status::Pass);
        o.modules.push((
            "nf_tables".into(),
            ModuleState::Missing("not found in modules.dep".into()),
        ));
        let out = modules(&o, &s);
        assert_eq!(out.status, Status::Fail);
        assert_eq!(out.observed, "missing: nf_tables (not found in modules.dep)");
        assert!(out.fix.contains("modules package"));
    }
}
