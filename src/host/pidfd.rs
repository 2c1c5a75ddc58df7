//! Noticing the exit of a process that is not nodeward's child (the kubelet, whose parent is the
//! engine's monitor, conmon): a pidfd (Linux 5.3) becomes readable the instant the process exits,
//! with no polling. The engine's own `wait` still gives the exit code, later: podman's returns only
//! once its cleanup has run, about a second after the exit on an emulated CPU.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// A process being watched for its exit.
#[derive(Debug)]
pub(crate) struct ProcessExit {
    fd: AsyncFd<OwnedFd>,
}

impl ProcessExit {
    /// Starts watching `pid` (in nodeward's pid namespace). `Ok(None)` when no such process runs
    /// (it already exited). Must be called within a tokio runtime with I/O enabled.
    pub(crate) fn watch(pid: i32) -> io::Result<Option<ProcessExit>> {
        if pid <= 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("pid {pid}")));
        }
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor (close-on-exec)
        // or -1; nothing is borrowed.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::ESRCH) => Ok(None),
                _ => Err(e),
            };
        }
        let raw = i32::try_from(fd).map_err(|_| io::Error::other("pidfd out of range"))?;
        // SAFETY: `raw` was just returned by pidfd_open and is owned by nobody else.
        let owned = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: the descriptor is owned by the AsyncFd and neither replaced nor closed while
        // registered (it is closed when the AsyncFd drops).
        let fd = unsafe { AsyncFd::register_with_interest(owned, Interest::READABLE)? };
        Ok(Some(ProcessExit { fd }))
    }

    /// Resolves when the process has exited.
    pub(crate) async fn exited(self) {
        loop {
            match self.fd.readable().await {
                // A pidfd stays readable once its process is gone: no need to clear the readiness.
                Ok(_) => return,
                Err(e) => {
                    tracing::debug!(error = %e, "pidfd poll failed; retrying");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn notices_the_exit_of_a_process_it_did_not_start_and_knows_a_gone_one() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            // Started by std, so tokio's child reaper has nothing to do with it.
            let mut child = std::process::Command::new("sleep")
                .arg("30")
                .spawn()
                .expect("sleep");
            let pid = i32::try_from(child.id()).expect("pid");
            let watch = ProcessExit::watch(pid).expect("pidfd").expect("running");
            let waiter = tokio::spawn(watch.exited());
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert!(!waiter.is_finished(), "reported an exit while the process runs");
            // Noticed while still a zombie: nodeward is not the parent that reaps it.
            child.kill().expect("kill");
            tokio::time::timeout(Duration::from_secs(10), waiter)
                .await
                .expect("exit noticed")
                .expect("join");
            child.wait().expect("reap");
            assert!(ProcessExit::watch(pid).expect("gone").is_none());
            assert!(ProcessExit::watch(0).is_err());
        });
    }
}
