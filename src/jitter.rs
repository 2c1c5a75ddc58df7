//! Spreading a fleet's retries and timers: a thousand nodes that fail (or boot) in the same second
//! must not come back to the same server in the same second.
//!
//! - [`full_jitter`]: a retry waits a random time between zero and its exponential bound (AWS
//!   Architecture Blog, "Exponential Backoff And Jitter", 2015: of the simple schemes it spreads a
//!   herd best, and its mean is half the bound);
//! - [`phase`]: a periodic timer ticks at a per-node phase within its period, stable across
//!   restarts (from the machine id), so nodes booted together do not converge together;
//! - [`BootGate`]: a fleet that powers on in the same second sends its
//!   *first* requests to a shared server (the bundle download, a kubelet image pull) at each
//!   node's phase within `daemon.boot_spread_seconds` of the daemon's start, not all in that
//!   second; what comes later is not held, nor a daemon started long after the boot.
//!
//! `NODEWARD_JITTER=off` turns all of them off (benchmarks compare a fleet with and without);
//! `NODEWARD_JITTER=boot` keeps them on and takes every daemon start for a boot (the fleet
//! benchmark, on a machine up for hours).

use std::hash::BuildHasher;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// Whether jitter is on (it is unless `NODEWARD_JITTER=off`).
pub(crate) fn enabled() -> bool {
    enabled_by(std::env::var_os("NODEWARD_JITTER").as_deref())
}

/// Whether every daemon start counts as a boot (`NODEWARD_JITTER=boot`: the fleet benchmark's
/// daemons start on a machine that has been up for hours).
fn every_start_a_boot() -> bool {
    std::env::var_os("NODEWARD_JITTER").is_some_and(|v| v == "boot")
}

/// Jitter is on unless the variable says exactly `off`.
fn enabled_by(value: Option<&std::ffi::OsStr>) -> bool {
    value.is_none_or(|v| v != "off")
}

/// A random u64 (the standard library's per-process random hash keys; no cryptography needed).
fn random() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    std::collections::hash_map::RandomState::new().hash_one(COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// A uniformly random duration in `[0, bound]` (whole milliseconds); `bound` itself when jitter is
/// off.
pub(crate) fn full_jitter(bound: Duration) -> Duration {
    if !enabled() {
        return bound;
    }
    let ms = u64::try_from(bound.as_millis()).unwrap_or(u64::MAX);
    Duration::from_millis(random() % ms.saturating_add(1))
}

/// The least time between two requests of one retry loop to one server. No loop then reaches its
/// server twice within any one second, so a fleet booted into an outage sends a server at most one
/// attempt per node in its busiest second (full jitter alone may draw a retry a few milliseconds
/// after the first attempt: 130–144 % of a 100-node fleet in one second was measured).
pub(crate) const RETRY_FLOOR: Duration = Duration::from_secs(1);

/// A uniformly random duration in `[floor, bound]` (whole milliseconds; `floor` when `bound` is
/// below it); `bound` itself when jitter is off.
pub(crate) fn jitter_above(floor: Duration, bound: Duration) -> Duration {
    floor + full_jitter(bound.saturating_sub(floor))
}

/// This node's phase within `period`, stable for one machine id (the same on every restart and
/// reboot), spread uniformly across a fleet; zero when jitter is off or `period` is zero.
pub(crate) fn phase(machine_id: &str, period: Duration) -> Duration {
    let ms = u64::try_from(period.as_millis()).unwrap_or(u64::MAX);
    if !enabled() || ms == 0 {
        return Duration::ZERO;
    }
    let digest = Sha256::digest(machine_id.trim().as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    Duration::from_millis(u64::from_le_bytes(first) % ms)
}

/// The moment a node's first requests to a shared server may go: its phase within a spread,
/// counted from the daemon's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BootGate {
    opens: Instant,
}

/// A daemon that starts this long after the system booted is not in a fleet's power-on: it
/// does not wait (a package upgrade or a crash restart hours later).
pub(crate) const BOOT_WINDOW: Duration = Duration::from_secs(600);

impl BootGate {
    /// The gate of the node with `machine_id` whose daemon started at `started`, `uptime` after
    /// the system booted: at boot, this node's phase within `spread` (stable per machine id, so a
    /// fleet's first requests spread uniformly over it); later, open at once.
    pub(crate) fn new(
        machine_id: &str,
        started: Instant,
        spread: Duration,
        uptime: Option<Duration>,
    ) -> BootGate {
        let at_boot = every_start_a_boot() || uptime.is_some_and(|u| u < BOOT_WINDOW);
        let wait = if at_boot {
            phase(machine_id, spread)
        } else {
            Duration::ZERO
        };
        BootGate {
            opens: started + wait,
        }
    }

    /// How long a request at `now` must still wait: zero once the gate is open.
    pub(crate) fn remaining(self, now: Instant) -> Duration {
        self.opens.saturating_duration_since(now)
    }
}

/// This process's gate: `None` until the daemon opens one (one-shot commands never wait).
static BOOT_GATE: Mutex<Option<BootGate>> = Mutex::new(None);

/// Sets this process's gate (at every configuration load: a changed spread moves it).
pub(crate) fn open_boot_gate(gate: BootGate) {
    if let Ok(mut g) = BOOT_GATE.lock() {
        *g = Some(gate);
    }
}

/// How long a request to a shared server must still wait for this process's gate: zero once it is
/// open, or when none was set.
pub(crate) fn until_boot_gate() -> Duration {
    BOOT_GATE
        .lock()
        .ok()
        .and_then(|g| *g)
        .map_or(Duration::ZERO, |g| g.remaining(Instant::now()))
}

/// How long from `now` (Unix milliseconds) to the next tick of a timer with this `period` and
/// `phase`: ticks fall at `phase + k × period` on the wall clock, so every restart keeps the node's
/// place. Within `(0, period]`.
pub(crate) fn until_tick(now_ms: u64, period: Duration, phase: Duration) -> Duration {
    let p = u64::try_from(period.as_millis()).unwrap_or(u64::MAX).max(1);
    let ph = u64::try_from(phase.as_millis()).unwrap_or(0) % p;
    let since = (now_ms + p - ph) % p;
    Duration::from_millis(p - since)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_jitter_stays_within_its_bound_and_spreads() {
        let bound = Duration::from_secs(8);
        let draws: Vec<Duration> = (0..1000).map(|_| full_jitter(bound)).collect();
        assert!(draws.iter().all(|d| *d <= bound));
        // 1,000 draws over 8 s: every second of it gets some, none most.
        let mut per_second = [0usize; 9];
        for d in &draws {
            per_second[d.as_secs() as usize] += 1;
        }
        assert!(
            per_second[..8].iter().all(|&n| n > 50 && n < 250),
            "{per_second:?}"
        );
        assert_eq!(full_jitter(Duration::ZERO), Duration::ZERO);
        assert!(full_jitter(Duration::MAX) <= Duration::MAX, "no overflow");
    }

    #[test]
    fn jitter_above_a_floor_stays_between_it_and_the_bound_and_spreads() {
        let (floor, bound) = (Duration::from_secs(1), Duration::from_secs(3));
        let draws: Vec<Duration> = (0..1000).map(|_| jitter_above(floor, bound)).collect();
        assert!(draws.iter().all(|d| *d >= floor && *d <= bound), "{draws:?}");
        // Uniform over [1 s, 3 s]: both seconds of it get a fair share.
        let low = draws.iter().filter(|d| **d < Duration::from_secs(2)).count();
        assert!(low > 350 && low < 650, "{low} of 1000 below 2 s");
        // A bound at or below the floor gives the floor.
        assert_eq!(jitter_above(floor, floor), floor);
        assert_eq!(jitter_above(floor, Duration::ZERO), floor);
    }

    #[test]
    fn phases_are_stable_per_node_and_spread_across_a_fleet() {
        let period = Duration::from_secs(60);
        assert_eq!(phase("0123abcd", period), phase("0123abcd\n", period));
        let phases: std::collections::BTreeSet<u64> = (0..100)
            .map(|i| phase(&format!("node-{i:032x}"), period).as_secs())
            .collect();
        assert!(
            phases.len() > 40,
            "100 nodes on {} distinct seconds of 60",
            phases.len()
        );
        assert!(phases.iter().all(|&s| s < 60));
    }

    #[test]
    fn ticks_fall_on_the_phase() {
        let period = Duration::from_secs(60);
        let phase = Duration::from_secs(17);
        // 10:00:05 → 10:00:17; 10:00:17 exactly → the next minute's; 10:00:30 → 10:01:17.
        let at = |s: u64| until_tick(s * 1000, period, phase).as_secs();
        assert_eq!(at(36_005), 12);
        assert_eq!(at(36_017), 60);
        assert_eq!(at(36_030), 47);
    }

    #[test]
    fn ticks_at_the_clocks_start_and_a_phase_past_its_period() {
        let period = Duration::from_secs(10);
        // The first tick after the epoch is the phase itself (no underflow before it).
        assert_eq!(
            until_tick(0, period, Duration::from_secs(3)),
            Duration::from_secs(3)
        );
        // A phase of a period or more is taken modulo the period.
        assert_eq!(
            until_tick(0, period, Duration::from_secs(13)),
            Duration::from_secs(3)
        );
        assert_eq!(until_tick(0, period, Duration::from_secs(20)), period);
    }

    #[test]
    fn the_boot_gate_opens_at_the_nodes_phase_and_then_holds_nothing() {
        let started = Instant::now();
        let spread = Duration::from_secs(10);
        let id = "0123456789abcdef0123456789abcdef";
        let booted = Some(Duration::from_secs(20));
        let gate = BootGate::new(id, started, spread, booted);
        let at = phase(id, spread);
        assert!(at > Duration::ZERO && at < spread, "{at:?}");
        // Before the phase: the rest of it; at or after: nothing.
        assert_eq!(gate.remaining(started), at);
        assert_eq!(gate.remaining(started + at), Duration::ZERO);
        assert_eq!(gate.remaining(started + spread), Duration::ZERO);
        // A spread of zero opens it at the start.
        let gate = BootGate::new(id, started, Duration::ZERO, booted);
        assert_eq!(gate.remaining(started), Duration::ZERO);
        // Control: a daemon started long after the boot (or with no uptime known) does not wait.
        let late = BootGate::new(id, started, spread, Some(BOOT_WINDOW));
        assert_eq!(late.remaining(started), Duration::ZERO);
        assert_eq!(
            BootGate::new(id, started, spread, None).remaining(started),
            Duration::ZERO
        );
    }

    #[test]
    fn a_fleets_boot_gates_spread_over_the_window() {
        // 1,000 nodes, a 10 s window: no second holds more than a fifth of them (uniform: a tenth).
        let spread = Duration::from_secs(10);
        let mut per_second = [0usize; 10];
        for i in 0..1000 {
            per_second[phase(&format!("{i:032x}"), spread).as_secs() as usize] += 1;
        }
        assert!(per_second.iter().all(|&n| n > 50 && n < 200), "{per_second:?}");
    }

    #[test]
    fn a_zero_period_has_no_phase() {
        assert_eq!(phase("0123abcd", Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn only_off_turns_jitter_off() {
        use std::ffi::OsStr;
        assert!(enabled_by(None));
        assert!(!enabled_by(Some(OsStr::new("off"))));
        for on in ["on", "", "OFF", "0"] {
            assert!(enabled_by(Some(OsStr::new(on))), "{on:?}");
        }
    }
}
