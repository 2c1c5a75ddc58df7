//! Finding configuration fragments, the systemd drop-in way.
//!
//! Three directories, lowest precedence first. Files ending `.toml` sort by name across all three; a
//! same-named file in a later directory replaces the earlier one, and a symlink to `/dev/null`
//! masks the name entirely.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::error::ConfigError;
use crate::root::HostRoot;

/// Fragment directories, vendor (image) first, admin last.
pub const CONFIG_DIRS: [&str; 3] = [
    "/usr/lib/nodeward/config.d",
    "/run/nodeward/config.d",
    "/etc/nodeward/config.d",
];

/// The fragment files to read, in merge order (lowest precedence first).
pub fn discover(root: &HostRoot) -> Result<Vec<PathBuf>, ConfigError> {
    // name -> winning file, or None when masked.
    let mut by_name: BTreeMap<String, Option<PathBuf>> = BTreeMap::new();
    for dir in CONFIG_DIRS {
        let dir = dir
            .parse()
            .map_err(|e: crate::types::Invalid| ConfigError::Invalid {
                path: dir.into(),
                message: e.0,
            })?;
        let resolved = root.resolve(&dir).map_err(|e| ConfigError::Invalid {
            path: dir.to_path_buf(),
            message: e.to_string(),
        })?;
        let entries = match std::fs::read_dir(&resolved) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => {
                return Err(ConfigError::Read {
                    path: resolved,
                    source,
                });
            }
        };
        for entry in entries {
            let entry = entry.map_err(|source| ConfigError::Read {
                path: resolved.clone(),
                source,
            })?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.ends_with(".toml") || name.starts_with('.') {
                continue;
            }
            let path = entry.path();
            if is_mask(&path) {
                by_name.insert(name, None);
                continue;
            }
            // Resolved inside the root: a fragment that is a symlink to an absolute path is read
            // from the image under `--root`, never from the machine running nodeward.
            let host: crate::types::AbsPath = format!("{dir}/{name}")
                .parse()
                .map_err(|e: crate::types::Invalid| ConfigError::Invalid {
                    path: path.clone(),
                    message: e.0,
                })?;
            let inside = root.resolve(&host).map_err(|e| ConfigError::Invalid {
                path: path.clone(),
                message: e.to_string(),
            })?;
            by_name.insert(name, Some(inside));
        }
    }
    Ok(by_name.into_values().flatten().collect())
}

/// A symlink whose target is literally `/dev/null` (also in an image root, where it may dangle).
fn is_mask(path: &Path) -> bool {
    std::fs::read_link(path).is_ok_and(|target| target == Path::new("/dev/null"))
}
