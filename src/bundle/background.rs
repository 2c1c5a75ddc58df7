//! The daemon's downloads, off the converge thread. A bundle server that is down or drips bytes
//! must not hold the other steps' drift repair, nor the watchdog's honesty: the `bundle` step asks
//! here and gets the newest good copy at once (installing it again changes nothing), or hears that
//! a download is under way or failed. A finished download wakes the daemon (`on_done`), which
//! converges again. One-shot commands (`apply`, `plan`) download inline instead.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::fetch::{self, Options};
use crate::root::HostRoot;

/// What the step gets.
#[derive(Debug)]
pub(crate) enum Got {
    /// The newest good download (possibly being refreshed meanwhile).
    Bytes(Arc<Vec<u8>>),
    /// No good copy yet; a download runs: what it is doing.
    Pending(String),
    /// The last download failed and the next is not due yet: why, and when it is.
    Failed(String),
}

/// One source as the step names it: a different URL or pin is a different download.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Key {
    url: String,
    pinned: Option<String>,
}

#[derive(Debug, Default)]
struct State {
    /// The download under way, and since when (for debugging).
    running: Option<(Key, Instant)>,
    /// The newest good copy, and when it arrived.
    good: Option<(Key, Arc<Vec<u8>>, Instant)>,
    /// The last failure, and when the next attempt may start.
    failed: Option<(Key, String, Instant)>,
    /// Backoff between failed downloads (each is already `retries` attempts).
    backoff: Duration,
    /// The source the step asked for last: a retrying download of another one gives up.
    wanted: Option<Key>,
}

/// The downloads of one daemon.
pub(crate) struct Background {
    state: Arc<Mutex<State>>,
    on_done: Arc<dyn Fn() + Send + Sync>,
}

impl std::fmt::Debug for Background {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Background").finish_non_exhaustive()
    }
}

const FIRST_BACKOFF: Duration = Duration::from_secs(5);

impl Background {
    pub(crate) fn new(on_done: impl Fn() + Send + Sync + 'static) -> Background {
        Background {
            state: Arc::default(),
            on_done: Arc::new(on_done),
        }
    }

    /// The bundle at `url` for a converge. `refresh`: how old a good copy may be before it is
    /// downloaded again (the drift interval); a pinned copy is never downloaded again.
    pub(crate) fn get(&self, root: &HostRoot, url: &str, opts: &Options, refresh: Duration) -> Got {
        let key = Key {
            url: url.to_owned(),
            pinned: opts.pinned.clone(),
        };
        let Ok(mut st) = self.state.lock() else {
            return Got::Failed("the download state is poisoned".into());
        };
        let now = Instant::now();
        st.wanted = Some(key.clone());
        let good = st.good.as_ref().filter(|(k, _, _)| *k == key);
        let stale = good.is_none_or(|(_, _, at)| key.pinned.is_none() && now.duration_since(*at) >= refresh);
        let failed_recently = st
            .failed
            .as_ref()
            .filter(|(k, _, _)| *k == key)
            .is_some_and(|(_, _, next)| now < *next);
        if stale && st.running.is_none() && !failed_recently {
            st.running = Some((key.clone(), now));
            self.spawn(root.clone(), key.clone(), opts.clone());
        }
        if let Some((_, bytes, _)) = st.good.as_ref().filter(|(k, _, _)| *k == key) {
            return Got::Bytes(bytes.clone());
        }
        let last_failure = st
            .failed
            .as_ref()
            .filter(|(k, _, _)| *k == key)
            .map(|(_, why, next)| (why.clone(), *next));
        match (&st.running, last_failure) {
            (Some((k, _)), failure) if *k == key => Got::Pending(format!(
                "downloading {url} in the background (the other steps go on){}{}",
                crate::progress::download()
                    .strip_prefix(url)
                    .map(|moving| format!(", {}", moving.trim_start_matches(": ")))
                    .unwrap_or_default(),
                failure
                    .map(|(why, next)| format!(
                        "; the last download failed: {why}; next attempt in {} s",
                        next.saturating_duration_since(now).as_secs()
                    ))
                    .unwrap_or_default()
            )),
            (_, Some((why, next))) => Got::Failed(format!(
                "{why}; next download in {} s",
                next.saturating_duration_since(now).as_secs()
            )),
            _ => Got::Pending(format!("waiting to download {url} (another download runs)")),
        }
    }

    /// Downloads `key` on a thread of its own until it succeeds: a failed download is retried on
    /// its own schedule (full jitter below a doubling bound), not when the next converge pass
    /// happens to come, and the daemon is woken after every attempt. The thread ends when the
    /// step stops asking for this source (a new URL or pin) or the daemon stops.
    fn spawn(&self, root: HostRoot, key: Key, opts: Options) {
        let state = self.state.clone();
        let on_done = self.on_done.clone();
        let spawned = std::thread::Builder::new()
            .name("download".into())
            .spawn(move || {
                crate::progress::detach_this_thread();
                // A fleet powered on together spreads its first downloads (the boot gate).
                let gate = crate::jitter::until_boot_gate();
                if !gate.is_zero() {
                    tracing::info!(url = %key.url, wait = ?gate, "downloading the bundle at this node's place in the fleet's boot spread");
                    if !crate::progress::sleep(gate) {
                        if let Ok(mut st) = state.lock() {
                            st.running = None;
                        }
                        return;
                    }
                }
                loop {
                    let result = fetch::download(&root, &key.url, &opts);
                    let retry_in = record(&state, &key, result);
                    on_done();
                    let Some(retry_in) = retry_in else { return };
                    if !wait_for_retry(&state, &key, retry_in) {
                        if let Ok(mut st) = state.lock() {
                            st.running = None;
                        }
                        return;
                    }
                    if let Ok(mut st) = state.lock() {
                        st.running = Some((key.clone(), Instant::now()));
                    }
                }
            });
        if let Err(e) = spawned {
            if let Ok(mut st) = self.state.lock() {
                st.running = None;
            }
            tracing::error!(error = %e, "cannot start a download thread");
        }
    }
}

/// Keeps a download's result; `Some(wait)` before the next attempt when it failed (the download
/// stays this thread's: nothing else starts one meanwhile).
fn record(state: &Mutex<State>, key: &Key, result: Result<Vec<u8>, fetch::FetchError>) -> Option<Duration> {
    let Ok(mut st) = state.lock() else { return None };
    let now = Instant::now();
    match result {
        Ok(bytes) => {
            st.running = None;
            st.good = Some((key.clone(), Arc::new(bytes), now));
            st.failed = None;
            st.backoff = Duration::ZERO;
            None
        }
        Err(e) => {
            st.backoff = next_backoff(st.backoff);
            // A random time below the bound (full jitter: the fleet spreads), never within a second.
            let retry_in = crate::jitter::jitter_above(crate::jitter::RETRY_FLOOR, st.backoff);
            tracing::warn!(url = %key.url, error = %e, ?retry_in, "bundle download failed");
            st.failed = Some((key.clone(), e.to_string(), now + retry_in));
            Some(retry_in)
        }
    }
}

/// Sleeps until the retry is due; `false` when the step no longer asks for `key` (its source
/// changed) or the daemon is stopping.
fn wait_for_retry(state: &Mutex<State>, key: &Key, wait: Duration) -> bool {
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline {
        let step = deadline
            .saturating_duration_since(Instant::now())
            .min(Duration::from_secs(1));
        if !crate::progress::sleep(step) {
            return false;
        }
        let wanted = state
            .lock()
            .map(|st| st.wanted.as_ref() == Some(key))
            .unwrap_or(false);
        if !wanted {
            return false;
        }
    }
    true
}

/// 5 s, 10 s, 20 s … capped at 5 minutes.
fn next_backoff(current: Duration) -> Duration {
    if current.is_zero() {
        FIRST_BACKOFF
    } else {
        (current * 2).min(Duration::from_secs(300))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plain http, one attempt per download.
    fn http_options(timeout: Duration) -> Options {
        Options {
            ca_file: None,
            allow_http: true,
            timeout,
            retries: 0,
            backoff: Duration::from_millis(10),
            max_bytes: 1 << 30,
            pinned: None,
        }
    }

    #[test]
    fn backoff_doubles_from_five_seconds_to_five_minutes() {
        let mut b = Duration::ZERO;
        let seen: Vec<u64> = (0..9)
            .map(|_| {
                b = next_backoff(b);
                b.as_secs()
            })
            .collect();
        assert_eq!(seen, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
    }

    #[test]
    fn a_local_failure_is_reported_then_retried_after_its_backoff() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = HostRoot::at(dir.path());
        let (tx, rx) = std::sync::mpsc::channel();
        let bg = Background::new(move || {
            let _ = tx.send(());
        });
        let opts = http_options(Duration::from_secs(1));
        // Nothing listens on port 9 of the loopback: refused at once.
        let url = "http://127.0.0.1:9/assets";
        assert!(matches!(
            bg.get(&root, url, &opts, Duration::from_secs(60)),
            Got::Pending(_)
        ));
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the download finished");
        match bg.get(&root, url, &opts, Duration::from_secs(60)) {
            Got::Pending(why) => assert!(
                why.contains("127.0.0.1:9") && why.contains("next attempt in"),
                "{why}"
            ),
            other => panic!("{other:?}"),
        }
        // Retried on its own schedule (at most 5 s), without the step asking again.
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the download was retried by itself");
    }

    #[test]
    fn a_retrying_download_of_a_source_no_longer_wanted_gives_up() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = HostRoot::at(dir.path());
        let (tx, rx) = std::sync::mpsc::channel();
        let bg = Background::new(move || {
            let _ = tx.send(());
        });
        let opts = http_options(Duration::from_secs(1));
        bg.get(&root, "http://127.0.0.1:9/a", &opts, Duration::from_secs(60));
        rx.recv_timeout(Duration::from_secs(10)).expect("first attempt");
        // The configuration now names another source: the first one's retry stops.
        bg.get(&root, "http://127.0.0.1:9/b", &opts, Duration::from_secs(60));
        let deadline = Instant::now() + Duration::from_secs(8);
        while bg
            .state
            .lock()
            .is_ok_and(|st| st.running.as_ref().is_some_and(|(k, _)| k.url.ends_with("/a")))
        {
            assert!(
                Instant::now() < deadline,
                "the old source's download kept retrying"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    #[test]
    fn a_slow_download_says_how_it_moves() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        std::thread::spawn(move || {
            if let Ok((mut c, _)) = listener.accept() {
                let mut buf = [0u8; 1024];
                let _ = c.read(&mut buf);
                let total = 4usize << 20;
                let _ = c.write_all(format!("HTTP/1.1 200 OK\r\nContent-Length: {total}\r\n\r\n").as_bytes());
                let chunk = vec![b'x'; 256 << 10];
                for _ in 0..16 {
                    let _ = c.write_all(&chunk);
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        });
        let dir = tempfile::tempdir().expect("tempdir");
        let root = HostRoot::at(dir.path());
        let bg = Background::new(|| {});
        let opts = http_options(Duration::from_secs(30));
        let url = format!("http://127.0.0.1:{port}/assets");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match bg.get(&root, &url, &opts, Duration::from_secs(60)) {
                Got::Pending(why) if why.contains("MiB/s") => {
                    assert!(why.contains("of 4.0 MiB") && why.contains("s left"), "{why}");
                    return;
                }
                Got::Bytes(_) => panic!("finished before any progress was said"),
                _ => {}
            }
            assert!(Instant::now() < deadline, "no progress said");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
