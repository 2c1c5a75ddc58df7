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
pub(crate) const CONFIG_DIRS: [&str; 3] = [
    "/usr/lib/nodeward/config.d",
    "/run/nodeward/config.d",
    "/etc/nodeward/config.d",
];

/// The fragment files to read, in merge order (lowest precedence first).
pub(crate) fn discover(root: &HostRoot) -> Result<Vec<PathBuf>, ConfigError> {
    // name -> winning file, or None when masked.
    let mut by_name: BTreeMap<String, Option<PathBuf>> = BTreeMap::new();
    for dir in CONFIG_DIRS {
        let resolved = inside(root, dir, Path::new(dir))?;
        match std::fs::metadata(&resolved) {
            Ok(_) => strict_modes_up(root, &resolved)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => {
                return Err(ConfigError::Read {
                    path: resolved,
                    source,
                });
            }
        }
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
            let file = inside(root, &format!("{dir}/{name}"), &path)?;
            if let Ok(meta) = std::fs::metadata(&file) {
                strict_modes(&file, &meta)?;
                // A link may lead to another directory: its tree is checked too.
                if let Some(parent) = file.parent().filter(|p| *p != resolved) {
                    strict_modes_up(root, parent)?;
                }
            }
            by_name.insert(name, Some(file));
        }
    }
    let files: Vec<PathBuf> = by_name.into_values().flatten().collect();
    within_bounds(&files)?;
    Ok(files)
}

/// The most fragments read: a node has a handful (the image's, Ignition's, an operator's).
pub(crate) const MAX_FRAGMENTS: usize = 256;
/// Their bytes together (each is also held to 4 MiB when read): what the daemon parses on its
/// main loop at a reload, so a pile of large fragments cannot hold its watchdog or its SIGTERM.
pub(crate) const MAX_TOTAL_BYTES: u64 = 16 << 20;

fn within_bounds(files: &[PathBuf]) -> Result<(), ConfigError> {
    let dir = files
        .first()
        .and_then(|f| f.parent())
        .map_or_else(PathBuf::new, Path::to_path_buf);
    if files.len() > MAX_FRAGMENTS {
        return Err(ConfigError::Invalid {
            path: dir,
            message: format!("{} configuration fragments, at most {MAX_FRAGMENTS}", files.len()),
        });
    }
    let total: u64 = files
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok())
        .map(|m| m.len())
        .sum();
    if total > MAX_TOTAL_BYTES {
        return Err(ConfigError::Invalid {
            path: dir,
            message: format!("the configuration fragments total {total} bytes, at most {MAX_TOTAL_BYTES}"),
        });
    }
    Ok(())
}

/// Where the host path `host` is inside the root, symlinks followed inside it; errors name `shown`.
fn inside(root: &HostRoot, host: &str, shown: &Path) -> Result<PathBuf, ConfigError> {
    let invalid = |message: String| ConfigError::Invalid {
        path: shown.to_path_buf(),
        message,
    };
    let abs: crate::types::AbsPath = host.parse().map_err(|e: crate::types::Invalid| invalid(e.0))?;
    root.resolve(&abs).map_err(|e| invalid(e.to_string()))
}

/// StrictModes up the tree, as sshd checks an authorized_keys file's parents: every directory from
/// below the root (`/` or the `--root` directory, itself not checked) down to `dir` must pass
/// [`strict_modes`], or someone could swap the configuration under it.
fn strict_modes_up(root: &HostRoot, dir: &Path) -> Result<(), ConfigError> {
    let Ok(rel) = dir.strip_prefix(root.dir()) else {
        return Ok(());
    };
    let mut at = root.dir().to_path_buf();
    for part in rel.components() {
        at.push(part);
        match std::fs::metadata(&at) {
            Ok(meta) => strict_modes(&at, &meta)?,
            Err(source) => return Err(ConfigError::Read { path: at, source }),
        }
    }
    Ok(())
}

/// sshd's StrictModes for configuration: owned by root (or by the user running nodeward, for an
/// image tree under `--root` built without root), and writable by neither group nor others.
fn strict_modes(path: &Path, meta: &std::fs::Metadata) -> Result<(), ConfigError> {
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::geteuid().as_raw();
    let unsafe_because = if meta.uid() != 0 && meta.uid() != me {
        Some(format!("owned by uid {}", meta.uid()))
    } else if meta.mode() & 0o022 != 0 {
        Some(format!(
            "mode {:04o} lets {} write it",
            meta.mode() & 0o7777,
            if meta.mode() & 0o002 != 0 {
                "anyone"
            } else {
                "its group"
            }
        ))
    } else {
        None
    };
    match unsafe_because {
        Some(reason) => Err(ConfigError::Unsafe {
            path: path.to_path_buf(),
            reason,
        }),
        None => Ok(()),
    }
}

/// A symlink whose target is literally `/dev/null` (also in an image root, where it may dangle).
fn is_mask(path: &Path) -> bool {
    std::fs::read_link(path).is_ok_and(|target| target == Path::new("/dev/null"))
}
