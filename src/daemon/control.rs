//! The daemon's control socket (`/run/nodeward/control.sock`, root only): one request line in, one
//! JSON line out. `nodeward converge` and `nodeward kubelet restart|stop|start` ask the running
//! daemon, so the supervisor stays the only one touching the kubelet's container.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::kubelet::supervisor::Operator;
use crate::root::HostRoot;

pub const SOCKET: &str = "control.sock";

/// How long the client waits for an answer: a restart stops the kubelet gracefully first.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(180);

/// What a client asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    Converge,
    Kubelet(Operator),
}

impl Request {
    pub fn parse(line: &str) -> Option<Request> {
        match line.trim() {
            "converge" => Some(Request::Converge),
            "kubelet restart" => Some(Request::Kubelet(Operator::Restart)),
            "kubelet stop" => Some(Request::Kubelet(Operator::Stop)),
            "kubelet start" => Some(Request::Kubelet(Operator::Start)),
            _ => None,
        }
    }

    pub fn line(self) -> &'static str {
        match self {
            Request::Converge => "converge",
            Request::Kubelet(Operator::Restart) => "kubelet restart",
            Request::Kubelet(Operator::Stop) => "kubelet stop",
            Request::Kubelet(Operator::Start) => "kubelet start",
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
pub type Asked = (Request, mpsc::Sender<Result<String, String>>);

/// The socket's path under the root.
pub fn path(root: &HostRoot) -> std::io::Result<PathBuf> {
    crate::host::lock::run_path(root, SOCKET)
}

/// Binds the socket (0600, made in a private directory and moved into place, so it is never
/// reachable by others) and serves it from a thread, passing requests to `deliver`.
pub fn serve(root: &HostRoot, deliver: impl Fn(Asked) + Send + 'static) -> std::io::Result<PathBuf> {
    let target = path(root)?;
    let dir = target.with_file_name("control.d");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::DirBuilder::new()
        .recursive(true)
        .create(target.parent().unwrap_or(&dir))?;
    std::fs::create_dir(&dir)?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    let staged = dir.join(SOCKET);
    let listener = UnixListener::bind(&staged)?;
    std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o600))?;
    std::fs::rename(&staged, &target)?;
    let _ = std::fs::remove_dir(&dir);
    std::thread::Builder::new()
        .name("control".into())
        .spawn(move || {
            for conn in listener.incoming().flatten() {
                handle(conn, &deliver);
            }
        })?;
    Ok(target)
}

fn handle(conn: UnixStream, deliver: &dyn Fn(Asked)) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
    let mut line = String::new();
    let mut reader = BufReader::new(&conn);
    let answer = match reader.by_ref().take(256).read_line(&mut line) {
        Ok(_) => match Request::parse(&line) {
            Some(req) => {
                let (tx, rx) = mpsc::channel();
                deliver((req, tx));
                match rx.recv_timeout(ANSWER_TIMEOUT) {
                    Ok(Ok(message)) => Answer { ok: true, message },
                    Ok(Err(message)) => Answer { ok: false, message },
                    Err(_) => Answer {
                        ok: false,
                        message: "no answer from the daemon in time".into(),
                    },
                }
            }
            None => Answer {
                ok: false,
                message: format!("unknown request {:?}", line.trim()),
            },
        },
        Err(e) => Answer {
            ok: false,
            message: format!("reading the request: {e}"),
        },
    };
    let mut conn = conn;
    if let Ok(text) = serde_json::to_string(&answer) {
        let _ = writeln!(conn, "{text}");
    }
}

/// The client side: sends `req` to the daemon under `root` and waits for its answer.
pub fn ask(root: &HostRoot, req: Request) -> Result<Answer, String> {
    let path = path(root).map_err(|e| format!("control socket: {e}"))?;
    let mut conn = UnixStream::connect(&path)
        .map_err(|e| format!("no nodeward daemon answers at {}: {e}", path.display()))?;
    conn.set_read_timeout(Some(ANSWER_TIMEOUT + Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    writeln!(conn, "{}", req.line()).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut line = String::new();
    BufReader::new(conn)
        .read_line(&mut line)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&line).map_err(|e| format!("{}: unreadable answer {line:?}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(Request::parse("rm -rf /"), None);
    }
}
