//! Effects owed to the host: a reload that failed after the file it was for was written.
//!
//! The file is already right, so the next plan would see nothing to do and the reload would never
//! come. A failed effect leaves a marker under `/run/nodeward/owed/` (named by the effect's
//! subject); the step that plans the effect asks [`is_owed`] and plans it again until it succeeds.
//! `/run` is the right lifetime: after a reboot the service reads its configuration afresh.

use std::path::Path;

use crate::host::lock::run_path;
use crate::root::HostRoot;

fn marker(root_dir: &Path, subject: &str) -> Option<std::path::PathBuf> {
    let name: String = subject
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    run_path(&HostRoot::at(root_dir), &format!("owed/{name}")).ok()
}

/// Records the outcome of an effect: a failure is remembered, a success forgets it.
pub(crate) fn settle<E: std::fmt::Display>(
    root_dir: &Path,
    subject: &str,
    result: Result<(), E>,
) -> Result<(), E> {
    if let Some(path) = marker(root_dir, subject) {
        match &result {
            Ok(()) => {
                let _ = std::fs::remove_file(&path);
            }
            Err(e) => {
                let written = path
                    .parent()
                    .map_or(Ok(()), std::fs::create_dir_all)
                    .and_then(|()| std::fs::write(&path, format!("{e}\n")));
                if let Err(w) = written {
                    tracing::warn!(error = %w, subject, "cannot remember the owed effect");
                }
            }
        }
    }
    result
}

/// Whether an earlier attempt at this effect failed and it is still owed.
pub(crate) fn is_owed(root: &HostRoot, subject: &str) -> bool {
    marker(root.dir(), subject).is_some_and(|p| p.exists())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_owed_until_a_success() {
        let t = tempfile::tempdir().expect("tempdir");
        let root = HostRoot::at(t.path());
        assert!(!is_owed(&root, "NetworkManager"));
        let failed = settle(t.path(), "NetworkManager", Err(std::io::Error::other("no")));
        assert!(failed.is_err());
        assert!(is_owed(&root, "NetworkManager"));
        assert!(!is_owed(&root, "systemd-logind.service"));
        settle::<std::io::Error>(t.path(), "NetworkManager", Ok(())).expect("ok");
        assert!(!is_owed(&root, "NetworkManager"));
    }
}
