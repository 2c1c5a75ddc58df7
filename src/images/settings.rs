//! `[images]`: image archives shipped with the node, imported before the kubelet needs them.

use serde::{Deserialize, Serialize};

use crate::host::state::SHIPPED_IMAGES_DIR;
use crate::setting::KeyError;
use crate::types::AbsPath;

/// The directory baked into the OS image or a system extension (read-only on the node).
pub(crate) const BAKED_IMAGES_DIR: &str = "/usr/share/nodeward/images";
/// Archives per directory: a node's images, not a registry's.
pub(crate) const MAX_ARCHIVES: usize = 256;

/// Where archives are found and how big one may be.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct ImagesInput {
    /// Directories whose archives (`*.tar`, `*.tar.gz`, `*.tgz`, `*.tar.zst`: OCI layouts or
    /// Docker archives) are imported, in order. The defaults: one baked into the OS image or a
    /// sysext, one Ignition writes.
    pub(crate) dirs: Vec<AbsPath>,
    /// The largest archive, compressed or not, and the most bytes one may unpack to.
    pub(crate) max_archive_bytes: u64,
    /// How long one archive's import into one engine may take: the daemon imports beside its
    /// passes, so this only catches an engine that hangs (generous for a slow disk).
    pub(crate) import_timeout_seconds: u64,
}

impl Default for ImagesInput {
    fn default() -> Self {
        ImagesInput {
            dirs: vec![
                AbsPath::from_checked(BAKED_IMAGES_DIR.to_owned()),
                AbsPath::from_checked(SHIPPED_IMAGES_DIR.to_owned()),
            ],
            max_archive_bytes: 8 << 30,
            import_timeout_seconds: 1800,
        }
    }
}

/// The checked settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ImagesSettings {
    pub(crate) dirs: Vec<AbsPath>,
    pub(crate) max_archive_bytes: u64,
    pub(crate) import_timeout: std::time::Duration,
}

impl ImagesSettings {
    pub(crate) fn from_input(input: ImagesInput) -> Result<ImagesSettings, KeyError> {
        if input.dirs.len() > 16 {
            return Err(KeyError::new(
                "images.dirs",
                format!("{} directories; at most 16", input.dirs.len()),
            ));
        }
        if input.dirs.iter().any(|d| d.as_str() == "/") {
            return Err(KeyError::new(
                "images.dirs",
                "\"/\" is not a directory of archives",
            ));
        }
        if input.max_archive_bytes < (1 << 20) {
            return Err(KeyError::new(
                "images.max_archive_bytes",
                "at least 1048576 (1 MiB)",
            ));
        }
        if !(10..=86_400).contains(&input.import_timeout_seconds) {
            return Err(KeyError::new(
                "images.import_timeout_seconds",
                "between 10 and 86400",
            ));
        }
        Ok(ImagesSettings {
            dirs: input.dirs,
            max_archive_bytes: input.max_archive_bytes,
            import_timeout: std::time::Duration::from_secs(input.import_timeout_seconds),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_the_baked_and_the_writable_directory() {
        let s = ImagesSettings::from_input(ImagesInput::default()).expect("the defaults are valid");
        let dirs: Vec<&str> = s.dirs.iter().map(AbsPath::as_str).collect();
        assert_eq!(dirs, [BAKED_IMAGES_DIR, SHIPPED_IMAGES_DIR]);
        assert_eq!(s.import_timeout.as_secs(), 1800);
    }

    #[test]
    fn bad_values_name_their_key() {
        let bad = |f: fn(&mut ImagesInput)| {
            let mut input = ImagesInput::default();
            f(&mut input);
            ImagesSettings::from_input(input).unwrap_err().to_string()
        };
        assert!(bad(|i| i.max_archive_bytes = 10).contains("images.max_archive_bytes"));
        assert!(bad(|i| i.import_timeout_seconds = 0).contains("images.import_timeout_seconds"));
        assert!(bad(|i| i.dirs = vec![crate::abs_path!("/")]).contains("images.dirs"));
    }
}
