//! The kubelet's own rules for what nodeward passes it, as the kubelet's source has them (each
//! rule's origin is in `docs/kubelet.md`): which flags exist in which version, which replace and
//! which merge, the taint and label rules, and what `--cloud-provider` may say. Checked when the
//! configuration is loaded, so a value the real kubelet refuses never reaches a node.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use super::owned::Owned;
use crate::types::Invalid;

/// A kubelet release, `major.minor` (the patch never changes a flag).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct KubeletVersion {
    pub(crate) major: u32,
    pub(crate) minor: u32,
}

impl KubeletVersion {
    pub(crate) const fn new(major: u32, minor: u32) -> KubeletVersion {
        KubeletVersion { major, minor }
    }
}

impl FromStr for KubeletVersion {
    type Err = Invalid;
    /// `v1.36.1`, `1.36`, `v1.36.0-rc.1`: the major and minor numbers (the whole text checked).
    fn from_str(s: &str) -> Result<Self, Invalid> {
        let bad = || Invalid(format!("{s:?} is not a kubelet version such as \"v1.36.1\""));
        let body = s.strip_prefix('v').unwrap_or(s);
        let (numbers, suffix) = match body.find(['-', '+']) {
            Some(i) => (&body[..i], &body[i + 1..]),
            None => (body, ""),
        };
        if !suffix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-+".contains(&b))
            || (body.len() != numbers.len() && suffix.is_empty())
        {
            return Err(bad());
        }
        let parts: Vec<&str> = numbers.split('.').collect();
        if !(2..=3).contains(&parts.len())
            || parts
                .iter()
                .any(|p| p.is_empty() || p.len() > 4 || !p.bytes().all(|b| b.is_ascii_digit()))
        {
            return Err(bad());
        }
        let number = |p: &str| p.parse::<u32>().map_err(|_| bad());
        let (major, minor) = (number(parts[0])?, number(parts[1])?);
        if major != 1 {
            return Err(bad());
        }
        Ok(KubeletVersion { major, minor })
    }
}

impl fmt::Display for KubeletVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl serde::Serialize for KubeletVersion {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for KubeletVersion {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The newest release whose flags this table was read from. A newer kubelet may have flags the
/// table does not know: those are let through with a warning, never refused.
pub(crate) const NEWEST_KNOWN: KubeletVersion = KubeletVersion::new(1, 36);
/// `--config-dir` without a feature switch: beta (on by default) in 1.30, GA in 1.35. In 1.28 and
/// 1.29 it needs `KUBELET_CONFIG_DROPIN_DIR_ALPHA` in the kubelet's environment; before, the flag
/// does not exist.
pub(crate) const CONFIG_DIR_SINCE: KubeletVersion = KubeletVersion::new(1, 30);
/// From 1.31 the in-tree cloud providers are gone: only `external` (or none) starts.
pub(crate) const EXTERNAL_CLOUD_ONLY_SINCE: KubeletVersion = KubeletVersion::new(1, 31);

/// Where the version the rules use came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum VersionSource {
    /// `kubelet.version`.
    Setting,
    /// The image reference's tag (`…/kubelet:v1.36.1@sha256:…`).
    ImageTag,
    /// Neither says: the newest known release's rules (Typhoon's current kubelet).
    Assumed,
}

/// The version the rules are applied for, and where it came from: the setting, else the image's
/// tag when it is a version, else the newest known release.
pub(crate) fn effective_version(
    setting: Option<KubeletVersion>,
    image_tag: Option<&str>,
) -> (KubeletVersion, VersionSource) {
    if let Some(v) = setting {
        return (v, VersionSource::Setting);
    }
    match image_tag.and_then(|t| t.parse().ok()) {
        Some(v) => (v, VersionSource::ImageTag),
        None => (NEWEST_KNOWN, VersionSource::Assumed),
    }
}

/// Flags removed from the kubelet, with the release that removed them: from then on the kubelet
/// exits at once with "unknown flag".
pub(crate) const REMOVED: &[(&str, KubeletVersion, &str)] = &[
    (
        "--network-plugin",
        KubeletVersion::new(1, 24),
        "removed with dockershim",
    ),
    (
        "--container-runtime",
        KubeletVersion::new(1, 27),
        "every runtime is remote (CRI) now",
    ),
    (
        "--cloud-config",
        KubeletVersion::new(1, 31),
        "the in-tree cloud providers are gone; configure the external cloud controller manager",
    ),
    (
        "--keep-terminated-pod-volumes",
        KubeletVersion::new(1, 31),
        "volumes of terminated pods are always cleaned up",
    ),
    (
        "--register-schedulable",
        KubeletVersion::new(1, 34),
        "use node.taints (registerWithTaints)",
    ),
    (
        "--iptables-masquerade-bit",
        KubeletVersion::new(1, 34),
        "it had no effect",
    ),
    (
        "--iptables-drop-bit",
        KubeletVersion::new(1, 34),
        "it had no effect",
    ),
    (
        "--containerd",
        KubeletVersion::new(1, 34),
        "cAdvisor finds containerd by itself",
    ),
    (
        "--pod-infra-container-image",
        KubeletVersion::new(1, 35),
        "the runtime's own sandbox image is used (containerd: sandbox_image)",
    ),
];

/// The kubelet's flags in [`NEWEST_KNOWN`] (`cmd/kubelet/app/options/options.go`, the container
/// runtime options and the logging flags), without the removed ones.
pub(crate) const KNOWN: &[&str] = &[
    "--config",
    "--config-dir",
    "--kubeconfig",
    "--bootstrap-kubeconfig",
    "--hostname-override",
    "--node-ip",
    "--cert-dir",
    "--cloud-provider",
    "--root-dir",
    "--seccomp-default",
    "--node-labels",
    "--lock-file",
    "--exit-on-lock-contention",
    "--minimum-container-ttl-duration",
    "--maximum-dead-containers-per-container",
    "--maximum-dead-containers",
    "--experimental-mounter-path",
    "--experimental-allocatable-ignore-eviction",
    "--runtime-cgroups",
    "--image-credential-provider-config",
    "--image-credential-provider-bin-dir",
    "--enable-server",
    "--fail-swap-on",
    "--pod-manifest-path",
    "--sync-frequency",
    "--file-check-frequency",
    "--http-check-frequency",
    "--manifest-url",
    "--manifest-url-header",
    "--address",
    "--port",
    "--read-only-port",
    "--container-runtime-endpoint",
    "--image-service-endpoint",
    "--anonymous-auth",
    "--authentication-token-webhook",
    "--authentication-token-webhook-cache-ttl",
    "--client-ca-file",
    "--authorization-mode",
    "--authorization-webhook-cache-authorized-ttl",
    "--authorization-webhook-cache-unauthorized-ttl",
    "--tls-cert-file",
    "--tls-private-key-file",
    "--rotate-server-certificates",
    "--tls-cipher-suites",
    "--tls-min-version",
    "--tls-curve-preferences",
    "--rotate-certificates",
    "--registry-qps",
    "--registry-burst",
    "--event-qps",
    "--event-burst",
    "--enable-debugging-handlers",
    "--contention-profiling",
    "--healthz-port",
    "--healthz-bind-address",
    "--oom-score-adj",
    "--cluster-domain",
    "--volume-plugin-dir",
    "--cluster-dns",
    "--streaming-connection-idle-timeout",
    "--node-status-update-frequency",
    "--minimum-image-ttl-duration",
    "--image-gc-high-threshold",
    "--image-gc-low-threshold",
    "--volume-stats-agg-period",
    "--feature-gates",
    "--kubelet-cgroups",
    "--system-cgroups",
    "--provider-id",
    "--cgroups-per-qos",
    "--cgroup-driver",
    "--cgroup-root",
    "--cpu-manager-policy",
    "--cpu-manager-policy-options",
    "--cpu-manager-reconcile-period",
    "--qos-reserved",
    "--topology-manager-policy",
    "--runtime-request-timeout",
    "--hairpin-mode",
    "--max-pods",
    "--pod-cidr",
    "--pod-max-pids",
    "--resolv-conf",
    "--runonce",
    "--cpu-cfs-quota",
    "--cpu-cfs-quota-period",
    "--enable-controller-attach-detach",
    "--make-iptables-util-chains",
    "--container-log-max-size",
    "--container-log-max-files",
    "--allowed-unsafe-sysctls",
    "--node-status-max-images",
    "--kernel-memcg-notification",
    "--local-storage-capacity-isolation",
    "--max-open-files",
    "--kube-api-content-type",
    "--kube-api-qps",
    "--kube-api-burst",
    "--serialize-image-pulls",
    "--eviction-hard",
    "--eviction-soft",
    "--eviction-soft-grace-period",
    "--eviction-pressure-transition-period",
    "--eviction-max-pod-grace-period",
    "--eviction-minimum-reclaim",
    "--pods-per-core",
    "--protect-kernel-defaults",
    "--reserved-cpus",
    "--topology-manager-scope",
    "--topology-manager-policy-options",
    "--system-reserved",
    "--kube-reserved",
    "--enforce-node-allocatable",
    "--system-reserved-cgroup",
    "--kube-reserved-cgroup",
    "--logging-format",
    "--log-flush-frequency",
    "--v",
    "--vmodule",
    "--log-text-split-stream",
    "--log-text-info-buffer-size",
    "--log-json-split-stream",
    "--log-json-info-buffer-size",
    "--memory-manager-policy",
    "--reserved-memory",
    "--register-node",
    "--register-with-taints",
    "--fail-cgroupv1",
    "--version",
    "--help",
];

/// The flag's name as pflag looks it up: `--name` with `_` read as `-` (the kubelet's flag set
/// normalises word separators).
pub(crate) fn flag_name(arg: &str) -> String {
    let name = arg.split_once('=').map_or(arg, |(n, _)| n);
    format!("--{}", name.trim_start_matches('-').replace('_', "-"))
}

/// Checks `kubelet.extra_args` against the kubelet `version` runs: a removed flag is refused naming
/// the release that removed it, an unknown one (in a release this table knows) as the kubelet
/// refuses it, and a flag nodeward sets from a setting with that setting's name.
pub(crate) fn check_extra_args(
    args: &[String],
    version: KubeletVersion,
    source: VersionSource,
) -> Result<(), KubeletWouldExit> {
    extra_args_refusal(args, version, source).map_err(KubeletWouldExit)
}

/// Why the kubelet would exit at once with a setting: its flag, the release and the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct KubeletWouldExit(String);

fn extra_args_refusal(args: &[String], version: KubeletVersion, source: VersionSource) -> Result<(), String> {
    for arg in args {
        let name = flag_name(arg);
        if let Some(owned) = Owned::named(&name) {
            return Err(format!(
                "{arg:?}: nodeward passes {name} itself (the kubelet keeps only one): set {} instead",
                owned.setting()
            ));
        }
        if let Some((_, removed, instead)) = REMOVED.iter().find(|(f, ..)| *f == name) {
            if version >= *removed {
                return Err(format!(
                    "{arg:?}: {name} was removed in kubelet {removed} ({instead}); the kubelet {version} ({}) \
                     exits at once with \"unknown flag\"",
                    source_phrase(source)
                ));
            }
            continue;
        }
        if !KNOWN.contains(&name.as_str()) && version <= NEWEST_KNOWN {
            return Err(format!(
                "{arg:?}: the kubelet {version} ({}) has no flag {name} and would exit at once (\"unknown flag\")",
                source_phrase(source)
            ));
        }
    }
    Ok(())
}

fn source_phrase(source: VersionSource) -> &'static str {
    match source {
        VersionSource::Setting => "kubelet.version",
        VersionSource::ImageTag => "from the image's tag",
        VersionSource::Assumed => "assumed: set kubelet.version for another release",
    }
}

/// Checks `kubelet.cloud_provider` as the kubelet `version` starts with it.
pub(crate) fn check_cloud_provider(
    name: &str,
    version: KubeletVersion,
    source: VersionSource,
) -> Result<(), KubeletWouldExit> {
    if name == "external" {
        return Ok(());
    }
    if version >= EXTERNAL_CLOUD_ONLY_SINCE {
        return Err(KubeletWouldExit(format!(
            "{name:?}: the kubelet {version} ({}) only starts with \"external\" (in-tree cloud providers were \
             removed in {EXTERNAL_CLOUD_ONLY_SINCE}); run the provider's cloud controller manager and set \"external\", \
             or leave it unset",
            source_phrase(source)
        )));
    }
    Ok(())
}

/// From kubelet 1.36 the kubelet runs on containerd 2.2 or later only (containerd's
/// RELEASES.md: 1.x lacks the RuntimeConfig call), so version 3 is always read; before, the node
/// may run containerd 1.7, which reads version 2 only.
pub(crate) const CONTAINERD_V3_SINCE: KubeletVersion = KubeletVersion::new(1, 36);

/// The `config.toml` format every containerd the kubelet release `version` runs on reads natively.
pub(crate) fn containerd_format(version: KubeletVersion) -> crate::containerd::Format {
    if version >= CONTAINERD_V3_SINCE {
        crate::containerd::Format::V3
    } else {
        crate::containerd::Format::V2
    }
}

/// Whether the kubelet `version` reads `--config-dir` without a feature switch.
pub(crate) fn has_config_dir(version: KubeletVersion) -> bool {
    version.cmp(&CONFIG_DIR_SINCE) != Ordering::Less
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> KubeletVersion {
        s.parse().expect("version")
    }

    #[test]
    fn the_containerd_format_follows_the_containerd_the_kubelet_needs() {
        use crate::containerd::Format;
        assert_eq!(containerd_format(KubeletVersion::new(1, 35)), Format::V2);
        assert_eq!(containerd_format(KubeletVersion::new(1, 36)), Format::V3);
        assert_eq!(containerd_format(KubeletVersion::new(1, 37)), Format::V3);
    }

    #[test]
    fn versions_parse_from_tags_and_settings() {
        assert_eq!(v("v1.36.1"), KubeletVersion::new(1, 36));
        assert_eq!(v("1.30"), KubeletVersion::new(1, 30));
        assert_eq!(v("v1.35.0-rc.1"), KubeletVersion::new(1, 35));
        assert_eq!(v("v1.1000"), KubeletVersion::new(1, 1000), "four digits a part");
        // (The mutation run's finds: a dangling separator, a bad suffix character alone, five
        // digits, a separator first.)
        for bad in [
            "",
            "v",
            "latest",
            "v2.0.0",
            "1",
            "1.x",
            "v1.36.1;rm",
            "v1.36.1-",
            "v1.36.1-rc_1",
            "1.10000",
            "-1.36",
        ] {
            assert!(bad.parse::<KubeletVersion>().is_err(), "{bad:?}");
        }
        assert_eq!(
            effective_version(None, Some("v1.29.4")),
            (v("1.29"), VersionSource::ImageTag)
        );
        assert_eq!(
            effective_version(Some(v("1.31")), Some("v1.29.4")),
            (v("1.31"), VersionSource::Setting)
        );
        assert_eq!(
            effective_version(None, Some("latest")),
            (NEWEST_KNOWN, VersionSource::Assumed)
        );
        assert!(has_config_dir(v("1.30")) && !has_config_dir(v("1.29")));
    }

    #[test]
    fn removed_flags_are_refused_from_the_release_that_removed_them() {
        let args = |a: &str| vec![a.to_owned()];
        let err = check_extra_args(
            &args("--pod-infra-container-image=k8s.gcr.io/pause:3.9"),
            v("1.35"),
            VersionSource::Setting,
        )
        .expect_err("removed in 1.35");
        assert!(err.to_string().contains("removed in kubelet 1.35"), "{err}");
        assert!(
            check_extra_args(
                &args("--pod-infra-container-image=pause"),
                v("1.34"),
                VersionSource::Setting
            )
            .is_ok()
        );
        let err = check_extra_args(
            &args("--container_runtime=remote"),
            v("1.30"),
            VersionSource::Setting,
        )
        .expect_err("underscores are the same flag");
        assert!(
            err.to_string()
                .contains("--container-runtime was removed in kubelet 1.27"),
            "{err}"
        );
        let err = check_extra_args(
            &args("--keep-terminated-pod-volumes"),
            NEWEST_KNOWN,
            VersionSource::Assumed,
        )
        .expect_err("1.31");
        assert!(err.to_string().contains("assumed: set kubelet.version"), "{err}");
        let err = check_extra_args(&args("--no-such-flag=1"), v("1.36"), VersionSource::ImageTag)
            .expect_err("unknown");
        assert!(err.to_string().contains("has no flag --no-such-flag"), "{err}");
        // A release newer than the table may have flags it does not know.
        assert!(check_extra_args(&args("--no-such-flag=1"), v("1.40"), VersionSource::Setting).is_ok());
        assert!(check_extra_args(&args("--v=2"), v("1.36"), VersionSource::Setting).is_ok());
        let err = check_extra_args(
            &args("--register-with-taints=a=b:NoSchedule"),
            v("1.36"),
            VersionSource::Setting,
        )
        .expect_err("owned");
        assert!(err.to_string().contains("set node.taints instead"), "{err}");
    }

    #[test]
    fn in_tree_cloud_providers_only_before_1_31() {
        assert!(check_cloud_provider("external", v("1.36"), VersionSource::Setting).is_ok());
        let err = check_cloud_provider("aws", v("1.31"), VersionSource::ImageTag).expect_err("aws");
        assert!(err.to_string().contains("only starts with \"external\""), "{err}");
        assert!(check_cloud_provider("gce", NEWEST_KNOWN, VersionSource::Assumed).is_err());
        assert!(check_cloud_provider("aws", v("1.30"), VersionSource::Setting).is_ok());
    }
}
