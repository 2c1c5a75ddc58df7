//! Kernel module names as configured.

use crate::types::Invalid;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A module name. The kernel treats `-` and `_` alike; names are kept with `_` so they compare
/// equal however they were written.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct ModuleName(String);

impl ModuleName {
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl ModuleName {
    /// Whether `s` passes the parser, decided at compile time for the built-in table.
    const fn is_valid_const(s: &str) -> bool {
        let b = s.as_bytes();
        if b.is_empty() || b.len() > 56 {
            return false;
        }
        let mut i = 0;
        while i < b.len() {
            if !(b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'-') {
                return false;
            }
            i += 1;
        }
        true
    }

    /// The built-in modules, their names proved valid when the crate compiled.
    pub(crate) fn defaults() -> Vec<ModuleName> {
        const _: () = {
            let mut i = 0;
            while i < DEFAULT_MODULES.len() {
                assert!(
                    ModuleName::is_valid_const(DEFAULT_MODULES[i].0),
                    "a built-in module name is invalid"
                );
                i += 1;
            }
        };
        DEFAULT_MODULES
            .iter()
            .map(|(m, _)| ModuleName(m.replace('-', "_")))
            .collect()
    }

    fn parse_str(s: &str) -> Result<Self, String> {
        if s.is_empty()
            || s.len() > 56
            || !s
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(format!("{s:?} is not a kernel module name"));
        }
        Ok(ModuleName(s.replace('-', "_")))
    }
}

impl FromStr for ModuleName {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<Self, Invalid> {
        Self::parse_str(s).map_err(Invalid)
    }
}

impl fmt::Display for ModuleName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for ModuleName {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ModuleName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

/// Modules a Kubernetes node needs, with why.
pub(crate) const DEFAULT_MODULES: &[(&str, &str)] = &[
    (
        "br_netfilter",
        "bridged pod traffic through iptables; provides net.bridge.bridge-nf-call-*",
    ),
    ("overlay", "the container image filesystem"),
    (
        "nf_conntrack",
        "connection tracking for Services; provides net.netfilter.nf_conntrack_*",
    ),
    ("ip_vs", "kube-proxy IPVS mode"),
    ("ip_vs_rr", "IPVS round-robin scheduler"),
    ("ip_vs_wrr", "IPVS weighted round-robin scheduler"),
    ("ip_vs_sh", "IPVS source-hashing scheduler"),
];

/// The module that provides a sysctl subtree, for advice and ordering.
pub(crate) fn provider_of(key: &crate::config::sysctl::SysctlKey) -> Option<&'static str> {
    if key.starts_with(&["net", "bridge"]) {
        Some("br_netfilter")
    } else if key.starts_with(&["net", "netfilter", "nf_conntrack_max"])
        || key.starts_with(&["net", "netfilter"]) && key.to_string().contains(".nf_conntrack")
    {
        Some("nf_conntrack")
    } else if key.starts_with(&["net", "ipv4", "vs"]) {
        Some("ip_vs")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_normalise_dashes() {
        assert_eq!("ip-vs".parse::<ModuleName>(), "ip_vs".parse::<ModuleName>());
        assert!("../x".parse::<ModuleName>().is_err());
        assert!("".parse::<ModuleName>().is_err());
    }

    #[test]
    fn providers() {
        let k = |s: &str| s.parse().expect("key");
        assert_eq!(
            provider_of(&k("net.bridge.bridge-nf-call-iptables")),
            Some("br_netfilter")
        );
        assert_eq!(
            provider_of(&k("net.netfilter.nf_conntrack_max")),
            Some("nf_conntrack")
        );
        assert_eq!(provider_of(&k("net.ipv4.vs.conntrack")), Some("ip_vs"));
        assert_eq!(provider_of(&k("net.ipv4.ip_forward")), None);
    }
}
