//! One converge pass, as the daemon's worker thread runs it: the steps, the kubelet wanted, the
//! preflight checks; and the journal lines for checks that start or stop failing.

use std::time::{Duration, Instant};

use super::exporter;
use super::first_start::{FIRST_CHECKS_WAIT, FirstStart};
use super::state;
use crate::check::{self, Finding, Observation, Status};
use crate::config::Settings;
use crate::kubelet::handoff::Handoff;
use crate::plan::Report;
use crate::root::RunMode;
use crate::steps::context::Beside;
use crate::steps::{self, Context, Driver, Step};

/// What a converge on the worker thread found.
#[derive(Debug)]
pub(super) struct Outcome {
    /// The report, or why the pass could not run.
    pub(crate) report: Result<Report, DidNotRun>,
    /// The preflight checks follow on the same thread (they were due): the next pass waits for
    /// them, the kubelet does not.
    pub(crate) checks_follow: bool,
    /// Wall time of the pass, and the certificates seen (for metrics, when they are on).
    pub(crate) seconds: f64,
    pub(crate) certs: crate::host::cert::CertScan,
}

/// Why a pass could not run at all; the loop retries it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DidNotRun {
    #[error("cannot observe the host: {0}")]
    Observe(#[source] crate::host::HostError),
    /// A one-shot `apply` or `bundle install` holds the write lock.
    #[error("waiting: {0}")]
    Locked(#[source] crate::host::lock::LockError),
}

impl Outcome {
    /// A pass that could not run: the supervisor keeps what it has, the loop retries.
    fn did_not_run(why: DidNotRun) -> Outcome {
        Outcome {
            report: Err(why),
            checks_follow: false,
            seconds: 0.0,
            certs: Default::default(),
        }
    }
}

/// The preflight checks of one pass, and where each image the node needs came from.
#[derive(Debug)]
pub(super) struct Checked {
    pub(crate) checks: Vec<Finding>,
    pub(crate) images: Vec<check::ImageSource>,
}

/// One pass. `wanted` gets the kubelet wanted and its engine as soon as the kubelet step is done
/// (the steps after it, NetworkManager's and networkd's, do not hold its start); nothing when the
/// step could not work it out (the supervisor keeps what it has). `passed` gets the outcome once
/// the steps are done; the checks, when due, run after that against the node the pass left and
/// are returned (on a first boot they do not hold the kubelet's start either).
pub(super) fn converge(
    mode: &RunMode,
    settings: &Settings,
    beside: &Beside,
    checks: Option<&FirstStart>,
    wanted: impl FnOnce(Handoff),
    passed: impl FnOnce(Outcome),
) -> Option<Checked> {
    let started = Instant::now();
    let ctx = match Context::new(mode, settings, Driver::Daemon(beside)) {
        Ok(ctx) => ctx,
        Err(e) => {
            passed(Outcome::did_not_run(DidNotRun::Observe(e)));
            return None;
        }
    };
    // Short: a one-shot `apply` or `bundle install` holding the lock is waited for at the next
    // pass rather than for long here.
    let mut wanted = Some(wanted);
    let kubelet_done = |step: Step| {
        // Resolved once, by the kubelet step of this pass.
        if let (Step::Kubelet, Some(want)) = (step, ctx.kubelet.get()) {
            if let Some(tell) = wanted.take() {
                tell(want.clone());
            }
        }
    };
    let report = match steps::apply_then(&ctx, &[], Duration::from_secs(20), kubelet_done) {
        Ok(r) => r,
        Err(e) => {
            passed(Outcome::did_not_run(DidNotRun::Locked(e)));
            return None;
        }
    };
    // Whether this pass handed a kubelet to the supervisor (else its first start is not coming
    // from this pass, and the checks do not wait for it).
    let handed = wanted.is_none();
    // A test holds a pass here, having read the node, to change it before the pass answers.
    crate::failpoint::pause("converge-pass-end");
    crate::progress::beat();
    passed(Outcome {
        report: Ok(report),
        checks_follow: checks.is_some(),
        seconds: started.elapsed().as_secs_f64(),
        certs: exporter::certificates(&settings.metrics, &mode.root),
    });
    checks.map(|first_start| {
        // A test holds the checks here to ask for a pass while they run.
        crate::failpoint::pause("converge-checks");
        if handed && !first_start.wait(FIRST_CHECKS_WAIT) {
            tracing::debug!(waited = ?FIRST_CHECKS_WAIT, "the kubelet's first start has not settled: checking anyway");
        }
        let observed = Observation::gather(&ctx);
        Checked {
            checks: check::run(&observed, settings, &settings.check_ignore),
            images: check::image_sources(&observed),
        }
    })
}

/// Journals the failing checks when the set changes (not at every pass), and their recovery.
pub(crate) fn log_check_changes(checks: &[Finding], state: &mut state::DaemonState) {
    let failing: Vec<String> = check::failing(checks).iter().map(|s| s.to_string()).collect();
    if failing == state.checks_failing {
        return;
    }
    for f in checks.iter().filter(|f| f.status == Status::Fail) {
        if !state.checks_failing.iter().any(|n| n == f.name) {
            tracing::warn!(message_id = crate::event::CHECK_FAILING, check = f.name, observed = %f.observed,
                fix = %f.fix, "check {} failing: {}; fix: {}", f.name, f.observed, f.fix);
        }
    }
    for name in state.checks_failing.iter().filter(|n| !failing.contains(n)) {
        tracing::info!(message_id = crate::event::CHECK_PASSING, check = %name, "check {name} passes again");
    }
    state.checks_failing = failing;
}
