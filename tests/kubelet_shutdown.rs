//! A kubelet that exits while the system shuts down is not started again: the shutdown stops the
//! kubelet's container before nodeward, and a restart would race it. systemd is asked over a real
//! `dbus-daemon` on a private socket, where a stand-in systemd (a zbus peer) answers the manager's
//! `SystemState`; the supervisor drives the stand-in engine (tests/support/fake_runtime.rs).
//! One test in this binary: it points the process's system bus at the private one.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use nodeward::kubelet::runtime::Kind;
use nodeward::kubelet::status::KubeletState;

#[path = "support/dbus.rs"]
mod dbus;
use dbus::Bus;

#[path = "support/supervisor.rs"]
mod supervisor;
use supervisor::*;

/// systemd's manager as far as this test needs it: its `SystemState`.
struct Manager {
    state: Arc<Mutex<String>>,
}

#[zbus::interface(name = "org.freedesktop.systemd1.Manager")]
impl Manager {
    #[zbus(property)]
    fn system_state(&self) -> String {
        self.state.lock().expect("state").clone()
    }
}

#[test]
fn a_kubelet_that_exits_during_a_shutdown_is_not_started_again() {
    let bus = Bus::start();
    // SAFETY: the only test of this binary, before any thread of it reads the environment.
    unsafe { std::env::set_var("DBUS_SYSTEM_BUS_ADDRESS", &bus.address) };
    let state = Arc::new(Mutex::new("running".to_owned()));
    let served = state.clone();
    let address = bus.address.clone();
    let _systemd = zbus::block_on(async move {
        zbus::connection::Builder::address(address.as_str())
            .name("org.freedesktop.systemd1")
            .serve_at("/org/freedesktop/systemd1", Manager { state: served })
            .build()
            .await
    })
    .expect("stand-in systemd on the bus");

    let e = Engine::new("podman".parse::<Kind>().expect("engine"));
    let sup = e.start_running();
    sup.wait_for("running", Duration::from_secs(10), |s| {
        s.state == KubeletState::Running
    });
    // The control: while the system runs, an exit is a restart.
    kill(e.kubelet_pid("kubelet").expect("kubelet pid"));
    sup.wait_for("restarted", Duration::from_secs(10), |s| {
        s.restarts == 1 && s.state == KubeletState::Running
    });

    // Shutting down: the exit is recorded and nothing is started.
    *state.lock().expect("state") = "stopping".to_owned();
    let starts = e
        .log("calls.log")
        .iter()
        .filter(|c| c.contains(" start ") || c.contains(" run "))
        .count();
    kill(e.kubelet_pid("kubelet").expect("kubelet pid"));
    sup.wait_for("the exit seen", Duration::from_secs(10), |s| s.restarts == 2);
    std::thread::sleep(Duration::from_secs(3));
    let after = e
        .log("calls.log")
        .iter()
        .filter(|c| c.contains(" start ") || c.contains(" run "))
        .count();
    assert_eq!(
        after,
        starts,
        "a start during the shutdown: {:?}",
        e.log("calls.log")
    );
    assert_ne!(sup.status().state, KubeletState::Running);

    // A shutdown that is called off (the state back to running): the kubelet starts again.
    *state.lock().expect("state") = "running".to_owned();
    sup.wait_for("started again", Duration::from_secs(15), |s| {
        s.state == KubeletState::Running
    });
}
