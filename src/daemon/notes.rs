//! The daemon loop's queue and its coalesced notifications: nothing another thread does can grow
//! what the loop holds without bound.

use std::sync::mpsc;

/// The main loop's queue is bounded: whatever other threads do, it holds at most this many events.
/// Signals, file changes, control requests and finished passes are few by nature (the control
/// socket answers "busy" past its bound); the notifications that can come at any rate (the
/// kubelet's status, one per pull line; a finished download) are coalesced ([`Note`]).
pub(super) const EVENT_QUEUE: usize = 64;

/// "Look again" notifications, coalesced: a flag the loop reads on every wake, and at most one
/// wake-up event in the queue per kind. A notification that finds the queue full is not lost: its
/// flag stays set for the next wake (the watchdog's tick at the latest).
#[derive(Debug, Clone, Default)]
pub(super) struct Notifications {
    pub(super) kubelet: Note,
    /// A bundle download or an image import finished.
    pub(super) beside: Note,
}

#[derive(Debug, Clone, Default)]
pub(super) struct Note(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Note {
    /// A callback another thread calls: sets the flag, and queues a wake-up if none is pending.
    pub(super) fn sender<E: Send + 'static>(
        &self,
        tx: &mpsc::SyncSender<E>,
        event: fn() -> E,
    ) -> impl Fn() + Send + Sync + 'static {
        let (flag, tx) = (self.0.clone(), tx.clone());
        move || {
            use std::sync::atomic::Ordering;
            if !flag.swap(true, Ordering::AcqRel) {
                let _ = tx.try_send(event());
            }
        }
    }

    /// Whether it was set, clearing it.
    pub(super) fn take(&self) -> bool {
        self.0.swap(false, std::sync::atomic::Ordering::AcqRel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A million notifications from another thread leave one wake-up in the queue and the flag
    /// set; a full queue loses none of them.
    #[test]
    fn notifications_coalesce_into_one_wake_up() {
        let (tx, rx) = mpsc::sync_channel::<u8>(EVENT_QUEUE);
        let note = Note::default();
        let send = note.sender(&tx, || 7);
        std::thread::scope(|s| {
            s.spawn(|| (0..1_000_000).for_each(|_| send()));
        });
        assert_eq!(rx.try_iter().count(), 1, "one wake-up queued");
        assert!(note.take(), "the flag says what to do");
        assert!(!note.take(), "and is cleared by the loop");
        // A full queue: the wake-up cannot be queued, the flag still carries it.
        for _ in 0..EVENT_QUEUE {
            tx.try_send(0).expect("fill");
        }
        send();
        assert_eq!(rx.try_iter().count(), EVENT_QUEUE, "nothing past the bound");
        assert!(note.take(), "not lost");
    }
}
