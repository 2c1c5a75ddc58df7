//! The `images` step end to end through the real binary, with a stand-in `ctr` found in `PATH`
//! that keeps what it is fed (the real containerd imports in the VM, `cluster`): an archive is
//! imported once, a reboot's pass reads nothing, a damaged archive is refused by name and not read
//! again, an engine that lost an image gets it again, and a FIFO is named, never opened blocking.

mod common;
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
