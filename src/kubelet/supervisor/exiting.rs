//! An exit on its way to the journal: the restart does not wait for its code, and the journal
//! line comes when the engine gives it; and whether the system is shutting down, when no kubelet
//! is started again.

use std::time::Duration;

use tokio::task::JoinHandle;

use crate::event;
use crate::kubelet::runtime::{Runtime, RuntimeError};

/// An exit seen through the pidfd whose code the engine has not reported yet: the restart does not
/// wait for it; the exit is journalled when it comes.
pub(super) struct Exiting {
    pub(super) id: String,
    pub(super) code: CodeFrom,
    pub(super) at: u64,
    pub(super) restart_in: Duration,
}

impl Exiting {
    /// Its code, from podman's `died` event (the exit was seen at `at`, in whole seconds).
    pub(super) fn code_from_events(
        &self,
        runtime: Runtime,
    ) -> impl std::future::Future<Output = Option<i32>> + use<> {
        let (id, since) = (self.id.clone(), self.at.saturating_sub(1));
        async move { runtime.exit_code_since(&id, since).await }
    }
}

/// Where an exit's code comes from.
pub(super) enum CodeFrom {
    /// The engine's answer: its `wait` begun before the exit, or a look at its events.
    Asking(JoinHandle<Result<i32, RuntimeError>>),
    /// podman's events, not asked yet: the container was started again in place, so a `wait`
    /// begun before the exit would wait for the next one. Asked once the new kubelet is up, off
    /// the restart's path (a podman process competes with the kubelet's start for the CPU).
    Events,
}

/// systemd says the system is shutting down (an unanswered bus, or none, says it is not).
pub(super) async fn shutting_down() -> bool {
    tokio::task::spawn_blocking(crate::host::dbus::system_stopping)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

/// Journals an exit once its code is known, which may be after the restart (the exit is seen by
/// its process; the engine tells the code later): the line then says so, so that it does not read
/// as a second exit.
pub(super) fn journal_exit(e: &Exiting, code: Option<i32>) {
    let (container, restart_in) = (&e.id, e.restart_in);
    let late = crate::clock::now().saturating_sub(e.at);
    if late >= 2 {
        tracing::warn!(message_id = event::KUBELET_EXITED, %container, code = ?code, ?restart_in,
            "kubelet exited (code {code:?}) {late} s ago: restarted after {restart_in:?} (the engine gave its code just now)");
    } else {
        tracing::warn!(message_id = event::KUBELET_EXITED, %container, code = ?code, ?restart_in,
            "kubelet exited (code {code:?}): restarting it in {restart_in:?}");
    }
}
