//! nodeward: an on-node agent that prepares a Kubernetes host and keeps it prepared.
//!
//! Configuration (`config`) describes the node; steps (`steps`) observe the host through the one
//! root-aware layer (`root`, `host`) and produce plans (`plan`) that are shown or applied.

pub mod bundle;
pub mod check;
pub mod clock;
pub mod config;
pub mod daemon;
pub mod event;
pub mod exit;
pub mod failpoint;
pub mod fleetlock;
pub mod glob;
pub mod host;
pub mod jitter;
pub mod kubelet;
pub mod listen;
pub mod metrics;
pub mod plan;
pub mod progress;
pub mod root;
pub mod setting;
pub mod steps;
pub mod text;
pub mod types;
