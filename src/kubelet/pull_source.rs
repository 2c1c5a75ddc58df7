//! Where the kubelet's engine pulls its image from: the same `[[containerd.mirrors]]` containerd
//! pulls through. For each image of the spec (the configured one, then each `kubelet.mirrors`
//! reference), its registry's mirrors in the configuration's order, then the image itself — the
//! order containerd's `hosts.toml` gives its own pulls (mirrors first, the registry last).
//!
//! containerd names a mirror by URL and keeps the image's name; podman and docker name the host in
//! the reference. So a mirror serves the kubelet's image under `HOST[:PORT]/REPOSITORY[:TAG][@DIGEST]`
//! (the registry's part of the name replaced), which an engine reaches only the way the mirror
//! asks: its own trust (https), a CA ([`Transport::Ca`]) or plain http ([`Transport::PlainHttp`]).
//! A mirror whose URL has a path (`https://host/quay`) has no such reference and is left to
//! containerd.

use serde::{Deserialize, Serialize};

use crate::containerd::mirrors::{self, Mirror};

/// One reference to pull the kubelet's image by, and how to reach its host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PullSource {
    pub reference: String,
    #[serde(default, skip_serializing_if = "Transport::is_default")]
    pub transport: Transport,
    /// The `[[containerd.mirrors]]` URL it was derived from; `None`: the image as configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror: Option<String>,
}

/// How an engine must reach a pull source's host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    /// https, trusted as the engine trusts any registry.
    #[default]
    Https,
    /// https, trusting this CA (PEM) too (`containerd.mirrors[].ca_file`).
    Ca(String),
    /// Plain http (`containerd.mirrors[].plain_http`).
    PlainHttp,
}

impl Transport {
    fn is_default(&self) -> bool {
        *self == Transport::Https
    }
}

/// The images in order, each preceded by its registry's mirrors (in the configuration's order);
/// a reference listed twice is tried once.
pub(crate) fn sources(images: &[String], mirrors: &[Mirror]) -> Vec<PullSource> {
    let mut out: Vec<PullSource> = Vec::new();
    for image in images {
        let route = mirrors::pull_path(image, mirrors);
        let derived = route.mirrors.iter().filter_map(|m| at_mirror(m, &route.path));
        let own = PullSource {
            reference: image.clone(),
            transport: Transport::Https,
            mirror: None,
        };
        for s in derived.chain([own]) {
            if !out.iter().any(|o| o.reference == s.reference) {
                out.push(s);
            }
        }
    }
    out
}

/// [`sources`] when a mirror serves one of the images; empty otherwise (the images alone).
pub(crate) fn mirrored(images: &[String], mirrors: &[Mirror]) -> Vec<PullSource> {
    let list = sources(images, mirrors);
    if list.iter().any(|s| s.mirror.is_some()) {
        list
    } else {
        Vec::new()
    }
}

/// `rest` (the name after its registry, with tag and digest) at the mirror's host; `None` for a
/// mirror URL with a path.
fn at_mirror(m: &Mirror, rest: &str) -> Option<PullSource> {
    let (scheme, after) = m.url.split_once("://")?;
    if after.contains('/') {
        return None;
    }
    let transport = match (scheme, &m.ca_file) {
        ("http", _) => Transport::PlainHttp,
        (_, Some(ca)) => Transport::Ca(ca.to_string()),
        _ => Transport::Https,
    };
    Some(PullSource {
        reference: format!("{after}/{rest}"),
        transport,
        mirror: Some(m.url.clone()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mirror(registry: &str, url: &str, ca: Option<&str>) -> Mirror {
        Mirror {
            registry: registry.into(),
            url: url.into(),
            ca_file: ca.map(|c| c.parse().expect("an absolute path")),
        }
    }

    fn refs(list: &[PullSource]) -> Vec<(&str, &Transport)> {
        list.iter()
            .map(|s| (s.reference.as_str(), &s.transport))
            .collect()
    }

    const KUBELET: &str = "quay.io/poseidon/kubelet:v1.36.3@sha256:7c49aa2f7c26c5e1a4dbc1b0d6a5f3b3a8b0c1d2e3f405162738495a6b7c8d9e";

    #[test]
    fn each_image_is_preceded_by_its_registrys_mirrors_in_order() {
        let mirrors = [
            mirror("quay.io", "http://127.0.0.1:5000", None),
            mirror("registry.k8s.io", "https://k8s.mirror.example", None),
            mirror(
                "quay.io",
                "https://quay.mirror.example:8443",
                Some("/etc/pki/mirror.pem"),
            ),
        ];
        let images = [KUBELET.to_owned(), "ghcr.io/poseidon/kubelet:v1.36.3".to_owned()];
        let got = sources(&images, &mirrors);
        let digest = KUBELET
            .split_once("poseidon/")
            .map(|(_, r)| r)
            .unwrap_or_default();
        assert_eq!(
            refs(&got),
            vec![
                (
                    format!("127.0.0.1:5000/poseidon/{digest}").as_str(),
                    &Transport::PlainHttp
                ),
                (
                    format!("quay.mirror.example:8443/poseidon/{digest}").as_str(),
                    &Transport::Ca("/etc/pki/mirror.pem".into())
                ),
                (KUBELET, &Transport::Https),
                ("ghcr.io/poseidon/kubelet:v1.36.3", &Transport::Https),
            ]
        );
        assert_eq!(got[0].mirror.as_deref(), Some("http://127.0.0.1:5000"));
        assert_eq!(got[2].mirror, None);
    }

    /// The control: without mirrors (or with another registry's), the images alone, unchanged.
    #[test]
    fn without_a_mirror_of_its_registry_the_image_alone() {
        let images = [KUBELET.to_owned()];
        assert_eq!(refs(&sources(&images, &[])), vec![(KUBELET, &Transport::Https)]);
        let other = [mirror("docker.io", "https://hub.mirror.example", None)];
        assert_eq!(
            refs(&sources(&images, &other)),
            vec![(KUBELET, &Transport::Https)]
        );
    }

    #[test]
    fn docker_hubs_short_names_are_normalized_as_the_engines_do() {
        let hub = [mirror("docker.io", "https://hub.mirror.example", None)];
        let got = sources(&["busybox:1.36".to_owned(), "psdn/kubelet:v1".to_owned()], &hub);
        assert_eq!(
            refs(&got),
            vec![
                ("hub.mirror.example/library/busybox:1.36", &Transport::Https),
                ("busybox:1.36", &Transport::Https),
                ("hub.mirror.example/psdn/kubelet:v1", &Transport::Https),
                ("psdn/kubelet:v1", &Transport::Https),
            ]
        );
        let named = sources(&["docker.io/busybox:1".to_owned()], &hub);
        assert_eq!(named[0].reference, "hub.mirror.example/library/busybox:1");
        // A host with a port, and localhost, are registries.
        let local = [mirror("localhost:5000", "http://10.0.0.1:5000", None)];
        assert_eq!(
            refs(&sources(&["localhost:5000/k:1".to_owned()], &local))[0],
            ("10.0.0.1:5000/k:1", &Transport::PlainHttp)
        );
    }

    #[test]
    fn a_mirror_with_a_path_is_left_to_containerd() {
        let pathed = [mirror("quay.io", "https://mirror.example/quay", None)];
        assert_eq!(
            refs(&sources(&[KUBELET.to_owned()], &pathed)),
            vec![(KUBELET, &Transport::Https)]
        );
    }

    #[test]
    fn a_reference_listed_twice_is_tried_once() {
        let m = [mirror("quay.io", "http://m:5000", None)];
        let got = sources(
            &[
                "quay.io/a/b:1".to_owned(),
                "m:5000/a/b:1".to_owned(),
                "quay.io/a/b:1".to_owned(),
            ],
            &m,
        );
        assert_eq!(
            refs(&got),
            vec![
                ("m:5000/a/b:1", &Transport::PlainHttp),
                ("quay.io/a/b:1", &Transport::Https)
            ]
        );
    }
}
