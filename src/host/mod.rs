//! The host's primitives: files and their metadata (by descriptor), `/proc/sys`, kernel modules,
//! accounts, SELinux labels, locks, D-Bus. Steps decide what to change; the effects they own
//! carry the change out through these.

pub(crate) mod accounts;
pub(crate) mod cert;
pub(crate) mod container;
pub(crate) mod dbus;
pub mod fs;
pub(crate) mod http;
pub(crate) mod journal_stream;
pub mod kmod;
pub(crate) mod kubeconfig;
pub mod lock;
pub(crate) mod mountinfo;
pub(crate) mod pidfd;
pub(crate) mod pinned;
pub(crate) mod processes;
pub(crate) mod procsys;
pub(crate) mod read;
pub(crate) mod selinux;
pub(crate) mod state;

use std::io;
use std::path::PathBuf;

use crate::root::RootError;

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
    /// A built-in or configured value that does not parse.
    #[error("{value}: {what}: {source}")]
    Invalid {
        value: String,
        what: &'static str,
        #[source]
        source: crate::types::Invalid,
    },
    /// A failure about `path` while doing `op` (the owner of a directory, say).
    #[error("{}: {op}: {source}", path.display())]
    Context {
        path: PathBuf,
        op: &'static str,
        #[source]
        source: Box<HostError>,
    },
    #[error("{}: resolve: {source}", path.display())]
    Resolve {
        path: PathBuf,
        #[source]
        source: RootError,
    },
    /// The host changed under a planned change in a way that makes it unsafe (a symlink appeared).
    #[error("{message}")]
    Changed { message: String },
    /// A worker thread of a concurrent host operation panicked (a bug, reported as a failure).
    #[error("a concurrent change panicked")]
    Panicked,
    /// A file could not be read (it names the path and the cause, once).
    #[error(transparent)]
    Read(#[from] read::ReadError),
    #[error("unknown {kind} {name:?}: not in {files}")]
    UnknownAccount {
        kind: &'static str,
        name: String,
        files: String,
    },
}

impl HostError {
    /// Wraps an I/O error with the path and the operation.
    pub(crate) fn io(path: impl Into<PathBuf>, op: &'static str) -> impl FnOnce(io::Error) -> HostError {
        let path = path.into();
        move |source| HostError::Io { path, op, source }
    }

    /// Wraps a value that does not parse (`what`: "parse path", "parse key").
    pub(crate) fn invalid(
        value: impl Into<String>,
        what: &'static str,
    ) -> impl FnOnce(crate::types::Invalid) -> HostError {
        let value = value.into();
        move |source| HostError::Invalid { value, what, source }
    }

    /// Wraps a failure to resolve a host path below the root.
    pub(crate) fn resolve(path: impl Into<PathBuf>) -> impl FnOnce(RootError) -> HostError {
        let path = path.into();
        move |source| HostError::Resolve { path, source }
    }
}
