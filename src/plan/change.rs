//! A change: what a step found and what it will make of it (`Action`, shown and serialised), and
//! how it is done (`Effect`, owned by the step that planned it). The model depends on nothing above
//! `host/`: a new kind of change is an `Action` variant, its phrase in `render`, and an effect in
//! its step's module.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::step::Step;
use crate::host::container::Container;
use crate::host::kmod::load::Method;
use crate::types::Mode;

/// Why an effect failed: the step's own typed error, boxed so the model need not know it. It is
/// turned into text only where a report is serialised.
pub type EffectError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// How a change is carried out. Each step implements it for its own kinds of change, next to the
/// code that plans them, so what was decided is what runs.
pub trait Effect: fmt::Debug + Send + Sync {
    fn apply(&self, change: &Change) -> Result<(), EffectError>;
}

/// One change to the host.
#[derive(Debug, Clone, Serialize)]
pub struct Change {
    /// The host path (or key) changed, as the host names it.
    pub subject: String,
    #[serde(flatten)]
    pub(crate) action: Action,
    /// The path actually touched (below `--root`).
    #[serde(skip)]
    pub(crate) target: PathBuf,
    /// Consecutive changes with the same batch are independent and applied concurrently (modules
    /// whose dependencies are already in: the kernel loads them in parallel).
    #[serde(skip)]
    pub(crate) batch: Option<u32>,
    /// Subjects of earlier changes of the same step this one needs: when one of them fails, this
    /// one is not attempted (a module whose dependency did not load, a reload after a failed write).
    #[serde(skip)]
    pub(crate) requires: Vec<String>,
    #[serde(skip)]
    effect: Arc<dyn Effect>,
}

impl Change {
    pub(crate) fn new(
        subject: impl Into<String>,
        target: impl Into<PathBuf>,
        action: Action,
        effect: impl Effect + 'static,
    ) -> Change {
        Change {
            subject: subject.into(),
            action,
            target: target.into(),
            batch: None,
            requires: Vec::new(),
            effect: Arc::new(effect),
        }
    }

    /// Marks the change as needing the changes with these subjects (see [`Change::requires`]).
    pub(crate) fn after(self, subjects: impl IntoIterator<Item = String>) -> Change {
        Change {
            requires: subjects.into_iter().collect(),
            ..self
        }
    }

    /// Marks the change as independent of its neighbours in the same batch.
    pub(crate) fn in_batch(self, batch: u32) -> Change {
        Change {
            batch: Some(batch),
            ..self
        }
    }

    /// Carries the change out.
    pub(crate) fn apply(&self) -> Result<(), EffectError> {
        self.effect.apply(self)
    }
}

/// What a change does, as `plan` shows it. Contents and handles stay in the effect.
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
        method: Method,
        #[serde(skip_serializing_if = "String::is_empty")]
        params: String,
        /// The configured module this one is a dependency of.
        #[serde(skip_serializing_if = "Option::is_none")]
        needed_by: Option<String>,
    },
    /// Ask NetworkManager to reload its configuration (after its drop-in changed).
    ReloadNetworkManager,
    /// Reload systemd-networkd over D-Bus (its `.network` file changed).
    ReloadNetworkd,
    /// Check an image archive and import what it holds (the subject is its path).
    ImportImages {
        /// Why it is read: new, changed, or an engine lost one of its images.
        why: String,
    },
    /// Start the kubelet container, or replace the one there (the subject is its name).
    Kubelet {
        op: KubeletOp,
        /// The engine's program name (`podman`, `docker`, `rkt`).
        runtime: &'static str,
        image: String,
        hash: String,
        /// What changes from the running container's spec (for a replacement).
        #[serde(skip_serializing_if = "Vec::is_empty")]
        diff: Vec<String>,
        /// The container replaced, if any.
        #[serde(skip_serializing_if = "Option::is_none")]
        existing: Option<String>,
    },
    /// Make the mount at the subject recursively shared (`mount --make-rshared`).
    MakeShared {
        /// Its propagation now (`private`, `slave`, `unbindable`).
        from: String,
    },
    /// Create a symbolic link at the subject.
    Symlink { target: String },
    /// Finish (or roll back) a bundle install that was interrupted.
    RecoverBundle { pending: Pending },
    /// Install the bundle's files in one transaction (stage, sync, journal, commit).
    InstallBundle { files: Vec<BundleFile> },
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
    pub(crate) path: String,
    pub(crate) op: FileOp,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) mode: Option<Mode>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) owner: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) bytes: Option<usize>,
}

impl Action {
    /// The kind of change, as its JSON `action` field names it (a metrics label).
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Action::CreateDir { .. } => "create_dir",
            Action::Chmod { .. } => "chmod",
            Action::Chown { .. } => "chown",
            Action::Relabel { .. } => "relabel",
            Action::WriteFile { .. } => "write_file",
            Action::RemoveFile => "remove_file",
            Action::ReloadUnit => "reload_unit",
            Action::SetKernelValue { .. } => "set_kernel_value",
            Action::LoadModule { .. } => "load_module",
            Action::ReloadNetworkManager => "reload_network_manager",
            Action::ReloadNetworkd => "reload_networkd",
            Action::ImportImages { .. } => "import_images",
            Action::Kubelet { .. } => "kubelet",
            Action::MakeShared { .. } => "make_shared",
            Action::Symlink { .. } => "symlink",
            Action::RecoverBundle { .. } => "recover_bundle",
            Action::InstallBundle { .. } => "install_bundle",
        }
    }
}

/// What an install will do to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FileOp {
    Create,
    Update,
    Delete,
}

/// An install that was interrupted and not yet recovered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pending {
    /// Past its commit point: the next writer finishes it (these many operations).
    Forward(usize),
    /// Before its commit point: the next writer removes its stage files.
    Back(usize),
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

/// What kind of failure a step's is: it decides the daemon's retry, the metric label, the journal
/// event's field and `apply`'s exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FailureKind {
    /// Something the step needs has not arrived yet (a kubeconfig, the runtime's socket, a
    /// download under way): watched, and retried soon without a growing backoff.
    Waiting,
    /// It may pass by itself (a server, the bus, another writer, an I/O error): retried with backoff.
    Transient,
    /// Only a change to the configuration or the host fixes it (a module this kernel lacks, a key
    /// read-only below its minimum, a bundle refused): reported, and retried at the slowest pace.
    Permanent,
}

impl FailureKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            FailureKind::Waiting => "waiting",
            FailureKind::Transient => "transient",
            FailureKind::Permanent => "permanent",
        }
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One item of a step (a module, a sysctl key, a directory) that failed while the others went on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ItemFailure {
    /// The item, as its change's subject names it.
    pub(crate) subject: String,
    pub(crate) error: String,
    pub(crate) kind: FailureKind,
}

impl ItemFailure {
    /// `subject: error`, without saying the subject twice when the error already starts with it.
    fn line(&self) -> String {
        let bare = self.error.strip_prefix("module ").unwrap_or(&self.error);
        if bare.starts_with(&self.subject) {
            self.error.clone()
        } else {
            format!("{}: {}", self.subject, self.error)
        }
    }
}

/// The step's error naming every failed item, and the worst kind among them.
pub(crate) fn summarize(failed: &[ItemFailure]) -> Option<(String, FailureKind)> {
    let kind = failed.iter().map(|f| f.kind).max()?;
    let lines: Vec<String> = failed.iter().map(ItemFailure::line).collect();
    let text = match lines.as_slice() {
        [one] => one.clone(),
        many => format!("{} items failed: {}", many.len(), many.join("; ")),
    };
    Some((text, kind))
}

/// The plan of one step: its changes, notes worth showing (why something is skipped), the items
/// that could not be planned (the rest of the step still is), or the error that kept the whole
/// step from being planned.
#[derive(Debug, Clone, Serialize)]
pub struct StepPlan {
    pub(crate) step: Step,
    pub changes: Vec<Change>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) notes: Vec<String>,
    /// Items that cannot be done; every other item of the step is planned and applied.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) failed: Vec<ItemFailure>,
    /// The whole step could not be planned: nothing of it is applied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
    /// What kind of failure `error` is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) failure: Option<FailureKind>,
    /// The command line this step runs, or keeps running: the kubelet's engine argv.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) command: Option<Vec<String>>,
    /// One failed change stops the step (the bundle installs all or nothing). Otherwise each item
    /// stands alone: a failure skips only the changes that require it.
    #[serde(skip)]
    pub(crate) all_or_nothing: bool,
}

impl StepPlan {
    pub(crate) fn new(step: Step) -> StepPlan {
        StepPlan {
            step,
            changes: Vec::new(),
            notes: Vec::new(),
            failed: Vec::new(),
            error: None,
            failure: None,
            command: None,
            all_or_nothing: false,
        }
    }

    /// Records an item that cannot be done; the step's other items go on.
    pub(crate) fn fail_item(
        &mut self,
        subject: impl Into<String>,
        kind: FailureKind,
        error: impl fmt::Display,
    ) {
        self.failed.push(ItemFailure {
            subject: subject.into(),
            error: error.to_string(),
            kind,
        });
    }

    /// Whether the step fails, wholly or in some items.
    pub(crate) fn fails(&self) -> bool {
        self.error.is_some() || !self.failed.is_empty()
    }

    /// The step's error (the whole step's, else its failed items') and its kind.
    pub(crate) fn problem(&self) -> Option<(String, FailureKind)> {
        match &self.error {
            Some(e) => Some((e.clone(), self.failure.unwrap_or(FailureKind::Transient))),
            None => summarize(&self.failed),
        }
    }

    pub fn failed(step: Step, kind: FailureKind, error: impl fmt::Display) -> StepPlan {
        let mut plan = StepPlan::new(step);
        plan.fail(kind, error);
        plan
    }

    /// Marks the step failed: nothing of it is applied.
    pub(crate) fn fail(&mut self, kind: FailureKind, error: impl fmt::Display) {
        self.error = Some(error.to_string());
        self.failure = Some(kind);
    }
}

/// The plan for every selected step.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// The root the plan was made for (`/` for the running system).
    pub(crate) root: String,
    /// The container nodeward runs in, if any (the kernel steps adapt to it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) container: Option<Container>,
    pub(crate) steps: Vec<StepPlan>,
}

impl Plan {
    pub fn change_count(&self) -> usize {
        self.steps.iter().map(|s| s.changes.len()).sum()
    }
    pub(crate) fn failed_steps(&self) -> impl Iterator<Item = &StepPlan> {
        self.steps.iter().filter(|s| s.fails())
    }

    /// The worst kind of failure among the steps (permanent over transient over waiting).
    pub fn failure(&self) -> Option<FailureKind> {
        self.failed_steps()
            .filter_map(|s| s.problem())
            .map(|(_, k)| k)
            .max()
    }
}

/// What applying one step did.
#[derive(Debug, Clone, Serialize)]
pub struct StepReport {
    pub(crate) step: Step,
    /// Changes made, in order.
    pub(crate) applied: Vec<Change>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) notes: Vec<String>,
    /// The items that failed (planned or applied); the others were done.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) failed: Vec<ItemFailure>,
    /// Why the step failed, if it did: the whole step's error, or every failed item named.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What kind of failure `error` is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) failure: Option<FailureKind>,
    /// Wall time of planning and applying the step (for metrics, not the JSON report).
    #[serde(skip)]
    pub(crate) seconds: f64,
}

/// What `apply` did across all steps.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub(crate) root: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) container: Option<Container>,
    pub(crate) steps: Vec<StepReport>,
}

impl Report {
    pub(crate) fn change_count(&self) -> usize {
        self.steps.iter().map(|s| s.applied.len()).sum()
    }
    pub(crate) fn failed_steps(&self) -> impl Iterator<Item = &StepReport> {
        self.steps.iter().filter(|s| s.error.is_some())
    }

    /// The worst kind of failure among the steps (permanent over transient over waiting).
    pub fn failure(&self) -> Option<FailureKind> {
        self.failed_steps()
            .map(|s| s.failure.unwrap_or(FailureKind::Transient))
            .max()
    }
}
