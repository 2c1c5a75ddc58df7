//! The importer's tests: queueing, waits, held checks, backoff.

use super::*;
use crate::images::archive::tests::{oci_image, tar_of};
use crate::images::decide::CONTAINERD;
use std::os::unix::fs::PermissionsExt;

const KUBELET: &str = "quay.io/poseidon/kubelet";

struct Bed {
    dir: tempfile::TempDir,
    root: HostRoot,
}

impl Bed {
    fn new() -> Bed {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = HostRoot::at(dir.path());
        std::fs::create_dir_all(dir.path().join("images")).expect("mkdir");
        Bed { dir, root }
    }

    /// An archive holding one image named `name`.
    fn archive(&self, file: &str, name: &str) -> Found {
        let tar = tar_of(&oci_image(name, name.as_bytes()).files);
        let path = self.dir.path().join("images").join(file);
        std::fs::write(&path, tar).expect("write");
        let settings = settings();
        let (found, errors) = super::super::find(&self.root, &settings);
        assert!(errors.is_empty(), "{errors:?}");
        found
            .into_iter()
            .find(|f| f.path.as_str().ends_with(file))
            .expect("found")
    }

    /// An engine whose load reads the archive, then waits until `gate` exists.
    fn gated(&self, gate: &std::path::Path) -> std::path::PathBuf {
        self.engine(
            "load",
            &format!(
                "cat >/dev/null; while [ ! -e {} ]; do sleep 0.05; done",
                gate.display()
            ),
        )
    }

    /// An engine's load command: a script that runs `body` with the archive on its input.
    fn engine(&self, name: &str, body: &str) -> std::path::PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        path
    }

    fn job(&self, found: Found, load: &std::path::Path) -> Job {
        Job {
            root: self.root.clone(),
            settings: settings(),
            engines: Engines {
                targets: Targets {
                    containerd: false,
                    kubelet_engine: Some("podman".into()),
                    kubelet_repository: KUBELET.into(),
                },
                ctr: None,
                containerd_running: false,
                containerd_socket: self.dir.path().join("none.sock"),
                kubelet_load: Some((load.to_path_buf(), &[])),
            },
            found,
            already: Vec::new(),
            planned_at: Instant::now(),
            verify: None,
        }
    }
}

fn settings() -> ImagesSettings {
    let input = crate::images::settings::ImagesInput {
        dirs: vec![crate::abs_path!("/images")],
        ..Default::default()
    };
    ImagesSettings::from_input(input).expect("settings")
}

/// A wake-up channel standing in for the daemon's loop.
fn importer() -> (Importer, std::sync::mpsc::Receiver<()>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let tx = Mutex::new(tx);
    let importer = Importer::new(move || {
        if let Ok(tx) = tx.lock() {
            let _ = tx.send(());
        }
    });
    (importer, rx)
}

/// The engines' answers a check is given: what `has` says, and how often it was asked.
struct Answers {
    held: bool,
    asked: std::sync::atomic::AtomicUsize,
}

fn engines_answer(held: bool) -> Arc<Answers> {
    Arc::new(Answers {
        held,
        asked: Default::default(),
    })
}

impl Holds for Answers {
    fn has(&self, _: &str, _: &str) -> bool {
        self.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.held
    }
}

/// A recorded archive is checked beside the passes: the engines asked on the importer's
/// thread, nothing imported while they hold it, nobody woken and nothing waited for; once an
/// engine lost its image the check becomes an import like any other (and wakes the daemon).
#[test]
fn a_recorded_archive_is_checked_beside_the_passes_and_imported_only_when_an_engine_lost_it() {
    let bed = Bed::new();
    let loads = bed.dir.path().join("loads");
    let load = bed.engine(
        "load",
        &format!("cat >/dev/null; echo load >> {}", loads.display()),
    );
    let found = bed.archive("kubelet.tar", &format!("{KUBELET}:v1.36.1"));
    let (imports, woken) = importer();
    // Recorded by a first import.
    imports.submit(bed.job(found.clone(), &load));
    woken.recv_timeout(Duration::from_secs(30)).expect("imported");
    assert_eq!(std::fs::read_to_string(&loads).expect("loads").lines().count(), 1);

    let answers = engines_answer(true);
    let mut check = bed.job(found.clone(), &load);
    check.verify = Some(Verify(answers.clone()));
    imports.check_held(check.clone());
    assert!(!imports.busy(), "a check is not an import");
    assert_eq!(
        imports.brings("podman", KUBELET),
        None,
        "nothing waits for a check"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while answers.asked.load(std::sync::atomic::Ordering::SeqCst) == 0
        || imports.state.lock().expect("state").running.is_some()
    {
        assert!(Instant::now() < deadline, "the check never ran (hang detector)");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        woken.try_recv().is_err(),
        "a check that found it held woke the daemon"
    );
    assert_eq!(
        std::fs::read_to_string(&loads).expect("loads").lines().count(),
        1,
        "imported again though the engine holds it"
    );

    // Control: the engine lost the image: the check imports it again.
    let lost = engines_answer(false);
    check.verify = Some(Verify(lost));
    imports.check_held(check);
    woken
        .recv_timeout(Duration::from_secs(30))
        .expect("an import after a check wakes the daemon");
    assert_eq!(std::fs::read_to_string(&loads).expect("loads").lines().count(), 2);
}

/// Held checks (the daemon's start, until the kubelet's first start) ask no engine, while an
/// import handed in after them runs at once; released, the check runs. Control: the same
/// check without the hold asks at once; and a hold nobody releases ends at its bound.
#[test]
fn held_checks_wait_for_their_release_and_imports_do_not() {
    let bed = Bed::new();
    let loads = bed.dir.path().join("loads");
    let load = bed.engine(
        "load",
        &format!("cat >/dev/null; echo load >> {}", loads.display()),
    );
    let recorded = bed.archive("kubelet.tar", &format!("{KUBELET}:v1.36.1"));
    let (imports, woken) = importer();
    imports.submit(bed.job(recorded.clone(), &load));
    woken.recv_timeout(Duration::from_secs(30)).expect("recorded");
    let asked = |a: &Answers| a.asked.load(std::sync::atomic::Ordering::SeqCst);
    let check = |answers: &Arc<Answers>| {
        let mut job = bed.job(recorded.clone(), &load);
        job.verify = Some(Verify(answers.clone()));
        job
    };
    let until_asked = |a: &Answers| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while asked(a) == 0 || imports.state.lock().expect("state").running.is_some() {
            assert!(Instant::now() < deadline, "the check never ran (hang detector)");
            std::thread::sleep(Duration::from_millis(10));
        }
    };

    imports.hold_checks(Duration::from_secs(3600));
    let held = engines_answer(true);
    imports.check_held(check(&held));
    // An import handed in after the held check runs first (the kubelet may wait for it).
    let other = bed.archive("next.tar", &format!("{KUBELET}:v1.36.3"));
    imports.submit(bed.job(other, &load));
    woken
        .recv_timeout(Duration::from_secs(30))
        .expect("the import ran past the held check");
    assert_eq!(asked(&held), 0, "a held check asked the engines");
    assert!(!imports.busy(), "a held check is not an import");
    imports.release_checks();
    until_asked(&held);

    // Control: no hold, the check asks at once.
    let free = engines_answer(true);
    imports.check_held(check(&free));
    until_asked(&free);

    // A hold nobody releases ends at its bound.
    imports.hold_checks(Duration::from_millis(300));
    let bounded = engines_answer(true);
    imports.check_held(check(&bounded));
    until_asked(&bounded);
    assert_eq!(
        std::fs::read_to_string(&loads).expect("loads").lines().count(),
        2,
        "the engines held it: nothing imported again"
    );
}

#[test]
fn the_kubelet_waits_for_an_import_that_brings_its_image_and_only_while_it_runs() {
    let bed = Bed::new();
    let gate = bed.dir.path().join("gate");
    // A slow engine: it loads once the test opens the gate.
    let load = bed.gated(&gate);
    let found = bed.archive("kubelet.tar", &format!("{KUBELET}:v1.36.1"));
    let (imports, woken) = importer();
    assert_eq!(imports.brings("podman", KUBELET), None, "nothing queued");
    // A pass that reads the record now and hands the archive in after its import ended.
    let stale = bed.job(found.clone(), &load);
    let q = imports.submit(bed.job(found.clone(), &load));
    assert_eq!(q, Queued::Waiting { place: 1 });
    assert_eq!(
        imports.brings("podman", KUBELET).as_deref(),
        Some("/images/kubelet.tar"),
        "queued, not yet checked: it may bring the image"
    );
    // Control: another engine or another repository waits for nothing.
    assert_eq!(imports.brings("docker", KUBELET), None);
    assert_eq!(imports.brings("podman", "registry.k8s.io/pause"), None);
    // Handed in again while it runs: the same import, not a second one.
    let again = imports.submit(bed.job(found.clone(), &load));
    assert!(
        matches!(again, Queued::Running { .. } | Queued::Waiting { place: 1 }),
        "{again:?}"
    );
    std::fs::write(&gate, "").expect("open the gate");
    woken
        .recv_timeout(Duration::from_secs(30))
        .expect("the end of the import wakes the daemon");
    assert_eq!(
        imports.brings("podman", KUBELET),
        None,
        "imported: nothing to wait for"
    );
    // That pass decided on a record older than the import: not imported again. Control: a
    // pass deciding after it (an engine that lost the image since) gets the import again.
    assert_eq!(imports.submit(stale), Queued::JustDone);
    let fresh = imports.submit(bed.job(found.clone(), &load));
    assert!(
        matches!(fresh, Queued::Waiting { .. } | Queued::Running { .. }),
        "{fresh:?}"
    );
    woken
        .recv_timeout(Duration::from_secs(30))
        .expect("imported again");
    let (record, _) = super::super::read_record(&bed.root);
    assert_eq!(record.archives["/images/kubelet.tar"].into, ["podman"]);
    assert!(
        woken.recv_timeout(Duration::from_millis(300)).is_err(),
        "each import once"
    );
}

#[test]
fn a_checked_archive_without_the_kubelets_image_holds_no_kubelet() {
    let bed = Bed::new();
    let gate = bed.dir.path().join("gate");
    let load = bed.gated(&gate);
    // An image of another repository: it goes to containerd, not to the kubelet's engine.
    let found = bed.archive("other.tar", "quay.io/other/tool:v1");
    let mut job = bed.job(found, &load);
    job.engines.targets.containerd = true;
    job.engines.ctr = Some(load.clone());
    job.engines.containerd_running = true;
    let (imports, woken) = importer();
    imports.submit(job);
    // Once checked it is known to go to containerd alone: the kubelet stops waiting while
    // containerd still loads it.
    let deadline = Instant::now() + Duration::from_secs(30);
    while imports.brings("podman", KUBELET).is_some() {
        assert!(Instant::now() < deadline, "still waited for after its check");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        imports.state.lock().is_ok_and(|st| st.running.is_some()),
        "the load still runs"
    );
    std::fs::write(&gate, "").expect("open the gate");
    woken.recv_timeout(Duration::from_secs(30)).expect("done");
    let (record, _) = super::super::read_record(&bed.root);
    assert_eq!(record.archives["/images/other.tar"].into, [CONTAINERD]);
}

/// A job carries the engines as they were when it was queued. One queued while containerd was
/// not running (its socket absent) and run once it was goes into containerd; with the socket
/// still absent when it runs, it waits for containerd (the control).
#[test]
fn an_import_queued_before_containerd_ran_goes_into_it_once_it_runs() {
    for started in [true, false] {
        let bed = Bed::new();
        let calls = bed.dir.path().join("calls");
        let ctr = bed.engine(
            "ctr",
            &format!("cat >/dev/null; echo \"$*\" >> {}", calls.display()),
        );
        let found = bed.archive("pause.tar", "registry.k8s.io/pause:3.10.1");
        let mut job = bed.job(found.clone(), &ctr);
        job.engines.targets.containerd = true;
        job.engines.ctr = Some(ctr.clone());
        job.engines.containerd_running = false;
        if started {
            std::fs::write(&job.engines.containerd_socket, "").expect("the socket");
        }
        let (imports, woken) = importer();
        imports.submit(job.clone());
        woken.recv_timeout(Duration::from_secs(30)).expect("done");
        let (record, _) = super::super::read_record(&bed.root);
        let calls = std::fs::read_to_string(&calls).unwrap_or_default();
        if started {
            assert_eq!(record.archives["/images/pause.tar"].into, [CONTAINERD]);
            assert!(calls.contains("images import -"), "{calls}");
        } else {
            assert!(calls.is_empty(), "containerd asked while not running: {calls}");
            match imports.submit(job) {
                Queued::Failed { why, .. } => {
                    assert!(why.contains("containerd is not running yet"), "{why}");
                }
                other => panic!("{other:?}"),
            }
        }
    }
}

#[test]
fn a_failed_import_waits_out_its_backoff_and_holds_nothing_meanwhile() {
    let bed = Bed::new();
    let count = bed.dir.path().join("count");
    let load = bed.engine(
        "load",
        &format!(
            "cat >/dev/null; echo x >> {}; echo 'no space left' >&2; exit 1",
            count.display()
        ),
    );
    let found = bed.archive("kubelet.tar", &format!("{KUBELET}:v1.36.1"));
    let (imports, woken) = importer();
    imports.submit(bed.job(found.clone(), &load));
    woken.recv_timeout(Duration::from_secs(30)).expect("done");
    for _ in 0..3 {
        match imports.submit(bed.job(found.clone(), &load)) {
            Queued::Failed { why, retry_in } => {
                assert!(why.contains("no space left"), "{why}");
                assert!((1..=5).contains(&retry_in), "{retry_in}");
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        imports.brings("podman", KUBELET),
        None,
        "a failed import holds no kubelet"
    );
    let runs = std::fs::read_to_string(&count)
        .unwrap_or_default()
        .lines()
        .count();
    assert_eq!(runs, 1, "one load per backoff, not one per pass");
}
