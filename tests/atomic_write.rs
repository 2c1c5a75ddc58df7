//! The atomic writer under failure: a full filesystem midway through a write, and a writer killed
//! at arbitrary instants. Either way the target holds the old complete file or the new one.
//!
//! Both tests re-run this test binary as a child (`--exact NAME --ignored`) so the failure happens
//! in another process: under `unshare --mount` for the tmpfs, or to be SIGKILLed.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use nodeward::host::fs::{Meta, WriteOutcome, temp_path, write_atomic};

const INNER: &str = "NODEWARD_TEST_INNER_DIR";

fn meta() -> Meta {
    Meta {
        mode: 0o600,
        uid: 0,
        gid: 0,
        label: None,
    }
}

fn child(test: &str, dir: &Path) -> Command {
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", test, "--ignored", "--nocapture", "--test-threads=1"])
        .env(INNER, dir);
    cmd
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn disk_full_midway_leaves_the_old_file_and_no_temp() {
    if !common::require_root() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = std::env::current_exe().expect("current_exe");
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private"])
        .arg(exe)
        .args([
            "--exact",
            "inner_disk_full",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(INNER, dir.path())
        .output()
        .expect("run unshare");
    assert!(
        out.status.success(),
        "inner test failed: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs inside a private mount namespace: mounts a 64 KiB tmpfs and fills it.
#[test]
#[ignore = "run by disk_full_midway_leaves_the_old_file_and_no_temp"]
fn inner_disk_full() {
    let Some(dir) = std::env::var_os(INNER).map(PathBuf::from) else {
        return;
    };
    nix::mount::mount(
        Some("tmpfs"),
        &dir,
        Some("tmpfs"),
        nix::mount::MsFlags::empty(),
        Some("size=64k,mode=0755"),
    )
    .expect("mount tmpfs (needs root and a private mount namespace)");
    let target = dir.join("kubeconfig");
    let old = vec![b'o'; 16 * 1024];
    assert_eq!(
        write_atomic(&target, &old, &meta()).expect("first write fits"),
        WriteOutcome::Created
    );

    let err = write_atomic(&target, &vec![b'n'; 256 * 1024], &meta()).expect_err("must not fit");
    let msg = err.to_string();
    assert!(
        msg.contains("kubeconfig.nodeward-tmp") && msg.contains("No space left"),
        "{msg}"
    );
    assert_eq!(
        std::fs::read(&target).expect("read"),
        old,
        "old contents must survive"
    );
    assert_eq!(
        entries(&dir),
        vec!["kubeconfig".to_owned()],
        "no temp file may be left"
    );

    // A file that never existed stays absent.
    let fresh = dir.join("fresh");
    write_atomic(&fresh, &vec![b'n'; 256 * 1024], &meta()).expect_err("must not fit");
    assert!(!fresh.exists());
    assert_eq!(entries(&dir), vec!["kubeconfig".to_owned()]);
    nix::mount::umount(&dir).expect("umount");
}

const SIZE: usize = 4 * 1024 * 1024;

#[test]
fn a_writer_killed_at_any_instant_leaves_old_or_new() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().expect("tempdir");
    let target = dir.path().join("manifest.yaml");
    // Each kill lands after the writer finished at least one whole write (it says so on stdout),
    // so the target must be there and whole; kills go on until one has also landed mid-write
    // (its temporary file left), or the check would prove nothing about a torn write.
    let (mut kills, mut mid_write) = (0u64, 0u64);
    while kills < 25 || (mid_write == 0 && kills < 200) {
        let mut proc = child("inner_writer_loop", dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn writer");
        let mut out = std::io::BufReader::new(proc.stdout.take().expect("stdout"));
        let mut line = String::new();
        while !line.starts_with(WROTE) {
            line.clear();
            let n = out.read_line(&mut line).expect("read the writer's output");
            assert!(n > 0, "kill {kills}: the writer ended before a whole write");
        }
        // Spread kill points over the next write's phases (write, fsync, rename).
        std::thread::sleep(Duration::from_millis((kills * 37) % 60));
        proc.kill().expect("kill");
        proc.wait().expect("reap");

        let body = std::fs::read(&target).expect("after a whole write the target exists");
        assert_eq!(body.len(), SIZE, "kill {kills}: partial target");
        assert!(body.iter().all(|&b| b == body[0]), "kill {kills}: mixed contents");
        if temp_path(&target).exists() {
            mid_write += 1;
        }
        kills += 1;
    }
    assert!(
        mid_write > 0,
        "none of {kills} kills landed in the middle of a write"
    );
    // The next write cleans up whatever temp file a kill left behind.
    write_atomic(&target, b"final", &meta()).expect("write after kills");
    assert_eq!(entries(dir.path()), vec!["manifest.yaml".to_owned()]);
    eprintln!("{kills} kills, {mid_write} in the middle of a write");
}

/// What the writer prints after each whole write.
const WROTE: &str = "nodeward-test: wrote";

/// Writes alternating complete contents to the target until killed.
#[test]
#[ignore = "run by a_writer_killed_at_any_instant_leaves_old_or_new"]
fn inner_writer_loop() {
    let Some(dir) = std::env::var_os(INNER).map(PathBuf::from) else {
        return;
    };
    let target = dir.join("manifest.yaml");
    let bodies = [vec![b'a'; SIZE], vec![b'b'; SIZE]];
    for i in 0.. {
        write_atomic(&target, &bodies[i % 2], &meta()).expect("write");
        println!("{WROTE} {i}");
    }
}

/// The two halves apart: a prepared file is only its temporary name, private from the first byte;
/// the commit renames it over the target.
#[test]
fn a_prepared_file_changes_nothing_until_it_is_committed() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let target = dir.path().join("journal.json");
    std::fs::write(&target, b"old").expect("write");
    let prepared = nodeward::host::fs::prepare_atomic(&target, b"new", &meta()).expect("prepare");
    assert_eq!(std::fs::read(&target).expect("read"), b"old");
    let tmp = temp_path(&target);
    assert_eq!(std::fs::metadata(&tmp).expect("stat").mode() & 0o7777, 0o600);
    assert_eq!(std::fs::read(&tmp).expect("read"), b"new");
    prepared
        .commit(nodeward::host::fs::Durability::Now)
        .expect("commit");
    assert_eq!(std::fs::read(&target).expect("read"), b"new");
    assert_eq!(entries(dir.path()), vec!["journal.json".to_owned()]);
}
