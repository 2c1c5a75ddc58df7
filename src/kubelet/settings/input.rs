//! The `[kubelet]` section: which image runs the kubelet, through which runtime, and how it is
//! supervised.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::rules::{self, KubeletVersion, VersionSource};
use crate::types::AbsPath;

pub(crate) use crate::types::ImageRef;

/// Which engine runs the kubelet container: `auto` or an engine's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum RuntimeChoice {
    /// The first engine of the registry the host has (podman, else docker, else rkt).
    #[default]
    Auto,
    Engine(crate::types::EngineKind),
}

impl Serialize for RuntimeChoice {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            RuntimeChoice::Auto => s.serialize_str("auto"),
            RuntimeChoice::Engine(kind) => kind.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for RuntimeChoice {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        if name == "auto" {
            return Ok(RuntimeChoice::Auto);
        }
        crate::types::EngineKind::deserialize(serde::de::value::StrDeserializer::<D::Error>::new(&name))
            .map(RuntimeChoice::Engine)
            .map_err(|e: D::Error| serde::de::Error::custom(format!("{e}, or `auto`")))
    }
}

/// What happens to the kubelet when nodeward itself is stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub(crate) enum OnAgentStop {
    /// Stop it gracefully, except when systemd is restarting nodeward (the next instance adopts it).
    #[default]
    Stop,
    /// Always leave it running (agent upgrades by stop + start).
    Leave,
}

/// Whether nodeward writes the kubelet's own configuration file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RenderConfig {
    /// Write it unless a file not written by nodeward is already there (Ignition's, the bundle's).
    #[default]
    Auto,
    /// Always write it (replacing any other).
    Always,
    /// Never write it; the file must be provided.
    Never,
}

/// An extra bind mount into the kubelet container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MountInput {
    pub(crate) source: AbsPath,
    /// Default: the same path as `source`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) target: Option<AbsPath>,
    #[serde(default)]
    pub(crate) read_only: bool,
}

/// The kubelet and its supervision.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KubeletInput {
    /// `false`: nodeward leaves the kubelet alone (another unit runs it).
    pub(crate) enabled: bool,
    /// The kubelet's release (`v1.36.1`), for the rules that change between releases (removed
    /// flags, `--config-dir`, `--cloud-provider`). Unset: the image's tag when it is a version,
    /// else the newest release nodeward knows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) version: Option<KubeletVersion>,
    /// The engine that runs the kubelet: `auto` (podman, else docker, else rkt: the first in `PATH`), `podman`, `docker` or `rkt`.
    pub(crate) runtime: RuntimeChoice,
    /// The kubelet image, pinned by digest (`…@sha256:…`). Unset: the kubelet is not managed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageRef>,
    /// Tried in order when pulling `image` fails (same pinning rule); each preceded by its
    /// registry's `[[containerd.mirrors]]`.
    pub(crate) mirrors: Vec<ImageRef>,
    /// Accept references without a digest (a tag can move under you: opt in explicitly).
    pub(crate) allow_tag: bool,
    /// The container's name.
    pub name: String,
    /// More kubelet flags (`--name=value`), after nodeward's; checked against the kubelet's release (docs/kubelet.md).
    pub(crate) extra_args: Vec<String>,
    /// More bind mounts (`{ source, target, read_only }`); one at a default's target replaces it.
    pub(crate) extra_mounts: Vec<MountInput>,
    /// The KubeletConfiguration file passed as `--config`.
    pub(crate) config_file: AbsPath,
    /// The KubeletConfiguration drop-in directory (`--config-dir`, kubelet 1.30 and later) where
    /// nodeward enables /healthz when a `config_file` it did not write disables it (Typhoon's
    /// `healthzPort: 0`), leaving that file as it is.
    pub(crate) config_dir: AbsPath,
    /// `auto`: write `config_file` unless another program's file is there; `always`; `never` (the file must be provided).
    pub(crate) render_config: RenderConfig,
    /// `clusterDNS` of the KubeletConfiguration nodeward writes (Typhoon: the tenth address of the service CIDR).
    pub(crate) cluster_dns: Vec<IpAddr>,
    /// `clusterDomain` of the KubeletConfiguration nodeward writes.
    pub(crate) cluster_domain: String,
    /// Serve the kubelet's /healthz on 127.0.0.1:10248 and use it for supervision.
    pub(crate) healthz: bool,
    /// Seconds the kubelet gets to stop (its shutdownGracePeriod) before it is killed.
    pub(crate) stop_timeout_seconds: u64,
    /// `stop`: stop the kubelet when nodeward is stopped (not when systemd restarts it); `leave`: never.
    pub(crate) on_agent_stop: OnAgentStop,
    /// Restart backoff: the first restart is immediate, then 1 s, 2 s, 4 s … up to this.
    pub(crate) restart_max_delay_seconds: u64,
    /// A kubelet that stayed healthy this long resets the backoff.
    pub(crate) healthy_reset_seconds: u64,
    /// Seconds between health probes.
    pub(crate) health_interval_seconds: u64,
    /// Consecutive failed probes (after the startup grace) that make nodeward restart the kubelet
    /// (a row of timeouts only: and two minutes of them).
    pub(crate) unhealthy_threshold: u32,
    /// Seconds after a start during which failed probes do not count.
    pub(crate) startup_grace_seconds: u64,
    /// Roll a new kubelet spec back to the last healthy one when it is not healthy within
    /// `rollback_grace_seconds` of its start (docs/fleet.md).
    pub(crate) rollback: bool,
    /// Seconds a new spec has, from the end of its image pull, to be healthy (/healthz, or running
    /// that long where health is off). Unset: `startup_grace_seconds`; never less than it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) rollback_grace_seconds: Option<u64>,
    /// rkt only: where the pod's uuid is saved.
    pub(crate) rkt_uuid_file: AbsPath,
    /// The 0.1 name of `node.provider_id`, still read (the configuration moves it there).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) provider_id: Option<String>,
    /// `--cloud-provider` (e.g. `external`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) cloud_provider: Option<String>,
    /// The 0.1 name of `node.name_from`, still read (the configuration moves it there).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) node_name_from: Option<String>,
    /// The 0.1 name of `node.metadata_file`, still read (the configuration moves it there).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) metadata_file: Option<AbsPath>,
    /// Start the kubelet only once `/etc/resolv.conf` names a nameserver (Typhoon's
    /// `wait-for-dns.service`).
    pub(crate) wait_for_dns: bool,
}

impl Default for KubeletInput {
    fn default() -> Self {
        KubeletInput {
            enabled: true,
            version: None,
            runtime: RuntimeChoice::Auto,
            image: None,
            mirrors: Vec::new(),
            allow_tag: false,
            name: "kubelet".into(),
            extra_args: Vec::new(),
            extra_mounts: Vec::new(),
            config_file: crate::abs_path!("/etc/kubernetes/kubelet.yaml"),
            config_dir: crate::abs_path!("/etc/kubernetes/kubelet.conf.d"),
            render_config: RenderConfig::Auto,
            // Typhoon's default service CIDR is 10.3.0.0/16; CoreDNS gets its tenth address.
            cluster_dns: vec![IpAddr::from([10, 3, 0, 10])],
            cluster_domain: "cluster.local".into(),
            healthz: true,
            stop_timeout_seconds: 45,
            on_agent_stop: OnAgentStop::Stop,
            restart_max_delay_seconds: 60,
            healthy_reset_seconds: 120,
            health_interval_seconds: 10,
            unhealthy_threshold: 3,
            startup_grace_seconds: 120,
            rollback: true,
            rollback_grace_seconds: None,
            rkt_uuid_file: crate::abs_path!("/var/cache/kubelet-pod.uuid"),
            provider_id: None,
            cloud_provider: None,
            node_name_from: None,
            metadata_file: None,
            wait_for_dns: true,
        }
    }
}

impl KubeletInput {
    /// The release the kubelet's rules are applied for, and where that came from.
    pub(crate) fn effective_version(&self) -> (KubeletVersion, VersionSource) {
        rules::effective_version(self.version, self.image.as_ref().and_then(ImageRef::tag))
    }
}

/// The longest duration any setting may name, in seconds (a day).
pub(crate) const MAX_SECONDS: u64 = 86_400;

pub(crate) fn is_domain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
}
