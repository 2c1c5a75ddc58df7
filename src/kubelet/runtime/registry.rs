//! The registry of engines: one line each. A new engine is its own file and a line here.

use std::sync::Arc;

use super::docker::Docker;
use super::engine::{Engine, Paths};
use super::podman::Podman;
use super::rkt::Rkt;
use super::types::Kind;

/// Makes an engine with its state's paths.
pub(crate) type Make = fn(&Paths) -> Arc<dyn Engine>;

/// Every engine, in `kubelet.runtime = "auto"`'s order of preference: one line each.
pub(crate) const ENGINES: &[(Kind, Make)] = &[
    (Kind::Podman, |p| Arc::new(Podman::new(p))),
    (Kind::Docker, |_| Arc::new(Docker)),
    (Kind::Rkt, |p| Arc::new(Rkt::new(p))),
];

/// The engine of this kind.
pub(crate) fn make(kind: Kind, paths: &Paths) -> Arc<dyn Engine> {
    let make = ENGINES
        .iter()
        .find(|(k, _)| *k == kind)
        .map_or(ENGINES[0].1, |(_, make)| *make);
    make(paths)
}
