//! The `[kubelet]` section validated into [`KubeletSettings`]: images pinned, names and flags as
//! the kubelet's release takes them, timings as bounded durations, the release resolved.

use std::net::IpAddr;
use std::time::Duration;

pub(crate) mod input;
pub(crate) mod owned;
pub(crate) mod rules;

use crate::setting::KeyError;
use crate::types::AbsPath;
use input::{
    ImageRef, KubeletInput, MAX_SECONDS, MountInput, OnAgentStop, RenderConfig, RuntimeChoice, is_domain,
    template_vars,
};
use rules::{KubeletVersion, VersionSource};

/// The kubelet's validated settings. Field meanings are those of `[kubelet]` (docs/configuration.md).
#[derive(Debug, Clone)]
pub struct KubeletSettings {
    pub(crate) enabled: bool,
    /// The release the kubelet's flag and config rules are applied for, and where it came from.
    pub(crate) version: (KubeletVersion, VersionSource),
    pub(crate) runtime: RuntimeChoice,
    /// Pinned by digest unless `allow_tag`.
    pub image: Option<ImageRef>,
    pub(crate) mirrors: Vec<ImageRef>,
    pub name: String,
    pub(crate) extra_args: Vec<String>,
    pub(crate) extra_mounts: Vec<MountInput>,
    pub(crate) config_file: AbsPath,
    pub(crate) config_dir: AbsPath,
    pub(crate) render_config: RenderConfig,
    pub(crate) cluster_dns: Vec<IpAddr>,
    pub(crate) cluster_domain: String,
    pub(crate) healthz: bool,
    pub(crate) on_agent_stop: OnAgentStop,
    pub(crate) rkt_uuid_file: AbsPath,
    pub(crate) provider_id: Option<String>,
    pub(crate) cloud_provider: Option<String>,
    pub(crate) node_name_from: Option<String>,
    pub(crate) metadata_file: Option<AbsPath>,
    pub(crate) wait_for_dns: bool,
    pub(crate) tuning: Tuning,
}

/// The supervisor's timings, bounded (none past a day, so `now + d` cannot overflow).
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    pub stop_grace: Duration,
    pub max_delay: Duration,
    pub healthy_reset: Duration,
    pub health_interval: Duration,
    pub unhealthy_threshold: u32,
    pub startup_grace: Duration,
    /// How long a new spec has to be healthy before it is rolled back; `None`: never rolled back.
    pub rollback_grace: Option<Duration>,
}

impl Tuning {
    fn from_input(k: &KubeletInput) -> Tuning {
        Tuning {
            stop_grace: Duration::from_secs(k.stop_timeout_seconds),
            max_delay: Duration::from_secs(k.restart_max_delay_seconds),
            healthy_reset: Duration::from_secs(k.healthy_reset_seconds),
            health_interval: Duration::from_secs(k.health_interval_seconds),
            unhealthy_threshold: k.unhealthy_threshold,
            startup_grace: Duration::from_secs(k.startup_grace_seconds),
            rollback_grace: k
                .rollback
                .then(|| Duration::from_secs(k.rollback_grace_seconds.unwrap_or(k.startup_grace_seconds))),
        }
    }
}

/// The built-in timings (`[kubelet]` left alone).
impl Default for Tuning {
    fn default() -> Tuning {
        Tuning::from_input(&KubeletInput::default())
    }
}

impl KubeletSettings {
    /// Validates `[kubelet]`; errors name the key to blame.
    pub(crate) fn from_input(k: KubeletInput) -> Result<KubeletSettings, KeyError> {
        validate(&k)?;
        Ok(KubeletSettings {
            version: k.effective_version(),
            tuning: Tuning::from_input(&k),
            enabled: k.enabled,
            runtime: k.runtime,
            image: k.image,
            mirrors: k.mirrors,
            name: k.name,
            extra_args: k.extra_args,
            extra_mounts: k.extra_mounts,
            config_file: k.config_file,
            config_dir: k.config_dir,
            render_config: k.render_config,
            cluster_dns: k.cluster_dns,
            cluster_domain: k.cluster_domain,
            healthz: k.healthz,
            on_agent_stop: k.on_agent_stop,
            rkt_uuid_file: k.rkt_uuid_file,
            provider_id: k.provider_id,
            cloud_provider: k.cloud_provider,
            node_name_from: k.node_name_from,
            metadata_file: k.metadata_file,
            wait_for_dns: k.wait_for_dns,
        })
    }

    /// The release the kubelet's rules are applied for, and where that came from.
    pub(crate) fn effective_version(&self) -> (KubeletVersion, VersionSource) {
        self.version
    }
}

/// Checks what serde cannot: pinning, names, argument shapes, timings.
fn validate(k: &KubeletInput) -> Result<(), KeyError> {
    validate_images(k)?;
    validate_container(k)?;
    validate_cloud(k)?;
    validate_timings(k)
}

type Problem = KeyError;

/// Images pinned by digest (unless tags are allowed); mirrors only with an image.
fn validate_images(k: &KubeletInput) -> Result<(), Problem> {
    for (key, image) in k
        .image
        .iter()
        .map(|i| ("kubelet.image", i))
        .chain(k.mirrors.iter().map(|i| ("kubelet.mirrors", i)))
    {
        if image.digest().is_none() && !k.allow_tag {
            return Err(problem(
                key,
                format!(
                    "{image} is not pinned by digest; use {}@sha256:<digest>, or set kubelet.allow_tag = true",
                    image.repository()
                ),
            ));
        }
    }
    if !k.mirrors.is_empty() && k.image.is_none() {
        return Err(problem("kubelet.mirrors", "mirrors need kubelet.image"));
    }
    Ok(())
}

/// The container's name, flags, cluster DNS and bind mounts.
fn validate_container(k: &KubeletInput) -> Result<(), Problem> {
    let name_ok = !k.name.is_empty()
        && k.name.len() <= 64
        && k.name.as_bytes()[0].is_ascii_alphanumeric()
        && k.name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
    if !name_ok {
        return Err(problem(
            "kubelet.name",
            format!("{:?} is not a container name", k.name),
        ));
    }
    for arg in &k.extra_args {
        if !arg.starts_with("--") || arg.chars().any(char::is_control) {
            return Err(problem(
                "kubelet.extra_args",
                format!("{arg:?} is not a kubelet flag (--name=value)"),
            ));
        }
    }
    let (version, source) = k.effective_version();
    rules::check_extra_args(&k.extra_args, version, source).map_err(|m| problem("kubelet.extra_args", m))?;
    if k.cluster_dns.is_empty() {
        return Err(problem("kubelet.cluster_dns", "at least one address is needed"));
    }
    if !is_domain(&k.cluster_domain) {
        return Err(problem(
            "kubelet.cluster_domain",
            format!("{:?} is not a DNS domain", k.cluster_domain),
        ));
    }
    for m in &k.extra_mounts {
        // podman and docker read `-v SRC:DST:OPTS` split at `:` and options at `,`.
        for (what, p) in [("source", Some(&m.source)), ("target", m.target.as_ref())] {
            if let Some(p) = p.filter(|p| p.as_str().contains([':', ','])) {
                return Err(problem(
                    "kubelet.extra_mounts",
                    format!("{what} {p}: ':' and ',' cannot appear in a bind mount path (-v SRC:DST:OPTS)"),
                ));
            }
        }
    }
    Ok(())
}

/// Cloud settings: provider ID template, cloud provider name, node name variable.
fn validate_cloud(k: &KubeletInput) -> Result<(), Problem> {
    if let Some(t) = &k.provider_id {
        if t.is_empty() || t.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(problem(
                "kubelet.provider_id",
                format!("{t:?} is not a provider ID"),
            ));
        }
        template_vars(t).map_err(|e| problem("kubelet.provider_id", e.to_string()))?;
    }
    if let Some(c) = &k.cloud_provider {
        if c.is_empty() || !c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
            return Err(problem(
                "kubelet.cloud_provider",
                format!("{c:?} is not a cloud provider name"),
            ));
        }
        let (version, source) = k.effective_version();
        rules::check_cloud_provider(c, version, source).map_err(|m| problem("kubelet.cloud_provider", m))?;
    }
    if let Some(v) = &k.node_name_from {
        template_vars(&format!("${{{v}}}")).map_err(|e| problem("kubelet.node_name_from", e.to_string()))?;
    }
    Ok(())
}

/// Durations become deadlines (`now + d`): bounded so that none can overflow; the supervisor's
/// loop needs positive delays and thresholds.
fn validate_timings(k: &KubeletInput) -> Result<(), Problem> {
    for (value, key) in [
        (k.stop_timeout_seconds, "kubelet.stop_timeout_seconds"),
        (k.restart_max_delay_seconds, "kubelet.restart_max_delay_seconds"),
        (k.healthy_reset_seconds, "kubelet.healthy_reset_seconds"),
        (k.health_interval_seconds, "kubelet.health_interval_seconds"),
        (k.startup_grace_seconds, "kubelet.startup_grace_seconds"),
    ] {
        if value > MAX_SECONDS {
            return Err(problem(
                key,
                format!("{value} is more than {MAX_SECONDS} (a day)"),
            ));
        }
    }
    if let Some(g) = k.rollback_grace_seconds {
        if g > MAX_SECONDS {
            return Err(problem(
                "kubelet.rollback_grace_seconds",
                format!("{g} is more than {MAX_SECONDS} (a day)"),
            ));
        }
        // A kubelet still inside its start-up grace is not judged yet: a rollback before the
        // grace ends would undo a spec the supervisor still considers starting.
        if g < k.startup_grace_seconds {
            return Err(problem(
                "kubelet.rollback_grace_seconds",
                format!(
                    "{g} is less than kubelet.startup_grace_seconds ({}): a new kubelet would be rolled back while still in its start-up grace",
                    k.startup_grace_seconds
                ),
            ));
        }
    }
    for (value, key) in [
        (k.restart_max_delay_seconds, "kubelet.restart_max_delay_seconds"),
        (k.health_interval_seconds, "kubelet.health_interval_seconds"),
        (u64::from(k.unhealthy_threshold), "kubelet.unhealthy_threshold"),
    ] {
        if value == 0 {
            return Err(problem(key, "must be positive"));
        }
    }
    Ok(())
}

fn problem(key: &str, message: impl Into<String>) -> KeyError {
    KeyError::new(key, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn tags_need_an_explicit_opt_in() {
        let mut k = KubeletInput {
            image: Some("quay.io/poseidon/kubelet:v1.34.1".parse().expect("image")),
            ..KubeletInput::default()
        };
        let KeyError { key, message: msg } = validate(&k).expect_err("tag refused");
        assert_eq!(key, "kubelet.image");
        assert!(msg.contains("quay.io/poseidon/kubelet@sha256:<digest>"), "{msg}");
        k.allow_tag = true;
        assert!(validate(&k).is_ok());
        k.mirrors = vec!["docker.io/psdn/kubelet:v1.34.1".parse().expect("mirror")];
        assert!(validate(&k).is_ok());
        k.allow_tag = false;
        k.image = Some(
            format!("quay.io/poseidon/kubelet@{DIGEST}")
                .parse()
                .expect("image"),
        );
        assert_eq!(
            validate(&k).expect_err("mirror tag refused").key,
            "kubelet.mirrors"
        );
    }

    #[test]
    fn names_and_flags_are_checked() {
        let k = KubeletInput {
            name: "kube let".into(),
            ..KubeletInput::default()
        };
        assert_eq!(validate(&k).expect_err("name").key, "kubelet.name");
        let k = KubeletInput {
            extra_args: vec!["-v=2".into()],
            ..KubeletInput::default()
        };
        assert_eq!(validate(&k).expect_err("flag").key, "kubelet.extra_args");
        let k = KubeletInput {
            cluster_domain: "Cluster.Local".into(),
            ..KubeletInput::default()
        };
        assert_eq!(validate(&k).expect_err("domain").key, "kubelet.cluster_domain");
    }
}
