//! Kernel values exposed as files: `/proc/sys` and module parameters in `/sys/module`.
//! Files are opened without `O_CREAT`; failures are classified, because the cause decides the
//! advice (load a module, run in the initial namespace, remount /proc read-write).

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Why a kernel value could not be read or written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
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
    pub fn classify(e: &io::Error) -> Failure {
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
    pub fn hint(self) -> &'static str {
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
pub fn read(path: &Path) -> io::Result<String> {
    let raw = std::fs::read_to_string(path)?;
    Ok(raw.trim_end_matches('\n').to_owned())
}

/// Writes a value the way `sysctl -w` does: one write of the value and a newline.
pub fn write(path: &Path, value: &str) -> io::Result<()> {
    let mut f = OpenOptions::new().write(true).open(path)?;
    f.write_all(format!("{value}\n").as_bytes())
}

/// Whether the file's mode lets anyone write it (0444 keys are read-only for everyone, root
/// included: `nf_conntrack_max` in a non-initial network namespace since Linux 5.12.2).
pub fn mode_writable(path: &Path) -> io::Result<bool> {
    Ok(std::fs::metadata(path)?.permissions().mode() & 0o222 != 0)
}
