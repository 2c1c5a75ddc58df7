//! Effects owed to the host: a reload that failed after the file it was for was written.
//!
//! The file is already right, so the next plan would see nothing to do and the reload would never
//! come. A failed effect leaves a marker under `/run/nodeward/owed/` (named by the effect's
//! subject); the step that plans the effect asks [`is_owed`] and plans it again until it succeeds.
//! `/run` is the right lifetime: after a reboot the service reads its configuration afresh.

use std::path::Path;

use crate::host::state::StateFile;
use crate::root::HostRoot;

/// Records the outcome of an effect: a failure is remembered, a success forgets it.
pub(crate) fn settle<E: std::fmt::Display>(
    root_dir: &Path,
    subject: &str,
    result: Result<(), E>,
) -> Result<(), E> {
    let root = HostRoot::at(root_dir);
    let marker = StateFile::Owed(subject.to_owned());
    let kept = match &result {
        Ok(()) => marker.remove(&root),
        Err(e) => marker.write(&root, format!("{e}\n").as_bytes()).map(|_| ()),
    };
    if let Err(w) = kept {
        tracing::warn!(error = %w, subject, "cannot remember the owed effect");
    }
    result
}

/// Whether an earlier attempt at this effect failed and it is still owed.
pub(crate) fn is_owed(root: &HostRoot, subject: &str) -> bool {
    StateFile::Owed(subject.to_owned()).exists(root)
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
