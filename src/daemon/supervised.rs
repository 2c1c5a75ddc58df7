//! The kubelet's supervisor on a thread of its own, and how the loop hands it the kubelet wanted.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::inputs::{Event, Options, machine_id};
use super::notes::Note;
use crate::config::Settings;
use crate::kubelet::handoff::Handoff;
use crate::kubelet::status::SharedStatus;
use crate::kubelet::supervisor::{self, Supervisor};

/// The supervisor's thread and how to talk to it.
pub(super) struct KubeletHandle {
    pub(super) commands: tokio::sync::mpsc::UnboundedSender<supervisor::Command>,
    thread: std::thread::JoinHandle<()>,
    pub(super) status: SharedStatus,
    /// Whether a kubelet is wanted (the last spec sent was `Some`).
    pub(super) wanted: bool,
}

impl KubeletHandle {
    /// Starts the supervisor on its own thread with a single-threaded tokio runtime.
    fn spawn(
        runtime: crate::kubelet::runtime::Runtime,
        root: crate::root::HostRoot,
        events: mpsc::SyncSender<Event>,
        note: &Note,
    ) -> std::io::Result<KubeletHandle> {
        let status = SharedStatus::default();
        let (commands, rx) = tokio::sync::mpsc::unbounded_channel();
        let sup = Supervisor::new(
            runtime,
            root,
            status.clone(),
            Box::new(note.sender(&events, || Event::Kubelet)),
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let thread = std::thread::Builder::new()
            .name("kubelet".into())
            .spawn(move || rt.block_on(sup.run(rx)))?;
        Ok(KubeletHandle {
            commands,
            thread,
            status,
            wanted: false,
        })
    }

    /// Tells the supervisor to stop (and the kubelet with it, when `kubelet`), waiting at most `limit`.
    pub(super) fn stop(self, kubelet: bool, limit: Duration) {
        let _ = self.commands.send(supervisor::Command::Stop { kubelet });
        let deadline = Instant::now() + limit;
        while !self.thread.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if self.thread.is_finished() {
            let _ = self.thread.join();
        } else {
            tracing::error!("the kubelet supervisor did not finish in time");
        }
    }
}

/// Hands the wanted kubelet to the supervisor, starting the supervisor (with the engine the pass
/// found) the first time one is wanted.
pub(super) fn feed_kubelet(
    opts: &Options,
    settings: &Settings,
    handle: &mut Option<KubeletHandle>,
    want: Handoff,
    events: &mpsc::SyncSender<Event>,
    note: &Note,
) {
    if handle.is_none() {
        let (Some(_), Some(runtime)) = (&want.desired, want.runtime) else {
            return;
        };
        match KubeletHandle::spawn(runtime, opts.mode.root.clone(), events.clone(), note) {
            Ok(h) => *handle = Some(h),
            Err(e) => {
                tracing::error!(error = %e, "cannot start the kubelet supervisor");
                return;
            }
        }
    }
    if let Some(h) = handle {
        h.wanted = want.desired.is_some();
        let fleet = settings.fleet_lock.clone().and_then(|s| {
            let id = s.id(&machine_id(&opts.mode.root));
            if id.is_none() {
                tracing::warn!("fleet_lock: no machine id on this node: FleetLock not used");
            }
            id.map(|id| Box::new((s, id)))
        });
        let _ = h.commands.send(supervisor::Command::Fleet(fleet));
        let tuning = settings.kubelet.tuning;
        let _ = h
            .commands
            .send(supervisor::Command::Want(want.desired.map(Box::new), tuning));
    }
}
