//! containerd's configuration as Typhoon writes it, and the one cgroup driver the kubelet and
//! containerd must agree on.
//!
//! The kubelet's `cgroupDriver` and containerd's runc `SystemdCgroup` must name the same driver:
//! when they differ, pods are created under one hierarchy and accounted under another, and the
//! kubelet evicts or fails them. The systemd driver works on cgroup v1 and v2 alike wherever
//! systemd is PID 1, which is every host nodeward runs on, so it is the default; a containerd
//! configuration nodeward does not manage decides instead.

use std::fmt::Write;

pub(crate) mod mirrors;
pub(crate) mod settings;

/// The first line of a file nodeward wrote.
pub(crate) const MARKER: &str = "# Written by nodeward from its [containerd] configuration.";

/// Where containerd looks for each registry's `hosts.toml` (mirrors, CAs): named explicitly.
/// containerd's built-in default is `/etc/containerd/certs.d:/etc/docker/certs.d`, which 2.2's
/// pull path (the transfer service) takes as one directory, so no `hosts.toml` is ever found
/// (seen in the real cluster; docs/kubelet.md, "containerd's configuration").
pub(crate) const CERTS_DIR: &str = "/etc/containerd/certs.d";

/// The format of containerd's `config.toml`: containerd 2.x reads version 3 (and migrates 2);
/// 1.7 and 1.6 read version 2 only and refuse 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    V2,
    V3,
}

/// Facts the rendered file depends on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Facts<'a> {
    /// SELinux is enabled: the CRI plugin labels containers (Typhoon's `enable_selinux = true`).
    pub(crate) selinux: bool,
    pub(crate) format: Format,
    /// The pod sandbox (pause) image containerd pins and never garbage-collects.
    pub(crate) sandbox_image: &'a str,
}

/// Typhoon's `/etc/containerd/config.toml`, in the format the node's containerd reads, with the
/// sandbox image pinned and the `hosts.toml` directory named. Typhoon's `subreaper = true` is left
/// out: no containerd since 1.0 has the key (2.2 warns "Ignoring unknown key").
pub(crate) fn render(facts: Facts<'_>) -> String {
    let (version, runtime, images) = match facts.format {
        Format::V2 => (
            2,
            "\"io.containerd.grpc.v1.cri\"",
            "\"io.containerd.grpc.v1.cri\"",
        ),
        Format::V3 => (
            3,
            "\"io.containerd.cri.v1.runtime\"",
            "\"io.containerd.cri.v1.images\"",
        ),
    };
    let sandbox = toml::Value::String(facts.sandbox_image.to_owned());
    let certs = toml::Value::String(CERTS_DIR.to_owned());
    let mut s = String::new();
    s.push_str(MARKER);
    s.push_str("\n# Edits are overwritten; to manage this file yourself, set containerd.manage = false.\n");
    let _ = write!(
        s,
        "version = {version}\n\
         root = \"/var/lib/containerd\"\n\
         state = \"/run/containerd\"\n\
         oom_score = -999\n\
         [grpc]\n\
         address = \"/run/containerd/containerd.sock\"\n\
         uid = 0\n\
         gid = 0\n\
         [plugins.{runtime}]\n\
         enable_selinux = {selinux}\n",
        selinux = facts.selinux,
    );
    if facts.format == Format::V2 {
        let _ = writeln!(s, "sandbox_image = {sandbox}");
    }
    let _ = write!(
        s,
        "[plugins.{runtime}.containerd.runtimes.runc]\n\
         runtime_type = \"io.containerd.runc.v2\"\n\
         [plugins.{runtime}.containerd.runtimes.runc.options]\n\
         SystemdCgroup = true\n"
    );
    if facts.format == Format::V3 {
        let _ = write!(s, "[plugins.{images}.pinned_images]\nsandbox = {sandbox}\n");
    }
    let _ = write!(s, "[plugins.{images}.registry]\nconfig_path = {certs}\n");
    s
}

/// The directory a containerd configuration file names for `hosts.toml` (the CRI registry's
/// `config_path`, version 2 or 3): `Some(None)` when it names none (containerd's default, which
/// 2.2's pulls do not read; see [`CERTS_DIR`]), `None` when the text is not TOML.
pub(crate) fn config_path(config: &str) -> Option<Option<String>> {
    let table: toml::Table = config.parse().ok()?;
    fn find(t: &toml::Table) -> Option<String> {
        t.iter().find_map(|(k, v)| match (k.as_str(), v) {
            ("registry", toml::Value::Table(r)) => match r.get("config_path") {
                Some(toml::Value::String(p)) => Some(p.clone()),
                _ => find(r),
            },
            (_, toml::Value::Table(inner)) => find(inner),
            _ => None,
        })
    }
    Some(find(&table))
}

/// The cgroup driver a containerd configuration file gives runc: `Some(true)` for systemd,
/// `Some(false)` for cgroupfs (containerd's default when the key is absent), `None` when the
/// text is not TOML (the caller keeps its default and says so).
pub(crate) fn systemd_cgroup(config: &str) -> Option<bool> {
    let table: toml::Table = config.parse().ok()?;
    fn find(v: &toml::Value) -> Option<bool> {
        match v {
            toml::Value::Table(t) => t.iter().find_map(|(k, v)| match (k.as_str(), v) {
                ("SystemdCgroup", toml::Value::Boolean(b)) => Some(*b),
                _ => find(v),
            }),
            _ => None,
        }
    }
    Some(find(&toml::Value::Table(table)).unwrap_or(false))
}

/// The pod sandbox image a containerd configuration names: version 3's
/// `plugins."io.containerd.cri.v1.images".pinned_images.sandbox` or version 2's
/// `plugins."io.containerd.grpc.v1.cri".sandbox_image`; `None` when it names none (containerd's
/// default then) or does not parse.
pub(crate) fn sandbox_image(config: &str) -> Option<String> {
    let table: toml::Table = config.parse().ok()?;
    let plugins = table.get("plugins")?;
    let v3 = plugins
        .get("io.containerd.cri.v1.images")
        .and_then(|t| t.get("pinned_images"))
        .and_then(|t| t.get("sandbox"));
    let v2 = plugins
        .get("io.containerd.grpc.v1.cri")
        .and_then(|t| t.get("sandbox_image"));
    v3.or(v2)?.as_str().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The golden files are fed to the real containerd by `integration/containerd-parity`, which
    /// refuses a key containerd does not know and compares what it read.
    const GOLDEN_V2: &str = include_str!("../../tests/golden/containerd/config-v2.toml");
    const GOLDEN_V3: &str = include_str!("../../tests/golden/containerd/config-v3.toml");
    const PAUSE: &str = "registry.k8s.io/pause:3.10.1";

    fn facts(format: Format) -> Facts<'static> {
        Facts {
            selinux: true,
            format,
            sandbox_image: PAUSE,
        }
    }

    #[test]
    fn golden_typhoon_config_in_both_formats() {
        assert_eq!(render(facts(Format::V2)), GOLDEN_V2);
        assert_eq!(render(facts(Format::V3)), GOLDEN_V3);
        for format in [Format::V2, Format::V3] {
            let off = render(Facts {
                selinux: false,
                ..facts(format)
            });
            assert!(off.contains("enable_selinux = false\n"), "{off}");
            assert_eq!(
                systemd_cgroup(&render(facts(format))),
                Some(true),
                "the rendered file is valid TOML, the driver systemd"
            );
        }
    }

    #[test]
    fn the_sandbox_image_is_read_back_from_either_format() {
        for format in [Format::V2, Format::V3] {
            let odd = Facts {
                sandbox_image: "mirror.example:5000/pause@sha256:ab",
                ..facts(format)
            };
            assert_eq!(
                sandbox_image(&render(odd)).as_deref(),
                Some("mirror.example:5000/pause@sha256:ab"),
                "{format:?}"
            );
        }
        assert_eq!(
            sandbox_image("version = 3\n"),
            None,
            "none named: containerd's default"
        );
        assert_eq!(sandbox_image("not toml ["), None);
    }

    #[test]
    fn the_sandbox_image_is_quoted_as_toml() {
        let odd = render(Facts {
            sandbox_image: "mirror.example:5000/pause@sha256:ab",
            ..facts(Format::V3)
        });
        let table: toml::Table = odd.parse().expect("toml");
        let pinned = &table["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"];
        assert_eq!(pinned.as_str(), Some("mirror.example:5000/pause@sha256:ab"));
    }

    #[test]
    fn the_hosts_directory_a_file_names() {
        for golden in [GOLDEN_V2, GOLDEN_V3] {
            assert_eq!(config_path(golden), Some(Some(CERTS_DIR.to_owned())));
        }
        // Typhoon's own file names none: containerd's default, which 2.2's pulls do not read.
        let typhoon = GOLDEN_V2.replace("config_path", "sandbox_image");
        assert_eq!(config_path(&typhoon), Some(None));
        assert_eq!(config_path("not [toml"), None);
    }

    #[test]
    fn driver_from_someone_elses_file() {
        assert_eq!(
            systemd_cgroup("version = 2\n"),
            Some(false),
            "containerd's default"
        );
        assert_eq!(
            systemd_cgroup(
                "version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\nSystemdCgroup = true\n"
            ),
            Some(true)
        );
        assert_eq!(systemd_cgroup("not [toml"), None);
    }
}
