//! Who listens on the kubelet's ports, from `/proc/net/tcp{,6}` and the sockets' owners.

use std::collections::BTreeMap;
use std::path::Path;

use super::seen::{KUBELET_PORTS, Listener, Seen, Unseen};
use crate::host::read::{self, Kind};
use std::io::Read;

/// Listening TCP sockets on the kubelet's ports, with their owners' names.
pub(super) fn listeners(proc: &Path) -> Seen<Vec<Listener>> {
    let mut inodes: BTreeMap<u64, u16> = BTreeMap::new();
    for table in ["net/tcp", "net/tcp6"] {
        let text = read_proc(&proc.join(table)).map_err(|e| Unseen(format!("/proc/{table}: {e}")))?;
        for (port, inode) in parse_listening(&text) {
            if KUBELET_PORTS.contains(&port) {
                inodes.insert(inode, port);
            }
        }
    }
    let mut owners: BTreeMap<u64, String> = BTreeMap::new();
    if !inodes.is_empty() {
        for pid in std::fs::read_dir(proc).into_iter().flatten().flatten() {
            let dir = pid.path();
            if !pid
                .file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
            {
                continue;
            }
            for fd in std::fs::read_dir(dir.join("fd")).into_iter().flatten().flatten() {
                let Ok(link) = std::fs::read_link(fd.path()) else {
                    continue;
                };
                let link = link.to_string_lossy();
                if let Some(inode) = link
                    .strip_prefix("socket:[")
                    .and_then(|s| s.strip_suffix(']'))
                    .and_then(|s| s.parse().ok())
                    && inodes.contains_key(&inode)
                {
                    let comm = read::read_path_text(&dir.join("comm"), Kind::Kernel).unwrap_or_default();
                    owners.insert(inode, comm.trim().to_owned());
                }
            }
        }
    }
    let mut out: Vec<Listener> = inodes
        .iter()
        .map(|(inode, port)| Listener {
            port: *port,
            owner: owners.get(inode).cloned(),
        })
        .collect();
    out.sort_by_key(|l| l.port);
    out.dedup();
    Ok(out)
}

/// Reads a `/proc` file in large chunks. Such files report size 0, so `read_to_string` starts
/// with 32-byte probes, and each read of `/proc/net/tcp` walks the socket table again (about 2 ms
/// a read on a small host).
fn read_proc(path: &Path) -> std::io::Result<String> {
    let mut buf = Vec::with_capacity(256 * 1024);
    read::open_path(path, Kind::Kernel)
        .map_err(read::ReadError::into_io)?
        .take(Kind::Kernel.limit() * 16)
        .read_to_end(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// `(port, socket inode)` of each LISTEN line (state 0A) of `/proc/net/tcp{,6}`.
pub(crate) fn parse_listening(text: &str) -> Vec<(u16, u64)> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 10 || f[3] != "0A" {
                return None;
            }
            let port = u16::from_str_radix(f[1].rsplit(':').next()?, 16).ok()?;
            Some((port, f[9].parse().ok()?))
        })
        .collect()
}
