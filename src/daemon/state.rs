//! What the daemon tells the rest of the world: a single-instance lock, and a state file that
//! `nodeward status` reads (each step's state, the last repair, errors).

use std::path::PathBuf;
use std::time::Duration;

use crate::clock::now;

use serde::{Deserialize, Serialize};

use crate::host::HostError;
use crate::host::fs::{Meta, write_atomic};
pub use crate::host::lock::LockError;
use crate::host::lock::{self, FileLock, RUN_DIR};
use crate::plan::Report;
use crate::root::HostRoot;

/// The daemon's state as last written.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DaemonState {
    pub pid: u32,
    pub started: u64,
    /// READY=1 was sent (the first pass finished).
    pub ready: bool,
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
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepState {
    pub step: String,
    pub ok: bool,
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

/// A file under `/run/nodeward`, resolved inside the root (a `ROOT/run` symlink stays inside).
fn run_path(root: &HostRoot, name: &str) -> Result<PathBuf, HostError> {
    lock::run_path(root, name).map_err(HostError::io(RUN_DIR, "resolve"))
}

impl DaemonState {
    /// Folds one converge's report in.
    pub fn record(&mut self, report: &Report) {
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
    pub fn save(&self, root: &HostRoot) -> Result<(), HostError> {
        let path = run_path(root, crate::host::lock::DAEMON_STATE)?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(HostError::io(dir, "create directory"))?;
        }
        let bytes = serde_json::to_vec_pretty(self)
            .map_err(|e| HostError::io(&path, "serialise")(std::io::Error::other(e)))?;
        write_atomic(
            &path,
            &bytes,
            &Meta {
                mode: 0o644,
                uid: 0,
                gid: 0,
                label: None,
            },
        )
        .map(|_| ())
    }

    /// The state the running (or last) daemon wrote, if any.
    pub fn load(root: &HostRoot) -> Option<DaemonState> {
        let path = run_path(root, crate::host::lock::DAEMON_STATE).ok()?;
        let bytes = crate::host::read::read_below(root, &path, crate::host::read::Kind::State).ok()?;
        serde_json::from_slice(&bytes).ok()
    }
}

/// Held for the daemon's lifetime; a second daemon on the same root is refused.
pub(crate) struct InstanceLock {
    _lock: FileLock,
}

impl InstanceLock {
    pub fn acquire(root: &HostRoot) -> Result<InstanceLock, LockError> {
        let lock = FileLock::acquire(root, lock::INSTANCE, "daemon is running", Duration::ZERO)?;
        Ok(InstanceLock { _lock: lock })
    }
}
