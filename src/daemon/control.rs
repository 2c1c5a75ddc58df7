//! The daemon's control socket (`/run/nodeward/control.sock`, root only): one request line in, one
//! JSON line out. `nodeward converge` and `nodeward kubelet restart|stop|start` ask the running
//! daemon, so the supervisor stays the only one touching the kubelet's container.
//!
//! Served like the metrics listener (`crate::listen`): clients are tasks, at most
//! `MAX_CONNECTIONS` at once, and each must send its whole request within `REQUEST_DEADLINE`, so an
//! idle or dripping client delays nobody. A request is exactly one of the known lines, ended by
//! `\n`, within `MAX_REQUEST` bytes; anything else is refused and nothing runs.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;

pub use crate::kubelet::supervisor::{Operator, Refused, Reply};
use crate::listen::{self, Head, Limits};
use crate::root::HostRoot;

pub(crate) const SOCKET: &str = "control.sock";

/// How long the client waits for an answer: a restart stops the kubelet gracefully first.
pub(crate) const ANSWER_TIMEOUT: Duration = Duration::from_secs(180);
/// How long a client has to send its whole request line.
pub(crate) const REQUEST_DEADLINE: Duration = Duration::from_secs(2);
/// The longest request line, its newline included (the longest known one is 16 bytes).
pub(crate) const MAX_REQUEST: usize = 64;
/// Connections served at once; one more is refused at once.
pub(crate) const MAX_CONNECTIONS: usize = 32;

const LIMITS: Limits = Limits {
    max_connections: MAX_CONNECTIONS,
    max_request: MAX_REQUEST,
    deadline: REQUEST_DEADLINE,
};

/// Why `nodeward converge|kubelet …` got no answer from the daemon.
#[derive(Debug, thiserror::Error)]
pub enum AskError {
    #[error("control socket: {0}")]
    Path(#[source] std::io::Error),
    #[error("no nodeward daemon answers at {path}: {source}")]
    NoDaemon { path: PathBuf, source: std::io::Error },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: unreadable answer {line:?}: {source}")]
    Unreadable {
        path: PathBuf,
        line: String,
        source: serde_json::Error,
    },
}

/// What a client asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    Converge,
    Kubelet(Operator),
}

impl Request {
    /// The request a line (its `\n` included) asks for: exactly a known line, nothing around it.
    /// Every request the socket takes: what a refusal lists, and what `parse` knows.
    pub(crate) const ALL: [Request; 6] = [
        Request::Converge,
        Request::Kubelet(Operator::Restart),
        Request::Kubelet(Operator::Stop),
        Request::Kubelet(Operator::Start),
        Request::Kubelet(Operator::Retry),
        Request::Kubelet(Operator::Release),
    ];

    pub(crate) fn parse(line: &str) -> Option<Request> {
        let line = line.strip_suffix('\n')?;
        Request::ALL.into_iter().find(|r| r.line() == line)
    }

    /// The requests, as a refusal names them.
    fn known() -> String {
        Request::ALL.map(Request::line).join(", ")
    }

    pub(crate) fn line(self) -> &'static str {
        match self {
            Request::Converge => "converge",
            Request::Kubelet(Operator::Restart) => "kubelet restart",
            Request::Kubelet(Operator::Stop) => "kubelet stop",
            Request::Kubelet(Operator::Start) => "kubelet start",
            Request::Kubelet(Operator::Retry) => "kubelet retry",
            Request::Kubelet(Operator::Release) => "kubelet release",
        }
    }
}

/// The answer, as the client prints it (`--output json` prints this object).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    pub ok: bool,
    pub message: String,
}

/// A request handed to the daemon's loop, with where its answer goes.
pub(crate) type Asked = (Request, Reply);

/// The socket's path under the root.
pub(crate) fn path(root: &HostRoot) -> std::io::Result<PathBuf> {
    crate::host::state::StateFile::ControlSocket
        .resolve(root)
        .map_err(|e| std::io::Error::other(e.to_string()))
}

/// Binds the socket (0600, made in a private directory and moved into place, so it is never
/// reachable by others) and serves it from a thread, passing requests to `deliver`.
pub(crate) fn serve(
    root: &HostRoot,
    deliver: impl Fn(Asked) + Send + Sync + 'static,
) -> std::io::Result<PathBuf> {
    let target = path(root)?;
    let dir = target.with_file_name("control.d");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::DirBuilder::new()
        .recursive(true)
        .create(target.parent().unwrap_or(&dir))?;
    std::fs::create_dir(&dir)?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    let staged = dir.join(SOCKET);
    let listener = std::os::unix::net::UnixListener::bind(&staged)?;
    std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o600))?;
    std::fs::rename(&staged, &target)?;
    let _ = std::fs::remove_dir(&dir);
    listener.set_nonblocking(true)?;
    let deliver = std::sync::Arc::new(deliver);
    listen::spawn(
        "control",
        LIMITS,
        move || tokio::net::UnixListener::from_std(listener),
        move |conn| handle(conn, deliver.clone()),
        |conn: tokio::net::UnixStream| {
            let busy = answer_line(&Answer {
                ok: false,
                message: format!("busy: {MAX_CONNECTIONS} requests in progress; try again"),
            });
            listen::turn_away(conn, busy.to_vec())
        },
    )?;
    Ok(target)
}

fn line_end(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == b'\n').map(|i| i + 1)
}

fn refused(message: String) -> Answer {
    Answer { ok: false, message }
}

async fn handle(
    mut conn: tokio::net::UnixStream,
    deliver: std::sync::Arc<impl Fn(Asked) + Send + Sync + 'static>,
) {
    let answer = match listen::read_head(&mut conn, &LIMITS, line_end).await {
        Ok(Head::Complete(line)) => match std::str::from_utf8(&line).ok().and_then(Request::parse) {
            Some(req) => ask_loop(req, &*deliver).await,
            None => refused(format!(
                "unknown request {:?} (one of: {})",
                crate::text::printable(&String::from_utf8_lossy(&line)),
                Request::known()
            )),
        },
        Ok(Head::TooLong) => refused(format!("request longer than {MAX_REQUEST} bytes: refused")),
        Ok(Head::TimedOut) => refused(format!(
            "no complete request line within {REQUEST_DEADLINE:?}: refused"
        )),
        Ok(Head::Cut) => refused("the request line did not end with a newline: refused".into()),
        Err(e) => refused(format!("reading the request: {e}")),
    };
    let line = answer_line(&answer);
    let _ = tokio::time::timeout(REQUEST_DEADLINE, conn.write_all(&line)).await;
}

/// Hands `req` to the daemon's loop and waits for its answer off the listener's thread.
async fn ask_loop(req: Request, deliver: &(impl Fn(Asked) + ?Sized)) -> Answer {
    let (tx, rx) = mpsc::sync_channel(1);
    deliver((req, tx));
    let waited = tokio::task::spawn_blocking(move || rx.recv_timeout(ANSWER_TIMEOUT)).await;
    match waited {
        Ok(Ok(Ok(message))) => Answer { ok: true, message },
        Ok(Ok(Err(Refused(message)))) => refused(message),
        Ok(Err(_)) | Err(_) => refused("no answer from the daemon in time".into()),
    }
}

fn answer_line(answer: &Answer) -> Vec<u8> {
    let mut line = serde_json::to_vec(answer).unwrap_or_default();
    line.push(b'\n');
    line
}

/// The client side: sends `req` to the daemon under `root` and waits for its answer.
pub fn ask(root: &HostRoot, req: Request) -> Result<Answer, AskError> {
    let path = path(root).map_err(AskError::Path)?;
    // A connection reset before any answer is a daemon going away (or gone: a dying process's
    // listener may take a connection it never reads): no daemon answers, as when none listens.
    let io = |source: std::io::Error| match source.kind() {
        std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe => AskError::NoDaemon {
            path: path.clone(),
            source,
        },
        _ => AskError::Io {
            path: path.clone(),
            source,
        },
    };
    let mut conn = UnixStream::connect(&path).map_err(|source| AskError::NoDaemon {
        path: path.clone(),
        source,
    })?;
    conn.set_read_timeout(Some(ANSWER_TIMEOUT + Duration::from_secs(5)))
        .map_err(io)?;
    writeln!(conn, "{}", req.line()).map_err(io)?;
    let mut line = String::new();
    BufReader::new(conn).read_line(&mut line).map_err(io)?;
    serde_json::from_str(&line).map_err(|source| AskError::Unreadable {
        path: path.clone(),
        line: line.clone(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listener that takes the connection and closes it unread (a daemon going away) is no
    /// daemon answering, as a socket nobody listens on is (the control).
    #[test]
    fn a_connection_reset_before_an_answer_is_no_daemon() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = HostRoot::at(dir.path());
        let sock = path(&root).expect("path");
        std::fs::create_dir_all(sock.parent().expect("dir")).expect("mkdir");
        let listener = std::os::unix::net::UnixListener::bind(&sock).expect("bind");
        let closer = std::thread::spawn(move || {
            let (conn, _) = listener.accept().expect("accept");
            std::thread::sleep(Duration::from_millis(200));
            drop(conn);
        });
        let e = ask(&root, Request::Converge).expect_err("no answer");
        closer.join().expect("closer");
        assert!(matches!(e, AskError::NoDaemon { .. }), "{e:?}");
        // The control: nobody listens at all.
        let e = ask(&root, Request::Converge).expect_err("no listener");
        assert!(matches!(e, AskError::NoDaemon { .. }), "{e:?}");
    }

    #[test]
    fn request_lines_round_trip() {
        for r in [
            Request::Converge,
            Request::Kubelet(Operator::Restart),
            Request::Kubelet(Operator::Stop),
            Request::Kubelet(Operator::Start),
        ] {
            assert_eq!(Request::parse(&format!("{}\n", r.line())), Some(r));
        }
        assert_eq!(Request::parse("rm -rf /\n"), None);
    }

    /// Exactly a known line and its newline: nothing cut, trimmed or left over runs.
    #[test]
    fn every_request_parses_from_its_line_and_a_refusal_names_them_all() {
        for r in Request::ALL {
            assert_eq!(Request::parse(&format!("{}\n", r.line())), Some(r));
        }
        let known = Request::known();
        for word in ["converge", "kubelet retry", "kubelet release", "kubelet restart"] {
            assert!(known.contains(word), "{known}");
        }
    }

    #[test]
    fn anything_but_an_exact_line_is_refused() {
        for bad in [
            "kubelet restart",
            "kubelet restart \n",
            " converge\n",
            "converge\r\n",
            "kubelet restart; rm -rf /\n",
            "converge\nconverge\n",
            "CONVERGE\n",
        ] {
            assert_eq!(Request::parse(bad), None, "{bad:?}");
        }
        let padded = format!("kubelet restart{}; rm -rf /\n", " ".repeat(241));
        assert_eq!(Request::parse(&padded), None);
    }
}
