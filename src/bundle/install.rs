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

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::failpoint;
use crate::host::HostError;
use crate::host::fs::Durability;
use crate::host::fs::{self as hostfs, Kind, Meta};
use crate::root::HostRoot;
use crate::types::AbsPath;

/// Where the manifest of installed files and the journal live.
pub const STATE_DIR: &str = "/var/lib/nodeward/bundle";

/// What the last complete install put where (host paths), so files that leave the bundle can be
/// removed. Contents are compared with the files themselves, not with recorded hashes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub files: std::collections::BTreeSet<String>,
}

/// One operation of the commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
enum JournalOp {
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
struct Staging {
    /// Destinations whose stage files may exist.
    dests: Vec<String>,
    /// Directories created whole, whose stage directories may exist.
    fresh: Vec<String>,
    /// Directories this install creates (parents first): removed, when still empty, on roll-back.
    created: Vec<String>,
    /// Directories whose mode or owner this install changes, with what they had.
    changed: Vec<DirWas>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct DirWas {
    path: String,
    mode: u32,
    uid: u32,
    gid: u32,
}

/// Earlier versions wrote the destinations alone, as a list.
#[derive(Deserialize)]
#[serde(untagged)]
enum StagingOnDisk {
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
struct Journal {
    ops: Vec<JournalOp>,
    manifest: Manifest,
}

/// A directory the install needs, with its mode and owner (enforced for directories at or below a
/// rule's destination; parents above are only created).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirWanted {
    pub path: AbsPath,
    pub meta: Option<Meta>,
}

/// A file as it must be after the install.
#[derive(Debug, Clone)]
pub struct FileWanted {
    pub dest: AbsPath,
    pub content: crate::bundle::format::Content,
    pub meta: Meta,
}

pub use crate::plan::{FileOp, Pending};

/// The computed install: only what differs.
#[derive(Debug, Clone)]
pub struct InstallPlan {
    pub dirs: Vec<DirWanted>,
    /// Files to write, with whether each is new.
    pub puts: Vec<(FileWanted, FileOp)>,
    /// Host paths to delete (they left the bundle).
    pub deletes: Vec<AbsPath>,
    pub manifest: Manifest,
    /// True when nothing at all needs doing (no dirs to fix either).
    pub noop: bool,
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

pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// Resolves a file's path: its directories through symlinks inside the root, the file itself not
/// (a symlink there is refused, never written through).
fn resolve(root: &HostRoot, p: &AbsPath) -> Result<PathBuf, HostError> {
    root.resolve_parent(p)
        .map_err(HostError::resolve(p.to_path_buf()))
}

/// [`resolve`] with each directory resolved once: a bundle puts hundreds of files in a few
/// directories, and resolving walks (and stats) every component.
#[derive(Default)]
struct Resolver {
    dirs: std::collections::HashMap<AbsPath, PathBuf>,
}

impl Resolver {
    fn file(&mut self, root: &HostRoot, p: &AbsPath) -> Result<PathBuf, HostError> {
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
fn prepare_state(
    root: &HostRoot,
    name: &str,
    value: &impl Serialize,
) -> Result<hostfs::Prepared, InstallError> {
    let path = resolve(root, &state_path(name))?;
    let bytes = serde_json::to_vec_pretty(value).map_err(|e| InstallError::State {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    let meta = Meta {
        mode: 0o600,
        uid: 0,
        gid: 0,
        label: None,
    };
    Ok(hostfs::prepare_atomic(&path, &bytes, &meta)?)
}

/// A state file renamed into place at once, made durable by the install's next `syncfs`.
fn write_state(root: &HostRoot, name: &str, value: &impl Serialize) -> Result<(), InstallError> {
    Ok(prepare_state(root, name, value)?.commit(Durability::Deferred)?)
}

/// Resolves a directory, following symlinks inside the root all the way.
fn resolve_dir(root: &HostRoot, p: &AbsPath) -> Result<PathBuf, HostError> {
    root.resolve(p).map_err(HostError::resolve(p.to_path_buf()))
}

fn state_path(name: &str) -> AbsPath {
    format!("{STATE_DIR}/{name}")
        .parse()
        .unwrap_or_else(|e| panic!("state path: {e}"))
}

fn read_manifest(root: &HostRoot) -> Result<Manifest, InstallError> {
    let path = resolve(root, &state_path("manifest.json"))?;
    match fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| InstallError::State {
            path: path.display().to_string(),
            message: e.to_string(),
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Manifest::default()),
        Err(e) => Err(HostError::io(&path, "read")(e).into()),
    }
}

/// Decides what to do: compares every wanted file and directory with the host. `managed_dirs` are
/// the rule destinations: they and everything below them must be real directories.
pub fn plan(
    root: &HostRoot,
    dirs: Vec<DirWanted>,
    files: Vec<FileWanted>,
    managed_dirs: &[AbsPath],
) -> Result<InstallPlan, InstallError> {
    let old = read_manifest(root)?;
    let mut manifest = Manifest::default();
    let mut noop = true;
    for d in &dirs {
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
            (None, _) => noop = false,
            (Some(o), _) if o.kind != Kind::Dir => {
                return Err(HostError::NotADirectory {
                    path: target,
                    found: o.kind.name(),
                }
                .into());
            }
            (Some(o), Some(m)) if (o.mode, o.uid, o.gid) != (m.mode, m.uid, m.gid) => noop = false,
            _ => {}
        }
    }
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

/// Files earlier versions installed with the bundle that another step now owns: they leave the
/// manifest but are never deleted (the `hostfiles` step derives `ca.crt` from the kubeconfig).
const HANDED_OVER: &[&str] = &["/etc/kubernetes/ca.crt"];

fn stage_path(target: &Path) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    target.with_file_name(format!(".{name}.nodeward-stage"))
}

/// Carries an install out (after finishing any interrupted one).
pub fn apply(root: &HostRoot, plan: &InstallPlan) -> Result<(), InstallError> {
    recover(root)?;
    if plan.noop {
        return Ok(());
    }
    let state = resolve(root, &state_path("journal.json"))?;
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
    write_state(root, "staging.json", &staging)?;
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
    let committed = prepare_state(root, "journal.json", &journal)?;
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

/// The directory of the install's state files (the staging record, journal and manifest).
fn state_dir(root: &HostRoot) -> Result<Option<PathBuf>, InstallError> {
    Ok(resolve(root, &state_path("journal.json"))?
        .parent()
        .map(Path::to_path_buf))
}

/// One `syncfs` for each filesystem the directories are on.
fn sync_filesystems<'a>(dirs: impl Iterator<Item = &'a PathBuf>) -> Result<(), HostError> {
    let mut filesystems: BTreeMap<u64, &PathBuf> = BTreeMap::new();
    for dir in dirs {
        let dev = fs::metadata(dir).map_err(HostError::io(dir, "stat"))?.dev();
        filesystems.entry(dev).or_insert(dir);
    }
    filesystems.values().try_for_each(|dir| hostfs::syncfs(dir))
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
                        match fresh {
                            Some(setgid) => {
                                hostfs::create_private(path, &f.content, &f.meta, creation, *setgid)?
                            }
                            None => hostfs::stage(path, &f.content, &f.meta, Durability::Deferred)?,
                        }
                        failpoint::hit("bundle-stage");
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

/// What [`recover`] would do, without doing it (for `plan` and `status`: drift).
pub fn pending(root: &HostRoot) -> Result<Option<Pending>, InstallError> {
    if let Some(journal) = read_state::<Journal>(root, "journal.json")? {
        return Ok(Some(Pending::Forward(journal.ops.len())));
    }
    Ok(read_staging(root)?.map(|s| Pending::Back(s.dests.len() + s.fresh.len())))
}

/// The staging record, if there is one. It is not flushed on its own, so after a power cut it
/// may be empty or cut short. Nothing visible had changed then (see [`apply`]): only stage files
/// can be left, and the record reads as covering those of the files the last install put (the
/// ones a new bundle mostly changes); a destination new to that install keeps its root-only stage
/// file until an install writes it again.
fn read_staging(root: &HostRoot) -> Result<Option<Staging>, InstallError> {
    match read_state::<Staging>(root, "staging.json") {
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
fn read_state<T: serde::de::DeserializeOwned>(
    root: &HostRoot,
    name: &str,
) -> Result<Option<T>, InstallError> {
    let path = resolve(root, &state_path(name))?;
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(HostError::io(&path, "read")(e).into()),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| InstallError::State {
            path: path.display().to_string(),
            message: e.to_string(),
        })
}

/// Finishes an install interrupted after its commit point; does nothing when there is none.
/// Returns whether a journal was found.
pub fn recover(root: &HostRoot) -> Result<bool, InstallError> {
    let path = resolve(root, &state_path("journal.json"))?;
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return roll_back(root),
        Err(e) => return Err(HostError::io(&path, "read")(e).into()),
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
fn roll_back(root: &HostRoot) -> Result<bool, InstallError> {
    let Some(staging) = read_staging(root)? else {
        return Ok(false);
    };
    // A journal written but not yet committed.
    let journal = hostfs::temp_path(&resolve(root, &state_path("journal.json"))?);
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
    let path = resolve(root, &state_path("staging.json"))?;
    fs::remove_file(&path).map_err(HostError::io(&path, "remove staging record"))?;
    Ok(true)
}

/// Removes the stage file (or, for a directory created whole, the stage directory) of `dest`, if
/// there is one.
fn remove_stage(root: &HostRoot, dest: &str, dir: bool) -> Result<(), InstallError> {
    let Ok(p) = dest.parse::<AbsPath>() else {
        return Ok(());
    };
    let stage = stage_path(&resolve(root, &p)?);
    let (removed, what) = if dir {
        (fs::remove_dir_all(&stage), "remove stage directory")
    } else {
        (fs::remove_file(&stage), "remove stage file")
    };
    match removed {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(HostError::io(&stage, what)(e).into()),
        _ => Ok(()),
    }
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

fn roll_forward(root: &HostRoot, journal: &Journal) -> Result<(), InstallError> {
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
    write_state(root, "manifest.json", &manifest)?;
    // The staging record goes before the journal, durably: alone, it would roll back a finished
    // install's directory changes.
    let staging = resolve(root, &state_path("staging.json"))?;
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
    let journal_path = resolve(root, &state_path("journal.json"))?;
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
struct Conflict {
    dest: String,
    reason: String,
}

#[derive(Debug, Clone, Copy)]
enum Commit {
    Put,
    PutDir,
    Delete,
}

/// One committed operation: the staged file renamed over its destination, a stage directory
/// renamed into place, or a file deleted. A rename that can never succeed (the destination is a
/// directory, or a file where a directory goes) is a conflict, not an error.
fn commit_one(kind: Commit, target: &Path, dest: &str) -> Result<Vec<Conflict>, HostError> {
    let mut conflicts = Vec::new();
    match kind {
        Commit::Put => {
            let stage = stage_path(target);
            match fs::rename(&stage, target) {
                Ok(()) => {}
                // Already renamed by an earlier, interrupted roll-forward: nothing left to do.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) if is_structural(&e) => {
                    let _ = fs::remove_file(&stage);
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
            match fs::rename(&stage, target) {
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
        Commit::Delete => match fs::remove_file(target) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(HostError::io(target, "remove")(e)),
        },
    }
    failpoint::hit("bundle-commit");
    Ok(conflicts)
}

fn is_structural(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EISDIR | libc::ENOTDIR | libc::ENOTEMPTY | libc::EEXIST)
    )
}

/// Moves what a stage directory holds into the directory that now exists at its destination:
/// files renamed over, directories renamed in whole or merged the same way. Idempotent: what
/// was moved before a crash is simply not there any more.
fn merge_into(from: &Path, to: &Path, dest: &str, conflicts: &mut Vec<Conflict>) -> Result<(), HostError> {
    let entries = fs::read_dir(from).map_err(HostError::io(from, "read stage directory"))?;
    for entry in entries {
        let entry = entry.map_err(HostError::io(from, "read stage directory"))?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let sub = format!("{dest}/{}", entry.file_name().to_string_lossy());
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        match fs::rename(&src, &dst) {
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
fn ensure_dir(root: &HostRoot, d: &DirWanted) -> Result<(), InstallError> {
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
