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

    #[test]
    fn no_journal_is_an_error_not_a_hang() {
        let dir = tempfile::tempdir().unwrap();
        assert!(stream(&dir.path().join("absent"), "kubelet").is_err());
    }
}
