//! The `bundle` step: the bundle's pipeline (`bundle::pipeline`) adapted to a step's plan — fetch
//! (or take the daemon's background download), verify, and install what differs in one transaction.

use std::time::Duration;

use crate::bundle::fetch;
use crate::bundle::install::{self, InstallError, InstallPlan};
pub use crate::bundle::pipeline::BundleError;
use crate::bundle::pipeline::{self, Host, Intent};
use crate::plan::Step;
use crate::plan::{Action, BundleFile, Change, Effect, EffectError, FailureKind, FileOp, StepPlan};
use crate::root::HostRoot;
use crate::steps::context::Context;
use crate::types::Mode;

/// What retrying can do about a bundle failure: a download under way is waited for; a server, the
/// network or the install's I/O may recover; a refused bundle or a wrong setting stays refused.
pub fn failure_kind(e: &BundleError) -> FailureKind {
    use fetch::FetchError as F;
    match e {
        BundleError::Downloading(_) => FailureKind::Waiting,
        BundleError::DownloadFailed(_) => FailureKind::Transient,
        BundleError::Fetch(f) => match f {
            F::Resolve { .. } | F::Read { .. } | F::Status { .. } | F::Transport { .. } => {
                FailureKind::Transient
            }
            F::Cancelled { .. } | F::Truncated { .. } => FailureKind::Transient,
            _ => FailureKind::Permanent,
        },
        BundleError::Install(install::InstallError::Host(h)) => crate::steps::failure::host_kind(h),
        BundleError::Install(install::InstallError::State { .. }) => FailureKind::Transient,
        BundleError::Install(_)
        | BundleError::Parse { .. }
        | BundleError::Layout { .. }
        | BundleError::Entry { .. }
        | BundleError::Empty { .. }
        | BundleError::CutShort { .. }
        | BundleError::WouldRemove { .. } => FailureKind::Permanent,
    }
}

pub(crate) fn plan(ctx: &Context<'_>) -> Result<StepPlan, BundleError> {
    let mut out = StepPlan::new(Step::Bundle);
    out.all_or_nothing = true;
    // `apply` finishes an interrupted install before planning; `plan` and `status` only look, and
    // show it as drift: the files on disk are neither the old set nor the new one until then.
    if let Some(pending) = install::pending(ctx.root)? {
        let action = Action::RecoverBundle { pending };
        out.changes.push(Change::new(
            "bundle",
            ctx.root.dir(),
            action,
            Recover(ctx.root.clone()),
        ));
        out.notes
            .push("an interrupted install is pending: the rest is planned before it is finished".into());
    }
    let cfg = &ctx.settings.bundle;
    let Some(source) = &cfg.source else {
        out.notes.push("no bundle configured (bundle.source)".into());
        return Ok(out);
    };
    let refresh = Duration::from_secs(ctx.settings.daemon.interval_seconds);
    let bytes = pipeline::obtain(ctx.root, source, &cfg.fetch_options(), ctx.downloads, refresh)?;
    let pin = cfg.sha256.as_ref().map(|h| h.as_str());
    let mut planned = plan_bytes(ctx, bytes, &source.to_string(), pin)?;
    out.changes.append(&mut planned.changes);
    out.notes.append(&mut planned.notes);
    Ok(out)
}

/// The step's plan for bundle bytes already in hand: the configured pin (`apply`, the daemon) or
/// the one given on the command line (`nodeward bundle install FILE --sha256`).
pub fn plan_bytes(
    ctx: &Context<'_>,
    bytes: Vec<u8>,
    source_name: &str,
    pin: Option<&str>,
) -> Result<StepPlan, BundleError> {
    let mut out = StepPlan::new(Step::Bundle);
    out.all_or_nothing = true;
    let cfg = &ctx.settings.bundle;
    let verified = pipeline::verify(cfg, bytes, source_name, Intent::Install { pin })?;
    let label_for = |p: &crate::types::AbsPath| ctx.labeling.label_for(p);
    let host = Host {
        root: ctx.root,
        accounts: &ctx.accounts,
        label_for: &label_for,
    };
    let plan = pipeline::install_plan(&host, &verified, source_name)?;
    out.notes.push(format!(
        "{} entries from {source_name}",
        verified.bundle.entries.len()
    ));
    if let Some(change) = change(ctx, plan) {
        out.changes.push(change);
    }
    Ok(out)
}

/// The single transactional change for an install plan, or `None` when there is nothing to do.
pub(crate) fn change(ctx: &Context<'_>, plan: InstallPlan) -> Option<Change> {
    if plan.noop {
        return None;
    }
    let mut files: Vec<BundleFile> = plan
        .puts
        .iter()
        .map(|(f, op)| BundleFile {
            path: f.dest.to_string(),
            op: *op,
            mode: Some(Mode::new(f.meta.mode)),
            owner: Some(ctx.accounts.owner_label(f.meta.uid, f.meta.gid)),
            bytes: Some(f.content.len()),
        })
        .collect();
    files.extend(plan.deletes.iter().map(|d| BundleFile {
        path: d.to_string(),
        op: FileOp::Delete,
        mode: None,
        owner: None,
        bytes: None,
    }));
    let effect = Install {
        plan,
        root: ctx.root.clone(),
    };
    Some(Change::new(
        "bundle",
        ctx.root.dir(),
        Action::InstallBundle { files },
        effect,
    ))
}

/// An install that failed (and was rolled back) or a recovery that could not finish.
#[derive(Debug, thiserror::Error)]
#[error("bundle install: {0}")]
pub(crate) struct InstallFailed(#[from] pub InstallError);

/// Installs the planned files in one transaction.
struct Install {
    plan: InstallPlan,
    root: HostRoot,
}

/// Counts only: the plan holds the files' contents (keys among them).
impl std::fmt::Debug for Install {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Install")
            .field("puts", &self.plan.puts.len())
            .field("deletes", &self.plan.deletes.len())
            .finish()
    }
}

impl Effect for Install {
    fn apply(&self, _: &Change) -> Result<(), EffectError> {
        install::apply(&self.root, &self.plan).map_err(|e| Box::new(InstallFailed(e)) as EffectError)
    }
}

/// Finishes or rolls back an interrupted install.
#[derive(Debug)]
struct Recover(HostRoot);

impl Effect for Recover {
    fn apply(&self, _: &Change) -> Result<(), EffectError> {
        install::recover(&self.0)
            .map(|_| ())
            .map_err(|e| Box::new(InstallFailed(e)) as EffectError)
    }
}
