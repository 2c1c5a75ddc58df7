//! The metrics listener: `GET /metrics` over plain HTTP/1.1, read-only, and bounded so that it can
//! never hurt the node. One thread accepts; each connection gets a short-lived thread, at most
//! `MAX_CONNECTIONS` at once (beyond that a connection is answered 503 and closed at once). A
//! request must arrive within `IO_TIMEOUT` and `MAX_REQUEST` bytes; the answer is a copy of the
//! last rendered text. A burst of idle connections ties up at most `MAX_CONNECTIONS` threads for
//! at most `IO_TIMEOUT`, and the converge loop is never touched.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// The rendered exposition, shared between the daemon (writer) and the listener (readers).
pub type Exposition = Arc<RwLock<String>>;

/// Largest request head read; anything longer is refused with 431.
pub const MAX_REQUEST: usize = 8 * 1024;
/// How long a client has to send its request, and to take the answer.
pub const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 8;

/// Binds `addr` and serves from a thread; returns the bound address (port 0 picks one).
pub fn spawn(addr: SocketAddr, text: Exposition) -> io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)?;
    let bound = listener.local_addr()?;
    let active = Arc::new(AtomicUsize::new(0));
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut stream) = conn else {
                    // EMFILE and the like: back off instead of spinning.
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                };
                if active.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
                    active.fetch_sub(1, Ordering::AcqRel);
                    let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
                    let _ = stream.write_all(&response("503 Service Unavailable", "", false));
                    continue;
                }
                let (text, active) = (text.clone(), active.clone());
                let spawned = std::thread::Builder::new()
                    .name("metrics-conn".into())
                    .spawn(move || {
                        if let Err(e) = serve(stream, &text) {
                            tracing::debug!(error = %e, "metrics request dropped");
                        }
                        active.fetch_sub(1, Ordering::AcqRel);
                    });
                if spawned.is_err() {
                    // The closure (and its decrement) never ran.
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        })?;
    Ok(bound)
}

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    Metrics,
    NotFound,
    WrongMethod,
    Malformed,
}

/// Parses the request line of a head.
pub fn parse(head: &[u8]) -> Request {
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

fn serve(mut stream: TcpStream, text: &Exposition) -> io::Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let deadline = Instant::now() + IO_TIMEOUT;
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let complete = loop {
        if head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n") {
            break true;
        }
        if head.len() > MAX_REQUEST || Instant::now() > deadline {
            break false;
        }
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break false;
        }
        head.extend_from_slice(&buf[..n]);
    };
    let (status, body) = match (complete, head.len() > MAX_REQUEST) {
        (_, true) => ("431 Request Header Fields Too Large", String::new()),
        (false, _) => ("408 Request Timeout", String::new()),
        (true, _) => match parse(&head) {
            Request::Metrics => ("200 OK", text.read().map(|t| t.clone()).unwrap_or_default()),
            Request::NotFound => ("404 Not Found", "see /metrics\n".into()),
            Request::WrongMethod => ("405 Method Not Allowed", String::new()),
            Request::Malformed => ("400 Bad Request", String::new()),
        },
    };
    stream.write_all(&response(status, &body, head.starts_with(b"HEAD ")))?;
    stream.shutdown(std::net::Shutdown::Both)
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
}
