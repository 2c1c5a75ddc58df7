//! The daemon's phase and the rules that hang on it: when READY=1 is sent, when the node counts as
//! converged, and what a stop does to the kubelet. Pure: the loop feeds inputs, acts on outputs.
//!
//! READY means "nodeward finished its first pass", whatever the pass found. A failing step or a
//! kubelet that cannot start yet never holds `multi-user.target` (nor reaches systemd's start
//! timeout, which would stop the unit): it is reported (STATUS, `status`, metrics, the journal) and
//! retried. Units that need a converged node wait for that with `nodeward wait`.

use crate::host::dbus::OwnJob;
use crate::kubelet::settings::input::OnAgentStop;

/// Where the daemon is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// The first pass has not finished: systemd shows the unit `activating`.
    #[default]
    Starting,
    /// READY was sent; the last pass failed somewhere, or the kubelet does not run (yet).
    Degraded,
    /// READY was sent; every step succeeded in the last pass and the kubelet runs when wanted.
    Converged,
    /// SIGTERM or SIGINT came.
    Stopping,
}

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Input {
    /// A pass finished (or could not run: `steps_ok` false).
    PassFinished {
        steps_ok: bool,
    },
    /// The kubelet's state changed: whether it is wanted and runs.
    Kubelet {
        wanted: bool,
        running: bool,
    },
    Stop,
}

/// What the loop must do about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Output {
    /// Send READY=1 (once, at the end of the first pass).
    Ready,
    /// The node became converged (journal it).
    Converged,
    /// The node stopped being converged.
    Degraded,
}

/// The phase and what it is computed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lifecycle {
    pub(crate) phase: Phase,
    steps_ok: bool,
    kubelet_ok: bool,
}

impl Default for Lifecycle {
    fn default() -> Lifecycle {
        Lifecycle {
            phase: Phase::Starting,
            steps_ok: false,
            // No kubelet is wanted until a pass says otherwise.
            kubelet_ok: true,
        }
    }
}

impl Lifecycle {
    /// The one transition function: every phase change happens here.
    pub(crate) fn on(&mut self, input: Input) -> Vec<Output> {
        let mut out = Vec::new();
        let before = self.phase;
        match input {
            Input::Stop => {
                self.phase = Phase::Stopping;
                return out;
            }
            Input::PassFinished { steps_ok } => self.steps_ok = steps_ok,
            Input::Kubelet { wanted, running } => self.kubelet_ok = !wanted || running,
        }
        let after = match (before, input) {
            (Phase::Stopping, _) => Phase::Stopping,
            // Only a finished pass ends the start, whatever it found.
            (Phase::Starting, Input::Kubelet { .. }) => Phase::Starting,
            _ if self.steps_ok && self.kubelet_ok => Phase::Converged,
            _ => Phase::Degraded,
        };
        if before == Phase::Starting && after != Phase::Starting {
            out.push(Output::Ready);
        }
        match (before, after) {
            (Phase::Converged, Phase::Converged) | (_, Phase::Starting) | (_, Phase::Stopping) => {}
            (_, Phase::Converged) => out.push(Output::Converged),
            (Phase::Converged, Phase::Degraded) => out.push(Output::Degraded),
            _ => {}
        }
        self.phase = after;
        out
    }

    pub(crate) fn ready(&self) -> bool {
        matches!(self.phase, Phase::Degraded | Phase::Converged)
    }
}

/// Whether a SIGTERM stops the kubelet, by what systemd is doing with nodeward's unit:
///
/// | stop path | systemd's job | the kubelet |
/// | --- | --- | --- |
/// | `systemctl stop nodeward`, shutdown, isolate | stop | stopped (with `on_agent_stop = "stop"`) |
/// | `systemctl restart nodeward`, package upgrade | restart | left running; adopted by the next nodeward |
/// | start timeout | start | left running |
/// | `kill`, `systemctl kill` | none | left running |
/// | watchdog (SIGABRT), crash | — (no SIGTERM) | left running; adopted after `Restart=always` |
/// | bus unanswered | unknown | left running |
/// | run by hand, not a service | — | stopped (it is the operator's Ctrl-C) |
///
/// Only an explicit stop stops it: every other path leaves a healthy kubelet alone.
pub(crate) fn stops_kubelet(setting: OnAgentStop, job: &OwnJob) -> bool {
    match (setting, job) {
        (OnAgentStop::Leave, _) => false,
        (OnAgentStop::Stop, OwnJob::NotAService) => true,
        (OnAgentStop::Stop, OwnJob::Job(kind)) => kind == "stop",
        (OnAgentStop::Stop, OwnJob::Unknown(_)) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pass(ok: bool) -> Input {
        Input::PassFinished { steps_ok: ok }
    }
    fn kubelet(wanted: bool, running: bool) -> Input {
        Input::Kubelet { wanted, running }
    }

    #[test]
    fn ready_comes_after_the_first_pass_whatever_it_found() {
        for ok in [true, false] {
            let mut l = Lifecycle::default();
            assert!(!l.ready());
            let out = l.on(pass(ok));
            assert!(out.contains(&Output::Ready), "{ok}: {out:?}");
            assert!(l.ready());
            assert_eq!(l.phase, if ok { Phase::Converged } else { Phase::Degraded });
            // Never twice.
            assert!(!l.on(pass(ok)).contains(&Output::Ready));
        }
    }

    #[test]
    fn a_kubelet_that_does_not_run_degrades_but_never_holds_ready() {
        let mut l = Lifecycle::default();
        assert!(
            l.on(kubelet(true, false)).is_empty(),
            "the kubelet alone never ends the start"
        );
        assert_eq!(l.phase, Phase::Starting);
        assert_eq!(l.on(pass(true)), vec![Output::Ready]);
        assert_eq!(l.phase, Phase::Degraded, "the wanted kubelet does not run yet");
        assert_eq!(l.on(kubelet(true, true)), vec![Output::Converged]);
        assert_eq!(l.phase, Phase::Converged);
        assert_eq!(l.on(kubelet(true, false)), vec![Output::Degraded]);
        assert_eq!(
            l.on(kubelet(false, false)),
            vec![Output::Converged],
            "not wanted: fine"
        );
    }

    #[test]
    fn a_failing_step_degrades_and_its_recovery_converges() {
        let mut l = Lifecycle::default();
        assert_eq!(l.on(pass(true)), vec![Output::Ready, Output::Converged]);
        assert_eq!(l.on(pass(true)), vec![]);
        assert_eq!(l.on(pass(false)), vec![Output::Degraded]);
        assert_eq!(l.on(pass(false)), vec![]);
        assert_eq!(l.on(pass(true)), vec![Output::Converged]);
    }

    #[test]
    fn stopping_is_final() {
        let mut l = Lifecycle::default();
        l.on(pass(true));
        assert!(l.on(Input::Stop).is_empty());
        assert!(l.on(pass(true)).is_empty());
        assert!(l.on(kubelet(true, true)).is_empty());
        assert_eq!(l.phase, Phase::Stopping);
        // A stop before the first pass sends no READY either.
        let mut early = Lifecycle::default();
        early.on(Input::Stop);
        assert!(early.on(pass(true)).is_empty());
    }

    #[test]
    fn only_an_explicit_stop_stops_the_kubelet() {
        let job = |j: &str| OwnJob::Job(j.into());
        let stop = OnAgentStop::Stop;
        assert!(stops_kubelet(stop, &job("stop")), "systemctl stop, shutdown");
        assert!(stops_kubelet(stop, &OwnJob::NotAService), "run by hand");
        for leave in ["restart", "try-restart", "reload-or-restart", "start", ""] {
            assert!(!stops_kubelet(stop, &job(leave)), "{leave:?}");
        }
        assert!(!stops_kubelet(stop, &OwnJob::Unknown("timed out".into())));
        for j in [job("stop"), OwnJob::NotAService] {
            assert!(!stops_kubelet(OnAgentStop::Leave, &j));
        }
    }
}
