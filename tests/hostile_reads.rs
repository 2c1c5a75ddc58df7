//! Hostile files at every place nodeward reads, through the real binary: a FIFO with no writer
//! (which would hold a blocking open or read forever), a character device like /dev/zero (an
//! endless read), and an absolute symlink under `--root` (which must stay inside the image). Each
//! command answers within seconds and names the file; nothing is read from the build machine.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Root;

/// Runs nodeward on `root` and fails the test if it is still running after `limit`.
fn within(root: &Root, args: &[&str], limit: Duration) -> (Option<i32>, String) {
    let mut child = Command::new(common::BIN)
        .args(args)
        .arg("--root")
        .arg(root.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let started = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            panic!("{args:?}: still running after {limit:?} (a blocking read?)");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn fifo(p: &Path) {
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    let _ = std::fs::remove_file(p);
    nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o644)).expect("mkfifo");
}

/// /dev/zero's own device numbers at `p` (needs root; skipped without it).
fn zero(p: &Path) -> bool {
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    let _ = std::fs::remove_file(p);
    nix::sys::stat::mknod(
        p,
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o644),
        nix::sys::stat::makedev(1, 5),
    )
    .is_ok()
}

const LIMIT: Duration = Duration::from_secs(10);

#[test]
fn state_files_that_are_fifos_or_devices_never_hang_status_wait_or_kubelet_show() {
    for make in [fifo as fn(&Path), |p: &Path| {
        assert!(zero(p) || !common::require_root())
    }] {
        let root = Root::new();
        make(&root.path().join("run/nodeward/state.json"));
        make(&root.path().join("run/nodeward/kubelet-argv.json"));
        let (_, out) = within(&root, &["status"], LIMIT);
        // Said as unreadable, with the path: never "no state file" (a daemon may be running).
        assert!(
            out.contains("daemon: state file unreadable: ") && out.contains("/run/nodeward/state.json"),
            "{out}"
        );
        let (code, out) = within(&root, &["wait", "--timeout", "1"], LIMIT);
        assert_eq!(code, Some(1), "{out}");
        let (_, out) = within(&root, &["kubelet", "show"], LIMIT);
        // Said as unreadable with its path, never "no daemon state" (a daemon may be running).
        assert!(
            out.contains("supervisor:  unknown: state file unreadable: ")
                && out.contains("/run/nodeward/state.json")
                && !out.contains("no daemon state"),
            "{out}"
        );
    }
}

/// A state file that is there and not one nodeward reads is said as such; the control, no file
/// at all, is "no state file".
#[test]
fn an_unparseable_state_file_is_not_a_missing_one() {
    let root = Root::new();
    let (_, out) = within(&root, &["status"], LIMIT);
    assert!(out.contains("daemon: no state file"), "{out}");
    root.write("run/nodeward/state.json", "{\"pid\": \"not a number\"");
    let (_, out) = within(&root, &["status"], LIMIT);
    assert!(
        out.contains(
            "daemon: state file unreadable: /run/nodeward/state.json: not a state file nodeward reads"
        ),
        "{out}"
    );
}

#[test]
fn a_metadata_fifo_or_directory_is_an_error_naming_it_not_a_wait() {
    let root = Root::new();
    root.write(
        "etc/nodeward/config.d/10.toml",
        "[node]\nhostname = 'node-1'\n[kubelet]\nimage = 'quay.io/poseidon/kubelet:v1.36.1'\nallow_tag = true\nprovider_id = 'aws:///${AFTERBURN_AWS_AVAILABILITY_ZONE}/${AFTERBURN_AWS_INSTANCE_ID}'\n",
    );
    root.write("etc/kubernetes/kubeconfig", "apiVersion: v1\nkind: Config\n");
    let metadata = root.path().join("run/metadata/afterburn");
    fifo(&metadata);
    let (_, out) = within(&root, &["plan", "--only", "kubelet"], LIMIT);
    assert!(
        out.contains("/run/metadata/afterburn: not a regular file (a FIFO)"),
        "{out}"
    );
    assert!(
        !out.contains("does not exist yet"),
        "a FIFO is not 'not there yet': {out}"
    );
    std::fs::remove_file(&metadata).expect("rm");
    std::fs::create_dir_all(&metadata).expect("dir");
    let (_, out) = within(&root, &["plan", "--only", "kubelet"], LIMIT);
    assert!(out.contains("not a regular file (a directory)"), "{out}");
    // Control: missing is a wait.
    std::fs::remove_dir(&metadata).expect("rmdir");
    let (_, out) = within(&root, &["plan", "--only", "kubelet"], LIMIT);
    assert!(out.contains("does not exist yet (afterburn not done?)"), "{out}");
}

#[test]
fn metadata_values_are_checked_before_they_reach_the_kubelet() {
    let root = Root::new();
    root.write(
        "etc/nodeward/config.d/10.toml",
        "[node]\nhostname = 'node-1'\n[kubelet]\nimage = 'quay.io/poseidon/kubelet:v1.36.1'\nallow_tag = true\nprovider_id = 'aws:///${AFTERBURN_AWS_AVAILABILITY_ZONE}/${AFTERBURN_AWS_INSTANCE_ID}'\n",
    );
    root.write("etc/kubernetes/kubeconfig", "apiVersion: v1\nkind: Config\n");
    for (zone, instance) in [
        ("", ""),
        ("us-east-1a", "i-0abc $(reboot)"),
        ("us-east-1a\u{1b}[31m", "i-0abc"),
        ("us\u{202e}east", "i-0abc"),
        ("us-east-1a", "'i-0abc'"),
    ] {
        root.write(
            "run/metadata/afterburn",
            &format!("AFTERBURN_AWS_AVAILABILITY_ZONE={zone}\nAFTERBURN_AWS_INSTANCE_ID={instance}\n"),
        );
        let (_, out) = within(&root, &["plan", "--only", "kubelet", "--output", "json"], LIMIT);
        assert!(
            out.contains("node.provider_id would be") && !out.contains("--provider-id=aws"),
            "{zone:?} {instance:?}: {out}"
        );
        assert!(
            !out.contains('\u{1b}') && !out.contains('\u{202e}'),
            "escaped: {out}"
        );
    }
    // Control: a real one passes.
    root.write(
        "run/metadata/afterburn",
        "AFTERBURN_AWS_AVAILABILITY_ZONE=us-east-1a\nAFTERBURN_AWS_INSTANCE_ID=i-0123456789abcdef0\n",
    );
    let (code, out) = within(
        &root,
        &["plan", "--only", "kubelet", "--detailed-exitcode"],
        LIMIT,
    );
    assert_eq!(
        code,
        Some(4),
        "changes to make, no error (--detailed-exitcode): {out}"
    );
    assert!(!out.contains("would be") && !out.contains("error"), "{out}");
}

#[test]
fn absolute_symlinks_under_root_are_read_in_the_image_never_the_build_machine() {
    let outside = tempfile::tempdir().expect("outside");
    std::fs::write(
        outside.path().join("afterburn"),
        "AFTERBURN_AWS_AVAILABILITY_ZONE=OUTSIDE\nAFTERBURN_AWS_INSTANCE_ID=i-0\n",
    )
    .expect("write");
    let root = Root::new();
    root.write(
        "etc/nodeward/config.d/10.toml",
        "[node]\nhostname = 'node-1'\n[kubelet]\nimage = 'quay.io/poseidon/kubelet:v1.36.1'\nallow_tag = true\nprovider_id = 'aws:///${AFTERBURN_AWS_AVAILABILITY_ZONE}/${AFTERBURN_AWS_INSTANCE_ID}'\n",
    );
    root.write("etc/kubernetes/kubeconfig", "apiVersion: v1\nkind: Config\n");
    std::fs::create_dir_all(root.path().join("run/metadata")).expect("mkdir");
    std::os::unix::fs::symlink(
        outside.path().join("afterburn"),
        root.path().join("run/metadata/afterburn"),
    )
    .expect("link");
    let (_, out) = within(&root, &["plan", "--only", "kubelet", "--output", "json"], LIMIT);
    assert!(!out.contains("OUTSIDE"), "read from the build machine: {out}");
    assert!(out.contains("does not exist yet"), "{out}");
    // The state file too.
    let state = outside.path().join("state.json");
    std::fs::write(&state, r#"{"pid":1,"started":1,"ready":true,"phase":"converged","converges":1,"last_converge":1,"status":"OUTSIDE","steps":[]}"#).expect("write");
    std::fs::create_dir_all(root.path().join("run/nodeward")).expect("mkdir");
    std::os::unix::fs::symlink(&state, root.path().join("run/nodeward/state.json")).expect("link");
    let (_, out) = within(&root, &["status"], LIMIT);
    assert!(!out.contains("OUTSIDE"), "{out}");
}

#[test]
fn wait_and_status_do_not_trust_the_state_of_a_dead_daemon() {
    let root = Root::new();
    // A state file as a SIGKILLed daemon leaves it: converged, its pid gone.
    let mut dead = Command::new("true").spawn().expect("spawn");
    let pid = dead.id();
    dead.wait().expect("wait");
    root.write(
        "run/nodeward/state.json",
        &format!(
            r#"{{"pid":{pid},"writer":{{"pid":{pid},"boot_id":"x","start_ticks":1}},"started":1,"ready":true,"phase":"converged","converges":3,"last_converge":1,"status":"converged","steps":[]}}"#
        ),
    );
    let (code, out) = within(&root, &["wait", "--timeout", "1"], LIMIT);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("the daemon is not running (last state from pid"),
        "{out}"
    );
    let (_, out) = within(&root, &["status"], LIMIT);
    assert!(out.contains("daemon: not running (last state from pid"), "{out}");
    assert!(!out.contains("ready, converged"), "{out}");
    // A timeout too large for a deadline is a usage error, not a panic.
    let (code, out) = within(&root, &["wait", "--timeout", "9223372036854775808"], LIMIT);
    assert_eq!(code, Some(2), "{out}");
}

/// Every other read site, a FIFO and then `/dev/zero` in place of its file: answered at once
/// with an error (or, where nodeward falls back, a warning) naming the file and what it is.
#[test]
fn fifos_and_devices_at_every_other_read_site_are_errors_not_hangs() {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("osrelease");
    let modules = format!("lib/modules/{}", release.trim());
    let sites = [
        "etc/kubernetes/kubeconfig",
        "etc/kubernetes/kubelet.yaml",
        "etc/containerd/config.toml",
        "etc/os-release",
        "etc/modprobe.d/x.conf",
        "etc/passwd",
        "lib/modules/MODULES/modules.dep",
        "run/metadata/afterburn",
    ];
    for (what, make) in [
        ("FIFO", fifo as fn(&Path)),
        ("character device", |p: &Path| {
            assert!(zero(p) || !common::require_root())
        }),
    ] {
        for site in sites {
            let rel = site.replace("lib/modules/MODULES", &modules);
            let root = Root::new();
            root.write(
                "etc/nodeward/config.d/10.toml",
                "[node]\nhostname = 'node-1'\n[kubelet]\nimage = 'quay.io/poseidon/kubelet:v1.36.1'\nallow_tag = true\n\
                 provider_id = 'aws:///${AFTERBURN_AWS_AVAILABILITY_ZONE}/${AFTERBURN_AWS_INSTANCE_ID}'\n",
            );
            if rel != "etc/kubernetes/kubeconfig" {
                root.write("etc/kubernetes/kubeconfig", "apiVersion: v1\nkind: Config\n");
            }
            // The modules step reads modprobe.d with the running kernel's module tree.
            if !rel.ends_with("modules.dep") {
                root.write(&format!("{modules}/modules.dep"), "");
            }
            make(&root.path().join(&rel));
            if !root.path().join(&rel).exists() {
                continue; // no /dev/zero without root (require_root said so)
            }
            let (_, out) = within(&root, &["plan"], LIMIT);
            let named = out.lines().any(|l| {
                l.contains(&rel) && (l.contains(&format!("(a {what})")) || l.contains("special file"))
            });
            assert!(
                named,
                "{rel} as a {what}: no line names it and what it is:\n{out}"
            );
        }
    }
}

#[test]
fn a_certificate_swapped_for_a_fifo_is_passed_by_in_check() {
    let root = Root::new();
    fifo(&root.path().join("etc/kubernetes/pki/ca.crt"));
    let (_, out) = within(&root, &["check"], LIMIT);
    // Passed by: not read (it would block), not counted as a certificate.
    assert!(
        out.lines()
            .any(|l| l.starts_with("certificates ") && l.contains("no certificates")),
        "{out}"
    );
}

#[test]
fn each_os_error_is_said_once() {
    let root = Root::new();
    for args in [
        &["config", "--config", "/nonexistent/x.toml"][..],
        &["modules", "explain", "br_netfilter"][..],
    ] {
        let (code, out) = within(&root, args, LIMIT);
        assert_ne!(code, Some(0), "{args:?}: {out}");
        for cause in ["No such file or directory", "does not exist"] {
            assert!(
                out.matches(cause).count() <= 1,
                "{args:?} says {cause:?} twice: {out}"
            );
        }
    }
}

#[test]
fn a_node_name_from_metadata_must_be_a_node_name() {
    let root = Root::new();
    root.write(
        "etc/nodeward/config.d/10.toml",
        "[kubelet]\nimage = 'quay.io/poseidon/kubelet:v1.36.1'\nallow_tag = true\nnode_name_from = 'AFTERBURN_DIGITALOCEAN_IPV4_PRIVATE_0'\n",
    );
    root.write("etc/kubernetes/kubeconfig", "apiVersion: v1\nkind: Config\n");
    root.write(
        "run/metadata/afterburn",
        "AFTERBURN_DIGITALOCEAN_IPV4_PRIVATE_0=node one;$(id)\n",
    );
    let (_, out) = within(&root, &["plan", "--only", "kubelet"], LIMIT);
    assert!(
        out.contains("/run/metadata/afterburn: node.name_from gives") && out.contains("RFC 1123"),
        "{out}"
    );
    root.write(
        "run/metadata/afterburn",
        "AFTERBURN_DIGITALOCEAN_IPV4_PRIVATE_0=10.132.0.7\n",
    );
    let (_, out) = within(&root, &["plan", "--only", "kubelet"], LIMIT);
    assert!(!out.contains("RFC 1123") && !out.contains("error"), "{out}");
}
