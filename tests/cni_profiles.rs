//! Today's Typhoon: the CNI profiles' host files as golden files, `ca.crt` derived from a
//! kubeconfig nodeward did not install, and node labels the kubelet would refuse.
//!
//! Golden files live in `tests/golden/cni/PROFILE/`; `NODEWARD_UPDATE_GOLDEN=1` rewrites them.

mod common;

use common::Root;

/// The files a profile decides, by golden name.
const FILES: &[(&str, &str)] = &[
    ("sysctl.conf", "etc/sysctl.d/90-nodeward.conf"),
    (
        "networkmanager.conf",
        "etc/NetworkManager/conf.d/nodeward-cni.conf",
    ),
    ("50-flannel.link", "etc/systemd/network/50-flannel.link"),
    ("networkd.network", "etc/systemd/network/05-nodeward-cni.network"),
    (
        "logind.conf",
        "etc/systemd/logind.conf.d/nodeward-inhibitors.conf",
    ),
];

fn golden_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/cni")
}

/// A root where NetworkManager and systemd-networkd are installed, configured for `cni` (`None`:
/// not declared).
fn node(cni: Option<&str>) -> Root {
    let root = Root::new();
    root.write("usr/sbin/NetworkManager", "");
    root.write("usr/lib/systemd/systemd-networkd", "");
    // Fixed so the conntrack minimum (CPU-dependent) does not make the golden files host-specific.
    let mut cfg = String::from("[sysctl]\n\"net.netfilter.nf_conntrack_max\" = { min = 131072 }\n");
    if let Some(cni) = cni {
        cfg.push_str(&format!("[node]\ncni = \"{cni}\"\n"));
    }
    root.write("etc/nodeward/config.d/10-node.toml", &cfg);
    root
}

#[test]
fn each_profile_renders_its_golden_files() {
    let update = std::env::var_os("NODEWARD_UPDATE_GOLDEN").is_some();
    let mut mismatches = Vec::new();
    for (profile, cni) in [
        ("any", None),
        ("cilium", Some("cilium")),
        ("flannel", Some("flannel")),
        ("calico", Some("calico")),
        ("none", Some("none")),
        // Flatcar (its os-release): Typhoon leaves rp_filter to the distribution there.
        ("cilium-flatcar", Some("cilium")),
        ("calico-flatcar", Some("calico")),
    ] {
        let root = node(cni);
        if profile.ends_with("-flatcar") {
            root.write(
                "etc/os-release",
                "NAME=\"Flatcar Container Linux by Kinvolk\"\nID=flatcar\nID_LIKE=coreos\n",
            );
        }
        root.run(&["apply", "--only", "hostfiles,sysctl,nm,networkd"])
            .ok();
        // Idempotent: a second plan is empty.
        let again = root.run(&[
            "plan",
            "--only",
            "hostfiles,sysctl,nm,networkd",
            "--detailed-exitcode",
        ]);
        assert_eq!(again.code, 0, "{profile}: {}", again.stdout);
        for (golden, path) in FILES {
            let got = std::fs::read_to_string(root.path().join(path)).ok();
            let file = golden_dir().join(profile).join(golden);
            if update {
                match &got {
                    Some(text) => {
                        std::fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
                        std::fs::write(&file, text).expect("write golden");
                    }
                    None => {
                        let _ = std::fs::remove_file(&file);
                    }
                }
                continue;
            }
            let want = std::fs::read_to_string(&file).ok();
            if got != want {
                mismatches.push(format!("{profile}/{golden}: got {got:?}, golden {want:?}"));
            }
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

#[test]
fn switching_profile_removes_what_the_old_one_wrote() {
    let root = node(Some("flannel"));
    root.run(&["apply", "--only", "hostfiles"]).ok();
    assert!(root.path().join(FILES[2].1).exists());
    root.write("etc/nodeward/config.d/20-cni.toml", "[node]\ncni = \"cilium\"\n");
    let plan = root.run(&["plan", "--only", "hostfiles"]).ok();
    assert!(
        plan.stdout.contains("- /etc/systemd/network/50-flannel.link"),
        "{}",
        plan.stdout
    );
    root.run(&["apply", "--only", "hostfiles"]).ok();
    assert!(!root.path().join(FILES[2].1).exists());
    // An admin's own file at that path is theirs.
    root.write(FILES[2].1, "[Match]\nOriginalName=flannel*\n");
    let plan = root.run(&["plan", "--only", "hostfiles", "--detailed-exitcode"]);
    assert_eq!(plan.code, 0, "{}", plan.stdout);
}

#[test]
fn legacy_networkmanager_file_is_replaced() {
    let root = node(Some("calico"));
    let legacy = "etc/NetworkManager/conf.d/nodeward-calico.conf";
    root.write(
        legacy,
        "# Written by nodeward; old name\n[keyfile]\nunmanaged-devices=interface-name:cali*\n",
    );
    root.run(&["apply", "--only", "nm"]).ok();
    assert!(!root.path().join(legacy).exists());
    assert!(root.path().join(FILES[1].1).exists());
}

fn kubeconfig(ca: &str) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(ca);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: https://api:6443\n    certificate-authority-data: {b64}\n"
    )
}

/// Typhoon delivers `/etc/kubernetes/kubeconfig` through Ignition to controllers too; the kubelet's
/// `clientCAFile` must exist there though no bundle layout places a kubeconfig.
#[test]
fn ca_is_derived_on_a_controller_from_a_kubeconfig_nodeward_did_not_install() {
    let root = Root::new();
    root.write("etc/nodeward/config.d/10.toml", "[node]\nrole = \"controller\"\n");
    let ca1 = "-----BEGIN CERTIFICATE-----\nMIIBone\n-----END CERTIFICATE-----\n";
    root.write("etc/kubernetes/kubeconfig", &kubeconfig(ca1));
    let plan = root.run(&["plan", "--only", "hostfiles"]).ok();
    assert!(plan.stdout.contains("/etc/kubernetes/ca.crt"), "{}", plan.stdout);
    root.run(&["apply", "--only", "hostfiles"]).ok();
    let ca_path = root.path().join("etc/kubernetes/ca.crt");
    assert_eq!(std::fs::read_to_string(&ca_path).expect("ca.crt"), ca1);
    let again = root.run(&["plan", "--only", "hostfiles", "--detailed-exitcode"]);
    assert_eq!(again.code, 0, "{}", again.stdout);

    // The provisioning (or an admin) replaces the kubeconfig: the CA follows at the next converge.
    let ca2 = "-----BEGIN CERTIFICATE-----\nMIIBtwo\n-----END CERTIFICATE-----\n";
    root.write("etc/kubernetes/kubeconfig", &kubeconfig(ca2));
    let drift = root.run(&["plan", "--only", "hostfiles", "--detailed-exitcode"]);
    assert_eq!(drift.code, 4, "{}", drift.stdout);
    root.run(&["apply", "--only", "hostfiles"]).ok();
    assert_eq!(std::fs::read_to_string(&ca_path).expect("ca.crt"), ca2);
}

#[test]
fn ca_from_a_certificate_authority_path_and_bad_kubeconfigs() {
    let root = Root::new();
    let ca = "-----BEGIN CERTIFICATE-----\nMIIBpath\n-----END CERTIFICATE-----\n";
    root.write("etc/pki/cluster-ca.pem", ca);
    root.write(
        "etc/kubernetes/kubeconfig",
        "clusters:\n- cluster:\n    certificate-authority: /etc/pki/cluster-ca.pem\n    server: https://api:6443\n",
    );
    root.run(&["apply", "--only", "hostfiles"]).ok();
    assert_eq!(
        std::fs::read_to_string(root.path().join("etc/kubernetes/ca.crt")).expect("ca.crt"),
        ca
    );

    // Pointing at ca.crt itself: it is the admin's, left alone.
    let root = Root::new();
    root.write("etc/kubernetes/ca.crt", "admin's\n");
    root.write(
        "etc/kubernetes/kubeconfig",
        "clusters:\n- cluster:\n    certificate-authority: /etc/kubernetes/ca.crt\n",
    );
    let run = root.run(&["apply", "--only", "hostfiles"]).ok();
    assert!(run.stdout.contains("left as provided"), "{}", run.stdout);
    assert_eq!(
        std::fs::read_to_string(root.path().join("etc/kubernetes/ca.crt")).expect("ca.crt"),
        "admin's\n"
    );

    // No CA at all: an error naming the kubeconfig, nothing written.
    let root = Root::new();
    root.write("etc/kubernetes/kubeconfig", "apiVersion: v1\n");
    let run = root.run(&["apply", "--only", "hostfiles"]);
    // A read of a file being delivered: 7, trying again later may help.
    assert_eq!(run.code, 7, "{}", run.stdout);
    assert!(
        run.stdout.contains("etc/kubernetes/kubeconfig") && run.stdout.contains("neither"),
        "{}",
        run.stdout
    );
    assert!(!root.path().join("etc/kubernetes/ca.crt").exists());
}

#[test]
fn labels_the_kubelet_refuses_are_a_config_error_naming_the_key() {
    let root = Root::new();
    let f = root.write(
        "etc/nodeward/config.d/30-labels.toml",
        "[node.labels]\n\"node-role.kubernetes.io/worker\" = \"\"\n",
    );
    let before = root.snapshot();
    let run = root.run(&["apply"]);
    assert_eq!(run.code, 3, "{}\n{}", run.stdout, run.stderr);
    let all = format!("{}{}", run.stdout, run.stderr);
    assert!(
        all.contains("node-role.kubernetes.io/worker") && all.contains(&f.display().to_string()),
        "{all}"
    );
    assert_eq!(before, root.snapshot(), "nothing may change");
}

const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn kubelet_root(extra: &str) -> Root {
    let root = Root::new();
    root.write("etc/hostname", "node-1\n");
    root.write(
        "etc/nodeward/config.d/10.toml",
        &format!("[kubelet]\nimage = 'quay.io/poseidon/kubelet@{DIGEST}'\n{extra}"),
    );
    root
}

fn driver(root: &Root) -> String {
    let yaml =
        std::fs::read_to_string(root.path().join("etc/kubernetes/kubelet.yaml")).expect("kubelet.yaml");
    yaml.lines()
        .find_map(|l| l.strip_prefix("cgroupDriver: "))
        .expect("cgroupDriver")
        .to_owned()
}

/// The kubelet's cgroup driver follows containerd's on every host: nodeward's own containerd file
/// (systemd), someone else's (what it says), none (systemd, Typhoon's choice). The v1 rule that
/// gave cgroupfs while containerd said systemd is gone.
#[test]
fn kubelet_and_containerd_agree_on_the_cgroup_driver() {
    let none = kubelet_root("");
    none.run(&["apply", "--only", "hostfiles,kubelet"]).ok();
    assert_eq!(driver(&none), "systemd");
    assert!(
        !none.path().join("etc/containerd/config.toml").exists(),
        "not managed by default"
    );

    let theirs = kubelet_root("");
    theirs.write(
        "etc/containerd/config.toml",
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\nSystemdCgroup = false\n",
    );
    theirs.run(&["apply", "--only", "hostfiles,kubelet"]).ok();
    assert_eq!(driver(&theirs), "cgroupfs");

    let ours = kubelet_root("[containerd]\nmanage = true\n");
    ours.write("etc/containerd/config.toml", "version = 2\n# the distro's\n");
    let plan = ours.run(&["plan", "--only", "hostfiles"]).ok();
    assert!(
        plan.stdout.contains("/etc/containerd/config.toml"),
        "{}",
        plan.stdout
    );
    ours.run(&["apply", "--only", "hostfiles,kubelet"]).ok();
    let toml = std::fs::read_to_string(ours.path().join("etc/containerd/config.toml")).expect("config.toml");
    assert!(
        toml.contains("SystemdCgroup = true") && toml.contains("oom_score = -999"),
        "{toml}"
    );
    assert_eq!(driver(&ours), "systemd");
    let again = ours.run(&["plan", "--only", "hostfiles,kubelet", "--detailed-exitcode"]);
    assert_eq!(again.code, 0, "{}", again.stdout);
}

/// An image root with a resolv.conf that names no nameserver: the kubelet step waits and says why.
#[test]
fn the_kubelet_waits_for_a_nameserver() {
    let root = kubelet_root("");
    root.write("etc/resolv.conf", "# generated before the network is up\n");
    let run = root.run(&["plan", "--only", "kubelet"]);
    // A wait, not a permanent failure: 7.
    assert_eq!(run.code, 7, "{}", run.stdout);
    assert!(run.stdout.contains("waiting for DNS"), "{}", run.stdout);
    root.write("etc/resolv.conf", "nameserver 10.0.0.2\n");
    root.run(&["plan", "--only", "kubelet"]).ok();
}
