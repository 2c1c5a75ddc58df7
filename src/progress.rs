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
    since(now, LAST_BEAT_MS.load(Ordering::Relaxed))
}

/// The time from a beat stamped at `last` to `now` (milliseconds since the epoch); a stamp after
/// `now` (another thread beat between the reads) is no time at all.
fn since(now: u64, last: u64) -> Duration {
    Duration::from_millis(now.saturating_sub(last))
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
    fn a_beat_stamps_the_clock_with_now() {
        // The stamp is process-wide and other tests beat it from their threads: whatever they
        // do, after a beat the stamp is no older than a moment read before it (an ordering; the
        // old test compared two readings a millisecond apart and lost to another thread's beat).
        let before = epoch().elapsed().as_millis() as u64;
        beat();
        assert!(LAST_BEAT_MS.load(Ordering::Relaxed) >= before);
    }

    #[test]
    fn the_clock_reads_the_time_since_the_stamp() {
        assert_eq!(since(5_000, 3_000), Duration::from_secs(2));
        assert_eq!(since(5_000, 5_000), Duration::ZERO);
        // Another thread beat between the two reads: no time, not a wrapped eternity.
        assert_eq!(since(5_000, 5_001), Duration::ZERO);
    }
}
