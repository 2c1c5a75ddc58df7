//! What every command works with: the run mode (made here, once, from the flags) and the extra
//! configuration fragment.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::ValueEnum;

use nodeward::config::{Loaded, Settings};
use nodeward::host::HostError;
use nodeward::root::{HostRoot, KernelRoot, RunMode};
use nodeward::steps::{Context, Driver};

/// Whether a kind of live state (the kernel's, the containers') is read and changed.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LiveMode {
    Auto,
    Live,
    Skip,
}

impl LiveMode {
    /// `auto` means live only on the running system (no --root).
    fn is_live(self, root: &HostRoot) -> bool {
        match self {
            LiveMode::Auto => root.is_live(),
            LiveMode::Live => true,
            LiveMode::Skip => false,
        }
    }
}

pub struct Env {
    pub mode: RunMode,
    pub extra_config: Option<PathBuf>,
}

impl Env {
    pub fn new(
        root: Option<PathBuf>,
        kernel: LiveMode,
        containers: LiveMode,
        extra_config: Option<PathBuf>,
    ) -> Env {
        let root = root.map_or_else(HostRoot::live, HostRoot::at);
        Env {
            mode: RunMode {
                kernel_live: kernel.is_live(&root),
                containers_live: containers.is_live(&root),
                kernel: KernelRoot::live(),
                root,
            },
            extra_config,
        }
    }

    pub fn root(&self) -> &HostRoot {
        &self.mode.root
    }

    pub fn load(&self) -> anyhow::Result<Loaded> {
        nodeward::config::load(self.root(), self.extra_config.as_deref()).context("loading configuration")
    }

    /// The steps' context for one command.
    pub fn context<'a>(&'a self, settings: &'a Settings) -> Result<Context<'a>, HostError> {
        Context::new(&self.mode, settings, Driver::OneShot)
    }
}
