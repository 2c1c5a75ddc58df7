//! The `[kubelet]` section validated into [`KubeletSettings`]: images pinned, names and flags as
//! the kubelet's release takes them, timings as bounded durations, the release resolved.

use std::time::Duration;

pub(crate) mod input;
pub(crate) mod owned;
pub(crate) mod rules;

use crate::setting::KeyError;
use input::{KubeletInput, MAX_SECONDS, is_domain};
use rules::{KubeletVersion, VersionSource};

/// The kubelet's validated settings: `[kubelet]` as configured, every check of [`validate`] passed
/// (its fields, declared once in [`KubeletInput`], are read through `Deref`), and what is derived
/// from it: the release the rules apply for and the supervisor's timings as durations. Field
/// meanings are those of `[kubelet]` (docs/configuration.md).
#[derive(Debug, Clone)]
pub struct KubeletSettings {
    /// Only [`KubeletSettings::from_input`] makes one, so every `KubeletSettings` was checked.
    checked: KubeletInput,
    /// The release the kubelet's flag and config rules are applied for, and where it came from.
    release: (KubeletVersion, VersionSource),
    pub(crate) tuning: Tuning,
    /// `/var/lib/calico` is mounted: the node's CNI may be Calico (`node.cni`, `config::cni`).
    pub(crate) calico_state: bool,
}

impl std::ops::Deref for KubeletSettings {
    type Target = KubeletInput;
    fn deref(&self) -> &KubeletInput {
        &self.checked
    }
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
    /// Validates `[kubelet]`; errors name the key to blame. `calico_state`: whether the CNI may be
    /// Calico (its state directory is mounted).
    pub(crate) fn from_input(k: KubeletInput, calico_state: bool) -> Result<KubeletSettings, KeyError> {
        validate(&k)?;
        Ok(KubeletSettings {
            release: k.effective_version(),
            tuning: Tuning::from_input(&k),
            checked: k,
            calico_state,
        })
    }

    /// The release the kubelet's rules are applied for, and where that came from.
    pub(crate) fn effective_version(&self) -> (KubeletVersion, VersionSource) {
        self.release
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
    rules::check_extra_args(&k.extra_args, version, source)
        .map_err(|m| problem("kubelet.extra_args", m.to_string()))?;
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

/// The cloud provider's name, as the kubelet's release takes it.
fn validate_cloud(k: &KubeletInput) -> Result<(), Problem> {
    if let Some(c) = &k.cloud_provider {
        if c.is_empty() || !c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
            return Err(problem(
                "kubelet.cloud_provider",
                format!("{c:?} is not a cloud provider name"),
            ));
        }
        let (version, source) = k.effective_version();
        rules::check_cloud_provider(c, version, source)
            .map_err(|m| problem("kubelet.cloud_provider", m.to_string()))?;
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
