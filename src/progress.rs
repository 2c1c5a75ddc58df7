//! Liveness and cancellation for long work, shared by the layers that do it and the daemon that
//! watches it.
//!
//! Work that may take a while (a converge: fetching, installing, loading) calls [`beat`] whenever
//! it moves forward: a step starts, a change is applied, a download attempt starts, a chunk of body
//! arrives, a retry's backoff ticks. The daemon pings systemd's watchdog only while the last beat is
//! recent, so a converge stuck in one call stops the pings and systemd restarts the agent: the
//! watchdog tells the truth. [`cancel`] asks the work to stop at its next check (SIGTERM).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

static EPOCH: OnceLock<Instant> = OnceLock::new();
static LAST_BEAT_MS: AtomicU64 = AtomicU64::new(0);
static CANCELLED: AtomicBool = AtomicBool::new(false);

fn epoch() -> Instant {
    *EPOCH.get_or_init(Instant::now)
}

thread_local! {
    /// Set on threads whose work the converge does not wait for (a background download): their
    /// progress must not make a stuck converge look alive, nor take over its STATUS line.
    static DETACHED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks this thread as working beside the converge, not for it: its beats and activity are not
/// the converge's.
pub(crate) fn detach_this_thread() {
    DETACHED.with(|d| d.set(true));
}

fn detached() -> bool {
    DETACHED.with(|d| d.get())
}

/// Records that work moved forward now.
pub(crate) fn beat() {
    if detached() {
        return;
    }
    let ms = epoch().elapsed().as_millis() as u64;
    LAST_BEAT_MS.fetch_max(ms, Ordering::Relaxed);
}

/// How long ago work last moved forward.
pub(crate) fn since_last_beat() -> Duration {
    let now = epoch().elapsed().as_millis() as u64;
    Duration::from_millis(now.saturating_sub(LAST_BEAT_MS.load(Ordering::Relaxed)))
}

static ACTIVITY: Mutex<(u64, String)> = Mutex::new((0, String::new()));

/// Says what long work is doing now, for a person (systemd's STATUS while a converge runs).
pub(crate) fn set_activity(what: String) {
    if detached() {
        return;
    }
    if let Ok(mut a) = ACTIVITY.lock() {
        a.0 += 1;
        a.1 = what;
    }
    beat();
}

static DOWNLOAD: Mutex<String> = Mutex::new(String::new());

/// Says how the running download moves (bytes, rate, time left), from any thread: the bundle
/// step quotes it while it waits for a background download.
pub(crate) fn set_download(what: String) {
    if let Ok(mut d) = DOWNLOAD.lock() {
        *d = what;
    }
}

/// The running download's progress line (empty when none runs).
pub(crate) fn download() -> String {
    DOWNLOAD.lock().map(|d| d.clone()).unwrap_or_default()
}

/// The latest activity and its generation (which changes whenever the activity is set).
pub(crate) fn activity() -> (u64, String) {
    ACTIVITY.lock().map(|a| a.clone()).unwrap_or_default()
}

/// Asks all work to stop at its next check.
pub(crate) fn cancel() {
    CANCELLED.store(true, Ordering::SeqCst);
}

pub(crate) fn cancelled() -> bool {
    CANCELLED.load(Ordering::SeqCst)
}

/// Sleeps up to `d` in short slices, beating (a backoff is the plan, not a stall) and returning
/// early, with `false`, when cancelled.
pub(crate) fn sleep(d: Duration) -> bool {
    let deadline = Instant::now() + d;
    while Instant::now() < deadline {
        if cancelled() {
            return false;
        }
        beat();
        std::thread::sleep(
            deadline
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(100)),
        );
    }
    !cancelled()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beats_move_the_clock_forward() {
        // The clock is process-wide and other tests beat it from their threads: a quiet 30 ms
        // must show at least once in a few tries, and a beat always brings it back near zero.
        let quiet = (0..50).any(|_| {
            beat();
            std::thread::sleep(Duration::from_millis(30));
            since_last_beat() >= Duration::from_millis(20)
        });
        assert!(quiet, "the clock never moved past a beat");
        // An ordering, not a speed: a beat brings the clock back below where it stood.
        let before = since_last_beat();
        beat();
        assert!(since_last_beat() < before, "a beat did not reset the clock");
    }
}
