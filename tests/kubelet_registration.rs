//! What the kubelet registers, by the kubelet's own rules: nodeward starts the kubelet (through the
//! stand-in engine), and the stand-in kubelet (tests/support/kubelet_standin.rs, written apart from
//! nodeward's code) parses that exact argv and the files it names as the real kubelet does, then
//! prints the node it would register. Worker and controller × 0, 1 and 3 user taints and labels, with
//! nodeward's KubeletConfiguration and with Typhoon's own.

mod common;
#[path = "support/engine.rs"]
mod engine;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::Root;

const IMAGE: &str = "quay.io/poseidon/kubelet:v1.36.1";

/// Typhoon's kubelet.yaml as its Butane writes it: /healthz off, no taints in it.
const TYPHOON_KUBELET_YAML: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
authentication:\n  anonymous:\n    enabled: false\n  webhook:\n    enabled: true\n  x509:\n    clientCAFile: /etc/kubernetes/ca.crt\n\
authorization:\n  mode: Webhook\ncgroupDriver: systemd\nclusterDNS:\n  - 10.3.0.10\nclusterDomain: cluster.local\n\
healthzPort: 0\nrotateCertificates: true\nshutdownGracePeriod: 45s\nshutdownGracePeriodCriticalPods: 30s\n\
staticPodPath: /etc/kubernetes/manifests\nreadOnlyPort: 0\nresolvConf: /run/systemd/resolve/resolv.conf\n\
volumePluginDir: /var/lib/kubelet/volumeplugins\n";

struct Started {
    root: Root,
    argv: Vec<String>,
    _engine: tempfile::TempDir,
}

/// nodeward's `apply` on a fresh node with `config`; the kubelet's argv as the engine started it.
fn start(config: &str, typhoon_yaml: bool) -> Started {
    let root = Root::new();
    let engine = tempfile::tempdir().expect("tempdir");
    let bin = engine::engine_dir(engine.path(), "podman", &[IMAGE]);
    for m in nodeward::kubelet::spec::default_mounts() {
        std::fs::create_dir_all(root.path().join(m.source.trim_start_matches('/'))).expect("mkdir");
    }
    root.write("etc/kubernetes/kubeconfig", "apiVersion: v1\nkind: Config\n");
    let sock = root.path().join("run/containerd/containerd.sock");
    std::fs::create_dir_all(sock.parent().expect("parent")).expect("mkdir");
    std::mem::forget(std::os::unix::net::UnixListener::bind(&sock).expect("bind"));
    if typhoon_yaml {
        root.write("etc/kubernetes/kubelet.yaml", TYPHOON_KUBELET_YAML);
    }
    root.write(
        "etc/nodeward/config.d/10-node.toml",
        &format!(
            "[kubelet]\nruntime = 'podman'\nimage = '{IMAGE}'\nallow_tag = true\nstop_timeout_seconds = 5\n{config}"
        ),
    );
    let out = Command::new(common::BIN)
        .arg("--root")
        .arg(root.path())
        .args([
            "--kernel",
            "skip",
            "--containers",
            "live",
            "apply",
            "--only",
            "kubelet",
        ])
        .env(
            "PATH",
            format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default()),
        )
        .output()
        .expect("run nodeward");
    assert!(
        out.status.success(),
        "apply: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    // The engine's `run -d` returns before its kubelet process has written its argv: wait for the
    // line (a hang detector; it comes in milliseconds, later on a busy machine).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let argv = loop {
        if let Some(l) = engine::log(&bin, "argv.log").last() {
            break l.split(' ').map(str::to_owned).collect();
        }
        assert!(std::time::Instant::now() < deadline, "the kubelet was started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    // Stop the stand-in engine's kubelet: only its argv is needed.
    let _ = Command::new(bin.join("podman"))
        .args(["rm", "-f", "kubelet"])
        .output();
    Started {
        root,
        argv,
        _engine: engine,
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The stand-in kubelet run on `argv` (files read below `root`): its output.
fn kubelet(root: &Path, argv: &[String]) -> Output {
    Command::new(engine::kubelet_standin())
        .args(argv)
        .env("KUBELET_STANDIN_ROOT", root)
        .env("KUBELET_STANDIN_PARSE_ONLY", "1")
        .env("KUBELET_STANDIN_VERSION", "1.36")
        .output()
        .expect("run the stand-in kubelet")
}

/// The node the kubelet would register, from its stdout.
fn registered(out: &Output) -> serde_json::Value {
    let stdout = text(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("kubelet stand-in: node "))
        .unwrap_or_else(|| panic!("no node registered: {stdout}{}", text(&out.stderr)));
    serde_json::from_str(line).expect("node json")
}

fn taint_set(node: &serde_json::Value) -> (usize, BTreeSet<String>) {
    let list = node["taints"].as_array().cloned().unwrap_or_default();
    let set = list
        .iter()
        .map(|t| {
            format!(
                "{}={}:{}",
                t["key"].as_str().unwrap_or(""),
                t["value"].as_str().unwrap_or(""),
                t["effect"].as_str().unwrap_or("")
            )
        })
        .collect();
    (list.len(), set)
}

fn toml_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("'{i}'")).collect();
    format!("[{}]", quoted.join(", "))
}

#[test]
fn every_role_registers_its_taints_and_labels_with_the_users_each_once() {
    let user_taints: [&[&str]; 3] = [
        &[],
        &["example.com/dedicated=infra:NoSchedule"],
        // The role's own taint again (as k:Effect), and two more.
        &[
            "node-role.kubernetes.io/controller:NoSchedule",
            "example.com/gpu=true:NoExecute",
            "example.com/zone=a:PreferNoSchedule",
        ],
    ];
    let user_labels: [&[(&str, &str)]; 3] = [
        &[],
        &[("example.com/pool", "infra")],
        &[
            ("node.kubernetes.io/node", ""),
            ("example.com/pool", "gpu"),
            ("example.com/rack", "r1"),
        ],
    ];
    for role in ["worker", "controller"] {
        for (taints, labels) in user_taints.iter().zip(user_labels.iter()) {
            // The worker role's label again is only a duplicate on a worker.
            let labels: Vec<&(&str, &str)> = labels
                .iter()
                .filter(|(k, _)| role == "worker" || *k != "node.kubernetes.io/node")
                .collect();
            for typhoon_yaml in [false, true] {
                let label_toml: Vec<String> = labels.iter().map(|(k, v)| format!("'{k}' = '{v}'")).collect();
                let config = format!(
                    "[node]\nrole = '{role}'\nhostname = 'node-1'\ntaints = {}\nlabels = {{ {} }}\n",
                    toml_list(taints),
                    label_toml.join(", ")
                );
                let node = start(&config, typhoon_yaml);
                let out = kubelet(node.root.path(), &node.argv);
                let case = format!(
                    "{role}, taints {taints:?}, labels {labels:?}, Typhoon's kubelet.yaml: {typhoon_yaml}\nargv {:?}",
                    node.argv
                );
                assert!(
                    out.status.success(),
                    "{case}: the kubelet refused: {}",
                    text(&out.stderr)
                );
                let got = registered(&out);

                let mut want: BTreeSet<String> = BTreeSet::new();
                if role == "controller" {
                    want.insert("node-role.kubernetes.io/controller=:NoSchedule".into());
                }
                for t in taints.iter() {
                    let (kv, effect) = t.rsplit_once(':').expect("effect");
                    let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                    want.insert(format!("{k}={v}:{effect}"));
                }
                let (count, set) = taint_set(&got);
                assert_eq!(set, want, "{case}");
                assert_eq!(count, want.len(), "{case}: each taint once");

                let got_labels = got["labels"].as_object().expect("labels");
                let role_label = if role == "controller" {
                    ("node.kubernetes.io/controller", "true")
                } else {
                    ("node.kubernetes.io/node", "")
                };
                for (k, v) in labels.iter().map(|l| **l).chain([role_label]) {
                    assert_eq!(
                        got_labels.get(k).and_then(|v| v.as_str()),
                        Some(v),
                        "{case}: label {k}"
                    );
                }
                let expected = labels
                    .iter()
                    .map(|(k, _)| *k)
                    .chain([role_label.0])
                    .collect::<BTreeSet<_>>()
                    .len()
                    + 3;
                assert_eq!(got_labels.len(), expected, "{case}: {got_labels:?}");
                let labels_flags = node
                    .argv
                    .iter()
                    .filter(|a| a.starts_with("--node-labels"))
                    .count();
                assert_eq!(labels_flags, 1, "{case}: one --node-labels");
                assert!(
                    node.argv
                        .iter()
                        .filter(|a| a.starts_with("--register-with-taints"))
                        .count()
                        <= 1,
                    "{case}"
                );

                // With nodeward's own KubeletConfiguration, nothing deprecated is passed as a flag.
                let stderr = text(&out.stderr);
                if !typhoon_yaml {
                    assert!(!stderr.contains("has been deprecated"), "{case}: {stderr}");
                    assert!(
                        !node.argv.iter().any(|a| a.starts_with("--register-with-taints")),
                        "{case}"
                    );
                }
            }
        }
    }
}

#[test]
fn control_typhoons_per_taint_flags_lose_all_but_the_last() {
    // What nodeward passed before, and Typhoon's worker template still does: the stand-in registers
    // only the last taint, as the real kubelet does. Without this the test above could not fail.
    let node = start("[node]\nrole = 'controller'\nhostname = 'c-0'\n", true);
    let mut argv: Vec<String> = node
        .argv
        .iter()
        .filter(|a| !a.starts_with("--register-with-taints"))
        .cloned()
        .collect();
    argv.push("--register-with-taints=node-role.kubernetes.io/controller=:NoSchedule".into());
    argv.push("--register-with-taints=example.com/dedicated=infra:NoSchedule".into());
    let (_, set) = taint_set(&registered(&kubelet(node.root.path(), &argv)));
    assert_eq!(
        set,
        BTreeSet::from(["example.com/dedicated=infra:NoSchedule".to_owned()])
    );
    // A duplicate key and effect in one list: the kubelet does not start.
    argv.push("--register-with-taints=k:NoSchedule,k=:NoSchedule".into());
    let out = kubelet(node.root.path(), &argv);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("duplicated taints with the same key and effect"));
}

#[test]
fn the_stand_in_refuses_what_the_kubelet_refuses() {
    let node = start("[node]\nhostname = 'w-0'\n", false);
    for (extra, why) in [
        (
            "--pod-infra-container-image=pause",
            "unknown flag: --pod-infra-container-image",
        ),
        ("--no-such-flag=1", "unknown flag: --no-such-flag"),
        ("--cloud-provider=aws", "only \"external\""),
        ("positional", "unknown command"),
    ] {
        let mut argv = node.argv.clone();
        argv.push(extra.into());
        let out = kubelet(node.root.path(), &argv);
        assert_eq!(out.status.code(), Some(1), "{extra}");
        assert!(text(&out.stderr).contains(why), "{extra}: {}", text(&out.stderr));
    }
    // A drop-in without apiVersion/kind stops the kubelet; a file not ending .conf is not read.
    let mut argv = node.argv.clone();
    argv.push("--config-dir=/etc/kubernetes/kubelet.conf.d".into());
    node.root
        .write("etc/kubernetes/kubelet.conf.d/10-x.yaml", "healthzPort: 1\n");
    assert!(
        kubelet(node.root.path(), &argv).status.success(),
        "only .conf files are read"
    );
    node.root
        .write("etc/kubernetes/kubelet.conf.d/10-x.conf", "healthzPort: 1\n");
    let out = kubelet(node.root.path(), &argv);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("'Kind' is missing"),
        "{}",
        text(&out.stderr)
    );
}

/// Settings the kubelet refuses to start with are configuration errors, each naming the rule.
#[test]
fn settings_the_kubelet_refuses_are_refused_at_load() {
    for (fragment, key, why) in [
        (
            "[kubelet]\ncloud_provider = 'aws'\n",
            "kubelet.cloud_provider",
            "only starts with \"external\"",
        ),
        (
            "[kubelet]\ncloud_provider = 'gce'\nversion = 'v1.33.2'\n",
            "kubelet.cloud_provider",
            "removed in 1.31",
        ),
        (
            "[kubelet]\nextra_args = ['--pod-infra-container-image=registry.k8s.io/pause:3.10']\n",
            "kubelet.extra_args",
            "removed in kubelet 1.35",
        ),
        (
            "[kubelet]\nextra_args = ['--container-runtime=remote']\n",
            "kubelet.extra_args",
            "removed in kubelet 1.27",
        ),
        (
            "[kubelet]\nextra_args = ['--keep-terminated-pod-volumes']\nversion = 'v1.31.0'\n",
            "kubelet.extra_args",
            "removed in kubelet 1.31",
        ),
        (
            "[kubelet]\nextra_args = ['--register-with-taints=a=b:NoSchedule']\n",
            "kubelet.extra_args",
            "node.taints",
        ),
        (
            "[node]\ntaints = ['k=a:NoSchedule', 'k=b:NoSchedule']\n",
            "node.taints",
            "same key and effect",
        ),
        (
            "[node]\nrole = 'controller'\nlabels = { 'node.kubernetes.io/controller' = 'false' }\n",
            "node.labels",
            "one value per label",
        ),
        // The kubelet only logs an address it cannot parse and registers another: refused here.
        // (A value of the wrong form is a parse error: the line is quoted with the key on it.)
        (
            "[node]\nip = '10.0.5'\n",
            "ip = '10.0.5'",
            "not an IPv4 or IPv6 address",
        ),
        (
            "[node]\nip = '10.0.5.1,10.0.5.2'\n",
            "ip = '10.0.5.1,10.0.5.2'",
            "dual-stack pair",
        ),
        (
            "[node]\nip = '10.0.5.1,fd00::1'\n[kubelet]\ncloud_provider = 'aws'\nversion = 'v1.30.4'\n",
            "node.ip",
            "dual-stack pair only with no cloud provider",
        ),
        (
            "[kubelet]\nextra_args = ['--node-ip=10.0.0.1']\n",
            "kubelet.extra_args",
            "node.ip",
        ),
        // A key under its new name and its 0.1 name at once.
        (
            "[node]\nprovider_id = 'aws:///a/i-1'\n[kubelet]\nprovider_id = 'aws:///a/i-2'\n",
            "node.provider_id",
            "old name kubelet.provider_id",
        ),
    ] {
        let root = Root::new();
        let file: PathBuf = root.write("etc/nodeward/config.d/20-x.toml", fragment);
        let out = Command::new(common::BIN)
            .arg("--root")
            .arg(root.path())
            .arg("config")
            .output()
            .expect("run");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{fragment}: {stderr}");
        assert!(
            stderr.contains(&file.display().to_string()),
            "{fragment}: names the file: {stderr}"
        );
        assert!(
            stderr.contains(key) && stderr.contains(why),
            "{fragment}: {stderr}"
        );
    }
    // Before 1.31 an in-tree provider still starts; 'external' always does.
    for ok in [
        "[kubelet]\ncloud_provider = 'external'\n",
        "[kubelet]\ncloud_provider = 'aws'\nversion = 'v1.30.4'\n",
        "[kubelet]\nextra_args = ['--pod-infra-container-image=pause']\nversion = 'v1.34.0'\n",
    ] {
        let root = Root::new();
        root.write("etc/nodeward/config.d/20-x.toml", ok);
        let out = Command::new(common::BIN)
            .arg("--root")
            .arg(root.path())
            .arg("config")
            .output()
            .expect("run");
        assert!(out.status.success(), "{ok}: {}", text(&out.stderr));
    }
}

#[test]
fn a_kubelet_older_than_1_30_gets_no_config_dir() {
    // Typhoon's file turns /healthz off; 1.29 cannot read the drop-in that turns it on.
    let node = start("version = 'v1.29.9'\n[node]\nhostname = 'w-0'\n", true);
    assert!(
        !node.argv.iter().any(|a| a.starts_with("--config-dir")),
        "{:?}",
        node.argv
    );
    let out = Command::new(engine::kubelet_standin())
        .args(&node.argv)
        .env("KUBELET_STANDIN_ROOT", node.root.path())
        .env("KUBELET_STANDIN_PARSE_ONLY", "1")
        .env("KUBELET_STANDIN_VERSION", "1.29")
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", text(&out.stderr));
    // 1.36 (the tag) gets it.
    let node = start("[node]\nhostname = 'w-0'\n", true);
    assert!(
        node.argv
            .iter()
            .any(|a| a == "--config-dir=/etc/kubernetes/kubelet.conf.d"),
        "{:?}",
        node.argv
    );
}

#[test]
fn a_later_admin_drop_in_that_turns_healthz_off_is_seen_as_the_kubelet_merges_it() {
    let root = Root::new();
    root.write("etc/kubernetes/kubelet.yaml", TYPHOON_KUBELET_YAML);
    root.write(
        "etc/nodeward/config.d/10.toml",
        &format!("[node]\nhostname = 'w-0'\n[kubelet]\nimage = '{IMAGE}'\nallow_tag = true\n"),
    );
    let plan = |root: &Root| {
        let out = Command::new(common::BIN)
            .arg("--root")
            .arg(root.path())
            .args(["plan", "--only", "kubelet"])
            .output()
            .expect("run");
        text(&out.stdout)
    };
    // Control: nodeward's drop-in alone turns /healthz on; nothing is said.
    assert!(!plan(&root).contains("only the kubelet's exits are supervised"));
    // An administrator's 95-x.conf, merged after nodeward's 90-, turns it off again.
    root.write(
        "etc/kubernetes/kubelet.conf.d/95-x.conf",
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nhealthzPort: 0\n",
    );
    let out = plan(&root);
    assert!(
        out.contains("95-x.conf turns /healthz off after nodeward's drop-in"),
        "{out}"
    );
    // And one that sorts before nodeward's is overridden by it: /healthz stays on.
    std::fs::rename(
        root.path().join("etc/kubernetes/kubelet.conf.d/95-x.conf"),
        root.path().join("etc/kubernetes/kubelet.conf.d/50-x.conf"),
    )
    .expect("rename");
    assert!(!plan(&root).contains("only the kubelet's exits are supervised"));
}

/// The stand-in checks every scalar KubeletConfiguration field by the Go type the kubelet's source
/// gives it (`docs/reference/kubeletconfig-fields.tsv`): its table is that file's, field for field.
/// (The real kubelet refuses `healthzPort: abc`; `integration/kubelet-parity` showed the stand-in
/// did not, before it had this table.)
#[test]
fn the_standins_field_types_are_the_references() {
    let root = env!("CARGO_MANIFEST_DIR");
    let reference = std::fs::read_to_string(format!("{root}/docs/reference/kubeletconfig-fields.tsv"))
        .expect("reference");
    let standin =
        std::fs::read_to_string(format!("{root}/tests/support/kubelet_standin.rs")).expect("stand-in");
    let scalar = |ty: &str| {
        let t = ty.trim_start_matches('*');
        matches!(
            t,
            "int32"
                | "int64"
                | "bool"
                | "string"
                | "metav1.Duration"
                | "float64"
                | "[]string"
                | "map[string]string"
        )
    };
    let want: Vec<String> = reference
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut cols = l.split('\t');
            Some((cols.next()?, cols.next()?))
        })
        .filter(|(_, ty)| scalar(ty))
        .map(|(f, ty)| format!("(\"{f}\", \"{ty}\"),"))
        .collect();
    let table = standin
        .split("const FIELD_TYPES: &[(&str, &str)] = &[")
        .nth(1)
        .and_then(|t| t.split("];").next())
        .expect("FIELD_TYPES in the stand-in");
    let have: Vec<String> = table
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    assert!(want.len() > 100, "{} scalar fields in the reference", want.len());
    assert_eq!(
        have, want,
        "the stand-in's FIELD_TYPES differ from docs/reference/kubeletconfig-fields.tsv"
    );
}

/// `node.ip` reaches the kubelet as `--node-ip` and the node registers that address, by the
/// kubelet's own rule (the stand-in's `node_ips`); unset, no flag (the kubelet's default route).
#[test]
fn node_ip_is_the_address_the_kubelet_registers() {
    for (ip, registered_ip) in [
        ("10.0.5.11", "10.0.5.11"),
        ("10.0.5.11,fd00::11", "10.0.5.11,fd00::11"),
    ] {
        let node = start(&format!("[node]\nhostname = 'w-0'\nip = '{ip}'\n"), false);
        assert!(node.argv.contains(&format!("--node-ip={ip}")), "{:?}", node.argv);
        let out = kubelet(node.root.path(), &node.argv);
        assert_eq!(registered(&out)["nodeIP"], registered_ip, "{}", text(&out.stderr));
    }
    // Control: without node.ip there is no flag, and no address is chosen by the command line.
    let node = start("[node]\nhostname = 'w-0'\n", false);
    assert!(
        !node.argv.iter().any(|a| a.starts_with("--node-ip")),
        "{:?}",
        node.argv
    );
    assert_eq!(registered(&kubelet(node.root.path(), &node.argv))["nodeIP"], "");
    // Why a typo is refused at load: the kubelet itself starts and registers without the address.
    let mut argv = node.argv.clone();
    argv.push("--node-ip=10.0.5".into());
    let out = kubelet(node.root.path(), &argv);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(registered(&out)["nodeIP"], "");
    assert!(text(&out.stdout).contains("Could not parse some node IP(s), ignoring them"));
}
