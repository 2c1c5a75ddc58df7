//! The NetworkManager reload over a real `dbus-daemon` the test starts on a private socket, with
//! stand-in NetworkManager and systemd services that are real D-Bus peers (zbus) recording the
//! calls. The real NetworkManager is exercised in the VM test bed.

mod common;
#[path = "support/dbus.rs"]
mod dbus;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Root, Run};
use dbus::Bus;

struct FakeNm {
    reloads: Arc<AtomicUsize>,
    fail: bool,
}

#[zbus::interface(name = "org.freedesktop.NetworkManager")]
impl FakeNm {
    async fn reload(&self, flags: u32) -> zbus::fdo::Result<()> {
        assert_eq!(flags, 0, "nodeward reloads everything");
        self.reloads.fetch_add(1, Ordering::SeqCst);
        if self.fail {
            return Err(zbus::fdo::Error::AccessDenied("not allowed".into()));
        }
        Ok(())
    }
}

struct FakeSystemd {
    restarts: Arc<AtomicUsize>,
}

#[zbus::interface(name = "org.freedesktop.systemd1.Manager")]
impl FakeSystemd {
    async fn restart_unit(
        &self,
        name: String,
        mode: String,
    ) -> zbus::fdo::Result<zbus::wire::OwnedObjectPath> {
        assert_eq!(
            (name.as_str(), mode.as_str()),
            ("NetworkManager.service", "replace")
        );
        self.restarts.fetch_add(1, Ordering::SeqCst);
        zbus::wire::OwnedObjectPath::try_from("/org/freedesktop/systemd1/job/1")
            .map_err(|e| zbus::fdo::Error::Failed(e.to_string()))
    }
}

/// Serves the fakes on the bus until the returned connections are dropped.
fn serve(bus: &Bus, fail_reload: bool) -> (Vec<zbus::Connection>, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let reloads = Arc::new(AtomicUsize::new(0));
    let restarts = Arc::new(AtomicUsize::new(0));
    let (r, s) = (reloads.clone(), restarts.clone());
    let address = bus.address.clone();
    let conns = zbus::block_on(async move {
        let nm = zbus::connection::Builder::address(address.as_str())
            .name("org.freedesktop.NetworkManager")
            .serve_at(
                "/org/freedesktop/NetworkManager",
                FakeNm {
                    reloads: r,
                    fail: fail_reload,
                },
            )
            .build()
            .await?;
        let sd = zbus::connection::Builder::address(address.as_str())
            .name("org.freedesktop.systemd1")
            .serve_at("/org/freedesktop/systemd1", FakeSystemd { restarts: s })
            .build()
            .await?;
        Ok::<_, zbus::Error>(vec![nm, sd])
    })
    .expect("serve fakes");
    (conns, reloads, restarts)
}

/// A root where NetworkManager looks installed.
fn nm_root() -> Root {
    let root = Root::new();
    root.write("usr/sbin/NetworkManager", "");
    root
}

fn apply(root: &Root, bus: &Bus) -> Run {
    let out = Command::new(common::BIN)
        .args(["apply", "--only", "nm", "--kernel", "live", "--root"])
        .arg(root.path())
        .env("DBUS_SYSTEM_BUS_ADDRESS", &bus.address)
        .output()
        .expect("run");
    Run::from(out)
}

#[test]
fn reloads_once_when_the_drop_in_changes_and_never_otherwise() {
    let bus = Bus::start();
    let (_conns, reloads, restarts) = serve(&bus, false);
    let root = nm_root();
    let run = apply(&root, &bus).ok();
    assert!(
        run.stdout.contains("reload over D-Bus (its drop-in changed)"),
        "{}",
        run.stdout
    );
    let conf = std::fs::read_to_string(root.path().join("etc/NetworkManager/conf.d/nodeward-cni.conf"))
        .expect("conf");
    assert!(
        conf.contains("unmanaged-devices=interface-name:cali*;interface-name:tunl*;"),
        "{conf}"
    );
    assert_eq!(reloads.load(Ordering::SeqCst), 1);

    apply(&root, &bus).ok();
    apply(&root, &bus).ok();
    assert_eq!(reloads.load(Ordering::SeqCst), 1, "no change, no reload");

    root.write(
        "etc/nodeward/config.d/10.toml",
        "[networkmanager]\nunmanaged = [\"interface-name:cali*\"]\n",
    );
    apply(&root, &bus).ok();
    assert_eq!(
        reloads.load(Ordering::SeqCst),
        2,
        "changed drop-in: one more reload"
    );
    assert_eq!(restarts.load(Ordering::SeqCst), 0);
}

#[test]
fn a_failed_reload_falls_back_to_restarting_the_unit() {
    let bus = Bus::start();
    let (_conns, reloads, restarts) = serve(&bus, true);
    let root = nm_root();
    let run = apply(&root, &bus).ok();
    assert_eq!(reloads.load(Ordering::SeqCst), 1);
    assert_eq!(restarts.load(Ordering::SeqCst), 1, "{}", run.stderr);
}

#[test]
fn not_running_or_not_installed_is_not_an_error() {
    let bus = Bus::start();
    let root = nm_root();
    let run = apply(&root, &bus).ok();
    assert!(run.stdout.contains("Applied 2 change(s)"), "{}", run.stdout);

    let bare = Root::new();
    let run = apply(&bare, &bus).ok();
    assert!(
        run.stdout.contains("NetworkManager is not installed: skipped"),
        "{}",
        run.stdout
    );
    assert!(!bare.path().join("etc/NetworkManager").exists());
}

/// A reload that fails (and whose restart fallback fails too) is owed: the drop-in is already
/// right, yet the next apply asks again, until one succeeds. It used to report converged.
#[test]
fn a_failed_reload_is_retried_until_it_succeeds() {
    let bus = Bus::start();
    let root = nm_root();
    // NetworkManager refuses and there is no systemd on this bus: both ways fail.
    let nm_only = {
        let reloads = Arc::new(AtomicUsize::new(0));
        let r = reloads.clone();
        let address = bus.address.clone();
        let conn = zbus::block_on(async move {
            zbus::connection::Builder::address(address.as_str())
                .name("org.freedesktop.NetworkManager")
                .serve_at(
                    "/org/freedesktop/NetworkManager",
                    FakeNm {
                        reloads: r,
                        fail: true,
                    },
                )
                .build()
                .await
        })
        .expect("serve");
        (conn, reloads)
    };
    // A bus that refuses is a transient failure: exit 7, trying again later may help.
    let first = apply(&root, &bus);
    assert_eq!(first.code, 7, "{}", first.stdout);
    let again = apply(&root, &bus);
    assert_eq!(again.code, 7, "{}", again.stdout);
    assert!(again.stdout.contains("NetworkManager"), "{}", again.stdout);
    assert_eq!(
        nm_only.1.load(Ordering::SeqCst),
        2,
        "the owed reload is asked for again"
    );
    drop(nm_only);

    let (_conns, reloads, _) = serve(&bus, false);
    apply(&root, &bus).ok();
    assert_eq!(reloads.load(Ordering::SeqCst), 1, "paid");
    apply(&root, &bus).ok();
    assert_eq!(reloads.load(Ordering::SeqCst), 1, "nothing owed any more");
}

/// A bus that accepts connections and never answers: the call is bounded, the command ends with
/// an error naming the bus instead of hanging (it used to block for over 90 s).
#[test]
fn a_silent_bus_costs_a_bounded_wait() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("silent");
    let listener = std::os::unix::net::UnixListener::bind(&sock).expect("bind");
    let held = std::thread::spawn(move || {
        let mut conns = Vec::new();
        for c in listener.incoming().take(4) {
            conns.push(c);
        }
        std::thread::sleep(std::time::Duration::from_secs(30));
    });
    let root = nm_root();
    let start = std::time::Instant::now();
    let mut child = Command::new(common::BIN)
        .args(["apply", "--only", "nm", "--kernel", "live", "--root"])
        .arg(root.path())
        .env("DBUS_SYSTEM_BUS_ADDRESS", format!("unix:path={}", sock.display()))
        .env("NODEWARD_DBUS_TIMEOUT_MS", "1500")
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let status = loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            break s;
        }
        if start.elapsed() > std::time::Duration::from_secs(20) {
            let _ = child.kill();
            panic!("apply still blocked on a silent bus after 20 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().expect("stdout"), &mut out).expect("read");
    assert_eq!(status.code(), Some(7), "{out}");
    // A state, not a time: the words name the 1.5 s limit as what ended the call (the bus holder
    // never answers, so nothing else could); the 20 s kill above is the hang detector.
    assert!(out.contains("no answer on the system bus within 1.5s"), "{out}");
    drop(held);
}

/// A bus that takes each connection and closes it at once (a broker restarting) is not "no bus":
/// the reload stays owed (exit 7) and is asked for again until a bus answers. Control: with no
/// bus socket at all, NetworkManager cannot be running and nothing is owed.
#[test]
fn a_bus_that_drops_connections_leaves_the_reload_owed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("restarting");
    let listener = std::os::unix::net::UnixListener::bind(&sock).expect("bind");
    // Detached: it drops whatever connects until the test ends.
    std::thread::spawn(move || {
        for c in listener.incoming() {
            drop(c);
        }
    });
    let root = nm_root();
    let run = |address: String| {
        Run::from(
            Command::new(common::BIN)
                .args(["apply", "--only", "nm", "--kernel", "live", "--root"])
                .arg(root.path())
                .env("DBUS_SYSTEM_BUS_ADDRESS", address)
                .env("NODEWARD_DBUS_TIMEOUT_MS", "3000")
                .output()
                .expect("run"),
        )
    };
    let dropped = run(format!("unix:path={}", sock.display()));
    assert_eq!(dropped.code, 7, "{}", dropped.stdout);
    assert!(dropped.stdout.contains("system bus"), "{}", dropped.stdout);
    assert!(
        root.path()
            .join("run/nodeward/owed")
            .read_dir()
            .is_ok_and(|mut d| d.next().is_some())
    );

    // The broker is back: the owed reload is paid, once.
    let bus = Bus::start();
    let (_conns, reloads, _) = serve(&bus, false);
    apply(&root, &bus).ok();
    assert_eq!(reloads.load(Ordering::SeqCst), 1, "the owed reload was dropped");

    // Control: no socket at all is no bus, not a failure.
    let fresh = nm_root();
    let none = Run::from(
        Command::new(common::BIN)
            .args(["apply", "--only", "nm", "--kernel", "live", "--root"])
            .arg(fresh.path())
            .env(
                "DBUS_SYSTEM_BUS_ADDRESS",
                format!("unix:path={}", dir.path().join("absent").display()),
            )
            .output()
            .expect("run"),
    );
    assert_eq!(none.code, 0, "{}", none.stdout);
}
