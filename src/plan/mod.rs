//! The resource model: a plan is a list of changes per step, each change a piece of data saying what
//! is there and what will be. Deciding (building a plan) and doing (applying it) are separate, so
//! `plan` can show exactly what `apply` would do, and a converged node yields an empty plan.

pub mod owed;
pub mod render;

use std::path::PathBuf;

use serde::Serialize;

use crate::config::sysctl::SysctlValue;
use crate::config::types::Mode;
use crate::host::{HostError, fs, procsys};
use crate::steps::Step;

/// One change to the host.
#[derive(Debug, Clone, Serialize)]
pub struct Change {
    /// The host path (or key) changed, as the host names it.
    pub subject: String,
    #[serde(flatten)]
    pub action: Action,
    /// The path actually touched (below `--root`).
    #[serde(skip)]
    pub target: PathBuf,
    /// Consecutive changes with the same batch are independent and applied concurrently (modules
    /// whose dependencies are already in: the kernel loads them in parallel).
    #[serde(skip)]
    pub batch: Option<u32>,
}

/// What a change does.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// Create a directory with its final owner, label and mode.
    CreateDir {
        mode: Mode,
        uid: u32,
        gid: u32,
        owner: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        label: Option<String>,
        /// True for a missing parent created only so a configured directory can exist.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        parent: bool,
    },
    /// Change permission bits.
    Chmod { from: Mode, to: Mode },
    /// Change owner and group.
    Chown {
        from: String,
        to: String,
        uid: u32,
        gid: u32,
    },
    /// Set the SELinux context.
    Relabel { from: Option<String>, to: String },
    /// Write a whole file atomically (created with its final mode, owner and label).
    WriteFile {
        mode: Mode,
        owner: String,
        uid: u32,
        gid: u32,
        bytes: usize,
        /// True when a file is already there (an update), false for a new file.
        replaces: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        label: Option<String>,
        /// Never printed: later steps write secrets through the same action.
        #[serde(skip)]
        contents: Vec<u8>,
    },
    /// Remove a file the agent wrote earlier and no longer wants.
    RemoveFile,
    /// Ask systemd to reload the unit named by the subject, or restart it when it cannot reload
    /// (and only if it runs), so it reads a changed drop-in.
    ReloadUnit,
    /// Write a kernel value (a sysctl, a module parameter). `from` is `None` when the key does not
    /// exist yet because an earlier step (module loading) will create it.
    SetKernelValue {
        from: Option<String>,
        to: String,
        why: KernelWhy,
    },
    /// Load a kernel module file (the subject is the module's name).
    LoadModule {
        /// Relative to the module tree.
        file: String,
        method: crate::host::kmod::load::Method,
        #[serde(skip_serializing_if = "String::is_empty")]
        params: String,
        /// The configured module this one is a dependency of.
        #[serde(skip_serializing_if = "Option::is_none")]
        needed_by: Option<String>,
        /// Soft dependencies only: where a failure to load is recorded (and the load skipped until
        /// the next boot) instead of failing the step.
        #[serde(skip)]
        unavailable_marker: Option<PathBuf>,
    },
    /// Ask NetworkManager to reload its configuration (after its drop-in changed).
    ReloadNetworkManager,
    /// Start the kubelet container, or replace the one there (the subject is its name).
    Kubelet {
        op: KubeletOp,
        runtime: crate::kubelet::runtime::Kind,
        image: String,
        hash: String,
        /// What changes from the running container's spec (for a replacement).
        #[serde(skip_serializing_if = "Vec::is_empty")]
        diff: Vec<String>,
        /// The container replaced, if any.
        #[serde(skip_serializing_if = "Option::is_none")]
        existing: Option<String>,
        #[serde(skip)]
        run: Box<crate::kubelet::OneShot>,
    },
    /// Finish (or roll back) a bundle install that was interrupted.
    RecoverBundle {
        pending: crate::bundle::install::Pending,
    },
    /// Install the bundle's files in one transaction (stage, sync, journal, commit).
    InstallBundle {
        files: Vec<BundleFile>,
        #[serde(skip)]
        plan: std::sync::Arc<crate::bundle::install::InstallPlan>,
        #[serde(skip)]
        root: crate::root::HostRoot,
    },
}

/// What happens to the kubelet container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum KubeletOp {
    /// None exists: start one.
    Start,
    /// An exited container holds the name: remove it, start a new one.
    ReplaceStale,
    /// One runs with another spec: stop it gracefully, start the new one.
    Replace,
}

/// One file of a bundle install, as a plan shows it (never its content).
#[derive(Debug, Clone, Serialize)]
pub struct BundleFile {
    pub path: String,
    pub op: crate::bundle::install::FileOp,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<usize>,
}

/// Why a kernel value changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KernelWhy {
    /// An exact value differs.
    Set,
    /// Below a minimum (raise-only limits).
    Raise,
    /// Above a maximum.
    Lower,
}

impl Change {
    /// Carries the change out.
    pub fn apply(&self) -> Result<(), HostError> {
        match &self.action {
            Action::CreateDir {
                mode,
                uid,
                gid,
                label,
                ..
            } => fs::create_dir(
                &self.target,
                &fs::Meta {
                    mode: mode.bits(),
                    uid: *uid,
                    gid: *gid,
                    label: label.clone(),
                },
            ),
            Action::Chmod { to, .. } => fs::set_mode(&self.target, to.bits()),
            Action::Chown { uid, gid, .. } => fs::set_owner(&self.target, *uid, *gid),
            Action::Relabel { to, .. } => fs::set_label(&self.target, to).map(|_| ()),
            Action::WriteFile {
                mode,
                uid,
                gid,
                label,
                contents,
                ..
            } => {
                if let Some(dir) = self.target.parent() {
                    if !dir.exists() {
                        std::fs::create_dir_all(dir).map_err(HostError::io(dir, "create directory"))?;
                    }
                }
                let meta = fs::Meta {
                    mode: mode.bits(),
                    uid: *uid,
                    gid: *gid,
                    label: label.clone(),
                };
                fs::write_atomic(&self.target, contents, &meta).map(|_| ())
            }
            Action::RemoveFile => match std::fs::remove_file(&self.target) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(HostError::io(&self.target, "remove")(e))
                }
                _ => Ok(()),
            },
            Action::ReloadUnit => owed::settle(
                &self.target,
                &self.subject,
                crate::host::dbus::reload_or_try_restart(&self.subject).map_err(|e| HostError::DBus {
                    message: format!("{}: {e}", self.subject),
                }),
            ),
            Action::ReloadNetworkManager => owed::settle(
                &self.target,
                &self.subject,
                match crate::host::dbus::reload_network_manager() {
                    Ok(crate::host::dbus::Reloaded::Reload) => Ok(()),
                    Ok(crate::host::dbus::Reloaded::Restarted { reason }) => {
                        tracing::warn!(%reason, "NetworkManager Reload failed; restarted it through systemd instead");
                        Ok(())
                    }
                    Ok(crate::host::dbus::Reloaded::NotRunning) => {
                        tracing::info!("NetworkManager is not running; it reads the drop-in when it starts");
                        Ok(())
                    }
                    Err(e) => Err(HostError::DBus {
                        message: e.to_string(),
                    }),
                },
            ),
            Action::Kubelet { run, .. } => run.apply().map_err(|e| HostError::Kubelet {
                message: e.to_string(),
            }),
            Action::RecoverBundle { .. } => {
                crate::bundle::install::recover(&crate::root::HostRoot::at(&self.target))
                    .map(|_| ())
                    .map_err(|e| HostError::Bundle {
                        message: e.to_string(),
                    })
            }
            Action::InstallBundle { plan, root, .. } => {
                crate::bundle::install::apply(root, plan).map_err(|e| HostError::Bundle {
                    message: e.to_string(),
                })
            }
            Action::LoadModule {
                method,
                params,
                unavailable_marker,
                ..
            } => match crate::host::kmod::load::load(&self.subject, &self.target, params, *method) {
                Ok(()) => Ok(()),
                // A soft dependency is a preference (crc32c_intel for libcrc32c), not a need: one
                // this machine cannot load (no SSE4.2: ENODEV) is noted until the next boot and
                // skipped, rather than failing the step at every converge.
                Err(e) if unavailable_marker.is_some() => {
                    tracing::warn!(module = %self.subject, error = %e, "soft dependency not loaded; continuing without it");
                    if let Some(marker) = unavailable_marker {
                        let _ = marker
                            .parent()
                            .map_or(Ok(()), std::fs::create_dir_all)
                            .and_then(|()| std::fs::write(marker, format!("{e}\n")));
                    }
                    Ok(())
                }
                Err(e) => Err(HostError::Module {
                    module: self.subject.clone(),
                    message: e.to_string(),
                }),
            },
            Action::SetKernelValue { to, .. } => {
                let failed = |source: std::io::Error| HostError::KernelValue {
                    key: self.subject.clone(),
                    hint: procsys::Failure::classify(&source).hint(),
                    source,
                };
                procsys::write(&self.target, to).map_err(failed)?;
                // Some keys clamp or ignore writes: make sure the kernel kept what was written.
                let now = procsys::read(&self.target).map_err(failed)?;
                if SysctlValue::new(&now) != SysctlValue::new(to) {
                    return Err(HostError::KernelKept {
                        key: self.subject.clone(),
                        wrote: to.clone(),
                        kept: now,
                    });
                }
                Ok(())
            }
        }
    }
}

/// The plan of one step: its changes, notes worth showing (why something is skipped), or the error
/// that kept it from being planned.
#[derive(Debug, Clone, Serialize)]
pub struct StepPlan {
    pub step: Step,
    pub changes: Vec<Change>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl StepPlan {
    pub fn new(step: Step) -> StepPlan {
        StepPlan {
            step,
            changes: Vec::new(),
            notes: Vec::new(),
            error: None,
        }
    }

    pub fn failed(step: Step, error: impl std::fmt::Display) -> StepPlan {
        StepPlan {
            error: Some(error.to_string()),
            ..StepPlan::new(step)
        }
    }
}

/// The plan for every selected step.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// The root the plan was made for (`/` for the running system).
    pub root: String,
    pub steps: Vec<StepPlan>,
}

impl Plan {
    pub fn change_count(&self) -> usize {
        self.steps.iter().map(|s| s.changes.len()).sum()
    }
    pub fn failed_steps(&self) -> impl Iterator<Item = &StepPlan> {
        self.steps.iter().filter(|s| s.error.is_some())
    }
}

/// What applying one step did.
#[derive(Debug, Clone, Serialize)]
pub struct StepReport {
    pub step: Step,
    /// Changes made, in order.
    pub applied: Vec<Change>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Why the step stopped, if it did; changes after the failing one were not attempted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What `apply` did across all steps.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub root: String,
    pub steps: Vec<StepReport>,
}

impl Report {
    pub fn change_count(&self) -> usize {
        self.steps.iter().map(|s| s.applied.len()).sum()
    }
    pub fn failed_steps(&self) -> impl Iterator<Item = &StepReport> {
        self.steps.iter().filter(|s| s.error.is_some())
    }
}

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
        let results: Vec<Result<(), HostError>> = if group.len() == 1 {
            vec![group[0].apply()]
        } else {
            std::thread::scope(|s| {
                let handles: Vec<_> = group.iter().map(|c| s.spawn(move || c.apply())).collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap_or(Err(HostError::Panicked)))
                    .collect()
            })
        };
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
