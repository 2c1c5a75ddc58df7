//! Carrying out a step's plan: in order, a batch of independent changes at once, stopping the step
//! at its first failure.

use super::change::{Change, EffectError, FailureKind, StepPlan, StepReport};
use super::render;

/// A change's effect panicked on its thread (a bug, reported rather than propagated).
#[derive(Debug, thiserror::Error)]
#[error("a concurrent change panicked")]
struct Panicked;

/// Applies a step's plan in order, stopping the step at its first failure. A run of changes that
/// share a batch number is applied concurrently, and all of it completes before the next change.
pub fn apply_step(plan: StepPlan) -> StepReport {
    let mut report = StepReport {
        step: plan.step,
        applied: Vec::new(),
        notes: plan.notes,
        error: plan.error,
        failure: plan.failure,
        seconds: 0.0,
    };
    if report.error.is_some() {
        return report;
    }
    let mut changes = plan.changes.into_iter().peekable();
    while let Some(first) = changes.next() {
        let mut group = vec![first];
        while let Some(next) = changes.next_if(|c| c.batch.is_some() && c.batch == group[0].batch) {
            group.push(next);
        }
        let results = apply_group(&group);
        crate::progress::beat();
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
                    report.error.get_or_insert(e.to_string());
                    // A change that was planned and could not be made: the host moved, or an I/O
                    // or bus call failed. The next pass plans again.
                    report.failure.get_or_insert(FailureKind::Transient);
                }
            }
        }
        if report.error.is_some() {
            break;
        }
    }
    report
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
    fn the_first_failure_stops_the_step() {
        let b = builder();
        let report = apply_step(plan(vec![
            b.change("a", false),
            b.change("b", true),
            b.change("c", false),
        ]));
        assert_eq!(b.ran(), ["a", "b"], "c is never attempted");
        assert_eq!(report.applied.len(), 1);
        assert_eq!(report.error.as_deref(), Some("b refused"));
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
    fn a_failure_in_a_batch_keeps_the_others_and_stops_after_it() {
        let b = builder();
        let changes = vec![
            b.change("x", false).in_batch(0),
            b.change("y", true).in_batch(0),
            b.change("after", false),
        ];
        let report = apply_step(plan(changes));
        let applied: Vec<&str> = report.applied.iter().map(|c| c.subject.as_str()).collect();
        assert_eq!(applied, ["x"]);
        assert_eq!(report.error.as_deref(), Some("y refused"));
        assert!(!b.ran().contains(&"after".to_owned()));
    }

    #[test]
    fn a_panicking_effect_in_a_batch_is_a_failure_not_a_crash() {
        let b = builder();
        let changes = vec![
            b.change("x", false).in_batch(0),
            b.with("boom", false, true, None).in_batch(0),
        ];
        let report = apply_step(plan(changes));
        assert_eq!(report.error.as_deref(), Some("a concurrent change panicked"));
        assert_eq!(report.applied.len(), 1);
    }
}
