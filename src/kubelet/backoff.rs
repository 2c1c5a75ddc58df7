//! Restart and start delays: immediately the first time, then 1 s, 2 s, 4 s … up to a cap; a
//! kubelet that stayed healthy long enough earns a fresh start. A crash restart of the same
//! container (no registry involved) waits exactly that; a start, which may pull the image, waits a
//! random time between a second and it (jitter: a fleet whose registry went away together does
//! not pull together when it comes back, nor twice within a second while it is away).

use std::time::Duration;

use crate::jitter::RETRY_FLOOR;

#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    failures: u32,
    max: Duration,
}

impl Backoff {
    pub(crate) fn new(max: Duration) -> Backoff {
        Backoff { failures: 0, max }
    }

    /// The delay before the next restart, counting this failure.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let bound = match self.failures {
            0 => Duration::ZERO,
            n => Duration::from_secs(1u64 << (n - 1).min(20)).min(self.max),
        };
        self.failures = self.failures.saturating_add(1);
        bound
    }

    /// The delay before the next start that may reach the registry, counting this failure: a
    /// random time between [`RETRY_FLOOR`] and [`Backoff::next_delay`]'s bound, that bound at least
    /// twice the floor (the immediate first restart of a crash has no place here: a fleet whose
    /// registry failed together must not all come back at once, and no node asks the registry
    /// twice within a second).
    pub(crate) fn next_jittered(&mut self) -> Duration {
        let bound = self.next_delay().max(2 * RETRY_FLOOR);
        crate::jitter::jitter_above(RETRY_FLOOR, bound)
    }

    pub(crate) fn reset(&mut self) {
        self.failures = 0;
    }

    pub(crate) fn failures(&self) -> u32 {
        self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn immediate_then_doubling_then_capped_then_reset() {
        let mut b = Backoff::new(Duration::from_secs(10));
        let delays: Vec<u64> = (0..7).map(|_| b.next_delay().as_secs()).collect();
        assert_eq!(delays, [0, 1, 2, 4, 8, 10, 10]);
        b.reset();
        // A start that failed (it may pull): a random time between 1 s and 2 s, three times, then
        // up to 4 s …
        for bound in [2, 2, 2, 4] {
            let d = b.next_jittered();
            assert!(d >= RETRY_FLOOR && d <= Duration::from_secs(bound), "{d:?}");
        }
    }

    #[test]
    fn delays_are_jittered_within_their_bound() {
        let draws: Vec<Duration> = (0..200)
            .map(|_| {
                let mut b = Backoff::new(Duration::from_secs(60));
                (0..4).map(|_| b.next_jittered()).last().unwrap_or_default()
            })
            .collect();
        assert!(draws.iter().all(|d| *d <= Duration::from_secs(4)));
        let distinct: std::collections::BTreeSet<_> = draws.iter().map(|d| d.as_millis() / 250).collect();
        assert!(distinct.len() > 8, "{distinct:?}");
    }

    #[test]
    fn never_overflows() {
        let mut b = Backoff::new(Duration::from_secs(60));
        for _ in 0..100 {
            assert!(b.next_delay() <= Duration::from_secs(60));
        }
    }
}
