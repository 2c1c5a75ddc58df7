//! `nodeward wait`: blocks until the running daemon reports the node converged, for units that
//! truly need a converged node (`nodeward-converged.service` runs it). READY itself never waits
//! for that (see `daemon::lifecycle`).

use std::time::{Duration, Instant};

use nodeward::daemon::lifecycle::Phase;
use nodeward::daemon::prospect::{self, Prospect};
use nodeward::daemon::state::DaemonState;

use super::env::Env;
use super::exit::Outcome;
use super::output::write_stdout;

/// How often the state file is read.
const POLL: Duration = Duration::from_millis(250);
/// How often systemd is asked about `--unit` while no live daemon has written its state.
const ASK_EVERY: Duration = Duration::from_secs(2);
/// The longest `--timeout` (a year): a deadline further out than that means "forever" anyway.
pub const MAX_TIMEOUT: u64 = 365 * 86_400;

/// `--unit` given something systemd would not take for a unit name.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not a systemd unit name (like nodeward.service)")]
pub struct NotAUnitName(String);

/// `--unit`: a systemd unit name as systemd spells one (`name.type`, at most 255 bytes, no `/`).
pub fn unit_name(s: &str) -> Result<String, NotAUnitName> {
    let valid = s.len() <= 255
        && s.rsplit_once('.')
            .is_some_and(|(name, kind)| !name.is_empty() && !kind.is_empty())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b":-_.\\@".contains(&b));
    if valid {
        Ok(s.to_owned())
    } else {
        Err(NotAUnitName(nodeward::text::printable(s).into_owned()))
    }
}

pub fn run(env: &Env, timeout_seconds: u64, unit: Option<&str>) -> anyhow::Result<Outcome> {
    let now = Instant::now();
    let deadline = now
        .checked_add(Duration::from_secs(timeout_seconds.min(MAX_TIMEOUT)))
        .unwrap_or(now);
    let mut asked: Option<Instant> = None;
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
        if let Some(unit) = unit.filter(|_| live.is_none() && asked.is_none_or(|t| t.elapsed() >= ASK_EVERY))
        {
            asked = Some(Instant::now());
            match prospect::ask(unit) {
                Prospect::Never(why) => {
                    anyhow::bail!("not converging: {why}: nothing runs nodeward on this node")
                }
                Prospect::Unknown(why) => tracing::debug!(unit, %why, "cannot ask systemd; waiting on"),
                Prospect::Coming => {}
            }
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
