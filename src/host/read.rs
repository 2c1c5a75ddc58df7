//! The one door for reading a file nodeward did not just write itself: configuration, the bundle,
//! cloud metadata, its own state files, certificates, kubeconfigs, the module index, modprobe.d,
//! os-release, and `/proc` and `/sys` values.
//!
//! Every read here is
//! - **inside the root**: resolved with `openat2(RESOLVE_IN_ROOT)`, so a symlink (relative or
//!   absolute) is followed inside the root and never out of it; where `openat2` is refused (an old
//!   kernel, a container's seccomp filter) the path is walked component by component by descriptor
//!   with the same rule;
//! - **non-blocking**: opened `O_NONBLOCK | O_NOCTTY`, then checked by `fstat` on the descriptor, so
//!   a FIFO (which would hold a blocking open or read forever), a device such as `/dev/zero`, a
//!   socket or a directory is a clear error naming the path and what it is, whenever it was swapped
//!   in;
//! - **bounded**: each kind of file has a size cap, enforced on the bytes read (a `/proc` file
//!   reports size 0);
//! - optionally **not through a last-component symlink** (nodeward's own state files).
//!
//! The architecture test fails when `std::fs::read*` or `File::open` appears outside this file.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat, openat2, readlinkat};
use nix::sys::stat::{Mode, SFlag, fstat};

use crate::root::HostRoot;
use crate::types::AbsPath;

/// What is read: it sets the size cap, and whether a symlink at the last component is followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A configuration fragment, a unit or a program's configuration (NetworkManager, containerd,
    /// the kubelet's).
    Config,
    /// nodeward's own state and records (state.json, the kubelet's argv record, pid and uuid
    /// files, markers): never through a symlink.
    State,
    /// afterburn's `KEY=value` cloud metadata.
    Metadata,
    /// A kubeconfig.
    Kubeconfig,
    /// A certificate or a PEM bundle.
    Certificate,
    /// A kernel module index (`modules.dep`, `modules.alias`, …): megabytes.
    ModuleIndex,
    /// A small system file: os-release, passwd and group, modprobe.d, container markers.
    System,
    /// A value under `/proc` or `/sys`.
    Kernel,
    /// The assets bundle, with its configured cap.
    Bundle(u64),
    /// nodeward's kept download of the bundle (its state): the bundle's cap, never through a
    /// symlink, and owned as [`Kind::State`] is.
    KeptBundle(u64),
    /// A file nodeward manages, compared with what it wants there (the caller bounds the read).
    Installed,
    /// A kernel module file (handed to the kernel, or decompressed under its own cap).
    Module,
    /// A container image archive shipped with the node, with its configured cap: streamed, never
    /// read whole, and held to the same owner rule as nodeward's state (an archive someone else
    /// could write would choose what the kubelet runs).
    ImageArchive(u64),
}

impl Kind {
    /// The most bytes a file of this kind may have.
    pub(crate) fn limit(self) -> u64 {
        match self {
            Kind::Config => 4 << 20,
            Kind::Kubeconfig | Kind::Certificate => 1 << 20,
            Kind::State => 4 << 20,
            Kind::Metadata => 64 << 10,
            Kind::ModuleIndex => 64 << 20,
            Kind::System => 4 << 20,
            Kind::Kernel => 1 << 20,
            Kind::Bundle(max) | Kind::KeptBundle(max) => max,
            Kind::Installed => u64::MAX,
            Kind::Module => 1 << 30,
            Kind::ImageArchive(max) => max,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Config => "configuration file",
            Kind::State => "state file",
            Kind::Metadata => "metadata file",
            Kind::Kubeconfig => "kubeconfig",
            Kind::Certificate => "certificate file",
            Kind::ModuleIndex => "module index file",
            Kind::System => "system file",
            Kind::Kernel => "kernel value",
            Kind::Bundle(_) => "bundle",
            Kind::KeptBundle(_) => "kept bundle download",
            Kind::Installed => "managed file",
            Kind::Module => "kernel module",
            Kind::ImageArchive(_) => "image archive",
        }
    }

    fn follows_last_link(self) -> bool {
        !self.is_own_state()
    }

    /// nodeward's own state: read as strictly as its configuration (StrictModes: owned by root or
    /// nodeward's user, writable by no one else), since what it says is acted on.
    fn is_own_state(self) -> bool {
        matches!(self, Kind::State | Kind::KeptBundle(_))
    }

    /// Owned by root (or nodeward's user) and writable by no one else, or refused.
    fn strict_owner(self) -> bool {
        self.is_own_state() || matches!(self, Kind::ImageArchive(_))
    }
}

/// Why a file could not be read. Each says the path once and the cause once.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{path}: does not exist")]
    Missing { path: String },
    #[error("{path}: not a regular file ({what}); only regular files are read")]
    NotRegular { path: String, what: &'static str },
    #[error("{path}: {size} bytes or more, over the {limit}-byte limit of a {kind}")]
    TooLarge {
        path: String,
        size: u64,
        limit: u64,
        kind: &'static str,
    },
    #[error("{path}: not UTF-8 text")]
    NotText { path: String },
    /// nodeward's own state that someone else could have written.
    #[error("{path}: refused: {reason} (nodeward's state must be owned by root and writable by no one else)")]
    Unsafe { path: String, reason: String },
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
}

impl ReadError {
    /// What went wrong, without the path (for a message that names it already).
    pub(crate) fn cause(&self) -> String {
        let full = self.to_string();
        let path = match self {
            ReadError::Missing { path }
            | ReadError::NotRegular { path, .. }
            | ReadError::TooLarge { path, .. }
            | ReadError::NotText { path }
            | ReadError::Unsafe { path, .. }
            | ReadError::Io { path, .. } => path,
        };
        full.strip_prefix(path.as_str())
            .and_then(|r| r.strip_prefix(": "))
            .map_or(full.clone(), str::to_owned)
    }

    /// Only this means "not there (yet)": anything else is there and wrong.
    pub(crate) fn is_missing(&self) -> bool {
        matches!(self, ReadError::Missing { .. })
    }

    /// The error as an `io::Error` of the matching kind (for callers that speak io).
    pub(crate) fn into_io(self) -> io::Error {
        match self {
            ReadError::Io { source, .. } => return source,
            // The errno kept, for callers that classify by it.
            ReadError::Missing { .. } => return io::Error::from_raw_os_error(libc::ENOENT),
            _ => {}
        }
        // The cause only: the caller's own error names the path.
        let kind = match &self {
            ReadError::Missing { .. } => io::ErrorKind::NotFound,
            ReadError::NotRegular { .. } | ReadError::TooLarge { .. } => io::ErrorKind::InvalidInput,
            ReadError::Unsafe { .. } => io::ErrorKind::PermissionDenied,
            ReadError::NotText { .. } => io::ErrorKind::InvalidData,
            ReadError::Io { source, .. } => source.kind(),
        };
        io::Error::new(kind, self.cause())
    }
}

/// Reads the host path `path` (resolved inside `root`).
pub(crate) fn read(root: &HostRoot, path: &AbsPath, kind: Kind) -> Result<Vec<u8>, ReadError> {
    read_rel(root.dir(), path.relative(), &path.to_string(), kind)
}

/// [`read`], as UTF-8 text.
pub(crate) fn read_text(root: &HostRoot, path: &AbsPath, kind: Kind) -> Result<String, ReadError> {
    text(read(root, path, kind)?, &path.to_string())
}

/// Reads a path already below the root's directory (as `HostRoot::resolve` returns it, or a
/// directory's entry joined to one), resolved inside the root again.
pub(crate) fn read_below(root: &HostRoot, below: &Path, kind: Kind) -> Result<Vec<u8>, ReadError> {
    let shown = root.display(below);
    match below.strip_prefix(root.dir()) {
        Ok(rel) => read_rel(root.dir(), rel, &shown, kind),
        Err(_) => Err(ReadError::Io {
            path: shown,
            source: io::Error::other(format!("not below the root {}", root.dir().display())),
        }),
    }
}

/// [`read_below`], as UTF-8 text.
pub(crate) fn read_below_text(root: &HostRoot, below: &Path, kind: Kind) -> Result<String, ReadError> {
    text(read_below(root, below, kind)?, &root.display(below))
}

/// A path below the root is read inside it; any other (the running kernel's module tree with
/// `--root R --kernel live`) as given.
pub(crate) fn read_inside_or_given(root: &HostRoot, path: &Path, kind: Kind) -> Result<Vec<u8>, ReadError> {
    if path.starts_with(root.dir()) {
        read_below(root, path, kind)
    } else {
        read_path(path, kind)
    }
}

/// Reads a kernel value or any path given whole (`/proc`, `/sys`, or their fixture trees in tests):
/// not confined to a root, but non-blocking, regular files only, and bounded.
pub(crate) fn read_path(path: &Path, kind: Kind) -> Result<Vec<u8>, ReadError> {
    let shown = path.display().to_string();
    let (dir, rel) = split(path);
    let file = open_in(dir, rel, &shown, kind, false)?;
    read_file(file, &shown, kind)
}

/// [`read_path`], as UTF-8 text.
pub(crate) fn read_path_text(path: &Path, kind: Kind) -> Result<String, ReadError> {
    text(read_path(path, kind)?, &path.display().to_string())
}

/// A path given whole (resolved inside the root by the caller: a bundle source, a configuration
/// fragment), read through the door. A large file is read in two halves at once: the copy out of
/// the page cache (and the faults on the fresh buffer) is CPU work, and a bundle is tens of
/// megabytes.
pub(crate) fn read_large(path: &Path, kind: Kind) -> Result<Vec<u8>, ReadError> {
    const PARALLEL_FROM: u64 = 8 << 20;
    let shown = path.display().to_string();
    let (dir, rel) = split(path);
    let file = open_in(dir, rel, &shown, kind, false)?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    if (PARALLEL_FROM..=kind.limit()).contains(&size) {
        let io = |source| ReadError::Io {
            path: shown.clone(),
            source,
        };
        if let Some(bytes) = read_halves(&file, size as usize).map_err(io)? {
            return Ok(bytes);
        }
    }
    // Small, or it changed size while being read: one sequential read, capped.
    read_file(file, &shown, kind)
}

/// `size` bytes from two threads, or `None` when the file is no longer `size` bytes long.
fn read_halves(file: &File, size: usize) -> io::Result<Option<Vec<u8>>> {
    use std::os::unix::fs::FileExt;
    // Zeroed pages come straight from the kernel: no memset before the read fills them.
    let mut buf = vec![0u8; size];
    let half = size.div_ceil(2);
    let (first, second) = buf.split_at_mut(half);
    let read = |part: &mut [u8], offset: usize| match file.read_exact_at(part, offset as u64) {
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
        other => other.map(|()| true),
    };
    let (a, b) = std::thread::scope(|s| {
        let other = s.spawn(|| read(second, half));
        let mine = read(first, 0);
        (
            mine,
            other
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("reader thread panicked"))),
        )
    });
    let mut probe = [0u8; 1];
    let grown = file.read_at(&mut probe, size as u64)? > 0;
    Ok((a? && b? && !grown).then_some(buf))
}

/// Opens a path given whole for reading: a regular file, never blocking (the caller bounds what
/// it reads).
pub(crate) fn open_path(path: &Path, kind: Kind) -> Result<File, ReadError> {
    let shown = path.display().to_string();
    let (dir, rel) = split(path);
    open_in(dir, rel, &shown, kind, false)
}

/// Opens the host path `path` (resolved inside `root`) for streaming: a regular file no larger
/// than the kind's cap when opened (the caller bounds what it reads past that).
pub(crate) fn open(root: &HostRoot, path: &AbsPath, kind: Kind) -> Result<File, ReadError> {
    let shown = path.to_string();
    let file = open_in(root.dir(), path.relative(), &shown, kind, true)?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    if size > kind.limit() {
        return Err(ReadError::TooLarge {
            path: shown,
            size,
            limit: kind.limit(),
            kind: kind.name(),
        });
    }
    Ok(file)
}

/// Opens a directory (to fsync it, or its filesystem), never through a symlink.
pub(crate) fn open_dir(dir: &Path) -> io::Result<File> {
    let fd = nix::fcntl::open(
        dir,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    Ok(File::from(fd))
}

/// The directory to open from and the name to open in it (a bare name is in the working
/// directory).
fn split(path: &Path) -> (&Path, &Path) {
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) if dir.as_os_str().is_empty() => (Path::new("."), Path::new(name)),
        (Some(dir), Some(name)) => (dir, Path::new(name)),
        _ => (Path::new("/"), path),
    }
}

fn text(bytes: Vec<u8>, path: &str) -> Result<String, ReadError> {
    String::from_utf8(bytes).map_err(|_| ReadError::NotText {
        path: path.to_owned(),
    })
}

fn read_rel(root: &Path, rel: &Path, shown: &str, kind: Kind) -> Result<Vec<u8>, ReadError> {
    let file = open_in(root, rel, shown, kind, true)?;
    read_file(file, shown, kind)
}

/// Reads at most the kind's limit from a regular file (checked by the opener).
fn read_file(file: File, shown: &str, kind: Kind) -> Result<Vec<u8>, ReadError> {
    let limit = kind.limit();
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let too_large = |size| ReadError::TooLarge {
        path: shown.to_owned(),
        size,
        limit,
        kind: kind.name(),
    };
    if size > limit {
        return Err(too_large(size));
    }
    let mut out = Vec::with_capacity(size as usize);
    let io = |source| ReadError::Io {
        path: shown.to_owned(),
        source,
    };
    (&file).take(limit + 1).read_to_end(&mut out).map_err(io)?;
    if out.len() as u64 > limit {
        return Err(too_large(out.len() as u64));
    }
    Ok(out)
}

const READ: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_NONBLOCK)
    .union(OFlag::O_NOCTTY)
    .union(OFlag::O_CLOEXEC);

/// Opens `rel` below the directory `root`, resolved inside it (`confine`) or as a plain path, and
/// checks on the descriptor that it is a regular file.
fn open_in(root: &Path, rel: &Path, shown: &str, kind: Kind, confine: bool) -> Result<File, ReadError> {
    let fail = |e: Errno| errno_error(e, shown);
    let dir = nix::fcntl::open(
        root,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(fail)?;
    let mut flags = READ;
    if !kind.follows_last_link() {
        flags |= OFlag::O_NOFOLLOW;
    }
    let resolve = if confine {
        ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS
    } else {
        ResolveFlag::RESOLVE_NO_MAGICLINKS
    };
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    let fd = match openat2(&dir, rel, OpenHow::new().flags(flags).resolve(resolve)) {
        // Refused as a system call (old kernel, seccomp): the same rule, walked by descriptor.
        Err(Errno::ENOSYS | Errno::EPERM | Errno::E2BIG) => walk(&dir, rel, flags, confine),
        other => other,
    }
    .map_err(fail)?;
    let file = regular(fd, shown)?;
    if kind.strict_owner() {
        strict_owner(&file, shown)?;
    }
    Ok(file)
}

/// StrictModes for nodeward's state: owned by root (or the user nodeward runs as) and writable by
/// no one else. A record another user could plant (`kubelet-rollout.json` naming an image and
/// mounts) is refused with its reason instead of acted on.
fn strict_owner(file: &File, shown: &str) -> Result<(), ReadError> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata().map_err(|source| ReadError::Io {
        path: shown.to_owned(),
        source,
    })?;
    let me = nix::unistd::geteuid().as_raw();
    let reason = if meta.uid() != 0 && meta.uid() != me {
        Some(format!("owned by uid {}", meta.uid()))
    } else if meta.mode() & 0o022 != 0 {
        Some(format!("mode {:04o} lets others write it", meta.mode() & 0o7777))
    } else {
        None
    };
    match reason {
        Some(reason) => Err(ReadError::Unsafe {
            path: shown.to_owned(),
            reason,
        }),
        None => Ok(()),
    }
}

/// The descriptor as a file, if it is a regular file.
fn regular(fd: OwnedFd, shown: &str) -> Result<File, ReadError> {
    let st = fstat(&fd).map_err(|e| errno_error(e, shown))?;
    let what = match SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) {
        SFlag::S_IFREG => return Ok(File::from(fd)),
        SFlag::S_IFIFO => "a FIFO",
        SFlag::S_IFCHR => "a character device",
        SFlag::S_IFBLK => "a block device",
        SFlag::S_IFSOCK => "a socket",
        SFlag::S_IFDIR => "a directory",
        SFlag::S_IFLNK => "a symbolic link",
        _ => "not a file",
    };
    Err(ReadError::NotRegular {
        path: shown.to_owned(),
        what,
    })
}

fn errno_error(e: Errno, shown: &str) -> ReadError {
    let path = shown.to_owned();
    match e {
        Errno::ENOENT => ReadError::Missing { path },
        // Opening a socket for reading.
        Errno::ENXIO => ReadError::NotRegular {
            path,
            what: "a socket",
        },
        // O_NOFOLLOW met a symlink at the last component.
        Errno::ELOOP => ReadError::NotRegular {
            path,
            what: "a symbolic link, or too many of them",
        },
        other => ReadError::Io {
            path,
            source: io::Error::from(other),
        },
    }
}

/// The most symlinks one resolution follows (the kernel's own limit).
const MAX_LINKS: usize = 40;

/// `openat2(RESOLVE_IN_ROOT)` by hand: each component opened `O_PATH | O_NOFOLLOW` from the
/// descriptor of the one before; a symlink's target is walked in its place (an absolute one from
/// the root), `..` never goes above the root. The last component is opened with `flags`.
fn walk(root: &OwnedFd, rel: &Path, flags: OFlag, confine: bool) -> nix::Result<OwnedFd> {
    let mut pending: Vec<OsString> = components(rel);
    let mut dirs: Vec<OwnedFd> = Vec::new();
    let mut links = 0;
    while let Some(name) = pending.pop() {
        if name == ".." {
            // Without confinement `..` of the start directory is a plain lookup.
            if dirs.pop().is_none() && !confine {
                dirs.push(openat(
                    root,
                    "..",
                    OFlag::O_PATH | OFlag::O_CLOEXEC,
                    Mode::empty(),
                )?);
            }
            continue;
        }
        let here = dirs.last().map_or(root.as_fd(), |d| d.as_fd());
        let node = openat(
            here,
            name.as_os_str(),
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        let is_link =
            SFlag::from_bits_truncate(fstat(&node)?.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFLNK;
        let last = pending.is_empty();
        if is_link && !(last && flags.contains(OFlag::O_NOFOLLOW)) {
            links += 1;
            if links > MAX_LINKS {
                return Err(Errno::ELOOP);
            }
            let target = PathBuf::from(readlinkat(here, name.as_os_str())?);
            if target.is_absolute() {
                if !confine {
                    return openat(root, &target, flags, Mode::empty());
                }
                dirs.clear();
            }
            pending.extend(components(&target));
            continue;
        }
        if last {
            return openat(here, name.as_os_str(), flags, Mode::empty());
        }
        dirs.push(node);
    }
    // The path named the root itself (or `.`).
    let here = dirs.last().map_or(root.as_fd(), |d| d.as_fd());
    openat(here, ".", flags, Mode::empty())
}

/// A path's normal components and `..`, last first (a stack to pop).
fn components(path: &Path) -> Vec<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_owned()),
            Component::ParentDir => Some(OsString::from("..")),
            _ => None,
        })
        .rev()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn root() -> (tempfile::TempDir, HostRoot) {
        let t = tempfile::tempdir().expect("tempdir");
        let r = HostRoot::at(t.path());
        (t, r)
    }

    fn p(s: &str) -> AbsPath {
        s.parse().expect("path")
    }

    #[test]
    fn symlinks_resolve_inside_the_root_both_ways() {
        let (t, r) = root();
        std::fs::create_dir_all(t.path().join("usr/lib")).expect("mkdir");
        std::fs::create_dir_all(t.path().join("etc")).expect("mkdir");
        std::fs::write(t.path().join("usr/lib/os-release"), "ID=test\n").expect("write");
        symlink("../usr/lib/os-release", t.path().join("etc/os-release")).expect("link");
        symlink("/usr/lib/os-release", t.path().join("etc/abs")).expect("link");
        symlink("../../../../../usr/lib/os-release", t.path().join("etc/up")).expect("link");
        for path in ["/etc/os-release", "/etc/abs", "/etc/up"] {
            assert_eq!(read_text(&r, &p(path), Kind::System).expect(path), "ID=test\n");
        }
        // The walk does the same where openat2 is refused.
        let dir = nix::fcntl::open(t.path(), OFlag::O_PATH | OFlag::O_DIRECTORY, Mode::empty()).expect("dir");
        for path in ["etc/os-release", "etc/abs", "etc/up"] {
            let fd = walk(&dir, Path::new(path), READ, true).expect(path);
            assert!(regular(fd, path).is_ok());
        }
    }

    #[test]
    fn an_absolute_link_never_leaves_the_root() {
        let (t, r) = root();
        let outside = tempfile::tempdir().expect("outside");
        std::fs::write(outside.path().join("secret"), "OUTSIDE").expect("write");
        std::fs::create_dir_all(t.path().join("run/metadata")).expect("mkdir");
        symlink(
            outside.path().join("secret"),
            t.path().join("run/metadata/afterburn"),
        )
        .expect("link");
        let err = read(&r, &p("/run/metadata/afterburn"), Kind::Metadata).expect_err("outside");
        assert!(err.is_missing(), "{err}");
        let dir = nix::fcntl::open(t.path(), OFlag::O_PATH | OFlag::O_DIRECTORY, Mode::empty()).expect("dir");
        assert_eq!(
            walk(&dir, Path::new("run/metadata/afterburn"), READ, true).err(),
            Some(Errno::ENOENT)
        );
    }

    #[test]
    fn fifos_devices_sockets_and_directories_are_refused_without_blocking() {
        let (t, r) = root();
        nix::unistd::mkfifo(&t.path().join("fifo"), Mode::from_bits_truncate(0o644)).expect("fifo");
        symlink("/dev/zero", t.path().join("zero")).expect("link");
        let _sock = std::os::unix::net::UnixListener::bind(t.path().join("sock")).expect("sock");
        std::fs::create_dir(t.path().join("dir")).expect("dir");
        // /dev/zero through the live root: a device, refused before a byte is read.
        let err = read_path(Path::new("/dev/zero"), Kind::Metadata).expect_err("device");
        assert!(err.to_string().contains("a character device"), "{err}");
        for (path, what) in [
            ("/fifo", "a FIFO"),
            ("/sock", "a socket"),
            ("/dir", "a directory"),
        ] {
            let err = read(&r, &p(path), Kind::Config).expect_err(path);
            assert!(err.to_string().contains(what), "{path}: {err}");
            assert!(!err.is_missing());
        }
        // Inside the root, /dev/zero is the root's (absent here).
        assert!(
            read(&r, &p("/zero"), Kind::Config)
                .expect_err("zero")
                .is_missing()
        );
    }

    #[test]
    fn state_files_are_never_read_through_a_symlink() {
        let (t, r) = root();
        std::fs::write(t.path().join("real.json"), "{}").expect("write");
        symlink("real.json", t.path().join("state.json")).expect("link");
        let err = read(&r, &p("/state.json"), Kind::State).expect_err("link");
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert!(read(&r, &p("/state.json"), Kind::Config).is_ok());
        let dir = nix::fcntl::open(t.path(), OFlag::O_PATH | OFlag::O_DIRECTORY, Mode::empty()).expect("dir");
        assert_eq!(
            walk(&dir, Path::new("state.json"), READ | OFlag::O_NOFOLLOW, true).err(),
            Some(Errno::ELOOP)
        );
    }

    #[test]
    fn large_files_are_read_whole_in_halves_and_capped() {
        let t = tempfile::tempdir().expect("tempdir");
        let small = t.path().join("small");
        std::fs::write(&small, b"hello").expect("write");
        assert_eq!(read_large(&small, Kind::Bundle(5)).expect("read"), b"hello");
        assert!(matches!(
            read_large(&small, Kind::Bundle(4)),
            Err(ReadError::TooLarge { size: 5, .. })
        ));
        // Large enough for the two-thread path; every byte distinct enough to catch a swapped half.
        let large = t.path().join("large");
        let bytes: Vec<u8> = (0..(9u32 << 20) + 7).map(|i| (i % 251) as u8).collect();
        std::fs::write(&large, &bytes).expect("write");
        assert!(read_large(&large, Kind::Bundle(u64::MAX)).expect("read") == bytes);
        assert!(matches!(
            read_large(&large, Kind::Bundle(1 << 20)),
            Err(ReadError::TooLarge { .. })
        ));
        assert!(
            read_large(&t.path().join("missing"), Kind::Bundle(10))
                .expect_err("missing")
                .is_missing()
        );
    }

    #[test]
    fn sizes_are_capped_and_errors_say_each_thing_once() {
        let (t, r) = root();
        std::fs::write(t.path().join("big"), vec![b'x'; 70 << 10]).expect("write");
        let err = read(&r, &p("/big"), Kind::Metadata).expect_err("too large");
        assert!(
            err.to_string()
                .contains("over the 65536-byte limit of a metadata file"),
            "{err}"
        );
        let err = read(&r, &p("/missing"), Kind::Config).expect_err("missing");
        assert_eq!(err.to_string(), "/missing: does not exist");
        std::fs::write(t.path().join("bin"), [0xff, 0xfe]).expect("write");
        assert!(matches!(
            read_text(&r, &p("/bin"), Kind::Config),
            Err(ReadError::NotText { .. })
        ));
    }
}
