//! A read-only container registry for the VM, std only, written from the OCI distribution spec
//! (`opencontainers/distribution-spec` spec.md: "Pulling manifests", "Pulling blobs"), so that the
//! real podman pulls an image over HTTP the way it pulls from quay.io:
//!
//! - `GET|HEAD /v2/` → 200 (the API check);
//! - `GET|HEAD /v2/NAME/manifests/REF` → the manifest, its `Content-Type` the `mediaType` it names
//!   and `Docker-Content-Digest` its digest; REF a tag or a digest;
//! - `GET|HEAD /v2/NAME/blobs/DIGEST` → the blob, sent at `--rate` bytes per second (a pull slow
//!   enough to be watched while it runs).
//!
//! The store is a directory: `manifests/NAME/REF` and `blobs/sha256:HEX` (a tag's file holds the
//! same bytes as its digest's). Anything else is 404 with the spec's error body.
//!
//! Usage: registry-server --listen ADDR --dir DIR [--rate BYTES_PER_S] [--log FILE]
//! The log gets one line per request: `MS METHOD PATH STATUS BYTES`.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

struct Store {
    dir: PathBuf,
    rate: Option<u64>,
    log: Option<PathBuf>,
}

/// A name, tag or digest as the spec allows them: no `..`, no empty segment.
fn safe(part: &str) -> bool {
    !part.is_empty()
        && part.split('/').all(|s| !s.is_empty() && s != "." && s != "..")
        && part
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-:/".contains(&b))
}

/// `(kind, name, reference)` of `/v2/NAME/(manifests|blobs)/REF`.
fn route(path: &str) -> Option<(&str, &str, &str)> {
    let rest = path.strip_prefix("/v2/")?;
    for kind in ["manifests", "blobs"] {
        if let Some(i) = rest.rfind(&format!("/{kind}/")) {
            let (name, reference) = (&rest[..i], &rest[i + kind.len() + 2..]);
            return (safe(name) && safe(reference)).then_some((kind, name, reference));
        }
    }
    None
}

fn sha256_of_manifest_name(dir: &Path, name: &str, reference: &str) -> Option<String> {
    // A digest reference is its own digest; a tag's file is a copy of a digest's.
    if reference.starts_with("sha256:") {
        return Some(reference.to_owned());
    }
    let tagged = std::fs::read(dir.join("manifests").join(name).join(reference)).ok()?;
    std::fs::read_dir(dir.join("manifests").join(name))
        .ok()?
        .flatten()
        .find_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            (n.starts_with("sha256:") && std::fs::read(e.path()).ok()? == tagged).then_some(n)
        })
}

/// The `mediaType` a manifest names (every OCI and Docker v2 manifest carries one).
fn media_type(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    text.find("\"mediaType\"")
        .and_then(|i| {
            let after = &text[i + 11..];
            let start = after.find('"')? + 1;
            let end = after[start..].find('"')? + start;
            Some(after[start..end].to_owned())
        })
        .unwrap_or_else(|| "application/vnd.oci.image.manifest.v1+json".to_owned())
}

impl Store {
    fn log(&self, line: &str) {
        if let Some(p) = &self.log {
            if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(p) {
                let ms = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis());
                let _ = writeln!(f, "{ms} {line}");
            }
        }
    }

    fn serve(&self, mut stream: TcpStream) {
        let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
        let mut reader = BufReader::new(match stream.try_clone() {
            Ok(s) => s,
            Err(_) => return,
        });
        let mut request = String::new();
        if reader.read_line(&mut request).is_err() {
            return;
        }
        // The headers are read and ignored: nothing here depends on them.
        let mut line = String::new();
        while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
            line.clear();
        }
        let mut words = request.split_whitespace();
        let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        let path = path.split('?').next().unwrap_or("");
        let head = method == "HEAD";
        if method != "GET" && !head {
            return self.answer(&mut stream, method, path, 405, "text/plain", &[], b"", false);
        }
        if path == "/v2/" || path == "/v2" {
            return self.answer(
                &mut stream,
                method,
                path,
                200,
                "application/json",
                &[],
                b"{}",
                head,
            );
        }
        match route(path) {
            Some(("manifests", name, reference)) => {
                let body = std::fs::read(self.dir.join("manifests").join(name).join(reference));
                let digest = sha256_of_manifest_name(&self.dir, name, reference);
                match (body, digest) {
                    (Ok(body), Some(digest)) => {
                        let kind = media_type(&body);
                        let headers = [("Docker-Content-Digest", digest.as_str())];
                        self.answer(&mut stream, method, path, 200, &kind, &headers, &body, head)
                    }
                    _ => self.missing(&mut stream, method, path, "MANIFEST", head),
                }
            }
            Some(("blobs", _, digest)) => match std::fs::read(self.dir.join("blobs").join(digest)) {
                Ok(body) => {
                    let headers = [("Docker-Content-Digest", digest)];
                    self.answer(
                        &mut stream,
                        method,
                        path,
                        200,
                        "application/octet-stream",
                        &headers,
                        &body,
                        head,
                    )
                }
                Err(_) => self.missing(&mut stream, method, path, "BLOB", head),
            },
            _ => self.missing(&mut stream, method, path, "NAME", head),
        }
    }

    /// 404 with the spec's error body (`MANIFEST_UNKNOWN`, `BLOB_UNKNOWN`, `NAME_UNKNOWN`).
    fn missing(&self, stream: &mut TcpStream, method: &str, path: &str, what: &str, head: bool) {
        let body = format!("{{\"errors\":[{{\"code\":\"{what}_UNKNOWN\",\"message\":\"not found\"}}]}}");
        self.answer(
            stream,
            method,
            path,
            404,
            "application/json",
            &[],
            body.as_bytes(),
            head,
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn answer(
        &self,
        stream: &mut TcpStream,
        method: &str,
        path: &str,
        status: u16,
        kind: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        head: bool,
    ) {
        let reason = match status {
            200 => "OK",
            404 => "Not Found",
            _ => "Method Not Allowed",
        };
        let mut out = format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nDocker-Distribution-API-Version: registry/2.0\r\nConnection: close\r\n",
            body.len()
        );
        for (k, v) in headers {
            out.push_str(&format!("{k}: {v}\r\n"));
        }
        out.push_str("\r\n");
        if stream.write_all(out.as_bytes()).is_err() {
            return;
        }
        let mut sent = 0;
        if !head {
            let started = Instant::now();
            for chunk in body.chunks(16 << 10) {
                if stream.write_all(chunk).is_err() {
                    break;
                }
                sent += chunk.len();
                if let Some(rate) = self.rate.filter(|_| kind == "application/octet-stream") {
                    let due = Duration::from_secs_f64(sent as f64 / rate as f64);
                    if let Some(wait) = due.checked_sub(started.elapsed()) {
                        std::thread::sleep(wait);
                    }
                }
            }
        }
        self.log(&format!("{method} {path} {status} {sent}"));
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let (Some(listen), Some(dir)) = (arg("--listen"), arg("--dir")) else {
        eprintln!("usage: registry-server --listen ADDR --dir DIR [--rate BYTES_PER_S] [--log FILE]");
        std::process::exit(2);
    };
    let store = std::sync::Arc::new(Store {
        dir: PathBuf::from(dir),
        rate: arg("--rate").and_then(|r| r.parse().ok()),
        log: arg("--log").map(PathBuf::from),
    });
    let listener = TcpListener::bind(&listen).unwrap_or_else(|e| {
        eprintln!("registry-server: bind {listen}: {e}");
        std::process::exit(1);
    });
    for stream in listener.incoming().flatten() {
        let store = store.clone();
        std::thread::spawn(move || store.serve(stream));
    }
}
