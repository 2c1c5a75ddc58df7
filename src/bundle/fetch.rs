//! Getting the bundle's bytes: a local file (through `--root`) or an `https://` URL fetched with
//! rustls (plain `http://` only when explicitly allowed), size-capped, retried with backoff, and
//! verified against a sha256 before anything is written.

use crate::types::Invalid;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::host::state::StateFile;
use crate::root::HostRoot;
use crate::types::AbsPath;

/// Where the bundle comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    Path(AbsPath),
    Url(String),
}

impl Source {
    fn parse_str(s: &str) -> Result<Self, String> {
        if s.starts_with("https://") || s.starts_with("http://") {
            if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(format!("{s:?} is not a URL"));
            }
            Ok(Source::Url(s.to_owned()))
        } else if s.starts_with('/') {
            Ok(Source::Path(s.parse()?))
        } else {
            Err(format!(
                "{s:?}: a bundle source is an absolute path or an https:// URL"
            ))
        }
    }
}

impl FromStr for Source {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<Self, Invalid> {
        Self::parse_str(s).map_err(Invalid)
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Path(p) => write!(f, "{p}"),
            Source::Url(u) => f.write_str(u),
        }
    }
}

impl serde::Serialize for Source {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Source {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        <String as serde::Deserialize>::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// A sha256 digest written as 64 hex digits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sha256Hex(String);

impl Sha256Hex {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Sha256Hex {
    fn parse_str(s: &str) -> Result<Self, String> {
        if s.len() != 64 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("{s:?} is not a sha256 (64 hex digits)"));
        }
        Ok(Sha256Hex(s.to_ascii_lowercase()))
    }
}

impl FromStr for Sha256Hex {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<Self, Invalid> {
        Self::parse_str(s).map_err(Invalid)
    }
}

impl serde::Serialize for Sha256Hex {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for Sha256Hex {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        <String as serde::Deserialize>::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// How to fetch.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// Trust only the CAs in this PEM file (instead of the system's).
    pub(crate) ca_file: Option<AbsPath>,
    pub(crate) allow_http: bool,
    pub(crate) timeout: Duration,
    /// Attempts after the first, with exponential backoff from `backoff`.
    pub(crate) retries: u32,
    pub(crate) backoff: Duration,
    pub(crate) max_bytes: u64,
    /// The sha256 the bundle must have. A download with this digest is kept (0600, in nodeward's
    /// state directory), and while the digest stays the same it is not fetched again.
    pub(crate) pinned: Option<String>,
}

/// Why the bundle could not be had.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{path}: cannot read: {source}")]
    Resolve {
        path: String,
        #[source]
        source: crate::root::RootError,
    },
    #[error("{path}: cannot read: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{source_name}: {size} bytes, over the {limit}-byte limit")]
    TooLarge {
        source_name: String,
        size: u64,
        limit: u64,
    },
    #[error("{url}: plain http is refused; use https or set bundle.allow_http = true")]
    HttpNotAllowed { url: String },
    #[error("{path}: CA file: {message}")]
    CaFile { path: String, message: String },
    #[error("{url}: HTTP status {status}")]
    Status { url: String, status: u16 },
    #[error("{url}: {message} (after {attempts} attempt(s))")]
    Transport {
        url: String,
        message: String,
        attempts: u32,
    },
    #[error("{url}: cancelled (nodeward is stopping)")]
    Cancelled { url: String },
    #[error("{url}: truncated: got {got} of {expected} bytes")]
    Truncated { url: String, got: u64, expected: u64 },
    #[error("{source_name}: sha256 mismatch: expected {want}, got {got}")]
    Checksum {
        source_name: String,
        want: String,
        got: String,
    },
}

impl FetchError {
    /// Worth another attempt (network trouble, server errors), as opposed to a definite answer.
    fn transient(&self) -> bool {
        match self {
            FetchError::Status { status, .. } => *status >= 500 || *status == 429,
            FetchError::Transport { .. } | FetchError::Truncated { .. } => true,
            _ => false,
        }
    }
}

/// Reads or downloads the bundle.
pub(crate) fn fetch(root: &HostRoot, source: &Source, opts: &Options) -> Result<Vec<u8>, FetchError> {
    match source {
        Source::Path(p) => read_local(root, p, opts.max_bytes),
        Source::Url(url) => download(root, url, opts),
    }
}

/// Checks the sha256 (hex, any case) of what was fetched.
pub(crate) fn verify_sha256(bytes: &[u8], want: &str, source_name: &str) -> Result<(), FetchError> {
    let got = super::digest::sha256_hex(bytes);
    if !got.eq_ignore_ascii_case(want.trim()) {
        return Err(FetchError::Checksum {
            source_name: source_name.into(),
            want: want.trim().to_lowercase(),
            got,
        });
    }
    Ok(())
}

fn read_local(root: &HostRoot, p: &AbsPath, max: u64) -> Result<Vec<u8>, FetchError> {
    let path = root.resolve(p).map_err(|source| FetchError::Resolve {
        path: p.to_string(),
        source,
    })?;
    read_file(&path, &p.to_string(), max)
}

/// Reads a bundle (or CA) file, capped at `max` bytes; errors call it `name`.
pub fn read_file(path: &std::path::Path, name: &str, max: u64) -> Result<Vec<u8>, FetchError> {
    let name = || name.to_owned();
    use crate::host::read::{self, Kind, ReadError};
    match read::read_large(path, Kind::Bundle(max)) {
        Ok(bytes) => Ok(bytes),
        Err(ReadError::TooLarge { size, .. }) => Err(FetchError::TooLarge {
            source_name: name(),
            size,
            limit: max,
        }),
        Err(e) => Err(FetchError::Read {
            path: name(),
            source: e.into_io(),
        }),
    }
}

/// Downloads `url` (or takes the kept copy of a pinned bundle), with the attempts `opts` allows.
pub(crate) fn download(root: &HostRoot, url: &str, opts: &Options) -> Result<Vec<u8>, FetchError> {
    if url.starts_with("http://") && !opts.allow_http {
        return Err(FetchError::HttpNotAllowed { url: url.into() });
    }
    let cache = StateFile::BundleDownload;
    if let Some(want) = &opts.pinned {
        let kind = crate::host::read::Kind::KeptBundle(opts.max_bytes);
        if let Ok(bytes) = cache.read_large(root, kind) {
            if super::digest::sha256_hex(&bytes).eq_ignore_ascii_case(want) {
                tracing::debug!(url, "the pinned bundle was downloaded before: not fetched again");
                return Ok(bytes);
            }
        }
    }
    let bytes = download_now(root, url, opts)?;
    if let Some(want) = &opts.pinned {
        if super::digest::sha256_hex(&bytes).eq_ignore_ascii_case(want) {
            keep(root, &bytes);
        }
    }
    Ok(bytes)
}

/// Keeps a verified download for the next converge. Secrets: 0600 from the first byte, in the
/// 0700 state directory (see `StateFile`). Failing to keep it only costs a download later.
fn keep(root: &HostRoot, bytes: &[u8]) {
    if let Err(e) = StateFile::BundleDownload.write(root, bytes) {
        tracing::warn!(error = %e, "cannot keep the downloaded bundle; it will be fetched again");
    }
}

fn download_now(root: &HostRoot, url: &str, opts: &Options) -> Result<Vec<u8>, FetchError> {
    use crate::host::http::{Client, Options as HttpOptions, Purpose};
    let ca_pem = match &opts.ca_file {
        Some(ca) => Some(read_local(root, ca, 1 << 20).map_err(|e| FetchError::CaFile {
            path: ca.to_string(),
            message: e.to_string(),
        })?),
        None => None,
    };
    let http = HttpOptions {
        timeout: opts.timeout,
        connect_timeout: opts.timeout,
        https_only: !opts.allow_http,
        ca_pem,
    };
    let client =
        Client::new(Purpose::bundle(opts.max_bytes), &http).map_err(|e| match (&opts.ca_file, e) {
            (Some(ca), crate::host::http::HttpError::Setup { message, .. }) => FetchError::CaFile {
                path: ca.to_string(),
                message,
            },
            (_, e) => FetchError::Transport {
                url: url.into(),
                message: e.to_string(),
                attempts: 0,
            },
        })?;
    // The exponential bound, capped; each wait a random time below it (full jitter), so a fleet
    // that lost its bundle server together does not come back to it together, and not below a
    // second (half the first bound, when a caller asks for less) so no node asks twice within one.
    const MAX_DELAY: Duration = Duration::from_secs(300);
    let mut bound = opts.backoff.min(MAX_DELAY);
    let mut attempt = 0;
    loop {
        attempt += 1;
        crate::progress::set_activity(format!("bundle: downloading {url} (attempt {attempt})"));
        match get_once(&client, url, attempt) {
            Ok(bytes) => return Ok(bytes),
            Err(e) if e.transient() && attempt <= opts.retries => {
                let floor = crate::jitter::RETRY_FLOOR.min(opts.backoff / 2);
                let delay = crate::jitter::jitter_above(floor, bound);
                tracing::warn!(url, attempt, error = %e, "bundle download failed; retrying in {delay:?}");
                crate::progress::set_activity(format!(
                    "bundle: attempt {attempt} failed ({e}); retrying in {} s",
                    delay.as_secs()
                ));
                if !crate::progress::sleep(delay) {
                    return Err(FetchError::Cancelled { url: url.into() });
                }
                bound = bound.saturating_mul(2).min(MAX_DELAY);
            }
            Err(e) => return Err(e),
        }
    }
}

/// One attempt: the whole request (connect, headers, body) within `bundle.timeout_seconds`, the
/// body capped at `bundle.max_bytes` (see [`crate::host::http`]), beating for each chunk: a slow
/// transfer that still moves is progress, a silent one is not.
fn get_once(client: &crate::host::http::Client, url: &str, attempt: u32) -> Result<Vec<u8>, FetchError> {
    use crate::host::http::BodyError;
    let resp = client.get(url).map_err(|e| FetchError::Transport {
        url: url.into(),
        message: e.to_string(),
        attempts: attempt,
    })?;
    let status = resp.status();
    if !(200..300).contains(&status) {
        return Err(FetchError::Status {
            url: url.into(),
            status,
        });
    }
    let expected = resp.content_length();
    let mut meter = Meter::new(url, expected);
    let read = resp.body(|n| {
        crate::progress::beat();
        meter.read(n);
    });
    meter.done();
    match read {
        Ok(body) => match expected {
            Some(len) if (body.len() as u64) < len => Err(FetchError::Truncated {
                url: url.into(),
                got: body.len() as u64,
                expected: len,
            }),
            _ => Ok(body),
        },
        Err(BodyError::TooLarge { size, limit, .. }) => Err(FetchError::TooLarge {
            source_name: url.into(),
            size,
            limit,
        }),
        Err(BodyError::Cancelled { .. }) => Err(FetchError::Cancelled { url: url.into() }),
        Err(BodyError::Deadline { timeout, got, .. }) => Err(FetchError::Transport {
            url: url.into(),
            message: format!(
                "the attempt took longer than bundle.timeout_seconds ({} s) (got {got} bytes)",
                timeout.as_secs()
            ),
            attempts: attempt,
        }),
        Err(e) => match expected {
            Some(len) => Err(FetchError::Truncated {
                url: url.into(),
                got: e.got(),
                expected: len,
            }),
            None => Err(FetchError::Transport {
                url: url.into(),
                message: e.to_string(),
                attempts: attempt,
            }),
        },
    }
}

/// How a download moves: bytes, rate and time left, said at most once a second (in the bundle
/// step's waiting message and STATUS) and, for a large one, journalled every 10 s.
struct Meter {
    url: String,
    expected: Option<u64>,
    started: std::time::Instant,
    said: std::time::Instant,
    logged: std::time::Instant,
}

/// Downloads smaller than this finish before anyone needs to know how they move.
const LARGE: u64 = 8 << 20;

impl Meter {
    fn new(url: &str, expected: Option<u64>) -> Meter {
        let now = std::time::Instant::now();
        Meter {
            url: url.to_owned(),
            expected,
            started: now,
            said: now,
            logged: now,
        }
    }

    fn read(&mut self, got: u64) {
        let now = std::time::Instant::now();
        if now.duration_since(self.said) < Duration::from_secs(1) {
            return;
        }
        self.said = now;
        let line = progress_line(got, self.expected, now.duration_since(self.started));
        crate::progress::set_download(format!("{}: {line}", self.url));
        if self.expected.unwrap_or(got) >= LARGE && now.duration_since(self.logged) >= Duration::from_secs(10)
        {
            self.logged = now;
            tracing::info!(url = %self.url, bytes = got, "bundle download: {line}");
        }
    }

    fn done(&self) {
        crate::progress::set_download(String::new());
    }
}

/// `12.0 of 50.0 MiB, 3.1 MiB/s, 12 s left`: what a person wants to know of a transfer.
pub(crate) fn progress_line(got: u64, expected: Option<u64>, elapsed: Duration) -> String {
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    let rate = got as f64 / elapsed.as_secs_f64().max(0.001);
    match expected {
        Some(total) if total > 0 => {
            let left = total.saturating_sub(got) as f64 / rate.max(1.0);
            format!(
                "{:.1} of {:.1} MiB, {:.1} MiB/s, {:.0} s left",
                mib(got),
                mib(total),
                rate / f64::from(1 << 20),
                left
            )
        }
        _ => format!("{:.1} MiB, {:.1} MiB/s", mib(got), rate / f64::from(1 << 20)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_says_bytes_rate_and_time_left() {
        let s = Duration::from_secs(4);
        assert_eq!(
            progress_line(12 << 20, Some(48 << 20), s),
            "12.0 of 48.0 MiB, 3.0 MiB/s, 12 s left"
        );
        assert_eq!(
            progress_line(3 << 20, None, Duration::from_secs(2)),
            "3.0 MiB, 1.5 MiB/s"
        );
    }

    /// The kept download is nodeward's state: a symlink at its name (to a file outside the root
    /// whose digest matches the pin) is not followed; the bundle is fetched instead.
    #[test]
    fn the_kept_download_is_not_read_through_a_symlink() {
        let outside = tempfile::tempdir().expect("tempdir");
        let secret = outside.path().join("build-host-file");
        std::fs::write(&secret, b"the build host's bytes").expect("write");
        let want = crate::bundle::digest::sha256_hex(b"the build host's bytes");
        let dir = tempfile::tempdir().expect("tempdir");
        let root = HostRoot::at(dir.path());
        let opts = Options {
            ca_file: None,
            allow_http: true,
            timeout: Duration::from_secs(2),
            retries: 0,
            backoff: Duration::from_millis(10),
            max_bytes: 1 << 20,
            pinned: Some(want.clone()),
        };
        // Nothing listens on port 9: a fetch fails at once.
        let url = "http://127.0.0.1:9/assets";
        let kept = dir.path().join("var/lib/nodeward/bundle");
        std::fs::create_dir_all(&kept).expect("mkdir");
        std::os::unix::fs::symlink(&secret, kept.join("download")).expect("symlink");
        assert!(download(&root, url, &opts).is_err(), "the link was followed");
        // Control: the same bytes kept as nodeward keeps them are used without a fetch.
        std::fs::remove_file(kept.join("download")).expect("rm");
        StateFile::BundleDownload
            .write(&root, b"the build host's bytes")
            .expect("keep");
        assert_eq!(
            download(&root, url, &opts).expect("kept"),
            b"the build host's bytes"
        );
    }
}
