//! An unmanaged-interface list that matches the link of the default route, in a private network
//! namespace with a real default route on a veth link: refused before it is written, and named
//! when it is already in place (baked into an image before the node's first run), with a control
//! list that matches no uplink.

mod common;

use common::Root;

const NETWORK: &str = "etc/systemd/network/05-nodeward-cni.network";

fn uplink_namespace() -> common::Namespaces {
    let ns = common::Namespaces::new(&["--net"], &["-n"], "net");
    ns.sh(
        "ip link add upl0 type veth peer name peer0 && ip addr add 10.9.0.2/24 dev upl0 \
         && ip link set upl0 up && ip link set peer0 up && ip route add default via 10.9.0.1 dev upl0",
    );
    ns
}

fn networkd_root(unmanaged: &str) -> Root {
    let root = Root::new();
    root.write("usr/lib/systemd/systemd-networkd", "");
    root.write(
        "etc/nodeward/config.d/10.toml",
        &format!("[networkd]\nunmanaged = [{unmanaged}]\n"),
    );
    root
}

#[test]
fn a_list_matching_the_uplink_is_refused_or_named() {
    if !common::require_root() {
        return;
    }
    let ns = uplink_namespace();
    // A class that matches upl0: refused, nothing written.
    let root = networkd_root("\"flannel*\", \"[t-v]pl*\"");
    let run = ns.nodeward(&root, &["apply", "--only", "networkd"]);
    assert_ne!(run.code, 0, "{}", run.stdout);
    assert!(
        run.stdout
            .contains("\"[t-v]pl*\" matches upl0, the link of the default route")
            && run.stdout.contains("not written"),
        "{}{}",
        run.stdout,
        run.stderr
    );
    assert!(!root.path().join(NETWORK).exists(), "written anyway");

    // The same list written under --root (an image: no live links, said in the plan), then run on
    // the node: the file in place is named.
    let image = root.run(&["apply", "--only", "networkd"]).ok();
    assert!(
        image
            .stdout
            .contains("not checked against the default route's link here"),
        "{}",
        image.stdout
    );
    assert!(root.path().join(NETWORK).exists());
    let run = ns.nodeward(&root, &["apply", "--only", "networkd"]);
    assert_ne!(run.code, 0, "{}", run.stdout);
    assert!(
        run.stdout.contains("matches upl0") && run.stdout.contains("the file in place has it"),
        "{}",
        run.stdout
    );

    // Control: a list that matches no uplink is written on the node.
    let ok = networkd_root("\"flannel*\", \"cni0\"");
    ns.nodeward(&ok, &["apply", "--only", "networkd"]).ok();
    assert!(ok.path().join(NETWORK).exists());
}
