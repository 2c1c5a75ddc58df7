//! The spec of the last kubelet started, kept under /run/nodeward so `plan` can show what a
//! change would alter.

use super::spec::{Desired, KubeletSpec};
use crate::host::state::StateFile;
use crate::root::HostRoot;

/// The spec recorded for `hash`, if that is the one recorded.
pub(crate) fn recorded_spec(root: &HostRoot, hash: &str) -> Option<KubeletSpec> {
    let text = StateFile::KubeletSpec.read(root).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&text).ok()?;
    (v["hash"].as_str() == Some(hash))
        .then(|| serde_json::from_value(v["spec"].clone()).ok())
        .flatten()
}

/// Keeps the spec of the container just started.
pub(crate) fn record(root: &HostRoot, w: &Desired) {
    let json = serde_json::json!({ "hash": w.hash, "spec": w.spec });
    if let Err(e) = StateFile::KubeletSpec.write(root, json.to_string().as_bytes()) {
        tracing::warn!(error = %e, "cannot record the kubelet spec");
    }
}
