//! What to do about one sysctl key, given its policy and what the kernel shows: pure rules,
//! tested without a kernel.

use crate::config::sysctl::{SysctlKey, SysctlPolicy, SysctlValue};
use crate::plan::KernelWhy;

/// What to do about one key, given what the kernel shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    Satisfied,
    /// Not ours to write (read-only, or the host's), but the current value already meets the
    /// policy.
    SatisfiedReadOnly(String),
    Change {
        to: String,
        why: KernelWhy,
    },
    /// Inside a container, a host-wide tuning value the host has not set: the node runs without
    /// it, so this is said, not failed.
    LeftToHost(String),
    Unsatisfiable(String),
}

/// Who can write a key, as nodeward sees it from where it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access<'a> {
    Writable,
    /// Read-only here: a global key seen from a non-initial network namespace.
    ReadOnly,
    /// Inside a container, a key that is host-wide (or read-only there): the host's to set, never
    /// written from inside, even when a privileged container could.
    Host {
        /// The container's kind (`lxc`), for the message.
        container: &'a str,
        /// Built-in tuning the node runs without (see `cni::advisory_in_container`).
        advisory: bool,
    },
}

/// Whether a key belongs to the caller's namespaces or to the whole machine. `net.*` keys are per
/// network namespace (the kernel shows the global ones read-only elsewhere, so those are caught
/// by their mode), as are the IPC and UTS keys and `user.*`; everything else (`vm.*`, `fs.*`,
/// most of `kernel.*`) is one value for every container on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    Namespaced,
    HostWide,
}

pub(crate) fn scope(key: &SysctlKey) -> Scope {
    const IPC_UTS: [&str; 13] = [
        "shmmax",
        "shmall",
        "shmmni",
        "shm_rmid_forced",
        "msgmax",
        "msgmnb",
        "msgmni",
        "sem",
        "auto_msgmni",
        "msg_next_id",
        "sem_next_id",
        "shm_next_id",
        "hostname",
    ];
    let seg: Vec<&str> = key.segments().iter().map(String::as_str).collect();
    match seg.as_slice() {
        ["net" | "user", ..] | ["fs", "mqueue", ..] | ["kernel", "domainname"] => Scope::Namespaced,
        ["kernel", name] if IPC_UTS.contains(name) => Scope::Namespaced,
        _ => Scope::HostWide,
    }
}

/// Decides one key. Pure: the observation is passed in.
pub(crate) fn decide(
    key: &SysctlKey,
    policy: &SysctlPolicy,
    current: &SysctlValue,
    access: Access<'_>,
) -> Decision {
    let wanted = match policy {
        SysctlPolicy::Exact(v) if v == current => None,
        SysctlPolicy::Exact(v) => Some((v.to_string(), KernelWhy::Set)),
        SysctlPolicy::Range { min, max } => {
            let Some(now) = current.as_u64() else {
                return Decision::Unsatisfiable(format!("{key}: current value {current:?} is not a number"));
            };
            match (min, max) {
                (Some(lo), _) if now < *lo => Some((lo.to_string(), KernelWhy::Raise)),
                (_, Some(hi)) if now > *hi => Some((hi.to_string(), KernelWhy::Lower)),
                _ => None,
            }
        }
    };
    match (wanted, access) {
        (None, Access::Writable) => Decision::Satisfied,
        (None, Access::ReadOnly) => {
            Decision::SatisfiedReadOnly(format!("{key}: read-only, {current} {policy}"))
        }
        (None, Access::Host { .. }) => {
            Decision::SatisfiedReadOnly(format!("{key}: the host's, {current} {policy}"))
        }
        (Some((to, why)), Access::Writable) => Decision::Change { to, why },
        (Some(_), Access::ReadOnly) => Decision::Unsatisfiable(format!(
            "{key} is read-only here and does not meet the policy: current {current}, wanted {policy}; {}",
            read_only_cause(key)
        )),
        (Some((to, _)), Access::Host { container, advisory }) => {
            let fix = host_fix(key, &to);
            if advisory {
                Decision::LeftToHost(format!(
                    "{key}: the host's, current {current}, recommended {policy} (the node runs without it); {fix}"
                ))
            } else {
                Decision::Unsatisfiable(format!(
                    "{key} is the host's and this {container} container cannot set it: current {current}, \
                     wanted {policy}; {fix}"
                ))
            }
        }
    }
}

/// The host-side command that satisfies a key.
fn host_fix(key: &SysctlKey, to: &str) -> String {
    let value = if to.contains(char::is_whitespace) {
        format!("'{to}'")
    } else {
        to.to_owned()
    };
    format!("on the host: `sysctl -w {key}={value}`, and persist it in the host's /etc/sysctl.d/")
}

fn read_only_cause(key: &SysctlKey) -> &'static str {
    if key.starts_with(&["net"]) {
        "likely running in a non-initial network namespace (LXC?): set it on the host, or relax the policy"
    } else {
        "likely a container with a read-only /proc/sys: set it on the host, or relax the policy"
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(crate) fn key(s: &str) -> SysctlKey {
        s.parse().expect("key")
    }
    pub(crate) fn v(s: &str) -> SysctlValue {
        SysctlValue::new(s)
    }
    pub(crate) fn min(n: u64) -> SysctlPolicy {
        SysctlPolicy::Range {
            min: Some(n),
            max: None,
        }
    }

    #[test]
    fn exact_values() {
        let k = key("net.ipv4.ip_forward");
        let p = SysctlPolicy::Exact(v("1"));
        assert_eq!(decide(&k, &p, &v("1"), Access::Writable), Decision::Satisfied);
        assert_eq!(
            decide(&k, &p, &v("0"), Access::Writable),
            Decision::Change {
                to: "1".into(),
                why: KernelWhy::Set
            }
        );
        let range = SysctlPolicy::Exact(v("1024 65000"));
        assert_eq!(
            decide(
                &key("net.ipv4.ip_local_port_range"),
                &range,
                &v("1024\t65000"),
                Access::Writable
            ),
            Decision::Satisfied
        );
    }

    #[test]
    fn minimums_only_raise() {
        let k = key("net.netfilter.nf_conntrack_max");
        assert_eq!(
            decide(&k, &min(131072), &v("65536"), Access::Writable),
            Decision::Change {
                to: "131072".into(),
                why: KernelWhy::Raise
            }
        );
        assert_eq!(
            decide(&k, &min(131072), &v("524288"), Access::Writable),
            Decision::Satisfied,
            "never lowered"
        );
        let both = SysctlPolicy::Range {
            min: Some(10),
            max: Some(20),
        };
        assert_eq!(
            decide(&k, &both, &v("30"), Access::Writable),
            Decision::Change {
                to: "20".into(),
                why: KernelWhy::Lower
            }
        );
    }

    #[test]
    fn read_only_keys() {
        let k = key("net.netfilter.nf_conntrack_max");
        assert_eq!(
            decide(&k, &min(131072), &v("524288"), Access::ReadOnly),
            Decision::SatisfiedReadOnly("net.netfilter.nf_conntrack_max: read-only, 524288 ≥ 131072".into())
        );
        let Decision::Unsatisfiable(msg) = decide(&k, &min(1_048_576), &v("524288"), Access::ReadOnly) else {
            panic!("must be unsatisfiable")
        };
        assert!(
            msg.contains("current 524288")
                && msg.contains("≥ 1048576")
                && msg.contains("non-initial network namespace"),
            "{msg}"
        );
        assert!(matches!(
            decide(&k, &min(1), &v("lots"), Access::Writable),
            Decision::Unsatisfiable(_)
        ));
    }
}
