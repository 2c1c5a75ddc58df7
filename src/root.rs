//! The one root-aware layer every host path goes through.
//!
//! `nodeward --root DIR` points the agent at an image tree instead of the running system, the way
//! `systemd-tmpfiles --root` does. Paths in configuration are always *host* paths (`/etc/kubernetes`);
//! this module turns them into paths to touch, following symlinks the way the host would see them
//! (an absolute link target is resolved inside the root, `..` never climbs above it). That matters on
//! Fedora CoreOS, where `/opt` is a link to `var/opt`, and for image builds, where a link such as
//! `/var/run -> /run` must not send the agent into the build machine's own `/run`.

use std::io;
use std::path::{Component, Path, PathBuf};

use crate::types::AbsPath;

/// How many symlinks one resolution may follow, as the kernel's `MAXSYMLINKS`.
const MAX_SYMLINKS: usize = 40;

/// Where the agent's host lives: the running system (`/`) or a directory standing in for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRoot {
    dir: PathBuf,
}

/// Where the running kernel's `/proc` and `/sys` are read and written: `/` on a node, a fixture
/// tree in tests. Kernel state belongs to the kernel, not to the image tree `--root` names, so the
/// two roots are separate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelRoot {
    dir: PathBuf,
}

impl KernelRoot {
    /// The running kernel.
    pub fn live() -> KernelRoot {
        KernelRoot {
            dir: PathBuf::from("/"),
        }
    }

    /// A directory laid out as `/` would be (`proc/sys/…`, `sys/module/…`, `lib/modules/…`).
    #[cfg(test)]
    pub(crate) fn at(dir: impl Into<PathBuf>) -> KernelRoot {
        KernelRoot { dir: dir.into() }
    }

    /// `rel` (such as `proc/sys/net`) under this root.
    pub(crate) fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }
}

/// How a run touches the world, made once at the edge (the command line, a test's fixture) and
/// passed down unchanged: where the host's files are, where the kernel's are, and which live state
/// is read and changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunMode {
    pub root: HostRoot,
    pub kernel: KernelRoot,
    /// Kernel state (sysctls, modules) is read and changed: the running system, or `--root` with
    /// `--kernel live` (tests in a private network namespace).
    pub kernel_live: bool,
    /// The kubelet container is inspected and started: the running system, or `--root` with
    /// `--containers live` (tests with a stand-in engine).
    pub containers_live: bool,
}

impl RunMode {
    /// A tree standing in for `/` and nothing live (an image build).
    pub fn tree(root: HostRoot) -> RunMode {
        RunMode {
            root,
            kernel: KernelRoot::live(),
            kernel_live: false,
            containers_live: false,
        }
    }
}

/// A path could not be resolved inside the root.
#[derive(Debug, thiserror::Error)]
pub enum RootError {
    #[error("{path}: too many levels of symbolic links")]
    SymlinkLoop { path: String },
    #[error("{path}: cannot inspect {at}: {source}")]
    Io {
        path: String,
        at: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
}

impl HostRoot {
    /// The running system.
    pub fn live() -> Self {
        HostRoot {
            dir: PathBuf::from("/"),
        }
    }

    /// A directory standing in for `/` (image builds, tests, demos).
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        let dir = dir.into();
        if dir == Path::new("/") {
            return Self::live();
        }
        HostRoot { dir }
    }

    /// True when this is the running system, so kernel state (sysctls, modules, D-Bus) is real.
    pub fn is_live(&self) -> bool {
        self.dir == Path::new("/")
    }

    /// The directory that stands for `/`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path under the root without following any link: for display and for files the agent
    /// creates itself in directories it has already resolved.
    pub(crate) fn lexical(&self, path: &AbsPath) -> PathBuf {
        self.dir.join(path.relative())
    }

    /// Resolves a host path to the path to touch, following symlinks inside the root. Components
    /// that do not exist yet are appended as they are, so the result is also where to create them.
    pub fn resolve(&self, path: &AbsPath) -> Result<PathBuf, RootError> {
        // `pending` holds the components still to walk, last component at the end of the vector.
        let mut pending: Vec<std::ffi::OsString> = path
            .relative()
            .components()
            .rev()
            .map(|c| c.as_os_str().to_owned())
            .collect();
        // `done` holds the resolved components below the root.
        let mut done: Vec<std::ffi::OsString> = Vec::new();
        let mut links = 0;
        while let Some(name) = pending.pop() {
            if name == ".." {
                done.pop();
                continue;
            }
            if name == "." || name.is_empty() {
                continue;
            }
            let candidate = self.join_parts(&done).join(&name);
            match std::fs::symlink_metadata(&candidate) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    links += 1;
                    if links > MAX_SYMLINKS {
                        return Err(RootError::SymlinkLoop {
                            path: path.to_string(),
                        });
                    }
                    let target = std::fs::read_link(&candidate).map_err(|source| RootError::Io {
                        path: path.to_string(),
                        at: candidate.clone(),
                        source,
                    })?;
                    if target.is_absolute() {
                        done.clear();
                    }
                    for comp in target.components().rev() {
                        match comp {
                            Component::RootDir | Component::Prefix(_) => {}
                            other => pending.push(other.as_os_str().to_owned()),
                        }
                    }
                }
                Ok(_) => done.push(name),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    done.push(name);
                    // Nothing below a missing component can be a link: append the rest as is.
                    while let Some(rest) = pending.pop() {
                        if rest == ".." {
                            done.pop();
                        } else if rest != "." && !rest.is_empty() {
                            done.push(rest);
                        }
                    }
                }
                Err(source) => {
                    return Err(RootError::Io {
                        path: path.to_string(),
                        at: candidate,
                        source,
                    });
                }
            }
        }
        Ok(self.join_parts(&done))
    }

    /// Resolves the directory part of a path and appends the final component *unresolved*: the
    /// path of a file to create, replace or inspect itself. A symlink at the final component stays
    /// a symlink (and is refused by the writers) instead of redirecting the write elsewhere.
    /// [`resolve_parent`](Self::resolve_parent) for a path given as text (built-in constants and
    /// validated configuration values).
    pub(crate) fn resolve_str(&self, path: &str) -> Result<PathBuf, RootError> {
        let abs: AbsPath = path
            .parse()
            .map_err(|e: crate::types::Invalid| RootError::Invalid {
                path: path.to_owned(),
                message: e.0,
            })?;
        self.resolve_parent(&abs)
    }

    pub(crate) fn resolve_parent(&self, path: &AbsPath) -> Result<PathBuf, RootError> {
        match (path.parent(), path.as_path().file_name()) {
            (Some(parent), Some(name)) => Ok(self.resolve(&parent)?.join(name)),
            _ => self.resolve(path),
        }
    }

    /// Shows a resolved path as the host would name it (the root prefix removed).
    pub(crate) fn display(&self, resolved: &Path) -> String {
        if self.is_live() {
            return resolved.display().to_string();
        }
        match resolved.strip_prefix(&self.dir) {
            Ok(rel) => format!("/{}", rel.display()),
            Err(_) => resolved.display().to_string(),
        }
    }

    /// A path below the root (as `resolve` returns, or a directory's entry joined to one) with its
    /// symlinks resolved inside the root again: a file that is a symlink to an absolute path is
    /// then read from the image under `--root`, never from the machine running nodeward.
    pub(crate) fn resolve_below(&self, below: &Path) -> std::io::Result<PathBuf> {
        if self.is_live() {
            return Ok(below.to_path_buf());
        }
        let rel = below
            .strip_prefix(&self.dir)
            .map_err(|_| std::io::Error::other(format!("{} is not below the root", below.display())))?;
        let abs: AbsPath = format!("/{}", rel.display())
            .parse()
            .map_err(|e: crate::types::Invalid| std::io::Error::other(e.0))?;
        self.resolve(&abs).map_err(std::io::Error::other)
    }

    fn join_parts(&self, parts: &[std::ffi::OsString]) -> PathBuf {
        let mut p = self.dir.clone();
        p.extend(parts);
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn abs(s: &str) -> AbsPath {
        s.parse().expect("valid test path")
    }

    #[test]
    fn missing_paths_resolve_lexically() {
        let t = tempfile::tempdir().expect("tempdir");
        let root = HostRoot::at(t.path());
        assert_eq!(
            root.resolve(&abs("/etc/kubernetes/pki")).expect("resolve"),
            t.path().join("etc/kubernetes/pki")
        );
    }

    #[test]
    fn absolute_links_stay_inside_the_root() {
        let t = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(t.path().join("var/opt")).expect("mkdir");
        // As on Fedora CoreOS, but absolute: must land in ROOT/var/opt, never in the build host's.
        symlink("/var/opt", t.path().join("opt")).expect("symlink");
        let root = HostRoot::at(t.path());
        assert_eq!(
            root.resolve(&abs("/opt/cni/bin")).expect("resolve"),
            t.path().join("var/opt/cni/bin")
        );
    }

    #[test]
    fn relative_links_and_dotdot_cannot_climb_out() {
        let t = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(t.path().join("var")).expect("mkdir");
        symlink("../../../../run", t.path().join("var/run")).expect("symlink");
        let root = HostRoot::at(t.path());
        assert_eq!(
            root.resolve(&abs("/var/run/lock")).expect("resolve"),
            t.path().join("run/lock")
        );
    }

    #[test]
    fn resolve_parent_leaves_the_final_symlink_alone() {
        let t = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(t.path().join("var/opt")).expect("mkdir");
        symlink("/var/opt", t.path().join("opt")).expect("symlink");
        symlink("/etc/shadow", t.path().join("var/opt/file")).expect("symlink");
        let root = HostRoot::at(t.path());
        assert_eq!(
            root.resolve_parent(&abs("/opt/file")).expect("resolve"),
            t.path().join("var/opt/file")
        );
        assert_eq!(
            root.resolve(&abs("/opt/file")).expect("resolve"),
            t.path().join("etc/shadow")
        );
    }

    #[test]
    fn symlink_loops_are_errors() {
        let t = tempfile::tempdir().expect("tempdir");
        symlink("/b", t.path().join("a")).expect("symlink");
        symlink("/a", t.path().join("b")).expect("symlink");
        let root = HostRoot::at(t.path());
        let err = root.resolve(&abs("/a/x")).expect_err("loop");
        assert!(err.to_string().contains("too many levels"), "{err}");
    }

    #[test]
    fn display_strips_the_root() {
        let root = HostRoot::at("/tmp/r");
        assert_eq!(root.display(Path::new("/tmp/r/etc/x")), "/etc/x");
        assert_eq!(HostRoot::live().display(Path::new("/etc/x")), "/etc/x");
    }
}
