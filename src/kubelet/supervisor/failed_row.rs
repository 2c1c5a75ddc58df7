//! A row of failed /healthz probes, and when it is worth a restart.
//!
//! A kubelet that answers "not healthy" (its own verdict) or does not listen at all is restarted
//! after `unhealthy_threshold` probes in a row. A kubelet that is only *slow* to answer — every
//! probe of the row timed out — is given [`SLOW_PATIENCE`] as well: on a loaded host (seen on an
//! emulated CPU under image pulls) /healthz answers late for a while, and a restart then cancels
//! every image pull the kubelet has in flight, so the node was further from Ready after it. A hung
//! kubelet is still restarted, two minutes later; the kubelet's own sync-loop check takes five
//! (`SyncLoopHealthCheck`, pkg/kubelet/kubelet.go).

use std::time::Duration;

use tokio::time::Instant;

/// How long a row of timed-out probes must last before it restarts the kubelet.
pub(super) const SLOW_PATIENCE: Duration = Duration::from_secs(120);

/// The failed probes since the last good one.
#[derive(Debug, Default)]
pub(super) struct FailedRow {
    count: u32,
    since: Option<Instant>,
    /// Every failure of the row was a timeout.
    only_slow: bool,
}

impl FailedRow {
    /// A good probe: the row is over.
    pub(super) fn reset(&mut self) {
        *self = FailedRow::default();
    }

    /// A failed probe at `now`; `slow` when it timed out. Returns the row's length.
    pub(super) fn failed(&mut self, now: Instant, slow: bool) -> u32 {
        if self.since.is_none() {
            self.since = Some(now);
            self.only_slow = true;
        }
        self.only_slow &= slow;
        self.count = self.count.saturating_add(1);
        self.count
    }

    /// Whether the row restarts the kubelet at `now`.
    pub(super) fn restarts(&self, now: Instant, threshold: u32) -> bool {
        if self.count < threshold {
            return false;
        }
        !self.only_slow || self.lasted(now) >= SLOW_PATIENCE
    }

    /// How long the row has lasted.
    pub(super) fn lasted(&self, now: Instant) -> Duration {
        self.since
            .map_or(Duration::ZERO, |s| now.saturating_duration_since(s))
    }

    /// Whether it is a row of timeouts only, still within its patience (for the status line).
    pub(super) fn waiting_on_slow(&self, now: Instant) -> bool {
        self.only_slow && self.since.is_some() && self.lasted(now) < SLOW_PATIENCE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn answered_failures_restart_at_the_threshold() {
        let t0 = Instant::now();
        let mut row = FailedRow::default();
        assert_eq!(row.failed(t0, false), 1);
        assert_eq!(row.failed(t0 + 2 * S, false), 2);
        assert!(!row.restarts(t0 + 2 * S, 3));
        assert_eq!(row.failed(t0 + 4 * S, false), 3);
        assert!(row.restarts(t0 + 4 * S, 3));
    }

    #[test]
    fn timeouts_alone_wait_for_the_patience_as_well_as_the_threshold() {
        let t0 = Instant::now();
        let mut row = FailedRow::default();
        for i in 0..10 {
            row.failed(t0 + i * 2 * S, true);
        }
        let late = t0 + 18 * S;
        assert!(
            !row.restarts(late, 3),
            "ten timeouts in 18 s restart a slow kubelet"
        );
        assert!(row.waiting_on_slow(late));
        row.failed(t0 + SLOW_PATIENCE, true);
        assert!(row.restarts(t0 + SLOW_PATIENCE, 3));
        assert!(!row.waiting_on_slow(t0 + SLOW_PATIENCE));
        // The patience is no excuse for a short row.
        let mut short = FailedRow::default();
        short.failed(t0, true);
        assert!(!short.restarts(t0 + 10 * SLOW_PATIENCE, 3));
    }

    #[test]
    fn one_answered_failure_in_the_row_ends_the_patience() {
        let t0 = Instant::now();
        let mut row = FailedRow::default();
        row.failed(t0, true);
        row.failed(t0 + S, false);
        row.failed(t0 + 2 * S, true);
        assert!(row.restarts(t0 + 2 * S, 3));
    }

    #[test]
    fn a_good_probe_ends_the_row() {
        let t0 = Instant::now();
        let mut row = FailedRow::default();
        row.failed(t0, false);
        row.failed(t0 + S, false);
        row.reset();
        assert_eq!(row.failed(t0 + 2 * S, false), 1);
        assert!(!row.restarts(t0 + 2 * S, 3));
        assert_eq!(row.lasted(t0 + 3 * S), S);
    }
}
