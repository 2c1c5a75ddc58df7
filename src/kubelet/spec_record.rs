//! The spec of the last kubelet started, kept under /run/nodeward so `plan` can show what a
//! change would alter.

use super::spec::{Desired, KubeletSpec};
use crate::root::HostRoot;

/// Where the spec of the last started kubelet is kept.
pub(crate) fn spec_record_path(root: &HostRoot) -> Option<std::path::PathBuf> {
    crate::host::lock::run_path(root, "kubelet-spec.json").ok()
}

/// The spec recorded for `hash`, if that is the one recorded.
pub(crate) fn recorded_spec(root: &HostRoot, hash: &str) -> Option<KubeletSpec> {
    let path = spec_record_path(root)?;
    let text = crate::host::read::read_below(root, &path, crate::host::read::Kind::State).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&text).ok()?;
    (v["hash"].as_str() == Some(hash))
        .then(|| serde_json::from_value(v["spec"].clone()).ok())
        .flatten()
}

/// Keeps the spec of the container just started.
pub fn record(root: &HostRoot, w: &Desired) {
    let Some(path) = spec_record_path(root) else {
        tracing::warn!("cannot resolve the kubelet spec record below the root");
        return;
    };
    let json = serde_json::json!({ "hash": w.hash, "spec": w.spec });
    let meta = crate::host::fs::Meta {
        mode: 0o644,
        uid: 0,
        gid: 0,
        label: None,
    };
    let written = crate::host::fs::write_atomic_creating(&path, json.to_string().as_bytes(), &meta, 0o755);
    if let Err(e) = written {
        tracing::warn!(error = %e, "cannot record the kubelet spec");
    }
}
