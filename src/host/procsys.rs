//! Kernel values exposed as files: `/proc/sys` and module parameters in `/sys/module`.
//! Files are opened without `O_CREAT`; failures are classified, because the cause decides the
//! advice (load a module, run in the initial namespace, remount /proc read-write).

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Why a kernel value could not be read or written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// ENOENT: the key does not exist (its module is not loaded, or the kernel lacks it).
    Absent,
    /// EACCES/EPERM: refused, typically a key that is read-only in a non-initial namespace.
    Denied,
    /// EROFS: /proc/sys is mounted read-only (containers).
    ReadOnlyFs,
    /// EOPNOTSUPP: the kernel does not support this write here (nf_conntrack hashsize outside the
    /// initial network namespace).
    Unsupported,
    /// EINVAL: the kernel rejected the value.
    Invalid,
    Other,
}

impl Failure {
    pub(crate) fn classify(e: &io::Error) -> Failure {
        match e.raw_os_error() {
            Some(libc::ENOENT) => Failure::Absent,
            Some(libc::EACCES) | Some(libc::EPERM) => Failure::Denied,
            Some(libc::EROFS) => Failure::ReadOnlyFs,
            Some(libc::EOPNOTSUPP) => Failure::Unsupported,
            Some(libc::EINVAL) => Failure::Invalid,
            _ => Failure::Other,
        }
    }

    /// A short explanation for a person.
    pub(crate) fn hint(self) -> &'static str {
        match self {
            Failure::Absent => "not present (module not loaded, or not in this kernel)",
            Failure::Denied => "permission denied (read-only in this namespace?)",
            Failure::ReadOnlyFs => "/proc/sys is mounted read-only (container?)",
            Failure::Unsupported => "not supported here (non-initial network namespace?)",
            Failure::Invalid => "the kernel rejected the value",
            Failure::Other => "failed",
        }
    }
}

/// Reads a value, trailing newline removed.
pub(crate) fn read(path: &Path) -> io::Result<String> {
    let raw = super::read::read_path_text(path, super::read::Kind::Kernel)
        .map_err(super::read::ReadError::into_io)?;
    Ok(raw.trim_end_matches('\n').to_owned())
}

/// Writes a value the way `sysctl -w` does: one write of the value and a newline.
pub(crate) fn write(path: &Path, value: &str) -> io::Result<()> {
    let mut f = OpenOptions::new().write(true).open(path)?;
    f.write_all(format!("{value}\n").as_bytes())
}

/// Whether the file's mode lets anyone write it (0444 keys are read-only for everyone, root
/// included: `nf_conntrack_max` in a non-initial network namespace since Linux 5.12.2).
pub(crate) fn mode_writable(path: &Path) -> io::Result<bool> {
    Ok(std::fs::metadata(path)?.permissions().mode() & 0o222 != 0)
}

/// The existing paths below `base` that a glob key's segments name (`net/ipv4/conf/*/rp_filter`),
/// as segment lists, sorted. A segment without glob characters is taken literally; one with them
/// is matched against the directory listing, as systemd-sysctl expands sysctl.d globs. Entries
/// that vanish while listing (an interface going away) are simply not matched.
pub(crate) fn expand_glob(base: &Path, segments: &[String]) -> io::Result<Vec<Vec<String>>> {
    let mut found = vec![Vec::new()];
    for (i, seg) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        let mut next = Vec::new();
        for prefix in found {
            let dir: std::path::PathBuf = std::iter::once(base.as_os_str())
                .chain(prefix.iter().map(|s: &String| std::ffi::OsStr::new(s)))
                .collect();
            let names: Vec<String> = if crate::glob::is_glob(seg) {
                match std::fs::read_dir(&dir) {
                    Ok(entries) => entries
                        .flatten()
                        .filter_map(|e| e.file_name().into_string().ok())
                        .filter(|n| crate::glob::glob_match(seg, n))
                        .collect(),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
                    Err(e) => return Err(e),
                }
            } else {
                vec![seg.clone()]
            };
            for name in names {
                let path = dir.join(&name);
                // Inner segments must be directories, the last one a value file.
                let keep = match std::fs::symlink_metadata(&path) {
                    Ok(m) => m.is_dir() != last,
                    Err(_) => false,
                };
                if keep {
                    let mut p = prefix.clone();
                    p.push(name);
                    next.push(p);
                }
            }
        }
        found = next;
    }
    found.sort();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_expand_against_the_tree() {
        let t = tempfile::tempdir().expect("tempdir");
        for iface in ["all", "default", "eth0", "lxc12ab", "eth0.100"] {
            let d = t.path().join("net/ipv4/conf").join(iface);
            std::fs::create_dir_all(&d).expect("mkdir");
            std::fs::write(d.join("rp_filter"), "1\n").expect("write");
        }
        std::fs::write(t.path().join("net/ipv4/conf/stray"), "").expect("write");
        let segs = |s: &str| s.split('/').map(str::to_owned).collect::<Vec<_>>();
        let got = expand_glob(t.path(), &segs("net/ipv4/conf/*/rp_filter")).expect("expand");
        let names: Vec<&str> = got.iter().map(|s| s[3].as_str()).collect();
        assert_eq!(names, ["all", "default", "eth0", "eth0.100", "lxc12ab"]);
        let lxc = expand_glob(t.path(), &segs("net/ipv4/conf/lxc*/rp_filter")).expect("expand");
        assert_eq!(lxc.len(), 1);
        assert!(
            expand_glob(t.path(), &segs("net/ipv6/conf/*/x"))
                .expect("expand")
                .is_empty()
        );
    }
}
