//! The systemd notify protocol (`sd_notify`): datagrams to `$NOTIFY_SOCKET`.

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

/// How long one notification may wait for room in systemd's queue.
const SEND_TIMEOUT: Duration = Duration::from_secs(1);

/// Sends state to systemd; does nothing when not started by systemd with `Type=notify`.
pub(crate) struct Notifier {
    target: Option<(UnixDatagram, SocketAddr)>,
}

impl Notifier {
    /// Reads `$NOTIFY_SOCKET` (a path, or `@name` for an abstract socket).
    pub(crate) fn from_env() -> io::Result<Notifier> {
        let Some(raw) = std::env::var_os("NOTIFY_SOCKET") else {
            return Ok(Notifier { target: None });
        };
        let raw = raw.to_string_lossy().into_owned();
        let addr = match raw.strip_prefix('@') {
            Some(name) => SocketAddr::from_abstract_name(name.as_bytes())?,
            None => SocketAddr::from_pathname(&raw)?,
        };
        let sock = UnixDatagram::unbound()?;
        // systemd reads its queue promptly; when it does not (PID 1 busy, a test that stopped
        // listening), a send gives up after this rather than holding the daemon's loop.
        sock.set_write_timeout(Some(SEND_TIMEOUT))?;
        Ok(Notifier {
            target: Some((sock, addr)),
        })
    }

    /// Sends newline-separated `KEY=value` assignments.
    pub(crate) fn send(&self, state: &str) -> io::Result<()> {
        match &self.target {
            Some((sock, addr)) => sock.send_to_addr(state.as_bytes(), addr).map(|_| ()),
            None => Ok(()),
        }
    }

    pub(crate) fn ready(&self, status: &str) -> io::Result<()> {
        self.send(&format!("READY=1\nSTATUS={}", one_line(status)))
    }

    pub(crate) fn status(&self, status: &str) -> io::Result<()> {
        self.send(&format!("STATUS={}", one_line(status)))
    }

    pub(crate) fn watchdog(&self) -> io::Result<()> {
        self.send("WATCHDOG=1")
    }

    pub(crate) fn stopping(&self) -> io::Result<()> {
        self.send("STOPPING=1\nSTATUS=stopping")
    }
}

/// The watchdog interval systemd expects pings within (`$WATCHDOG_USEC`), if it is meant for us.
pub(crate) fn watchdog_interval() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    if let Ok(pid) = std::env::var("WATCHDOG_PID") {
        if pid.parse::<u32>().ok()? != std::process::id() {
            return None;
        }
    }
    (usec > 0).then(|| Duration::from_micros(usec))
}

/// STATUS= must be a single line.
fn one_line(s: &str) -> String {
    s.replace('\n', "; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listener that stops reading fills its queue; the next send fails after the timeout
    /// instead of holding the caller forever.
    #[test]
    fn a_full_queue_fails_a_send_instead_of_blocking() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("notify");
        let listener = UnixDatagram::bind(&path).expect("bind");
        let sock = UnixDatagram::unbound().expect("socket");
        sock.set_write_timeout(Some(SEND_TIMEOUT)).expect("timeout");
        let notifier = Notifier {
            target: Some((sock, SocketAddr::from_pathname(&path).expect("addr"))),
        };
        let started = std::time::Instant::now();
        let sent = (0..10_000)
            .take_while(|_| notifier.status("converging").is_ok())
            .count();
        assert!(sent > 0 && sent < 10_000, "sent {sent}");
        // A hang detector, ten times the one bounded send expected: a blocking send would never end.
        assert!(started.elapsed() < SEND_TIMEOUT * 10, "{:?}", started.elapsed());
        // Control: once read, the queue has room again.
        let mut buf = [0u8; 64];
        listener.recv(&mut buf).expect("recv");
        notifier.status("converging").expect("room again");
    }

    #[test]
    fn status_is_one_line() {
        assert_eq!(one_line("a\nb"), "a; b");
    }
}
