//! Where each image the node needs could come from, gathered for the `images` check: its engine
//! (on the running node), the import record (shipped archives), and — asked only by `nodeward
//! check` ([`probe`]), never by the daemon — the registries and their mirrors.

use crate::host::read::{self, Kind};
use crate::images::pullable::{self, Endpoint, Pullable};
use crate::kubelet::pull_source::PullSource;
use crate::steps::context::Context;

/// One image the node needs, and where it could come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ImageSeen {
    /// `kubelet` (its engine runs it) or `sandbox` (containerd's pod sandbox image).
    pub(crate) role: &'static str,
    pub(crate) reference: String,
    /// The engine that needs it: `podman`, `docker`, `rkt` or `containerd`.
    pub(crate) engine: String,
    /// The engine holds it.
    pub(crate) present: Result<bool, String>,
    /// The archive shipped with the node that holds it (the import record's path).
    pub(crate) shipped: Option<String>,
    /// Whether a registry serves it; `None` until [`probe`] asked.
    pub(crate) pullable: Option<Pullable>,
    /// Where its engine pulls from, in order (mirrors first).
    pub(crate) endpoints: Vec<Endpoint>,
    /// Other references its engine tries when this one cannot be pulled (`kubelet.mirrors`).
    pub(crate) alternatives: Vec<String>,
    /// The references `[[containerd.mirrors]]` serve it under, for its engine.
    pub(crate) mirrored: Vec<String>,
    /// Its engine holds it only under a [`ImageSeen::mirrored`] reference: a mirror served it.
    pub(crate) held_from_mirror: bool,
}

/// The images this node needs, as its engines, its import record and its configuration say;
/// `None` when nodeward runs no kubelet.
pub(crate) fn gather(ctx: &Context<'_>) -> Option<Vec<ImageSeen>> {
    let kubelet = &ctx.settings.kubelet;
    let image = kubelet.image.as_ref().filter(|_| kubelet.enabled)?.to_string();
    let (record, _) = crate::images::read_record(ctx.root);
    let shipped = |reference: &str| {
        record
            .archives
            .iter()
            .filter(|(path, _)| {
                path.parse::<crate::types::AbsPath>()
                    .is_ok_and(|p| ctx.root.lexical(&p).exists())
            })
            .find(|(_, done)| {
                done.images
                    .iter()
                    .any(|i| crate::images::decide::satisfies(i, reference))
            })
            .map(|(path, _)| path.clone())
    };
    let mut kubelet_image = kubelet_seen(ctx, image);
    kubelet_image.shipped = shipped(&kubelet_image.reference);
    let mut sandbox_image = sandbox_seen(ctx, sandbox_image(ctx));
    sandbox_image.shipped = shipped(&sandbox_image.reference);
    Some(vec![kubelet_image, sandbox_image])
}

fn not_live() -> String {
    "not the running system (--root)".to_owned()
}

/// The kubelet's image as its engine sees it, with where that engine would pull it from: the
/// `[[containerd.mirrors]]` it reaches, then the registry.
fn kubelet_seen(ctx: &Context<'_>, image: String) -> ImageSeen {
    let runtime = crate::steps::kubelet::runtime(ctx).ok();
    let engine = runtime
        .as_ref()
        .map_or_else(|| "the kubelet's engine".to_owned(), |r| r.name().to_owned());
    // The references `[[containerd.mirrors]]` serve it under, where this engine reaches them.
    let mirrored: Vec<PullSource> =
        crate::kubelet::pull_source::sources(std::slice::from_ref(&image), &ctx.settings.containerd.mirrors)
            .into_iter()
            .filter(|s| s.mirror.is_some())
            .filter(|s| runtime.as_ref().is_none_or(|r| r.reaches(&s.transport)))
            .collect();
    let (present, held_from_mirror) = match &runtime {
        _ if !ctx.containers_live => (Err(not_live()), false),
        None => (Err("no engine found".to_owned()), false),
        Some(r) if !r.lists_images() => (Err(format!("{} cannot be asked", r.name())), false),
        Some(r) => {
            let held_as = std::iter::once(image.as_str())
                .chain(mirrored.iter().map(|s| s.reference.as_str()))
                .find(|i| crate::kubelet::block_on(r.image_id(i)).is_some());
            match held_as {
                None => (Ok(false), false),
                Some(i) => {
                    let recorded = crate::kubelet::block_on(r.image_digests(i));
                    (Ok(true), came_from_mirror(&recorded, &image, &mirrored))
                }
            }
        }
    };
    let reached: Vec<&str> = mirrored.iter().filter_map(|s| s.mirror.as_deref()).collect();
    ImageSeen {
        role: "kubelet",
        engine,
        present,
        shipped: None,
        pullable: None,
        endpoints: containerd_endpoints(ctx, &image)
            .into_iter()
            .filter(|e| e.mirror.as_deref().is_none_or(|m| reached.contains(&m)))
            .map(|e| e.endpoint)
            .collect(),
        alternatives: ctx
            .settings
            .kubelet
            .mirrors
            .iter()
            .map(ToString::to_string)
            .collect(),
        mirrored: mirrored.iter().map(|s| s.reference.clone()).collect(),
        held_from_mirror,
        reference: image,
    }
}

/// Whether the registry digests an engine recorded for the image it holds (`name@sha256:…`, one
/// per repository it was pulled from) name a mirror's repository and not the image's own. Asked
/// of the engine, not of the name it was found by: podman finds a digest under any repository.
fn came_from_mirror(recorded: &[String], image: &str, mirrored: &[PullSource]) -> bool {
    use crate::images::decide::repository;
    let repos: Vec<&str> = recorded.iter().map(|d| repository(d)).collect();
    !repos.contains(&repository(image)) && mirrored.iter().any(|m| repos.contains(&repository(&m.reference)))
}

/// The pod sandbox image as containerd sees it.
fn sandbox_seen(ctx: &Context<'_>, sandbox: String) -> ImageSeen {
    let engines = crate::steps::images::engines(ctx);
    let present = match (&engines.ctr, engines.containerd_running) {
        _ if !ctx.containers_live => Err(not_live()),
        (None, _) => Err("ctr is not installed".to_owned()),
        (Some(_), false) => Err("containerd is not running".to_owned()),
        (Some(ctr), true) => crate::images::containerd_listing(ctr, &engines.containerd_socket, LIST_TIMEOUT)
            .map(|listing| crate::images::held(&listing, &sandbox))
            .ok_or_else(|| "ctr could not list containerd's images".to_owned()),
    };
    ImageSeen {
        role: "sandbox",
        shipped: None,
        present,
        engine: "containerd".to_owned(),
        pullable: None,
        endpoints: containerd_endpoints(ctx, &sandbox)
            .into_iter()
            .map(|e| e.endpoint)
            .collect(),
        alternatives: Vec::new(),
        mirrored: Vec::new(),
        held_from_mirror: false,
        reference: sandbox,
    }
}

const LIST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// The sandbox image containerd uses: nodeward's pin where it writes containerd's file, else the
/// one the file names, else containerd's own default.
fn sandbox_image(ctx: &Context<'_>) -> String {
    let c = &ctx.settings.containerd;
    if c.manage {
        return c.sandbox_image.to_string();
    }
    read::read_text(ctx.root, &c.config_file, Kind::Config)
        .ok()
        .and_then(|text| crate::containerd::sandbox_image(&text))
        .unwrap_or_else(|| crate::containerd::settings::DEFAULT_SANDBOX_IMAGE.to_owned())
}

/// An endpoint, and the mirror URL it is when it is one.
struct MirrorEndpoint {
    endpoint: Endpoint,
    mirror: Option<String>,
}

/// Where containerd pulls an image from: its registry's mirrors (`[[containerd.mirrors]]`, as
/// nodeward writes them into `hosts.toml`), then the registry.
fn containerd_endpoints(ctx: &Context<'_>, reference: &str) -> Vec<MirrorEndpoint> {
    if pullable::parts(reference).is_none() {
        return Vec::new();
    }
    let route = crate::containerd::mirrors::pull_path(reference, &ctx.settings.containerd.mirrors);
    let mut out: Vec<MirrorEndpoint> = route
        .mirrors
        .iter()
        .map(|m| {
            let ca = m
                .ca_file
                .as_ref()
                .and_then(|f| read::read(ctx.root, f, Kind::Config).ok());
            MirrorEndpoint {
                endpoint: endpoint(&m.url, ca),
                mirror: Some(m.url.clone()),
            }
        })
        .collect();
    out.push(MirrorEndpoint {
        endpoint: endpoint(&route.server(), None),
        mirror: None,
    });
    out
}

/// Static pod manifests read at most.
const MAX_MANIFESTS: usize = 64;

/// One image a node with this configuration needs before its pods run, and what needs it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Needed {
    /// `kubelet`, `sandbox`, or `static-pod FILE`.
    pub need: String,
    pub reference: String,
}

/// The images this node needs: the kubelet's (when nodeward runs one), the pod sandbox image, and
/// each image its static pod manifests name (`/etc/kubernetes/manifests`, as installed). What
/// `nodeward images list` prints for an image builder to ship (`packaging/images/save`).
pub fn needed(ctx: &Context<'_>) -> Vec<Needed> {
    let mut out = Vec::new();
    let kubelet = &ctx.settings.kubelet;
    if let Some(image) = kubelet.image.as_ref().filter(|_| kubelet.enabled) {
        out.push(Needed {
            need: "kubelet".into(),
            reference: image.to_string(),
        });
    }
    out.push(Needed {
        need: "sandbox".into(),
        reference: sandbox_image(ctx),
    });
    // Where the kubelet finds its static pods (Typhoon's bundle puts the control plane's there).
    let dir = crate::abs_path!("/etc/kubernetes/manifests");
    let real = ctx.root.resolve(&dir).unwrap_or_else(|_| ctx.root.lexical(&dir));
    let mut names: Vec<String> = std::fs::read_dir(real)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".yaml") || n.ends_with(".yml") || n.ends_with(".json"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    for name in names.into_iter().take(MAX_MANIFESTS) {
        let Ok(path) = dir.join(&name) else { continue };
        let Ok(text) = read::read_text(ctx.root, &path, Kind::Config) else {
            continue;
        };
        for reference in manifest_images(&text) {
            if !out.iter().any(|n| n.reference == reference) {
                out.push(Needed {
                    need: format!("static-pod {path}"),
                    reference,
                });
            }
        }
    }
    out
}

/// The `image:` values of a pod manifest (YAML or JSON), in order.
pub(crate) fn manifest_images(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim_start().trim_start_matches("- ").trim_start();
            let v = l
                .strip_prefix("image:")
                .or_else(|| l.strip_prefix("\"image\":"))?;
            let v = v.trim().trim_end_matches(',').trim().trim_matches(['"', '\'']);
            (!v.is_empty() && !v.contains(char::is_whitespace)).then(|| v.to_owned())
        })
        .collect()
}

/// Where an image the node runs came from, for the metric `nodeward_image_source`: `shipped` (an
/// archive the node carries holds it), `pulled` (its engine has it, not from an archive: a
/// registry or a mirror), `pullable` (not there yet; a registry serves it), `missing` (its engine
/// lacks it and nothing ships it), `unknown` (its engine could not be asked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageSource {
    pub(crate) role: &'static str,
    pub(crate) reference: String,
    pub(crate) source: &'static str,
}

/// Each image's source, by provenance: an archive first (an engine holding a shipped image got it
/// from there), then the engine, then a registry. `last_pull`: the reference nodeward's own last
/// pull of the kubelet's image fetched (the image itself: `registry`; a `kubelet.mirrors` entry or
/// the image at a `[[containerd.mirrors]]` host: `mirror`); containerd's pulls do not say which host served them (`pulled`).
pub(crate) fn sources(list: &[ImageSeen], last_pull: Option<&str>) -> Vec<ImageSource> {
    list.iter()
        .map(|i| ImageSource {
            role: i.role,
            reference: i.reference.clone(),
            source: match (&i.shipped, &i.present, &i.pullable) {
                (Some(_), _, _) => "shipped",
                (None, Ok(true), _) if i.role == "kubelet" && last_pull == Some(i.reference.as_str()) => {
                    "registry"
                }
                (None, Ok(true), _)
                    if i.role == "kubelet"
                        && last_pull
                            .is_some_and(|p| i.alternatives.iter().chain(&i.mirrored).any(|a| a == p)) =>
                {
                    "mirror"
                }
                (None, Ok(true), _) if i.held_from_mirror => "mirror",
                (None, Ok(true), _) => "pulled",
                (None, _, Some(Pullable::From(_))) => "pullable",
                (None, Ok(false), _) => "missing",
                (None, Err(_), _) => "unknown",
            },
        })
        .collect()
}

/// A host's API root: containerd appends `/v2` to a `hosts.toml` host (its `docs/hosts.md`).
pub(crate) fn endpoint(host: &str, ca_pem: Option<Vec<u8>>) -> Endpoint {
    Endpoint {
        api: format!("{}/v2", host.trim_end_matches('/')),
        ca_pem,
    }
}

/// Asks the registries about each image that is neither present nor shipped (`nodeward check`).
pub(crate) fn probe(list: &mut [ImageSeen]) {
    for i in list
        .iter_mut()
        .filter(|i| i.present != Ok(true) && i.shipped.is_none())
    {
        i.pullable = Some(probe_one(i, &pullable::ask));
    }
}

/// The image, then each alternative reference, each at its endpoints: the first that serves it.
fn probe_one(i: &ImageSeen, ask: &dyn Fn(&Endpoint, &pullable::Parts) -> pullable::Answer) -> Pullable {
    let Some(parts) = pullable::parts(&i.reference) else {
        return Pullable::No(format!("{}: not an image name", i.reference));
    };
    let first = pullable::first_serving(&i.endpoints, &parts, ask);
    let mut unknown = matches!(first, Pullable::Unknown(_));
    let mut why = match first {
        Pullable::From(_) => return first,
        Pullable::No(w) | Pullable::Unknown(w) => vec![w],
    };
    for alt in &i.alternatives {
        let Some(parts) = pullable::parts(alt) else {
            continue;
        };
        let at = vec![endpoint(
            &crate::containerd::mirrors::server(&parts.registry),
            None,
        )];
        match pullable::first_serving(&at, &parts, ask) {
            Pullable::From(from) => {
                return Pullable::From(format!("{from} ({alt}, a kubelet.mirrors entry)"));
            }
            Pullable::No(w) => why.push(w),
            Pullable::Unknown(w) => {
                unknown = true;
                why.push(w);
            }
        }
    }
    if unknown {
        Pullable::Unknown(why.join("; "))
    } else {
        Pullable::No(why.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::images::pullable::Answer;

    fn kubelet(reference: &str) -> ImageSeen {
        ImageSeen {
            role: "kubelet",
            reference: reference.into(),
            engine: "podman".into(),
            present: Ok(false),
            shipped: None,
            pullable: None,
            endpoints: vec![endpoint("https://quay.io", None)],
            alternatives: Vec::new(),
            mirrored: Vec::new(),
            held_from_mirror: false,
        }
    }

    #[test]
    fn the_probe_tries_the_image_then_each_kubelet_mirror() {
        let mut k = kubelet("quay.io/poseidon/kubelet:v1.36.1");
        k.alternatives = vec!["docker.io/psdn/kubelet:v1.36.1".into()];
        let hub_only = |e: &Endpoint, _: &pullable::Parts| {
            if e.api == "https://registry-1.docker.io/v2" {
                Answer::Serves
            } else {
                Answer::No(format!("{}: down", e.api))
            }
        };
        assert_eq!(
            probe_one(&k, &hub_only),
            Pullable::From(
                "https://registry-1.docker.io/v2 (docker.io/psdn/kubelet:v1.36.1, a kubelet.mirrors entry)"
                    .into()
            )
        );
        let down = |e: &Endpoint, _: &pullable::Parts| Answer::No(format!("{}: down", e.api));
        assert_eq!(
            probe_one(&k, &down),
            Pullable::No("https://quay.io/v2: down; https://registry-1.docker.io/v2: down".into())
        );
    }

    #[test]
    fn a_hosts_toml_host_is_asked_under_v2() {
        assert_eq!(
            endpoint("http://127.0.0.1:5000/", None).api,
            "http://127.0.0.1:5000/v2"
        );
        assert_eq!(
            endpoint("https://hub-cache.example.com/cache", None).api,
            "https://hub-cache.example.com/cache/v2"
        );
    }

    #[test]
    fn the_engines_record_says_whether_a_mirror_served_the_image() {
        let image = "quay.io/poseidon/kubelet@sha256:aa";
        let mirrored = [PullSource {
            reference: "127.0.0.1:5000/poseidon/kubelet@sha256:aa".into(),
            transport: crate::kubelet::pull_source::Transport::PlainHttp,
            mirror: Some("http://127.0.0.1:5000".into()),
        }];
        let from = |recorded: &[&str]| {
            let recorded: Vec<String> = recorded.iter().map(|s| s.to_string()).collect();
            came_from_mirror(&recorded, image, &mirrored)
        };
        assert!(from(&["127.0.0.1:5000/poseidon/kubelet@sha256:aa"]));
        // The controls: the registry's own repository, an imported image (nothing recorded), another.
        assert!(!from(&[
            "quay.io/poseidon/kubelet@sha256:aa",
            "127.0.0.1:5000/poseidon/kubelet@sha256:aa"
        ]));
        assert!(!from(&[]));
        assert!(!from(&["ghcr.io/poseidon/kubelet@sha256:aa"]));
    }

    #[test]
    fn an_image_is_counted_where_it_came_from() {
        let mut k = kubelet("quay.io/poseidon/kubelet:v1.36.1");
        let source = |i: &ImageSeen| sources(std::slice::from_ref(i), None)[0].source;
        assert_eq!(source(&k), "missing");
        k.present = Err("containerd is not running".into());
        assert_eq!(source(&k), "unknown");
        k.pullable = Some(Pullable::From("https://quay.io/v2".into()));
        assert_eq!(source(&k), "pullable");
        k.present = Ok(true);
        assert_eq!(source(&k), "pulled");
        // Recorded only under a mirror's repository (a pull before the daemon's restart): the mirror.
        let mut at_mirror = k.clone();
        at_mirror.held_from_mirror = true;
        assert_eq!(source(&at_mirror), "mirror");
        k.alternatives = vec!["docker.io/psdn/kubelet:v1.36.1".into()];
        k.mirrored = vec!["127.0.0.1:5000/poseidon/kubelet:v1.36.1".into()];
        let by = |pulled: &str| sources(std::slice::from_ref(&k), Some(pulled))[0].source;
        assert_eq!(
            by("quay.io/poseidon/kubelet:v1.36.1"),
            "registry",
            "nodeward pulled the image itself"
        );
        assert_eq!(
            by("docker.io/psdn/kubelet:v1.36.1"),
            "mirror",
            "a kubelet.mirrors entry served it"
        );
        assert_eq!(
            by("127.0.0.1:5000/poseidon/kubelet:v1.36.1"),
            "mirror",
            "a [[containerd.mirrors]] entry served it"
        );
        assert_eq!(
            by("quay.io/poseidon/kubelet:v1.35.0"),
            "pulled",
            "an older pull says nothing of this one"
        );
        k.shipped = Some("/usr/share/nodeward/images/kubelet.tar".into());
        assert_eq!(
            source(&k),
            "shipped",
            "imported from the archive, though the engine has it now"
        );
    }

    #[test]
    fn a_pod_manifests_images_are_read_in_yaml_and_json() {
        let yaml = "spec:\n  containers:\n  - name: apiserver\n    image: quay.io/poseidon/kube-apiserver:v1.36.1\n    command: [x]\n  - image: \"registry.k8s.io/etcd:3.6\"\n    name: etcd\n  # image: not-this\n";
        assert_eq!(
            manifest_images(yaml),
            vec![
                "quay.io/poseidon/kube-apiserver:v1.36.1",
                "registry.k8s.io/etcd:3.6"
            ]
        );
        let json = r#"{"spec":{"containers":[{"name":"x",
  "image": "quay.io/a/b@sha256:00",
  "imagePullPolicy": "IfNotPresent"}]}}"#;
        assert_eq!(manifest_images(json), vec!["quay.io/a/b@sha256:00"]);
    }
}
