//! The steps that converge a node, in the order they run, and what they share.

pub mod bundle;
pub mod dirs;
pub mod files;
pub mod hostfiles;
pub mod kubelet;
pub mod modules;
pub mod nm;
pub mod selinux;
pub mod sysctl;

use std::time::Duration;

use crate::bundle::install::InstallError;
use crate::config::Settings;
use crate::config::input::LabelPolicy;
use crate::host::lock::{self, FileLock, LockError};
use crate::host::{HostError, accounts::Accounts};
use crate::plan::{self, Plan, Report, StepPlan};
use crate::root::{HostRoot, KernelRoot};
use crate::types::AbsPath;

pub use crate::plan::Step;

/// Why a step could not be planned (or an interrupted install not finished); shown in the step's
/// report.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error(transparent)]
    Host(#[from] HostError),
    #[error("bundle install: {0}")]
    Bundle(#[from] bundle::BundleError),
    #[error("bundle install: an interrupted install could not be finished: {0}")]
    Recovery(#[source] InstallError),
    #[error(transparent)]
    Kubelet(#[from] kubelet::KubeletError),
}

/// Whether and how files get SELinux labels, decided once per run.
#[derive(Debug, Clone)]
pub struct Labeling {
    /// The context to set, when labelling is on.
    pub context: Option<String>,
    /// Trees whose contents get the context.
    pub trees: Vec<AbsPath>,
    /// Why labelling is on or off, for the plan.
    pub reason: String,
}

impl Labeling {
    pub fn decide(settings: &Settings, kernel_enabled: bool) -> Labeling {
        let s = &settings.selinux;
        let (on, reason) = match (s.labels, kernel_enabled) {
            (LabelPolicy::Never, _) => (
                false,
                "labelling disabled by selinux.labels = \"never\"".to_owned(),
            ),
            (LabelPolicy::Always, _) => (true, "labelling forced by selinux.labels = \"always\"".to_owned()),
            (LabelPolicy::Auto, true) => (true, "SELinux is enabled".to_owned()),
            (LabelPolicy::Auto, false) => (
                false,
                "SELinux is not enabled on this host: labels skipped".to_owned(),
            ),
        };
        Labeling {
            context: on.then(|| s.context.to_string()),
            trees: s.relabel.clone(),
            reason,
        }
    }

    /// The label a path must carry, if any: the context when the path lies in a labelled tree.
    pub fn label_for(&self, path: &AbsPath) -> Option<String> {
        let ctx = self.context.as_ref()?;
        self.trees.iter().any(|t| path.is_within(t)).then(|| ctx.clone())
    }
}

/// What every step gets: where the host is, the settings, and decisions made once per run.
pub struct Context<'a> {
    pub root: &'a HostRoot,
    pub settings: &'a Settings,
    pub accounts: Accounts,
    pub labeling: Labeling,
    /// Whether kernel state (sysctls, modules) is read and changed. True for the running system;
    /// with `--root`, only when asked (`--kernel live`), e.g. tests in a private network namespace.
    pub kernel_live: bool,
    /// Where the kernel's `/proc` and `/sys` are (the real ones unless a test says otherwise).
    pub kernel: KernelRoot,
    /// Set by the daemon: its supervisor owns the kubelet container, so the step only plans the
    /// configuration file.
    pub kubelet_supervised: bool,
    /// Whether the kubelet container is inspected and started: the running system by default;
    /// with `--root`, only when asked (`--containers live`, tests with a stand-in runtime).
    pub containers_live: bool,
}

impl<'a> Context<'a> {
    /// A kernel file (`proc/sys/…`) under the kernel root, whatever `--root` says. Only
    /// meaningful when `kernel_live`.
    pub fn kernel_path(&self, rel: &str) -> std::path::PathBuf {
        self.kernel.path(rel)
    }

    /// Observes what every step needs once: account databases and whether SELinux is on.
    pub fn new(
        root: &'a HostRoot,
        settings: &'a Settings,
        kernel_live: bool,
    ) -> Result<Context<'a>, HostError> {
        let accounts = Accounts::load(root)?;
        let labeling = Labeling::decide(settings, crate::host::selinux::kernel_enabled(root));
        Ok(Context {
            root,
            settings,
            accounts,
            labeling,
            kernel_live,
            kernel: KernelRoot::live(),
            kubelet_supervised: false,
            containers_live: root.is_live(),
        })
    }
}

/// Plans one step against the host as it is now.
pub fn plan_step(ctx: &Context<'_>, step: Step) -> StepPlan {
    let result: Result<StepPlan, StepError> = match step {
        Step::Dirs => dirs::plan(ctx).map_err(Into::into),
        Step::Bundle => bundle::plan(ctx).map_err(Into::into),
        Step::Hostfiles => hostfiles::plan(ctx).map_err(Into::into),
        Step::Selinux => selinux::plan(ctx).map_err(Into::into),
        Step::Modules => modules::plan(ctx).map_err(Into::into),
        Step::Sysctl => sysctl::plan(ctx).map_err(Into::into),
        Step::Nm => nm::plan(ctx).map_err(Into::into),
        Step::Kubelet => kubelet::plan(ctx).map_err(Into::into),
    };
    result.unwrap_or_else(|e| StepPlan::failed(step, e))
}

/// Plans the selected steps (all when `only` is empty) without touching anything.
pub fn plan(ctx: &Context<'_>, only: &[Step]) -> Plan {
    let steps = selected(only).map(|s| plan_step(ctx, s)).collect();
    Plan {
        root: ctx.root.dir().display().to_string(),
        steps,
    }
}

/// Plans and applies the selected steps one after another, so each step is planned against the
/// host as the steps before it left it.
///
/// Holds the write lock throughout (waiting up to `lock_wait` for another writer), and finishes an
/// interrupted bundle install before anything is planned: a plan made over a half-committed
/// install would compare against files that are about to change.
pub fn apply(ctx: &Context<'_>, only: &[Step], lock_wait: Duration) -> Result<Report, LockError> {
    let _lock = FileLock::acquire(ctx.root, lock::WRITE, "is changing this node", lock_wait)?;
    let recovery = crate::bundle::install::recover(ctx.root).map_err(StepError::Recovery);
    let steps = selected(only)
        .inspect(|_| crate::progress::beat())
        .map(|s| match (s, &recovery) {
            (Step::Bundle, Err(e)) => plan::apply_step(StepPlan::failed(s, e)),
            (Step::Bundle, Ok(true)) => {
                let mut report = plan::apply_step(plan_step(ctx, s));
                report
                    .notes
                    .insert(0, "finished an interrupted install before planning".into());
                report
            }
            _ => plan::apply_step(plan_step(ctx, s)),
        })
        .collect();
    Ok(Report {
        root: ctx.root.dir().display().to_string(),
        steps,
    })
}

fn selected(only: &[Step]) -> impl Iterator<Item = Step> + '_ {
    Step::ALL
        .into_iter()
        .filter(move |s| only.is_empty() || only.contains(s))
}
