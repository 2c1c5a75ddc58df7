//! Restart delays: immediately the first time, then 1 s, 2 s, 4 s … up to a cap; a kubelet that
//! stayed healthy long enough earns a fresh start.

use std::time::Duration;

#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    failures: u32,
    max: Duration,
}

impl Backoff {
    pub fn new(max: Duration) -> Backoff {
        Backoff { failures: 0, max }
    }

    /// The delay before the next restart, counting this failure.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let delay = match self.failures {
            0 => Duration::ZERO,
            n => Duration::from_secs(1u64 << (n - 1).min(20)).min(self.max),
        };
        self.failures = self.failures.saturating_add(1);
        delay
    }

    pub fn reset(&mut self) {
        self.failures = 0;
    }

    pub fn failures(&self) -> u32 {
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
        assert_eq!(b.next_delay(), Duration::ZERO);
        assert_eq!(b.next_delay(), Duration::from_secs(1));
    }

    #[test]
    fn never_overflows() {
        let mut b = Backoff::new(Duration::from_secs(60));
        for _ in 0..100 {
            assert!(b.next_delay() <= Duration::from_secs(60));
        }
    }
}
