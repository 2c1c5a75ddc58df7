//! What every step gets: where the host and the kernel are, the settings, and what is decided once
//! per run (accounts, SELinux labelling).

use crate::bundle::background::Background;
use crate::config::Settings;
use crate::config::input::LabelPolicy;
use crate::host::container::{self, Container};
use crate::host::{HostError, accounts::Accounts};
use crate::images::background::Importer;
use crate::root::{HostRoot, KernelRoot, RunMode};
use crate::types::AbsPath;

/// Whether and how files get SELinux labels, decided once per run.
#[derive(Debug, Clone)]
pub struct Labeling {
    /// The context to set, when labelling is on.
    pub(crate) context: Option<String>,
    /// Trees whose contents get the context.
    pub(crate) trees: Vec<AbsPath>,
    /// Why labelling is on or off, for the plan.
    pub(crate) reason: String,
}

impl Labeling {
    pub(crate) fn decide(settings: &Settings, kernel_enabled: bool) -> Labeling {
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
    pub(crate) fn label_for(&self, path: &AbsPath) -> Option<String> {
        let ctx = self.context.as_ref()?;
        self.trees.iter().any(|t| path.is_within(t)).then(|| ctx.clone())
    }
}

/// What every step gets: where the host is, the settings, and decisions made once per run.
pub struct Context<'a> {
    pub(crate) root: &'a HostRoot,
    pub settings: &'a Settings,
    pub(crate) accounts: Accounts,
    pub(crate) labeling: Labeling,
    /// Whether kernel state (sysctls, modules) is read and changed. True for the running system;
    /// with `--root`, only when asked (`--kernel live`), e.g. tests in a private network namespace.
    pub(crate) kernel_live: bool,
    /// Where the kernel's `/proc` and `/sys` are (the real ones unless a test says otherwise).
    pub(crate) kernel: KernelRoot,
    /// Set by the daemon: its supervisor owns the kubelet container, so the step only plans the
    /// configuration file.
    pub(crate) kubelet_supervised: bool,
    /// Whether the kubelet container is inspected and started: the running system by default;
    /// with `--root`, only when asked (`--containers live`, tests with a stand-in runtime).
    pub containers_live: bool,
    /// The container nodeward runs in, when the kernel is live and it runs in one: the kernel is
    /// then the host's, and the kernel steps adapt (nothing loaded, host-wide keys left alone).
    pub(crate) container: Option<Container>,
    /// Set by the daemon: bundle downloads run beside the passes, and the step takes what they
    /// have. Without it (one-shot commands) the step downloads inline, bounded per attempt.
    pub(crate) downloads: Option<&'a Background>,
    /// Set by the daemon: image archives are imported beside the passes, and the kubelet waits
    /// for an import that brings its image. Without it the step imports inline.
    pub(crate) imports: Option<&'a Importer>,
    /// What the kubelet step resolved in this pass, for the daemon's supervisor (set once, by the
    /// step, when the daemon drives it).
    pub(crate) kubelet: std::sync::OnceLock<crate::kubelet::handoff::Handoff>,
}

/// Who carries the steps out, which decides two things the steps do differently.
#[derive(Clone, Copy)]
pub enum Driver<'a> {
    /// A one-shot command: the kubelet step starts the container itself; bundles are downloaded
    /// inline.
    OneShot,
    /// The daemon: its supervisor owns the kubelet container, and bundle downloads and image
    /// imports run beside the passes.
    Daemon(&'a Beside),
}

/// The daemon's work beside its passes: each pass asks it and goes on; each end wakes the daemon.
#[derive(Debug)]
pub struct Beside {
    pub(crate) downloads: Background,
    pub(crate) imports: Importer,
}

impl Beside {
    /// `on_download` and `on_import` wake the daemon when one ends.
    pub(crate) fn new(
        on_download: impl Fn() + Send + Sync + 'static,
        on_import: impl Fn() + Send + Sync + 'static,
    ) -> Beside {
        Beside {
            downloads: Background::new(on_download),
            imports: Importer::new(on_import),
        }
    }
}

impl<'a> Context<'a> {
    /// A kernel file (`proc/sys/…`) under the kernel root, whatever `--root` says. Only
    /// meaningful when `kernel_live`.
    pub(crate) fn kernel_path(&self, rel: &str) -> std::path::PathBuf {
        self.kernel.path(rel)
    }

    /// Observes what every step needs once: account databases, whether SELinux is on, and the
    /// container nodeward runs in.
    pub fn new(
        mode: &'a RunMode,
        settings: &'a Settings,
        driver: Driver<'a>,
    ) -> Result<Context<'a>, HostError> {
        let root = &mode.root;
        let accounts = Accounts::load(root)?;
        let labeling = Labeling::decide(settings, crate::host::selinux::kernel_enabled(root));
        let container = if mode.kernel_live {
            container::detect(root, &mode.kernel)
        } else {
            None
        };
        let (downloads, imports) = match driver {
            Driver::OneShot => (None, None),
            Driver::Daemon(beside) => (Some(&beside.downloads), Some(&beside.imports)),
        };
        Ok(Context {
            root,
            settings,
            accounts,
            labeling,
            kernel_live: mode.kernel_live,
            kernel: mode.kernel.clone(),
            kubelet_supervised: downloads.is_some(),
            containers_live: mode.containers_live,
            container,
            downloads,
            imports,
            kubelet: std::sync::OnceLock::new(),
        })
    }
}

/// A host root and a kernel root in temporary directories, with the built-in settings: the steps'
/// kernel rules run against these in plain `cargo test`, no root or namespace needed.
#[cfg(test)]
pub(crate) mod fixture {
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    use crate::config::Settings;
    use crate::root::{HostRoot, KernelRoot, RunMode};

    pub(crate) struct Fixture {
        pub host: tempfile::TempDir,
        pub kernel: tempfile::TempDir,
        pub settings: Settings,
        /// The trees, kernel live and containers not: set a field before `context()` to differ.
        pub mode: RunMode,
    }

    impl Fixture {
        #[allow(clippy::new_without_default)] // a test fixture: new() makes temporary directories
        pub(crate) fn new() -> Fixture {
            let host = tempfile::tempdir().expect("tempdir");
            let kernel = tempfile::tempdir().expect("tempdir");
            let settings = crate::config::load(&HostRoot::at(host.path()), None)
                .expect("built-in settings")
                .settings;
            let mode = RunMode {
                root: HostRoot::at(host.path()),
                kernel: KernelRoot::at(kernel.path()),
                kernel_live: true,
                containers_live: false,
            };
            Fixture {
                host,
                kernel,
                settings,
                mode,
            }
        }

        /// A kernel file (`proc/sys/net/ipv4/ip_forward`) with a value and mode.
        pub(crate) fn kernel_file(&self, rel: &str, value: &str, mode: u32) {
            let path = self.kernel.path().join(rel);
            std::fs::create_dir_all(path.parent().unwrap_or(Path::new("/"))).expect("mkdir");
            std::fs::write(&path, format!("{value}\n")).expect("write");
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
        }

        /// The steps' context on these trees (`mode`), as a one-shot command's.
        pub(crate) fn context(&self) -> super::Context<'_> {
            super::Context::new(&self.mode, &self.settings, super::Driver::OneShot).expect("context")
        }
    }
}
