//! The kubelet: its spec, its configuration file, the runtimes that run it and the supervisor that
//! keeps it running.

pub mod backoff;
pub mod config_file;
pub mod runtime;
pub mod spec;
pub mod supervisor;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use runtime::{Runtime, RuntimeError};
use supervisor::{Desired, Supervisor, Tuning};

use crate::root::HostRoot;

/// Runs a future to completion on a small runtime of its own (for the one-shot commands).
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt.block_on(future),
        // Building a current-thread runtime only fails when the process is out of resources.
        Err(e) => panic!("cannot build a tokio runtime: {e}"),
    }
}

/// A start, stale-container replacement or replacement done once by `nodeward apply`.
#[derive(Debug, Clone)]
pub struct OneShot {
    pub runtime: Runtime,
    pub desired: Desired,
    pub grace: Duration,
    pub root: HostRoot,
}

impl OneShot {
    /// Brings the container to the wanted spec (without supervising it afterwards).
    pub fn apply(&self) -> Result<(), RuntimeError> {
        let supervisor = Supervisor::new(
            self.runtime.clone(),
            self.root.clone(),
            Arc::new(Mutex::new(supervisor::KubeletStatus::default())),
            Box::new(|| {}),
        );
        let tuning = Tuning {
            stop_grace: self.grace,
            ..Tuning::from_input(&crate::config::kubelet::KubeletInput::default())
        };
        block_on(supervisor.ensure_started(&self.desired, &tuning)).map(|_| ())
    }
}
