//! Whether this node holds a FleetLock slot, kept on disk (`/var/lib/nodeward/fleetlock.json`)
//! before the slot is used and removed only once it is given back: a node that restarts or
//! reboots releases a slot only when its record says it holds one.

use serde::{Deserialize, Serialize};

use crate::host::state::StateFile;
use crate::root::HostRoot;

/// A slot this node holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Held {
    pub(crate) base_url: String,
    pub(crate) group: String,
    pub(crate) id: String,
    /// Unix time it was taken.
    pub(crate) since: u64,
    /// Why it is held: the spec hash being rolled out.
    pub(crate) for_spec: String,
    /// Kept after a rollback: the rollout halted here, an operator releases it.
    #[serde(default)]
    pub(crate) halted: bool,
}

/// The record, if any (unreadable: none, with a warning; a slot it named is then never released
/// by nodeward, which is the safe side: an operator sees it held).
pub(crate) fn load(root: &HostRoot) -> Option<Held> {
    match StateFile::FleetLock.read(root) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map_err(|e| tracing::warn!(path = %StateFile::FleetLock.path(), error = %e, "FleetLock record unreadable"))
            .ok(),
        Err(e) if e.is_missing() => None,
        Err(e) => {
            tracing::warn!(error = %e, "FleetLock record unreadable");
            None
        }
    }
}

/// Records `held` (before the slot is used).
pub(crate) fn save(root: &HostRoot, held: &Held) -> std::io::Result<()> {
    let json = serde_json::to_vec_pretty(held).map_err(std::io::Error::other)?;
    StateFile::FleetLock
        .write(root, &json)
        .map(|_| ())
        .map_err(|e| std::io::Error::other(e.to_string()))
}

/// Forgets the record (the slot was given back, or was not ours).
pub(crate) fn clear(root: &HostRoot) {
    if let Err(e) = StateFile::FleetLock.remove(root) {
        tracing::warn!(error = %e, "cannot remove the FleetLock record");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_kept_read_back_and_cleared() {
        let t = tempfile::tempdir().expect("tempdir");
        let root = HostRoot::at(t.path());
        assert_eq!(load(&root), None);
        let h = Held {
            base_url: "https://l".into(),
            group: "default".into(),
            id: "abc".into(),
            since: 5,
            for_spec: "f00".into(),
            halted: false,
        };
        save(&root, &h).expect("save");
        assert_eq!(load(&root), Some(h));
        clear(&root);
        assert_eq!(load(&root), None);
        clear(&root);
    }
}
