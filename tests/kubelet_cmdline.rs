//! Golden command lines for the three runtimes, from a worker configured like Typhoon's
//! `worker_node_labels`/`worker_node_taints`, and the spec rules behind them.
//!
//! The golden files are one argument per line. Set `NODEWARD_UPDATE_GOLDEN=1` to rewrite them, then
//! compare the diff with Typhoon's units (the differences are listed at the top of each file).

use std::path::{Path, PathBuf};

use nodeward::config;
use nodeward::kubelet::runtime::{Kind, Runtime};
use nodeward::kubelet::spec::{self, HostFacts, KubeletSpec, SpecError};
use nodeward::registration::Unresolved;
use nodeward::root::HostRoot;

const DIGEST: &str = "sha256:5b8a1d4c0f6e2a9b7c3d1e0f4a6b8c2d9e1f3a5b7c9d0e2f4a6b8c0d2e4f6a8b";

fn settings(fragment: &str) -> config::Settings {
    let t = tempfile::tempdir().expect("tempdir");
    let dir = t.path().join("etc/nodeward/config.d");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("10-test.toml"), fragment).expect("write");
    config::load(&HostRoot::at(t.path()), None)
        .expect("config loads")
        .settings
}

fn worker() -> KubeletSpec {
    let s = settings(&format!(
        "[node]\nlabels = {{ 'node.kubernetes.io/pool' = 'gpu' }}\ntaints = ['dedicated=gpu:NoSchedule']\n\
         [kubelet]\nimage = 'quay.io/poseidon/kubelet@{DIGEST}'\n"
    ));
    spec::build(
        &s.kubelet,
        &s.registration,
        &HostFacts {
            hostname: "worker-1\n".into(),
            selinux: true,
            ..HostFacts::default()
        },
        "c".repeat(64),
    )
    .expect("spec")
}

fn runtime(kind: Kind) -> Runtime {
    Runtime::new(
        kind,
        PathBuf::from(kind.program()),
        Path::new("/var/cache/kubelet-pod.uuid"),
        Path::new("/run/nodeward/kubelet.pid"),
        &nodeward::root::HostRoot::at("/"),
    )
}

/// Compares `args` with the golden file, ignoring its `#` comment lines.
fn golden(name: &str, args: &[String]) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let header: String = text
        .lines()
        .take_while(|l| l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    let want: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    if std::env::var_os("NODEWARD_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, format!("{header}{}\n", args.join("\n"))).expect("write golden");
        return;
    }
    let got: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_eq!(
        got,
        want,
        "{} differs (NODEWARD_UPDATE_GOLDEN=1 rewrites it)",
        path.display()
    );
}

#[test]
fn podman_command_line_matches_typhoons_fedora_coreos_unit() {
    let spec = worker();
    let image = spec.images[0].clone();
    golden(
        "kubelet-podman.args",
        &runtime("podman".parse::<Kind>().expect("engine")).run_args(&spec, &image, "HASH", false),
    );
}

#[test]
fn docker_command_line_matches_typhoons_flatcar_unit() {
    let spec = worker();
    let image = spec.images[0].clone();
    golden(
        "kubelet-docker.args",
        &runtime("docker".parse::<Kind>().expect("engine")).run_args(&spec, &image, "HASH", false),
    );
}

#[test]
fn rkt_command_line_matches_typhoons_container_linux_unit() {
    let spec = worker();
    let image = spec.images[0].clone();
    golden(
        "kubelet-rkt.args",
        &runtime("rkt".parse::<Kind>().expect("engine")).run_args(&spec, &image, "HASH", false),
    );
}

#[test]
fn controllers_get_typhoons_label_and_taint() {
    let s = settings(&format!(
        "[node]\nrole = 'controller'\nhostname = 'controller-0'\n[kubelet]\nimage = 'quay.io/poseidon/kubelet@{DIGEST}'\n\
         mirrors = ['docker.io/psdn/kubelet@{DIGEST}']\n"
    ));
    let spec = spec::build(
        &s.kubelet,
        &s.registration,
        &HostFacts {
            hostname: "ignored".into(),
            selinux: true,
            ..HostFacts::default()
        },
        String::new(),
    )
    .expect("spec");
    assert!(
        spec.args
            .contains(&"--node-labels=node.kubernetes.io/controller=true".to_owned())
    );
    assert!(
        spec.args
            .contains(&"--register-with-taints=node-role.kubernetes.io/controller=:NoSchedule".to_owned())
    );
    assert!(spec.args.contains(&"--hostname-override=controller-0".to_owned()));
    assert!(
        !spec
            .args
            .iter()
            .any(|a| a == "--node-labels=node.kubernetes.io/node")
    );
    assert_eq!(
        spec.images,
        [
            format!("quay.io/poseidon/kubelet@{DIGEST}"),
            format!("docker.io/psdn/kubelet@{DIGEST}")
        ]
    );
}

#[test]
fn a_node_without_a_real_hostname_waits() {
    let s = settings(&format!(
        "[kubelet]\nimage = 'quay.io/poseidon/kubelet@{DIGEST}'\n"
    ));
    for name in ["localhost", "", "localhost.localdomain", "Bad_Name"] {
        let err = spec::build(
            &s.kubelet,
            &s.registration,
            &HostFacts {
                hostname: name.into(),
                selinux: true,
                ..HostFacts::default()
            },
            String::new(),
        )
        .expect_err(name);
        assert_eq!(err, SpecError::Identity(Unresolved::NoHostname(name.into())));
        assert!(err.to_string().contains("node.hostname"));
    }
    // Upper case from DHCP is lowered, as the kubelet itself does.
    let spec = spec::build(
        &s.kubelet,
        &s.registration,
        &HostFacts {
            hostname: "Node-7".into(),
            selinux: false,
            ..HostFacts::default()
        },
        String::new(),
    )
    .expect("spec");
    assert!(spec.args.contains(&"--hostname-override=node-7".to_owned()));
    // Without SELinux there is no /sys/fs/selinux to mount.
    assert!(!spec.mounts.iter().any(|m| m.source.contains("selinux")));
    // Without SELinux there is no /sys/fs/selinux to mount.
    assert!(!spec.mounts.iter().any(|m| m.source.contains("selinux")));
}

#[test]
fn extra_args_and_mounts_and_the_config_digest_change_the_hash() {
    let base = worker();
    let s = settings(&format!(
        "[node]\nlabels = {{ 'node.kubernetes.io/pool' = 'gpu' }}\ntaints = ['dedicated=gpu:NoSchedule']\n\
         [kubelet]\nimage = 'quay.io/poseidon/kubelet@{DIGEST}'\nextra_args = ['--v=2']\n\
         extra_mounts = [{{ source = '/srv/plugins', read_only = true }}, {{ source = '/data/log', target = '/var/log' }}]\n"
    ));
    let spec = spec::build(
        &s.kubelet,
        &s.registration,
        &HostFacts {
            hostname: "worker-1".into(),
            selinux: true,
            ..HostFacts::default()
        },
        "c".repeat(64),
    )
    .expect("spec");
    assert_eq!(spec.args.last().map(String::as_str), Some("--v=2"));
    let log: Vec<_> = spec.mounts.iter().filter(|m| m.target == "/var/log").collect();
    assert_eq!(log.len(), 1, "an extra mount replaces the default at its target");
    assert_eq!(log[0].source, "/data/log");
    assert!(
        spec.mounts
            .iter()
            .any(|m| m.source == "/srv/plugins" && m.read_only)
    );
    assert_ne!(spec.hash(), base.hash());
    let diff = spec.diff(&base);
    assert!(diff.contains(&"+arg --v=2".to_owned()), "{diff:?}");
    assert!(
        diff.iter().any(|d| d.starts_with("+mount /data/log:/var/log")),
        "{diff:?}"
    );
    let mut other_config = base.clone();
    other_config.config_sha256 = "d".repeat(64);
    assert_ne!(other_config.hash(), base.hash());
    assert_eq!(other_config.diff(&base), ["kubelet configuration file changed"]);
    assert_eq!(worker().hash(), base.hash(), "the hash is stable");
}

#[test]
fn unpinned_images_are_refused_naming_the_key_and_file() {
    let t = tempfile::tempdir().expect("tempdir");
    let dir = t.path().join("etc/nodeward/config.d");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let file = dir.join("20-kubelet.toml");
    std::fs::write(&file, "[kubelet]\nimage = 'quay.io/poseidon/kubelet:v1.34.1'\n").expect("write");
    let err = config::load(&HostRoot::at(t.path()), None)
        .expect_err("refused")
        .to_string();
    assert!(
        err.contains(&file.display().to_string()) && err.contains("kubelet.image") && err.contains("digest"),
        "{err}"
    );
}

/// Typhoon on AWS: `--provider-id` from afterburn's metadata, `--cloud-provider`; DigitalOcean
/// names nodes by private IPv4 from metadata. Without the metadata (or DNS) the kubelet waits, as
/// Typhoon's `Requires=afterburn.service` and `wait-for-dns.service` make it.
#[test]
fn cloud_identity_from_metadata_and_the_waits() {
    let s = settings(&format!(
        "[kubelet]\nimage = 'quay.io/poseidon/kubelet@{DIGEST}'\ncloud_provider = 'external'\n\
         provider_id = 'aws:///${{AFTERBURN_AWS_AVAILABILITY_ZONE}}/${{AFTERBURN_AWS_INSTANCE_ID}}'\n"
    ));
    let meta = spec::parse_metadata(
        "AFTERBURN_AWS_AVAILABILITY_ZONE=us-east-1a\nAFTERBURN_AWS_INSTANCE_ID=\"i-0abc\"\n",
    );
    let facts = HostFacts {
        hostname: "ip-10-0-0-5".into(),
        metadata: Some(("/run/metadata/afterburn".into(), meta)),
        ..HostFacts::default()
    };
    let spec = spec::build(&s.kubelet, &s.registration, &facts, String::new()).expect("spec");
    assert!(
        spec.args
            .contains(&"--provider-id=aws:///us-east-1a/i-0abc".to_owned()),
        "{:?}",
        spec.args
    );
    assert!(spec.args.contains(&"--cloud-provider=external".to_owned()));

    let no_meta = HostFacts {
        hostname: "ip-10-0-0-5".into(),
        ..HostFacts::default()
    };
    let err = spec::build(&s.kubelet, &s.registration, &no_meta, String::new()).expect_err("waits");
    assert!(
        err.to_string().contains("AFTERBURN_AWS_AVAILABILITY_ZONE")
            && err.to_string().contains("/run/metadata/afterburn"),
        "{err}"
    );
    let no_dns = HostFacts {
        dns_ready: Some(false),
        ..facts.clone()
    };
    assert_eq!(
        spec::build(&s.kubelet, &s.registration, &no_dns, String::new()),
        Err(SpecError::NoDns)
    );
    // What the kubelet itself needs comes first, each named; present, the spec is made (control).
    let bare = HostFacts {
        kubeconfig_ready: Some(false),
        runtime_ready: Some(false),
        ..no_dns.clone()
    };
    let err = spec::build(&s.kubelet, &s.registration, &bare, String::new()).expect_err("waits");
    assert_eq!(err, SpecError::NoKubeconfig);
    assert!(err.to_string().contains("/etc/kubernetes/kubeconfig"), "{err}");
    let no_runtime = HostFacts {
        kubeconfig_ready: Some(true),
        ..bare.clone()
    };
    let err = spec::build(&s.kubelet, &s.registration, &no_runtime, String::new()).expect_err("waits");
    assert_eq!(
        err,
        SpecError::NoRuntime("/run/containerd/containerd.sock".into())
    );
    assert!(
        err.to_string().contains("/run/containerd/containerd.sock"),
        "{err}"
    );
    let all_there = HostFacts {
        kubeconfig_ready: Some(true),
        runtime_ready: Some(true),
        dns_ready: Some(true),
        ..facts.clone()
    };
    assert!(spec::build(&s.kubelet, &s.registration, &all_there, String::new()).is_ok());
    // Another CRI named in extra_args is the socket waited for (the kubelet takes the last flag);
    // a non-unix endpoint has nothing on the host to wait for.
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        spec::runtime_socket(&[]),
        Some("/run/containerd/containerd.sock".into())
    );
    assert_eq!(
        spec::runtime_socket(&args(&[
            "--v=2",
            "--container-runtime-endpoint=unix:///run/crio/crio.sock"
        ])),
        Some("/run/crio/crio.sock".into())
    );
    assert_eq!(
        spec::runtime_socket(&args(&[
            "--container-runtime-endpoint",
            "unix:///var/run/cri-dockerd.sock"
        ])),
        Some("/var/run/cri-dockerd.sock".into())
    );
    assert_eq!(
        spec::runtime_socket(&args(&["--container-runtime-endpoint=tcp://10.0.0.1:1234"])),
        None
    );

    let d = settings(&format!(
        "[kubelet]\nimage = 'quay.io/poseidon/kubelet@{DIGEST}'\nnode_name_from = 'AFTERBURN_DIGITALOCEAN_IPV4_PRIVATE_0'\n"
    ));
    let facts = HostFacts {
        hostname: "droplet".into(),
        metadata: Some((
            "/run/metadata/afterburn".into(),
            spec::parse_metadata("AFTERBURN_DIGITALOCEAN_IPV4_PRIVATE_0=10.132.0.7\n"),
        )),
        ..HostFacts::default()
    };
    let spec = spec::build(&d.kubelet, &d.registration, &facts, String::new()).expect("spec");
    assert!(
        spec.args.contains(&"--hostname-override=10.132.0.7".to_owned()),
        "{:?}",
        spec.args
    );
    // The same identity under its 0.2 names in [node]: the same command line and spec hash, so a
    // node that renames its keys keeps its running kubelet.
    let renamed = settings(&format!(
        "[kubelet]\nimage = 'quay.io/poseidon/kubelet@{DIGEST}'\n\
         [node]\nname_from = 'AFTERBURN_DIGITALOCEAN_IPV4_PRIVATE_0'\nmetadata_file = '/run/metadata/afterburn'\n"
    ));
    let again = spec::build(&renamed.kubelet, &renamed.registration, &facts, String::new()).expect("spec");
    assert_eq!(again.hash(), spec.hash());
    let old_aws = spec::build(&s.kubelet, &s.registration, &all_there, String::new()).expect("spec");
    let new_aws = settings(&format!(
        "[kubelet]\nimage = 'quay.io/poseidon/kubelet@{DIGEST}'\ncloud_provider = 'external'\n\
         [node]\nprovider_id = 'aws:///${{AFTERBURN_AWS_AVAILABILITY_ZONE}}/${{AFTERBURN_AWS_INSTANCE_ID}}'\n"
    ));
    let new_aws =
        spec::build(&new_aws.kubelet, &new_aws.registration, &all_there, String::new()).expect("spec");
    assert_eq!(new_aws.args, old_aws.args);
}

/// Typhoon removed the kubelet's /var/lib/calico mount with Calico: only the profiles where Calico
/// may run keep it.
#[test]
fn the_calico_mount_follows_the_cni_profile() {
    for (cni, mounted) in [
        ("cilium", false),
        ("flannel", false),
        ("none", false),
        ("calico", true),
    ] {
        let s = settings(&format!(
            "[node]\ncni = '{cni}'\n[kubelet]\nimage = 'quay.io/poseidon/kubelet@{DIGEST}'\n"
        ));
        let facts = HostFacts {
            hostname: "n1".into(),
            ..HostFacts::default()
        };
        let spec = spec::build(&s.kubelet, &s.registration, &facts, String::new()).expect("spec");
        assert_eq!(
            spec.mounts.iter().any(|m| m.source == "/var/lib/calico"),
            mounted,
            "{cni}"
        );
    }
}

/// The mount table's order and `only` tags are in the hash every running kubelet carries as its
/// label: moving where the table is declared must leave it as it is, or each node would restart
/// its kubelet (through FleetLock) on the nodeward upgrade. Pinned from the table as it was before
/// each engine declared its own mounts; changed on purpose once since, by the node's `/tmp` (a
/// `hostPath` `subPath` under it; CHANGELOG: the one kubelet restart that upgrade costs).
#[test]
fn the_mount_table_keeps_the_hash_running_kubelets_carry() {
    assert_eq!(worker().hash(), "5d1076d05d265ab367ac86bb");
}
