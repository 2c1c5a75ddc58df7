//! The NetworkManager reload over a real `dbus-daemon` the test starts on a private socket, with
//! stand-in NetworkManager and systemd services that are real D-Bus peers (zbus) recording the
//! calls. The real NetworkManager is exercised in the VM test bed.

mod common;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Root, Run};

struct Bus {
    daemon: Child,
    address: String,
    _dir: tempfile::TempDir,
}

impl Bus {
    fn start() -> Bus {
        let dir = tempfile::tempdir().expect("tempdir");
        let sock = dir.path().join("bus");
        let config = dir.path().join("bus.conf");
        std::fs::write(
            &config,
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>custom</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>"#,
                sock.display()
            ),
        )
        .expect("bus config");
        let mut daemon = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", config.display()))
            .args(["--nofork", "--print-address=1"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("dbus-daemon (package dbus-daemon)");
        // The address is printed once the bus accepts connections (the socket file appears at
        // bind(), before listen(): waiting for it raced under load).
        let mut address = String::new();
        let stdout = daemon.stdout.take().expect("stdout");
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut address).expect("bus address");
        assert!(address.starts_with("unix:"), "dbus-daemon printed {address:?}");
        Bus {
            daemon,
            address: format!("unix:path={}", sock.display()),
            _dir: dir,
        }
    }
}

impl Drop for Bus {
    fn drop(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

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
