//! The `images` step end to end through the real binary, with a stand-in `ctr` found in `PATH`
//! that keeps what it is fed (the real containerd imports in the VM, `cluster`): an archive is
//! imported once, a reboot's pass reads nothing, a damaged archive is refused by name and not read
//! again, an engine that lost an image gets it again, and a FIFO is named, never opened blocking.

mod common;
#[path = "support/engine.rs"]
mod engine;
#[path = "support/oci.rs"]
mod oci;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Root, Run};
use oci::oci_archive;

/// A `ctr` that logs its arguments, keeps each import's stdin, and answers `images ls -q` with the
/// names it was fed (as containerd would, by `io.containerd.image.name`).
fn stand_in_ctr(bin: &Path) {
    let script = format!(
        r#"#!/bin/sh
dir={dir}
echo "$*" >> "$dir/ctr.log"
case "$*" in
  *"images import -"*)
    n=$(ls "$dir" | grep -c '^fed-' || true)
    cat > "$dir/fed-$n.tar"
    tar -xOf "$dir/fed-$n.tar" index.json | sed -n 's/.*"io.containerd.image.name":"\([^"]*\)".*/\1/p' >> "$dir/held" ;;
  *"images ls -q"*) cat "$dir/held" 2>/dev/null ;;
  *) exit 1 ;;
esac
"#,
        dir = bin.display()
    );
    let path = bin.join("ctr");
    std::fs::write(&path, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

struct Node {
    root: Root,
    bin: tempfile::TempDir,
}

impl Node {
    fn new() -> Node {
        let root = Root::new();
        let bin = tempfile::tempdir().unwrap();
        stand_in_ctr(bin.path());
        // containerd runs: its socket is there (a plain file does for the stand-in).
        root.write("run/containerd/containerd.sock", "");
        root.write(
            "etc/nodeward/config.d/10-node.toml",
            "[kubelet]\nenabled = false\n",
        );
        Node { root, bin }
    }

    fn images_dir(&self) -> PathBuf {
        let dir = self.root.path().join("var/lib/nodeward/images");
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn apply(&self) -> Run {
        let out = Command::new(common::BIN)
            .arg("--root")
            .arg(self.root.path())
            .args([
                "--kernel",
                "skip",
                "--containers",
                "live",
                "apply",
                "--only",
                "images",
            ])
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    self.bin.path().display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            )
            .output()
            .unwrap();
        Run::from(out)
    }

    fn imports(&self) -> usize {
        std::fs::read_to_string(self.bin.path().join("ctr.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("images import -"))
            .count()
    }
}

#[test]
fn an_archive_is_imported_once_and_a_damaged_one_refused_by_name() {
    let node = Node::new();
    let dir = node.images_dir();
    oci_archive(&dir, "pause.tar", "registry.k8s.io/pause:3.10.1", b"pause layer");
    let damaged = oci_archive(
        &dir,
        "damaged.tar",
        "registry.k8s.io/other:1",
        b"a layer to damage",
    );
    // One byte of the layer changed, its name (the digest) kept.
    let mut bytes = std::fs::read(&damaged).unwrap();
    let at = bytes.windows(17).position(|w| w == b"a layer to damage").unwrap();
    bytes[at] = b'A';
    std::fs::write(&damaged, bytes).unwrap();

    let first = node.apply();
    assert_ne!(
        first.code, 0,
        "the damaged archive fails the step:\n{}",
        first.stdout
    );
    assert!(
        first.stdout.contains("damaged.tar: refused:") && first.stdout.contains("altered or damaged"),
        "{}",
        first.stdout
    );
    assert_eq!(node.imports(), 1, "only the good archive reaches the engine");
    let fed = std::fs::read(node.bin.path().join("fed-0.tar")).unwrap();
    assert_eq!(
        fed,
        std::fs::read(dir.join("pause.tar")).unwrap(),
        "the archive's tar stream, as is"
    );
    let held = std::fs::read_to_string(node.bin.path().join("held")).unwrap();
    assert_eq!(held.trim(), "registry.k8s.io/pause:3.10.1");
    let record =
        std::fs::read_to_string(node.root.path().join("var/lib/nodeward/image-imports.json")).unwrap();
    assert!(
        record.contains("pause.tar") && record.contains("\"refused\""),
        "{record}"
    );

    // The next pass (a reboot's) reads nothing: no import, the damaged one not read again.
    let again = node.apply();
    assert_eq!(node.imports(), 1, "{}", again.stdout);
    assert!(
        again.stdout.contains("not read again until the file changes"),
        "{}",
        again.stdout
    );
    assert!(
        !again.stdout.contains("check every blob"),
        "nothing to import:\n{}",
        again.stdout
    );
    assert!(
        again
            .stdout
            .contains("pause.tar: imported before: registry.k8s.io/pause:3.10.1"),
        "{}",
        again.stdout
    );

    // containerd lost the image: it is imported again, saying why.
    std::fs::write(node.bin.path().join("held"), "").unwrap();
    let lost = node.apply();
    assert_eq!(node.imports(), 2, "{}", lost.stdout);
    assert!(
        lost.stdout
            .contains("containerd no longer holds registry.k8s.io/pause:3.10.1"),
        "{}",
        lost.stdout
    );
}

#[test]
fn a_changed_archive_is_imported_again_and_without_containerd_nothing_is_fed() {
    let node = Node::new();
    let dir = node.images_dir();
    oci_archive(&dir, "a.tar", "registry.k8s.io/pause:3.10.1", b"one");
    node.apply().ok();
    assert_eq!(node.imports(), 1);
    std::fs::remove_dir_all(dir.join("a.tar.d")).unwrap();
    oci_archive(&dir, "a.tar", "registry.k8s.io/pause:3.10.1", b"two, longer");
    let changed = node.apply().ok();
    assert_eq!(node.imports(), 2);
    assert!(
        changed.stdout.contains("changed since its import"),
        "{}",
        changed.stdout
    );

    // containerd not running (no socket): the archive waits, reported; nothing is fed.
    std::fs::remove_file(node.root.path().join("run/containerd/containerd.sock")).unwrap();
    std::fs::remove_dir_all(dir.join("a.tar.d")).unwrap();
    oci_archive(
        &dir,
        "a.tar",
        "registry.k8s.io/pause:3.10.1",
        b"three, longest yet",
    );
    let waiting = node.apply();
    assert_ne!(waiting.code, 0);
    assert!(
        waiting.stdout.contains("containerd is not running yet"),
        "{}",
        waiting.stdout
    );
    assert_eq!(node.imports(), 2);
}

#[test]
fn a_fifo_or_another_users_archive_is_named_and_never_opened() {
    if !common::require_root() {
        return;
    }
    let node = Node::new();
    let dir = node.images_dir();
    nix::unistd::mkfifo(
        &dir.join("fifo.tar"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    let theirs = oci_archive(&dir, "theirs.tar", "registry.k8s.io/pause:3.10.1", b"x");
    std::os::unix::fs::chown(&theirs, Some(65534), None).unwrap();
    let run = node.apply();
    assert_ne!(run.code, 0);
    assert!(
        run.stdout.contains("fifo.tar") && run.stdout.contains("FIFO"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("theirs.tar") && run.stdout.contains("owned by uid 65534"),
        "{}",
        run.stdout
    );
    assert_eq!(node.imports(), 0);
}

#[test]
fn under_root_without_live_containers_archives_are_only_counted() {
    let node = Node::new();
    oci_archive(
        &node.images_dir(),
        "pause.tar",
        "registry.k8s.io/pause:3.10.1",
        b"x",
    );
    let plan = node.root.run(&["plan", "--only", "images"]).ok();
    assert!(
        plan.stdout
            .contains("1 archive(s) found; imported on the running node only"),
        "{}",
        plan.stdout
    );
}

#[test]
fn the_kubelets_image_without_an_engine_that_loads_it_is_named_not_sent_to_containerd() {
    let node = Node::new();
    // The kubelet runs on rkt, which has no command that loads an archive: its image has
    // nowhere to go.
    node.root.write(
        "etc/nodeward/config.d/10-node.toml",
        "[kubelet]\nruntime = 'rkt'\nimage = 'quay.io/poseidon/kubelet:v1.36.1'\nallow_tag = true\n",
    );
    oci_archive(
        &node.images_dir(),
        "kubelet.tar",
        "quay.io/poseidon/kubelet:v1.36.1",
        b"k",
    );
    let run = node.apply();
    assert_ne!(run.code, 0);
    assert!(
        run.stdout
            .contains("kubelet.tar: no engine on this node takes quay.io/poseidon/kubelet:v1.36.1"),
        "{}",
        run.stdout
    );
    assert_eq!(node.imports(), 0, "the kubelet's image went to containerd");
}

/// A registry stand-in (registry_server.rs) serving `oci_archive`'s one image as NAME:TAG and by
/// its manifest digest; returns its address and the digest.
fn serve_image(dir: &Path, name: &str, tag: &str) -> (Killed, String, String) {
    let src = oci_archive(dir, "src.tar", "unused", b"a layer to save");
    let layout = dir.join("src.tar.d");
    let index = std::fs::read_to_string(layout.join("index.json")).unwrap();
    let digest = index
        .split("\"digest\":\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("the manifest's digest")
        .to_owned();
    std::fs::remove_file(src).unwrap();
    let store = dir.join("store");
    std::fs::create_dir_all(store.join("blobs")).unwrap();
    std::fs::create_dir_all(store.join("manifests").join(name)).unwrap();
    for blob in std::fs::read_dir(layout.join("blobs/sha256")).unwrap().flatten() {
        let hex = blob.file_name().to_string_lossy().into_owned();
        std::fs::copy(blob.path(), store.join("blobs").join(format!("sha256:{hex}"))).unwrap();
    }
    let manifest = layout
        .join("blobs/sha256")
        .join(digest.trim_start_matches("sha256:"));
    std::fs::copy(&manifest, store.join("manifests").join(name).join(tag)).unwrap();
    std::fs::copy(&manifest, store.join("manifests").join(name).join(&digest)).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    let child = Command::new(engine::registry_server())
        .args(["--listen", &addr, "--dir"])
        .arg(&store)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("registry server");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::net::TcpStream::connect(&addr).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the registry stand-in did not listen"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    (Killed(child), addr, digest)
}

/// A child process killed when the test ends, passing or not.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn save(out: &Path, args: &[&str]) -> Run {
    let helper = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/images/save");
    let run = Command::new(helper)
        .arg(out)
        .args(args)
        .env("SKOPEO_OPTS", "--src-tls-verify=false")
        .output()
        .expect("packaging/images/save");
    Run::from(run)
}

/// `packaging/images/save` with the real skopeo, from a registry: the pinned digest saved byte for
/// byte under its tag's name, an archive nodeward checks and imports as that image; the controls,
/// a reference pinned by no digest and one pinning a digest the registry lacks, are refused.
#[test]
fn the_save_helper_makes_an_archive_nodeward_imports_with_its_pinned_digest() {
    if Command::new("skopeo").arg("--version").output().is_err() {
        panic!("skopeo is not installed (.ci/run installs Debian's)");
    }
    let work = tempfile::tempdir().unwrap();
    let (_registry, addr, digest) = serve_image(work.path(), "test/pause", "3.10.1");
    let out = work.path().join("out");
    let name = format!("{addr}/test/pause:3.10.1");
    let saved = save(&out, &[&format!("{name}@{digest}")]);
    let file = out.join(format!("{}.tar", name.replace(['/', ':'], "_")));
    assert_eq!(saved.code, 0, "{}{}", saved.stdout, saved.stderr);
    assert!(file.is_file(), "{}", saved.stdout);

    let node = Node::new();
    std::fs::copy(&file, node.images_dir().join("pause.tar")).unwrap();
    let applied = node.apply();
    assert_eq!(applied.code, 0, "{}{}", applied.stdout, applied.stderr);
    assert_eq!(node.imports(), 1);
    let record: serde_json::Value = serde_json::from_slice(
        &std::fs::read(node.root.path().join("var/lib/nodeward/image-imports.json")).unwrap(),
    )
    .unwrap();
    let images = &record["archives"]["/var/lib/nodeward/images/pause.tar"]["images"];
    assert_eq!(
        images,
        &serde_json::json!([{ "name": name, "manifest": digest }]),
        "nodeward read the archive as the image pinned: {record}"
    );

    // The controls: a tag alone, and a digest the registry does not have; nothing left behind.
    let tag_only = save(&out, &[&name]);
    assert_eq!(tag_only.code, 1, "{}", tag_only.stderr);
    assert!(
        tag_only.stderr.contains("not pinned by digest"),
        "{}",
        tag_only.stderr
    );
    let other = format!("{name}@sha256:{}", "0".repeat(64));
    let missing = save(&out, &[&other]);
    assert_eq!(missing.code, 1, "{}", missing.stderr);
    assert!(
        missing.stderr.contains("skopeo could not copy it"),
        "{}",
        missing.stderr
    );
    let left: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(left.len(), 1, "only the saved archive, no partial one: {left:?}");
}
