//! What the supervisor is told: the wanted kubelet, FleetLock's settings, an operator's request,
//! or to stop.

use super::super::spec::Desired;
use crate::kubelet::settings::Tuning;

/// What the supervisor is told.
#[derive(Debug)]
pub enum Command {
    /// The kubelet wanted now (`None`: none; a running one is stopped).
    Want(Option<Box<Desired>>, Tuning),
    /// Stop supervising; stop the kubelet too when `kubelet` is true, else leave it running for the
    /// next nodeward to adopt.
    Stop { kubelet: bool },
    /// An operator's request (`nodeward kubelet …`), answered on `Reply` once done.
    Operator(Operator, Reply),
    /// FleetLock's settings and this node's client id (`None`: off).
    Fleet(Option<Box<(crate::fleetlock::Settings, String)>>),
}

/// What an operator asks of the running kubelet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    /// Stop it gracefully and start a new container at once (no backoff, not counted as a
    /// failure); answered when the new one runs.
    Restart,
    /// Stop it gracefully and keep it stopped until `Start` (or the daemon restarts).
    Stop,
    /// Start it again after `Stop`; answered when it runs.
    Start,
    /// Try the spec held back by a rollback again (on trial, as a new spec).
    Retry,
    /// Give back the FleetLock slot kept after a rollback (the rollout may go on).
    Release,
}

/// Why a request was not carried out, in a line for the person who asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// Where an operator request's outcome goes: a line for the person who asked.
/// One answer: made by `std::sync::mpsc::sync_channel(1)`.
pub type Reply = std::sync::mpsc::SyncSender<Result<String, Refused>>;
