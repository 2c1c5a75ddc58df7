//! Carrying out a step's plan: in order, a batch of independent changes at once. Each item stands
//! alone, as systemd-modules-load and systemd-sysctl treat theirs: a failed change is reported and
//! the step goes on, skipping only the changes that require it. A step that must be all or nothing
//! (the bundle) stops at its first failure.

use std::collections::HashSet;

use super::change::{Change, EffectError, FailureKind, ItemFailure, StepPlan, StepReport, summarize};
use super::render;

/// A change's effect panicked on its thread (a bug, reported rather than propagated).
#[derive(Debug, thiserror::Error)]
#[error("a concurrent change panicked")]
struct Panicked;

/// Applies a step's plan in order. A run of changes that share a batch number is applied
/// concurrently, and all of it completes before the next change. The report names every item that
/// failed, in planning or here.
pub fn apply_step(plan: StepPlan) -> StepReport {
    let mut report = StepReport {
        step: plan.step,
        applied: Vec::new(),
        notes: plan.notes,
        failed: plan.failed,
        error: plan.error,
        failure: plan.failure,
        seconds: 0.0,
    };
    if report.error.is_some() {
        return report;
    }
    // Subjects that failed or were not attempted: what requires them is not attempted either.
    let mut broken: HashSet<String> = report.failed.iter().map(|f| f.subject.clone()).collect();
    let mut changes = plan.changes.into_iter().peekable();
    while let Some(first) = changes.next() {
        let mut group = vec![first];
        while let Some(next) = changes.next_if(|c| c.batch.is_some() && c.batch == group[0].batch) {
            group.push(next);
        }
        let group = skip_blocked(group, &mut broken, &mut report);
        let results = apply_group(&group);
        crate::progress::beat();
        let mut stop = false;
        for (change, result) in group.into_iter().zip(results) {
            match result {
                Ok(()) => {
                    let what = render::describe(&change.action);
                    tracing::info!(message_id = crate::event::CHANGE_APPLIED, step = %plan.step,
                        subject = %change.subject, change = %what, "applied: {} {} {what}", plan.step, change.subject);
                    report.applied.push(change);
                }
                Err(e) => {
                    // The subject and the error quote host paths and program output.
                    let (subject, error) = (
                        crate::text::printable(&change.subject).into_owned(),
                        crate::text::printable(&e.to_string()).into_owned(),
                    );
                    tracing::error!(step = %plan.step, %subject, %error,
                        "failed: {} {subject}: {error}", plan.step);
                    broken.insert(change.subject.clone());
                    // A change that was planned and could not be made: the host moved, or an I/O
                    // or bus call failed. The next pass plans again.
                    report.failed.push(ItemFailure {
                        subject: change.subject,
                        error: e.to_string(),
                        kind: FailureKind::Transient,
                    });
                    stop |= plan.all_or_nothing;
                }
            }
        }
        if stop {
            break;
        }
    }
    if let Some((error, kind)) = summarize(&report.failed) {
        report.error = Some(error);
        report.failure = Some(kind);
    }
    report
}

/// The changes of `group` whose requirements all held; the others are recorded as failed items
/// (not attempted) and become broken in turn.
fn skip_blocked(group: Vec<Change>, broken: &mut HashSet<String>, report: &mut StepReport) -> Vec<Change> {
    let (ready, blocked): (Vec<Change>, Vec<Change>) = group
        .into_iter()
        .partition(|c| !c.requires.iter().any(|r| broken.contains(r)));
    for change in blocked {
        let needs: Vec<&str> = change
            .requires
            .iter()
            .filter(|r| broken.contains(*r))
            .map(String::as_str)
            .collect();
        let error = format!("not attempted: needs {}, which failed", needs.join(", "));
        let subject = crate::text::printable(&change.subject).into_owned();
        tracing::warn!(step = %report.step, %subject, %error, "skipped: {} {subject}: {error}", report.step);
        report.failed.push(ItemFailure {
            subject: change.subject.clone(),
            error,
            kind: FailureKind::Transient,
        });
        broken.insert(change.subject);
    }
    ready
}

/// One change on this thread, or a batch on one thread each.
fn apply_group(group: &[Change]) -> Vec<Result<(), EffectError>> {
    if let [one] = group {
        return vec![one.apply()];
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = group.iter().map(|c| s.spawn(move || c.apply())).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(Box::new(Panicked))))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Barrier, Mutex};

    use super::*;
    use crate::plan::change::{Action, Effect};
    use crate::plan::step::Step;

    /// Records the order effects ran in; fails or panics on request.
    #[derive(Debug)]
    struct Probe {
        log: Arc<Mutex<Vec<String>>>,
        fail: bool,
        panic: bool,
        /// Concurrent members of one batch meet here: proof they run at the same time.
        barrier: Option<Arc<Barrier>>,
    }

    impl Effect for Probe {
        fn apply(&self, change: &Change) -> Result<(), EffectError> {
            if let Some(b) = &self.barrier {
                b.wait();
            }
            assert!(!self.panic, "probe told to panic");
            self.log.lock().expect("log").push(change.subject.clone());
            if self.fail {
                return Err(format!("{} refused", change.subject).into());
            }
            Ok(())
        }
    }

    struct Builder {
        log: Arc<Mutex<Vec<String>>>,
    }

    impl Builder {
        fn change(&self, subject: &str, fail: bool) -> Change {
            self.with(subject, fail, false, None)
        }
        fn with(&self, subject: &str, fail: bool, panic: bool, barrier: Option<Arc<Barrier>>) -> Change {
            let effect = Probe {
                log: self.log.clone(),
                fail,
                panic,
                barrier,
            };
            Change::new(subject, "/nonexistent", Action::RemoveFile, effect)
        }
        fn ran(&self) -> Vec<String> {
            self.log.lock().expect("log").clone()
        }
    }

    fn builder() -> Builder {
        Builder {
            log: Arc::new(Mutex::new(Vec::new())),
        }
    }

    fn plan(changes: Vec<Change>) -> StepPlan {
        StepPlan {
            changes,
            notes: vec!["a note".into()],
            ..StepPlan::new(Step::Dirs)
        }
    }

    #[test]
    fn changes_run_in_order_and_the_report_lists_them() {
        let b = builder();
        let report = apply_step(plan(vec![b.change("a", false), b.change("b", false)]));
        assert_eq!(b.ran(), ["a", "b"]);
        let applied: Vec<&str> = report.applied.iter().map(|c| c.subject.as_str()).collect();
        assert_eq!(applied, ["a", "b"]);
        assert_eq!(report.error, None);
        assert_eq!(report.notes, ["a note"]);
    }

    #[test]
    fn one_failed_item_never_stops_the_others() {
        let b = builder();
        let report = apply_step(plan(vec![
            b.change("a", false),
            b.change("b", true),
            b.change("c", false),
        ]));
        assert_eq!(b.ran(), ["a", "b", "c"], "c is still attempted");
        let applied: Vec<&str> = report.applied.iter().map(|c| c.subject.as_str()).collect();
        assert_eq!(applied, ["a", "c"]);
        assert_eq!(report.error.as_deref(), Some("b refused"));
        assert_eq!(report.failure, Some(FailureKind::Transient));
        assert_eq!(report.failed.len(), 1);
    }

    #[test]
    fn an_all_or_nothing_step_stops_at_its_first_failure() {
        let b = builder();
        let mut p = plan(vec![
            b.change("a", false),
            b.change("b", true),
            b.change("c", false),
        ]);
        p.all_or_nothing = true;
        let report = apply_step(p);
        assert_eq!(b.ran(), ["a", "b"], "c is never attempted");
        assert_eq!(report.applied.len(), 1);
        assert_eq!(report.error.as_deref(), Some("b refused"));
    }

    #[test]
    fn what_requires_a_failed_item_waits_with_it_and_the_rest_goes_on() {
        let b = builder();
        let mut p = plan(vec![
            b.change("dep", true).in_batch(0),
            b.change("other", false).in_batch(0),
            b.change("needs-dep", false).in_batch(1).after(["dep".to_owned()]),
            b.change("needs-needs-dep", false).after(["needs-dep".to_owned()]),
            b.change("needs-other", false).after(["other".to_owned()]),
        ]);
        p.fail_item("unplannable", FailureKind::Permanent, "not in this kernel");
        let report = apply_step(p);
        let mut ran = b.ran();
        ran.sort();
        assert_eq!(ran, ["dep", "needs-other", "other"]);
        let failed: Vec<&str> = report.failed.iter().map(|f| f.subject.as_str()).collect();
        assert_eq!(failed, ["unplannable", "dep", "needs-dep", "needs-needs-dep"]);
        assert_eq!(
            report.failure,
            Some(FailureKind::Permanent),
            "the worst kind wins"
        );
        let error = report.error.expect("the step fails");
        assert!(error.starts_with("4 items failed: unplannable: not in this kernel; dep refused; needs-dep: not attempted: needs dep, which failed"), "{error}");
    }

    #[test]
    fn a_step_that_could_not_be_planned_applies_nothing() {
        let b = builder();
        let mut p = plan(vec![b.change("a", false)]);
        p.error = Some("cannot observe".into());
        let report = apply_step(p);
        assert!(b.ran().is_empty());
        assert_eq!(report.error.as_deref(), Some("cannot observe"));
    }

    #[test]
    fn a_batch_runs_concurrently_and_completes_before_the_next_change() {
        let b = builder();
        // Three changes meet at a barrier: only concurrent runs get past it.
        let barrier = Arc::new(Barrier::new(3));
        let batch: Vec<Change> = ["x", "y", "z"]
            .iter()
            .map(|s| b.with(s, false, false, Some(barrier.clone())).in_batch(0))
            .collect();
        let mut changes = batch;
        changes.push(b.change("after", false).in_batch(1));
        let report = apply_step(plan(changes));
        assert_eq!(report.error, None);
        let ran = b.ran();
        assert_eq!(ran.last().map(String::as_str), Some("after"));
        assert_eq!(ran.len(), 4);
    }

    #[test]
    fn a_failure_in_a_batch_keeps_the_others_and_what_follows() {
        let b = builder();
        let changes = vec![
            b.change("x", false).in_batch(0),
            b.change("y", true).in_batch(0),
            b.change("after", false),
        ];
        let report = apply_step(plan(changes));
        let applied: Vec<&str> = report.applied.iter().map(|c| c.subject.as_str()).collect();
        assert_eq!(applied, ["x", "after"]);
        assert_eq!(report.error.as_deref(), Some("y refused"));
    }

    #[test]
    fn a_panicking_effect_in_a_batch_is_a_failure_not_a_crash() {
        let b = builder();
        let changes = vec![
            b.change("x", false).in_batch(0),
            b.with("boom", false, true, None).in_batch(0),
        ];
        let report = apply_step(plan(changes));
        assert_eq!(
            report.error.as_deref(),
            Some("boom: a concurrent change panicked")
        );
        assert_eq!(report.applied.len(), 1);
    }
}
