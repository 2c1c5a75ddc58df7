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

/// A FIFO (or a directory) where the record of imports goes: nothing is fed to an engine (each
/// import would be repeated at every pass, failing after the engine took it); the control, the
/// record's path free again, imports once.
#[test]
fn a_record_path_that_is_no_file_imports_nothing_until_it_is_removed() {
    let node = Node::new();
    let dir = node.images_dir();
    oci_archive(&dir, "pause.tar", "registry.k8s.io/pause:3.10.1", b"pause layer");
    let record = node.root.path().join("var/lib/nodeward/image-imports.json");
    nix::unistd::mkfifo(&record, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    for _ in 0..2 {
        let run = node.apply();
        assert_ne!(run.code, 0);
        assert!(
            run.stdout.contains("image-imports.json: a special file") && run.stdout.contains("removed"),
            "{}",
            run.stdout
        );
    }
    assert_eq!(node.imports(), 0, "nothing reached the engine");
    std::fs::remove_file(&record).unwrap();
    std::fs::create_dir(&record).unwrap();
    assert!(node.apply().stdout.contains("a directory"));
    std::fs::remove_dir(&record).unwrap();
    assert_eq!(node.apply().code, 0);
    assert_eq!(node.apply().code, 0);
    assert_eq!(node.imports(), 1, "imported once, then found in the record");
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
    let (child, addr) = start_registry(&store);
    (child, addr, digest)
}

/// A registry stand-in serving NAME by digest as an image an engine can store: one layer, a real
/// tar holding one file, which the config's `diff_ids` name. Returns its address and the digest.
fn serve_runnable_image(dir: &Path, name: &str) -> (Killed, String, String) {
    use sha2::Digest;
    let sha = |b: &[u8]| format!("sha256:{}", hex::encode(sha2::Sha256::digest(b)));
    let files = dir.join("layer-files");
    std::fs::create_dir_all(&files).unwrap();
    std::fs::write(files.join("hello"), "from the mirror\n").unwrap();
    let tar = dir.join("layer.tar");
    let ok = Command::new("tar")
        .args(["--owner=0", "--group=0", "--mtime=@0", "-C"])
        .arg(&files)
        .arg("-cf")
        .arg(&tar)
        .arg("hello")
        .status()
        .unwrap()
        .success();
    assert!(ok, "tar");
    let layer = std::fs::read(&tar).unwrap();
    let config = format!(
        r#"{{"architecture":"amd64","os":"linux","rootfs":{{"type":"layers","diff_ids":["{}"]}}}}"#,
        sha(&layer)
    );
    let manifest = format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"{}","size":{}}},"layers":[{{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"{}","size":{}}}]}}"#,
        sha(config.as_bytes()),
        config.len(),
        sha(&layer),
        layer.len()
    );
    let digest = sha(manifest.as_bytes());
    let store = dir.join("store");
    std::fs::create_dir_all(store.join("blobs")).unwrap();
    std::fs::create_dir_all(store.join("manifests").join(name)).unwrap();
    for blob in [layer.as_slice(), config.as_bytes()] {
        std::fs::write(store.join("blobs").join(sha(blob)), blob).unwrap();
    }
    std::fs::write(store.join("manifests").join(name).join(&digest), &manifest).unwrap();
    let (child, addr) = start_registry(&store);
    (child, addr, digest)
}

/// The registry stand-in on a free port over `store`, once it listens.
fn start_registry(store: &Path) -> (Killed, String) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    let child = Command::new(engine::registry_server())
        .args(["--listen", &addr, "--dir"])
        .arg(store)
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
    (Killed(child), addr)
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

/// A TLS front for the registry stand-in (one request per connection, as it serves them), with a
/// certificate for 127.0.0.1 from a private CA; returns its address and the CA's PEM.
fn tls_front(backend: String) -> (String, String) {
    use std::io::{BufRead, BufReader, Read, Write};
    let _ = rustls::crypto::ring::default_provider().install_default();
    let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).expect("cert");
    let pem = ck.cert.pem();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(ck.signing_key.serialize_der().into());
    let config = std::sync::Arc::new(
        rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![ck.cert.der().clone()], key)
            .expect("server config"),
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    std::thread::spawn(move || {
        for tcp in listener.incoming().flatten() {
            let (config, backend) = (config.clone(), backend.clone());
            std::thread::spawn(move || {
                let Ok(conn) = rustls::ServerConnection::new(config) else {
                    return;
                };
                let mut tls = rustls::StreamOwned::new(conn, tcp);
                let mut head = Vec::new();
                let mut reader = BufReader::new(&mut tls);
                loop {
                    let mut line = Vec::new();
                    match reader.read_until(b'\n', &mut line) {
                        Ok(0) | Err(_) => return,
                        Ok(_) => head.extend_from_slice(&line),
                    }
                    if line == b"\r\n" {
                        break;
                    }
                }
                let Ok(mut up) = std::net::TcpStream::connect(&backend) else {
                    return;
                };
                let mut answer = Vec::new();
                if up.write_all(&head).is_err() || up.read_to_end(&mut answer).is_err() {
                    return;
                }
                let _ = tls.write_all(&answer);
                let _ = tls.flush();
                tls.conn.send_close_notify();
                let _ = tls.flush();
            });
        }
    });
    (addr, pem)
}

/// The real podman, on a storage of its own: the transports nodeward derives from
/// `[[containerd.mirrors]]` (`Engine::pull_options`) do what the stand-in engine's `pull_needs`
/// models. A private-CA mirror serves the image with `--cert-dir` naming a directory whose
/// `ca.crt` is the CA (as nodeward's copy is), and not without it or with a directory lacking it;
/// a plain-http mirror serves it with `--tls-verify=false` and not without.
#[test]
fn the_real_podman_reaches_each_mirror_only_the_way_nodeward_asks() {
    if Command::new("podman").arg("--version").output().is_err() {
        panic!("podman is not installed (.ci/run installs Debian's)");
    }
    let work = tempfile::tempdir().unwrap();
    let (_registry, http, digest) = serve_runnable_image(work.path(), "poseidon/kubelet");
    let (https, pem) = tls_front(http.clone());
    let ca_dir = work.path().join("mirror-ca");
    let empty = work.path().join("empty");
    std::fs::create_dir_all(&ca_dir).unwrap();
    std::fs::create_dir_all(&empty).unwrap();
    std::fs::write(ca_dir.join("ca.crt"), &pem).unwrap();
    let storage = work.path().join("storage");
    let pull = |options: &[&str], host: &str| {
        let out = Command::new("podman")
            .arg("--root")
            .arg(storage.join("root"))
            .arg("--runroot")
            .arg(storage.join("run"))
            .args(["--storage-driver", "vfs", "pull", "--quiet"])
            .args(options)
            .arg(format!("{host}/poseidon/kubelet@{digest}"))
            .output()
            .expect("podman");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let ca = ca_dir.display().to_string();
    let none = empty.display().to_string();
    let (ok, err) = pull(&[], &https);
    assert!(!ok && err.contains("certificate"), "without the CA: {err}");
    let (ok, err) = pull(&["--cert-dir", &none], &https);
    assert!(
        !ok && err.contains("certificate"),
        "a directory without ca.crt: {err}"
    );
    let (ok, err) = pull(&["--cert-dir", &ca], &https);
    assert!(ok, "with nodeward's --cert-dir: {err}");
    let (ok, err) = pull(&[], &http);
    assert!(!ok, "plain http without --tls-verify=false: {err}");
    let (ok, err) = pull(&["--tls-verify=false"], &http);
    assert!(ok, "plain http with --tls-verify=false: {err}");
}
