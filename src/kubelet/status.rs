//! What the supervisor publishes about the kubelet: its state, its last exit, and the status
//! `nodeward status`, STATUS= and the metrics read.

use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

/// The last exit of the kubelet container.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastExit {
    pub code: Option<i32>,
    pub at: u64,
    pub reason: String,
    /// The backoff the supervisor chose before starting the kubelet again (milliseconds); `None`
    /// for a stop that was not followed by a restart from the backoff (a replacement, a rollback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_in_ms: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exit_history_keeps_the_last_ten_and_learns_codes_late() {
        let mut s = KubeletStatus::default();
        for at in 0..12 {
            s.push_exit(LastExit {
                code: None,
                at,
                reason: "exited".into(),
                ..LastExit::default()
            });
        }
        assert_eq!(s.exits.len(), EXITS_KEPT);
        assert_eq!(s.exits.first().map(|e| e.at), Some(2));
        s.exit_code_known(11, 137);
        assert_eq!(s.last_exit.as_ref().and_then(|e| e.code), Some(137));
        assert_eq!(s.exits.last().and_then(|e| e.code), Some(137));
        assert_eq!(s.exits[0].code, None);
    }
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
    /// The last [`EXITS_KEPT`] exits and stops, oldest first (`nodeward kubelet show`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exits: Vec<LastExit>,
    pub health: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The spec held back after a rollback, while the configuration still wants it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolled_back: Option<super::rollout::RolledBack>,
    /// Rollbacks since this nodeward started.
    #[serde(default)]
    pub rollbacks: u64,
    /// A new spec on trial: healthy within its grace period, or rolled back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trial: Option<String>,
    /// FleetLock, when it is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet_lock: Option<FleetLockStatus>,
    /// An image pull under way: layers begun and done, since when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull: Option<super::runtime::PullProgress>,
    /// The last pull this nodeward made: size, time, rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pull: Option<super::runtime::PullDone>,
}

/// What this node does with its FleetLock slot.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetLockStatus {
    pub group: String,
    /// This node holds a slot.
    pub held: bool,
    /// Held after a rollback: the rollout halts here until an operator releases it.
    pub halted: bool,
    /// A spec change waits for a slot: why it has none yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
}

/// How many exits `exits` keeps.
pub const EXITS_KEPT: usize = 10;

impl KubeletStatus {
    /// Records an exit (or a stop) as the last one, and in the bounded history.
    pub fn push_exit(&mut self, exit: LastExit) {
        if self.exits.len() == EXITS_KEPT {
            self.exits.remove(0);
        }
        self.exits.push(exit.clone());
        self.last_exit = Some(exit);
    }

    /// Fills in the code of the exit seen at `at`, learnt later from the engine.
    pub fn exit_code_known(&mut self, at: u64, code: i32) {
        for e in self.last_exit.iter_mut().chain(self.exits.iter_mut()) {
            if e.at == at && e.code.is_none() {
                e.code = Some(code);
            }
        }
    }
}

/// The status, shared between the supervisor (which writes it) and the daemon (which reads it).
pub type SharedStatus = Arc<Mutex<KubeletStatus>>;
