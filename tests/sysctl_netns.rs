//! Sysctls against the real kernel, inside a private network namespace the test creates: the
//! per-namespace `net.*` keys are really written, `nf_conntrack_max` is read-only there (the LXC
//! case), and the host's own values are never touched.

mod common;

use common::{Root, Run};

/// A network namespace kept alive by a sleeping child; commands enter it with nsenter.
struct Netns(common::Namespaces);

impl Netns {
    fn new() -> Netns {
        Netns(common::Namespaces::new(&["--net"], &["-n"], "net"))
    }

    fn sh(&self, script: &str) -> String {
        self.0.sh(script)
    }

    fn read(&self, key_path: &str) -> String {
        self.sh(&format!("cat /proc/sys/{key_path}"))
    }

    /// `nodeward ARGS --root ROOT --kernel live` inside the namespace.
    fn nodeward(&self, root: &Root, args: &[&str]) -> Run {
        self.0.nodeward(root, args)
    }
}

/// Drops the default keys that are global (not per network namespace), so that nothing the test
/// does can change the host, and adds `extra`.
fn netns_only(root: &Root, extra: &str) {
    let mut cfg = String::from("[sysctl]\n");
    for k in common::GLOBAL_SYSCTLS {
        cfg.push_str(&format!("\"{k}\" = {{ enabled = false }}\n"));
    }
    cfg.push_str(extra);
    root.write("etc/nodeward/config.d/10-netns.toml", &cfg);
}

/// Output with runs of spaces folded, so assertions do not depend on column widths.
fn squash(text: &str) -> String {
    text.split(' ')
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

fn host_value(key_path: &str) -> String {
    std::fs::read_to_string(format!("/proc/sys/{key_path}"))
        .expect("host value")
        .trim()
        .to_owned()
}

const WATCHED: [&str; 4] = [
    "net/ipv4/ip_forward",
    "net/ipv4/conf/all/rp_filter",
    "net/ipv4/conf/default/rp_filter",
    "fs/inotify/max_user_watches",
];

#[test]
fn exact_keys_are_applied_and_reapplied_after_drift() {
    if !common::require_root() {
        return;
    }
    let host_before: Vec<String> = WATCHED.iter().map(|k| host_value(k)).collect();
    let ns = Netns::new();
    let root = Root::new();
    netns_only(&root, "");
    ns.sh("echo 0 > /proc/sys/net/ipv4/ip_forward; echo 2 > /proc/sys/net/ipv4/conf/all/rp_filter");

    let plan = ns.nodeward(&root, &["plan", "--only", "sysctl"]).ok();
    let shown = squash(&plan.stdout);
    assert!(shown.contains("net.ipv4.ip_forward set 0 → 1"), "{}", plan.stdout);
    // The default (no CNI declared) turns reverse-path filtering off through the `*` glob,
    // which names `all` too.
    assert!(
        shown.contains("net.ipv4.conf.all.rp_filter set 2 → 0"),
        "{}",
        plan.stdout
    );
    assert_eq!(ns.read("net/ipv4/ip_forward"), "0", "plan must not write");

    ns.nodeward(&root, &["apply", "--only", "sysctl"]).ok();
    assert_eq!(ns.read("net/ipv4/ip_forward"), "1");
    assert_eq!(ns.read("net/ipv4/conf/all/rp_filter"), "0");
    assert_eq!(ns.read("net/ipv4/conf/default/rp_filter"), "0");
    assert_eq!(ns.read("net/ipv4/conf/lo/rp_filter"), "0");
    let dropin = std::fs::read_to_string(root.path().join("etc/sysctl.d/90-nodeward.conf")).expect("drop-in");
    assert!(dropin.contains("\nnet.ipv4.ip_forward = 1\n"), "{dropin}");
    assert!(dropin.contains("\nnet.ipv4.conf.*.rp_filter = 0\n"), "{dropin}");
    assert!(
        !dropin.contains("nf_conntrack_max"),
        "raise-only keys are never persisted: {dropin}"
    );

    // Idempotent: nothing to do, nothing written.
    let before = root.snapshot();
    let again = ns.nodeward(&root, &["plan", "--only", "sysctl", "--detailed-exitcode"]);
    assert_eq!(again.code, 0, "{}", again.stdout);
    ns.nodeward(&root, &["apply", "--only", "sysctl"]).ok();
    assert_eq!(before, root.snapshot());

    // Drift: repaired by the next apply.
    ns.sh("echo 0 > /proc/sys/net/ipv4/ip_forward");
    let drift = ns.nodeward(&root, &["plan", "--only", "sysctl", "--detailed-exitcode"]);
    assert_eq!(drift.code, 4, "{}", drift.stdout);
    ns.nodeward(&root, &["apply", "--only", "sysctl"]).ok();
    assert_eq!(ns.read("net/ipv4/ip_forward"), "1");

    let host_after: Vec<String> = WATCHED.iter().map(|k| host_value(k)).collect();
    assert_eq!(host_before, host_after, "the host's own values must not change");
}

#[test]
fn read_only_conntrack_max_that_satisfies_the_minimum_passes() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new();
    let current = ns.read("net/netfilter/nf_conntrack_max");
    let mode = ns.sh("stat -c %a /proc/sys/net/netfilter/nf_conntrack_max");
    assert_eq!(
        mode, "444",
        "read-only in a non-initial namespace since Linux 5.12.2"
    );
    let root = Root::new();
    netns_only(
        &root,
        &format!("\"net.netfilter.nf_conntrack_max\" = {{ min = {current} }}\n"),
    );
    let run = ns.nodeward(&root, &["apply", "--only", "sysctl"]).ok();
    assert!(
        run.stdout.contains(&format!(
            "net.netfilter.nf_conntrack_max: read-only, {current} ≥ {current}"
        )),
        "{}",
        run.stdout
    );
}

#[test]
fn read_only_conntrack_max_below_the_minimum_fails_alone() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new();
    let current: u64 = ns.read("net/netfilter/nf_conntrack_max").parse().expect("number");
    let wanted = current + 1;
    let root = Root::new();
    netns_only(
        &root,
        &format!("\"net.netfilter.nf_conntrack_max\" = {{ min = {wanted} }}\n"),
    );
    ns.sh("echo 0 > /proc/sys/net/ipv4/ip_forward");
    let before = root.snapshot();

    let run = ns.nodeward(&root, &["apply", "--only", "sysctl"]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    for needle in [
        "net.netfilter.nf_conntrack_max is read-only here".to_owned(),
        format!("current {current}"),
        format!("wanted ≥ {wanted}"),
        "non-initial network namespace (LXC?)".to_owned(),
    ] {
        assert!(
            run.stdout.contains(&needle),
            "missing {needle:?} in:\n{}",
            run.stdout
        );
    }
    assert_eq!(
        ns.read("net/ipv4/ip_forward"),
        "1",
        "every other key is applied (systemd-sysctl's rule)"
    );
    assert_ne!(before, root.snapshot(), "the drop-in is written");
}

#[test]
fn keys_for_interfaces_with_dots_in_their_names() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new();
    // A VLAN-style name: `eth0.100` is addressed as `eth0/100` in the dotted form.
    ns.sh("ip link add name br0.100 type bridge");
    let root = Root::new();
    netns_only(&root, "\"net.ipv4.conf.br0/100.rp_filter\" = 1\n");
    ns.nodeward(&root, &["apply", "--only", "sysctl"]).ok();
    assert_eq!(ns.read("net/ipv4/conf/br0.100/rp_filter"), "1");
    let dropin = std::fs::read_to_string(root.path().join("etc/sysctl.d/90-nodeward.conf")).expect("drop-in");
    assert!(dropin.contains("net.ipv4.conf.br0/100.rp_filter = 1"), "{dropin}");
}

#[test]
fn absent_keys_are_classified() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new();
    let root = Root::new();
    netns_only(&root, "\"net.ipv4.conf.nosuchif0.rp_filter\" = 1\n");
    let run = ns.nodeward(&root, &["plan", "--only", "sysctl"]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stdout
            .contains("net.ipv4.conf.nosuchif0.rp_filter: not present in this kernel"),
        "{}",
        run.stdout
    );

    // A key a module provides, with that module dropped from the list, says which module.
    let root = Root::new();
    netns_only(
        &root,
        "\"net.bridge.bridge-nf-call-arptables2\" = 1\n[modules]\nskip = [\"br_netfilter\"]\n",
    );
    let run = ns.nodeward(&root, &["plan", "--only", "sysctl"]);
    assert!(
        run.stdout
            .contains("module br_netfilter provides it but is not in modules.load"),
        "{}",
        run.stdout
    );
}

#[test]
fn with_root_and_no_live_kernel_only_the_dropin_is_planned() {
    let root = Root::new();
    let run = root.run(&["plan", "--only", "sysctl"]).ok();
    assert!(
        run.stdout.contains("/etc/sysctl.d/90-nodeward.conf"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("kernel values not read or written"),
        "{}",
        run.stdout
    );
    assert!(!run.stdout.contains("net.ipv4.ip_forward"), "{}", run.stdout);
}

/// The kernel filters with max(all, interface). Under the cilium profile an interface whose own
/// rp_filter is 0 stays effectively 0; under the calico profile (`all = 1`) the same interface is
/// made strict. The second half is the control: it shows the check can tell the two apart.
#[test]
fn cilium_profile_keeps_an_interface_effectively_unfiltered() {
    if !common::require_root() {
        return;
    }
    let effective = |ns: &Netns| -> u32 {
        let all: u32 = ns.read("net/ipv4/conf/all/rp_filter").parse().expect("all");
        let own: u32 = ns.read("net/ipv4/conf/lxc0/rp_filter").parse().expect("own");
        all.max(own)
    };
    for (cni, want_all, want_effective) in [("cilium", "0", 0), ("calico", "1", 1)] {
        let ns = Netns::new();
        // A Cilium-style endpoint veth, created before nodeward runs, with its own value 0 and
        // `all` strict, as a distro's sysctl.d would leave it.
        ns.sh("ip link add lxc0 type veth peer name lxc0p && echo 0 > /proc/sys/net/ipv4/conf/lxc0/rp_filter && \
               echo 1 > /proc/sys/net/ipv4/conf/all/rp_filter && echo 1 > /proc/sys/net/ipv4/conf/default/rp_filter");
        let root = Root::new();
        netns_only(&root, "");
        root.write(
            "etc/nodeward/config.d/05-cni.toml",
            &format!("[node]\ncni = \"{cni}\"\n"),
        );
        ns.nodeward(&root, &["apply", "--only", "sysctl"]).ok();
        assert_eq!(ns.read("net/ipv4/conf/all/rp_filter"), want_all, "{cni}");
        assert_eq!(
            effective(&ns),
            want_effective,
            "{cni}: effective rp_filter of lxc0"
        );
        // A second apply changes nothing.
        let again = ns.nodeward(&root, &["plan", "--only", "sysctl", "--detailed-exitcode"]);
        assert_eq!(again.code, 0, "{cni}: {}", again.stdout);
        // An interface created later starts with the default the profile chose.
        ns.sh("ip link add lxc1 type veth peer name lxc1p");
        let later = ns.read("net/ipv4/conf/lxc1/rp_filter");
        assert_eq!(later, want_all, "{cni}: a new interface's rp_filter");
    }
}

/// Explicit keys win over a glob that also names them, as in sysctl.d(5).
#[test]
fn explicit_keys_win_over_globs() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new();
    let root = Root::new();
    netns_only(&root, "\"net.ipv4.conf.lo.rp_filter\" = 2\n");
    root.write("etc/nodeward/config.d/05-cni.toml", "[node]\ncni = \"cilium\"\n");
    ns.nodeward(&root, &["apply", "--only", "sysctl"]).ok();
    assert_eq!(ns.read("net/ipv4/conf/lo/rp_filter"), "2");
    assert_eq!(ns.read("net/ipv4/conf/all/rp_filter"), "0");
    let again = ns.nodeward(&root, &["plan", "--only", "sysctl", "--detailed-exitcode"]);
    assert_eq!(again.code, 0, "{}", again.stdout);
}
