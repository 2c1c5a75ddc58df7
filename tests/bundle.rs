//! The assets bundle through the real binary: Typhoon's layout (golden), bad input, idempotence,
//! removal of dropped files, the worker layout, and crashes at every step of the install.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use common::Root;

/// Every file name Typhoon's terraform-render-bootstrap ships to a controller.
const TYPHOON: &[&str] = &[
    "auth/admin.conf",
    "tls/etcd/etcd-client-ca.crt",
    "tls/etcd/etcd-client.crt",
    "tls/etcd/etcd-client.key",
    "tls/etcd/server-ca.crt",
    "tls/etcd/server.crt",
    "tls/etcd/server.key",
    "tls/etcd/peer-ca.crt",
    "tls/etcd/peer.crt",
    "tls/etcd/peer.key",
    "tls/k8s/ca.crt",
    "tls/k8s/ca.key",
    "tls/k8s/apiserver.crt",
    "tls/k8s/apiserver.key",
    "tls/k8s/service-account.pub",
    "tls/k8s/service-account.key",
    "static-manifests/kube-apiserver.yaml",
    "static-manifests/kube-controller-manager.yaml",
    "static-manifests/kube-scheduler.yaml",
    "manifests/coredns/cluster-role.yaml",
    "manifests/coredns/deployment.yaml",
    "manifests/coredns/service.yaml",
    "manifests/kube-proxy/daemonset.yaml",
    "manifests/kube-proxy/service-account.yaml",
    "manifests/network/calico.yaml",
    "manifests/network/cluster-role.yaml",
];

/// Where Typhoon's shell layout puts each file, and the mode/owner nodeward gives it. Deliberate
/// differences from the shell: keys are not world-readable (awk left 0644) and etcd keys are 0400
/// (`chmod -R 500` set exec bits). Owners are numeric: etcd is uid/gid 232 in the test root.
const GOLDEN: &[(&str, u32, u32, u32)] = &[
    ("/etc/kubernetes/pki/admin.conf", 0o640, 0, 65534),
    ("/etc/kubernetes/pki/etcd-client-ca.crt", 0o640, 0, 65534),
    ("/etc/kubernetes/pki/etcd-client.crt", 0o640, 0, 65534),
    ("/etc/kubernetes/pki/etcd-client.key", 0o640, 0, 65534),
    ("/etc/ssl/etcd/etcd/server-ca.crt", 0o400, 232, 232),
    ("/etc/ssl/etcd/etcd/server.crt", 0o400, 232, 232),
    ("/etc/ssl/etcd/etcd/server.key", 0o400, 232, 232),
    ("/etc/ssl/etcd/etcd/peer-ca.crt", 0o400, 232, 232),
    ("/etc/ssl/etcd/etcd/peer.crt", 0o400, 232, 232),
    ("/etc/ssl/etcd/etcd/peer.key", 0o400, 232, 232),
    ("/etc/kubernetes/pki/ca.crt", 0o640, 0, 65534),
    ("/etc/kubernetes/pki/ca.key", 0o640, 0, 65534),
    ("/etc/kubernetes/pki/apiserver.crt", 0o640, 0, 65534),
    ("/etc/kubernetes/pki/apiserver.key", 0o640, 0, 65534),
    ("/etc/kubernetes/pki/service-account.pub", 0o640, 0, 65534),
    ("/etc/kubernetes/pki/service-account.key", 0o640, 0, 65534),
    ("/etc/kubernetes/manifests/kube-apiserver.yaml", 0o644, 0, 0),
    (
        "/etc/kubernetes/manifests/kube-controller-manager.yaml",
        0o644,
        0,
        0,
    ),
    ("/etc/kubernetes/manifests/kube-scheduler.yaml", 0o644, 0, 0),
    (
        "/opt/bootstrap/assets/manifests/coredns/cluster-role.yaml",
        0o644,
        0,
        0,
    ),
    (
        "/opt/bootstrap/assets/manifests/coredns/deployment.yaml",
        0o644,
        0,
        0,
    ),
    (
        "/opt/bootstrap/assets/manifests/coredns/service.yaml",
        0o644,
        0,
        0,
    ),
    (
        "/opt/bootstrap/assets/manifests/kube-proxy/daemonset.yaml",
        0o644,
        0,
        0,
    ),
    (
        "/opt/bootstrap/assets/manifests/kube-proxy/service-account.yaml",
        0o644,
        0,
        0,
    ),
    ("/opt/bootstrap/assets/manifests/network/calico.yaml", 0o644, 0, 0),
    (
        "/opt/bootstrap/assets/manifests/network/cluster-role.yaml",
        0o644,
        0,
        0,
    ),
];

/// The Terraform join of `entries`.
fn pack(entries: &[(&str, String)]) -> Vec<u8> {
    entries
        .iter()
        .map(|(n, c)| format!("##### {n}\n{c}"))
        .collect::<Vec<_>>()
        .join("\n")
        .into_bytes()
}

fn typhoon(version: u32) -> Vec<(&'static str, String)> {
    TYPHOON
        .iter()
        .map(|n| (*n, format!("v{version} content of {n}\nsecond line\n")))
        .collect()
}

/// A controller root with an etcd account and the bundle at /var/lib/nodeward/assets.
fn controller(bundle: &[u8]) -> Root {
    let root = Root::new();
    root.write("usr/lib/passwd", "etcd:x:232:232::/var/lib/etcd:/sbin/nologin\n");
    root.write("usr/lib/group", "etcd:x:232:\n");
    root.write(
        "etc/nodeward/config.d/10-controller.toml",
        "[node]\nrole = \"controller\"\n[bundle]\nsource = \"/var/lib/nodeward/assets\"\n",
    );
    set_bundle(&root, bundle);
    root
}

fn set_bundle(root: &Root, bundle: &[u8]) {
    let p = root.path().join("var/lib/nodeward/assets");
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(p, bundle).expect("write bundle");
}

/// Sets the bundle and pins it by its sha256: only a pinned bundle may remove files.
fn set_bundle_pinned(root: &Root, bundle: &[u8]) {
    set_bundle(root, bundle);
    root.write(
        "etc/nodeward/config.d/20-pin.toml",
        &format!(
            "[bundle]\nsha256 = \"{}\"\n",
            nodeward::bundle::install::sha256_hex(bundle)
        ),
    );
}

fn read(root: &Root, host_path: &str) -> String {
    std::fs::read_to_string(root.path().join(host_path.trim_start_matches('/')))
        .unwrap_or_else(|e| panic!("{host_path}: {e}"))
}

/// Whether a host path exists below the root.
fn exists(root: &Root, host_path: &str) -> bool {
    root.path().join(host_path.trim_start_matches('/')).exists()
}

/// Every file below the root except the bundle source and nodeward's own state.
fn installed(root: &Root) -> std::collections::BTreeMap<String, String> {
    root.snapshot()
        .into_keys()
        .filter(|p| p.is_file())
        .map(|p| format!("/{}", p.strip_prefix(root.path()).expect("below root").display()))
        .filter(|p| {
            !p.starts_with("/var/lib/nodeward/")
                && !p.starts_with("/usr/lib/")
                && !p.starts_with("/etc/nodeward/")
        })
        .map(|p| {
            let body = read(root, &p);
            (p, body)
        })
        .collect()
}

/// Every file where Typhoon's shell layout puts it, with nodeward's mode and owners (`GOLDEN`).
fn expect_golden_layout(root: &Root) {
    for (path, mode, uid, gid) in GOLDEN {
        let m = std::fs::metadata(root.path().join(path.trim_start_matches('/')))
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(
            (m.mode() & 0o7777, m.uid(), m.gid()),
            (*mode, *uid, *gid),
            "{path}"
        );
    }
}

/// The `/opt/bootstrap/layout` the Typhoon controller snippet ships, as Ignition writes it.
fn snippet_layout_script() -> String {
    let ign = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("packaging/butane/typhoon-controller-fcos-rpm.ign");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ign).expect("read the snippet")).expect("json");
    let source = doc["storage"]["files"]
        .as_array()
        .expect("files")
        .iter()
        .find(|f| f["path"] == "/opt/bootstrap/layout")
        .and_then(|f| f["contents"]["source"].as_str())
        .expect("the snippet replaces /opt/bootstrap/layout")
        .to_owned();
    // The translator's RFC 2397 `data:,` with percent-encoding.
    let text = source.strip_prefix("data:,").expect("a data URL").as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < text.len() {
        if text[i] == b'%' {
            let hex = std::str::from_utf8(&text[i + 1..i + 3]).expect("hex");
            out.push(u8::from_str_radix(hex, 16).expect("hex"));
            i += 3;
        } else {
            out.push(text[i]);
            i += 1;
        }
    }
    String::from_utf8(out).expect("utf-8")
}

/// Typhoon's SSH step, unchanged, on a controller with the snippet: it copies the bundle to the
/// home directory and runs /opt/bootstrap/layout there; the snippet's layout hands it to nodeward,
/// which installs it with its own modes and owners. Run again (Terraform re-applied), nothing
/// changes and nothing is left behind: one installer, one state.
#[test]
fn typhoons_ssh_copy_goes_through_nodeward_with_the_snippets_layout() {
    let root = Root::new();
    root.write("usr/lib/passwd", "etcd:x:232:232::/var/lib/etcd:/sbin/nologin\n");
    root.write("usr/lib/group", "etcd:x:232:\n");
    root.write(
        "etc/nodeward/config.d/10-node.toml",
        "[node]\nrole = \"controller\"\n[bundle]\nlayout = \"controller\"\n",
    );
    let t = tempfile::tempdir().expect("tempdir");
    let (home, bin) = (t.path().join("home/core"), t.path().join("bin"));
    std::fs::create_dir_all(&home).expect("mkdir");
    std::fs::create_dir_all(&bin).expect("mkdir");
    let layout = t.path().join("layout");
    std::fs::write(&layout, snippet_layout_script()).expect("write");
    // 0544, as Ignition writes it, and run as Typhoon's SSH step does: by its path.
    std::fs::set_permissions(&layout, std::os::unix::fs::PermissionsExt::from_mode(0o544)).expect("chmod");
    // `nodeward` on PATH, as on the node, here confined to the test root.
    let wrapper = bin.join("nodeward");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nexec {} --root {} \"$@\"\n",
            common::BIN,
            root.path().display()
        ),
    )
    .expect("write");
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let ssh_step_output = |bundle: &[u8]| {
        std::fs::write(home.join("assets"), bundle).expect("copy");
        std::process::Command::new(&layout)
            .current_dir(&home)
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .output()
            .expect("run the layout")
    };
    let ssh_step = |bundle: &[u8]| {
        let out = ssh_step_output(bundle);
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let first = ssh_step(&pack(&typhoon(1)));
    assert!(first.contains("26 to create"), "{first}");
    assert!(
        !home.join("assets").exists(),
        "the copy is removed once installed"
    );
    expect_golden_layout(&root);
    let before = root.snapshot();
    let again = ssh_step(&pack(&typhoon(1)));
    assert!(again.contains("= no changes"), "{again}");
    assert_eq!(root.snapshot(), before, "a second SSH copy changed the node");
    // The control: a bad copy fails the SSH step, installs nothing and keeps the copy for a retry.
    let out = ssh_step_output(b"##### tls/k8s/ca.key\nnew\n##### ../../etc/passwd\nx\n");
    assert!(
        !out.status.success(),
        "a bundle naming ../../etc/passwd was accepted"
    );
    assert!(home.join("assets").exists(), "the failed copy was removed");
    assert_eq!(root.snapshot(), before, "a failed SSH copy changed the node");
}

#[test]
fn typhoon_bundle_lands_where_the_shell_layout_puts_it() {
    let root = controller(&pack(&typhoon(1)));
    let run = root.run(&["apply", "--only", "bundle"]).ok();
    assert!(
        run.stdout
            .contains("install: 26 to create, 0 to update, 0 to delete"),
        "{}",
        run.stdout
    );
    expect_golden_layout(&root);
    assert_eq!(installed(&root).len(), GOLDEN.len(), "nothing else is written");
    // The join's separator is not part of any file: contents are byte-exact.
    assert_eq!(
        read(&root, "/etc/kubernetes/pki/ca.key"),
        "v1 content of tls/k8s/ca.key\nsecond line\n"
    );
    let etcd_dir = std::fs::metadata(root.path().join("etc/ssl/etcd/etcd")).expect("etcd dir");
    assert_eq!((etcd_dir.mode() & 0o7777, etcd_dir.uid()), (0o500, 232));
    let pki = std::fs::metadata(root.path().join("etc/kubernetes/pki")).expect("pki dir");
    assert_eq!(
        (pki.mode() & 0o7777, pki.uid(), pki.gid()),
        (0o755, 0, 0),
        "agrees with the dirs step"
    );
    for p in ["etc/kubernetes/pki/ca.key", "etc/ssl/etcd/etcd/peer.key"] {
        let mode = std::fs::metadata(root.path().join(p)).expect("stat").mode();
        assert_eq!(mode & 0o004, 0, "{p} must not be world-readable");
    }

    // Idempotent: the full apply (all steps) converges, and the next one writes nothing.
    root.run(&["apply"]).ok();
    let before = root.snapshot();
    let again = root.run(&["apply"]).ok();
    assert!(again.stdout.contains("Applied 0 change(s)"), "{}", again.stdout);
    assert_eq!(before, root.snapshot(), "a second install must not touch a file");
}

#[test]
fn changed_and_dropped_entries_are_updated_and_removed() {
    let root = controller(&pack(&typhoon(1)));
    root.run(&["apply", "--only", "bundle"]).ok();
    let ino_unchanged = std::fs::metadata(root.path().join("etc/kubernetes/pki/ca.crt"))
        .expect("stat")
        .ino();
    let mut v2 = typhoon(1);
    v2.retain(|(n, _)| *n != "static-manifests/kube-scheduler.yaml");
    for (n, c) in v2.iter_mut() {
        if *n == "tls/k8s/apiserver.crt" {
            *c = "rotated\n".into();
        }
    }
    set_bundle_pinned(&root, &pack(&v2));
    let plan = root.run(&["plan", "--only", "bundle"]).ok();
    assert!(
        plan.stdout
            .contains("install: 0 to create, 1 to update, 1 to delete"),
        "{}",
        plan.stdout
    );
    assert!(
        plan.stdout
            .contains("- /etc/kubernetes/manifests/kube-scheduler.yaml  delete"),
        "{}",
        plan.stdout
    );
    assert!(!plan.stdout.contains("rotated"), "contents are never printed");
    root.run(&["apply", "--only", "bundle"]).ok();
    assert!(
        !exists(&root, "/etc/kubernetes/manifests/kube-scheduler.yaml"),
        "a dropped static pod must stop being served"
    );
    assert_eq!(read(&root, "/etc/kubernetes/pki/apiserver.crt"), "rotated\n");
    let ino_after = std::fs::metadata(root.path().join("etc/kubernetes/pki/ca.crt"))
        .expect("stat")
        .ino();
    assert_eq!(ino_unchanged, ino_after, "unchanged files are not rewritten");
}

#[test]
fn worker_kubeconfig_and_derived_ca() {
    let root = Root::new();
    let ca = "-----BEGIN CERTIFICATE-----\nMIIBworker\n-----END CERTIFICATE-----\n";
    let b64 = base64_encode(ca.as_bytes());
    let kc = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: https://api:6443\n    certificate-authority-data: {b64}\n"
    );
    root.write(
        "etc/nodeward/config.d/10.toml",
        "[bundle]\nsource = \"/var/lib/nodeward/assets\"\n",
    );
    set_bundle(&root, &pack(&[("kubeconfig", kc.clone())]));
    // The bundle places the kubeconfig; the hostfiles step, right after it, derives the CA.
    root.run(&["apply", "--only", "bundle,hostfiles"]).ok();
    assert_eq!(read(&root, "/etc/kubernetes/kubeconfig"), kc);
    assert_eq!(read(&root, "/etc/kubernetes/ca.crt"), ca);
    let m = std::fs::metadata(root.path().join("etc/kubernetes/kubeconfig")).expect("stat");
    assert_eq!(m.mode() & 0o7777, 0o600);
}

fn base64_encode(data: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// Bad input: exit 1, the message names the entry or source, nothing on disk changes.
fn assert_refused(bundle: &[u8], extra_config: &str, needles: &[&str]) {
    let root = controller(bundle);
    if !extra_config.is_empty() {
        root.write("etc/nodeward/config.d/20-extra.toml", extra_config);
    }
    let before = root.snapshot();
    let run = root.run(&["apply", "--only", "bundle"]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    for n in needles {
        assert!(run.stdout.contains(n), "missing {n:?} in:\n{}", run.stdout);
    }
    assert_eq!(before, root.snapshot(), "nothing may change on bad input");
}

#[test]
fn hostile_and_broken_bundles_are_refused_naming_the_entry() {
    let ok = |n: &'static str| (n, "x\n".to_owned());
    assert_refused(
        &pack(&[
            ok("tls/k8s/ca.crt"),
            ("tls/k8s/../../../../etc/shadow", "x".into()),
        ]),
        "",
        &["line 4", "\"..\" segment"],
    );
    assert_refused(
        &pack(&[ok("tls/k8s/ca.crt"), ("a/../../b", "x".into())]),
        "",
        &["\"a/../../b\"", "path traversal"],
    );
    assert_refused(
        &pack(&[("/etc/passwd", "x".into())]),
        "",
        &["\"/etc/passwd\"", "absolute path"],
    );
    assert_refused(&pack(&[("tls/./k8s/ca.crt", "x".into())]), "", &["\".\" segment"]);
    assert_refused(&pack(&[("tls//ca.crt", "x".into())]), "", &["empty path segment"]);
    assert_refused(b"##### tls/k8s/c\x00a.crt\nx", "", &["line 1", "contains '\\0'"]);
    assert_refused(b"##### tls/k8s/c\x1ba.crt\nx", "", &["contains '\\u{1b}'"]);
    assert_refused(
        &pack(&[ok("tls/k8s/ca.crt"), ok("tls/k8s/ca.crt")]),
        "",
        &["\"tls/k8s/ca.crt\" appears twice (first at line 1)"],
    );
    assert_refused(b"##### \nx", "", &["line 1: header with no name"]);
    assert_refused(b"stray\n##### tls/k8s/ca.crt\nx", "", &["data before the first"]);
    assert_refused(
        &pack(&[ok("tls/k8s/ca.crt"), ok("unknown/thing")]),
        "",
        &["\"unknown/thing\"", "no layout rule"],
    );
    // Size caps: the whole bundle, and one entry over the limit.
    let big = "y".repeat(4096);
    assert_refused(
        &pack(&[("tls/k8s/ca.crt", big)]),
        "[bundle]\nmax_bytes = 1024\n",
        &["over the 1024-byte limit"],
    );
    let many: Vec<(String, String)> = (0..10_001)
        .map(|i| (format!("manifests/m{i}.yaml"), String::new()))
        .collect();
    let many: Vec<(&str, String)> = many.iter().map(|(n, c)| (n.as_str(), c.clone())).collect();
    assert_refused(&pack(&many), "", &["more than 10000 entries"]);
    // Checksum mismatch: refused before anything is written.
    assert_refused(
        &pack(&[ok("tls/k8s/ca.crt")]),
        &format!("[bundle]\nsha256 = \"{}\"\n", "0".repeat(64)),
        &["sha256 mismatch", "expected 0000"],
    );
    // An owner the host does not have.
    let root = Root::new();
    root.write(
        "etc/nodeward/config.d/10.toml",
        "[node]\nrole = \"controller\"\n[bundle]\nsource = \"/var/lib/nodeward/assets\"\n",
    );
    set_bundle(&root, &pack(&[ok("tls/etcd/peer.key")]));
    let run = root.run(&["apply", "--only", "bundle"]);
    assert_eq!(run.code, 1);
    assert!(
        run.stdout
            .contains("entry \"tls/etcd/peer.key\": owner: unknown user \"etcd\""),
        "{}",
        run.stdout
    );
}

#[test]
fn symlinks_in_destinations_are_refused() {
    // A symlinked file: never written through.
    let root = controller(&pack(&[("static-manifests/kube-apiserver.yaml", "x\n".into())]));
    std::fs::create_dir_all(root.path().join("etc/kubernetes/manifests")).expect("mkdir");
    root.write("etc/important", "keep me");
    std::os::unix::fs::symlink(
        "/etc/important",
        root.path().join("etc/kubernetes/manifests/kube-apiserver.yaml"),
    )
    .expect("symlink");
    let run = root.run(&["apply", "--only", "bundle"]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stdout
            .contains("/etc/kubernetes/manifests/kube-apiserver.yaml: destination is a symlink"),
        "{}",
        run.stdout
    );
    assert_eq!(read(&root, "/etc/important"), "keep me");

    // A symlinked destination directory pointing elsewhere.
    let root = controller(&pack(&[("static-manifests/kube-apiserver.yaml", "x\n".into())]));
    std::fs::create_dir_all(root.path().join("etc/kubernetes")).expect("mkdir");
    std::fs::create_dir_all(root.path().join("etc/systemd/system")).expect("mkdir");
    std::os::unix::fs::symlink(
        "/etc/systemd/system",
        root.path().join("etc/kubernetes/manifests"),
    )
    .expect("symlink");
    let run = root.run(&["apply", "--only", "bundle"]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stdout
            .contains("/etc/kubernetes/manifests: destination directory is a symlink to /etc/systemd/system"),
        "{}",
        run.stdout
    );
    assert!(
        std::fs::read_dir(root.path().join("etc/systemd/system"))
            .expect("dir")
            .next()
            .is_none()
    );
}

#[test]
fn operator_commands() {
    let root = controller(&pack(&typhoon(1)));
    let file = root.path().join("var/lib/nodeward/assets");
    let f = file.to_str().expect("utf8");
    let verify = root.run(&["bundle", "verify", f]).ok();
    assert!(verify.stdout.contains("ok: 26 entries"), "{}", verify.stdout);
    let list = root.run(&["bundle", "list", f, "--output", "json"]).ok().json();
    assert_eq!(
        (list["kind"].as_str(), list["schema_version"].as_u64()),
        (Some("bundle-list"), Some(1))
    );
    let first = &list["entries"][0];
    assert_eq!(first["entry"], "auth/admin.conf");
    assert_eq!(first["dest"], "/etc/kubernetes/pki/admin.conf");
    assert!(
        !list.to_string().contains("content of"),
        "list never shows contents"
    );
    let bad = root.run(&["bundle", "verify", f, "--sha256", &"1".repeat(64)]);
    assert_eq!(bad.code, 1);
    root.run(&["bundle", "install", f]).ok();
    assert_eq!(installed(&root).len(), GOLDEN.len());
    assert!(
        root.run(&["bundle", "recover"])
            .ok()
            .stdout
            .contains("nothing to recover")
    );
}

/// `bundle install FILE` is `apply`'s bundle step with the bytes from FILE: an unpinned smaller
/// bundle may not remove what the installed one put there; pinned by `--sha256`, it does.
#[test]
fn bundle_install_keeps_the_removal_rule_and_a_pin_lifts_it() {
    let root = controller(&pack(&typhoon(1)));
    root.run(&["apply", "--only", "bundle"]).ok();
    let before = installed(&root);
    let smaller = pack(&typhoon(1)[1..]);
    let file = root.path().join("var/lib/nodeward/smaller");
    std::fs::write(&file, &smaller).expect("write");
    let f = file.to_str().expect("utf-8");
    let out = root.run(&["bundle", "install", f]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .contains("would remove 1 file(s) an earlier bundle installed"),
        "{}",
        out.stdout
    );
    assert_eq!(installed(&root), before, "an unpinned bundle removed a file");
    // Control: the same bytes pinned remove the dropped entry, and nothing else changes.
    let pin = nodeward::bundle::install::sha256_hex(&smaller);
    root.run(&["bundle", "install", f, "--sha256", &pin]).ok();
    let after = installed(&root);
    assert_eq!(after.len(), before.len() - 1);
    assert!(!exists(&root, "/etc/kubernetes/pki/admin.conf"));
    // A wrong pin installs nothing.
    let out = root.run(&["bundle", "install", f, "--sha256", &"1".repeat(64)]);
    assert_eq!(out.code, 1);
    assert_eq!(installed(&root), after);
}

/// Kills the installer at every failpoint (after each staged file, after the journal, after each
/// commit operation) while replacing v1 by v2, then recovers: the files are exactly v1 or v2.
/// What a controller root holds after installing `entries`.
fn set_of(entries: &[(&str, String)]) -> std::collections::BTreeMap<String, String> {
    let probe = controller(&pack(entries));
    probe.run(&["apply", "--only", "bundle"]).ok();
    installed(&probe)
}

/// Stage files and stage directories anywhere in the root.
fn stage_leftovers(root: &Root) -> Vec<std::path::PathBuf> {
    root.snapshot()
        .into_keys()
        .filter(|p| p.to_string_lossy().contains("nodeward-stage"))
        .collect()
}

/// Every failpoint of an install that puts `puts` files and makes `commit_ops` commit operations.
fn kill_points(puts: usize, commit_ops: usize) -> Vec<String> {
    let mut points = vec!["bundle-staging:1".to_owned()];
    points.extend((1..=puts).map(|i| format!("bundle-stage:{i}")));
    points.push("bundle-dirs:1".into());
    points.push("bundle-journal:1".into());
    points.extend((1..=commit_ops).map(|i| format!("bundle-commit:{i}")));
    points
}

#[test]
fn a_crash_at_any_point_leaves_the_old_or_the_new_set() {
    let v1 = typhoon(1);
    let mut v2 = typhoon(2);
    v2.retain(|(n, _)| !n.starts_with("manifests/network"));
    v2.push(("manifests/extra/new.yaml", "brand new\n".into()));
    let (old, new) = (set_of(&v1), set_of(&v2));
    // Every kept file changes content, one is added, two are removed.
    let points = kill_points(v2.len(), v2.len() + 2);
    let (mut saw_old, mut saw_new) = (0, 0);
    for point in &points {
        let root = controller(&pack(&v1));
        root.run(&["apply", "--only", "bundle"]).ok();
        set_bundle_pinned(&root, &pack(&v2));
        kill_at(&root, point);
        root.run(&["bundle", "recover"]).ok();
        let now = installed(&root);
        if now == old {
            saw_old += 1;
        } else if now == new {
            saw_new += 1;
        } else {
            panic!("{point}: neither the old nor the new set:\n{now:#?}");
        }
        let stray = stage_leftovers(&root);
        assert!(stray.is_empty(), "{point}: stage files left: {stray:?}");
        // And the next install converges on v2 from wherever recovery left it.
        root.run(&["apply", "--only", "bundle"]).ok();
        assert_eq!(installed(&root), new, "{point}");
    }
    assert!(
        saw_old > 0 && saw_new > 0,
        "both outcomes exercised: old {saw_old}, new {saw_new}"
    );
}

#[test]
fn symlinked_parents_above_a_destination_are_followed() {
    // Fedora CoreOS: /opt is a link to var/opt; addon manifests must land in /var/opt/bootstrap.
    let root = controller(&pack(&[("manifests/coredns/svc.yaml", "svc\n".into())]));
    std::fs::create_dir_all(root.path().join("var/opt")).expect("mkdir");
    std::os::unix::fs::symlink("var/opt", root.path().join("opt")).expect("symlink");
    root.run(&["apply", "--only", "bundle"]).ok();
    assert_eq!(
        read(&root, "/var/opt/bootstrap/assets/manifests/coredns/svc.yaml"),
        "svc\n"
    );
    assert!(
        std::fs::symlink_metadata(root.path().join("opt"))
            .expect("stat")
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        root.run(&["plan", "--only", "bundle", "--detailed-exitcode"])
            .code,
        0
    );
}

#[test]
fn no_source_means_nothing_to_do() {
    let root = Root::new();
    let plan = root.run(&["plan", "--only", "bundle"]).ok();
    assert!(plan.stdout.contains("no bundle configured"), "{}", plan.stdout);
    let _ = Path::new("/");
}

/// Names that cannot be staged, or that look like other names, are refused before anything is
/// written: nested destinations, nodeward's own stage/temp names, segments too long for their
/// stage file, non-ASCII (bidi overrides, zero-width characters, NFC/NFD twins).
#[test]
fn names_that_would_fail_later_or_deceive_are_refused_up_front() {
    let ok = |n: &'static str| (n, "x\n".to_owned());
    // `x` and `x/y`: used to pass verify and plan, then fail after the commit point.
    assert_refused(
        &pack(&[ok("manifests/x"), ok("manifests/x/y")]),
        "",
        &["\"manifests/x\"", "\"manifests/x/y\"", "needs as a directory"],
    );
    // Named like a stage file of a sibling: used to collide with staging (wrong content, exit 0).
    assert_refused(
        &pack(&[
            ok("manifests/coredns/svc.yaml"),
            ok("manifests/coredns/.svc.yaml.nodeward-stage"),
        ]),
        "",
        &[".svc.yaml.nodeward-stage", "reserved"],
    );
    assert_refused(&pack(&[ok("manifests/.a.yaml.nodeward-tmp")]), "", &["reserved"]);
    // 240 bytes: a valid file name, but its stage file's would be 256.
    let long = format!("manifests/{}", "a".repeat(240));
    let long: &'static str = Box::leak(long.into_boxed_str());
    assert_refused(&pack(&[ok(long)]), "", &["longer than 239 bytes"]);
    let fits = format!("manifests/{}", "b".repeat(239));
    let fits: &'static str = Box::leak(fits.into_boxed_str());
    let root = controller(&pack(&[ok(fits)]));
    root.run(&["apply", "--only", "bundle"]).ok();
    // Right-to-left override and zero-width space.
    assert_refused(
        &pack(&[ok("manifests/a\u{202e}lmay.exe")]),
        "",
        &["non-ASCII", "\\u{202e}"],
    );
    assert_refused(
        &pack(&[ok("manifests/a\u{200b}b")]),
        "",
        &["non-ASCII", "\\u{200b}"],
    );
    // The same name in NFC and NFD.
    assert_refused(
        &pack(&[ok("manifests/caf\u{e9}.yaml"), ok("manifests/cafe\u{301}.yaml")]),
        "",
        &["non-ASCII"],
    );
}

/// The state files of an interrupted install, as the next writer finds them.
fn journal_exists(root: &Root) -> bool {
    root.path().join("var/lib/nodeward/bundle/journal.json").exists()
}

fn kill_at(root: &Root, point: &str) {
    let out = std::process::Command::new(common::BIN)
        .args(["apply", "--only", "bundle", "--root"])
        .arg(root.path())
        .env("NODEWARD_FAILPOINT", point)
        .output()
        .expect("run");
    assert!(!out.status.success(), "{point}: the failpoint must fire");
}

/// v2 is killed just after its journal (its commit point), then the admin puts v1 back. Recovery
/// used to run only inside an install: with v1 already on disk the plan was empty, so v2's journal
/// and stage files stayed, `status` said converged, and a later v3 first replayed v2.
#[test]
fn an_interrupted_install_is_finished_before_anything_is_planned() {
    let v1 = typhoon(1);
    let mut v2 = typhoon(2);
    v2.push(("static-manifests/extra.yaml", "v2 only\n".into()));
    let root = controller(&pack(&v1));
    root.run(&["apply", "--only", "bundle"]).ok();
    let v1_set = installed(&root);
    set_bundle(&root, &pack(&v2));
    kill_at(&root, "bundle-journal:1");
    assert!(journal_exists(&root));

    // Before any writer runs, the pending install is drift.
    set_bundle_pinned(&root, &pack(&v1));
    let plan = root.run(&["plan", "--only", "bundle", "--detailed-exitcode"]);
    assert_eq!(plan.code, 4, "{}", plan.stdout);
    assert!(
        plan.stdout.contains("finish an interrupted install"),
        "{}",
        plan.stdout
    );
    let status = root.run(&["status", "--only", "bundle"]);
    assert_eq!(status.code, 4, "{}", status.stdout);

    // apply: v2 finished first, then v1 installed over it; v2's extra manifest is gone.
    let run = root.run(&["apply", "--only", "bundle"]).ok();
    assert!(
        run.stdout.contains("finished an interrupted install"),
        "{}",
        run.stdout
    );
    assert!(!journal_exists(&root));
    assert_eq!(installed(&root), v1_set);
    assert!(!root.path().join("etc/kubernetes/manifests/extra.yaml").exists());
    let again = root.run(&["plan", "--only", "bundle", "--detailed-exitcode"]);
    assert_eq!(again.code, 0, "{}", again.stdout);
}

/// The crash harness's harder half: kill an install of v2 at every failpoint (staging record,
/// each staged file, the journal, each commit operation), then *without* a manual recover apply a
/// different bundle, the previous one (v1) or a third (v3). Every run must end exactly on the set
/// applied last: nothing partial or stale, no stage file left, nothing of v2's resurrected.
#[test]
fn a_crash_then_a_different_bundle_ends_exactly_on_that_bundle() {
    // Larger bundles than Typhoon's so the harness reaches over 200 kill points.
    let bundle = |version: u32, extra: &str, n: usize| -> Vec<(&'static str, String)> {
        let mut v = typhoon(version);
        for i in 0..n {
            let name: &'static str = Box::leak(format!("manifests/{extra}/m{i}.yaml").into_boxed_str());
            v.push((name, format!("v{version} {extra} {i}\n")));
        }
        v
    };
    let v1 = bundle(1, "one", 20);
    let v2 = bundle(2, "two", 40);
    let v3 = bundle(3, "three", 10);
    let (set1, set3) = (set_of(&v1), set_of(&v3));
    // v1 → v2: every kept file changes, 40 added (in a new directory: one rename), 20 removed.
    let points = kill_points(v2.len(), v2.len() - 40 + 1 + 20);
    let mut trials = 0;
    for point in &points {
        for (next, want) in [(&v1, &set1), (&v3, &set3)] {
            let root = controller(&pack(&v1));
            root.run(&["apply", "--only", "bundle"]).ok();
            set_bundle_pinned(&root, &pack(&v2));
            kill_at(&root, point);
            set_bundle_pinned(&root, &pack(next));
            root.run(&["apply", "--only", "bundle"]).ok();
            let now = installed(&root);
            assert_eq!(&now, want, "{point}: not exactly the bundle applied last");
            let left: Vec<_> = root
                .snapshot()
                .into_keys()
                .filter(|p| {
                    let s = p.to_string_lossy();
                    s.contains("nodeward-stage") || s.ends_with("journal.json") || s.ends_with("staging.json")
                })
                .collect();
            assert!(left.is_empty(), "{point}: left behind: {left:?}");
            // Directories v2 alone needed are gone too (roll-back) or emptied away (roll-forward
            // then delete leaves them; they hold nothing).
            let two = root.path().join("opt/bootstrap/assets/manifests/two");
            let stray: Vec<_> = std::fs::read_dir(&two)
                .map(|d| d.flatten().map(|e| e.path()).collect())
                .unwrap_or_default();
            assert!(stray.is_empty(), "{point}: v2 files resurrected: {stray:?}");
            trials += 1;
        }
    }
    assert!(trials >= 200, "only {trials} kill points");
}

/// A first install creates its directories whole (staged beside them, renamed into place): killed
/// at any point, recovery leaves nothing at all or the whole bundle, never a part of it, and no
/// stage directory; the next apply ends on the bundle.
#[test]
fn a_first_install_killed_anywhere_leaves_nothing_or_everything() {
    let v1 = typhoon(1);
    let all = set_of(&v1);
    let mut points = kill_points(v1.len(), 0);
    // One commit operation per directory created whole, however many that is on this root.
    points.extend((1..).map(|i| format!("bundle-commit:{i}")).take_while(|point| {
        let probe = controller(&pack(&v1));
        let out = std::process::Command::new(common::BIN)
            .args(["apply", "--only", "bundle", "--root"])
            .arg(probe.path())
            .env("NODEWARD_FAILPOINT", point)
            .output()
            .expect("run");
        !out.status.success()
    }));
    assert!(
        points.iter().any(|p| p == "bundle-commit:2"),
        "several directories created whole: {points:?}"
    );
    let (mut nothing, mut everything) = (0, 0);
    for point in &points {
        let root = controller(&pack(&v1));
        kill_at(&root, point);
        root.run(&["bundle", "recover"]).ok();
        let now = installed(&root);
        if now.is_empty() {
            nothing += 1;
            for dir in ["etc/kubernetes", "etc/ssl", "opt"] {
                assert!(
                    !root.path().join(dir).exists(),
                    "{point}: {dir} left by a roll-back"
                );
            }
        } else {
            assert_eq!(now, all, "{point}: a part of the bundle");
            everything += 1;
        }
        let left = stage_leftovers(&root);
        assert!(left.is_empty(), "{point}: left behind: {left:?}");
        root.run(&["apply", "--only", "bundle"]).ok();
        assert_eq!(installed(&root), all, "{point}: the next apply");
    }
    assert!(
        nothing > 0 && everything > 0,
        "{nothing} rolled back, {everything} forward"
    );
}

/// Directories created and modes changed before the commit point are undone by a roll-back.
#[test]
fn a_roll_back_undoes_directories_too() {
    let v1 = typhoon(1);
    let mut v2 = typhoon(2);
    v2.push(("manifests/brand/new/dir/a.yaml", "new\n".into()));
    let root = controller(&pack(&v1));
    root.run(&["apply", "--only", "bundle"]).ok();
    // Someone loosened etcd's directory; v2's install tightens it once its files are staged.
    let etcd = root.path().join("etc/ssl/etcd/etcd");
    std::fs::set_permissions(&etcd, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    set_bundle(&root, &pack(&v2));
    kill_at(&root, "bundle-stage:1");
    // A directory the install creates whole is staged beside its place, invisible until the commit.
    assert!(
        root.path()
            .join("opt/bootstrap/assets/manifests/.brand.nodeward-stage/new/dir")
            .is_dir()
    );
    assert!(!root.path().join("opt/bootstrap/assets/manifests/brand").exists());
    let stage = root
        .path()
        .join("opt/bootstrap/assets/manifests/.brand.nodeward-stage");
    let mode = std::fs::metadata(&stage).expect("stat").mode() & 0o7777;
    assert_eq!(
        mode, 0o700,
        "only root enters a stage directory until it is complete"
    );
    let mode_of = |p: &std::path::Path| std::fs::metadata(p).expect("stat").mode() & 0o7777;
    assert_eq!(
        mode_of(&etcd),
        0o755,
        "no visible change before the staged files are flushed"
    );
    root.run(&["bundle", "recover"]).ok();
    let gone = |root: &Root| {
        !root.path().join("opt/bootstrap/assets/manifests/brand").exists()
            && !root
                .path()
                .join("opt/bootstrap/assets/manifests/.brand.nodeward-stage")
                .exists()
    };
    assert!(
        gone(&root),
        "directories the interrupted install created are removed"
    );
    // Killed again once the directories are changed, just before the commit point.
    kill_at(&root, "bundle-dirs:1");
    assert_eq!(mode_of(&etcd), 0o500, "the install had tightened the directory");
    root.run(&["bundle", "recover"]).ok();
    assert!(gone(&root));
    assert_eq!(mode_of(&etcd), 0o755, "the mode the directory had is given back");
}

/// The staging record is flushed with the staged files, not on its own: after a power cut before
/// that flush it can be empty. Nothing visible had changed then, so it is dropped (with its stage
/// files left for the next install to replace), and the node converges.
#[test]
fn an_empty_staging_record_after_a_power_cut_is_dropped() {
    let v1 = typhoon(1);
    let root = controller(&pack(&v1));
    root.run(&["apply", "--only", "bundle"]).ok();
    let v1_set = installed(&root);
    let mut v2 = typhoon(2);
    v2.push(("manifests/extra/new.yaml", "new\n".into()));
    set_bundle(&root, &pack(&v2));
    kill_at(&root, "bundle-stage:2");
    let record = root.path().join("var/lib/nodeward/bundle/staging.json");
    std::fs::write(&record, b"").expect("truncate the record");
    let status = root.run(&["status"]);
    assert!(
        status.stdout.contains("bundle"),
        "status still reads with an empty record: {}",
        status.stdout
    );
    let out = root.run(&["bundle", "recover"]).ok();
    assert!(!record.exists(), "the record is removed");
    // Staging runs on two threads, so when the power went, a file of a directory new to this
    // install may have been staged already: inside a stage directory only root can enter, it is
    // invisible and left for the next install (see `read_staging`). Everything else is v1.
    let (staged, visible): (Vec<_>, std::collections::BTreeMap<_, _>) = {
        let all = installed(&root);
        let staged = all
            .keys()
            .filter(|p| p.contains(".nodeward-stage/"))
            .cloned()
            .collect();
        (
            staged,
            all.into_iter()
                .filter(|(p, _)| !p.contains(".nodeward-stage/"))
                .collect(),
        )
    };
    for p in &staged {
        let dir = std::path::Path::new(p).parent().expect("stage dir");
        let mode = std::fs::metadata(root.path().join(dir.strip_prefix("/").expect("absolute")))
            .expect("stage dir")
            .mode();
        assert_eq!(mode & 0o077, 0, "{p}: a stage directory is root's alone");
    }
    assert_eq!(visible, v1_set, "nothing visible had changed");
    assert!(out.stderr.contains("unreadable staging record"), "{}", out.stderr);
    root.run(&["apply", "--only", "bundle"]).ok();
    assert_eq!(installed(&root), set_of(&v2), "the next install converges");
    root.run(&["apply", "--only", "bundle"]).ok();
}

/// Starts nodeward on `root` without waiting for it; stdout and stderr made by `out`.
fn spawn_in(root: &Root, args: &[&str], out: fn() -> std::process::Stdio) -> std::process::Child {
    std::process::Command::new(common::BIN)
        .args(args)
        .arg("--root")
        .arg(root.path())
        .stdout(out())
        .stderr(out())
        .spawn()
        .expect("spawn")
}

/// Every writer takes the same lock: an apply waits for a writer that holds it.
#[test]
fn writers_wait_for_each_other() {
    let root = controller(&pack(&typhoon(1)));
    let held = nodeward::host::lock::FileLock::acquire(
        &nodeward::root::HostRoot::at(root.path()),
        nodeward::host::lock::WRITE,
        "is changing this node",
        std::time::Duration::ZERO,
    )
    .expect("lock");
    let file = root.path().join("var/lib/nodeward/assets");
    let file = file.to_str().expect("utf-8");
    for args in [
        &["apply", "--only", "bundle"][..],
        &["bundle", "recover"][..],
        &["bundle", "install", file][..],
    ] {
        let mut child = spawn_in(&root, args, std::process::Stdio::null);
        std::thread::sleep(std::time::Duration::from_millis(700));
        assert!(
            child.try_wait().expect("try_wait").is_none(),
            "{args:?} ran while another writer held the lock"
        );
        let _ = child.kill();
        let _ = child.wait();
    }
    assert!(
        !root.path().join("etc/kubernetes/pki/ca.key").exists(),
        "nothing was installed"
    );
    drop(held);
    root.run(&["apply", "--only", "bundle"]).ok();
    assert!(root.path().join("etc/kubernetes/pki/ca.key").exists());
}

/// A zero-length bundle is refused by every command, and an installed node keeps all its files.
#[test]
fn an_empty_bundle_is_refused_and_removes_nothing() {
    let root = controller(&pack(&typhoon(1)));
    root.run(&["apply", "--only", "bundle"]).ok();
    let before = installed(&root);
    set_bundle(&root, b"");
    let out = root.run(&["apply", "--only", "bundle"]);
    assert_ne!(out.code, 0, "{}", out.stdout);
    let said = format!("{}{}", out.stdout, out.stderr);
    assert!(
        said.contains("/var/lib/nodeward/assets: the bundle has no entries"),
        "{said}"
    );
    assert_eq!(installed(&root), before, "an empty bundle changed the node");
    let file = root.path().join("var/lib/nodeward/assets");
    let verify = root.run(&["bundle", "verify", file.to_str().expect("utf-8")]);
    assert_eq!(verify.code, 1, "{}", verify.stdout);
    assert!(verify.stderr.contains("no entries"), "{}", verify.stderr);
}

/// Four entries, the last a static pod whose removal would take a control-plane pod down.
fn small_controller_bundle() -> Vec<(&'static str, String)> {
    vec![
        ("auth/admin.conf", "apiVersion: v1\nkind: Config\n".into()),
        (
            "tls/k8s/ca.crt",
            "-----BEGIN CERTIFICATE-----\nMIIBca\n-----END CERTIFICATE-----\n".into(),
        ),
        (
            "static-manifests/kube-apiserver.yaml",
            "kind: Pod\nname: api\n".into(),
        ),
        (
            "static-manifests/kube-scheduler.yaml",
            "kind: Pod\nname: sched\n".into(),
        ),
    ]
}

/// An unpinned bundle cut at any byte never removes an installed file: either it is refused as cut
/// short, or it is refused for the removals it would make, or (cut inside the last entry after a
/// newline) it updates files but removes none. The control: the same smaller bundle, pinned, does
/// remove what it dropped.
#[test]
fn a_truncated_unpinned_bundle_never_removes_a_file() {
    let entries = small_controller_bundle();
    let whole = pack(&entries);
    let root = controller(&whole);
    root.run(&["apply", "--only", "bundle"]).ok();
    let before = installed(&root);
    assert_eq!(before.len(), 4);
    let (mut refused, mut applied) = (0, 0);
    for cut in 0..whole.len() {
        set_bundle(&root, &whole[..cut]);
        let out = root.run(&["apply", "--only", "bundle"]);
        if out.code == 0 {
            applied += 1;
        } else {
            refused += 1;
        }
        let now = installed(&root);
        let missing: Vec<_> = before.keys().filter(|p| !now.contains_key(*p)).collect();
        assert!(
            missing.is_empty(),
            "cut at byte {cut}: removed {missing:?}\n{}",
            out.stderr
        );
        // Put the whole bundle back so every cut starts from the installed node.
        set_bundle(&root, &whole);
        root.run(&["apply", "--only", "bundle"]).ok();
    }
    assert!(refused > applied, "refused {refused}, applied {applied}");
    // The control: a complete, smaller bundle removes its dropped file only when pinned.
    let smaller = pack(&entries[..3]);
    set_bundle(&root, &smaller);
    let unpinned = root.run(&["apply", "--only", "bundle"]);
    assert_ne!(unpinned.code, 0);
    let said = format!("{}{}", unpinned.stdout, unpinned.stderr);
    assert!(
        said.contains("would remove 1 file(s)")
            && said.contains("/etc/kubernetes/manifests/kube-scheduler.yaml"),
        "{said}"
    );
    set_bundle_pinned(&root, &smaller);
    root.run(&["apply", "--only", "bundle"]).ok();
    assert!(
        !exists(&root, "/etc/kubernetes/manifests/kube-scheduler.yaml"),
        "the pinned smaller bundle removes what it dropped"
    );
}

/// A FIFO (no writer), a device or a socket as the bundle source, or as a configuration drop-in, is
/// an error naming the file at once: never a hang, never an endless read.
#[test]
fn special_files_as_bundle_source_or_drop_in_are_refused_at_once() {
    use std::time::{Duration, Instant};
    let run_within = |root: &Root, args: &[&str], needle: &str| {
        let started = Instant::now();
        let mut child = spawn_in(root, args, std::process::Stdio::piped);
        while child.try_wait().expect("wait").is_none() {
            // A hang detector: a read of a FIFO without a writer never ends, so a generous bound
            // still tells (the refusal itself is asserted below, by its words).
            if started.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                panic!("{args:?} with {needle}: still running after 30 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output().expect("output");
        let err = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.status.success(), "{args:?}: {needle} accepted");
        assert!(
            err.contains(needle) && err.contains("not a regular file"),
            "{args:?}: {err}"
        );
    };
    type Make = fn(&Path);
    let kinds: [(&str, Make); 3] = [
        ("a FIFO", |p| {
            nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo")
        }),
        // /dev/zero's own device numbers: an endless read if it were read.
        ("a character device", |p| {
            nix::sys::stat::mknod(
                p,
                nix::sys::stat::SFlag::S_IFCHR,
                nix::sys::stat::Mode::from_bits_truncate(0o600),
                nix::sys::stat::makedev(1, 5),
            )
            .expect("mknod")
        }),
        ("a socket", |p| {
            std::mem::forget(std::os::unix::net::UnixListener::bind(p).expect("bind"));
        }),
    ];
    for (what, make) in kinds {
        // As the bundle source.
        let root = controller(b"");
        let source = root.path().join("var/lib/nodeward/assets");
        std::fs::remove_file(&source).expect("rm");
        make(&source);
        for args in [
            &["apply", "--only", "bundle"][..],
            &["plan", "--only", "bundle"][..],
        ] {
            run_within(
                &root,
                args,
                &format!("/var/lib/nodeward/assets: cannot read: not a regular file ({what})"),
            );
        }
        // As a drop-in.
        let root = controller(&pack(&typhoon(1)));
        make(&root.path().join("etc/nodeward/config.d/50-special.toml"));
        for args in [&["config"][..], &["plan"][..], &["apply"][..]] {
            run_within(
                &root,
                args,
                &format!("50-special.toml: cannot read: not a regular file ({what})"),
            );
        }
    }
}

/// Verify agrees with apply: on seeded random bundles whose names collide on purpose (`x`,
/// `x.yaml`, `x/y` sandwiches, `x-1`, deep children), `bundle verify` accepts exactly what
/// `apply` installs, and an accepted bundle lands exactly where `bundle list` says, with no stage
/// file left behind.
#[test]
fn verify_accepts_exactly_what_apply_installs() {
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let segments = ["x", "x.yaml", "x-1", "y", "x.a"];
    let (mut accepted, mut refused) = (0, 0);
    for case in 0..120 {
        let n = (next() % 4) as usize + 2;
        let mut names: Vec<String> = (0..n)
            .map(|_| {
                let depth = (next() % 3) as usize + 1;
                let mut name = String::from("manifests");
                for _ in 0..depth {
                    name.push('/');
                    name.push_str(segments[(next() as usize) % segments.len()]);
                }
                name
            })
            .collect();
        if case % 4 == 0 {
            // The sandwich itself, seeded.
            names.extend(["manifests/x", "manifests/x.yaml", "manifests/x/y"].map(String::from));
        }
        names.sort();
        names.dedup();
        let entries: Vec<(&str, String)> = names.iter().map(|n| (n.as_str(), format!("{n}\n"))).collect();
        let root = controller(&pack(&entries));
        let file = root.path().join("var/lib/nodeward/assets");
        let f = file.to_str().expect("utf-8");
        let verify = root.run(&["bundle", "verify", f]);
        let apply = root.run(&["apply", "--only", "bundle"]);
        let stages = stage_leftovers(&root);
        assert!(stages.is_empty(), "{names:?}: stage files left: {stages:?}");
        if verify.code != 0 {
            refused += 1;
            assert_ne!(apply.code, 0, "{names:?}: verify refused, apply installed");
            assert!(
                installed(&root).is_empty(),
                "{names:?}: a refused bundle installed files"
            );
            continue;
        }
        accepted += 1;
        assert_eq!(
            apply.code, 0,
            "{names:?}: verify accepted, apply failed: {}",
            apply.stdout
        );
        let listed: std::collections::BTreeMap<String, String> =
            root.run(&["bundle", "list", f, "--output", "json"]).ok().json()["entries"]
                .as_array()
                .expect("rows")
                .iter()
                .map(|r| {
                    let entry = r["entry"].as_str().expect("entry");
                    (r["dest"].as_str().expect("dest").to_owned(), format!("{entry}\n"))
                })
                .collect();
        assert_eq!(installed(&root), listed, "{names:?}");
    }
    assert!(
        accepted > 20 && refused > 20,
        "accepted {accepted}, refused {refused}"
    );
}

/// An install refused at planning (a directory it needs is a file on the host) touches nothing.
#[test]
fn an_install_refused_at_planning_touches_nothing() {
    let root = controller(&pack(&[
        ("manifests/a/one.yaml", "one\n".into()),
        ("manifests/x/y.yaml", "y\n".into()),
    ]));
    root.write("opt/bootstrap/assets/manifests/x", "the host's own file\n");
    let out = root.run(&["apply", "--only", "bundle"]);
    assert_ne!(out.code, 0, "{}", out.stdout);
    assert!(
        out.stdout.contains("/opt/bootstrap/assets/manifests/x"),
        "{}",
        out.stdout
    );
    assert_eq!(stage_leftovers(&root), Vec::<std::path::PathBuf>::new());
    assert_eq!(
        read(&root, "/opt/bootstrap/assets/manifests/x"),
        "the host's own file\n"
    );
    assert!(!exists(&root, "/opt/bootstrap/assets/manifests/a/one.yaml"));
}

/// An install that fails while staging (an injected I/O error, as a full disk gives) is rolled
/// back at once: no stage file or half-made directory waits for the next install, and the
/// installed bundle stays as it was.
#[test]
fn a_failed_install_is_rolled_back_at_once() {
    let root = controller(&pack(&typhoon(1)));
    root.run(&["apply", "--only", "bundle"]).ok();
    let before = installed(&root);
    set_bundle(&root, &pack(&typhoon(2)));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nodeward"))
        .args(["apply", "--only", "bundle", "--root"])
        .arg(root.path())
        .env("NODEWARD_FAIL_IO", "bundle-stage")
        .output()
        .expect("run");
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(7), "{said}");
    assert!(said.contains("injected I/O error"), "{said}");
    assert_eq!(stage_leftovers(&root), Vec::<std::path::PathBuf>::new());
    assert_eq!(installed(&root), before);
    assert!(
        !root.path().join("var/lib/nodeward/bundle/staging.json").exists(),
        "the staging record waits for the next install"
    );
}

/// Text from the host reaches a terminal escaped: a bundle source named with a right-to-left
/// override is shown as `\u{202e}`, not as an override that reverses what follows it.
#[test]
fn deceptive_characters_in_host_text_are_escaped_on_the_terminal() {
    let root = Root::new();
    root.write(
        "etc/nodeward/config.d/10-b.toml",
        "[bundle]\nsource = \"/var/lib/evil\u{202e}txt.exe\"\n",
    );
    let out = root.run(&["plan", "--only", "bundle"]);
    assert!(!out.stdout.contains('\u{202e}'), "{}", out.stdout);
    assert!(
        out.stdout.contains("/var/lib/evil\\u{202e}txt.exe"),
        "{}",
        out.stdout
    );
    // JSON keeps the value exact for a parser.
    let json = root.run(&["plan", "--only", "bundle", "--output", "json"]);
    assert!(json.stdout.contains('\u{202e}'), "{}", json.stdout);
}

/// `--sha256` is checked for its shape before anything is read: a typo is a usage error (exit 2).
#[test]
fn a_malformed_sha256_is_a_usage_error() {
    let root = Root::new();
    let file = root.write("assets", "##### tls/k8s/ca.crt\nx\n");
    for bad in ["0000", &"g".repeat(64), &"0".repeat(63)] {
        let out = std::process::Command::new(common::BIN)
            .args(["bundle", "verify", "--sha256", bad])
            .arg(&file)
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(2), "{bad}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("is not a sha256 (64 hex digits)"));
    }
}

/// `bundle verify` of another role's bundle names the layout it used and how to name another;
/// `bundle list` of a cut-short copy lists it, warns, and exits 1.
#[test]
fn verify_names_its_layout_and_list_warns_of_a_cut_short_copy() {
    let root = Root::new();
    let file = root.write("assets", "##### tls/etcd/server.crt\nx\n");
    let out = std::process::Command::new(common::BIN)
        .args(["bundle", "verify"])
        .arg(&file)
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("checked with the worker (from node.role) layout")
            && err.contains("--layout controller"),
        "{err}"
    );
    let cut = root.write("cut", "##### tls/k8s/ca.crt\nabc\n##### tls/k8s/ca.key\nxy");
    let out = std::process::Command::new(common::BIN)
        .args(["bundle", "list", "--layout", "controller"])
        .arg(&cut)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("tls/k8s/ca.key"),
        "still listed"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("looks cut short"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A node whose custom layout gives the user `app` its own directory, `/srv/app/conf`, and a
/// bundle with one secret for it.
fn app_node() -> (Root, tempfile::TempDir) {
    let root = Root::new();
    root.write("usr/lib/passwd", "app:x:1000:1000::/home/app:/sbin/nologin\n");
    root.write("usr/lib/group", "app:x:1000:\n");
    root.write(
        "etc/nodeward/config.d/10-app.toml",
        "[bundle]\nsource = \"/var/lib/nodeward/assets\"\nlayout = \"custom\"\n\
         [[bundle.rules]]\nmatch = \"app/*\"\ndest = \"/srv/app/conf\"\nmode = \"0600\"\nowner = \"app\"\n\
         group = \"app\"\ndir_mode = \"0700\"\n",
    );
    set_bundle(&root, &pack(&[("app/secret", "the bundle's secret\n".into())]));
    let conf = root.path().join("srv/app/conf");
    std::fs::create_dir_all(&conf).expect("mkdir");
    std::os::unix::fs::chown(&conf, Some(1000), Some(1000)).expect("chown");
    // Outside the root: a root-owned secret the user must never reach.
    let outside = tempfile::tempdir().expect("outside");
    std::fs::write(outside.path().join("secret"), "root's own\n").expect("write");
    (root, outside)
}

/// Runs `apply --only bundle` held at `point`; there, `swap` runs (the user's move), then the
/// install goes on. Returns its output.
fn apply_swapped_at(root: &Root, point: &str, swap: impl FnOnce()) -> std::process::Output {
    let gate = root.path().join("gate");
    let child = std::process::Command::new(common::BIN)
        .args(["apply", "--only", "bundle", "--root"])
        .arg(root.path())
        .env("NODEWARD_PAUSE", format!("{point}:{}", gate.display()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let reached = root.path().join("gate.reached");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !reached.exists() {
        assert!(std::time::Instant::now() < deadline, "{point} never reached");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    swap();
    std::fs::write(&gate, "").expect("let it go on");
    child.wait_with_output().expect("wait")
}

/// The user who owns `/srv/app/conf` swaps it for a symlink to a directory outside the root while
/// the install is held just before it creates its stage file, or just before it renames the stage
/// file into place (with the user's own file planted at the stage name there). The install must
/// fail naming the symlink and write nothing outside the root. Control: the same node, nothing
/// swapped, installs the secret with its owner and mode.
#[test]
fn an_install_never_writes_through_a_directory_swapped_for_a_symlink() {
    let (root, outside) = app_node();
    let conf = root.path().join("srv/app/conf");
    let out = apply_swapped_at(&root, "bundle-stage", || {
        std::fs::rename(&conf, root.path().join("srv/app/conf.moved")).expect("mv");
        std::os::unix::fs::symlink(outside.path(), &conf).expect("symlink");
    });
    let said = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let names: Vec<_> = std::fs::read_dir(outside.path())
        .expect("dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(
        names,
        ["secret"],
        "a stage file was created outside the root: {said}"
    );
    assert_eq!(
        std::fs::read_to_string(outside.path().join("secret")).expect("read"),
        "root's own\n"
    );
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("a symlink now stands on the path"), "{said}");

    let (root, outside) = app_node();
    let conf = root.path().join("srv/app/conf");
    let out = apply_swapped_at(&root, "bundle-rename", || {
        std::fs::rename(&conf, root.path().join("srv/app/conf.moved")).expect("mv");
        std::os::unix::fs::symlink(outside.path(), &conf).expect("symlink");
        std::fs::write(outside.path().join(".secret.nodeward-stage"), "the user's\n").expect("plant");
    });
    let said = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        std::fs::read_to_string(outside.path().join("secret")).expect("read"),
        "root's own\n",
        "renamed over a file outside the root: {said}"
    );
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("a symlink now stands on the path"), "{said}");

    // Control: nothing swapped.
    let (root, _outside) = app_node();
    let run = root.run(&["apply", "--only", "bundle"]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    let secret = root.path().join("srv/app/conf/secret");
    let meta = std::fs::metadata(&secret).expect("installed");
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    assert_eq!((meta.uid(), meta.permissions().mode() & 0o777), (1000, 0o600));
}
