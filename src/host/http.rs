//! The one HTTP client. Every request nodeward sends (the bundle, FleetLock, the registries
//! `nodeward check` asks, and whatever comes next) is built here, so each gets the same guarantees:
//!
//! - rustls with ring, installed once per process;
//! - a connect deadline and a whole-request deadline (connect, headers and body together: a server
//!   that drips one byte a second is cut off at the deadline, not at every read);
//! - a redirect policy chosen per purpose ([`Purpose`]), never reqwest's default by accident;
//! - every body read through one capped reader, at most the purpose's cap plus one byte held in
//!   memory, whatever the server sends or claims in `Content-Length`;
//! - errors naming the URL.
//!
//! No other module reads a response body (`tests/architecture.rs` refuses `.text()`, `.bytes()`,
//! `.json()` and reading a `reqwest` response anywhere else).

use std::io::Read;
use std::time::{Duration, Instant};

/// What a client is for: its redirect policy and how large a body it may read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Purpose {
    /// For errors and logs: `bundle`, `fleet_lock`.
    pub(crate) name: &'static str,
    pub(crate) redirects: Redirects,
    /// The largest body read; more is an error ([`BodyError::TooLarge`]) or, for an error body
    /// ([`Response::body_prefix`]), cut there.
    pub(crate) max_body: u64,
}

/// Whether a client follows redirects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Redirects {
    /// A 3xx is the answer. FleetLock: a redirected POST must never be taken for a lock request
    /// (Zincati's client does not follow them either).
    Refuse,
    /// Up to this many hops, never from https to plain http unless plain http is allowed.
    /// The bundle: object stores and release pages answer with redirects, and the bundle's sha256
    /// pin, not its URL, says whether what arrived is the bundle.
    Follow(usize),
    /// As `Follow`, but never to another host than the request's: a registry's token service,
    /// whose answer is sent back as a credential.
    SameHost(usize),
}

impl Purpose {
    /// The assets bundle: redirects followed (5 hops), the body capped at `bundle.max_bytes`.
    pub(crate) fn bundle(max_bytes: u64) -> Purpose {
        Purpose {
            name: "bundle",
            redirects: Redirects::Follow(5),
            max_body: max_bytes,
        }
    }

    /// A FleetLock server: no redirects; its answers are a status and a small JSON error body.
    pub(crate) const FLEET_LOCK: Purpose = Purpose {
        name: "fleet_lock",
        redirects: Redirects::Refuse,
        max_body: 4096,
    };

    /// A registry asked whether it serves an image (`nodeward check`): a HEAD of the manifest,
    /// redirects followed (registry.k8s.io redirects to its backends).
    pub(crate) const REGISTRY: Purpose = Purpose {
        name: "registry",
        redirects: Redirects::Follow(5),
        max_body: 64 << 10,
    };

    /// A registry's token service, asked for an anonymous pull token: a redirect stays on its host.
    pub(crate) const REGISTRY_TOKEN: Purpose = Purpose {
        name: "registry token",
        redirects: Redirects::SameHost(2),
        max_body: 64 << 10,
    };
}

/// The methods [`Client::request`] sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    Get,
    Head,
}

/// How to reach the server.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// The whole request: connect, headers and the body.
    pub(crate) timeout: Duration,
    /// Connecting alone (never more than `timeout`).
    pub(crate) connect_timeout: Duration,
    /// Refuse `http://` URLs (and redirects to them).
    pub(crate) https_only: bool,
    /// Trust only these CAs (PEM), instead of the system's.
    pub(crate) ca_pem: Option<Vec<u8>>,
}

/// A request that got no usable answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HttpError {
    /// The client could not be built (a CA file with no certificate, a TLS setup error).
    #[error("{purpose}: {message}")]
    Setup { purpose: &'static str, message: String },
    /// No answer: refused connection, timeout, TLS, DNS, a refused redirect.
    #[error("{url}: {message}")]
    Send { url: String, message: String },
}

/// Why a body could not be read whole.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    #[error("{url}: the body is over the {limit}-byte limit ({size} bytes {how})")]
    TooLarge {
        url: String,
        size: u64,
        limit: u64,
        /// "announced" (Content-Length) or "read".
        how: &'static str,
    },
    #[error("{url}: the request took longer than its {} s deadline (got {got} bytes)", .timeout.as_secs())]
    Deadline {
        url: String,
        timeout: Duration,
        got: u64,
    },
    #[error("{url}: cancelled (nodeward is stopping)")]
    Cancelled { url: String },
    #[error("{url}: {message} (got {got} bytes)")]
    Read { url: String, message: String, got: u64 },
}

impl BodyError {
    /// Bytes read before the error.
    pub(crate) fn got(&self) -> u64 {
        match self {
            BodyError::Deadline { got, .. } | BodyError::Read { got, .. } => *got,
            BodyError::TooLarge { .. } | BodyError::Cancelled { .. } => 0,
        }
    }
}

/// A client for one purpose.
#[derive(Debug)]
pub(crate) struct Client {
    inner: reqwest::blocking::Client,
    purpose: Purpose,
    timeout: Duration,
}

impl Client {
    pub(crate) fn new(purpose: Purpose, opts: &Options) -> Result<Client, HttpError> {
        // reqwest is built without a bundled crypto provider: ring, once per process.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let setup = |message: String| HttpError::Setup {
            purpose: purpose.name,
            message,
        };
        let https_only = opts.https_only;
        let redirect = match purpose.redirects {
            Redirects::Refuse => reqwest::redirect::Policy::none(),
            Redirects::Follow(hops) | Redirects::SameHost(hops) => {
                let same_host = matches!(purpose.redirects, Redirects::SameHost(_));
                reqwest::redirect::Policy::custom(move |attempt| {
                    let first = attempt
                        .previous()
                        .first()
                        .and_then(|u| u.host_str().map(str::to_owned));
                    if attempt.previous().len() >= hops {
                        attempt.error(format!("more than {hops} redirects"))
                    } else if https_only && attempt.url().scheme() != "https" {
                        attempt.error("a redirect to plain http")
                    } else if same_host && first.as_deref() != attempt.url().host_str() {
                        attempt.error("a redirect to another host")
                    } else {
                        attempt.follow()
                    }
                })
            }
        };
        let mut builder = reqwest::blocking::Client::builder()
            .timeout(opts.timeout)
            .connect_timeout(opts.connect_timeout.min(opts.timeout))
            .https_only(https_only)
            .redirect(redirect)
            .user_agent(concat!("nodeward/", env!("CARGO_PKG_VERSION")));
        if let Some(pem) = &opts.ca_pem {
            let certs = reqwest::Certificate::from_pem_bundle(pem).map_err(|e| setup(chain(&e)))?;
            if certs.is_empty() {
                return Err(setup("no certificate in the CA file".into()));
            }
            builder = builder.tls_certs_only(certs);
        }
        let inner = builder.build().map_err(|e| setup(chain(&e)))?;
        Ok(Client {
            inner,
            purpose,
            timeout: opts.timeout,
        })
    }

    pub(crate) fn get(&self, url: &str) -> Result<Response, HttpError> {
        self.send(url, self.inner.get(url))
    }

    /// A GET or HEAD with extra headers.
    pub(crate) fn request(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, &str)],
    ) -> Result<Response, HttpError> {
        let mut req = match method {
            Method::Get => self.inner.get(url),
            Method::Head => self.inner.head(url),
        };
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        self.send(url, req)
    }

    /// A POST of a JSON body with extra headers.
    pub(crate) fn post_json(
        &self,
        url: &str,
        headers: &[(&str, &str)],
        body: String,
    ) -> Result<Response, HttpError> {
        let mut req = self
            .inner
            .post(url)
            .header("content-type", "application/json")
            .body(body);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        self.send(url, req)
    }

    fn send(&self, url: &str, req: reqwest::blocking::RequestBuilder) -> Result<Response, HttpError> {
        let deadline = Instant::now() + self.timeout;
        let inner = req.send().map_err(|e| HttpError::Send {
            url: url.to_owned(),
            message: chain(&e),
        })?;
        Ok(Response {
            inner,
            url: url.to_owned(),
            max: self.purpose.max_body,
            deadline,
            timeout: self.timeout,
        })
    }
}

/// An answer whose body has not been read yet.
#[derive(Debug)]
pub(crate) struct Response {
    inner: reqwest::blocking::Response,
    url: String,
    max: u64,
    deadline: Instant,
    timeout: Duration,
}

impl Response {
    pub(crate) fn status(&self) -> u16 {
        self.inner.status().as_u16()
    }

    /// A header's value, when it is there and printable.
    pub(crate) fn header(&self, name: &str) -> Option<String> {
        let value = self.inner.headers().get(name)?;
        value.to_str().ok().map(str::to_owned)
    }

    /// What `Content-Length` announces (a claim: the reader never trusts it).
    pub(crate) fn content_length(&self) -> Option<u64> {
        self.inner.content_length()
    }

    /// The whole body, refused past the purpose's cap (announced or read), given up at the
    /// request's deadline or when nodeward stops. `on_chunk` sees the running total after each
    /// chunk (progress, watchdog beats).
    pub(crate) fn body(self, on_chunk: impl FnMut(u64)) -> Result<Vec<u8>, BodyError> {
        if let Some(len) = self.content_length().filter(|&l| l > self.max) {
            return Err(BodyError::TooLarge {
                url: self.url,
                size: len,
                limit: self.max,
                how: "announced",
            });
        }
        let (url, max) = (self.url.clone(), self.max);
        let body = self.take_body(on_chunk)?;
        if body.len() as u64 > max {
            return Err(BodyError::TooLarge {
                url,
                size: body.len() as u64,
                limit: max,
                how: "read",
            });
        }
        Ok(body)
    }

    /// At most the purpose's cap of the body, for an error answer's few fields: the rest is
    /// dropped unread, and a read error or the deadline only ends it early.
    pub(crate) fn body_prefix(self) -> Vec<u8> {
        let max = self.max as usize;
        let mut body = self.take_body(|_| {}).unwrap_or_default();
        body.truncate(max);
        body
    }

    /// Reads at most `max + 1` bytes (one more than allowed tells "too large" from "exactly the
    /// cap"), in chunks, checking the deadline and cancellation between them.
    fn take_body(self, mut on_chunk: impl FnMut(u64)) -> Result<Vec<u8>, BodyError> {
        let Response {
            inner,
            url,
            max,
            deadline,
            timeout,
        } = self;
        let mut from = inner.take(max.saturating_add(1));
        let mut body = Vec::new();
        let mut chunk = vec![0u8; 64 << 10];
        loop {
            if crate::progress::cancelled() {
                return Err(BodyError::Cancelled { url });
            }
            let got = body.len() as u64;
            if Instant::now() >= deadline {
                return Err(BodyError::Deadline { url, timeout, got });
            }
            match from.read(&mut chunk) {
                Ok(0) => return Ok(body),
                Ok(n) => {
                    body.extend_from_slice(&chunk[..n]);
                    on_chunk(body.len() as u64);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                    return Err(BodyError::Deadline { url, timeout, got });
                }
                Err(e) => {
                    return Err(BodyError::Read {
                        url,
                        message: e.to_string(),
                        got,
                    });
                }
            }
        }
    }
}

/// An error and its causes on one line, without repeating a cause its parent already quotes.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let next = c.to_string();
        if !s.ends_with(&next) {
            s.push_str(": ");
            s.push_str(&next);
        }
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::TcpListener;

    /// A server that answers every connection with `head` and then `body_len` bytes of 'x'
    /// (`None`: endless), one request per connection.
    fn serve(head: &'static str, body_len: Option<usize>) -> String {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut s = s;
                    let mut buf = [0u8; 4096];
                    let _ = std::io::Read::read(&mut s, &mut buf);
                    if s.write_all(head.as_bytes()).is_err() {
                        return;
                    }
                    let chunk = [b'x'; 8192];
                    let mut left = body_len.unwrap_or(usize::MAX);
                    while left > 0 {
                        let n = left.min(chunk.len());
                        if s.write_all(&chunk[..n]).is_err() {
                            return;
                        }
                        left -= n;
                    }
                });
            }
        });
        format!("http://{addr}/x")
    }

    fn opts() -> Options {
        Options {
            timeout: Duration::from_secs(20),
            connect_timeout: Duration::from_secs(5),
            https_only: false,
            ca_pem: None,
        }
    }

    fn purpose(max: u64, redirects: Redirects) -> Purpose {
        Purpose {
            name: "test",
            redirects,
            max_body: max,
        }
    }

    #[test]
    fn an_endless_error_body_is_read_only_to_the_cap() {
        let url = serve("HTTP/1.1 409 Conflict\r\nConnection: close\r\n\r\n", None);
        let c = Client::new(purpose(4096, Redirects::Refuse), &opts()).expect("client");
        let r = c.get(&url).expect("answer");
        assert_eq!(r.status(), 409);
        let body = r.body_prefix();
        assert_eq!(body.len(), 4096, "the prefix is the cap, the rest unread");
    }

    #[test]
    fn a_body_over_the_cap_is_refused_whether_announced_or_not() {
        let url = serve("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", Some(10_001));
        let c = Client::new(purpose(10_000, Redirects::Refuse), &opts()).expect("client");
        let e = c.get(&url).expect("answer").body(|_| {}).expect_err("too large");
        assert!(
            matches!(
                e,
                BodyError::TooLarge {
                    how: "read",
                    size: 10_001,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().starts_with(&url), "{e}");

        let url = serve(
            "HTTP/1.1 200 OK\r\nContent-Length: 99999999\r\nConnection: close\r\n\r\n",
            Some(10),
        );
        let e = c.get(&url).expect("answer").body(|_| {}).expect_err("too large");
        assert!(matches!(e, BodyError::TooLarge { how: "announced", .. }), "{e}");

        // Control: exactly the cap is a body.
        let url = serve("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", Some(10_000));
        let mut seen = 0;
        let body = c.get(&url).expect("answer").body(|n| seen = n).expect("body");
        assert_eq!((body.len(), seen), (10_000, 10_000));
    }

    #[test]
    fn redirects_follow_the_purpose() {
        let target = serve(
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n",
            Some(2),
        );
        let head: &'static str = Box::leak(
            format!(
                "HTTP/1.1 302 Found\r\nLocation: {target}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            )
            .into_boxed_str(),
        );
        let url = serve(head, Some(0));
        let refuse = Client::new(purpose(100, Redirects::Refuse), &opts()).expect("client");
        assert_eq!(refuse.get(&url).expect("answer").status(), 302);
        let follow = Client::new(purpose(100, Redirects::Follow(5)), &opts()).expect("client");
        let r = follow.get(&url).expect("answer");
        assert_eq!(r.status(), 200);
        assert_eq!(r.body(|_| {}).expect("body"), b"xx");
        let none = Client::new(purpose(100, Redirects::Follow(0)), &opts()).expect("client");
        let e = none.get(&url).expect_err("over the hop limit");
        assert!(e.to_string().contains("redirects"), "{e}");
        // A token service's redirect stays on its host: the same server named otherwise is
        // another host; the same name is followed (the control).
        let same = Client::new(purpose(100, Redirects::SameHost(2)), &opts()).expect("client");
        assert_eq!(same.get(&url).expect("answer").status(), 200);
        let elsewhere: &'static str = Box::leak(
            format!(
                "HTTP/1.1 302 Found\r\nLocation: {}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                target.replace("127.0.0.1", "localhost")
            )
            .into_boxed_str(),
        );
        let e = same.get(&serve(elsewhere, Some(0))).expect_err("another host");
        assert!(e.to_string().contains("another host"), "{e}");
    }

    #[test]
    fn a_ca_file_without_certificates_is_refused() {
        let o = Options {
            ca_pem: Some(b"not a certificate\n".to_vec()),
            ..opts()
        };
        let e = Client::new(Purpose::bundle(10), &o).expect_err("no CA");
        assert!(e.to_string().contains("no certificate"), "{e}");
    }
}
