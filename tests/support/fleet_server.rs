//! The shared servers of a simulated fleet (std only): a registry stand-in that the stand-in
//! engine pulls images from (`GET /pull/IMAGE`) and a bundle server (`GET /bundle`), one thread
//! per connection. While the file `down` exists in `--dir`, every request is answered 503 (an
//! outage); each request is logged to `--dir/requests.log` as `MS KIND PEER STATUS`.
//!
//! Usage: fleet-server --listen ADDR --dir DIR   (serves DIR/bundle; prints its address)

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn now_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis())
}

fn serve(dir: &Path, log: &Mutex<std::fs::File>, mut stream: TcpStream) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let peer = stream.peer_addr().map(|a| a.ip().to_string()).unwrap_or_default();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 2048];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 16384 {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    let path = head.split(' ').nth(1).unwrap_or("").to_owned();
    let kind = if path.starts_with("/pull/") { "pull" } else if path == "/bundle" { "bundle" } else { "other" };
    let (status, body) = if dir.join("down").exists() {
        (503, b"outage\n".to_vec())
    } else {
        match kind {
            "pull" => (200, b"pulled\n".to_vec()),
            "bundle" => match std::fs::read(dir.join("bundle")) {
                Ok(b) => (200, b),
                Err(_) => (404, b"no bundle\n".to_vec()),
            },
            _ => (404, b"not found\n".to_vec()),
        }
    };
    if let Ok(mut f) = log.lock() {
        let _ = f.write_all(format!("{} {kind} {peer} {status}\n", now_ms()).as_bytes());
    }
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        _ => "Service Unavailable",
    };
    let _ = stream.write_all(
        format!("HTTP/1.1 {status} {reason}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len()).as_bytes(),
    );
    let _ = stream.write_all(&body);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let dir = PathBuf::from(arg("--dir").expect("--dir"));
    let listener = TcpListener::bind(arg("--listen").unwrap_or_else(|| "127.0.0.1:0".into())).expect("bind");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("requests.log"))
        .expect("log");
    let log = Arc::new(Mutex::new(log));
    println!("{}", listener.local_addr().expect("addr"));
    let _ = std::io::stdout().flush();
    for stream in listener.incoming().flatten() {
        let (dir, log) = (dir.clone(), log.clone());
        std::thread::spawn(move || serve(&dir, &log, stream));
    }
}
