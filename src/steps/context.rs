//! What every step gets: where the host and the kernel are, the settings, and what is decided once
//! per run (accounts, SELinux labelling).

use crate::config::Settings;
use crate::config::input::LabelPolicy;
use crate::host::{HostError, accounts::Accounts};
use crate::root::{HostRoot, KernelRoot};
use crate::types::AbsPath;

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
