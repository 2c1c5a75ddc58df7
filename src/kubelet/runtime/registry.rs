//! The registry of engines: one line each. A new engine is its own file and a line here.

use std::sync::Arc;

use super::docker::Docker;
use super::engine::{Engine, Paths};
use super::podman::Podman;
use super::rkt::Rkt;
use super::types::Kind;

/// Makes an engine with its state's paths.
pub(crate) type Make = fn(&Paths) -> Arc<dyn Engine>;

/// Every engine, in `kubelet.runtime = "auto"`'s order of preference: one line each, with its
/// program.
pub(crate) const ENGINES: &[(Kind, &str, Make)] = &[
    (Kind::Podman, "podman", |p| Arc::new(Podman::new(p))),
    (Kind::Docker, "docker", |_| Arc::new(Docker)),
    (Kind::Rkt, "rkt", |p| Arc::new(Rkt::new(p))),
];

/// The engine of this kind.
pub(crate) fn make(kind: Kind, paths: &Paths) -> Arc<dyn Engine> {
    let make = ENGINES
        .iter()
        .find(|(k, _, _)| *k == kind)
        .map_or(ENGINES[0].2, |(_, _, make)| *make);
    make(paths)
}

impl Kind {
    /// The engine's program, as its registry line names it.
    pub fn program(self) -> &'static str {
        ENGINES
            .iter()
            .find(|(k, _, _)| *k == self)
            .map_or(ENGINES[0].1, |(_, program, _)| program)
    }
}
