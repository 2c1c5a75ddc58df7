//! Container hosts, the fast tier: namespaces built with `unshare`, the container named by the
//! root's `/run/systemd/container` (as systemd writes it inside LXC). The mount propagation fix is
//! real (a private tmpfs made shared in a private mount namespace), and so is the rule that a
//! container never writes host-wide sysctls: the test runs as root, where every one of them is
//! writable, and checks the host's values did not move.

mod common;

use common::{Namespaces as Ns, Root};

fn squash(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The root's mount as its namespace's mountinfo shows it: propagation fields and all.
fn mount_line(ns: &Ns, root: &Root) -> String {
    let point = root.path().display().to_string();
    ns.sh("cat /proc/self/mountinfo")
        .lines()
        .rfind(|l| l.split(' ').nth(4) == Some(point.as_str()))
        .unwrap_or_else(|| panic!("{point} is not a mount point"))
        .to_owned()
}

#[test]
fn a_private_root_is_made_shared_and_dev_kmsg_linked_once() {
    if !common::require_root() {
        return;
    }
    let ns = Ns::new(&["--mount", "--propagation", "private"], &["-m"], "mnt");
    let root = Root::new();
    let dir = root.path().display().to_string();
    // The tree lives on the namespace's own tmpfs: written from inside.
    ns.sh(&format!(
        "mount -t tmpfs nodeward-test {dir} && mount --make-private {dir} && \
         mkdir -p {dir}/run/systemd {dir}/dev && echo lxc > {dir}/run/systemd/container && : > {dir}/dev/console"
    ));
    // The control: private before, as LXC leaves it (no `shared:` field).
    assert!(
        !mount_line(&ns, &root).contains("shared:"),
        "{}",
        mount_line(&ns, &root)
    );

    let plan = ns.nodeward(&root, &["plan", "--only", "container"]).ok();
    let shown = squash(&plan.stdout);
    assert!(
        shown.contains("In a container: lxc, privileged"),
        "{}",
        plan.stdout
    );
    assert!(
        shown.contains("~ / make the mount shared, recursively (now private)"),
        "{}",
        plan.stdout
    );
    assert!(
        shown.contains("+ /dev/kmsg link → /dev/console"),
        "{}",
        plan.stdout
    );
    assert!(
        !mount_line(&ns, &root).contains("shared:"),
        "plan must not change it"
    );

    ns.nodeward(&root, &["apply", "--only", "container"]).ok();
    assert!(
        mount_line(&ns, &root).contains("shared:"),
        "{}",
        mount_line(&ns, &root)
    );
    assert_eq!(ns.sh(&format!("readlink {dir}/dev/kmsg")), "/dev/console");
    let json = ns
        .nodeward(&root, &["plan", "--only", "container", "--output", "json"])
        .ok()
        .json();
    assert_eq!(json["container"]["kind"], "lxc", "{json}");
    assert_eq!(json["steps"][0]["changes"], serde_json::json!([]), "{json}");

    // Drift: a private root again is shared again.
    ns.sh(&format!("mount --make-private {dir}"));
    let drift = ns.nodeward(&root, &["plan", "--only", "container", "--detailed-exitcode"]);
    assert_eq!(drift.code, 4, "{}", drift.stdout);
    ns.nodeward(&root, &["apply", "--only", "container"]).ok();
    assert!(mount_line(&ns, &root).contains("shared:"));
    ns.sh(&format!("umount {dir}"));
}

/// The host's values of keys no container may write, put back whatever happens.
struct HostKeys(Vec<(&'static str, String)>);

impl HostKeys {
    fn snapshot() -> HostKeys {
        HostKeys(common::GLOBAL_SYSCTLS.iter().map(|k| (*k, read_key(k))).collect())
    }
}

impl Drop for HostKeys {
    fn drop(&mut self) {
        for (k, v) in &self.0 {
            let _ = std::fs::write(format!("/proc/sys/{}", k.replace('.', "/")), v);
        }
    }
}

fn read_key(key: &str) -> String {
    std::fs::read_to_string(format!("/proc/sys/{}", key.replace('.', "/")))
        .expect("host value")
        .trim()
        .to_owned()
}

#[test]
fn in_a_container_host_wide_keys_are_left_to_the_host_and_its_own_are_set() {
    if !common::require_root() {
        return;
    }
    let host = HostKeys::snapshot();
    let ns = Ns::new(&["--net"], &["-n"], "net");
    let root = Root::new();
    root.write("run/systemd/container", "lxc\n");
    // The built-in defaults, host-wide tuning included (kernel.panic = 10, vm.overcommit_memory =
    // 1, inotify limits): all writable from here as root, none of them ours inside a container.
    // Conntrack: read-only in this namespace, and what the host has meets the minimum.
    let conntrack: u64 = ns
        .sh("cat /proc/sys/net/netfilter/nf_conntrack_max")
        .parse()
        .expect("number");
    root.write(
        "etc/nodeward/config.d/10-test.toml",
        &format!("[sysctl]\n\"net.netfilter.nf_conntrack_max\" = {{ min = {conntrack} }}\n"),
    );
    ns.sh("echo 0 > /proc/sys/net/ipv4/ip_forward");
    let run = ns.nodeward(&root, &["apply", "--only", "sysctl"]).ok();
    let shown = squash(&run.stdout);
    assert!(shown.contains("net.ipv4.ip_forward set 0 → 1"), "{}", run.stdout);
    assert!(
        shown.contains(&format!(
            "net.netfilter.nf_conntrack_max: the host's, {conntrack} ≥ {conntrack}"
        )),
        "{}",
        run.stdout
    );
    assert!(
        shown.contains("inside this lxc container:")
            && shown.contains("the host's (never written from inside)"),
        "{}",
        run.stdout
    );
    assert_eq!(ns.sh("cat /proc/sys/net/ipv4/ip_forward"), "1");
    for (k, before) in &host.0 {
        assert_eq!(&read_key(k), before, "{k}: a container must not retune the host");
    }
    let dropin = std::fs::read_to_string(root.path().join("etc/sysctl.d/90-nodeward.conf")).expect("drop-in");
    assert!(dropin.contains("net.ipv4.ip_forward = 1"), "{dropin}");
    assert!(
        !dropin.contains("kernel.") && !dropin.contains("vm."),
        "systemd-sysctl in the container would write them at its next boot: {dropin}"
    );
    let again = ns.nodeward(&root, &["plan", "--only", "sysctl", "--detailed-exitcode"]);
    assert_eq!(again.code, 0, "a second run changes nothing: {}", again.stdout);

    // A host below the minimum: a failed item with the host's command; the container's own keys
    // are still set (each key stands alone, as systemd-sysctl applies them).
    let wanted = conntrack + 1;
    root.write(
        "etc/nodeward/config.d/10-test.toml",
        &format!("[sysctl]\n\"net.netfilter.nf_conntrack_max\" = {{ min = {wanted} }}\n"),
    );
    ns.sh("echo 0 > /proc/sys/net/ipv4/ip_forward");
    let failed = ns.nodeward(&root, &["apply", "--only", "sysctl"]);
    assert_ne!(failed.code, 0, "{}", failed.stdout);
    let shown = squash(&failed.stdout);
    assert!(
        shown.contains(&format!(
            "net.netfilter.nf_conntrack_max is the host's and this lxc container cannot set it: current {conntrack}, \
             wanted ≥ {wanted}; on the host: `sysctl -w net.netfilter.nf_conntrack_max={wanted}`"
        )),
        "{}",
        failed.stdout
    );
    assert_eq!(
        ns.sh("cat /proc/sys/net/ipv4/ip_forward"),
        "1",
        "the other keys are applied"
    );
    drop(host);
}
