//! The supervisor's timings: validated with `[kubelet]` (see `config::kubelet_settings`).

pub use crate::config::kubelet_settings::Tuning;
