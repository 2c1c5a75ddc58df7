//! When the next pass comes after a pass that failed, by the worst kind of failure in it. Pure, so
//! each rule is a unit test.

use std::time::Duration;

use crate::plan::FailureKind;

/// The first retry after a transient failure; it doubles up to the interval.
pub(crate) const FIRST_RETRY: Duration = Duration::from_secs(1);
/// Something awaited (a kubeconfig, a socket, a download): its arrival is watched and starts a pass
/// at once, so this is only the backstop, and it does not grow.
pub(crate) const WAITING_RETRY: Duration = Duration::from_secs(5);
/// Only a change fixes a permanent failure (and a change is an event): no need to try often.
pub(crate) const PERMANENT_RETRY: Duration = Duration::from_secs(60);

/// The backoff between passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Retry {
    /// What the next transient or permanent failure waits.
    next: Duration,
}

impl Default for Retry {
    fn default() -> Retry {
        Retry { next: FIRST_RETRY }
    }
}

impl Retry {
    /// After a pass: how long until the next one (`failure`: the worst kind in it, `None` when
    /// every step succeeded), with the backoff carried forward.
    pub(super) fn after(&mut self, failure: Option<FailureKind>, interval: Duration) -> Duration {
        match failure {
            None => {
                self.next = FIRST_RETRY;
                interval
            }
            Some(FailureKind::Waiting) => {
                self.next = FIRST_RETRY;
                WAITING_RETRY.min(interval)
            }
            Some(FailureKind::Transient) => {
                let wait = self.next.min(interval);
                self.next = (self.next * 2).min(interval);
                wait
            }
            Some(FailureKind::Permanent) => {
                let wait = self.next.max(PERMANENT_RETRY).min(interval);
                self.next = (wait * 2).min(interval);
                wait
            }
        }
    }
}

/// The least a jittered retry waits (full jitter may draw zero).
const MIN_RETRY: Duration = Duration::from_millis(100);

/// When the next pass starts, `wait` after the last one: a transient failure's wait is fully
/// jittered (a fleet that failed together does not retry together), and a node that converged
/// waits for its own tick (`phase` within the interval, on the wall clock: nodes booted together
/// do not converge together). `now_ms`: Unix time in milliseconds.
pub(crate) fn spread(
    failure: Option<FailureKind>,
    wait: Duration,
    interval: Duration,
    phase: Duration,
    now_ms: u64,
) -> Duration {
    match failure {
        Some(FailureKind::Transient) => crate::jitter::full_jitter(wait).max(MIN_RETRY),
        None if crate::jitter::enabled() => crate::jitter::until_tick(now_ms, interval, phase),
        _ => wait,
    }
}

/// How long a pass that only waits lets pass while an image import runs beside it: the import's
/// end wakes the daemon at once, so the 5 s backstop would only run pass after pass (each asking
/// the engines what they hold) against the import for the CPU of a slow host (a 227 MiB archive
/// under TCG: ~30 passes during its 4 minutes).
pub(crate) const WAITING_FOR_IMPORT: Duration = Duration::from_secs(30);

/// The wait after a pass, given whether an import runs beside the passes.
pub(crate) fn beside_imports(failure: Option<FailureKind>, wait: Duration, importing: bool) -> Duration {
    match failure {
        Some(FailureKind::Waiting) if importing => wait.max(WAITING_FOR_IMPORT),
        _ => wait,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_beside_an_import_is_left_to_the_import_s_end() {
        let w = Some(FailureKind::Waiting);
        let five = Duration::from_secs(5);
        assert_eq!(beside_imports(w, five, true), WAITING_FOR_IMPORT);
        // Controls: no import, or another kind of failure, keep their own wait.
        assert_eq!(beside_imports(w, five, false), five);
        let t = Some(FailureKind::Transient);
        assert_eq!(beside_imports(t, five, true), five);
        assert_eq!(
            beside_imports(None, Duration::from_secs(3600), true),
            Duration::from_secs(3600)
        );
    }

    const HOUR: Duration = Duration::from_secs(3600);

    fn waits(kinds: &[Option<FailureKind>], interval: Duration) -> Vec<u64> {
        let mut r = Retry::default();
        kinds.iter().map(|k| r.after(*k, interval).as_secs()).collect()
    }

    #[test]
    fn transient_retries_are_jittered_and_converged_nodes_tick_on_their_phase() {
        let t = Some(FailureKind::Transient);
        let draws: Vec<Duration> = (0..200)
            .map(|_| spread(t, Duration::from_secs(8), HOUR, Duration::ZERO, 0))
            .collect();
        assert!(
            draws
                .iter()
                .all(|d| *d >= MIN_RETRY && *d <= Duration::from_secs(8))
        );
        let distinct: std::collections::BTreeSet<_> = draws.iter().map(|d| d.as_millis() / 500).collect();
        assert!(distinct.len() > 8, "spread over the bound: {distinct:?}");
        let minute = Duration::from_secs(60);
        let tick = spread(None, minute, minute, Duration::from_secs(17), 36_005_000);
        assert_eq!(tick, Duration::from_secs(12));
        let p = Some(FailureKind::Permanent);
        assert_eq!(
            spread(p, minute, minute, Duration::ZERO, 0),
            minute,
            "not jittered"
        );
    }

    #[test]
    fn transient_failures_back_off_from_a_second_to_the_interval() {
        let t = Some(FailureKind::Transient);
        assert_eq!(waits(&[t; 5], HOUR), [1, 2, 4, 8, 16]);
        assert_eq!(waits(&[t; 4], Duration::from_secs(5)), [1, 2, 4, 5]);
    }

    #[test]
    fn a_wait_is_retried_every_five_seconds_without_growing() {
        let w = Some(FailureKind::Waiting);
        assert_eq!(waits(&[w; 4], HOUR), [5, 5, 5, 5]);
    }

    #[test]
    fn a_permanent_failure_is_retried_from_a_minute_up_to_the_interval() {
        let p = Some(FailureKind::Permanent);
        assert_eq!(waits(&[p; 4], HOUR), [60, 120, 240, 480]);
        assert_eq!(waits(&[p; 2], Duration::from_secs(30)), [30, 30]);
    }

    #[test]
    fn success_waits_the_interval_and_starts_the_backoff_over() {
        let t = Some(FailureKind::Transient);
        assert_eq!(waits(&[t, t, t, None, t], HOUR), [1, 2, 4, 3600, 1]);
    }
}
