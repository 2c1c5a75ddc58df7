//! The `dirs` and `selinux` steps through the real binary: plan, apply, idempotence, drift.

mod common;

use common::Root;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

const EXPECTED: &[(&str, u32)] = &[
    ("etc/kubernetes", 0o755),
    ("etc/kubernetes/manifests", 0o755),
    ("etc/kubernetes/pki", 0o755),
    ("etc/cni/net.d", 0o755),
    ("opt/cni/bin", 0o755),
    ("var/lib/kubelet", 0o750),
    ("var/lib/kubelet/volumeplugins", 0o755),
    ("var/lib/calico", 0o755),
    ("var/lib/containerd", 0o711),
    ("var/log/pods", 0o755),
    ("var/log/containers", 0o755),
];

#[test]
fn plan_lists_every_directory_then_apply_creates_them_then_nothing_moves() {
    let root = Root::new();
    let plan = root.run(&["plan"]).ok();
    for (dir, mode) in EXPECTED {
        let line = plan
            .stdout
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(&format!("/{dir}")))
            .unwrap_or_else(|| panic!("/{dir} missing from plan:\n{}", plan.stdout));
        assert!(
            line.contains(&format!("create directory {mode:04o} root:root")),
            "{line}"
        );
    }
    assert!(plan.stdout.contains("SELinux is not enabled"), "{}", plan.stdout);
    assert!(root.snapshot().is_empty(), "plan must not touch anything");

    let json = root.run(&["plan", "--output", "json"]).ok().json();
    let dirs = &json["steps"][1];
    assert_eq!(dirs["step"], "dirs");
    assert!(
        dirs["changes"]
            .as_array()
            .expect("changes")
            .iter()
            .any(|c| c["subject"] == "/var/lib/kubelet"
                && c["action"] == "create_dir"
                && c["mode"] == "0750"
                && c["owner"] == "root:root")
    );

    let applied = root.run(&["apply"]).ok();
    assert!(
        applied.stdout.contains("the node is converged"),
        "{}",
        applied.stdout
    );
    for (dir, mode) in EXPECTED {
        let m = std::fs::metadata(root.path().join(dir)).unwrap_or_else(|e| panic!("{dir}: {e}"));
        assert!(m.is_dir());
        assert_eq!(m.mode() & 0o7777, *mode, "{dir}");
        assert_eq!((m.uid(), m.gid()), (0, 0), "{dir}");
    }

    let before = root.snapshot();
    let again = root.run(&["plan", "--detailed-exitcode"]);
    assert_eq!(again.code, 0, "{}", again.stdout);
    assert!(again.stdout.contains("No changes"), "{}", again.stdout);
    let second = root.run(&["apply"]).ok();
    assert!(second.stdout.contains("Applied 0 change(s)"), "{}", second.stdout);
    assert_eq!(
        before,
        root.snapshot(),
        "a second apply must change no mode, owner, mtime or ctime"
    );
}

#[test]
fn drift_is_planned_and_repaired() {
    let root = Root::new();
    root.run(&["apply"]).ok();
    let kubelet = root.path().join("var/lib/kubelet");
    std::fs::set_permissions(&kubelet, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    std::os::unix::fs::chown(&kubelet, Some(4242), Some(4242)).expect("chown");

    let plan = root.run(&["plan", "--detailed-exitcode"]);
    assert_eq!(plan.code, 4, "{}", plan.stdout);
    assert!(
        plan.stdout
            .contains("/var/lib/kubelet  owner 4242:4242 → root:root"),
        "{}",
        plan.stdout
    );
    assert!(plan.stdout.contains("mode 0777 → 0750"), "{}", plan.stdout);
    let status = root.run(&["status"]);
    assert_eq!(status.code, 4, "{}", status.stdout);

    root.run(&["apply"]).ok();
    let m = std::fs::metadata(&kubelet).expect("stat");
    assert_eq!((m.mode() & 0o7777, m.uid(), m.gid()), (0o750, 0, 0));
    assert_eq!(root.run(&["status"]).code, 0);
}

#[test]
fn owners_resolve_from_the_roots_own_account_files() {
    let root = Root::new();
    root.write("usr/lib/passwd", "etcd:x:232:232::/var/lib/etcd:/sbin/nologin\n");
    root.write("usr/lib/group", "etcd:x:232:\n");
    let cfg = root.write(
        "etc/nodeward/config.d/50-etcd.toml",
        "[dirs.'/var/lib/etcd']\nmode = '0700'\nowner = 'etcd'\ngroup = 'etcd'\n",
    );
    assert!(cfg.exists());
    let plan = root.run(&["plan"]).ok();
    assert!(
        plan.stdout.contains("/var/lib/etcd") && plan.stdout.contains("0700 etcd:etcd"),
        "{}",
        plan.stdout
    );
    root.run(&["apply"]).ok();
    let m = std::fs::metadata(root.path().join("var/lib/etcd")).expect("stat");
    assert_eq!((m.mode() & 0o7777, m.uid(), m.gid()), (0o700, 232, 232));
}

#[test]
fn unknown_owner_fails_the_step_naming_dir_and_user_and_creates_nothing() {
    let root = Root::new();
    root.write(
        "etc/nodeward/config.d/50.toml",
        "[dirs.'/var/lib/etcd']\nowner = 'etcd'\n",
    );
    let before = root.snapshot();
    let run = root.run(&["apply", "--only", "dirs"]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stdout.contains("/var/lib/etcd") && run.stdout.contains("\"etcd\""),
        "{}",
        run.stdout
    );
    assert_eq!(
        before,
        root.snapshot(),
        "nothing may be created when the dirs step cannot be planned"
    );
    // Other steps are independent: a full apply still does their work, and reports the failure.
    let full = root.run(&["apply"]);
    assert_eq!(full.code, 1, "{}", full.stdout);
    assert!(full.stdout.contains("failed: dirs"), "{}", full.stdout);
}

#[test]
fn a_file_in_the_way_is_reported_and_left_alone() {
    let root = Root::new();
    let f = root.write("var/lib/calico", "not a dir");
    let run = root.run(&["apply"]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stdout
            .contains("var/lib/calico: exists and is a regular file"),
        "{}",
        run.stdout
    );
    assert_eq!(std::fs::read_to_string(f).expect("read"), "not a dir");
}

#[test]
fn only_limits_the_steps() {
    let root = Root::new();
    let plan = root.run(&["plan", "--only", "selinux"]).ok();
    assert!(!plan.stdout.contains("dirs:"), "{}", plan.stdout);
    let bad = root.run(&["plan", "--only", "nosuchstep"]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
}

#[test]
fn symlinked_parents_are_followed_inside_the_root() {
    // Fedora CoreOS: /opt -> var/opt. The CNI dir must land in ROOT/var/opt, not replace the link.
    let root = Root::new();
    std::fs::create_dir_all(root.path().join("var/opt")).expect("mkdir");
    std::os::unix::fs::symlink("/var/opt", root.path().join("opt")).expect("symlink");
    root.run(&["apply"]).ok();
    assert!(root.path().join("var/opt/cni/bin").is_dir());
    assert!(
        std::fs::symlink_metadata(root.path().join("opt"))
            .expect("stat")
            .file_type()
            .is_symlink()
    );
}

const CONTEXT: &str = "system_u:object_r:container_file_t:s0";

fn label(p: &std::path::Path) -> Option<String> {
    xattr::get(p, "security.selinux")
        .expect("getxattr")
        .map(|v| String::from_utf8_lossy(&v).trim_end_matches('\0').to_owned())
}

/// The temp dirs here live on ext4/tmpfs, which store `security.*` xattrs even without an SELinux
/// kernel: the label write is real; the kernel's enforcement is exercised in the VM test bed.
#[test]
fn labels_are_set_on_creation_and_repaired_recursively() {
    let root = Root::new();
    // Looks like an SELinux host to `selinux.labels = "auto"`.
    root.write("sys/fs/selinux/enforce", "0");
    root.run(&["apply"]).ok();
    for dir in [
        "etc/kubernetes",
        "etc/kubernetes/pki",
        "var/lib/kubelet",
        "opt/cni/bin",
        "etc/cni/net.d",
    ] {
        assert_eq!(label(&root.path().join(dir)).as_deref(), Some(CONTEXT), "{dir}");
    }
    assert_eq!(
        label(&root.path().join("var/lib/calico")),
        None,
        "not a labelled tree"
    );

    // Files appear with the wrong label (or none, or a private MCS pair): the next apply fixes them.
    let f = root.write("etc/kubernetes/kubelet.yaml", "x");
    let g = root.write("var/lib/kubelet/plugins/x/b", "y");
    // A pod's own file with its MCS pair: left alone, its whole directory is the pod's.
    let pod_file = root.write("var/lib/kubelet/pods/a/b", "z");
    for p in [&g, &pod_file] {
        xattr::set(
            p,
            "security.selinux",
            b"system_u:object_r:container_file_t:s0:c1,c2\0",
        )
        .expect("setxattr");
    }
    let plan = root.run(&["plan", "--only", "selinux"]).ok();
    assert!(
        plan.stdout
            .contains("/etc/kubernetes/kubelet.yaml  label (none) →"),
        "{}",
        plan.stdout
    );
    assert!(
        plan.stdout.contains("container_file_t:s0:c1,c2 →"),
        "{}",
        plan.stdout
    );
    root.run(&["apply"]).ok();
    for p in [&f, &g, &root.path().join("var/lib/kubelet/pods")] {
        assert_eq!(label(p).as_deref(), Some(CONTEXT), "{}", p.display());
    }
    assert_eq!(
        label(&pod_file).as_deref(),
        Some("system_u:object_r:container_file_t:s0:c1,c2"),
        "a pod's file keeps its pair"
    );
    let before = root.snapshot();
    let again = root.run(&["apply"]).ok();
    assert!(again.stdout.contains("Applied 0 change(s)"), "{}", again.stdout);
    assert_eq!(before, root.snapshot());
}

#[test]
fn labels_never_and_auto_without_selinux_do_nothing() {
    let root = Root::new();
    root.write("etc/nodeward/config.d/10.toml", "[selinux]\nlabels = 'never'\n");
    root.write("sys/fs/selinux/enforce", "1");
    let plan = root.run(&["plan", "--only", "selinux"]).ok();
    assert!(
        plan.stdout
            .contains("labelling disabled by selinux.labels = \"never\""),
        "{}",
        plan.stdout
    );
    root.run(&["apply"]).ok();
    assert_eq!(label(&root.path().join("etc/kubernetes")), None);
}

#[test]
fn apply_creates_a_missing_root() {
    let parent = tempfile::tempdir().expect("tempdir");
    let missing = parent.path().join("demo");
    let out = std::process::Command::new(common::BIN)
        .args(["apply", "--root"])
        .arg(&missing)
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(missing.join("var/lib/kubelet/volumeplugins").is_dir());
}

#[test]
fn a_closed_stdout_pipe_ends_quietly() {
    let root = Root::new();
    // `true` exits without reading: nodeward's writes hit a closed pipe (EPIPE).
    let out = std::process::Command::new("sh")
        .args([
            "-c",
            &format!("'{}' plan --root '{}' | true", common::BIN, root.path().display()),
        ])
        .output()
        .expect("sh");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
}
