//! A finished converge pass taken in by the loop: the journal lines for steps that start or stop
//! failing, the state file, the metrics, and the watcher's start after the first pass.

use std::sync::mpsc;

use super::inputs::{Event, Options};
use super::pass::Outcome;
use super::{exporter, state, status_line, watch};
use crate::plan::FailureKind;

/// What a finished pass leaves for the loop.
pub(super) struct Finished {
    /// Every step succeeded.
    pub(super) ok: bool,
    /// The worst kind of failure in the pass (it decides when the next one comes).
    pub(super) failure: Option<FailureKind>,
    /// The pass's part of STATUS.
    pub(super) status: String,
}

/// Takes a finished converge in: the journal, the state file, the metrics, the watcher's start.
pub(super) fn finish_converge(
    outcome: Outcome,
    opts: &Options,
    state: &mut state::DaemonState,
    watcher: &mut Option<mpsc::SyncSender<Event>>,
    exporter: &mut exporter::Exporter,
) -> Finished {
    let report = match outcome.report {
        Ok(r) => r,
        Err(why) => {
            tracing::warn!(error = %why, "converge did not run; will retry");
            return Finished {
                ok: false,
                failure: Some(FailureKind::Transient),
                status: why.to_string(),
            };
        }
    };
    let status = status_line::pass(&report);
    let healthy = report.failed_steps().next().is_none();
    exporter.converged(&report, outcome.seconds, outcome.certs);
    if let Some(tx) = watcher.take() {
        // After the first converge (which creates the drop-in directories it watches) and before
        // READY: a change made after READY is never missed.
        match watch::spawn(&opts.mode.root, tx, Event::Watch) {
            Ok(dirs) => tracing::debug!(?dirs, "watching for changes"),
            Err(e) => tracing::warn!(error = %e, "inotify unavailable; relying on the interval"),
        }
    }
    for step in report.failed_steps() {
        let raw = step.error.as_deref().unwrap_or("");
        // Journalled when it starts failing or fails differently, not at every retry.
        let same = state
            .steps
            .iter()
            .any(|p| p.step == step.step.name() && p.error.as_deref() == Some(raw));
        if same {
            continue;
        }
        let kind = step.failure.unwrap_or(FailureKind::Transient);
        // It quotes file names and kernel or engine text: escaped for `journalctl` on a terminal.
        let error = crate::text::printable(raw);
        tracing::warn!(message_id = crate::event::STEP_FAILING, step = %step.step, error = %error, kind = %kind,
            "step {} failing ({kind}): {error}; will retry", step.step);
    }
    for s in report.steps.iter().filter(|s| s.error.is_none()) {
        if state.steps.iter().any(|p| p.step == s.step.name() && !p.ok) {
            tracing::info!(message_id = crate::event::STEP_RECOVERED, step = %s.step, "step {} succeeds again", s.step);
        }
    }
    state.record(&report);
    Finished {
        ok: healthy,
        failure: report.failure(),
        status,
    }
}
