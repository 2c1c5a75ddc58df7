//! What the supervisor publishes about the kubelet: its state, its last exit, and the status
//! `nodeward status`, STATUS= and the metrics read.

use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

/// The last exit of the kubelet container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastExit {
    pub code: Option<i32>,
    pub at: u64,
    pub reason: String,
}

/// Where the kubelet is in its life, as `nodeward status` names it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KubeletState {
    /// Being started (mount sources, image, container); also before the first decision.
    #[default]
    Starting,
    Running,
    /// Exited or unhealthy; started again after the backoff.
    Restarting,
    /// Stopped with nodeward.
    Stopped,
    /// No kubelet is wanted (disabled, or no image).
    NotWanted,
    /// Could not be started; retried after the backoff.
    Failing,
}

impl KubeletState {
    pub fn name(self) -> &'static str {
        match self {
            KubeletState::Starting => "starting",
            KubeletState::Running => "running",
            KubeletState::Restarting => "restarting",
            KubeletState::Stopped => "stopped",
            KubeletState::NotWanted => "not-wanted",
            KubeletState::Failing => "failing",
        }
    }
}

impl std::fmt::Display for KubeletState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What `nodeward status` shows about the kubelet.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubeletStatus {
    pub runtime: String,
    pub state: KubeletState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_hash: Option<String>,
    /// Unix time the current container was started or adopted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<u64>,
    /// True when the current container was adopted rather than started by this nodeward.
    #[serde(default)]
    pub adopted: bool,
    /// Restarts after an exit or failed health since this nodeward started.
    #[serde(default)]
    pub restarts: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_exit: Option<LastExit>,
    pub health: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The status, shared between the supervisor (which writes it) and the daemon (which reads it).
pub type SharedStatus = Arc<Mutex<KubeletStatus>>;
