//! After a crash: finish an install past its commit point, or undo one before it.

use std::fs;
use std::io;

use super::commit::{remove_stage, roll_forward};
use super::model::{InstallError, Journal};
use super::state::{read_staging, resolve};
use crate::host::HostError;
use crate::host::fs::{self as hostfs, Kind};
use crate::host::state::StateFile;
use crate::root::HostRoot;
use crate::types::AbsPath;

/// Finishes an install interrupted after its commit point; does nothing when there is none.
/// Returns whether a journal was found.
pub fn recover(root: &HostRoot) -> Result<bool, InstallError> {
    let path = StateFile::BundleJournal.resolve(root)?;
    let bytes = match crate::host::read::read_below(root, &path, crate::host::read::Kind::State) {
        Ok(b) => b,
        Err(e) if e.is_missing() => return roll_back(root),
        Err(e) => return Err(HostError::from(e).into()),
    };
    let journal: Journal = serde_json::from_slice(&bytes).map_err(|e| InstallError::State {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    tracing::warn!(ops = journal.ops.len(), "finishing an interrupted bundle install");
    roll_forward(root, &journal)?;
    Ok(true)
}

/// Undoes an install interrupted before its commit point: removes its stage files, gives changed
/// directories back their mode and owner, and removes the directories it created. Each part is
/// idempotent, so a crash during the roll-back is rolled back again.
pub(super) fn roll_back(root: &HostRoot) -> Result<bool, InstallError> {
    let Some(staging) = read_staging(root)? else {
        return Ok(false);
    };
    // A journal written but not yet committed.
    let journal = hostfs::temp_path(&StateFile::BundleJournal.resolve(root)?);
    match fs::remove_file(&journal) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            return Err(HostError::io(&journal, "remove uncommitted journal")(e).into());
        }
        _ => {}
    }
    tracing::warn!(
        files = staging.dests.len(),
        "rolling back an interrupted bundle install"
    );
    for dest in &staging.dests {
        remove_stage(root, dest, false)?;
    }
    for dest in &staging.fresh {
        remove_stage(root, dest, true)?;
    }
    for was in &staging.changed {
        let Ok(p) = was.path.parse::<AbsPath>() else {
            continue;
        };
        let target = resolve(root, &p)?;
        if let Some(o) = hostfs::observe(&target)? {
            if o.kind == Kind::Dir {
                if (o.uid, o.gid) != (was.uid, was.gid) {
                    hostfs::set_owner(&target, was.uid, was.gid)?;
                }
                if o.mode != was.mode {
                    hostfs::set_mode(&target, was.mode)?;
                }
            }
        }
    }
    for dir in staging.created.iter().rev() {
        let Ok(p) = dir.parse::<AbsPath>() else { continue };
        // Not through a final symlink (rmdir refuses one), and never a directory someone filled.
        let target = resolve(root, &p)?;
        match fs::remove_dir(&target) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) if e.kind() == io::ErrorKind::DirectoryNotEmpty => {
                tracing::warn!(dir = %target.display(), "created by the interrupted install but no longer empty: kept");
            }
            Err(e) => return Err(HostError::io(&target, "remove created directory")(e).into()),
        }
    }
    let path = StateFile::BundleStaging.resolve(root)?;
    fs::remove_file(&path).map_err(HostError::io(&path, "remove staging record"))?;
    Ok(true)
}
