//! Everything that touches the machine. Code outside this module decides; code here does.

pub mod accounts;
pub mod dbus;
pub mod fs;
pub mod kmod;
pub mod lock;
pub mod pinned;
pub mod procsys;
pub mod selinux;

use std::io;
use std::path::PathBuf;

/// A host operation failed; always names the path and what was being done.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("{}: {op}: {source}", path.display())]
    Io {
        path: PathBuf,
        op: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("{}: exists and is a {found}, not a directory", path.display())]
    NotADirectory { path: PathBuf, found: &'static str },
    #[error("{}: is a {found}, not a regular file", path.display())]
    NotAFile { path: PathBuf, found: &'static str },
    #[error("{key}: {hint}: {source}")]
    KernelValue {
        key: String,
        hint: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("{key}: wrote {wrote:?} but the kernel kept {kept:?}")]
    KernelKept {
        key: String,
        wrote: String,
        kept: String,
    },
    #[error("D-Bus: {message}")]
    DBus { message: String },
    #[error("bundle install: {message}")]
    Bundle { message: String },
    /// The host changed under a planned change in a way that makes it unsafe (a symlink appeared).
    #[error("{message}")]
    Changed { message: String },
    #[error("a concurrent change panicked")]
    Panicked,
    #[error("kubelet: {message}")]
    Kubelet { message: String },
    #[error("module {module}: {message}")]
    Module { module: String, message: String },
    #[error("unknown {kind} {name:?}: not in {files}")]
    UnknownAccount {
        kind: &'static str,
        name: String,
        files: String,
    },
}

impl HostError {
    /// Wraps an I/O error with the path and the operation.
    pub fn io(path: impl Into<PathBuf>, op: &'static str) -> impl FnOnce(io::Error) -> HostError {
        let path = path.into();
        move |source| HostError::Io { path, op, source }
    }
}
