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
    /// A converge pass's kubelet step worked out the kubelet wanted (the pass goes on).
    KubeletWanted(Box<crate::kubelet::handoff::Handoff>),
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

/// How long ago the system booted (`/proc/uptime`'s first field), if it can be read.
pub(super) fn uptime() -> Option<std::time::Duration> {
    use crate::host::read::{self, Kind};
    let text = read::read_path_text(std::path::Path::new("/proc/uptime"), Kind::Kernel).ok()?;
    parse_uptime(&text)
}

/// `/proc/uptime`'s first field (seconds, two decimals) as a duration.
fn parse_uptime(text: &str) -> Option<std::time::Duration> {
    let seconds: f64 = text.split_whitespace().next()?.parse().ok()?;
    (seconds.is_finite() && seconds >= 0.0).then(|| std::time::Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod uptime_tests {
    use super::parse_uptime;
    use std::time::Duration;

    #[test]
    fn uptime_is_the_first_field() {
        assert_eq!(parse_uptime("35.12 60.40\n"), Some(Duration::from_millis(35_120)));
        assert_eq!(parse_uptime(""), None);
        assert_eq!(parse_uptime("-1 0"), None);
        assert_eq!(parse_uptime("nan 0"), None);
        assert_eq!(parse_uptime("x 0"), None);
    }
}
