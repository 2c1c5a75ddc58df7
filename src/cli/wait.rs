//! `nodeward wait`: blocks until the running daemon reports the node converged, for units that
//! truly need a converged node (`nodeward-converged.service` runs it). READY itself never waits
//! for that (see `daemon::lifecycle`).

use std::time::{Duration, Instant};

use nodeward::daemon::lifecycle::Phase;
use nodeward::daemon::state::DaemonState;

use super::env::Env;
use super::exit::Outcome;
use super::output::write_stdout;

/// How often the state file is read.
const POLL: Duration = Duration::from_millis(250);
/// The longest `--timeout` (a year): a deadline further out than that means "forever" anyway.
pub const MAX_TIMEOUT: u64 = 365 * 86_400;

pub fn run(env: &Env, timeout_seconds: u64) -> anyhow::Result<Outcome> {
    let now = Instant::now();
    let deadline = now
        .checked_add(Duration::from_secs(timeout_seconds.min(MAX_TIMEOUT)))
        .unwrap_or(now);
    loop {
        let state = DaemonState::load(env.root());
        // A state file whose writer is gone (SIGKILLed, crashed) says nothing about the node now.
        let live = state.as_ref().filter(|st| st.writer_alive());
        if let Some(st) = live.filter(|st| st.phase == Phase::Converged) {
            write_stdout(format_args!(
                "converged: {}\n",
                nodeward::text::printable(&st.status)
            ));
            return Ok(Outcome::Ok);
        }
        if Instant::now() >= deadline {
            let said = match (&state, live) {
                (_, Some(st)) => format!("{:?}: {}", st.phase, st.status).to_lowercase(),
                (Some(st), None) => format!(
                    "the daemon is not running (last state from pid {}, {} s ago: {})",
                    st.pid,
                    nodeward::clock::now().saturating_sub(st.last_converge.max(st.started)),
                    st.status
                ),
                (None, None) => "no state file: is nodeward.service running?".to_owned(),
            };
            anyhow::bail!("not converged within {timeout_seconds} s: {said}");
        }
        std::thread::sleep(POLL);
    }
}
