//! The supervisor's timings, from `[kubelet]`.

use std::time::Duration;

use crate::config::kubelet::KubeletInput;

/// Timings, from `[kubelet]`.
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    pub stop_grace: Duration,
    pub max_delay: Duration,
    pub healthy_reset: Duration,
    pub health_interval: Duration,
    pub unhealthy_threshold: u32,
    pub startup_grace: Duration,
    /// How long a new spec has to be healthy before it is rolled back; `None`: never rolled back.
    pub rollback_grace: Option<Duration>,
}

impl Tuning {
    pub(crate) fn from_input(k: &KubeletInput) -> Tuning {
        Tuning {
            stop_grace: Duration::from_secs(k.stop_timeout_seconds),
            max_delay: Duration::from_secs(k.restart_max_delay_seconds),
            healthy_reset: Duration::from_secs(k.healthy_reset_seconds),
            health_interval: Duration::from_secs(k.health_interval_seconds),
            unhealthy_threshold: k.unhealthy_threshold,
            startup_grace: Duration::from_secs(k.startup_grace_seconds),
            rollback_grace: k
                .rollback
                .then(|| Duration::from_secs(k.rollback_grace_seconds.unwrap_or(k.startup_grace_seconds))),
        }
    }
}
