//! The links that carry the node's default route: an unmanaged-interface list that matches one of
//! them would take the node off the network the moment NetworkManager or networkd reads it.

use std::path::Path;

use crate::host::read::{self, Kind};

/// The interfaces of the IPv4 and IPv6 default routes, from `/proc/net/route` and
/// `/proc/net/ipv6_route` under `proc` (empty when there is none, or the files cannot be read).
pub(crate) fn default_route_links(proc: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(text) = read::read_path_text(&proc.join("net/route"), Kind::Kernel) {
        // Iface Destination Gateway …: the default route's destination is 00000000.
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() > 1 && f[1] == "00000000" {
                out.push(f[0].to_owned());
            }
        }
    }
    if let Ok(text) = read::read_path_text(&proc.join("net/ipv6_route"), Kind::Kernel) {
        // dest dest_len src src_len next_hop metric refcnt use flags iface: ::/0.
        for line in text.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() == 10 && f[0].bytes().all(|b| b == b'0') && f[1] == "00" && f[9] != "lo" {
                out.push(f[9].to_owned());
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The interface-name glob a NetworkManager device spec names, if it names one (`eth*`,
/// `interface-name:eth*`, `interface-name:=eth0`, `interface-name:~eth*`).
pub(crate) fn nm_name_glob(spec: &str) -> Option<&str> {
    match spec.split_once(':') {
        Some(("interface-name", rest)) => Some(rest.trim_start_matches(['=', '~'])),
        Some(_) => None,
        None => Some(spec),
    }
}

/// The first (pattern, link) where a pattern matches a default-route link.
pub(crate) fn takes_the_uplink<'a>(
    patterns: impl IntoIterator<Item = &'a str>,
    links: &'a [String],
) -> Option<(&'a str, &'a str)> {
    patterns.into_iter().find_map(|p| {
        links
            .iter()
            .find(|l| crate::glob::glob_match(p, l))
            .map(|l| (p, l.as_str()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_routes_from_both_tables() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("net")).expect("mkdir");
        std::fs::write(
            dir.path().join("net/route"),
            "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
             ens3\t00000000\t0202000A\t0003\t0\t0\t100\t00000000\t0\t0\t0\n\
             ens3\t0002000A\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0\n\
             cali1\t0A00000A\t00000000\t0005\t0\t0\t0\tFFFFFFFF\t0\t0\t0\n",
        )
        .expect("write");
        std::fs::write(
            dir.path().join("net/ipv6_route"),
            "00000000000000000000000000000000 00 00000000000000000000000000000000 00 fe800000000000000000000000000001 00000400 00000001 00000000 00000003     eth1\n\
             00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200       lo\n",
        )
        .expect("write");
        assert_eq!(default_route_links(dir.path()), ["ens3", "eth1"]);
        let links = default_route_links(dir.path());
        assert_eq!(
            takes_the_uplink(["cali*", "ens*"], &links),
            Some(("ens*", "ens3"))
        );
        assert_eq!(takes_the_uplink(["cali*", "veth*"], &links), None);
        assert_eq!(nm_name_glob("interface-name:~e*"), Some("e*"));
        assert_eq!(nm_name_glob("type:ethernet"), None);
        assert_eq!(nm_name_glob("cni0"), Some("cni0"));
    }
}
