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

pub fn run(env: &Env, timeout_seconds: u64) -> anyhow::Result<Outcome> {
    let deadline = Instant::now() + Duration::from_secs(timeout_seconds);
    loop {
        let state = DaemonState::load(env.root());
        if let Some(st) = state.as_ref().filter(|st| st.phase == Phase::Converged) {
            write_stdout(format_args!("converged: {}\n", st.status));
            return Ok(Outcome::Ok);
        }
        if Instant::now() >= deadline {
            let said = match state {
                Some(st) => format!("{:?}: {}", st.phase, st.status).to_lowercase(),
                None => "no state file: is nodeward.service running?".to_owned(),
            };
            anyhow::bail!("not converged within {timeout_seconds} s: {said}");
        }
        std::thread::sleep(POLL);
    }
}
