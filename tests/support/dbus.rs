//! A private `dbus-daemon` for tests: a real bus on a socket of its own, where stand-in services
//! (zbus peers) answer as NetworkManager or systemd would.
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};

pub struct Bus {
    daemon: Child,
    pub address: String,
    _dir: tempfile::TempDir,
}

impl Bus {
    pub fn start() -> Bus {
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
