//! The `images` check: every image the node needs before a pod can run — the kubelet's own (its
//! engine runs it) and the pod sandbox image (containerd starts every pod with it) — is present in
//! its engine, shipped with the node (an archive `images.dirs` holds), or pullable from a registry
//! or one of its mirrors. An image that is none of these leaves the node NotReady far from the
//! cause; this names it before.
//!
//! `image_sources` gathers what this decides on.

use super::image_sources::ImageSeen;
use super::model::{Check, Outcome};
use super::observe::Observation;
use crate::config::Settings;
use crate::images::pullable::Pullable;

pub(crate) const IMAGES: Check = Check {
    name: "images",
    why: "an image the node needs that is neither present, shipped nor pullable keeps the kubelet or every pod from starting",
    decide: images,
};

/// Where one image stands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Source {
    Present(String),
    Shipped(String),
    Pullable(String),
    /// Neither present, shipped nor pullable: why not.
    Missing(String),
    /// Cannot be told from here: why.
    Unknown(String),
}

fn source(i: &ImageSeen) -> Source {
    if i.present == Ok(true) {
        return Source::Present(i.engine.clone());
    }
    if let Some(archive) = &i.shipped {
        return Source::Shipped(archive.clone());
    }
    let absent = match &i.present {
        Ok(_) => format!("not in {}", i.engine),
        Err(why) => format!("{} not asked ({why})", i.engine),
    };
    match &i.pullable {
        Some(Pullable::From(at)) => Source::Pullable(at.clone()),
        Some(Pullable::No(why)) => Source::Missing(format!("{absent}, not shipped, not pullable: {why}")),
        Some(Pullable::Unknown(why)) => Source::Unknown(format!("{absent}, not shipped; {why}")),
        None => Source::Unknown(format!(
            "{absent}, not shipped; whether a registry serves it, `nodeward check` asks"
        )),
    }
}

fn images(obs: &Observation, _: &Settings) -> Outcome {
    let Some(list) = &obs.images else {
        return Outcome::skipped(
            "nodeward runs no kubelet here (kubelet.enabled = false, or no kubelet.image)",
        );
    };
    let expected = "each present in its engine, shipped with the node, or pullable";
    let said: Vec<(String, Source)> = list
        .iter()
        .map(|i| (format!("{} {}", i.role, i.reference), source(i)))
        .collect();
    let line = |(what, s): &(String, Source)| match s {
        Source::Present(engine) => format!("{what}: present in {engine}"),
        Source::Shipped(archive) => format!("{what}: shipped in {archive}"),
        Source::Pullable(at) => format!("{what}: pullable from {at}"),
        Source::Missing(why) | Source::Unknown(why) => format!("{what}: {why}"),
    };
    let observed = said.iter().map(line).collect::<Vec<_>>().join("; ");
    let missing = said.iter().any(|(_, s)| matches!(s, Source::Missing(_)));
    let known = said
        .iter()
        .any(|(_, s)| !matches!(s, Source::Unknown(_) | Source::Missing(_)));
    if missing {
        Outcome::fail(
            observed,
            expected,
            "ship it with the node (an archive in a directory of images.dirs: Ignition's, or the OS \
             image), list a mirror ([[containerd.mirrors]], kubelet.mirrors), \
             or make the registry reachable",
        )
    } else if known || said.is_empty() {
        Outcome::pass(observed, expected)
    } else {
        Outcome::skipped(observed)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::check::image_sources::endpoint;
    use crate::check::model::Status;
    use crate::check::observe::tests::{observation, settings};

    pub(crate) fn seen(role: &'static str, reference: &str) -> ImageSeen {
        ImageSeen {
            role,
            reference: reference.into(),
            engine: if role == "kubelet" { "podman" } else { "containerd" }.into(),
            present: Ok(false),
            shipped: None,
            pullable: None,
            endpoints: vec![endpoint("https://registry.k8s.io", None)],
            alternatives: Vec::new(),
            mirrored: Vec::new(),
            held_from_mirror: false,
        }
    }

    fn decide(list: Vec<ImageSeen>) -> Outcome {
        let mut o = observation();
        o.images = Some(list);
        images(&o, &settings())
    }

    #[test]
    fn each_image_present_shipped_or_pullable_passes_and_says_which() {
        let mut k = seen("kubelet", "quay.io/poseidon/kubelet@sha256:aa");
        k.present = Ok(true);
        let mut s = seen("sandbox", "registry.k8s.io/pause:3.10.1");
        s.shipped = Some("/var/lib/nodeward/images/pause.tar.zst".into());
        let o = decide(vec![k.clone(), s.clone()]);
        assert_eq!(o.status, Status::Pass, "{o:?}");
        assert!(
            o.observed
                .contains("kubelet quay.io/poseidon/kubelet@sha256:aa: present in podman"),
            "{}",
            o.observed
        );
        assert!(
            o.observed
                .contains("shipped in /var/lib/nodeward/images/pause.tar.zst"),
            "{}",
            o.observed
        );
        s.shipped = None;
        s.pullable = Some(Pullable::From("http://127.0.0.1:5000/v2".into()));
        let o = decide(vec![k, s]);
        assert_eq!(o.status, Status::Pass);
        assert!(
            o.observed.contains("pullable from http://127.0.0.1:5000/v2"),
            "{}",
            o.observed
        );
    }

    #[test]
    fn an_image_from_nowhere_fails_naming_it_and_the_reasons() {
        let mut k = seen("kubelet", "quay.io/poseidon/kubelet:v1.36.1");
        k.present = Ok(true);
        let mut s = seen("sandbox", "registry.k8s.io/pause:3.10.1");
        s.pullable = Some(Pullable::No(
            "https://registry.k8s.io/v2/pause/manifests/3.10.1: dns error".into(),
        ));
        let o = decide(vec![k.clone(), s.clone()]);
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.observed.contains("sandbox registry.k8s.io/pause:3.10.1: not in containerd, not shipped, not pullable: https://registry.k8s.io/v2/pause/manifests/3.10.1: dns error"),
            "{}",
            o.observed
        );
        assert!(o.fix.contains("images.dirs"), "{}", o.fix);
        // The control: the same image shipped passes.
        s.shipped = Some("/usr/share/nodeward/images/pause.tar".into());
        assert_eq!(decide(vec![k, s]).status, Status::Pass);
    }

    #[test]
    fn what_cannot_be_told_is_never_a_failure() {
        // The daemon never asks registries; under --root no engine is asked.
        let mut k = seen("kubelet", "quay.io/poseidon/kubelet:v1.36.1");
        k.present = Err("not the running system (--root)".into());
        let mut s = seen("sandbox", "registry.k8s.io/pause:3.10.1");
        s.present = Err("containerd is not running".into());
        let o = decide(vec![k.clone(), s.clone()]);
        assert_eq!(o.status, Status::Skipped, "{o:?}");
        assert!(
            o.observed
                .contains("whether a registry serves it, `nodeward check` asks"),
            "{}",
            o.observed
        );
        // A private registry: credentials the check does not have.
        s.pullable = Some(Pullable::Unknown("401 with an anonymous token".into()));
        k.shipped = Some("/usr/share/nodeward/images/kubelet.tar".into());
        let o = decide(vec![k, s]);
        assert_eq!(o.status, Status::Pass, "{o:?}");
        assert!(
            o.observed.contains("401 with an anonymous token"),
            "{}",
            o.observed
        );
        let mut none = observation();
        none.images = None;
        assert_eq!(images(&none, &settings()).status, Status::Skipped);
    }
}
