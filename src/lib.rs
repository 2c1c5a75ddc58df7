//! nodeward: an on-node agent that prepares a Kubernetes host and keeps it prepared.
//!
//! Configuration (`config`) describes the node; steps (`steps`) observe the host through the one
//! root-aware layer (`root`, `host`) and produce plans (`plan`) that are shown or applied.

#![warn(unreachable_pub)]

pub mod bundle;
pub mod check;
pub mod clock;
pub mod config;
pub(crate) mod containerd;
pub mod daemon;
pub(crate) mod event;
pub mod exit;
pub(crate) mod failpoint;
pub mod fleetlock;
pub(crate) mod glob;
pub mod host;
pub(crate) mod images;
pub(crate) mod jitter;
pub mod kubelet;
pub(crate) mod listen;
pub(crate) mod metrics;
pub mod plan;
pub(crate) mod progress;
pub mod registration;
pub mod root;
pub(crate) mod setting;
pub mod steps;
pub mod text;
pub mod types;
