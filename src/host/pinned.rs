//! Changing metadata on exactly the object that was planned.
//!
//! A plan names paths; between planning and applying, anyone who owns a directory on the way can
//! swap an entry for a symlink, and a path-based chmod, chown or setxattr would then follow it out
//! of the tree. So every metadata change first *pins* its object: `openat2(O_PATH | O_NOFOLLOW,
//! RESOLVE_NO_SYMLINKS)` refuses a path with any symlink in it (targets are already resolved below
//! `--root`, so a symlink there now was not there when planned). The change then acts on that
//! descriptor: `fchownat(AT_EMPTY_PATH)`, and chmod/setxattr through `/proc/self/fd/N`, which names
//! the pinned inode itself and is never resolved again.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat2};

use super::HostError;

/// What kind of thing sits at a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Symlink,
    Other,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Dir => "directory",
            Kind::File => "regular file",
            Kind::Symlink => "symlink",
            Kind::Other => "special file",
        }
    }
}

/// An object pinned by descriptor.
#[derive(Debug)]
pub(crate) struct Pinned {
    fd: OwnedFd,
    path: PathBuf,
}

/// Why an object could not be pinned.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PinError {
    /// Nothing there any more.
    #[error("{}: vanished since it was planned", .0.display())]
    Gone(PathBuf),
    #[error("{}: a symlink now stands on its path (refusing to follow it)", .0.display())]
    Symlink(PathBuf),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl From<PinError> for HostError {
    fn from(e: PinError) -> HostError {
        match e {
            PinError::Io { path, source } => HostError::Io {
                path,
                op: "open",
                source,
            },
            other => HostError::Changed {
                message: other.to_string(),
            },
        }
    }
}

/// Pins the object at `path` (absolute), refusing any symlink on the way or at the end.
pub(crate) fn pin(path: &Path) -> Result<Pinned, PinError> {
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS);
    let fd = match openat2(nix::fcntl::AT_FDCWD, path, how) {
        Ok(fd) => fd,
        // Kernels before 5.6: walk the components with O_NOFOLLOW instead.
        Err(Errno::ENOSYS) => walk(path)?,
        Err(e) => return Err(classify(path, e)),
    };
    let pinned = Pinned {
        fd,
        path: path.to_path_buf(),
    };
    // O_PATH|O_NOFOLLOW opens a final symlink itself rather than failing.
    if pinned.kind()? == Kind::Symlink {
        return Err(PinError::Symlink(path.to_path_buf()));
    }
    Ok(pinned)
}

fn classify(path: &Path, e: Errno) -> PinError {
    match e {
        Errno::ENOENT => PinError::Gone(path.to_path_buf()),
        Errno::ELOOP | Errno::ENOTDIR => PinError::Symlink(path.to_path_buf()),
        other => PinError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::from(other),
        },
    }
}

fn walk(path: &Path) -> Result<OwnedFd, PinError> {
    let mut dir = nix::fcntl::open(
        "/",
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|e| classify(path, e))?;
    let parts: Vec<_> = path.components().skip(1).collect();
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        let mut flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        if !last {
            flags |= OFlag::O_DIRECTORY;
        }
        dir = nix::fcntl::openat(
            dir.as_fd(),
            part.as_os_str(),
            flags,
            nix::sys::stat::Mode::empty(),
        )
        .map_err(|e| classify(path, e))?;
    }
    Ok(dir)
}

impl Pinned {
    /// `/proc/self/fd/N`: names the pinned inode without resolving the original path again.
    fn proc_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
    }

    fn io(&self, op: &'static str) -> impl FnOnce(std::io::Error) -> HostError + '_ {
        move |source| HostError::Io {
            path: self.path.clone(),
            op,
            source,
        }
    }

    pub(crate) fn kind(&self) -> Result<Kind, PinError> {
        let st = nix::sys::stat::fstat(self.fd.as_fd()).map_err(|e| PinError::Io {
            path: self.path.clone(),
            source: e.into(),
        })?;
        Ok(match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => Kind::Dir,
            libc::S_IFREG => Kind::File,
            libc::S_IFLNK => Kind::Symlink,
            _ => Kind::Other,
        })
    }

    /// Sets the permission bits exactly.
    pub(crate) fn set_mode(&self, mode: u32) -> Result<(), HostError> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(self.proc_path(), std::fs::Permissions::from_mode(mode))
            .map_err(self.io("chmod"))
    }

    pub(crate) fn set_owner(&self, uid: u32, gid: u32) -> Result<(), HostError> {
        nix::unistd::fchownat(
            self.fd.as_fd(),
            "",
            Some(nix::unistd::Uid::from_raw(uid)),
            Some(nix::unistd::Gid::from_raw(gid)),
            nix::fcntl::AtFlags::AT_EMPTY_PATH,
        )
        .map_err(|e| (self.io("chown"))(e.into()))
    }

    pub(crate) fn set_label(&self, context: &str) -> Result<(), HostError> {
        // setxattr(2), not lsetxattr: the magic link must be followed to the pinned inode (it is
        // never resolved by name again, so this follows nothing else).
        let path = std::ffi::CString::new(self.proc_path().into_os_string().into_encoded_bytes())
            .map_err(|e| (self.io("set SELinux label"))(std::io::Error::other(e)))?;
        let name = std::ffi::CString::new(super::selinux::XATTR)
            .map_err(|e| (self.io("set SELinux label"))(std::io::Error::other(e)))?;
        let mut value = context.as_bytes().to_vec();
        value.push(0);
        // SAFETY: valid NUL-terminated strings and a buffer of the given length, for the call.
        let rc = unsafe {
            libc::setxattr(
                path.as_ptr(),
                name.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                0,
            )
        };
        if rc != 0 {
            return Err((self.io("set SELinux label"))(std::io::Error::last_os_error()));
        }
        Ok(())
    }
}

/// An entry named in a directory pinned by descriptor: creating, removing or renaming it acts on
/// that directory, whatever its path leads to by then. A stage file created, or renamed into place,
/// by its whole path would follow a directory its non-root owner swapped for a symlink meanwhile
/// (root creating a file chowned to that user anywhere, or renaming over any file): each of these
/// resolves the path once, with no symlink allowed on it, and names the entry relative to that.
#[derive(Debug)]
pub(crate) struct Entry {
    dir: OwnedFd,
    name: std::ffi::OsString,
}

impl Entry {
    /// The entry at `path` (absolute), its directory pinned now.
    pub(crate) fn at(path: &Path) -> std::io::Result<Entry> {
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{}: no parent directory", path.display()),
            ));
        };
        let how = OpenHow::new()
            .flags(OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
            .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS);
        let dir = match openat2(nix::fcntl::AT_FDCWD, parent, how) {
            Ok(fd) => fd,
            Err(Errno::ENOSYS) => walk(parent).map_err(|e| swapped(path, e))?,
            Err(e) => return Err(swapped(path, classify(parent, e))),
        };
        Ok(Entry {
            dir,
            name: name.to_owned(),
        })
    }

    /// Creates it as a new regular file, never through a symlink (`O_EXCL | O_NOFOLLOW`).
    pub(crate) fn create_new(&self, mode: u32) -> std::io::Result<std::fs::File> {
        let fd = nix::fcntl::openat(
            self.dir.as_fd(),
            self.name.as_os_str(),
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::from_bits_truncate(mode),
        )?;
        Ok(std::fs::File::from(fd))
    }

    /// Removes it (a file or a symlink; never what a symlink points to).
    pub(crate) fn unlink(&self) -> std::io::Result<()> {
        nix::unistd::unlinkat(
            self.dir.as_fd(),
            self.name.as_os_str(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        )
        .map_err(std::io::Error::from)
    }

    /// Renames it over `to` (each in its own pinned directory).
    pub(crate) fn rename_to(&self, to: &Entry) -> std::io::Result<()> {
        nix::fcntl::renameat(
            self.dir.as_fd(),
            self.name.as_os_str(),
            to.dir.as_fd(),
            to.name.as_os_str(),
        )
        .map_err(std::io::Error::from)
    }
}

/// `from` renamed over `to`, each by its pinned directory.
pub(crate) fn rename(from: &Path, to: &Path) -> std::io::Result<()> {
    Entry::at(from)?.rename_to(&Entry::at(to)?)
}

/// `path` removed by its pinned directory.
pub(crate) fn unlink(path: &Path) -> std::io::Result<()> {
    Entry::at(path)?.unlink()
}

/// A pin refusal as an I/O error naming the entry (its kind kept: a vanished directory is
/// `NotFound`, as a path-based call would say).
fn swapped(path: &Path, e: PinError) -> std::io::Error {
    match e {
        PinError::Gone(_) => std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{}: its directory vanished", path.display()),
        ),
        PinError::Symlink(_) => std::io::Error::other(format!(
            "{}: a symlink now stands on the path to it (refusing to follow it)",
            path.display()
        )),
        PinError::Io { source, .. } => source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_symlink_anywhere_on_the_path_is_refused() {
        let t = tempfile::tempdir().expect("tempdir");
        let outside = tempfile::tempdir().expect("outside");
        std::fs::create_dir_all(t.path().join("a/b")).expect("mkdir");
        let pinned = pin(&t.path().join("a/b")).expect("pin");
        pinned.set_mode(0o700).expect("chmod");
        assert_eq!(
            std::fs::metadata(t.path().join("a/b"))
                .expect("stat")
                .permissions()
                .mode()
                & 0o777,
            0o700
        );

        // The final component swapped for a link, and an inner one.
        std::fs::remove_dir(t.path().join("a/b")).expect("rmdir");
        std::os::unix::fs::symlink(outside.path(), t.path().join("a/b")).expect("symlink");
        assert!(matches!(pin(&t.path().join("a/b")), Err(PinError::Symlink(_))));
        std::fs::create_dir(outside.path().join("c")).expect("mkdir");
        assert!(matches!(pin(&t.path().join("a/b/c")), Err(PinError::Symlink(_))));
        assert!(matches!(pin(&t.path().join("a/nothing")), Err(PinError::Gone(_))));
        assert!(matches!(
            walk(&t.path().join("a/b/c")).map(|_| ()),
            Err(PinError::Symlink(_))
        ));
    }

    #[test]
    fn entries_are_created_renamed_and_removed_in_the_directory_pinned_not_through_a_swap() {
        let t = tempfile::tempdir().expect("tempdir");
        let outside = tempfile::tempdir().expect("outside");
        std::fs::create_dir(t.path().join("d")).expect("mkdir");
        let stage = Entry::at(&t.path().join("d/.f.stage")).expect("pin");
        // The directory swapped for a link after the pin: the file lands in the pinned one.
        std::fs::rename(t.path().join("d"), t.path().join("moved")).expect("mv");
        std::os::unix::fs::symlink(outside.path(), t.path().join("d")).expect("symlink");
        stage.create_new(0o600).expect("create");
        assert!(t.path().join("moved/.f.stage").exists());
        assert!(std::fs::read_dir(outside.path()).expect("dir").next().is_none());
        // Pinned now, through the link: refused, naming it; nothing renamed or removed outside.
        std::fs::write(outside.path().join("f"), "keep").expect("write");
        let err = rename(&t.path().join("d/.f.stage"), &t.path().join("d/f")).unwrap_err();
        assert!(
            err.to_string().contains("a symlink now stands on the path"),
            "{err}"
        );
        assert!(unlink(&t.path().join("d/f")).is_err());
        assert_eq!(
            std::fs::read_to_string(outside.path().join("f")).expect("read"),
            "keep"
        );
        // Control: the same calls on the real directory.
        rename(&t.path().join("moved/.f.stage"), &t.path().join("moved/f")).expect("rename");
        unlink(&t.path().join("moved/f")).expect("unlink");
        assert!(
            std::fs::read_dir(t.path().join("moved"))
                .expect("dir")
                .next()
                .is_none()
        );
        let gone = rename(&t.path().join("nothing/a"), &t.path().join("nothing/b")).unwrap_err();
        assert_eq!(gone.kind(), std::io::ErrorKind::NotFound);
    }

    #[test]
    fn a_pinned_object_is_changed_even_after_its_path_is_swapped() {
        let t = tempfile::tempdir().expect("tempdir");
        let outside = tempfile::tempdir().expect("outside");
        std::fs::create_dir(t.path().join("d")).expect("mkdir");
        let pinned = pin(&t.path().join("d")).expect("pin");
        std::fs::rename(t.path().join("d"), t.path().join("moved")).expect("mv");
        std::os::unix::fs::symlink(outside.path(), t.path().join("d")).expect("symlink");
        pinned.set_mode(0o711).expect("chmod");
        let moved = std::fs::metadata(t.path().join("moved"))
            .expect("stat")
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(moved, 0o711, "the pinned directory changed");
        let out = std::fs::metadata(outside.path())
            .expect("stat")
            .permissions()
            .mode()
            & 0o777;
        assert_ne!(out, 0o711, "the link's target did not");
    }
}
