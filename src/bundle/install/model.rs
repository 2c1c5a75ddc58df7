//! What an install is made of: the wanted files and directories, the plan, the state files'
//! contents (manifest, staging record, journal), and how an install fails.

use serde::{Deserialize, Serialize};

use crate::host::HostError;
use crate::host::fs::Meta;
use crate::plan::FileOp;
use crate::types::AbsPath;

/// What the last complete install put where (host paths), so files that leave the bundle can be
/// removed. Contents are compared with the files themselves, not with recorded hashes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub(crate) files: std::collections::BTreeSet<String>,
}

/// One operation of the commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub(super) enum JournalOp {
    Put {
        dest: String,
    },
    /// A directory the install creates whole, renamed into place from its stage directory.
    #[serde(rename = "put-dir")]
    PutDir {
        dest: String,
    },
    Delete {
        dest: String,
    },
}

/// The staging record, written before anything is touched: what a roll-back must undo.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(from = "StagingOnDisk")]
pub(super) struct Staging {
    /// Destinations whose stage files may exist.
    pub(super) dests: Vec<String>,
    /// Directories created whole, whose stage directories may exist.
    pub(super) fresh: Vec<String>,
    /// Directories this install creates (parents first): removed, when still empty, on roll-back.
    pub(super) created: Vec<String>,
    /// Directories whose mode or owner this install changes, with what they had.
    pub(super) changed: Vec<DirWas>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct DirWas {
    pub(super) path: String,
    pub(super) mode: u32,
    pub(super) uid: u32,
    pub(super) gid: u32,
}

/// Earlier versions wrote the destinations alone, as a list.
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum StagingOnDisk {
    Dests(Vec<String>),
    Full {
        dests: Vec<String>,
        #[serde(default)]
        fresh: Vec<String>,
        #[serde(default)]
        created: Vec<String>,
        #[serde(default)]
        changed: Vec<DirWas>,
    },
}

impl From<StagingOnDisk> for Staging {
    fn from(d: StagingOnDisk) -> Staging {
        match d {
            StagingOnDisk::Dests(dests) => Staging {
                dests,
                ..Staging::default()
            },
            StagingOnDisk::Full {
                dests,
                fresh,
                created,
                changed,
            } => Staging {
                dests,
                fresh,
                created,
                changed,
            },
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Journal {
    pub(super) ops: Vec<JournalOp>,
    pub(super) manifest: Manifest,
}

/// A directory the install needs, with its mode and owner (enforced for directories at or below a
/// rule's destination; parents above are only created).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirWanted {
    pub(crate) path: AbsPath,
    pub(crate) meta: Option<Meta>,
}

/// A file as it must be after the install.
#[derive(Debug, Clone)]
pub struct FileWanted {
    pub(crate) dest: AbsPath,
    pub(crate) content: crate::bundle::format::Content,
    pub(crate) meta: Meta,
}

/// The computed install: only what differs.
#[derive(Debug, Clone)]
pub struct InstallPlan {
    pub(crate) dirs: Vec<DirWanted>,
    /// Files to write, with whether each is new.
    pub(crate) puts: Vec<(FileWanted, FileOp)>,
    /// Host paths to delete (they left the bundle).
    pub(crate) deletes: Vec<AbsPath>,
    pub(crate) manifest: Manifest,
    /// True when nothing at all needs doing (no dirs to fix either).
    pub(crate) noop: bool,
}

/// Why an install cannot go ahead.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error(transparent)]
    Host(#[from] HostError),
    #[error("{dest}: destination is a {found}, not a regular file (refusing to write through it)")]
    NotAFile { dest: String, found: &'static str },
    #[error("{dir}: destination directory is a symlink to {target} (refusing to follow it)")]
    SymlinkDir { dir: String, target: String },
    #[error(
        "{dest}: cannot be installed ({reason}); the rest of the install is complete and the journal closed"
    )]
    Conflict { dest: String, reason: String },
    #[error("{path}: unreadable journal or manifest: {message}")]
    State { path: String, message: String },
}
