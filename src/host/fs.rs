//! Filesystem effects: observing, creating directories, and the one atomic file writer.

use std::fs;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::{HostError, pinned, selinux};

pub use pinned::Kind;

/// The observed state of a path, without following a final symlink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Observed {
    pub(crate) kind: Kind,
    pub(crate) mode: u32,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) dev: u64,
}

/// Looks at `path`; `None` when nothing is there.
pub(crate) fn observe(path: &Path) -> Result<Option<Observed>, HostError> {
    match fs::symlink_metadata(path) {
        Ok(m) => Ok(Some(observed_from(&m))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(HostError::io(path, "stat")(e)),
    }
}

fn observed_from(m: &fs::Metadata) -> Observed {
    let ft = m.file_type();
    let kind = if ft.is_dir() {
        Kind::Dir
    } else if ft.is_file() {
        Kind::File
    } else if ft.is_symlink() {
        Kind::Symlink
    } else {
        Kind::Other
    };
    Observed {
        kind,
        mode: m.mode() & 0o7777,
        uid: m.uid(),
        gid: m.gid(),
        dev: m.dev(),
    }
}

/// Ownership, permissions and label a created file or directory must have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub label: Option<String>,
}

/// Creates one directory with its final owner, label and mode.
///
/// It is made `0700` first and opened up only after owner and label are right, so there is no
/// instant at which it is more accessible than wanted, whatever the umask.
pub(crate) fn create_dir(path: &Path, meta: &Meta) -> Result<(), HostError> {
    fs::DirBuilder::new()
        .mode(0o700)
        .create(path)
        .map_err(HostError::io(path, "create directory"))?;
    // Created 0700 root; owner, label and mode go on the directory just made, by descriptor.
    let dir = pinned::pin(path)?;
    dir.set_owner(meta.uid, meta.gid)?;
    if let Some(label) = &meta.label {
        dir.set_label(label)?;
    }
    dir.set_mode(meta.mode)
}

/// Sets permission bits exactly (the umask plays no part), on the object planned: a symlink now
/// on the path is refused, never followed (see `pinned`).
pub(crate) fn set_mode(path: &Path, mode: u32) -> Result<(), HostError> {
    pinned::pin(path)?.set_mode(mode)
}

/// Sets owner and group on the object planned, never through a symlink.
pub(crate) fn set_owner(path: &Path, uid: u32, gid: u32) -> Result<(), HostError> {
    pinned::pin(path)?.set_owner(uid, gid)
}

/// Sets the SELinux context on the object planned, never through a symlink. A file that vanished
/// since it was planned needs no label: `Ok(false)`.
pub(crate) fn set_label(path: &Path, context: &str) -> Result<bool, HostError> {
    match pinned::pin(path) {
        Ok(p) => p.set_label(context).map(|()| true),
        Err(pinned::PinError::Gone(_)) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// What [`write_atomic`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    Unchanged,
    Created,
    Replaced,
}

/// [`write_atomic`], creating the missing parent directories first (with `dir_mode`).
pub(crate) fn write_atomic_creating(
    target: &Path,
    contents: &[u8],
    meta: &Meta,
    dir_mode: u32,
) -> Result<WriteOutcome, HostError> {
    if let Some(dir) = target.parent() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(dir_mode)
            .create(dir)
            .map_err(HostError::io(dir, "create directory"))?;
    }
    write_atomic(target, contents, meta)
}

/// The temporary name used next to `target`. It is fixed per target, so a copy left behind by a
/// crash is found and removed by the next write instead of piling up.
pub fn temp_path(target: &Path) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    target.with_file_name(format!(".{name}.nodeward-tmp"))
}

/// Writes `contents` to `target` so that readers see either the old file or the new one, never a
/// part, and a crash leaves one of the two.
///
/// Recipe: the temp file is created in the target's directory with mode 0600, given its owner and
/// label and then its final mode *before* any byte is written (a secret is never readable by anyone
/// it should not be), filled, fsynced, renamed over the target, and the directory is fsynced. When
/// the target already has exactly these contents, owner, mode and label, nothing is written at all.
pub fn write_atomic(target: &Path, contents: &[u8], meta: &Meta) -> Result<WriteOutcome, HostError> {
    let existed = match observe(target)? {
        None => false,
        Some(o) if o.kind == Kind::File => {
            if matches(target, &o, contents, meta)? {
                return Ok(WriteOutcome::Unchanged);
            }
            true
        }
        Some(o) => {
            return Err(HostError::NotAFile {
                path: target.to_path_buf(),
                found: o.kind.name(),
            });
        }
    };
    let dir = target.parent().ok_or_else(|| HostError::Io {
        path: target.to_path_buf(),
        op: "find parent directory",
        source: io::Error::from(io::ErrorKind::InvalidInput),
    })?;
    let tmp = temp_path(target);
    let result = stage(&tmp, contents, meta, Durability::Now).and_then(|()| {
        pinned::rename(&tmp, target).map_err(HostError::io(target, "rename into place"))?;
        sync_dir(dir)
    });
    if let Err(e) = result {
        let _ = pinned::unlink(&tmp);
        return Err(e);
    }
    Ok(if existed {
        WriteOutcome::Replaced
    } else {
        WriteOutcome::Created
    })
}

/// A file written under its temporary name beside `target` and not yet renamed over it: the two
/// halves of [`write_atomic`] apart, for a caller that makes many files durable with one
/// [`syncfs`] before renaming any of them.
#[must_use = "a prepared file is only a temporary file until it is committed"]
#[derive(Debug)]
pub struct Prepared {
    tmp: PathBuf,
    target: PathBuf,
}

/// Writes `contents` to `target`'s temporary name (see [`stage`]; its bytes are not flushed).
pub fn prepare_atomic(target: &Path, contents: &[u8], meta: &Meta) -> Result<Prepared, HostError> {
    let tmp = temp_path(target);
    if let Err(e) = stage(&tmp, contents, meta, Durability::Deferred) {
        let _ = pinned::unlink(&tmp);
        return Err(e);
    }
    Ok(Prepared {
        tmp,
        target: target.to_path_buf(),
    })
}

impl Prepared {
    /// Renames the file over its target. With [`Durability::Now`] the rename is made durable too
    /// (its directory fsynced); the bytes must have been flushed since [`prepare_atomic`] for the
    /// result to be the whole file after a power cut. With [`Durability::Deferred`] a later
    /// [`syncfs`] of the caller's carries both.
    pub fn commit(self, durability: Durability) -> Result<(), HostError> {
        let renamed =
            pinned::rename(&self.tmp, &self.target).map_err(HostError::io(&self.target, "rename into place"));
        let result = match (renamed, durability, self.target.parent()) {
            (Ok(()), Durability::Now, Some(dir)) => sync_dir(dir),
            (other, _, _) => other,
        };
        if result.is_err() {
            let _ = pinned::unlink(&self.tmp);
        }
        result
    }
}

/// Whether a regular file `target` (observed as `o`) already has exactly these contents, owner,
/// mode and label: the one "already matches" test every writer uses, so nothing is rewritten and
/// no mtime moves on a converged node.
pub(crate) fn matches(target: &Path, o: &Observed, contents: &[u8], meta: &Meta) -> Result<bool, HostError> {
    Ok(o.kind == Kind::File
        && (o.mode, o.uid, o.gid) == (meta.mode, meta.uid, meta.gid)
        && same_contents(target, contents)?
        && label_matches(target, meta)?)
}

/// How durable a staged file is before it is renamed into place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// fsynced now: one file, renamed right after.
    Now,
    /// Writeback started, not waited for: the caller flushes the whole filesystem once
    /// ([`syncfs`]) before any rename (a bundle's thousand files).
    Deferred,
}

/// Creates `path` as a new file (0600, never through a symlink; one left by an interrupted write
/// is replaced), gives it its owner, label and final mode *before* any byte is written, so a secret
/// is never readable by anyone it should not be, then writes `contents`.
pub(crate) fn stage(
    path: &Path,
    contents: &[u8],
    meta: &Meta,
    durability: Durability,
) -> Result<(), HostError> {
    // Created in its directory as pinned now, not by its whole path (see `pinned::Entry`).
    let entry = pinned::Entry::at(path).map_err(HostError::io(path, "create temp file"))?;
    let mut file = match entry.create_new(0o600) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            tracing::debug!(path = %path.display(), "replacing a file left by an interrupted write");
            entry
                .unlink()
                .map_err(HostError::io(path, "remove stale temp file"))?;
            entry
                .create_new(0o600)
                .map_err(HostError::io(path, "create temp file"))?
        }
        Err(e) => return Err(HostError::io(path, "create temp file")(e)),
    };
    std::os::unix::fs::fchown(&file, Some(meta.uid), Some(meta.gid)).map_err(HostError::io(path, "chown"))?;
    if let Some(label) = &meta.label {
        selinux::set_label_fd(&file, label).map_err(HostError::io(path, "set SELinux label"))?;
    }
    file.set_permissions(fs::Permissions::from_mode(meta.mode))
        .map_err(HostError::io(path, "chmod"))?;
    file.write_all(contents).map_err(HostError::io(path, "write"))?;
    match durability {
        Durability::Now => file.sync_all().map_err(HostError::io(path, "fsync")),
        Durability::Deferred => {
            // Start writeback without waiting: the device works while the next files are staged,
            // and the one syncfs at the end has little left to wait for. Only a hint.
            // SAFETY: a valid open fd; offset 0 and length 0 mean the whole file.
            unsafe { libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
            Ok(())
        }
    }
}

/// What a file created by this process gets without asking: the owner and group it is created
/// with, and the permission bits the umask lets through. Read once per install, so files whose
/// wanted owner and mode are exactly that need no `fchown` or `fchmod`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Creation {
    uid: u32,
    gid: u32,
    /// `None` when the umask cannot be read (every mode is then set explicitly).
    umask: Option<u32>,
}

impl Creation {
    pub(crate) fn of_this_process() -> Creation {
        // /proc/self/status has the umask without changing it (umask(2) can only set it).
        let status = super::read::read_path_text(Path::new("/proc/self/status"), super::read::Kind::Kernel);
        let umask = status.ok().and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        });
        Creation {
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
            umask,
        }
    }
}

/// Creates a new file inside a directory only root can enter (the stage directory of a fresh
/// install, 0700 until it is complete): nobody else can reach it, so it is created with its final
/// mode at once, and owner and label are set only where creation did not give them. `parent_setgid`:
/// the directory passes its group on, so the group is always set.
pub(crate) fn create_private(
    path: &Path,
    contents: &[u8],
    meta: &Meta,
    creation: Creation,
    parent_setgid: bool,
) -> Result<(), HostError> {
    let mut file = pinned::Entry::at(path)
        .and_then(|entry| entry.create_new(meta.mode))
        .map_err(HostError::io(path, "create file"))?;
    if (meta.uid, meta.gid) != (creation.uid, creation.gid) || parent_setgid {
        std::os::unix::fs::fchown(&file, Some(meta.uid), Some(meta.gid))
            .map_err(HostError::io(path, "chown"))?;
    }
    if let Some(label) = &meta.label {
        selinux::set_label_fd(&file, label).map_err(HostError::io(path, "set SELinux label"))?;
    }
    // Special bits are not given by open(2) alone, and chown(2) clears set-id bits.
    let given = creation.umask.map(|u| meta.mode & 0o777 & !u);
    if given != Some(meta.mode) || meta.mode & 0o7000 != 0 {
        file.set_permissions(fs::Permissions::from_mode(meta.mode))
            .map_err(HostError::io(path, "chmod"))?;
    }
    // No writeback hint here, unlike `stage`: measured on a fresh ext4, leaving the whole
    // writeback to the install's one syncfs was 10 % faster (larger, merged writes).
    file.write_all(contents).map_err(HostError::io(path, "write"))
}

/// Flushes the whole filesystem `dir` is on: every file staged there, at once.
pub(crate) fn syncfs(dir: &Path) -> Result<(), HostError> {
    let d = super::read::open_dir(dir).map_err(HostError::io(dir, "open"))?;
    nix::unistd::syncfs(&d).map_err(|e| HostError::io(dir, "syncfs")(io::Error::from(e)))
}

/// fsyncs a directory so a rename or creation in it survives a crash.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), HostError> {
    super::read::open_dir(dir)
        .and_then(|d| d.sync_all())
        .map_err(HostError::io(dir, "fsync directory"))
}

fn same_contents(path: &Path, want: &[u8]) -> Result<bool, HostError> {
    // Non-blocking and regular only: the destination may have been swapped for a FIFO.
    let mut file = super::read::open_path(path, super::read::Kind::Installed)?;
    let len = file.metadata().map_err(HostError::io(path, "stat"))?.len();
    if len != want.len() as u64 {
        return Ok(false);
    }
    let mut have = Vec::with_capacity(want.len());
    (&mut file)
        .take(want.len() as u64 + 1)
        .read_to_end(&mut have)
        .map_err(HostError::io(path, "read"))?;
    Ok(have == want)
}

fn label_matches(path: &Path, meta: &Meta) -> Result<bool, HostError> {
    match &meta.label {
        None => Ok(true),
        Some(want) => Ok(selinux::get_label(path)
            .map_err(HostError::io(path, "read SELinux label"))?
            .as_deref()
            == Some(want)),
    }
}

/// Every entry below `top` (not `top` itself) on the same filesystem, depth first, symlinks not
/// followed. Mount points below `top` (pod volumes under `/var/lib/kubelet`) are not entered, nor
/// is anything `skip` says no to; entries that vanish during the walk are left out.
pub(crate) fn walk_same_fs(top: &Path, skip: &dyn Fn(&Path) -> bool) -> Result<Vec<PathBuf>, HostError> {
    let dev = fs::symlink_metadata(top)
        .map_err(HostError::io(top, "stat"))?
        .dev();
    let gone = |e: &io::Error| e.kind() == io::ErrorKind::NotFound;
    let mut out = Vec::new();
    let mut stack = vec![top.to_path_buf()];
    while let Some(dir) = stack.pop() {
        // Pods and runtimes create and delete files all the time: what vanished mid-walk is simply
        // not there any more.
        let listing = match fs::read_dir(&dir) {
            Ok(l) => l,
            Err(e) if gone(&e) => continue,
            Err(e) => return Err(HostError::io(&dir, "read directory")(e)),
        };
        let mut entries = Vec::new();
        for e in listing {
            match e {
                Ok(e) => entries.push(e.path()),
                Err(e) if gone(&e) => {}
                Err(e) => return Err(HostError::io(&dir, "read directory")(e)),
            }
        }
        entries.sort();
        for path in entries {
            if skip(&path) {
                continue;
            }
            let meta = match fs::symlink_metadata(&path) {
                Ok(m) => m,
                Err(e) if gone(&e) => continue,
                Err(e) => return Err(HostError::io(&path, "stat")(e)),
            };
            if meta.dev() != dev {
                continue;
            }
            if meta.file_type().is_dir() {
                stack.push(path.clone());
            }
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(mode: u32) -> Meta {
        Meta {
            mode,
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
            label: None,
        }
    }

    #[test]
    fn second_identical_write_touches_nothing() {
        let t = tempfile::tempdir().expect("tempdir");
        let f = t.path().join("conf");
        assert_eq!(
            write_atomic(&f, b"a=1\n", &meta(0o640)).expect("write"),
            WriteOutcome::Created
        );
        let before = fs::metadata(&f).expect("stat");
        assert_eq!(
            write_atomic(&f, b"a=1\n", &meta(0o640)).expect("write"),
            WriteOutcome::Unchanged
        );
        let after = fs::metadata(&f).expect("stat");
        assert_eq!(before.ino(), after.ino());
        assert_eq!(before.mtime_nsec(), after.mtime_nsec());
        assert_eq!(after.mode() & 0o7777, 0o640);
        assert_eq!(
            write_atomic(&f, b"a=2\n", &meta(0o640)).expect("write"),
            WriteOutcome::Replaced
        );
        assert_eq!(fs::read(&f).expect("read"), b"a=2\n");
    }

    #[test]
    fn mode_change_alone_rewrites_and_stale_temp_is_removed() {
        let t = tempfile::tempdir().expect("tempdir");
        let f = t.path().join("key");
        fs::write(temp_path(&f), b"half").expect("stale temp");
        write_atomic(&f, b"secret", &meta(0o600)).expect("write");
        assert!(!temp_path(&f).exists());
        assert_eq!(
            write_atomic(&f, b"secret", &meta(0o400)).expect("write"),
            WriteOutcome::Replaced
        );
        assert_eq!(fs::metadata(&f).expect("stat").mode() & 0o7777, 0o400);
    }

    #[test]
    fn refuses_to_replace_a_directory() {
        let t = tempfile::tempdir().expect("tempdir");
        let err = write_atomic(t.path(), b"x", &meta(0o644)).expect_err("dir");
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }

    #[test]
    fn created_dir_has_exact_mode_despite_umask() {
        let t = tempfile::tempdir().expect("tempdir");
        let d = t.path().join("d");
        create_dir(&d, &meta(0o1777)).expect("mkdir");
        assert_eq!(fs::metadata(&d).expect("stat").mode() & 0o7777, 0o1777);
    }
}
