//! What the supervisor keeps of FleetLock between events: the settings, the slot held, the
//! request in flight and when to try again.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::command::Reply;
use crate::fleetlock::Settings;
use crate::fleetlock::client::{LockError, Op};
use crate::fleetlock::held::Held;
use crate::kubelet::status::FleetLockStatus;

/// The longest wait between two lock or release attempts: 30 × `fleet_lock.retry_seconds`, at
/// most 5 minutes (a waiting fleet polls its lock server at a bounded rate, and a freed slot is
/// seen by one of many waiters within seconds).
const MAX_LOCK_RETRY: Duration = Duration::from_secs(300);

/// A lock or release request running beside the supervisor's loop.
pub(crate) struct InFlight {
    pub(crate) op: Op,
    /// Where it went and as whom: a slot taken is recorded with exactly this, whatever the
    /// configuration says by the time the answer comes.
    pub(crate) target: (Settings, String),
    pub(crate) task: JoinHandle<Result<(), LockError>>,
    /// Operators' `nodeward kubelet release` requests riding on this release (they coalesce into
    /// the one in flight), answered when it ends.
    pub(super) replies: Vec<Reply>,
}

/// FleetLock as the supervisor sees it.
#[derive(Default)]
pub(super) struct Gate {
    /// The settings and this node's id; `None`: FleetLock is off.
    pub(super) settings: Option<(Settings, String)>,
    /// The slot this node holds (as its record on disk says).
    pub(super) held: Option<Held>,
    /// The record was read (once, when the settings first came).
    pub(super) loaded: bool,
    /// A request in flight (one at a time).
    pub(crate) request: Option<InFlight>,
    /// The last settings FleetLock was on with: a slot recorded before FleetLock was turned off is
    /// given back with them (at the server, group and id its record names).
    pub(super) last: Option<Settings>,
    /// When to try again.
    pub(crate) retry_at: Option<Instant>,
    /// The current retry bound (full jitter below it), doubling to [`MAX_LOCK_RETRY`].
    pub(super) bound: Duration,
    /// Why a change waits (the last refusal).
    pub(crate) waiting: Option<String>,
}

impl Gate {
    pub(super) fn status(&self) -> Option<FleetLockStatus> {
        let (s, _) = self.settings.as_ref()?;
        Some(FleetLockStatus {
            group: s.group.clone(),
            held: self.held.is_some(),
            halted: self.held.as_ref().is_some_and(|h| h.halted),
            waiting: self.waiting.clone(),
        })
    }

    /// Waits before the next attempt: a random time below the bound, which then doubles.
    pub(super) fn back_off(&mut self) {
        let delay = crate::jitter::full_jitter(self.bound).max(Duration::from_millis(200));
        self.retry_at = Some(Instant::now() + delay);
        let cap = self.settings.as_ref().map_or(MAX_LOCK_RETRY, |(s, _)| {
            s.retry.saturating_mul(30).min(MAX_LOCK_RETRY)
        });
        self.bound = self.bound.saturating_mul(2).min(cap);
    }

    /// Where a recorded slot is given back: the server, group and id its record names, with the
    /// current settings' transport (or the last ones, when FleetLock was turned off since).
    pub(super) fn release_target(&self, h: &Held) -> Option<(Settings, String)> {
        let mut s = self
            .settings
            .as_ref()
            .map(|(s, _)| s.clone())
            .or_else(|| self.last.clone())?;
        s.base_url = h.base_url.clone();
        s.group = h.group.clone();
        Some((s, h.id.clone()))
    }

    pub(super) fn reset_bound(&mut self) {
        if let Some((s, _)) = &self.settings {
            self.bound = s.retry;
        }
    }
}
