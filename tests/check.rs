//! `nodeward check` end to end: the observation layer on the real host (what it reads must agree
//! with what the host shows by other means), on an image root (everything live is skipped), the
//! ignore list from the command line and the configuration, and the exit codes.

mod common;

use common::Root;

fn check_of<'a>(doc: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    doc["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name} in {doc}"))
}

fn run_live(args: &[&str]) -> common::Run {
    let out = std::process::Command::new(common::BIN)
        .args(args)
        .output()
        .expect("nodeward");
    common::Run::from(out)
}

#[test]
fn on_the_real_host_what_it_reads_agrees_with_the_host() {
    let run = run_live(&["check", "--output", "json"]);
    assert!([0, 5, 6].contains(&run.code), "exit {}: {}", run.code, run.stderr);
    let doc = run.json();
    let names: Vec<&str> = doc["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names.len(), 22, "{names:?}");
    let expected_code = match doc["result"].as_str() {
        Some("fail") => 6,
        Some("warn") => 5,
        _ => 0,
    };
    assert_eq!(run.code, expected_code, "{}", run.stdout);

    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("release");
    assert_eq!(check_of(&doc, "kernel-version")["observed"], release.trim());
    let swaps = std::fs::read_to_string("/proc/swaps").expect("swaps");
    let swap_on = swaps.lines().count() > 1;
    assert_eq!(
        check_of(&doc, "swap")["status"],
        if swap_on { "fail" } else { "pass" },
        "{swaps}"
    );
    if let Ok(id) = std::fs::read_to_string("/etc/machine-id")
        && id.trim().len() == 32
    {
        assert_eq!(check_of(&doc, "machine-id")["observed"], id.trim());
    }
    let cgroup2 = std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    let cgroups = check_of(&doc, "cgroups")["observed"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(cgroups.starts_with("cgroup v2"), cgroup2, "{cgroups}");
    // Every non-passing check says what to do.
    for c in doc["checks"].as_array().expect("checks") {
        if c["status"] == "fail" || c["status"] == "warn" {
            assert!(c["fix"].as_str().is_some_and(|f| !f.is_empty()), "{c}");
        }
    }
}

#[test]
fn an_image_root_skips_what_only_a_running_system_shows() {
    let root = Root::new();
    root.write("etc/machine-id", "uninitialized\n");
    root.write("etc/hostname", "localhost\n");
    // Without /etc/hosts, `localhost` names nothing: a warning (kubectl port-forward needs it).
    let run = root.run(&["check", "--output", "json"]);
    assert_eq!(
        check_of(&run.json(), "localhost")["status"],
        "warn",
        "{}",
        run.stdout
    );
    root.write("etc/hosts", "127.0.0.1 localhost\n::1 localhost ip6-localhost\n");
    let run = root.run(&["check", "--output", "json"]);
    assert_eq!(run.code, 6, "{}", run.stdout);
    assert_eq!(
        check_of(&run.json(), "localhost")["status"],
        "pass",
        "{}",
        run.stdout
    );
    let doc = run.json();
    for name in [
        "kernel-version",
        "kernel-config",
        "cgroups",
        "swap",
        "runtime-storage",
        "ports",
        "time-sync",
    ] {
        assert_eq!(check_of(&doc, name)["status"], "skipped", "{name}: {doc}");
    }
    // An image: `uninitialized` (or no file) is right, systemd makes the id at first boot.
    assert_eq!(check_of(&doc, "machine-id")["status"], "pass", "{doc}");
    assert_eq!(check_of(&doc, "hostname")["status"], "fail");

    // Ignored from the command line, then from the configuration: shown, not counted.
    let run = root.run(&["check", "--ignore", "hostname,cni"]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert!(run.stdout.contains("hostname         ignored"), "{}", run.stdout);
    root.write(
        "etc/nodeward/config.d/50-check.toml",
        "[check]\nignore = [\"hostname\"]\n",
    );
    let run = root.run(&["check", "--ignore", "cni"]);
    assert_eq!(run.code, 0, "{}", run.stdout);
}

#[test]
fn unknown_check_names_are_refused() {
    let root = Root::new();
    let run = root.run(&["check", "--ignore", "swapp"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("no check named \"swapp\""), "{}", run.stderr);
    let path = root.write(
        "etc/nodeward/config.d/50-check.toml",
        "[check]\nignore = [\"swapp\"]\n",
    );
    let run = root.run(&["check"]);
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert!(
        run.stderr.contains(&path.display().to_string()) && run.stderr.contains("check.ignore"),
        "{}",
        run.stderr
    );
}

/// An image with a machine id baked in: every node booted from it would share it.
#[test]
fn an_image_with_a_baked_machine_id_fails_and_one_without_passes() {
    let root = Root::new();
    root.write("etc/machine-id", "0123456789abcdef0123456789abcdef\n");
    let doc = root.run(&["check", "--output", "json"]).json();
    assert_eq!(check_of(&doc, "machine-id")["status"], "fail", "{doc}");
    std::fs::remove_file(root.path().join("etc/machine-id")).expect("rm");
    let doc = root.run(&["check", "--output", "json"]).json();
    assert_eq!(check_of(&doc, "machine-id")["status"], "pass", "{doc}");
}

/// A registry on loopback (std only): `HEAD /v2/NAME/manifests/REF` answers 200 for the one
/// manifest it serves, anything else 404; each request's line is kept.
fn registry(serves: &'static str) -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut stream = stream;
            // The whole request head before answering (closing with unread bytes resets it).
            let mut buf = Vec::new();
            let mut chunk = [0u8; 1024];
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 16384 {
                match stream.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            let head = String::from_utf8_lossy(&buf).into_owned();
            let line = head.lines().next().unwrap_or("").to_owned();
            let status = if line.starts_with(&format!("HEAD /v2/{serves} ")) {
                "200 OK"
            } else {
                "404 Not Found"
            };
            log.lock().expect("log").push(line);
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            );
        }
    });
    (port, seen)
}

/// The `images` check, end to end on an image root (no engine is asked there): the kubelet's image
/// shipped (the import record names an archive that holds its pinned digest), the pod sandbox image
/// pullable from the containerd mirror nodeward configures (asked over HTTP, as containerd would);
/// the control, a sandbox image the mirror does not have, fails naming it and the mirror's answer.
#[test]
fn images_present_shipped_or_pullable_and_one_from_nowhere_named() {
    let (port, asked) = registry("pause/manifests/3.10.1");
    let digest = format!("sha256:{}", "a".repeat(64));
    let root = Root::new();
    root.write("etc/hostname", "node-1\n");
    let config = |sandbox: &str| {
        format!(
            "[kubelet]\nimage = \"quay.io/poseidon/kubelet@{digest}\"\n\
             [containerd]\nmanage = true\nsandbox_image = \"{sandbox}\"\n\
             [[containerd.mirrors]]\nregistry = \"registry.k8s.io\"\nurl = \"http://127.0.0.1:{port}\"\nplain_http = true\n"
        )
    };
    root.write(
        "etc/nodeward/config.d/50-images.toml",
        &config("registry.k8s.io/pause:3.10.1"),
    );
    root.write("var/lib/nodeward/images/kubelet.tar", "an archive\n");
    let record = serde_json::json!({
        "version": 1,
        "archives": { "/var/lib/nodeward/images/kubelet.tar": {
            "file": { "dev": 1, "ino": 2, "size": 11, "mtime_ns": 3 },
            "format": "oci",
            "images": [{ "name": "quay.io/poseidon/kubelet:v1.36.1", "manifest": digest }],
            "into": ["podman"],
        }},
    });
    root.write("var/lib/nodeward/image-imports.json", &record.to_string());
    let doc = root.run(&["check", "--output", "json"]).json();
    let images = check_of(&doc, "images");
    assert_eq!(images["status"], "pass", "{images}");
    let observed = images["observed"].as_str().unwrap_or_default();
    assert!(
        observed.contains(&format!(
            "kubelet quay.io/poseidon/kubelet@{digest}: shipped in /var/lib/nodeward/images/kubelet.tar"
        )),
        "{observed}"
    );
    assert!(
        observed.contains(&format!(
            "sandbox registry.k8s.io/pause:3.10.1: pullable from http://127.0.0.1:{port}/v2"
        )),
        "{observed}"
    );
    assert!(
        asked
            .lock()
            .expect("log")
            .iter()
            .any(|l| l.starts_with("HEAD /v2/pause/manifests/3.10.1 ")),
        "the mirror was asked: {:?}",
        asked.lock().expect("log")
    );

    // The control: a tag the mirror does not have (and registry.k8s.io itself not reachable here).
    root.write(
        "etc/nodeward/config.d/50-images.toml",
        &config("registry.k8s.io/pause:9.9"),
    );
    let run = root.run(&["check", "--output", "json"]);
    assert_eq!(run.code, 6, "{}", run.stdout);
    let doc = run.json();
    let images = check_of(&doc, "images");
    assert_eq!(images["status"], "fail", "{images}");
    let observed = images["observed"].as_str().unwrap_or_default();
    assert!(
        observed.contains(&format!(
            "sandbox registry.k8s.io/pause:9.9: containerd not asked (not the running system (--root)), not shipped, not pullable: http://127.0.0.1:{port}/v2/pause/manifests/9.9: no such manifest (404)"
        )),
        "{observed}"
    );
}
