//! The metrics listener: `GET /metrics` over plain HTTP/1.1, read-only, and bounded so that it can
//! never hurt the node (see `crate::listen`): one thread, a task per connection, at most
//! `MAX_CONNECTIONS` at once (beyond that a connection is answered 503 and closed at once). A
//! request must arrive whole within `IO_TIMEOUT` and `MAX_REQUEST` bytes, so clients that send a
//! byte a second neither starve the others nor hold anything for long; the answer is a copy of
//! the last rendered text, and the converge loop is never touched.

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::listen::{self, Head, Limits};

/// The rendered exposition, shared between the daemon (writer) and the listener (readers).
pub(crate) type Exposition = Arc<RwLock<String>>;

/// Largest request head read; anything longer is refused with 431.
pub(crate) const MAX_REQUEST: usize = 8 * 1024;
/// How long a client has to send its whole request, and to take the answer.
pub(crate) const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// Connections served at once (file descriptors and at most 1 MiB of request buffers).
pub(crate) const MAX_CONNECTIONS: usize = 128;

const LIMITS: Limits = Limits {
    max_connections: MAX_CONNECTIONS,
    max_request: MAX_REQUEST,
    deadline: IO_TIMEOUT,
};

/// Binds `addr` and serves from a thread; returns the bound address (port 0 picks one).
pub(crate) fn spawn(addr: SocketAddr, text: Exposition) -> io::Result<SocketAddr> {
    let listener = std::net::TcpListener::bind(addr)?;
    let bound = listener.local_addr()?;
    listener.set_nonblocking(true)?;
    listen::spawn(
        "metrics",
        LIMITS,
        move || tokio::net::TcpListener::from_std(listener),
        move |stream| {
            let text = text.clone();
            async move {
                if let Err(e) = serve(stream, &text).await {
                    tracing::debug!(error = %e, "metrics request dropped");
                }
            }
        },
        |stream: TcpStream| {
            listen::turn_away(stream, response("503 Service Unavailable", "", false).to_vec())
        },
    )?;
    Ok(bound)
}

/// Where a request head ends (`\r\n\r\n`, or a bare `\n\n`).
fn head_end(head: &[u8]) -> Option<usize> {
    let crlf = head.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    let lf = head.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Request {
    Metrics,
    NotFound,
    WrongMethod,
    Malformed,
}

/// Parses the request line of a head.
pub(crate) fn parse(head: &[u8]) -> Request {
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.trim_end_matches('\r').split(' ');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(method), Some(target), Some(version)) if version.starts_with("HTTP/1.") => {
            let path = target.split('?').next().unwrap_or_default();
            match (method, path) {
                ("GET" | "HEAD", "/metrics") => Request::Metrics,
                ("GET" | "HEAD", _) => Request::NotFound,
                _ => Request::WrongMethod,
            }
        }
        _ => Request::Malformed,
    }
}

async fn serve(mut stream: TcpStream, text: &Exposition) -> io::Result<()> {
    let (status, body, head_only) = match listen::read_head(&mut stream, &LIMITS, head_end).await? {
        Head::TooLong => ("431 Request Header Fields Too Large", String::new(), false),
        Head::TimedOut | Head::Cut => ("408 Request Timeout", String::new(), false),
        Head::Complete(head) => {
            let head_only = head.starts_with(b"HEAD ");
            let (status, body) = match parse(&head) {
                Request::Metrics => ("200 OK", text.read().map(|t| t.clone()).unwrap_or_default()),
                Request::NotFound => ("404 Not Found", "see /metrics\n".into()),
                Request::WrongMethod => ("405 Method Not Allowed", String::new()),
                Request::Malformed => ("400 Bad Request", String::new()),
            };
            (status, body, head_only)
        }
    };
    let answer = response(status, &body, head_only);
    match tokio::time::timeout(IO_TIMEOUT, stream.write_all(&answer)).await {
        Ok(written) => written?,
        Err(_) => return Err(io::Error::from(io::ErrorKind::TimedOut)),
    }
    stream.shutdown().await
}

fn response(status: &str, body: &str, head_only: bool) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines() {
        assert_eq!(
            parse(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Request::Metrics
        );
        assert_eq!(parse(b"GET /metrics?x=1 HTTP/1.0\r\n\r\n"), Request::Metrics);
        assert_eq!(parse(b"GET / HTTP/1.1\r\n\r\n"), Request::NotFound);
        assert_eq!(parse(b"POST /metrics HTTP/1.1\r\n\r\n"), Request::WrongMethod);
        assert_eq!(parse(b"\x16\x03\x01 hello"), Request::Malformed);
    }

    #[test]
    fn a_head_ends_at_its_blank_line() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nbody"), Some(27));
        assert_eq!(head_end(b"GET / HTTP/1.0\n\n"), Some(16));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: x\r\n"), None);
    }
}
