//! Fetching the bundle over https from a real TLS server the test runs on 127.0.0.1 (a rustls
//! server with a certificate made by rcgen): private CA, untrusted certificate, checksum mismatch,
//! truncated body, retries, plain http refused. Every failure leaves the node untouched.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::Arc;

use common::Root;
use sha2::Digest;

/// What the server answers, one per connection, in order (the last one repeats).
#[derive(Clone)]
struct Reply {
    status: u16,
    body: Vec<u8>,
    /// Declared length; more than the body simulates a connection cut mid-download.
    content_length: usize,
}

impl Reply {
    fn ok(body: &[u8]) -> Reply {
        Reply {
            status: 200,
            body: body.to_vec(),
            content_length: body.len(),
        }
    }
}

/// Starts a TLS server; returns its port and the CA (self-signed cert) PEM.
fn serve(replies: Vec<Reply>) -> (u16, String) {
    let (port, pem, _) = serve_counted(replies);
    (port, pem)
}

/// [`serve`], also counting the connections it accepts.
fn serve_counted(replies: Vec<Reply>) -> (u16, String, Arc<std::sync::atomic::AtomicUsize>) {
    let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = count.clone();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).expect("cert");
    let pem = ck.cert.pem();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(ck.signing_key.serialize_der().into());
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(vec![ck.cert.der().clone()], key)
        .expect("server config");
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for (i, stream) in listener.incoming().enumerate() {
            let Ok(tcp) = stream else { continue };
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let reply = replies[i.min(replies.len() - 1)].clone();
            let Ok(conn) = rustls::ServerConnection::new(config.clone()) else {
                continue;
            };
            let mut tls = rustls::StreamOwned::new(conn, tcp);
            // Read the request head; a client that rejects our certificate fails here.
            let mut reader = BufReader::new(&mut tls);
            let mut line = String::new();
            loop {
                line.clear();
                match reader.read_line(&mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) if line == "\r\n" => break,
                    Ok(_) => {}
                }
            }
            let head = format!(
                "HTTP/1.1 {} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                reply.status, reply.content_length
            );
            let _ = tls.write_all(head.as_bytes());
            let _ = tls.write_all(&reply.body);
            let _ = tls.flush();
            tls.conn.send_close_notify();
            let _ = tls.flush();
        }
    });
    (port, pem, count)
}

const BUNDLE: &[u8] =
    b"##### static-manifests/kube-apiserver.yaml\napiVersion: v1\n\n##### tls/k8s/ca.crt\nCA\n";

fn sha(data: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(data))
}

/// A controller root fetching from `url`; `ca` is written into the root and used as the only CA.
fn root_for(url: &str, ca: Option<&str>, extra: &str) -> Root {
    let root = Root::new();
    let mut cfg = format!(
        "[node]\nrole = \"controller\"\n[bundle]\nsource = \"{url}\"\nsha256 = \"{}\"\nretries = 0\ntimeout_seconds = 5\n{extra}",
        sha(BUNDLE)
    );
    if let Some(ca) = ca {
        root.write("etc/nodeward/bundle-ca.pem", ca);
        cfg.push_str("ca_file = \"/etc/nodeward/bundle-ca.pem\"\n");
    }
    root.write("etc/nodeward/config.d/10.toml", &cfg);
    root
}

/// `apply` refuses the bundle, naming `needles`, and writes nothing. `code`: 1 when only a change
/// fixes it (a wrong digest, plain http), 7 when trying again later may (a server error, a cut
/// connection, a certificate the network presented).
fn refused(root: &Root, code: i32, needles: &[&str]) {
    let before = root.snapshot();
    let run = root.run(&["apply", "--only", "bundle"]);
    assert_eq!(run.code, code, "{}\n{}", run.stdout, run.stderr);
    for n in needles {
        assert!(run.stdout.contains(n), "missing {n:?} in:\n{}", run.stdout);
    }
    assert_eq!(before, root.snapshot(), "nothing may be written");
}

#[test]
fn a_private_ca_file_is_trusted_and_the_bundle_installs() {
    let (port, ca) = serve(vec![Reply::ok(BUNDLE)]);
    let root = root_for(&format!("https://localhost:{port}/assets"), Some(&ca), "");
    root.run(&["apply", "--only", "bundle"]).ok();
    let m = std::fs::read_to_string(root.path().join("etc/kubernetes/manifests/kube-apiserver.yaml"))
        .expect("installed");
    assert_eq!(m, "apiVersion: v1\n");
}

#[test]
fn an_untrusted_certificate_is_a_tls_error() {
    let (port, _ca) = serve(vec![Reply::ok(BUNDLE)]);
    let url = format!("https://localhost:{port}/assets");
    // No ca_file: the system's roots do not know the test's self-signed certificate.
    let root = root_for(&url, None, "");
    refused(&root, 7, &[&url, "certificate"]);
}

#[test]
fn a_checksum_mismatch_writes_nothing() {
    let (port, ca) = serve(vec![Reply::ok(b"##### tls/k8s/ca.crt\ntampered\n")]);
    let root = root_for(&format!("https://localhost:{port}/assets"), Some(&ca), "");
    refused(&root, 1, &["sha256 mismatch"]);
}

#[test]
fn a_truncated_download_is_refused() {
    let reply = Reply {
        status: 200,
        body: BUNDLE[..20].to_vec(),
        content_length: BUNDLE.len(),
    };
    let (port, ca) = serve(vec![reply]);
    let root = root_for(&format!("https://localhost:{port}/assets"), Some(&ca), "");
    refused(&root, 7, &["truncated"]);
}

#[test]
fn server_errors_are_retried_with_backoff() {
    let busy = Reply {
        status: 503,
        body: Vec::new(),
        content_length: 0,
    };
    let (port, ca) = serve(vec![busy.clone(), busy, Reply::ok(BUNDLE)]);
    let root = root_for(&format!("https://localhost:{port}/assets"), Some(&ca), "");
    root.write("etc/nodeward/config.d/20.toml", "[bundle]\nretries = 3\n");
    let run = root.run(&["apply", "--only", "bundle", "-v"]).ok();
    assert!(run.stderr.contains("retrying"), "{}", run.stderr);
    assert!(root.path().join("etc/kubernetes/pki/ca.crt").exists());

    let (port, ca) = serve(vec![Reply {
        status: 404,
        body: Vec::new(),
        content_length: 0,
    }]);
    let root = root_for(&format!("https://localhost:{port}/assets"), Some(&ca), "");
    refused(&root, 7, &["HTTP status 404"]);
}

#[test]
fn plain_http_needs_an_explicit_opt_in_and_urls_need_a_checksum() {
    let root = root_for("http://127.0.0.1:9/assets", None, "");
    refused(&root, 1, &["plain http is refused"]);
    let root = Root::new();
    root.write(
        "etc/nodeward/config.d/10.toml",
        "[bundle]\nsource = \"https://example.invalid/assets\"\n",
    );
    let run = root.run(&["plan"]);
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("10.toml:2: bundle.source: a URL needs bundle.sha256"),
        "{}",
        run.stderr
    );
}

/// A pinned bundle already fetched is not downloaded again at every converge (the daemon
/// converges every minute); a new pin fetches again.
#[test]
fn an_unchanged_pinned_bundle_is_downloaded_once() {
    let (port, ca, connections) = serve_counted(vec![Reply::ok(BUNDLE)]);
    let root = root_for(&format!("https://localhost:{port}/assets"), Some(&ca), "");
    root.run(&["apply", "--only", "bundle"]).ok();
    root.run(&["apply", "--only", "bundle"]).ok();
    root.run(&["plan", "--only", "bundle"]).ok();
    assert_eq!(connections.load(std::sync::atomic::Ordering::SeqCst), 1);
    let kept = root.path().join("var/lib/nodeward/bundle/download");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&kept).expect("kept").permissions());
    assert_eq!(mode & 0o777, 0o600, "the kept bundle holds secrets");
    // The kept copy is checked against the pin, not trusted: corrupted, it is fetched again.
    std::fs::write(&kept, b"tampered").expect("write");
    root.run(&["apply", "--only", "bundle"]).ok();
    assert_eq!(connections.load(std::sync::atomic::Ordering::SeqCst), 2);
}
