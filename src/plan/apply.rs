//! Carrying out a step's plan: in order, a batch of independent changes at once, stopping the step
//! at its first failure.

use super::change::{Change, EffectError, StepPlan, StepReport};
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
                    tracing::info!(step = %plan.step, subject = %change.subject, change = %what,
                        "applied: {} {} {what}", plan.step, change.subject);
                    report.applied.push(change);
                }
                Err(e) => {
                    tracing::error!(step = %plan.step, subject = %change.subject, error = %e,
                        "failed: {} {}: {e}", plan.step, change.subject);
                    report.error.get_or_insert(e.to_string());
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
