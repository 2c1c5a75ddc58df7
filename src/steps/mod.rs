//! The steps that converge a node, in the order they run, and what they share.

pub mod bundle;
pub(crate) mod container;
pub(crate) mod context;
pub(crate) mod dirs;
pub(crate) mod failure;
pub(crate) mod files;
pub(crate) mod hostfiles;
pub(crate) mod images;
pub mod kubelet;
pub mod modules;
pub(crate) mod networkd;
pub(crate) mod nm;
pub(crate) mod selinux;
pub(crate) mod sysctl;
pub(crate) mod uplink;

use std::time::Duration;

use crate::bundle::install::InstallError;
use crate::host::HostError;
use crate::host::lock::{self, FileLock, LockError};
use crate::plan::{self, FailureKind, Plan, Report, StepPlan};

pub use crate::plan::Step;
pub use context::{Context, Driver, Labeling};

/// Why a step could not be planned (or an interrupted install not finished); shown in the step's
/// report.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StepError {
    #[error(transparent)]
    Host(#[from] HostError),
    #[error("bundle install: {0}")]
    Bundle(#[from] bundle::BundleError),
    #[error("bundle install: an interrupted install could not be finished: {0}")]
    Recovery(#[source] InstallError),
    #[error(transparent)]
    Kubelet(#[from] kubelet::KubeletError),
}

impl StepError {
    /// Waiting, transient or permanent: what retrying can do about it.
    pub(crate) fn kind(&self) -> FailureKind {
        match self {
            StepError::Host(e) => failure::host_kind(e),
            StepError::Bundle(e) => bundle::failure_kind(e),
            StepError::Recovery(_) => FailureKind::Transient,
            StepError::Kubelet(e) => kubelet::failure_kind(e),
        }
    }
}

/// Plans one step against the host as it is now.
pub fn plan_step(ctx: &Context<'_>, step: Step) -> StepPlan {
    let result: Result<StepPlan, StepError> = match step {
        Step::Container => container::plan(ctx).map_err(Into::into),
        Step::Dirs => dirs::plan(ctx).map_err(Into::into),
        Step::Bundle => bundle::plan(ctx).map_err(Into::into),
        Step::Hostfiles => hostfiles::plan(ctx).map_err(Into::into),
        Step::Selinux => selinux::plan(ctx).map_err(Into::into),
        Step::Modules => modules::plan(ctx).map_err(Into::into),
        Step::Sysctl => sysctl::plan(ctx).map_err(Into::into),
        Step::Nm => nm::plan(ctx).map_err(Into::into),
        Step::Networkd => networkd::plan(ctx).map_err(Into::into),
        Step::Images => images::plan(ctx).map_err(Into::into),
        Step::Kubelet => kubelet::plan(ctx).map_err(Into::into),
    };
    result.unwrap_or_else(|e| StepPlan::failed(step, e.kind(), e))
}

/// Plans the selected steps (all when `only` is empty) without touching anything.
pub fn plan(ctx: &Context<'_>, only: &[Step]) -> Plan {
    let steps = selected(only).map(|s| plan_step(ctx, s)).collect();
    Plan {
        root: ctx.root.dir().display().to_string(),
        container: ctx.container.clone(),
        steps,
    }
}

/// Plans and applies the selected steps one after another, so each step is planned against the
/// host as the steps before it left it.
pub fn apply(ctx: &Context<'_>, only: &[Step], lock_wait: Duration) -> Result<Report, LockError> {
    apply_then(ctx, only, lock_wait, |_| {})
}

/// [`apply`], telling `applied` each step as soon as it is done (the daemon hands the kubelet to
/// its supervisor after its step, not after the whole pass).
pub fn apply_then(
    ctx: &Context<'_>,
    only: &[Step],
    lock_wait: Duration,
    applied: impl FnMut(Step),
) -> Result<Report, LockError> {
    apply_each(ctx, only, lock_wait, plan_step, applied)
}

/// [`apply`] with the plan of each step made by `plan_one`: `nodeward bundle install FILE` plans
/// the bundle step from the bytes in hand and shares everything else.
///
/// Holds the write lock throughout (waiting up to `lock_wait` for another writer), and finishes an
/// interrupted bundle install before anything is planned: a plan made over a half-committed
/// install would compare against files that are about to change. The bundle step reports that
/// recovery.
pub fn apply_with(
    ctx: &Context<'_>,
    only: &[Step],
    lock_wait: Duration,
    plan_one: impl FnMut(&Context<'_>, Step) -> StepPlan,
) -> Result<Report, LockError> {
    apply_each(ctx, only, lock_wait, plan_one, |_| {})
}

fn apply_each(
    ctx: &Context<'_>,
    only: &[Step],
    lock_wait: Duration,
    mut plan_one: impl FnMut(&Context<'_>, Step) -> StepPlan,
    mut applied: impl FnMut(Step),
) -> Result<Report, LockError> {
    let _lock = FileLock::acquire(ctx.root, lock::WRITE, "is changing this node", lock_wait)?;
    let recovery = crate::bundle::install::recover(ctx.root).map_err(StepError::Recovery);
    let steps = selected(only)
        .inspect(|_| crate::progress::beat())
        .map(|s| {
            // A test holds a pass at a step's start to see what happened before it.
            crate::failpoint::pause(&format!("step-{}", s.name()));
            let started = std::time::Instant::now();
            let plan = match (s, &recovery) {
                (Step::Bundle, Err(e)) => StepPlan::failed(s, e.kind(), e),
                _ => plan_one(ctx, s),
            };
            let mut report = plan::apply_step(plan);
            if s == Step::Bundle && matches!(recovery, Ok(true)) {
                report
                    .notes
                    .insert(0, "finished an interrupted install before planning".into());
            }
            report.seconds = started.elapsed().as_secs_f64();
            applied(s);
            report
        })
        .collect();
    Ok(Report {
        root: ctx.root.dir().display().to_string(),
        container: ctx.container.clone(),
        steps,
    })
}

fn selected(only: &[Step]) -> impl Iterator<Item = Step> + '_ {
    Step::ALL
        .into_iter()
        .filter(move |s| only.is_empty() || only.contains(s))
}
