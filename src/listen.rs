//! Request/answer listeners that slow or idle clients cannot starve (the metrics endpoint and the
//! control socket). Each listener is one thread running a single-threaded tokio runtime; a
//! connection is a task, not a thread, so a thousand dripping clients cost a few kilobytes each.
//! A client must deliver its whole request within [`Limits::deadline`] (not per byte) and
//! [`Limits::max_request`] bytes; at most [`Limits::max_connections`] are open at once, and one
//! more is refused at once. Memory is bounded by `max_connections × max_request`.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::Semaphore;

/// What one listener allows.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at once; one more is refused at once.
    pub max_connections: usize,
    /// Largest request accepted, in bytes.
    pub max_request: usize,
    /// How long a client has to deliver its whole request.
    pub deadline: Duration,
}

/// A request as far as it arrived.
#[derive(Debug, PartialEq, Eq)]
pub enum Head {
    /// Complete: the bytes up to and including its end (`ends` said where).
    Complete(Vec<u8>),
    /// More than `max_request` bytes without an end.
    TooLong,
    /// The deadline passed first.
    TimedOut,
    /// The client closed (or shut its sending side) before the end.
    Cut,
}

/// Reads a request until `ends(bytes)` finds its end (returning its length), within `limits`.
pub async fn read_head<S: AsyncRead + Unpin>(
    stream: &mut S,
    limits: &Limits,
    ends: impl Fn(&[u8]) -> Option<usize>,
) -> io::Result<Head> {
    let read = async {
        let mut head = Vec::with_capacity(256.min(limits.max_request));
        let mut buf = [0u8; 1024];
        loop {
            if let Some(n) = ends(&head) {
                head.truncate(n);
                return Ok(Head::Complete(head));
            }
            if head.len() > limits.max_request {
                return Ok(Head::TooLong);
            }
            let room = (limits.max_request + 1 - head.len()).min(buf.len());
            let n = stream.read(&mut buf[..room]).await?;
            if n == 0 {
                return Ok(Head::Cut);
            }
            head.extend_from_slice(&buf[..n]);
        }
    };
    match tokio::time::timeout(limits.deadline, read).await {
        Ok(result) => result,
        Err(_) => Ok(Head::TimedOut),
    }
}

/// Something that accepts connections (a TCP or a Unix listener).
pub trait Accept: Send + 'static {
    type Conn: Send + 'static;
    fn accept(&self) -> impl Future<Output = io::Result<Self::Conn>> + Send;
}

impl Accept for tokio::net::TcpListener {
    type Conn = tokio::net::TcpStream;
    async fn accept(&self) -> io::Result<Self::Conn> {
        tokio::net::TcpListener::accept(self).await.map(|(s, _)| s)
    }
}

impl Accept for tokio::net::UnixListener {
    type Conn = tokio::net::UnixStream;
    async fn accept(&self) -> io::Result<Self::Conn> {
        tokio::net::UnixListener::accept(self).await.map(|(s, _)| s)
    }
}

/// Runs `listener` on a thread named `name`: each connection is served by `serve` within the
/// limits, or, when `max_connections` are open, handed to `refuse` (which must not wait).
/// `make` builds the listener inside the thread's runtime (tokio listeners need one).
pub fn spawn<L, F, Fut>(
    name: &str,
    limits: Limits,
    make: impl FnOnce() -> io::Result<L> + Send + 'static,
    serve: F,
    refuse: fn(L::Conn),
) -> io::Result<()>
where
    L: Accept,
    F: Fn(L::Conn) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    std::thread::Builder::new().name(name.into()).spawn(move || {
        runtime.block_on(async move {
            let listener = match make() {
                Ok(l) => {
                    let _ = ready_tx.send(Ok(()));
                    l
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            let slots = Arc::new(Semaphore::new(limits.max_connections));
            let serve = Arc::new(serve);
            loop {
                let conn = match listener.accept().await {
                    Ok(c) => c,
                    Err(_) => {
                        // EMFILE and the like: back off instead of spinning.
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    refuse(conn);
                    continue;
                };
                let serve = serve.clone();
                tokio::spawn(async move {
                    serve(conn).await;
                    drop(slot);
                });
            }
        });
    })?;
    ready_rx
        .recv()
        .unwrap_or_else(|_| Err(io::Error::other("listener thread ended")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line_end(b: &[u8]) -> Option<usize> {
        b.iter().position(|&c| c == b'\n').map(|i| i + 1)
    }

    fn limits() -> Limits {
        Limits {
            max_connections: 4,
            max_request: 16,
            deadline: Duration::from_millis(300),
        }
    }

    fn run<T>(f: impl Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    #[test]
    fn a_request_is_complete_cut_too_long_or_late() {
        run(async {
            let head = |bytes: &'static [u8]| async move {
                let (mut a, mut b) = tokio::io::duplex(64);
                tokio::io::AsyncWriteExt::write_all(&mut b, bytes)
                    .await
                    .expect("write");
                drop(b);
                read_head(&mut a, &limits(), line_end).await.expect("read")
            };
            assert_eq!(
                head(b"converge\nrest").await,
                Head::Complete(b"converge\n".to_vec())
            );
            assert_eq!(head(b"converge").await, Head::Cut);
            assert_eq!(head(&[b'x'; 40]).await, Head::TooLong);
            // A client that keeps the connection open and sends a byte now and then: the
            // deadline is for the whole request, not per byte.
            let (mut a, mut b) = tokio::io::duplex(64);
            let drip = tokio::spawn(async move {
                for _ in 0..10 {
                    let _ = tokio::io::AsyncWriteExt::write_all(&mut b, b"x").await;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            });
            let started = std::time::Instant::now();
            assert_eq!(
                read_head(&mut a, &limits(), line_end).await.expect("read"),
                Head::TimedOut
            );
            assert!(started.elapsed() < Duration::from_millis(600));
            drip.abort();
        });
    }
}
