//! A standard output stream into the journal, as systemd gives a unit's `StandardOutput=journal`:
//! journald's stream socket, introduced by the header its protocol wants. A process started with
//! it logs to the journal under `identifier` for as long as it holds it, whoever started it and
//! whether or not that one is still running.

use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;

/// Where journald takes stdout streams.
pub(crate) const SOCKET: &str = "/run/systemd/journal/stdout";

/// The header journald reads before the first line (systemd's `journald-stream.c`): identifier,
/// unit id (empty: journald takes the peer's), priority (6, info), level prefix (off: the lines
/// are not `<N>`-prefixed), and no forwarding to syslog, kmsg or the console.
pub(crate) fn header(identifier: &str) -> String {
    let identifier: String = identifier.chars().filter(|c| !c.is_control()).collect();
    format!("{identifier}\n\n6\n0\n0\n0\n0\n")
}

/// How long opening the stream may take: a journald that does not accept (its backlog full, the
/// daemon hung) blocks `connect` on a stream socket, and the kubelet's start must not wait for it.
pub(crate) const OPEN_LIMIT: std::time::Duration = std::time::Duration::from_secs(2);

/// [`stream`] within `limit`, on a thread of its own: a timeout is an error (the thread, left
/// behind, ends when the connect does).
pub(crate) fn stream_within(
    limit: std::time::Duration,
    open: impl FnOnce() -> std::io::Result<OwnedFd> + Send + 'static,
) -> std::io::Result<OwnedFd> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("journal-stream".into())
        .spawn(move || {
            let _ = tx.send(open());
        })?;
    rx.recv_timeout(limit).unwrap_or_else(|_| {
        Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("the journal did not take a stream within {limit:?}"),
        ))
    })
}

/// A connected stream for a child's stdout and stderr; an error when there is no journal here.
pub(crate) fn stream(socket: &Path, identifier: &str) -> std::io::Result<OwnedFd> {
    let mut s = UnixStream::connect(socket)?;
    // journald closes a stream it cannot read; the child's writes then fail, never block for good.
    s.shutdown(std::net::Shutdown::Read)?;
    s.write_all(header(identifier).as_bytes())?;
    Ok(OwnedFd::from(s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::net::UnixListener;

    #[test]
    fn the_header_comes_first_and_the_lines_follow_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stdout");
        let listener = UnixListener::bind(&path).unwrap();
        let fd = stream(&path, "kube\nlet").unwrap();
        let mut out = std::fs::File::from(fd);
        out.write_all(b"I0101 started\n").unwrap();
        drop(out);
        let (mut peer, _) = listener.accept().unwrap();
        let mut got = String::new();
        peer.read_to_string(&mut got).unwrap();
        // A control character in the name would end the header early: dropped.
        assert_eq!(got, "kubelet\n\n6\n0\n0\n0\n0\nI0101 started\n");
    }

    /// A journal that never takes the stream: the opener gives up at its limit, not at the
    /// connect's end.
    #[test]
    fn a_journal_that_never_answers_costs_the_limit_only() {
        let started = std::time::Instant::now();
        let got = stream_within(std::time::Duration::from_millis(100), || {
            std::thread::sleep(std::time::Duration::from_secs(3600));
            Err(std::io::Error::other("unreachable"))
        });
        assert_eq!(got.map(drop).unwrap_err().kind(), std::io::ErrorKind::TimedOut);
        // A hang detector: the hour's sleep was not waited for.
        assert!(started.elapsed() < std::time::Duration::from_secs(60));
    }

    #[test]
    fn no_journal_is_an_error_not_a_hang() {
        let dir = tempfile::tempdir().unwrap();
        assert!(stream(&dir.path().join("absent"), "kubelet").is_err());
    }
}
