//! The first preflight checks wait for the kubelet's first start. At the daemon's start the pass
//! hands the kubelet to its supervisor midway (after the kubelet step), and the checks that
//! follow the pass ask the same engines the supervisor is asking (podman's `image exists`,
//! containerd's image list, the runtime's sockets): on a node of two vCPUs, each such process
//! start slowed the kubelet's (measured under TCG: the supervisor's first `container inspect`
//! 2.6 s beside them). So the first checks wait until the first start has come to something —
//! running, failing, or no kubelet wanted — or a bound, whichever is first. Later checks never
//! wait. The importer's checks of recorded archives (`images::background`) are held the same way
//! and released with it: on a node of one vCPU they slowed the kubelet's first `podman run`.

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long the first checks wait at most (a kubelet waiting for its image import, say).
pub(super) const FIRST_CHECKS_WAIT: Duration = Duration::from_secs(30);

#[derive(Debug)]
pub(super) struct FirstStart {
    settled: Mutex<bool>,
    changed: Condvar,
}

impl FirstStart {
    /// `kubelet_managed`: whether a kubelet may be started at all (else nothing to wait for).
    pub(super) fn new(kubelet_managed: bool) -> FirstStart {
        FirstStart {
            settled: Mutex::new(!kubelet_managed),
            changed: Condvar::new(),
        }
    }

    /// The first start came to something: whoever waits goes on, and nobody waits again.
    pub(super) fn settle(&self) {
        if let Ok(mut settled) = self.settled.lock() {
            if !*settled {
                *settled = true;
                self.changed.notify_all();
            }
        }
    }

    /// Waits until [`settle`](Self::settle) or `limit`; whether it was settled. A deliberate,
    /// bounded wait: it beats the converge's progress (a second at a time), so the watchdog does
    /// not take it for a stall.
    pub(super) fn wait(&self, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        let Ok(mut settled) = self.settled.lock() else {
            return true;
        };
        while !*settled {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            crate::progress::beat();
            match self
                .changed
                .wait_timeout(settled, left.min(Duration::from_secs(1)))
            {
                Ok((guard, _)) => settled = guard,
                Err(_) => return true,
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn nothing_to_wait_for_without_a_kubelet() {
        assert!(FirstStart::new(false).wait(Duration::ZERO));
    }

    #[test]
    fn the_waiter_goes_on_when_settled_and_never_waits_again() {
        let gate = Arc::new(FirstStart::new(true));
        let waiter = {
            let gate = gate.clone();
            std::thread::spawn(move || gate.wait(Duration::from_secs(3600)))
        };
        gate.settle();
        // A hang detector: the waiter was released by the settle, not by its hour.
        assert!(waiter.join().unwrap());
        assert!(gate.wait(Duration::ZERO));
    }

    #[test]
    fn an_unsettled_start_holds_the_checks_only_for_the_bound() {
        let gate = FirstStart::new(true);
        assert!(!gate.wait(Duration::from_millis(10)));
    }
}
