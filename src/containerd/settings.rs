//! `[containerd]`: containerd's configuration file, written by nodeward or read for its cgroup
//! driver.

use serde::{Deserialize, Serialize};

use super::mirrors::{self, Mirror, MirrorInput};
use crate::setting::KeyError;
use crate::types::AbsPath;
use crate::types::ImageRef;

/// containerd 2.2's own default sandbox image, the pause release Kubernetes 1.36 names.
pub(crate) const DEFAULT_SANDBOX_IMAGE: &str = "registry.k8s.io/pause:3.10.1";

/// containerd's configuration file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ContainerdInput {
    /// Write Typhoon's `config.toml` (and restart containerd when it changes). Off by default: the
    /// OS or Ignition usually provides it, and nodeward then reads its cgroup driver from it.
    pub(crate) manage: bool,
    /// containerd's configuration file (written with `manage`, else read for its cgroup driver).
    pub(crate) config_file: AbsPath,
    /// The pod sandbox (pause) image pinned in the file nodeward writes (with `manage`): containerd
    /// never garbage-collects it. Ship it with the node or mirror it where no registry is reachable.
    pub(crate) sandbox_image: ImageRef,
    /// Registry mirrors, tried in order before the registry itself, written as containerd's
    /// `hosts.toml` (`/etc/containerd/certs.d/REGISTRY/`) whether or not nodeward manages
    /// `config.toml`: each `{ registry, url, ca_file, plain_http }`. They serve the kubelet's image
    /// too, pulled by its engine from each before the image itself (docs/node.md).
    pub(crate) mirrors: Vec<MirrorInput>,
}

impl Default for ContainerdInput {
    fn default() -> Self {
        ContainerdInput {
            manage: false,
            config_file: crate::abs_path!("/etc/containerd/config.toml"),
            sandbox_image: ImageRef::known(DEFAULT_SANDBOX_IMAGE),
            mirrors: Vec::new(),
        }
    }
}

/// containerd's validated settings.
#[derive(Debug, Clone)]
pub(crate) struct ContainerdSettings {
    /// Write Typhoon's `config.toml` (and restart containerd when it changes).
    pub(crate) manage: bool,
    pub(crate) config_file: AbsPath,
    pub(crate) sandbox_image: ImageRef,
    pub(crate) mirrors: Vec<Mirror>,
}

impl ContainerdSettings {
    pub(crate) fn from_input(input: ContainerdInput) -> Result<ContainerdSettings, KeyError> {
        if input.manage && input.config_file.as_str() == "/" {
            return Err(KeyError::new("containerd.config_file", "\"/\" is not a file"));
        }
        Ok(ContainerdSettings {
            manage: input.manage,
            config_file: input.config_file,
            sandbox_image: input.sandbox_image,
            mirrors: mirrors::validate(input.mirrors)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_sandbox_image_parses_as_written() {
        assert_eq!(
            Ok(ContainerdInput::default().sandbox_image),
            DEFAULT_SANDBOX_IMAGE.parse::<ImageRef>()
        );
    }
}
