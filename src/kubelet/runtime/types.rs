//! What the engines report and how they fail, shared by every engine's code.

use serde::Serialize;

/// The label carrying [`KubeletSpec::hash`].
pub const HASH_LABEL: &str = "io.nodeward.spec-hash";

/// An engine, by name: each engine declares its own (`const KIND` in its file) and its registry
/// line lists it (`registry.rs`, which also parses one from its name).
pub use crate::types::EngineKind as Kind;

/// A runtime failure, naming the command that failed.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("no container runtime found (looked for {looked} in PATH)")]
    NotFound { looked: String },
    #[error("{command}: cannot run: {source}")]
    Spawn {
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{command}: exited with {status}: {stderr}")]
    Failed {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("{command}: timed out after {seconds} s")]
    Timeout { command: String, seconds: u64 },
    #[error("{command}: unexpected output: {message}")]
    Output { command: String, message: String },
    #[error("mkdir -p {path}: {source}")]
    Resolve {
        path: String,
        #[source]
        source: crate::root::RootError,
    },
    #[error("mount source {source_path} (for {target}) does not exist on this host")]
    MountSource { source_path: String, target: String },
    #[error("no kubelet image could be pulled: {}", .tried.join("; "))]
    NoImage { tried: Vec<String> },
    #[error(
        "{name}: the container changed since it was planned (planned for {planned}, found {found}): nothing done; plan again"
    )]
    Changed {
        name: String,
        planned: String,
        found: String,
    },
}

/// A local image, by the reference it was found or pulled under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    pub(crate) reference: String,
    /// Its content id (`sha256:…`); empty when the engine does not say (rkt).
    pub(crate) id: String,
}

/// A kubelet container as the runtime reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Container {
    pub id: String,
    pub running: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The image reference it was started from.
    pub image: String,
    /// The image's content id (`sha256:…`).
    pub image_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// The spec hash it was started with, if nodeward started it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec_hash: Option<String>,
    /// Its main process (the kubelet), in nodeward's pid namespace, while it runs.
    #[serde(skip)]
    pub pid: Option<i32>,
}
