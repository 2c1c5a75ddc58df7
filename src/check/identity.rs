//! The node's identity: a node name the API server accepts, a machine-id of its own, a readable
//! product_uuid (kubeadm checks both for uniqueness: cloned VMs collide), and `localhost` naming
//! the node itself.

use super::model::{Check, Outcome};
use super::observe::Observation;
use crate::config::Settings;
use crate::types::Hostname;

pub(crate) const HOSTNAME: Check = Check {
    name: "hostname",
    why: "the node registers under this name: `localhost` collides and an invalid one is refused",
    decide: hostname,
};

fn hostname(obs: &Observation, _: &Settings) -> Outcome {
    let name = match &obs.hostname {
        Ok(n) => n,
        Err(why) => return Outcome::skipped(why.clone()),
    };
    let expected = "a lowercase RFC 1123 name, not localhost";
    let fix = "set node.hostname, or the host name (Ignition's /etc/hostname, hostnamectl)";
    if matches!(name.as_str(), "localhost" | "localhost.localdomain" | "") {
        Outcome::fail(name.clone(), expected, fix)
    } else if name.parse::<Hostname>().is_err() {
        Outcome::fail(format!("{name:?} (not a valid node name)"), expected, fix)
    } else {
        Outcome::pass(name.clone(), expected)
    }
}

/// Machine IDs that are no machine's: unset, image placeholders, or zero.
const NOT_AN_ID: &[&str] = &["", "uninitialized", "00000000000000000000000000000000"];

pub(crate) const MACHINE_ID: Check = Check {
    name: "machine-id",
    why: "journald, DHCP client IDs and the kubelet's node identity derive from it: clones collide",
    decide: machine_id,
};

fn machine_id(obs: &Observation, _: &Settings) -> Outcome {
    let expected = "32 lowercase hex digits of this machine's own";
    let fix =
        "remove /etc/machine-id from the image (or write `uninitialized`) so systemd makes one at first boot";
    // An image (`--root` without a live kernel): no id, or `uninitialized`, is the right state
    // (systemd makes one at first boot); a real id baked in would be shared by every node.
    if !obs.live {
        let image = "absent or `uninitialized` in an image";
        return match &obs.machine_id {
            Err(why) if why.0.contains("does not exist") => Outcome::pass("absent", image),
            Ok(id) if id == "uninitialized" || id.is_empty() => Outcome::pass(format!("{id:?}"), image),
            Err(why) => Outcome::fail(why.clone(), image, fix),
            Ok(id) => Outcome::fail(
                format!("{id:?}: every node booted from this image would share it"),
                image,
                fix,
            ),
        };
    }
    match &obs.machine_id {
        Err(why) => Outcome::fail(why.clone(), expected, fix),
        Ok(id) if NOT_AN_ID.contains(&id.as_str()) => Outcome::fail(format!("{id:?}"), expected, fix),
        Ok(id)
            if id.len() == 32
                && id
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) =>
        {
            Outcome::pass(id.clone(), expected)
        }
        Ok(id) => Outcome::fail(format!("{id:?} (malformed)"), expected, fix),
    }
}

pub(crate) const PRODUCT_UUID: Check = Check {
    name: "product-uuid",
    why: "kubeadm and some CSI drivers tell nodes apart by it; VMs cloned without a new one collide",
    decide: product_uuid,
};

fn product_uuid(obs: &Observation, _: &Settings) -> Outcome {
    match &obs.product_uuid {
        Ok(Some(())) => Outcome::pass("readable", "readable"),
        Ok(None) => Outcome::skipped("this platform exposes no DMI (no /sys/class/dmi/id)"),
        Err(why) if !obs.live => Outcome::skipped(why.clone()),
        Err(why) => Outcome::warn(
            why.clone(),
            "readable",
            "a platform that exposes DMI (most hypervisors do; some containers hide it)",
        ),
    }
}

pub(crate) const LOCALHOST: Check = Check {
    name: "localhost",
    why: "kubectl port-forward reaches a pod through containerd, which dials localhost:PORT in the pod's network namespace, the name resolved by the host's /etc/hosts, then DNS: without the line it times out or leaves the pod",
    decide: localhost,
};

fn localhost(obs: &Observation, _: &Settings) -> Outcome {
    let expected = "/etc/hosts maps localhost to a loopback address (127.0.0.1, ::1)";
    let fix = "add `127.0.0.1 localhost` and `::1 localhost` to /etc/hosts, as every distribution ships it";
    let text = match &obs.etc_hosts {
        Ok(t) => t,
        Err(why) => return Outcome::warn(why.clone(), expected, fix),
    };
    let addresses = localhost_addresses(text);
    let loopback = |a: &&str| a.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if addresses.iter().any(loopback) {
        Outcome::pass(format!("localhost → {}", addresses.join(", ")), expected)
    } else if addresses.is_empty() {
        Outcome::warn("no localhost line in /etc/hosts", expected, fix)
    } else {
        Outcome::warn(
            format!("localhost → {} (not loopback)", addresses.join(", ")),
            expected,
            fix,
        )
    }
}

/// The addresses `/etc/hosts` gives `localhost` (`ADDRESS NAME…` lines, `#` comments).
fn localhost_addresses(hosts: &str) -> Vec<&str> {
    hosts
        .lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .filter_map(|l| {
            let mut fields = l.split_whitespace();
            let address = fields.next()?;
            fields.any(|n| n == "localhost").then_some(address)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::model::Status;
    use super::super::observe::tests::{observation, settings};
    use super::*;

    #[test]
    fn hostnames() {
        let s = settings();
        let mut o = observation();
        for (name, status) in [
            ("worker-0", Status::Pass),
            ("localhost", Status::Fail),
            ("Worker_0", Status::Fail),
        ] {
            o.hostname = Ok(name.into());
            assert_eq!(hostname(&o, &s).status, status, "{name}");
        }
    }

    #[test]
    fn machine_ids() {
        let s = settings();
        let mut o = observation();
        for (id, status) in [
            ("0123456789abcdef0123456789abcdef", Status::Pass),
            ("uninitialized", Status::Fail),
            ("00000000000000000000000000000000", Status::Fail),
            ("0123456789ABCDEF0123456789ABCDEF", Status::Fail),
            ("", Status::Fail),
        ] {
            o.machine_id = Ok(id.into());
            assert_eq!(machine_id(&o, &s).status, status, "{id}");
        }
        // An image: absent or `uninitialized` is right, a baked id is not.
        o.live = false;
        for (seen, status) in [
            (Err("/etc/machine-id: does not exist".to_owned()), Status::Pass),
            (Ok("uninitialized".to_owned()), Status::Pass),
            (Ok("0123456789abcdef0123456789abcdef".to_owned()), Status::Fail),
        ] {
            o.machine_id = seen.clone().map_err(crate::check::observe::Unseen);
            assert_eq!(machine_id(&o, &s).status, status, "{seen:?}");
        }
        o.machine_id = Err("/etc/machine-id: No such file".into());
        assert_eq!(machine_id(&o, &s).status, Status::Fail);
    }

    #[test]
    fn product_uuid_unreadable_is_a_warning() {
        let s = settings();
        let mut o = observation();
        assert_eq!(product_uuid(&o, &s).status, Status::Pass);
        o.product_uuid = Err("/sys/class/dmi/id/product_uuid: No such file".into());
        assert_eq!(product_uuid(&o, &s).status, Status::Warn);
        o.product_uuid = Ok(None);
        assert_eq!(product_uuid(&o, &s).status, Status::Skipped);
    }

    #[test]
    fn localhost_names_the_node_itself() {
        assert_eq!(
            localhost_addresses("127.0.0.1\tlocalhost\n::1 localhost ip6-localhost # v6\n10.0.5.11 w-1\n"),
            ["127.0.0.1", "::1"]
        );
        assert_eq!(
            localhost_addresses("# 127.0.0.1 localhost\n10.0.5.10 c-1\n"),
            Vec::<&str>::new()
        );
        assert_eq!(
            localhost_addresses("127.0.1.1 localhost.localdomain\n"),
            Vec::<&str>::new()
        );
    }
}
