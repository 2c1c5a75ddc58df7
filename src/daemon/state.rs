//! What the daemon tells the rest of the world: a single-instance lock, and a state file that
//! `nodeward status` reads (each step's state, the last repair, errors).

use std::path::PathBuf;
use std::time::Duration;

use crate::clock::now;

use serde::{Deserialize, Serialize};

use crate::host::HostError;
pub use crate::host::lock::LockError;
use crate::host::lock::{self, FileLock};
use crate::host::state::StateFile;
use crate::plan::Report;
use crate::root::HostRoot;

/// The process that wrote a state file: enough to tell a live writer from a dead one. A pid alone
/// is reused; with the boot id and the process's start time (clock ticks after boot, field 22 of
/// `/proc/PID/stat`) it names one process of one boot.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Writer {
    pub(crate) pid: u32,
    pub(crate) boot_id: String,
    pub(crate) start_ticks: u64,
}

impl Writer {
    /// This process.
    pub(crate) fn this_process() -> Writer {
        let pid = std::process::id();
        Writer {
            pid,
            boot_id: boot_id().unwrap_or_default(),
            start_ticks: start_ticks(pid).unwrap_or(0),
        }
    }

    /// Whether the writer still runs: same boot, and a process with its pid started when it did.
    pub(crate) fn alive(&self) -> bool {
        boot_id().is_some_and(|b| b == self.boot_id) && start_ticks(self.pid) == Some(self.start_ticks)
    }
}

fn boot_id() -> Option<String> {
    let path = std::path::Path::new("/proc/sys/kernel/random/boot_id");
    crate::host::read::read_path_text(path, crate::host::read::Kind::Kernel)
        .ok()
        .map(|s| s.trim().to_owned())
}

/// Field 22 of `/proc/PID/stat` (the name in field 2 may hold spaces and parentheses: the fields
/// after its last `)` are counted).
fn start_ticks(pid: u32) -> Option<u64> {
    let path = PathBuf::from(format!("/proc/{pid}/stat"));
    let text = crate::host::read::read_path_text(&path, crate::host::read::Kind::Kernel).ok()?;
    parse_start_ticks(&text)
}

pub(crate) fn parse_start_ticks(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19)?.parse().ok()
}

/// The daemon's state as last written.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DaemonState {
    pub pid: u32,
    /// Who wrote it (absent in files of older daemons).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) writer: Option<Writer>,
    pub started: u64,
    /// READY=1 was sent (the first pass finished).
    pub(crate) ready: bool,
    /// Starting, degraded, converged or stopping (see `daemon::lifecycle`).
    #[serde(default)]
    pub phase: crate::daemon::lifecycle::Phase,
    pub converges: u64,
    pub last_converge: u64,
    pub status: String,
    pub steps: Vec<StepState>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_repair: Option<Repair>,
    /// The supervised kubelet, when nodeward runs one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<crate::kubelet::status::KubeletStatus>,
    /// The preflight checks failing after the last converge (`nodeward check` for details).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks_failing: Vec<String>,
    /// Where each image the node needs came from, as the last checks saw (the metric
    /// `nodeward_image_source` says the same).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImageFrom>,
}

/// One image the node needs and where it came from: `shipped`, `registry`, `mirror`, `pulled`,
/// `pullable`, `missing` or `unknown`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageFrom {
    /// `kubelet` or `sandbox`.
    pub role: String,
    pub image: String,
    pub source: String,
}

impl From<&crate::check::ImageSource> for ImageFrom {
    fn from(i: &crate::check::ImageSource) -> ImageFrom {
        ImageFrom {
            role: i.role.to_owned(),
            image: i.reference.clone(),
            source: i.source.to_owned(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepState {
    pub step: String,
    pub(crate) ok: bool,
    pub changes: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The most recent change the daemon made (drift repaired, or first converge).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Repair {
    pub at: u64,
    pub step: String,
    pub subject: String,
    pub change: String,
}

impl DaemonState {
    /// Folds one converge's report in.
    pub(crate) fn record(&mut self, report: &Report) {
        self.converges += 1;
        self.last_converge = now();
        self.steps = report
            .steps
            .iter()
            .map(|s| StepState {
                step: s.step.to_string(),
                ok: s.error.is_none(),
                changes: s.applied.len(),
                error: s.error.clone(),
            })
            .collect();
        if let Some((step, change)) = report
            .steps
            .iter()
            .flat_map(|s| s.applied.iter().map(move |c| (s.step, c)))
            .last()
        {
            self.last_repair = Some(Repair {
                at: self.last_converge,
                step: step.to_string(),
                subject: change.subject.clone(),
                change: crate::plan::render::describe(&change.action),
            });
        }
    }

    /// Writes the state file atomically (0644: it holds no secrets).
    pub(crate) fn save(&self, root: &HostRoot) -> Result<(), HostError> {
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| {
            HostError::io(StateFile::DaemonState.path().to_path_buf(), "serialise")(std::io::Error::other(e))
        })?;
        StateFile::DaemonState.write(root, &bytes).map(|_| ())
    }

    /// Whether the daemon that wrote this still runs (a SIGKILLed daemon leaves its last state).
    pub fn writer_alive(&self) -> bool {
        match &self.writer {
            Some(w) => w.alive(),
            // An older daemon's file: its pid, at least.
            None => PathBuf::from(format!("/proc/{}", self.pid)).exists(),
        }
    }

    /// The state the running (or last) daemon wrote, if any.
    pub fn load(root: &HostRoot) -> Option<DaemonState> {
        Self::read(root).ok().flatten()
    }

    /// As [`DaemonState::load`], but a file that is there and cannot be read or parsed is an
    /// error saying why (`Ok(None)`: there is none).
    pub fn read(root: &HostRoot) -> Result<Option<DaemonState>, StateReadError> {
        match StateFile::DaemonState.read(root) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|source| StateReadError::Parse {
                    path: StateFile::DaemonState.path().to_string(),
                    source,
                }),
            Err(e) if e.is_missing() => Ok(None),
            Err(e) => Err(StateReadError::Read(e)),
        }
    }
}

/// Why the daemon's state file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum StateReadError {
    #[error(transparent)]
    Read(crate::host::read::ReadError),
    #[error("{path}: not a state file nodeward reads: {source}")]
    Parse {
        path: String,
        #[source]
        source: serde_json::Error,
    },
}

/// Held for the daemon's lifetime; a second daemon on the same root is refused.
pub(crate) struct InstanceLock {
    _lock: FileLock,
}

impl InstanceLock {
    pub(crate) fn acquire(root: &HostRoot) -> Result<InstanceLock, LockError> {
        let lock = FileLock::acquire(root, lock::INSTANCE, "daemon is running", Duration::ZERO)?;
        Ok(InstanceLock { _lock: lock })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_time_is_read_past_a_name_with_spaces_and_parentheses() {
        let stat = "4242 (no de) ward)) S 1 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 987654 10 1";
        assert_eq!(parse_start_ticks(stat), Some(987654));
        assert_eq!(parse_start_ticks("garbage"), None);
    }

    #[test]
    fn this_process_is_alive_and_a_dead_or_reused_pid_is_not() {
        let me = Writer::this_process();
        assert!(me.alive());
        assert!(
            !Writer {
                start_ticks: me.start_ticks + 1,
                ..me.clone()
            }
            .alive(),
            "pid reused by a later process"
        );
        assert!(
            !Writer {
                boot_id: "another-boot".into(),
                ..me.clone()
            }
            .alive()
        );
        assert!(
            !Writer {
                pid: u32::MAX - 1,
                ..me
            }
            .alive()
        );
    }
}
