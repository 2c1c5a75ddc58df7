//! What the daemon's loop is started with and woken by, shared by the loop and its helpers.

use std::path::PathBuf;

use super::{control, pass, watch};
use crate::root::RunMode;

/// How the daemon was started.
pub struct Options {
    pub mode: RunMode,
    pub extra_config: Option<PathBuf>,
}

/// What wakes the main loop.
#[derive(Debug)]
pub(super) enum Event {
    Signal(i32),
    Watch(watch::Change),
    /// The kubelet's status changed.
    Kubelet,
    /// A converge pass finished on the worker thread.
    Converged(Box<pass::Outcome>),
    /// Its preflight checks, when they were due, after it.
    Checked(Box<pass::Checked>),
    /// A request over the control socket.
    Control(control::Asked),
    /// A bundle download or an image import beside the passes finished.
    BesideDone,
}

/// The node's machine id (its timers' phase), or its boot id where there is none yet (an image's
/// first boot before systemd writes it), or nothing.
pub(super) fn machine_id(root: &crate::root::HostRoot) -> String {
    use crate::host::read::{self, Kind};
    "/etc/machine-id"
        .parse()
        .ok()
        .and_then(|p| read::read_text(root, &p, Kind::System).ok())
        .filter(|id| id.trim().len() == 32)
        .or_else(|| {
            read::read_path_text(
                std::path::Path::new("/proc/sys/kernel/random/boot_id"),
                Kind::Kernel,
            )
            .ok()
        })
        .unwrap_or_default()
}
