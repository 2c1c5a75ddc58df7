//! What the kubelet container must be: image candidates, mounts and arguments, decided from the
//! settings and a few host facts. Pure data: the runtimes turn it into command lines.

use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;

pub(crate) use crate::kubelet::container::CALICO_DIR;
pub use crate::kubelet::container::{KubeletSpec, Mount};
pub use crate::kubelet::pull_source::{PullSource, Transport};
pub use crate::kubelet::runtime::default_mounts;
use crate::kubelet::settings::KubeletSettings;
use crate::kubelet::settings::owned::Owned;
pub use crate::registration::Registration;
pub use crate::registration::metadata::parse_metadata;
use crate::registration::route::{Route, Routed};
use crate::registration::{Seen, Unresolved};

/// The kubelet as it must run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Desired {
    pub spec: KubeletSpec,
    pub hash: String,
    /// `host:port` of /healthz, when the kubelet's configuration serves it.
    pub healthz: Option<(String, u16)>,
    /// Where the image is pulled from, in order, when `[[containerd.mirrors]]` serve it too (see
    /// `kubelet::pull_source`); empty: the spec's images alone. Not in the hash: a mirror
    /// list that changes never restarts a kubelet that runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pull_from: Vec<PullSource>,
}

/// Host facts the spec depends on.
#[derive(Debug, Clone, Default)]
pub struct HostFacts {
    /// The node name when `node.hostname` is not set.
    pub hostname: String,
    /// The kernel has SELinux enabled (`/sys/fs/selinux` exists).
    pub selinux: bool,
    /// Cloud metadata (afterburn's `KEY=value` file) and where it was read; `None`: no file yet.
    pub metadata: Option<(String, BTreeMap<String, String>)>,
    /// The metadata file is there but cannot be read (a FIFO, a directory, not text, too large).
    pub metadata_error: Option<String>,
    /// Whether `/etc/resolv.conf` names a nameserver; `None`: not checked (`kubelet.wait_for_dns`
    /// off, or an image root without the file).
    pub dns_ready: Option<bool>,
    /// Whether a kubeconfig the kubelet can start with exists (the bootstrap one, or the one it
    /// wrote itself); `None`: not checked (the container is not started by this run).
    pub kubeconfig_ready: Option<bool>,
    /// Whether the container runtime's socket exists; `None`: not checked.
    pub runtime_ready: Option<bool>,
    /// `--config-dir`: the KubeletConfiguration drop-in directory, when nodeward's healthz drop-in
    /// is in it (the kubelet's own file, not nodeward's, disables /healthz).
    pub config_dir: Option<String>,
    /// The KubeletConfiguration is nodeward's and carries the taints (`registerWithTaints`) and the
    /// runtime's endpoint (`containerRuntimeEndpoint`): the kubelet reads them there, without the
    /// deprecated flags. Otherwise (someone else's file) they are flags.
    pub registration_in_config: bool,
}

/// Why no spec can be made yet. Each is a wait, retried, as Typhoon's units wait on their
/// dependencies.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SpecError {
    /// The node's name or provider id (`registration`).
    #[error(transparent)]
    Identity(#[from] Unresolved),
    #[error("waiting for DNS: /etc/resolv.conf names no nameserver yet")]
    NoDns,
    #[error(
        "waiting for the kubeconfig: {BOOTSTRAP_KUBECONFIG} does not exist yet (Ignition or an SSH copy delivers it)"
    )]
    NoKubeconfig,
    #[error("waiting for the container runtime: {0} is not a socket yet (not started?)")]
    NoRuntime(String),
}

/// The kubeconfig the kubelet bootstraps from (Typhoon delivers it).
pub(crate) const BOOTSTRAP_KUBECONFIG: &str = "/etc/kubernetes/kubeconfig";
/// The kubeconfig the kubelet writes once bootstrapped: with it, the bootstrap one is not needed.
pub(crate) const KUBELET_KUBECONFIG: &str = "/var/lib/kubelet/kubeconfig";
/// The CRI socket the kubelet talks to by default (`--container-runtime-endpoint`).
pub(crate) const RUNTIME_SOCKET: &str = "/run/containerd/containerd.sock";

/// The socket the kubelet will dial: containerd's, unless `kubelet.extra_args` names another
/// endpoint (the kubelet takes the last one given, and extra args come after nodeward's). `None`
/// for an endpoint that is not a unix socket: nothing on this host to wait for.
pub fn runtime_socket(extra_args: &[String]) -> Option<String> {
    const FLAG: &str = "--container-runtime-endpoint";
    let mut endpoint = format!("unix://{RUNTIME_SOCKET}");
    let mut args = extra_args.iter();
    while let Some(a) = args.next() {
        if let Some(v) = a.strip_prefix(FLAG).and_then(|r| r.strip_prefix('=')) {
            endpoint = v.to_owned();
        } else if a == FLAG {
            if let Some(v) = args.next() {
                endpoint = v.clone();
            }
        }
    }
    endpoint.strip_prefix("unix://").map(str::to_owned)
}

impl Desired {
    /// Where to pull the image from, in order: [`Desired::pull_from`], or the spec's images.
    pub fn pull_sources(&self) -> Vec<PullSource> {
        if !self.pull_from.is_empty() {
            return self.pull_from.clone();
        }
        self.spec
            .images
            .iter()
            .map(|i| PullSource {
                reference: i.clone(),
                transport: Transport::Https,
                mirror: None,
            })
            .collect()
    }

    /// A spec read back (the rollout record) checked as a configured one is: its hash is its own,
    /// its name a container name, its images image references, every mount an absolute path
    /// podman's `-v` can carry, relabelled (`z`) or `rshared` only where a default mount is (a
    /// configured extra mount never is: a record asking to relabel `/` is refused), and every
    /// argument a flag.
    pub fn check(&self) -> Result<(), RefusedSpec> {
        self.refusal().map_err(RefusedSpec)
    }

    fn refusal(&self) -> Result<(), String> {
        let spec = &self.spec;
        if spec.hash() != self.hash {
            return Err(format!("hash {} is not its spec's ({})", self.hash, spec.hash()));
        }
        let name_ok = !spec.name.is_empty()
            && spec.name.len() <= 63
            && spec
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
        if !name_ok {
            return Err(format!("{:?} is not a container name", spec.name));
        }
        if spec.images.is_empty() {
            return Err("no image".into());
        }
        for image in spec
            .images
            .iter()
            .chain(self.pull_from.iter().map(|s| &s.reference))
        {
            image
                .parse::<crate::kubelet::settings::input::ImageRef>()
                .map_err(|e| format!("image {image:?}: {e}"))?;
        }
        for s in &self.pull_from {
            if let Transport::Ca(ca) = &s.transport {
                ca.parse::<crate::types::AbsPath>()
                    .map_err(|e| format!("the CA of {:?}: {e}", s.reference))?;
            }
        }
        let defaults = default_mounts();
        for m in &spec.mounts {
            for p in [&m.source, &m.target] {
                let ok = p.starts_with('/')
                    && !p.contains([':', ','])
                    && !p.split('/').any(|seg| seg == "..")
                    && !p.chars().any(char::is_control);
                if !ok {
                    return Err(format!(
                        "mount {p:?} is not an absolute path a bind mount can carry"
                    ));
                }
            }
            let default = defaults
                .iter()
                .any(|d| d.source == m.source && d.target == m.target);
            if (m.relabel || m.rshared || m.selinux) && !default {
                return Err(format!(
                    "mount {}:{} asks for relabelling or shared propagation, which only nodeward's default mounts have",
                    m.source, m.target
                ));
            }
        }
        for a in &spec.args {
            if !a.starts_with("--") || a.chars().any(char::is_control) {
                return Err(format!("argument {:?} is not a flag", crate::text::printable(a)));
            }
        }
        Ok(())
    }
}

/// Why a spec read back is not run: the rule of a configured spec it breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RefusedSpec(String);

/// Directories Typhoon creates before the kubelet starts (`mkdir -p`), beyond the mount sources.
pub(crate) const PREPARE_DIRS: &[&str] = &["/etc/kubernetes/manifests", "/var/lib/kubelet/volumeplugins"];

/// Builds the spec. `config_sha256` is the digest of the KubeletConfiguration the kubelet will read.
pub fn build(
    k: &KubeletSettings,
    reg: &Registration,
    facts: &HostFacts,
    config_sha256: String,
) -> Result<KubeletSpec, SpecError> {
    // What the kubelet itself needs before it can start, in the order a person fixes them.
    if facts.kubeconfig_ready == Some(false) {
        return Err(SpecError::NoKubeconfig);
    }
    if facts.runtime_ready == Some(false) {
        return Err(SpecError::NoRuntime(
            runtime_socket(&k.extra_args).unwrap_or_default(),
        ));
    }
    if facts.dns_ready == Some(false) {
        return Err(SpecError::NoDns);
    }
    let resolved = reg.resolve(Seen {
        hostname: &facts.hostname,
        metadata: facts.metadata.as_ref(),
        metadata_error: facts.metadata_error.as_deref(),
    })?;
    let route = if facts.registration_in_config {
        Route::ConfigFile
    } else {
        Route::Flags
    };
    let args = args(k, reg.route(&resolved, route), facts);
    let images = k
        .image
        .iter()
        .chain(k.mirrors.iter())
        .map(|i| i.to_string())
        .collect();
    Ok(KubeletSpec {
        name: k.name.clone(),
        images,
        mounts: mounts(k, facts),
        args,
        config_sha256,
    })
}

/// The kubelet's flags, as Typhoon's unit passes them, with the registration's (`registration`
/// routes them: labels and taints are one flag each), then the extra flags.
fn args(k: &KubeletSettings, node: Routed, facts: &HostFacts) -> Vec<String> {
    let mut args = vec![
        Owned::BootstrapKubeconfig.arg(BOOTSTRAP_KUBECONFIG),
        Owned::Config.arg(&k.config_file),
    ];
    if let Some(dir) = &facts.config_dir {
        args.push(Owned::ConfigDir.arg(dir));
    }
    if !facts.registration_in_config {
        args.push(format!("--container-runtime-endpoint=unix://{RUNTIME_SOCKET}"));
    }
    args.extend([node.name, Owned::Kubeconfig.arg(KUBELET_KUBECONFIG)]);
    if let Some(cloud) = &k.cloud_provider {
        args.push(Owned::CloudProvider.arg(cloud));
    }
    args.extend(node.flags);
    args.extend(k.extra_args.iter().cloned());
    args
}

/// Typhoon's mounts for this host (SELinux's only where it is on, Calico's only where Calico may
/// run), with the extra mounts replacing defaults at the same target.
fn mounts(k: &KubeletSettings, facts: &HostFacts) -> Vec<Mount> {
    let mut mounts = default_mounts();
    mounts.retain(|m| facts.selinux || !m.selinux);
    mounts.retain(|m| m.source != CALICO_DIR || k.calico_state);
    for m in &k.extra_mounts {
        let mut mount = Mount::new(m.source.as_str());
        if let Some(t) = &m.target {
            mount = mount.at(t.as_str());
        }
        if m.read_only {
            mount = mount.ro();
        }
        // An extra mount replaces a default one at the same target.
        mounts.retain(|d| d.target != mount.target);
        mounts.push(mount);
    }
    mounts
}
