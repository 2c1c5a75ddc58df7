//! `nodeward wait --unit`: a stand-in systemd (a real D-Bus peer on a private `dbus-daemon`)
//! answers `LoadUnit` and the unit's states as systemd's manager does; the wait fails at once when
//! nothing will run the unit and waits while something will. Real systemd answers the same
//! question in the VM (`lxc` scenario: its host has `nodeward.service` masked).

mod common;
#[path = "support/dbus.rs"]
mod dbus;

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Root, Run};
use dbus::Bus;

const UNIT_PATH: &str = "/org/freedesktop/systemd1/unit/nodeward_2eservice";

/// The unit's states as the test sets them: (LoadState, ActiveState, SubState, job id).
type States = Arc<Mutex<(String, String, String, u32)>>;

struct Manager;

#[zbus::interface(name = "org.freedesktop.systemd1.Manager")]
impl Manager {
    async fn load_unit(&self, name: String) -> zbus::fdo::Result<zbus::OwnedObjectPath> {
        assert_eq!(name, "nodeward.service");
        zbus::OwnedObjectPath::try_from(UNIT_PATH).map_err(|e| zbus::fdo::Error::Failed(e.to_string()))
    }
}

struct Unit(States);

#[zbus::interface(name = "org.freedesktop.systemd1.Unit")]
impl Unit {
    #[zbus(property)]
    fn load_state(&self) -> String {
        self.0.lock().expect("lock").0.clone()
    }
    #[zbus(property)]
    fn active_state(&self) -> String {
        self.0.lock().expect("lock").1.clone()
    }
    #[zbus(property)]
    fn sub_state(&self) -> String {
        self.0.lock().expect("lock").2.clone()
    }
    #[zbus(property)]
    fn job(&self) -> (u32, zbus::OwnedObjectPath) {
        let id = self.0.lock().expect("lock").3;
        let path = if id == 0 {
            "/".to_owned()
        } else {
            format!("/org/freedesktop/systemd1/job/{id}")
        };
        (id, zbus::OwnedObjectPath::try_from(path).expect("path"))
    }
}

fn serve(bus: &Bus, states: &States) -> zbus::Connection {
    let address = bus.address.clone();
    let unit = Unit(states.clone());
    zbus::block_on(async move {
        zbus::connection::Builder::address(address.as_str())
            .name("org.freedesktop.systemd1")
            .serve_at("/org/freedesktop/systemd1", Manager)
            .serve_at(UNIT_PATH, unit)
            .build()
            .await
    })
    .expect("serve the stand-in systemd")
}

fn unit_states(load: &str, active: &str, sub: &str, job: u32) -> (String, String, String, u32) {
    (load.into(), active.into(), sub.into(), job)
}

/// `nodeward wait` on an empty root (no daemon has written a state), on the private bus.
fn wait(root: &Root, bus: &Bus, args: &[&str]) -> std::process::Child {
    Command::new(common::BIN)
        .arg("wait")
        .args(args)
        .arg("--root")
        .arg(root.path())
        .env("DBUS_SYSTEM_BUS_ADDRESS", &bus.address)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn")
}

/// Its exit code, and stdout and stderr together.
fn finish(child: std::process::Child) -> (i32, String) {
    let run = Run::from(child.wait_with_output().expect("output"));
    (run.code, run.stdout + &run.stderr)
}

#[test]
fn a_masked_unit_ends_the_wait_at_once_and_without_unit_the_wait_runs_its_time() {
    let bus = Bus::start();
    let states: States = Arc::new(Mutex::new(unit_states("masked", "inactive", "dead", 0)));
    let _systemd = serve(&bus, &states);
    let root = Root::new();
    let started = Instant::now();
    let (code, out) = finish(wait(
        &root,
        &bus,
        &["--timeout", "60", "--unit", "nodeward.service"],
    ));
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("not converging: nodeward.service is masked: nothing runs nodeward on this node"),
        "{out}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
    // Control: the same bus, no --unit: the wait only reads the state file, to its timeout.
    let started = Instant::now();
    let (code, out) = finish(wait(&root, &bus, &["--timeout", "3"]));
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("not converged within 3 s: no state file"), "{out}");
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn a_restarting_unit_is_waited_for_until_it_fails_for_good() {
    let bus = Bus::start();
    let states: States = Arc::new(Mutex::new(unit_states("loaded", "activating", "auto-restart", 0)));
    let _systemd = serve(&bus, &states);
    let root = Root::new();
    let child = wait(&root, &bus, &["--timeout", "120", "--unit", "nodeward.service"]);
    // Restarting, then stopped with a start queued: both worth waiting for.
    std::thread::sleep(Duration::from_secs(3));
    *states.lock().expect("lock") = unit_states("loaded", "inactive", "dead", 7);
    std::thread::sleep(Duration::from_secs(3));
    let mut child = child;
    assert!(
        child.try_wait().expect("try_wait").is_none(),
        "the wait ended while the unit was coming"
    );
    // Failed, nothing queued: the next question (every 2 s) ends the wait.
    *states.lock().expect("lock") = unit_states("loaded", "failed", "failed", 0);
    let failed = Instant::now();
    let (code, out) = finish(child);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("nodeward.service is failed (failed) and no job is queued to start it"),
        "{out}"
    );
    assert!(
        failed.elapsed() < Duration::from_secs(30),
        "took {:?}",
        failed.elapsed()
    );
}

#[test]
fn a_unit_name_that_is_not_one_is_a_usage_error() {
    let root = Root::new();
    for bad in ["nodeward", "../x.service", "a b.service", ".service"] {
        let out = Command::new(common::BIN)
            .args(["wait", "--timeout", "1", "--unit", bad, "--root"])
            .arg(root.path())
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(2), "{bad}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("is not a systemd unit name"),
            "{bad}"
        );
    }
}
