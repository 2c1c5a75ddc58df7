//! The install's state files under /var/lib/nodeward/bundle (manifest, staging record, journal):
//! where they are, how they are written (0600, flushed with the install's own syncs) and read.

use std::collections::BTreeMap;
use std::fs;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::model::{InstallError, Journal, Manifest, Staging};
use crate::host::HostError;
use crate::host::fs as hostfs;
use crate::host::fs::Durability;
use crate::host::state::StateFile;
use crate::plan::Pending;
use crate::root::HostRoot;
use crate::types::AbsPath;

/// Resolves a file's path: its directories through symlinks inside the root, the file itself not
/// (a symlink there is refused, never written through).
pub(super) fn resolve(root: &HostRoot, p: &AbsPath) -> Result<PathBuf, HostError> {
    root.resolve_parent(p)
        .map_err(HostError::resolve(p.to_path_buf()))
}

/// [`resolve`] with each directory resolved once: a bundle puts hundreds of files in a few
/// directories, and resolving walks (and stats) every component.
#[derive(Default)]
pub(super) struct Resolver {
    pub(super) dirs: std::collections::HashMap<AbsPath, PathBuf>,
}

impl Resolver {
    pub(super) fn file(&mut self, root: &HostRoot, p: &AbsPath) -> Result<PathBuf, HostError> {
        let (Some(parent), Some(name)) = (p.parent(), p.as_path().file_name()) else {
            return resolve(root, p);
        };
        if let Some(dir) = self.dirs.get(&parent) {
            return Ok(dir.join(name));
        }
        let dir = resolve_dir(root, &parent)?;
        let out = dir.join(name);
        self.dirs.insert(parent, dir);
        Ok(out)
    }
}

/// Writes one of the install's state files (staging record, journal, manifest) under its
/// temporary name, 0600; [`hostfs::Prepared::commit`] renames it into place. None is flushed on its
/// own: each rides on a `syncfs` the install makes anyway (see [`apply`]).
pub(super) fn prepare_state(
    root: &HostRoot,
    file: &StateFile,
    value: &impl Serialize,
) -> Result<hostfs::Prepared, InstallError> {
    let bytes = serde_json::to_vec_pretty(value).map_err(|e| InstallError::State {
        path: file.path().to_string(),
        message: e.to_string(),
    })?;
    Ok(file.prepare(root, &bytes)?)
}

/// A state file renamed into place at once, made durable by the install's next `syncfs`.
pub(super) fn write_state(
    root: &HostRoot,
    file: &StateFile,
    value: &impl Serialize,
) -> Result<(), InstallError> {
    Ok(prepare_state(root, file, value)?.commit(Durability::Deferred)?)
}

/// Resolves a directory, following symlinks inside the root all the way.
pub(super) fn resolve_dir(root: &HostRoot, p: &AbsPath) -> Result<PathBuf, HostError> {
    root.resolve(p).map_err(HostError::resolve(p.to_path_buf()))
}

pub(super) fn read_manifest(root: &HostRoot) -> Result<Manifest, InstallError> {
    match StateFile::BundleManifest.read(root) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| InstallError::State {
            path: StateFile::BundleManifest.path().to_string(),
            message: e.to_string(),
        }),
        Err(e) if e.is_missing() => Ok(Manifest::default()),
        Err(e) => Err(HostError::from(e).into()),
    }
}

/// The directory of the install's state files (the staging record, journal and manifest).
pub(super) fn state_dir(root: &HostRoot) -> Result<Option<PathBuf>, InstallError> {
    Ok(StateFile::BundleJournal
        .resolve(root)?
        .parent()
        .map(Path::to_path_buf))
}

/// One `syncfs` for each filesystem the directories are on.
pub(super) fn sync_filesystems<'a>(dirs: impl Iterator<Item = &'a PathBuf>) -> Result<(), HostError> {
    let mut filesystems: BTreeMap<u64, &PathBuf> = BTreeMap::new();
    for dir in dirs {
        let dev = fs::metadata(dir).map_err(HostError::io(dir, "stat"))?.dev();
        filesystems.entry(dev).or_insert(dir);
    }
    filesystems.values().try_for_each(|dir| hostfs::syncfs(dir))
}

pub(super) fn stage_path(target: &Path) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    target.with_file_name(format!(".{name}.nodeward-stage"))
}

/// What [`recover`] would do, without doing it (for `plan` and `status`: drift).
pub fn pending(root: &HostRoot) -> Result<Option<Pending>, InstallError> {
    if let Some(journal) = read_state::<Journal>(root, &StateFile::BundleJournal)? {
        return Ok(Some(Pending::Forward(journal.ops.len())));
    }
    Ok(read_staging(root)?.map(|s| Pending::Back(s.dests.len() + s.fresh.len())))
}

/// The staging record, if there is one. It is not flushed on its own, so after a power cut it
/// may be empty or cut short. Nothing visible had changed then (see [`apply`]): only stage files
/// can be left, and the record reads as covering those of the files the last install put (the
/// ones a new bundle mostly changes); a destination new to that install keeps its root-only stage
/// file until an install writes it again.
pub(super) fn read_staging(root: &HostRoot) -> Result<Option<Staging>, InstallError> {
    match read_state::<Staging>(root, &StateFile::BundleStaging) {
        Err(InstallError::State { path, message }) => {
            tracing::warn!(
                path,
                message,
                "unreadable staging record (a power cut before its flush): removing the stage files beside installed files"
            );
            Ok(Some(Staging {
                dests: read_manifest(root)?.files.into_iter().collect(),
                ..Staging::default()
            }))
        }
        other => other,
    }
}

/// Reads one of the install's state files; `None` when it does not exist.
pub(super) fn read_state<T: serde::de::DeserializeOwned>(
    root: &HostRoot,
    file: &StateFile,
) -> Result<Option<T>, InstallError> {
    let bytes = match file.read(root) {
        Ok(b) => b,
        Err(e) if e.is_missing() => return Ok(None),
        Err(e) => return Err(HostError::from(e).into()),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| InstallError::State {
            path: file.path().to_string(),
            message: e.to_string(),
        })
}
