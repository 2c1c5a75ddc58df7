//! `[[containerd.mirrors]]` on a fixture root: one `hosts.toml` per registry, nodeward's own
//! removed when its registry leaves the list, someone else's left alone, a second run changing
//! nothing, and a word when containerd's own configuration would not read them. The files'
//! contents are golden-tested beside the renderer; the real containerd reads them in the VM.

mod common;

use common::Root;

const MIRRORS: &str = "[[containerd.mirrors]]\nregistry = 'quay.io'\nurl = 'https://mirror.example.com'\n\
[[containerd.mirrors]]\nregistry = 'registry.k8s.io'\nurl = 'http://10.0.0.5:5000'\nplain_http = true\n";

fn root(containerd: &str) -> Root {
    let root = Root::new();
    root.write("etc/hostname", "node-1\n");
    root.write(
        "etc/nodeward/config.d/10.toml",
        &format!("[containerd]\n{containerd}"),
    );
    root
}

fn read(root: &Root, rel: &str) -> Option<String> {
    std::fs::read_to_string(root.path().join(rel)).ok()
}

#[test]
fn one_hosts_toml_per_registry_and_nothing_more() {
    let node = root(&format!("manage = true\n{MIRRORS}"));
    node.write(
        "etc/containerd/certs.d/docker.io/hosts.toml",
        "server = \"https://registry-1.docker.io\"\n# the admin's\n",
    );
    node.run(&["apply", "--only", "hostfiles"]).ok();
    let quay = read(&node, "etc/containerd/certs.d/quay.io/hosts.toml").expect("quay.io");
    assert!(
        quay.starts_with("# Written by nodeward") && quay.contains("[host.\"https://mirror.example.com\"]"),
        "{quay}"
    );
    let k8s = read(&node, "etc/containerd/certs.d/registry.k8s.io/hosts.toml").expect("registry.k8s.io");
    assert!(k8s.contains("[host.\"http://10.0.0.5:5000\"]"), "{k8s}");
    // Idempotent: the second plan changes nothing.
    let again = node.run(&["plan", "--only", "hostfiles", "--detailed-exitcode"]);
    assert_eq!(again.code, 0, "{}", again.stdout);

    // quay.io leaves the list: nodeward's file goes; the admin's docker.io file stays.
    node.write(
        "etc/nodeward/config.d/10.toml",
        "[containerd]\nmanage = true\n[[containerd.mirrors]]\nregistry = 'registry.k8s.io'\nurl = 'http://10.0.0.5:5000'\nplain_http = true\n",
    );
    node.run(&["apply", "--only", "hostfiles"]).ok();
    assert_eq!(read(&node, "etc/containerd/certs.d/quay.io/hosts.toml"), None);
    assert!(read(&node, "etc/containerd/certs.d/registry.k8s.io/hosts.toml").is_some());
    assert!(
        read(&node, "etc/containerd/certs.d/docker.io/hosts.toml").is_some_and(|t| t.contains("the admin's")),
        "someone else's hosts.toml was touched"
    );
}

#[test]
fn someone_elses_hosts_toml_is_left_alone_and_said() {
    let node = root(&format!("manage = true\n{MIRRORS}"));
    let theirs = "server = \"https://quay.io\"\n# the admin's\n";
    node.write("etc/containerd/certs.d/quay.io/hosts.toml", theirs);
    let run = node.run(&["apply", "--only", "hostfiles"]).ok();
    assert_eq!(
        read(&node, "etc/containerd/certs.d/quay.io/hosts.toml").as_deref(),
        Some(theirs)
    );
    assert!(
        run.stdout
            .contains("/etc/containerd/certs.d/quay.io/hosts.toml: not written by nodeward"),
        "{}",
        run.stdout
    );
    // The other registry's is written all the same.
    assert!(read(&node, "etc/containerd/certs.d/registry.k8s.io/hosts.toml").is_some());
}

/// containerd's own configuration (not nodeward's) reads the mirrors only when its `config_path`
/// names their directory: the step says so when it does not, and is silent when it does.
#[test]
fn a_containerd_config_that_would_not_read_them_is_named() {
    let node = root(MIRRORS);
    node.write(
        "etc/containerd/config.toml",
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\nSystemdCgroup = true\n",
    );
    let run = node.run(&["plan", "--only", "hostfiles"]);
    assert!(
        run.stdout
            .contains("/etc/containerd/config.toml: config_path is unset, not /etc/containerd/certs.d"),
        "{}",
        run.stdout
    );
    // Control: the same file naming the directory.
    node.write(
        "etc/containerd/config.toml",
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".registry]\nconfig_path = \"/etc/containerd/certs.d\"\n",
    );
    let run = node.run(&["plan", "--only", "hostfiles"]);
    assert!(!run.stdout.contains("config_path is"), "{}", run.stdout);
}

#[test]
fn plain_http_must_be_asked_for() {
    let node = root("[[containerd.mirrors]]\nregistry = 'quay.io'\nurl = 'http://10.0.0.5:5000'\n");
    let run = node.run(&["plan", "--only", "hostfiles"]);
    // Refused as configuration (exit 3), naming the file, the entry and the way to allow it.
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("etc/nodeward/config.d/10.toml:2: containerd.mirrors[0].url")
            && run.stderr.contains("plain_http = true"),
        "{}",
        run.stderr
    );
    assert_eq!(read(&node, "etc/containerd/certs.d/quay.io/hosts.toml"), None);
}

/// One registry's `hosts.toml` that cannot be read (a FIFO) is named, and the other registry's is
/// written all the same.
#[test]
fn an_unreadable_hosts_toml_stays_one_registrys_problem() {
    let node = root(&format!("manage = true\n{MIRRORS}"));
    let fifo = node.path().join("etc/containerd/certs.d/quay.io/hosts.toml");
    std::fs::create_dir_all(fifo.parent().expect("parent")).expect("mkdir");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).expect("mkfifo");
    let run = node.run(&["apply", "--only", "hostfiles"]);
    assert!(
        run.stdout.contains("/etc/containerd/certs.d/quay.io/hosts.toml") && run.stdout.contains("FIFO"),
        "{}{}",
        run.stdout,
        run.stderr
    );
    assert!(read(&node, "etc/containerd/certs.d/registry.k8s.io/hosts.toml").is_some());
}
