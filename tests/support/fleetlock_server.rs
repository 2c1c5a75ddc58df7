//! FleetLock servers for the tests and the VM, std only, written from the protocol
//! (coreos/zincati `docs/development/fleetlock/protocol.md`) and from poseidon/fleetlock's
//! behaviour, never from nodeward's client:
//!
//! - `strict`: a counting semaphore per group with `--slots N`; locks owned by id and recursive
//!   (a second lock by the holder succeeds, a release by a non-holder is a no-op 200:
//!   `UnlockIfHeld`); POST only, header `fleet-lock-protocol: true` required, body
//!   `{"client_params": {"id", "group"}}` with a non-empty id and a group matching
//!   `^[a-zA-Z0-9.-]+$`; errors as `{"kind", "value"}` JSON with 4xx/5xx.
//! - `poseidon`: poseidon/fleetlock's model: one slot per group (a Lease named `fleetlock-GROUP`);
//!   on lock it finds the Kubernetes node whose machine id maps to the client id
//!   (`--nodes FILE`: lines `NODE MACHINE_ID`, the id being systemd's app-specific id for
//!   Zincati's application id) and drains it; with no matching node it answers 500 and locks
//!   nothing; on release by the holder it uncordons the node; a release by anyone else is 200.
//!
//! Usage: fleetlock-server --listen ADDR --mode strict|poseidon [--slots N] [--nodes FILE]
//!        [--log FILE] [--state FILE] [--hold ID@GROUP]…
//! `--hold` pre-fills a slot; `--state` keeps the holders across restarts (a VM's reboot). The log gets one line per request:
//! `MS op id group status holders-after`, and `drain NODE` / `uncordon NODE` lines (poseidon).
//! A file `ADDR.release` (next to `--log`) holding `ID@GROUP` lines is read before each request:
//! each named slot is freed (a test frees a held slot from outside).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const ZINCATI_APP_ID: &str = "de35106b6ec24688b63afddaa156679b";

struct Server {
    poseidon: bool,
    slots: usize,
    /// group -> holders
    holders: BTreeMap<String, BTreeSet<String>>,
    /// client id (Zincati's app-specific id) -> node name
    nodes: BTreeMap<String, String>,
    log: Option<PathBuf>,
    release: Option<PathBuf>,
    /// Where the holders are kept across restarts (`--state`: lines `ID@GROUP`).
    state: Option<PathBuf>,
}

fn now_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis())
}

impl Server {
    fn log(&self, line: &str) {
        if let Some(p) = &self.log {
            if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(p) {
                let _ = f.write_all(format!("{} {line}\n", now_ms()).as_bytes());
            }
        }
    }

    fn save(&self) {
        let Some(p) = &self.state else { return };
        let text: String = self
            .holders
            .iter()
            .flat_map(|(g, ids)| ids.iter().map(move |id| format!("{id}@{g}\n")))
            .collect();
        let tmp = p.with_extension("tmp");
        let _ = std::fs::write(&tmp, text);
        let _ = std::fs::rename(&tmp, p);
    }

    fn take_releases(&mut self) {
        let Some(p) = &self.release else { return };
        let Ok(text) = std::fs::read_to_string(p) else { return };
        let _ = std::fs::remove_file(p);
        for line in text.lines() {
            if let Some((id, group)) = line.trim().split_once('@') {
                if let Some(h) = self.holders.get_mut(group) {
                    h.remove(id);
                }
                self.log(&format!("freed {id} {group}"));
            }
        }
    }

    fn handle(&mut self, path: &str, method: &str, headers: &[(String, String)], body: &str) -> (u16, String) {
        self.take_releases();
        let op = match path {
            "/v1/pre-reboot" => "lock",
            "/v1/steady-state" => "unlock",
            _ => return (404, error("not_found", "no such endpoint")),
        };
        if method != "POST" {
            return (405, error("method_not_allowed", "POST only"));
        }
        let has_header = headers
            .iter()
            .any(|(k, v)| k.eq_ignore_ascii_case("fleet-lock-protocol") && v == "true");
        if !has_header {
            return (400, error("missing_header", "fleet-lock-protocol: true is required"));
        }
        let (Some(id), Some(group)) = (json_str(body, "id"), json_str(body, "group")) else {
            return (400, error("bad_body", "client_params.id and client_params.group are required"));
        };
        if !body.contains("\"client_params\"") || id.is_empty() {
            return (400, error("bad_body", "client_params with a non-empty id is required"));
        }
        if group.is_empty() || !group.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-') {
            return (400, error("bad_group", "group must match ^[a-zA-Z0-9.-]+$"));
        }
        let answer = if op == "lock" { self.lock(&id, &group) } else { self.unlock(&id, &group) };
        self.save();
        let n = self.holders.get(&group).map_or(0, BTreeSet::len);
        self.log(&format!("{op} {id} {group} {} {n}", answer.0));
        answer
    }

    fn lock(&mut self, id: &str, group: &str) -> (u16, String) {
        let slots = if self.poseidon { 1 } else { self.slots };
        let holders = self.holders.entry(group.to_owned()).or_default();
        if holders.contains(id) {
            return (200, "retained".into());
        }
        if holders.len() >= slots {
            let held_by = holders.iter().cloned().collect::<Vec<_>>().join(",");
            return if self.poseidon {
                (409, error("locked", &format!("reboot lease unavailable, held by {held_by}")))
            } else {
                (409, error("failed_lock_semaphore_full", "semaphore currently full, all slots are locked already"))
            };
        }
        if self.poseidon {
            let Some(node) = self.nodes.get(id).cloned() else {
                return (500, error("internal", &format!("no Kubernetes node matches id {id}")));
            };
            self.holders.entry(group.to_owned()).or_default().insert(id.to_owned());
            self.log(&format!("drain {node}"));
            return (200, "obtained reboot lease".into());
        }
        holders.insert(id.to_owned());
        (200, "obtained".into())
    }

    fn unlock(&mut self, id: &str, group: &str) -> (u16, String) {
        let removed = self.holders.get_mut(group).is_some_and(|h| h.remove(id));
        if removed && self.poseidon {
            if let Some(node) = self.nodes.get(id).cloned() {
                self.log(&format!("uncordon {node}"));
            }
        }
        (200, "steady-state confirmed".into())
    }
}

fn error(kind: &str, value: &str) -> String {
    format!("{{\"kind\":\"{kind}\",\"value\":\"{value}\"}}")
}

/// The string value of `"key": "…"` in a small JSON text (ids and groups carry no escapes).
fn json_str(body: &str, key: &str) -> Option<String> {
    let at = body.find(&format!("\"{key}\""))?;
    let rest = &body[at + key.len() + 2..];
    let rest = rest.trim_start().strip_prefix(':')?.trim_start().strip_prefix('"')?;
    Some(rest[..rest.find('"')?].to_owned())
}

// --- systemd's app-specific id: HMAC-SHA256(machine id, app id), first 16 bytes, UUID v4 bits ---

fn sha256(data: &[u8]) -> [u8; 32] {
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
    ];
    let mut h: [u32; 8] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
    ];
    let mut msg = data.to_vec();
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&((data.len() as u64) * 8).to_be_bytes());
    for chunk in msg.chunks(64) {
        let mut w = [0u32; 64];
        for i in 0..16 {
            w[i] = u32::from_be_bytes([chunk[4 * i], chunk[4 * i + 1], chunk[4 * i + 2], chunk[4 * i + 3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16].wrapping_add(s0).wrapping_add(w[i - 7]).wrapping_add(s1);
        }
        let mut v = h;
        for i in 0..64 {
            let s1 = v[4].rotate_right(6) ^ v[4].rotate_right(11) ^ v[4].rotate_right(25);
            let ch = (v[4] & v[5]) ^ (!v[4] & v[6]);
            let t1 = v[7].wrapping_add(s1).wrapping_add(ch).wrapping_add(K[i]).wrapping_add(w[i]);
            let s0 = v[0].rotate_right(2) ^ v[0].rotate_right(13) ^ v[0].rotate_right(22);
            let maj = (v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]);
            let t2 = s0.wrapping_add(maj);
            v = [t1.wrapping_add(t2), v[0], v[1], v[2], v[3].wrapping_add(t1), v[4], v[5], v[6]];
        }
        for i in 0..8 {
            h[i] = h[i].wrapping_add(v[i]);
        }
    }
    let mut out = [0u8; 32];
    for i in 0..8 {
        out[4 * i..4 * i + 4].copy_from_slice(&h[i].to_be_bytes());
    }
    out
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    (s.len() % 2 == 0).then_some(())?;
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

fn zincati_id(machine_id: &str) -> Option<String> {
    let key = unhex(machine_id.trim())?;
    let msg = unhex(ZINCATI_APP_ID)?;
    let mut block = [0u8; 64];
    block[..key.len()].copy_from_slice(&key);
    let inner: Vec<u8> = block.iter().map(|b| b ^ 0x36).chain(msg).collect();
    let inner = sha256(&inner);
    let outer: Vec<u8> = block.iter().map(|b| b ^ 0x5c).chain(inner).collect();
    let mut sum = sha256(&outer);
    sum[6] = (sum[6] & 0x0f) | 0x40;
    sum[8] = (sum[8] & 0x3f) | 0x80;
    Some(sum[..16].iter().map(|b| format!("{b:02x}")).collect())
}

// --- HTTP ---

fn serve(server: &mut Server, mut stream: TcpStream) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let (head, body) = loop {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let len = head
                .lines()
                .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("content-length")))
                .and_then(|(_, v)| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            while buf.len() < end + 4 + len.min(65536) {
                match stream.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            let body = String::from_utf8_lossy(&buf[end + 4..]).into_owned();
            break (head, body);
        }
        if buf.len() > 65536 {
            return;
        }
    };
    let mut lines = head.lines();
    let request = lines.next().unwrap_or_default();
    let mut parts = request.split(' ');
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let (status, text) = server.handle(path, method, &headers, &body);
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        _ => "Internal Server Error",
    };
    let _ = stream.write_all(
        format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
            text.len()
        )
        .as_bytes(),
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let listen = arg("--listen").unwrap_or_else(|| "127.0.0.1:0".into());
    let mode = arg("--mode").unwrap_or_else(|| "strict".into());
    let log = arg("--log").map(PathBuf::from);
    let mut server = Server {
        poseidon: mode == "poseidon",
        slots: arg("--slots").and_then(|s| s.parse().ok()).unwrap_or(1),
        holders: BTreeMap::new(),
        nodes: BTreeMap::new(),
        release: log.as_ref().map(|l| l.with_extension("release")),
        log,
        state: arg("--state").map(PathBuf::from),
    };
    if let Some(p) = &server.state {
        for line in std::fs::read_to_string(p).unwrap_or_default().lines() {
            if let Some((id, group)) = line.split_once('@') {
                server.holders.entry(group.to_owned()).or_default().insert(id.to_owned());
            }
        }
    }
    if let Some(file) = arg("--nodes") {
        for line in std::fs::read_to_string(file).unwrap_or_default().lines() {
            if let Some((node, machine)) = line.split_once(' ') {
                if let Some(id) = zincati_id(machine) {
                    server.nodes.insert(id, node.to_owned());
                }
            }
        }
    }
    for (i, a) in args.iter().enumerate() {
        if a == "--hold" {
            if let Some((id, group)) = args.get(i + 1).and_then(|v| v.split_once('@')) {
                server.holders.entry(group.to_owned()).or_default().insert(id.to_owned());
            }
        }
    }
    let listener = TcpListener::bind(&listen).expect("bind");
    // The address, for a test that asked for port 0.
    println!("{}", listener.local_addr().expect("addr"));
    let _ = std::io::stdout().flush();
    for stream in listener.incoming().flatten() {
        serve(&mut server, stream);
    }
}
