//! `[containerd]`: containerd's configuration file, written by nodeward or read for its cgroup
//! driver.

use serde::{Deserialize, Serialize};

use crate::setting::KeyError;
use crate::types::AbsPath;

/// containerd's configuration file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ContainerdInput {
    /// Write Typhoon's `config.toml` (and restart containerd when it changes). Off by default: the
    /// OS or Ignition usually provides it, and nodeward then reads its cgroup driver from it.
    pub(crate) manage: bool,
    /// containerd's configuration file (written with `manage`, else read for its cgroup driver).
    pub(crate) config_file: AbsPath,
}

impl Default for ContainerdInput {
    fn default() -> Self {
        ContainerdInput {
            manage: false,
            config_file: crate::abs_path!("/etc/containerd/config.toml"),
        }
    }
}

/// containerd's validated settings.
#[derive(Debug, Clone)]
pub(crate) struct ContainerdSettings {
    /// Write Typhoon's `config.toml` (and restart containerd when it changes).
    pub(crate) manage: bool,
    pub(crate) config_file: AbsPath,
}

impl ContainerdSettings {
    pub(crate) fn from_input(input: ContainerdInput) -> Result<ContainerdSettings, KeyError> {
        if input.manage && input.config_file.as_str() == "/" {
            return Err(KeyError::new("containerd.config_file", "\"/\" is not a file"));
        }
        Ok(ContainerdSettings {
            manage: input.manage,
            config_file: input.config_file,
        })
    }
}
