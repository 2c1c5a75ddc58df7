//! Crash-injection points for tests: `NODEWARD_FAILPOINT=NAME:N` aborts the process the N-th time
//! (1-based) `hit(NAME)` is reached, as a power cut or SIGKILL would stop it. `NODEWARD_FAIL_IO=NAME`
//! makes every [`io`]`(NAME)` fail instead, as a full disk would. Unset in production; the cost of
//! a pass is one atomic load and a comparison.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

static TARGET: OnceLock<Option<(String, usize)>> = OnceLock::new();
static COUNT: AtomicUsize = AtomicUsize::new(0);

/// Counts a pass through the named point and aborts when the configured pass is reached.
pub(crate) fn hit(name: &str) {
    let target = TARGET.get_or_init(|| {
        let raw = std::env::var("NODEWARD_FAILPOINT").ok()?;
        let (n, count) = raw.rsplit_once(':')?;
        Some((n.to_owned(), count.parse().ok()?))
    });
    if let Some((n, at)) = target {
        if n == name && COUNT.fetch_add(1, Ordering::SeqCst) + 1 == *at {
            eprintln!("failpoint {name}:{at} reached: aborting");
            std::process::abort();
        }
    }
}

static FAIL_IO: OnceLock<Option<String>> = OnceLock::new();

/// An I/O error when `NODEWARD_FAIL_IO` names this point; `Ok` otherwise.
pub(crate) fn io(name: &str) -> std::io::Result<()> {
    let target = FAIL_IO.get_or_init(|| std::env::var("NODEWARD_FAIL_IO").ok());
    match target {
        Some(n) if n == name => Err(std::io::Error::other(format!(
            "failpoint {name}: injected I/O error"
        ))),
        _ => Ok(()),
    }
}

static PAUSE: OnceLock<Option<(String, std::path::PathBuf)>> = OnceLock::new();

/// Holds the process at the named point, for a test that changes the host exactly there:
/// `NODEWARD_PAUSE=NAME:FILE` creates `FILE.reached` the first time `pause(NAME)` is reached and
/// waits (at most 60 s) until `FILE` exists. An ordering, not a delay: the test acts after
/// `FILE.reached` appears, then lets the process go on.
pub(crate) fn pause(name: &str) {
    let target = PAUSE.get_or_init(|| {
        let raw = std::env::var("NODEWARD_PAUSE").ok()?;
        let (n, file) = raw.split_once(':')?;
        Some((n.to_owned(), std::path::PathBuf::from(file)))
    });
    let Some((n, gate)) = target else { return };
    static DONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if n != name || DONE.swap(true, Ordering::SeqCst) {
        return;
    }
    let mut reached = gate.clone().into_os_string();
    reached.push(".reached");
    let _ = std::fs::write(&reached, name);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !gate.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
