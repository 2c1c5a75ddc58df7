//! `node.ip`: the address (or dual-stack pair) the kubelet registers, checked by the kubelet's own
//! rule (`k8s.io/component-helpers` `node/util/ips.go` `ParseNodeIPArgument`): one address, or two
//! of different families, neither of a pair unspecified; two only where the cloud provider is none
//! or `external`. The kubelet itself only warns about an address it cannot parse and registers the
//! default route's instead, so a typo here is refused rather than passed on.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use crate::types::Invalid;

/// One address, or an IPv4 and an IPv6 one, as `--node-ip` takes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeIp(Vec<IpAddr>);

impl NodeIp {
    /// Two addresses: a dual-stack node.
    pub(crate) fn dual_stack(&self) -> bool {
        self.0.len() == 2
    }
}

impl FromStr for NodeIp {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<Self, Invalid> {
        let ips = s
            .split(',')
            .map(|part| {
                part.parse::<IpAddr>()
                    .map_err(|_| Invalid(format!("{part:?} is not an IPv4 or IPv6 address")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        match ips.as_slice() {
            [_] => {}
            [a, b] if a.is_ipv6() == b.is_ipv6() => {
                return Err(Invalid(format!(
                    "{s:?}: two addresses must be a dual-stack pair (one IPv4, one IPv6)"
                )));
            }
            [a, b] if a.is_unspecified() || b.is_unspecified() => {
                return Err(Invalid(format!(
                    "{s:?}: a dual-stack pair cannot include 0.0.0.0 or ::"
                )));
            }
            [_, _] => {}
            _ => {
                return Err(Invalid(format!(
                    "{s:?}: one address, or a dual-stack pair (one IPv4, one IPv6)"
                )));
            }
        }
        Ok(NodeIp(ips))
    }
}

impl fmt::Display for NodeIp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&list.join(","))
    }
}

impl serde::Serialize for NodeIp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> serde::Deserialize<'de> for NodeIp {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(|e: Invalid| serde::de::Error::custom(e.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubelets_rule() {
        for ok in [
            "10.0.5.11",
            "fd00::11",
            "10.0.5.11,fd00::11",
            "fd00::11,10.0.5.11",
            "0.0.0.0",
            "::",
        ] {
            let ip: NodeIp = ok.parse().unwrap_or_else(|e| panic!("{ok}: {e}"));
            assert_eq!(ip.to_string(), ok, "written back as given");
        }
        assert!(
            "10.0.5.11,fd00::11"
                .parse::<NodeIp>()
                .is_ok_and(|ip| ip.dual_stack())
        );
        for (bad, says) in [
            ("", "not an IPv4"),
            ("10.0.5", "not an IPv4"),
            ("10.0.5.11 ", "not an IPv4"),
            ("node-1", "not an IPv4"),
            ("10.0.5.11,10.0.5.12", "dual-stack pair"),
            ("fd00::1,fd00::2", "dual-stack pair"),
            ("0.0.0.0,fd00::1", "cannot include"),
            ("10.0.0.1,::", "cannot include"),
            ("10.0.0.1,fd00::1,10.0.0.2", "one address"),
            ("10.0.0.1,", "not an IPv4"),
        ] {
            let e = bad.parse::<NodeIp>().expect_err(bad);
            assert!(e.0.contains(says), "{bad:?}: {e}");
        }
    }
}
