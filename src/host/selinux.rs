//! SELinux file labels: whether the kernel enforces them, and the `security.selinux` xattr.

use std::io;
use std::path::Path;

use crate::root::HostRoot;
use crate::types::AbsPath;

/// The extended attribute holding a file's SELinux context.
pub(crate) const XATTR: &str = "security.selinux";

/// Whether SELinux is enabled for the host behind `root` (selinuxfs mounted with `enforce`).
pub(crate) fn kernel_enabled(root: &HostRoot) -> bool {
    let probe: Result<AbsPath, _> = "/sys/fs/selinux/enforce".parse();
    probe
        .ok()
        .and_then(|p| root.resolve(&p).ok())
        .is_some_and(|p| p.exists())
}

/// The context on `path` itself (symlinks are not followed), without the trailing NUL the kernel
/// stores; `None` when the file has none.
pub(crate) fn get_label(path: &Path) -> io::Result<Option<String>> {
    let raw = xattr::get(path, XATTR)?;
    Ok(raw.map(|mut v| {
        while v.last() == Some(&0) {
            v.pop();
        }
        String::from_utf8_lossy(&v).into_owned()
    }))
}

/// Sets the context on an open file (used by the atomic writer before the file is visible).
pub(crate) fn set_label_fd(file: &std::fs::File, context: &str) -> io::Result<()> {
    use xattr::FileExt;
    let mut value = context.as_bytes().to_vec();
    value.push(0);
    file.set_xattr(XATTR, &value)
}
