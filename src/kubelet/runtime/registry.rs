//! The registry of engines: one line each. A new engine is its own file (its `impl Engine`, its
//! `KIND`, its own mounts) and a line here; nothing else names it (a test below plants one).

use std::sync::Arc;

use super::docker::{self, Docker};
use super::engine::{Engine, Paths};
use super::podman::{self, Podman};
use super::rkt::{self, Rkt};
use super::types::Kind;
use crate::kubelet::container::Placed;

/// Makes an engine with its state's paths.
pub(crate) type Make = fn(&Paths) -> Arc<dyn Engine>;
/// The mounts an engine alone takes, each placed in Typhoon's table.
pub(crate) type OwnMounts = fn() -> Vec<Placed>;

/// One engine: its kind (its name, which is its program's), how to make it, and its own mounts.
pub(crate) type Line = (Kind, Make, OwnMounts);

/// Every engine, in `kubelet.runtime = "auto"`'s order of preference: one line each.
pub(crate) const ENGINES: &[Line] = &[
    (podman::KIND, |p| Arc::new(Podman::new(p)), podman::own_mounts),
    (docker::KIND, |_| Arc::new(Docker), Vec::new),
    (rkt::KIND, |p| Arc::new(Rkt::new(p)), rkt::own_mounts),
];

/// The engine of this kind (the registry's first for a kind it does not list).
pub(crate) fn make(kind: Kind, paths: &Paths) -> Arc<dyn Engine> {
    make_in(ENGINES, kind, paths)
}

fn make_in(registry: &[Line], kind: Kind, paths: &Paths) -> Arc<dyn Engine> {
    let make = registry
        .iter()
        .find(|(k, _, _)| *k == kind)
        .map_or(registry[0].1, |(_, make, _)| *make);
    make(paths)
}

/// The engine named `name`, if the registry lists one.
pub(crate) fn named(name: &str) -> Option<Kind> {
    named_in(ENGINES, name)
}

fn named_in(registry: &[Line], name: &str) -> Option<Kind> {
    registry.iter().map(|(k, _, _)| *k).find(|k| k.name() == name)
}

/// Every engine's own mounts, in the registry's order.
pub(crate) fn own_mounts() -> Vec<Placed> {
    own_mounts_in(ENGINES)
}

fn own_mounts_in(registry: &[Line]) -> Vec<Placed> {
    registry.iter().flat_map(|(_, _, own)| own()).collect()
}

impl Kind {
    /// The engine's program: its name.
    pub fn program(self) -> &'static str {
        self.name()
    }
}

impl std::str::FromStr for Kind {
    type Err = crate::types::Invalid;
    fn from_str(s: &str) -> Result<Kind, crate::types::Invalid> {
        named(s).ok_or_else(|| {
            let names: Vec<&str> = ENGINES.iter().map(|(k, _, _)| k.name()).collect();
            crate::types::Invalid(format!("unknown engine {s:?}: one of {}", names.join(", ")))
        })
    }
}

impl<'de> serde::Deserialize<'de> for Kind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Kind, D::Error> {
        let name = String::deserialize(d)?;
        name.parse()
            .map_err(|e: crate::types::Invalid| serde::de::Error::custom(e.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::container::{KubeletSpec, Mount, Only, compose};
    use std::path::PathBuf;

    // An engine planted here as a new engine's file would be: its KIND, its `impl Engine`, its own
    // mount. Nothing in `types/`, `container.rs` or the architecture test knows it.
    const KIND: Kind = Kind::new("nerdctl");

    #[derive(Debug)]
    struct Nerdctl;

    impl Engine for Nerdctl {
        fn kind(&self) -> Kind {
            KIND
        }

        fn run_args(&self, spec: &KubeletSpec, image: &str, _hash: &str, _replace: bool) -> Vec<String> {
            let mounts = spec.mounts.iter().filter(|m| self.takes(m.only));
            mounts
                .map(|m| format!("--mount={}", m.target))
                .chain([image.to_owned()])
                .collect()
        }

        fn start<'a>(
            &'a self,
            program: &'a std::path::Path,
            _name: &'a str,
            args: &'a [String],
            _hash: &'a str,
            _replace: bool,
        ) -> super::super::engine::Fut<'a, Result<String, super::super::types::RuntimeError>> {
            Box::pin(super::super::engine_cli::run(program, args))
        }
    }

    fn own() -> Vec<Placed> {
        vec![Placed {
            after: "/var/log",
            mounts: vec![Mount::new("/run/nerdctl").only(Only::Engine(KIND))],
        }]
    }

    #[test]
    fn a_planted_engine_is_its_file_and_one_registry_line() {
        // The one line.
        let line: Line = (KIND, |_| Arc::new(Nerdctl), own);
        let registry: Vec<Line> = ENGINES.iter().copied().chain([line]).collect();
        assert_eq!(named_in(&registry, "nerdctl"), Some(KIND));
        assert_eq!(named("nerdctl"), None, "control: not in the shipped registry");
        assert_eq!(named("rkt"), Some(rkt::KIND));
        let paths = Paths {
            uuid_file: PathBuf::from("/u"),
            pid_file: PathBuf::from("/p"),
        };
        let engine = make_in(&registry, KIND, &paths);
        assert_eq!(engine.kind(), KIND);
        // Its own mount is placed in the shared table after Typhoon's /var/log, taken by it alone.
        let table = compose(own_mounts_in(&registry));
        let at = |t: &str| table.iter().position(|m| m.target == t).expect(t);
        let (log, own) = (at("/var/log"), at("/run/nerdctl"));
        assert!(
            own > log && own <= log + 2,
            "placed after /var/log, beside podman's lock directory"
        );
        let mount = &table[at("/run/nerdctl")];
        assert!(engine.takes(mount.only));
        for other in [podman::KIND, docker::KIND, rkt::KIND] {
            assert!(!make_in(&registry, other, &paths).takes(mount.only), "{other}");
        }
        assert!(!compose(own_mounts()).iter().any(|m| m.target == "/run/nerdctl"));
        // Its command line through the shared default `takes`: every engine's mounts and its own.
        let spec = KubeletSpec {
            name: "kubelet".into(),
            images: vec!["quay.io/poseidon/kubelet:v1.36.1".into()],
            mounts: table.clone(),
            args: Vec::new(),
            config_sha256: String::new(),
        };
        let args = engine.run_args(&spec, "quay.io/poseidon/kubelet:v1.36.1", "h", false);
        assert!(args.contains(&"--mount=/run/nerdctl".to_owned()), "{args:?}");
        assert!(args.contains(&"--mount=/var/log".to_owned()), "{args:?}");
        assert!(
            !args.contains(&"--mount=/var/run/lock".to_owned()),
            "podman's own: {args:?}"
        );
        // `kubelet.runtime = "nerdctl"` parses against a registry that lists it, not the shipped one.
        assert!("nerdctl".parse::<Kind>().is_err());
    }
}
