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

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::Semaphore;

/// What one listener allows.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Connections open at once; one more is refused at once.
    pub(crate) max_connections: usize,
    /// Largest request accepted, in bytes.
    pub(crate) max_request: usize,
    /// How long a client has to deliver its whole request.
    pub(crate) deadline: Duration,
}

/// A request as far as it arrived.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Head {
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
pub(crate) async fn read_head<S: AsyncRead + Unpin>(
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
pub(crate) trait Accept: Send + 'static {
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

/// Refusals in progress at once (each a small task living at most [`TURN_AWAY`]): a burst of a
/// thousand clients is answered, a flood past that is closed at once.
const MAX_REFUSALS: usize = 1024;

/// How long a turned-away client has to take its answer.
const TURN_AWAY: Duration = Duration::from_secs(1);

/// Answers a client turned away (`busy`, 503) so that it reads the answer, not a reset: the kernel
/// resets a connection closed with unread data, so the request is drained (a bounded amount, for
/// a bounded time) after the answer is written and the sending side shut.
pub(crate) async fn turn_away<S: AsyncRead + AsyncWrite + Unpin>(mut conn: S, answer: Vec<u8>) {
    let _ = tokio::time::timeout(TURN_AWAY, async {
        conn.write_all(&answer).await?;
        conn.shutdown().await?;
        let mut sink = [0u8; 1024];
        let mut left: usize = 64 << 10;
        while left > 0 {
            let n = conn.read(&mut sink).await?;
            if n == 0 {
                break;
            }
            left = left.saturating_sub(n);
        }
        io::Result::Ok(())
    })
    .await;
}

/// Runs `listener` on a thread named `name`: each connection is served by `serve` within the
/// limits, or, when `max_connections` are open, handed to `refuse` (see [`turn_away`]), itself
/// bounded: [`MAX_REFUSALS`] at once, each within a second; past that a connection is closed at
/// once. `make` builds the listener inside the thread's runtime (tokio
/// listeners need one).
pub(crate) fn spawn<L, F, Fut, R, RFut>(
    name: &str,
    limits: Limits,
    make: impl FnOnce() -> io::Result<L> + Send + 'static,
    serve: F,
    refuse: R,
) -> io::Result<()>
where
    L: Accept,
    F: Fn(L::Conn) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
    R: Fn(L::Conn) -> RFut + Send + Sync + 'static,
    RFut: Future<Output = ()> + Send + 'static,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
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
            let refusals = Arc::new(Semaphore::new(MAX_REFUSALS));
            let serve = Arc::new(serve);
            let refuse = Arc::new(refuse);
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
                    if let Ok(r) = refusals.clone().try_acquire_owned() {
                        let refuse = refuse.clone();
                        tokio::spawn(async move {
                            let _ = tokio::time::timeout(TURN_AWAY, refuse(conn)).await;
                            drop(r);
                        });
                    }
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
            // The answer is the state that tells (a per-byte deadline would have read on until the
            // drip ended, and said Cut); the half minute is a hang detector only.
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{:?}",
                started.elapsed()
            );
            drip.abort();
        });
    }

    #[test]
    fn a_burst_past_the_slots_gets_busy_answers_never_a_reset() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        spawn(
            "test",
            Limits {
                max_connections: 2,
                max_request: 64,
                deadline: Duration::from_secs(2),
            },
            move || tokio::net::UnixListener::from_std(listener),
            |mut conn: tokio::net::UnixStream| async move {
                let _ = read_head(&mut conn, &limits(), line_end).await;
                tokio::time::sleep(Duration::from_millis(300)).await;
                let _ = conn.write_all(b"done\n").await;
            },
            |conn: tokio::net::UnixStream| turn_away(conn, b"busy\n".to_vec()),
        )
        .expect("spawn");
        // 60 clients at once, each sending its whole request before reading, as `nodeward` does.
        let clients: Vec<_> = (0..60)
            .map(|_| {
                let path = path.clone();
                std::thread::spawn(move || {
                    use std::io::{Read, Write};
                    let mut c = std::os::unix::net::UnixStream::connect(&path).expect("connect");
                    c.write_all(b"kubelet start\n").expect("write");
                    let mut answer = String::new();
                    c.read_to_string(&mut answer).map(|_| answer)
                })
            })
            .collect();
        let answers: Vec<String> = clients
            .into_iter()
            .map(|c| c.join().expect("join").expect("an answer, not a reset"))
            .collect();
        assert!(
            answers.iter().all(|a| a == "done\n" || a == "busy\n"),
            "{answers:?}"
        );
        assert!(
            answers.iter().any(|a| a == "busy\n"),
            "the burst went past the slots"
        );
        assert!(answers.iter().any(|a| a == "done\n"));
    }
}
