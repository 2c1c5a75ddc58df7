//! The kubelet container brought to the planned state once, by `nodeward apply` (the daemon's
//! supervisor does the same and then keeps it running).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::block_on;
use super::decide::Seen;
use super::executor::Executor;
use super::runtime::{Runtime, RuntimeError};
use super::spec::Desired;
use super::status::KubeletStatus;
use crate::kubelet::settings::Tuning;
use crate::plan::KubeletOp;
use crate::root::HostRoot;

/// A start, stale-container replacement or replacement decided by `plan` and done once by
/// `nodeward apply`.
#[derive(Debug, Clone)]
pub struct OneShot {
    pub runtime: Runtime,
    pub desired: Desired,
    pub grace: Duration,
    pub root: HostRoot,
    /// What was decided, and about which container.
    pub op: Option<KubeletOp>,
    pub seen: Seen,
}

impl OneShot {
    /// Carries the decision out (without supervising the container afterwards), provided the
    /// container is still the one it was made about.
    pub fn apply(&self) -> Result<(), RuntimeError> {
        let executor = Executor::new(
            self.runtime.clone(),
            self.root.clone(),
            Arc::new(Mutex::new(KubeletStatus::default())),
            Box::new(|| {}),
        );
        let tuning = Tuning {
            stop_grace: self.grace,
            ..Tuning::default()
        };
        block_on(executor.execute_planned(&self.desired, &tuning, self.op, &self.seen)).map(|_| ())
    }
}
