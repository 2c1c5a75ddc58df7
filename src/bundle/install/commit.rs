//! The commit: each journal operation carried out (idempotently, so a crash repeats it safely),
//! and the roll-forward that finishes an install after its commit point.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::model::{DirWanted, InstallError, Journal, JournalOp};
use super::state::{Resolver, resolve, resolve_dir, stage_path, state_dir, sync_filesystems, write_state};
use crate::failpoint;
use crate::host::HostError;
use crate::host::fs::{self as hostfs, Meta};
use crate::host::pinned;
use crate::host::state::StateFile;
use crate::root::HostRoot;
use crate::types::AbsPath;

pub(super) fn roll_forward(root: &HostRoot, journal: &Journal) -> Result<(), InstallError> {
    let mut resolver = Resolver::default();
    let mut targets = Vec::with_capacity(journal.ops.len());
    for op in &journal.ops {
        let (JournalOp::Put { dest } | JournalOp::PutDir { dest } | JournalOp::Delete { dest }) = op;
        let Ok(p) = dest.parse::<AbsPath>() else { continue };
        let kind = match op {
            JournalOp::Put { .. } => Commit::Put,
            JournalOp::PutDir { .. } => Commit::PutDir,
            JournalOp::Delete { .. } => Commit::Delete,
        };
        targets.push((kind, resolver.file(root, &p)?, dest));
    }
    // Every operation is independent and idempotent, so two threads share them, each taking whole
    // directories where it can (renames in one directory serialize on its lock).
    targets.sort_by(|a, b| a.1.parent().cmp(&b.1.parent()));
    let half = targets.len().div_ceil(2).max(1);
    let conflicts = std::thread::scope(|s| -> Result<Vec<Conflict>, HostError> {
        let workers: Vec<_> = targets
            .chunks(half)
            .map(|chunk| {
                s.spawn(move || -> Result<Vec<Conflict>, HostError> {
                    let mut conflicts = Vec::new();
                    for (kind, target, dest) in chunk {
                        conflicts.extend(commit_one(*kind, target, dest)?);
                    }
                    Ok(conflicts)
                })
            })
            .collect();
        let mut all = Vec::new();
        for w in workers {
            all.extend(w.join().unwrap_or(Err(HostError::Panicked))?);
        }
        Ok(all)
    })?;
    // A destination that turned into a directory (or lost its parent directory) after planning
    // cannot take its file, now or on any retry: the install ends without it, its stage file gone
    // and the file left out of the manifest, so the next plan reports the path instead of the
    // journal replaying the same failure forever.
    let mut manifest = journal.manifest.clone();
    for c in &conflicts {
        manifest.files.remove(&c.dest);
    }
    write_state(root, &StateFile::BundleManifest, &manifest)?;
    // The staging record goes before the journal, durably: alone, it would roll back a finished
    // install's directory changes.
    let staging = StateFile::BundleStaging.resolve(root)?;
    match fs::remove_file(&staging) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(HostError::io(&staging, "remove staging record")(e).into()),
    }
    // One flush for the renames, the deletions and the manifest. A directory that vanished since
    // (a conflict) is not there to flush.
    let existing: Vec<PathBuf> = resolver.dirs.into_values().filter(|d| d.is_dir()).collect();
    sync_filesystems(existing.iter().chain(state_dir(root)?.as_ref()))?;
    // Not flushed: a journal that comes back after a power cut is replayed, which changes nothing.
    let journal_path = StateFile::BundleJournal.resolve(root)?;
    fs::remove_file(&journal_path).map_err(HostError::io(&journal_path, "remove journal"))?;
    match conflicts.into_iter().next() {
        None => Ok(()),
        Some(c) => Err(InstallError::Conflict {
            dest: c.dest,
            reason: c.reason,
        }),
    }
}

/// A committed file that could not be renamed into place for a structural reason.
pub(super) struct Conflict {
    pub(super) dest: String,
    pub(super) reason: String,
}

#[derive(Debug, Clone, Copy)]
pub(super) enum Commit {
    Put,
    PutDir,
    Delete,
}

/// One committed operation: the staged file renamed over its destination, a stage directory
/// renamed into place, or a file deleted. A rename that can never succeed (the destination is a
/// directory, or a file where a directory goes) is a conflict, not an error.
pub(super) fn commit_one(kind: Commit, target: &Path, dest: &str) -> Result<Vec<Conflict>, HostError> {
    let mut conflicts = Vec::new();
    match kind {
        Commit::Put => {
            let stage = stage_path(target);
            failpoint::pause("bundle-rename");
            // By the pinned directories, never through a directory swapped for a symlink since.
            match pinned::rename(&stage, target) {
                Ok(()) => {}
                // Already renamed by an earlier, interrupted roll-forward: nothing left to do.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) if is_structural(&e) => {
                    let _ = pinned::unlink(&stage);
                    conflicts.push(Conflict {
                        dest: dest.to_owned(),
                        reason: e.to_string(),
                    });
                }
                Err(e) => return Err(HostError::io(target, "rename into place")(e)),
            }
        }
        Commit::PutDir => {
            let stage = stage_path(target);
            match pinned::rename(&stage, target) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                // Someone made the directory since the plan: the files go into it one by one.
                Err(e) if matches!(e.raw_os_error(), Some(libc::EEXIST | libc::ENOTEMPTY)) => {
                    merge_into(&stage, target, dest, &mut conflicts)?;
                    fs::remove_dir_all(&stage).map_err(HostError::io(&stage, "remove stage directory"))?;
                }
                Err(e) if is_structural(&e) => {
                    fs::remove_dir_all(&stage).map_err(HostError::io(&stage, "remove stage directory"))?;
                    conflicts.push(Conflict {
                        dest: dest.to_owned(),
                        reason: e.to_string(),
                    });
                }
                Err(e) => return Err(HostError::io(target, "rename into place")(e)),
            }
        }
        Commit::Delete => match pinned::unlink(target) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(HostError::io(target, "remove")(e)),
        },
    }
    failpoint::hit("bundle-commit");
    Ok(conflicts)
}

pub(super) fn is_structural(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EISDIR | libc::ENOTDIR | libc::ENOTEMPTY | libc::EEXIST)
    )
}

/// Moves what a stage directory holds into the directory that now exists at its destination:
/// files renamed over, directories renamed in whole or merged the same way. Idempotent: what
/// was moved before a crash is simply not there any more.
pub(super) fn merge_into(
    from: &Path,
    to: &Path,
    dest: &str,
    conflicts: &mut Vec<Conflict>,
) -> Result<(), HostError> {
    let entries = fs::read_dir(from).map_err(HostError::io(from, "read stage directory"))?;
    for entry in entries {
        let entry = entry.map_err(HostError::io(from, "read stage directory"))?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let sub = format!("{dest}/{}", entry.file_name().to_string_lossy());
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        match pinned::rename(&src, &dst) {
            Ok(()) => {}
            Err(e) if is_dir && matches!(e.raw_os_error(), Some(libc::EEXIST | libc::ENOTEMPTY)) => {
                merge_into(&src, &dst, &sub, conflicts)?;
            }
            Err(e) if is_structural(&e) => conflicts.push(Conflict {
                dest: sub,
                reason: e.to_string(),
            }),
            Err(e) => return Err(HostError::io(&dst, "rename into place")(e)),
        }
    }
    Ok(())
}

/// Creates a missing directory (and parents) or fixes one with the wrong mode or owner.
pub(super) fn ensure_dir(root: &HostRoot, d: &DirWanted) -> Result<(), InstallError> {
    let target = resolve_dir(root, &d.path)?;
    let parents_meta = Meta {
        mode: 0o755,
        uid: 0,
        gid: 0,
        label: None,
    };
    match hostfs::observe(&target)? {
        None => {
            if let Some(parent) = target.parent() {
                if !parent.exists() {
                    let parent_abs = d.path.parent().unwrap_or_else(|| d.path.clone());
                    ensure_dir(
                        root,
                        &DirWanted {
                            path: parent_abs,
                            meta: None,
                        },
                    )?;
                }
            }
            hostfs::create_dir(&target, d.meta.as_ref().unwrap_or(&parents_meta))?;
        }
        Some(o) => {
            if let Some(m) = &d.meta {
                if (o.uid, o.gid) != (m.uid, m.gid) {
                    hostfs::set_owner(&target, m.uid, m.gid)?;
                }
                if o.mode != m.mode {
                    hostfs::set_mode(&target, m.mode)?;
                }
            }
        }
    }
    Ok(())
}

/// Removes the stage file (or, for a directory created whole, the stage directory) of `dest`, if
/// there is one.
pub(super) fn remove_stage(root: &HostRoot, dest: &str, dir: bool) -> Result<(), InstallError> {
    let Ok(p) = dest.parse::<AbsPath>() else {
        return Ok(());
    };
    let stage = stage_path(&resolve(root, &p)?);
    let (removed, what) = if dir {
        (fs::remove_dir_all(&stage), "remove stage directory")
    } else {
        (pinned::unlink(&stage), "remove stage file")
    };
    match removed {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(HostError::io(&stage, what)(e).into()),
        _ => Ok(()),
    }
}
