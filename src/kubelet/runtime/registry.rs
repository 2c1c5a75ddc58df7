//! The registry of engines: one line each. A new engine is its own file and a line here.

use std::sync::Arc;

use super::docker::Docker;
use super::engine::{Engine, Paths};
use super::podman::{self, Podman};
use super::rkt::{self, Rkt};
use super::types::Kind;
use crate::kubelet::container::Placed;

/// Makes an engine with its state's paths.
pub(crate) type Make = fn(&Paths) -> Arc<dyn Engine>;
/// The mounts an engine alone takes, each placed in Typhoon's table.
pub(crate) type OwnMounts = fn() -> Vec<Placed>;

/// Every engine, in `kubelet.runtime = "auto"`'s order of preference: one line each, with its
/// program and its own mounts.
pub(crate) const ENGINES: &[(Kind, &str, Make, OwnMounts)] = &[
    (
        Kind::Podman,
        "podman",
        |p| Arc::new(Podman::new(p)),
        podman::own_mounts,
    ),
    (Kind::Docker, "docker", |_| Arc::new(Docker), Vec::new),
    (Kind::Rkt, "rkt", |p| Arc::new(Rkt::new(p)), rkt::own_mounts),
];

/// The engine of this kind.
pub(crate) fn make(kind: Kind, paths: &Paths) -> Arc<dyn Engine> {
    let make = ENGINES
        .iter()
        .find(|(k, _, _, _)| *k == kind)
        .map_or(ENGINES[0].2, |(_, _, make, _)| *make);
    make(paths)
}

impl Kind {
    /// The engine's program, as its registry line names it.
    pub fn program(self) -> &'static str {
        ENGINES
            .iter()
            .find(|(k, _, _, _)| *k == self)
            .map_or(ENGINES[0].1, |(_, program, _, _)| program)
    }
}
