//! Installing the bundle's files all or nothing, and surviving a crash at any instant.
//!
//! 1. **Stage.** Each new or changed file is written next to its destination as
//!    `.NAME.nodeward-stage`: created 0600, given its owner, label and final mode, then filled.
//!    Nothing a reader looks at has changed yet.
//! 2. **Sync.** The list of renames and deletions and the new manifest (the journal) are written
//!    beside `/var/lib/nodeward/bundle/journal.json`; one `syncfs(2)` per filesystem makes them
//!    and every staged byte durable (not a thousand fsyncs).
//! 3. **Journal.** Directories are created or given their mode, then the journal is renamed into
//!    place and its directory flushed. This is the commit point.
//! 4. **Commit.** Renames over the destinations, deletions of files that left the bundle (each
//!    idempotent, so two threads share them), the manifest written, one sync, the journal removed.
//!
//! Before staging, the destinations are recorded in `staging.json`. A crash before the journal
//! exists is rolled back by [`recover`] (stage files removed): the old set. A crash after it is
//! rolled forward: the new set. Three flushes in all, whatever the bundle's size.
//! Files whose content, mode, owner and label are already right are never touched.

use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;

use crate::failpoint;
use crate::host::HostError;
use crate::host::fs::Durability;
use crate::host::fs::{self as hostfs, Kind, Meta};
use crate::host::state::StateFile;
use crate::root::HostRoot;
use crate::types::AbsPath;
use commit::{ensure_dir, roll_forward};
use state::{
    Resolver, prepare_state, read_manifest, resolve, resolve_dir, stage_path, state_dir, sync_filesystems,
    write_state,
};

mod commit;
mod model;
mod recover;
mod state;

pub use crate::bundle::digest::sha256_hex;
pub use model::{DirWanted, FileWanted, InstallError, InstallPlan, Manifest};
use model::{DirWas, Journal, JournalOp, Staging};
pub use recover::recover;
pub use state::pending;

pub use crate::plan::{FileOp, Pending};

/// Decides what to do: compares every wanted file and directory with the host. `managed_dirs` are
/// the rule destinations: they and everything below them must be real directories.
pub(crate) fn plan(
    root: &HostRoot,
    dirs: Vec<DirWanted>,
    files: Vec<FileWanted>,
    managed_dirs: &[AbsPath],
) -> Result<InstallPlan, InstallError> {
    let old = read_manifest(root)?;
    let mut manifest = Manifest::default();
    let mut noop = dirs_in_place(root, &dirs, managed_dirs)?;
    let mut puts = Vec::new();
    let mut resolver = Resolver::default();
    for f in files {
        let target = resolver.file(root, &f.dest)?;
        manifest.files.insert(f.dest.to_string());
        let op = match hostfs::observe(&target)? {
            None => Some(FileOp::Create),
            Some(o) if o.kind == Kind::File => {
                (!hostfs::matches(&target, &o, &f.content, &f.meta)?).then_some(FileOp::Update)
            }
            Some(o) => {
                return Err(InstallError::NotAFile {
                    dest: f.dest.to_string(),
                    found: o.kind.name(),
                });
            }
        };
        if let Some(op) = op {
            puts.push((f, op));
        }
    }
    let mut deletes = Vec::new();
    for gone in old
        .files
        .iter()
        .filter(|p| !manifest.files.contains(*p) && !HANDED_OVER.contains(&p.as_str()))
    {
        let Ok(p) = gone.parse::<AbsPath>() else { continue };
        let target = resolver.file(root, &p)?;
        if matches!(hostfs::observe(&target)?, Some(o) if o.kind == Kind::File) {
            deletes.push(p);
        }
    }
    noop &= puts.is_empty() && deletes.is_empty() && old == manifest;
    Ok(InstallPlan {
        dirs,
        puts,
        deletes,
        manifest,
        noop,
    })
}

/// Whether every wanted directory is there as wanted (mode and owner); a rule's destination (and
/// below) must be a real directory, not a link elsewhere, and nothing but a directory may stand
/// where one goes.
fn dirs_in_place(
    root: &HostRoot,
    dirs: &[DirWanted],
    managed_dirs: &[AbsPath],
) -> Result<bool, InstallError> {
    let mut in_place = true;
    for d in dirs {
        // A rule's destination directory (and below) must be itself, not a link elsewhere; links
        // above it are followed inside the root (Fedora CoreOS: /opt -> var/opt).
        if managed_dirs.iter().any(|m| d.path.is_within(m)) {
            let own = resolve(root, &d.path)?;
            if fs::symlink_metadata(&own).is_ok_and(|m| m.file_type().is_symlink()) {
                let to = fs::read_link(&own)
                    .map(|t| t.display().to_string())
                    .unwrap_or_default();
                return Err(InstallError::SymlinkDir {
                    dir: d.path.to_string(),
                    target: to,
                });
            }
        }
        let target = resolve_dir(root, &d.path)?;
        match (hostfs::observe(&target)?, &d.meta) {
            (None, _) => in_place = false,
            (Some(o), _) if o.kind != Kind::Dir => {
                return Err(HostError::NotADirectory {
                    path: target,
                    found: o.kind.name(),
                }
                .into());
            }
            (Some(o), Some(m)) if (o.mode, o.uid, o.gid) != (m.mode, m.uid, m.gid) => in_place = false,
            _ => {}
        }
    }
    Ok(in_place)
}

/// Files earlier versions installed with the bundle that another step now owns: they leave the
/// manifest but are never deleted (the `hostfiles` step derives `ca.crt` from the kubeconfig).
const HANDED_OVER: &[&str] = &["/etc/kubernetes/ca.crt"];

/// Carries an install out (after finishing any interrupted one). An install that fails is
/// finished or rolled back at once, as a crash would be at the next start, so no stage file or
/// half-made directory waits for the next install.
pub(crate) fn apply(root: &HostRoot, plan: &InstallPlan) -> Result<(), InstallError> {
    recover(root)?;
    if plan.noop {
        return Ok(());
    }
    let result = carry_out(root, plan);
    if result.is_err() {
        if let Err(e) = recover(root) {
            tracing::warn!(error = %e, "cannot clean up after a failed install; the next one will");
        }
    }
    result
}

fn carry_out(root: &HostRoot, plan: &InstallPlan) -> Result<(), InstallError> {
    let state = StateFile::BundleJournal.resolve(root)?;
    if let Some(dir) = state.parent() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(HostError::io(dir, "create state directory"))?;
    }
    let fresh = fresh_dirs(root, plan)?;
    let fresh_for = |p: &AbsPath| fresh.iter().find(|f| p.is_within(&f.dest));
    let (created, changed) = dir_changes(root, &plan.dirs)?;
    let staging = Staging {
        dests: plan
            .puts
            .iter()
            .filter(|(f, _)| fresh_for(&f.dest).is_none())
            .map(|(f, _)| f.dest.to_string())
            .collect(),
        fresh: fresh.iter().map(|f| f.dest.to_string()).collect(),
        created,
        changed,
    };
    write_state(root, &StateFile::BundleStaging, &staging)?;
    failpoint::hit("bundle-staging");
    let mut resolver = Resolver::default();
    let mut staged = Vec::with_capacity(plan.puts.len());
    let mut setgid_dirs = Vec::new();
    for f in &fresh {
        setgid_dirs.extend(f.prepare(&plan.dirs, plan.puts.iter().map(|(w, _)| &w.dest))?);
    }
    for (f, _) in &plan.puts {
        staged.push(match fresh_for(&f.dest) {
            Some(dir) => {
                let path = dir.stage_of(&f.dest);
                let setgid = path.parent().is_some_and(|p| setgid_dirs.iter().any(|d| d == p));
                (path, f, Some(setgid))
            }
            None => (stage_path(&resolver.file(root, &f.dest)?), f, None),
        });
    }
    write_staged(&staged)?;
    for f in &fresh {
        f.open_up()?;
    }
    let journal = journal_of(plan, &fresh, &staging);
    let committed = prepare_state(root, &StateFile::BundleJournal, &journal)?;
    // One flush makes the staged files, their record and the journal's bytes durable together.
    // Nothing anyone looks at has changed yet, so a power cut before it loses nothing: stage
    // files whose record did not reach the disk are root's alone and replaced by the next install.
    let dirs = resolver.dirs.values().chain(fresh.iter().map(|f| &f.stage));
    sync_filesystems(dirs.chain(state_dir(root)?.as_ref()))?;
    // The first visible changes, recorded by a durable staging record: undone on a roll-back.
    for d in plan.dirs.iter().filter(|d| fresh_for(&d.path).is_none()) {
        ensure_dir(root, d)?;
    }
    failpoint::hit("bundle-dirs");
    // The commit point: the journal renamed into place and its directory flushed.
    committed.commit(Durability::Now)?;
    failpoint::hit("bundle-journal");
    roll_forward(root, &journal)
}

/// The commit's operations: the directories created whole, the files staged beside their
/// destinations, the deletions; and the manifest once they are done.
fn journal_of(plan: &InstallPlan, fresh: &[Fresh], staging: &Staging) -> Journal {
    let ops = fresh
        .iter()
        .map(|f| JournalOp::PutDir {
            dest: f.dest.to_string(),
        })
        .chain(
            staging
                .dests
                .iter()
                .map(|dest| JournalOp::Put { dest: dest.clone() }),
        )
        .chain(
            plan.deletes
                .iter()
                .map(|d| JournalOp::Delete { dest: d.to_string() }),
        )
        .collect();
    Journal {
        ops,
        manifest: plan.manifest.clone(),
    }
}

/// Writes every staged file: beside its destination (`None`), or inside a stage directory only
/// root can enter (`Some(parent is set-group-id)`), with its final mode at once. Staging is
/// independent per file: two writers keep both the CPU and the device busy.
fn write_staged(staged: &[(PathBuf, &FileWanted, Option<bool>)]) -> Result<(), HostError> {
    let creation = hostfs::Creation::of_this_process();
    let half = staged.len().div_ceil(2).max(1);
    std::thread::scope(|s| -> Result<(), HostError> {
        let workers: Vec<_> = staged
            .chunks(half)
            .map(|chunk| {
                s.spawn(move || -> Result<(), HostError> {
                    for (path, f, fresh) in chunk {
                        failpoint::pause("bundle-stage");
                        match fresh {
                            Some(setgid) => {
                                hostfs::create_private(path, &f.content, &f.meta, creation, *setgid)?
                            }
                            None => hostfs::stage(path, &f.content, &f.meta, Durability::Deferred)?,
                        }
                        failpoint::hit("bundle-stage");
                        failpoint::io("bundle-stage").map_err(HostError::io(path, "stage"))?;
                    }
                    Ok(())
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap_or(Err(HostError::Panicked))?;
        }
        Ok(())
    })
}

/// A directory the install creates whole: it does not exist, and neither does anything in it.
/// Its files are written into a stage directory beside it (`.NAME.nodeward-stage`, which only root
/// can enter until it is complete) and the directory is renamed into place in one step at the
/// commit: one rename instead of one per file, and no `chmod`/`chown` where creating the file
/// already gives its mode and owner. A first boot's whole install takes this path.
struct Fresh {
    dest: AbsPath,
    stage: PathBuf,
    /// The directory's own mode and owner, given to the stage directory once it is filled.
    meta: Meta,
}

/// The parents nodeward creates without a rule for them, as `mkdir -p` would.
const PARENTS_META: Meta = Meta {
    mode: 0o755,
    uid: 0,
    gid: 0,
    label: None,
};

impl Fresh {
    fn stage_of(&self, p: &AbsPath) -> PathBuf {
        match p.as_path().strip_prefix(self.dest.as_path()) {
            Ok(rel) if !rel.as_os_str().is_empty() => self.stage.join(rel),
            _ => self.stage.clone(),
        }
    }

    /// Makes the stage directory (0700; a leftover of an interrupted install is removed first)
    /// and the directories below it, parents first, each with its wanted mode and owner. Returns
    /// the ones that pass their group on to new files (set-group-id).
    fn prepare<'a>(
        &self,
        dirs: &[DirWanted],
        files: impl Iterator<Item = &'a AbsPath>,
    ) -> Result<Vec<PathBuf>, HostError> {
        if hostfs::observe(&self.stage)?.is_some() {
            fs::remove_dir_all(&self.stage)
                .map_err(HostError::io(&self.stage, "remove stale stage directory"))?;
        }
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&self.stage)
            .map_err(HostError::io(&self.stage, "create stage directory"))?;
        let mut below = std::collections::BTreeSet::new();
        for f in files.filter(|f| f.is_within(&self.dest)) {
            let mut cur = f.parent();
            while let Some(p) = cur.filter(|p| *p != self.dest && p.is_within(&self.dest)) {
                cur = p.parent();
                below.insert(p);
            }
        }
        below.extend(
            dirs.iter()
                .filter(|d| d.path != self.dest && d.path.is_within(&self.dest))
                .map(|d| d.path.clone()),
        );
        let mut setgid = Vec::new();
        for dir in &below {
            let meta = dirs
                .iter()
                .find(|d| d.path == *dir)
                .and_then(|d| d.meta.clone())
                .unwrap_or(PARENTS_META);
            let path = self.stage_of(dir);
            hostfs::create_dir(&path, &meta)?;
            if meta.mode & 0o2000 != 0 {
                setgid.push(path);
            }
        }
        Ok(setgid)
    }

    /// Gives the filled stage directory the directory's own owner, label and mode.
    fn open_up(&self) -> Result<(), HostError> {
        hostfs::set_owner(&self.stage, self.meta.uid, self.meta.gid)?;
        if let Some(label) = &self.meta.label {
            hostfs::set_label(&self.stage, label)?;
        }
        hostfs::set_mode(&self.stage, self.meta.mode)
    }
}

/// The directories the install creates whole: for each new file, its topmost missing ancestor,
/// when that ancestor's parent exists.
fn fresh_dirs(root: &HostRoot, plan: &InstallPlan) -> Result<Vec<Fresh>, InstallError> {
    let mut exists: std::collections::HashMap<AbsPath, bool> = std::collections::HashMap::new();
    let mut tops: std::collections::BTreeSet<AbsPath> = std::collections::BTreeSet::new();
    for (f, op) in &plan.puts {
        if *op != FileOp::Create {
            continue;
        }
        let mut ancestors = Vec::new();
        let mut cur = f.dest.parent();
        while let Some(p) = cur {
            cur = p.parent();
            ancestors.push(p);
        }
        for a in ancestors.into_iter().rev() {
            let there = match exists.get(&a) {
                Some(&e) => e,
                None => {
                    let e = hostfs::observe(&resolve_dir(root, &a)?)?.is_some();
                    exists.insert(a.clone(), e);
                    e
                }
            };
            if !there {
                tops.insert(a);
                break;
            }
        }
    }
    let mut out = Vec::with_capacity(tops.len());
    for dest in tops {
        let target = resolve(root, &dest)?;
        let meta = plan
            .dirs
            .iter()
            .find(|d| d.path == dest)
            .and_then(|d| d.meta.clone())
            .unwrap_or(PARENTS_META);
        out.push(Fresh {
            stage: stage_path(&target),
            dest,
            meta,
        });
    }
    Ok(out)
}

/// The directories an install will create (with any missing parents, parents first) and the ones
/// whose mode or owner it will change, with their current values: what a roll-back restores.
fn dir_changes(root: &HostRoot, dirs: &[DirWanted]) -> Result<(Vec<String>, Vec<DirWas>), InstallError> {
    let mut created: Vec<String> = Vec::new();
    let mut changed = Vec::new();
    for d in dirs {
        let target = resolve_dir(root, &d.path)?;
        match hostfs::observe(&target)? {
            None => {
                let mut missing = Vec::new();
                let mut cur = Some(d.path.clone());
                while let Some(p) = cur {
                    if hostfs::observe(&resolve_dir(root, &p)?)?.is_some() {
                        break;
                    }
                    cur = p.parent();
                    missing.push(p.to_string());
                }
                for p in missing.into_iter().rev() {
                    if !created.contains(&p) {
                        created.push(p);
                    }
                }
            }
            Some(o) => {
                if let Some(m) = &d.meta {
                    if (o.mode, o.uid, o.gid) != (m.mode, m.uid, m.gid) {
                        changed.push(DirWas {
                            path: d.path.to_string(),
                            mode: o.mode,
                            uid: o.uid,
                            gid: o.gid,
                        });
                    }
                }
            }
        }
    }
    Ok((created, changed))
}
