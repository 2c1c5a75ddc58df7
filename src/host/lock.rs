//! Advisory locks under `/run/nodeward`, resolved below `--root` like every other host path.
//!
//! Two locks with two jobs:
//! - `lock`: held by the daemon for its whole life; a second daemon is refused at once.
//! - `write.lock`: held by whoever changes the node (each converge, `apply`, `bundle install`,
//!   `bundle recover`) for as long as it changes it, so two writers never interleave. Others wait
//!   for it, up to a bound, rather than fail: the daemon holds it only while converging.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::fcntl::{Flock, FlockArg};

use super::state::StateFile;
use crate::root::HostRoot;

/// The daemon's single-instance lock.
pub(crate) const INSTANCE: &str = "lock";
/// The lock every writer holds while it changes the node.
pub const WRITE: &str = "write.lock";

/// Why a lock was not had.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("another nodeward {what} ({holder}; lock {})", path.display())]
    Held {
        what: &'static str,
        holder: String,
        path: PathBuf,
    },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A held lock; released when dropped (or when the process dies: flock is per open file).
#[derive(Debug)]
pub struct FileLock {
    _lock: Flock<File>,
}

/// How long a one-shot command waits for a converge in progress to release the write lock.
pub const ONE_SHOT_WAIT: Duration = Duration::from_secs(120);

impl FileLock {
    /// Takes the lock `name`, waiting up to `wait` (zero: not at all) for its holder to let go.
    /// `what` names the holder's kind in the refusal ("daemon is running", "is changing the node").
    pub fn acquire(
        root: &HostRoot,
        name: &str,
        what: &'static str,
        wait: Duration,
    ) -> Result<FileLock, LockError> {
        let file = StateFile::Lock(name.to_owned());
        let path = file.resolve(root).map_err(|e| LockError::Io {
            path: file.path().to_path_buf(),
            source: std::io::Error::other(e.to_string()),
        })?;
        let io = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let deadline = Instant::now() + wait;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            // Never blocking: a FIFO planted at the name would hold the holder's read below.
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open(&path)
            .map_err(io)?;
        if !file.metadata().map_err(io)?.is_file() {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file; a lock file must be one",
            )));
        }
        let mut lock = loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(l) => break l,
                Err((mut back, _)) if Instant::now() >= deadline => {
                    let mut holder = String::new();
                    let _ = back.read_to_string(&mut holder);
                    let holder = match holder.trim() {
                        "" => "pid unknown".to_owned(),
                        pid => format!("pid {pid}"),
                    };
                    return Err(LockError::Held { what, holder, path });
                }
                Err((back, _)) => {
                    file = back;
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        };
        lock.set_len(0).map_err(io)?;
        lock.rewind().map_err(io)?;
        write!(lock, "{}", std::process::id()).map_err(io)?;
        Ok(FileLock { _lock: lock })
    }

    /// The write lock, for a one-shot command: waits up to [`ONE_SHOT_WAIT`] for a converge in
    /// progress.
    pub fn writer(root: &HostRoot) -> Result<FileLock, LockError> {
        FileLock::acquire(root, WRITE, "is changing this node", ONE_SHOT_WAIT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_names_its_holder_and_is_released_on_drop() {
        let t = tempfile::tempdir().expect("tempdir");
        let root = HostRoot::at(t.path());
        let held = FileLock::acquire(&root, WRITE, "is changing this node", Duration::ZERO).expect("lock");
        // flock is per open file description: a second open in this process conflicts too.
        let err = FileLock::acquire(&root, WRITE, "is changing this node", Duration::from_millis(60))
            .expect_err("held");
        assert!(
            err.to_string().contains(&format!(
                "another nodeward is changing this node (pid {};",
                std::process::id()
            )),
            "{err}"
        );
        drop(held);
        FileLock::acquire(&root, WRITE, "is changing this node", Duration::ZERO).expect("free again");
    }

    #[test]
    fn a_run_symlink_does_not_lead_out_of_the_root() {
        let t = tempfile::tempdir().expect("tempdir");
        let outside = tempfile::tempdir().expect("outside");
        std::os::unix::fs::symlink(outside.path(), t.path().join("run")).expect("symlink");
        let root = HostRoot::at(t.path());
        let _l = FileLock::acquire(&root, INSTANCE, "daemon is running", Duration::ZERO).expect("lock");
        assert!(
            std::fs::read_dir(outside.path()).expect("ls").next().is_none(),
            "nothing may be written outside the root"
        );
    }
}
