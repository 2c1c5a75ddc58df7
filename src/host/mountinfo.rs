//! Mount propagation: `/proc/self/mountinfo` parsed (proc(5)), and a mount made shared.
//!
//! The kubelet refuses to run when `/` is not a shared mount ("/ is not a shared mount"): the
//! volumes it mounts for pods must propagate into the containers. systemd makes `/` shared at
//! boot; LXC containers and hand-built namespaces often leave it private.

use std::fmt;
use std::path::{Path, PathBuf};

use nix::mount::{MsFlags, mount};

/// How a mount propagates (the optional fields of its mountinfo line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Propagation {
    /// `shared:N` (possibly also a slave of another group).
    Shared,
    /// `master:N` only: receives events, does not send them.
    Slave,
    /// No optional field.
    Private,
    /// `unbindable`.
    Unbindable,
}

impl fmt::Display for Propagation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Propagation::Shared => "shared",
            Propagation::Slave => "slave",
            Propagation::Private => "private",
            Propagation::Unbindable => "unbindable",
        })
    }
}

/// One line of mountinfo, the parts nodeward uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mount {
    pub(crate) mount_point: PathBuf,
    pub(crate) propagation: Propagation,
    pub(crate) fs_type: String,
    /// The mount's source (`/dev/vda1`, `/dev/loop0`, `tmpfs`).
    pub source: String,
}

/// Undoes mountinfo's octal escapes (`\040` for a space, `\011`, `\012`, `\134`).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|b| (b'0'..=b'7').contains(b)))
            .and_then(|d| u8::from_str_radix(std::str::from_utf8(d).ok()?, 8).ok());
        if let Some(b) = octal {
            out.push(b);
            i += 4;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses one mountinfo line; `None` for a line that is not one.
pub(crate) fn parse_line(line: &str) -> Option<Mount> {
    let fields: Vec<&str> = line.split(' ').collect();
    let sep = fields.iter().position(|f| *f == "-")?;
    if sep < 6 || fields.len() < sep + 3 {
        return None;
    }
    let optional = &fields[6..sep];
    let propagation = if optional.iter().any(|f| f.starts_with("shared:")) {
        Propagation::Shared
    } else if optional.iter().any(|f| f.starts_with("master:")) {
        Propagation::Slave
    } else if optional.contains(&"unbindable") {
        Propagation::Unbindable
    } else {
        Propagation::Private
    };
    Some(Mount {
        mount_point: PathBuf::from(unescape(fields[4])),
        propagation,
        fs_type: fields[sep + 1].to_owned(),
        source: unescape(fields[sep + 2]),
    })
}

/// Every mount, in mountinfo's order (later ones sit on top of earlier ones at the same point).
pub(crate) fn parse(text: &str) -> Vec<Mount> {
    text.lines().filter_map(parse_line).collect()
}

/// The mount visible at exactly `path` (the last one mounted there), if `path` is a mount point.
pub(crate) fn at<'a>(mounts: &'a [Mount], path: &Path) -> Option<&'a Mount> {
    mounts.iter().rev().find(|m| m.mount_point == path)
}

/// `mount --make-rshared PATH`.
pub(crate) fn make_rshared(path: &Path) -> nix::Result<()> {
    mount::<str, Path, str, str>(None, path, None, MsFlags::MS_SHARED | MsFlags::MS_REC, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
22 27 0:21 / /proc rw,relatime shared:5 - proc proc rw
61 27 0:50 / /var/lib/kubelet rw shared:30 master:2 - tmpfs tmpfs rw
62 27 0:51 / /mnt/slave rw master:7 - tmpfs tmpfs rw
63 27 0:52 / /mnt/no\\040bind rw unbindable - tmpfs tmpfs rw
64 27 0:53 / / rw shared:1 - overlay overlay rw
";

    #[test]
    fn propagation_of_each_kind() {
        let m = parse(SAMPLE);
        assert_eq!(m.len(), 6);
        assert_eq!(m[0].propagation, Propagation::Private);
        assert_eq!(m[1].propagation, Propagation::Shared);
        assert_eq!(
            m[2].propagation,
            Propagation::Shared,
            "shared and a slave: still sends events"
        );
        assert_eq!(m[3].propagation, Propagation::Slave);
        assert_eq!(m[4].propagation, Propagation::Unbindable);
        assert_eq!(
            m[4].mount_point,
            PathBuf::from("/mnt/no bind"),
            "octal escapes undone"
        );
        assert_eq!(m[1].fs_type, "proc");
        assert_eq!(m[0].source, "/dev/vda");
    }

    #[test]
    fn the_topmost_mount_at_a_point_counts() {
        let m = parse(SAMPLE);
        let root = at(&m, Path::new("/")).expect("root");
        assert_eq!(root.propagation, Propagation::Shared);
        assert_eq!(root.fs_type, "overlay");
        assert!(at(&m, Path::new("/var")).is_none(), "not a mount point");
    }

    #[test]
    fn malformed_lines_are_skipped() {
        assert_eq!(parse_line("garbage"), None);
        assert_eq!(parse_line("1 2 3 4 - x"), None);
        assert_eq!(parse("\n\n"), vec![]);
    }
}
