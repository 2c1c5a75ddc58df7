//! Which archives to read and which engines each goes into: pure, from the files found, the
//! record and what the engines hold.

use super::archive::ShippedImage;
use super::record::{Fingerprint, Record};

/// containerd's name as an import target (its `k8s.io` namespace: the kubelet's CRI).
pub(crate) const CONTAINERD: &str = "containerd";

/// The engines on this node an archive may go into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Targets {
    /// containerd is installed (its `ctr`; it may not run yet).
    pub(crate) containerd: bool,
    /// The engine that runs the kubelet (`podman`, `docker`), when it can load archives.
    pub(crate) kubelet_engine: Option<String>,
    /// The kubelet image's repository, normalized (`quay.io/poseidon/kubelet`).
    pub(crate) kubelet_repository: String,
}

impl Targets {
    /// An archive holding the kubelet's image goes into the kubelet's engine; one holding any
    /// other image (or an unnamed one) into containerd, whose CRI runs everything else. (The
    /// kubelet's image in containerd would be hundreds of megabytes no pod uses.)
    pub(crate) fn for_images(&self, images: &[ShippedImage]) -> Vec<String> {
        let mut out = Vec::new();
        if self.containerd && images.iter().any(|i| self.goes_to(CONTAINERD, i)) {
            out.push(CONTAINERD.to_owned());
        }
        if let Some(engine) = &self.kubelet_engine {
            if images.iter().any(|i| self.goes_to(engine, i)) {
                out.push(engine.clone());
            }
        }
        out
    }

    /// Whether `image` is one `engine` is to hold: the kubelet's in its engine, the rest in
    /// containerd.
    pub(crate) fn goes_to(&self, engine: &str, image: &ShippedImage) -> bool {
        let is_kubelet = image
            .name
            .as_deref()
            .is_some_and(|n| repository(n) == self.kubelet_repository);
        is_kubelet != (engine == CONTAINERD)
    }
}

/// `quay.io/poseidon/kubelet` of `quay.io/poseidon/kubelet:v1.36.1` (or `…@sha256:…`).
pub(crate) fn repository(name: &str) -> &str {
    let name = name.split_once('@').map_or(name, |(n, _)| n);
    let last_slash = name.rfind('/').map_or(0, |i| i + 1);
    match name[last_slash..].rfind(':') {
        Some(i) => &name[..last_slash + i],
        None => name,
    }
}

/// What to do with one archive found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Imported before from this very file, and its images are still in each engine.
    Unchanged,
    /// Refused before, and the file has not changed since: not read again.
    Refused { error: String },
    /// Read, and imported into the engines it goes to but `already` (`why`: new, changed, an
    /// engine lost an image, or a new engine).
    Import { why: String, already: Vec<String> },
}

/// Decides for the archive at `path`. `present(engine, image)`: whether the engine holds it.
pub(crate) fn decide(
    path: &str,
    file: Fingerprint,
    record: &Record,
    targets: &Targets,
    present: &dyn Fn(&str, &str) -> bool,
) -> Decision {
    if let Some(refused) = record.refused.get(path).filter(|r| r.file == file) {
        return Decision::Refused {
            error: refused.error.clone(),
        };
    }
    let Some(done) = record.archives.get(path) else {
        return Decision::Import {
            why: "new".into(),
            already: Vec::new(),
        };
    };
    if done.file != file {
        return Decision::Import {
            why: "changed since its import".into(),
            already: Vec::new(),
        };
    }
    let mut why = Vec::new();
    let mut already = Vec::new();
    for engine in targets.for_images(&done.images) {
        let gone = done
            .images
            .iter()
            .filter(|i| targets.goes_to(&engine, i))
            .filter_map(|i| i.name.as_deref())
            .find(|name| !present(&engine, name));
        match (done.into.contains(&engine), gone) {
            (false, _) => why.push(format!("not yet in {engine}")),
            (true, Some(name)) => why.push(format!("{engine} no longer holds {name}")),
            (true, None) => already.push(engine),
        }
    }
    if why.is_empty() {
        Decision::Unchanged
    } else {
        Decision::Import {
            why: why.join("; "),
            already,
        }
    }
}

/// Where an archive holds the kubelet's repository but not the digest `kubelet.image` pins, a
/// sentence saying so (a Docker archive has no manifest digest, so it never satisfies a pin).
pub(crate) fn pin_unmet(images: &[ShippedImage], repository_: &str, pinned: &str) -> Option<String> {
    let same_repo: Vec<&ShippedImage> = images
        .iter()
        .filter(|i| i.name.as_deref().is_some_and(|n| repository(n) == repository_))
        .collect();
    if same_repo.is_empty() || same_repo.iter().any(|i| i.manifest.as_deref() == Some(pinned)) {
        return None;
    }
    let held: Vec<&str> = same_repo
        .iter()
        .map(|i| {
            i.manifest
                .as_deref()
                .unwrap_or("no manifest digest (a Docker archive)")
        })
        .collect();
    Some(format!(
        "holds {repository_} with {}, not the {pinned} kubelet.image pins: the kubelet's engine pulls it instead",
        held.join(", ")
    ))
}

/// Whether a shipped image is the one a reference asks for: by name, or for a reference pinned by
/// digest, by its repository and that manifest digest (a Docker archive has none: never a pin).
pub(crate) fn satisfies(image: &ShippedImage, wanted: &str) -> bool {
    let wanted = crate::images::archive::normalize(wanted);
    let Some(name) = image.name.as_deref() else {
        return false;
    };
    match wanted.split_once('@') {
        Some((_, digest)) => {
            repository(name) == repository(&wanted) && image.manifest.as_deref() == Some(digest)
        }
        None => name == wanted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::images::archive::Format;
    use crate::images::record::Imported;
    use std::collections::BTreeMap;

    const PAUSE: &str = "registry.k8s.io/pause:3.10.1";
    const KUBELET: &str = "quay.io/poseidon/kubelet:v1.36.1";

    fn fp(size: u64) -> Fingerprint {
        Fingerprint {
            dev: 1,
            ino: 2,
            size,
            mtime_ns: 3,
        }
    }

    fn image(name: &str, manifest: Option<&str>) -> ShippedImage {
        ShippedImage {
            name: Some(name.into()),
            manifest: manifest.map(str::to_owned),
        }
    }

    fn targets() -> Targets {
        Targets {
            containerd: true,
            kubelet_engine: Some("podman".into()),
            kubelet_repository: "quay.io/poseidon/kubelet".into(),
        }
    }

    fn record_of(path: &str, images: Vec<ShippedImage>, into: &[&str]) -> Record {
        let mut archives = BTreeMap::new();
        archives.insert(
            path.to_owned(),
            Imported {
                file: fp(10),
                format: Format::Oci,
                images,
                into: into.iter().map(|s| (*s).to_owned()).collect(),
            },
        );
        Record {
            version: 1,
            archives,
            ..Record::default()
        }
    }

    #[test]
    fn the_kubelets_image_goes_to_its_engine_and_every_other_to_containerd() {
        let t = targets();
        assert_eq!(t.for_images(&[image(PAUSE, None)]), ["containerd"]);
        assert_eq!(t.for_images(&[image(KUBELET, None)]), ["podman"]);
        assert_eq!(
            t.for_images(&[image(PAUSE, None), image(KUBELET, None)]),
            ["containerd", "podman"]
        );
        let unnamed = ShippedImage {
            name: None,
            manifest: None,
        };
        assert_eq!(t.for_images(&[unnamed]), ["containerd"]);
        let no_containerd = Targets {
            containerd: false,
            ..targets()
        };
        assert_eq!(
            no_containerd.for_images(&[image(PAUSE, None)]),
            Vec::<String>::new()
        );
        let rkt = Targets {
            kubelet_engine: None,
            ..targets()
        };
        assert_eq!(rkt.for_images(&[image(KUBELET, None)]), Vec::<String>::new());
    }

    #[test]
    fn an_unchanged_archive_whose_images_are_there_is_not_read() {
        let r = record_of(
            "/a.tar",
            vec![image(KUBELET, None), image(PAUSE, None)],
            &["containerd", "podman"],
        );
        assert_eq!(
            decide("/a.tar", fp(10), &r, &targets(), &|_, _| true),
            Decision::Unchanged
        );
    }

    #[test]
    fn each_engine_is_asked_only_for_the_images_it_holds() {
        let r = record_of(
            "/a.tar",
            vec![image(KUBELET, None), image(PAUSE, None)],
            &["containerd", "podman"],
        );
        let holds = |e: &str, i: &str| (e == "podman") == i.starts_with("quay.io/poseidon/kubelet");
        assert_eq!(
            decide("/a.tar", fp(10), &r, &targets(), &holds),
            Decision::Unchanged
        );
    }

    #[test]
    fn new_changed_lost_or_newly_targeted_archives_are_imported() {
        let r = record_of(
            "/a.tar",
            vec![image(KUBELET, None), image(PAUSE, None)],
            &["containerd", "podman"],
        );
        let why = |d: Decision| match d {
            Decision::Import { why, .. } => why,
            other => panic!("expected an import, not {other:?}"),
        };
        assert_eq!(why(decide("/b.tar", fp(10), &r, &targets(), &|_, _| true)), "new");
        assert_eq!(
            why(decide("/a.tar", fp(11), &r, &targets(), &|_, _| true)),
            "changed since its import"
        );
        let lost = why(decide("/a.tar", fp(10), &r, &targets(), &|e, _| e != "podman"));
        assert_eq!(lost, format!("podman no longer holds {KUBELET}"));
        let only_containerd = record_of(
            "/a.tar",
            vec![image(KUBELET, None), image(PAUSE, None)],
            &["containerd"],
        );
        assert_eq!(
            decide("/a.tar", fp(10), &only_containerd, &targets(), &|_, _| true),
            Decision::Import {
                why: "not yet in podman".into(),
                already: vec!["containerd".into()]
            }
        );
    }

    #[test]
    fn a_refused_archive_is_not_read_again_until_its_file_changes() {
        let mut r = Record::default();
        r.refused.insert(
            "/bad.tar".into(),
            crate::images::record::Refused {
                file: fp(10),
                error: "altered".into(),
            },
        );
        assert_eq!(
            decide("/bad.tar", fp(10), &r, &targets(), &|_, _| true),
            Decision::Refused {
                error: "altered".into()
            }
        );
        assert!(matches!(
            decide("/bad.tar", fp(11), &r, &targets(), &|_, _| true),
            Decision::Import { .. }
        ));
    }

    #[test]
    fn repositories_without_tag_or_digest() {
        assert_eq!(repository(KUBELET), "quay.io/poseidon/kubelet");
        assert_eq!(repository("host:5000/a/b@sha256:00"), "host:5000/a/b");
        assert_eq!(repository("host:5000/a/b"), "host:5000/a/b");
    }

    #[test]
    fn a_pin_is_met_only_by_its_digest() {
        let pinned = format!("sha256:{}", "1".repeat(64));
        let other = format!("sha256:{}", "2".repeat(64));
        let repo = "quay.io/poseidon/kubelet";
        assert_eq!(pin_unmet(&[image(KUBELET, Some(&pinned))], repo, &pinned), None);
        let unmet = pin_unmet(&[image(KUBELET, Some(&other))], repo, &pinned).expect("an unmet pin is said");
        assert!(unmet.contains(&other) && unmet.contains(&pinned), "{unmet}");
        let docker = pin_unmet(&[image(KUBELET, None)], repo, &pinned).expect("an unmet pin is said");
        assert!(docker.contains("Docker archive"), "{docker}");
        // An archive without the kubelet's repository says nothing about the pin.
        assert_eq!(pin_unmet(&[image(PAUSE, None)], repo, &pinned), None);
    }

    #[test]
    fn a_pin_is_satisfied_by_its_digest_only_and_a_tag_by_its_name() {
        let oci = |name: &str, manifest: Option<&str>| ShippedImage {
            name: Some(name.into()),
            manifest: manifest.map(str::to_owned),
        };
        let pinned = "quay.io/poseidon/kubelet@sha256:aa";
        assert!(satisfies(&oci(KUBELET, Some("sha256:aa")), pinned));
        assert!(
            !satisfies(&oci(KUBELET, Some("sha256:bb")), pinned),
            "another digest"
        );
        assert!(
            !satisfies(&oci(KUBELET, None), pinned),
            "a Docker archive never meets a pin"
        );
        assert!(
            !satisfies(&oci(PAUSE, Some("sha256:aa")), pinned),
            "another repository"
        );
        assert!(satisfies(&oci(PAUSE, None), "registry.k8s.io/pause:3.10.1"));
        assert!(
            satisfies(&oci("docker.io/library/pause:3.10", None), "pause:3.10"),
            "normalized"
        );
        assert!(
            !satisfies(&oci(PAUSE, None), "registry.k8s.io/pause:3.10"),
            "another tag"
        );
        let unnamed = ShippedImage {
            name: None,
            manifest: Some("sha256:aa".into()),
        };
        assert!(!satisfies(&unnamed, pinned));
    }
}
