//! `[[containerd.mirrors]]`: registry mirrors, rendered into containerd's `hosts.toml` files
//! (`/etc/containerd/certs.d/REGISTRY/hosts.toml`, containerd's `docs/hosts.md`).
//!
//! containerd reads these files at every pull, so a change needs no restart; it tries the hosts in
//! the file's order and the registry itself (`server`) last. It reads them only where its
//! `config_path` names the directory: nodeward's own `config.toml` does; a file someone else
//! provides is checked and the step says when it does not.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::{Deserialize, Serialize};

use crate::setting::KeyError;
use crate::types::AbsPath;

/// The first line of a `hosts.toml` nodeward wrote (a file without it is someone else's).
pub(crate) const MARKER: &str =
    "# Written by nodeward from its [[containerd.mirrors]]; changes are overwritten.";
/// Mirrors over all registries: a node's list, not a catalogue.
pub(crate) const MAX_MIRRORS: usize = 64;
const MAX_NAME: usize = 253;

/// One mirror of one registry, as configured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MirrorInput {
    /// The registry mirrored, as images name it: `quay.io`, `registry.k8s.io`, `host:5000`.
    pub(crate) registry: String,
    /// `https://host[:port][/path]`, or `http://…` with `plain_http = true`.
    pub(crate) url: String,
    /// For https: trust this CA (PEM) for the mirror.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ca_file: Option<AbsPath>,
    /// Allow plain http to this mirror (never implied by the url alone).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) plain_http: bool,
}

/// A checked mirror.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mirror {
    pub(crate) registry: String,
    pub(crate) url: String,
    pub(crate) ca_file: Option<AbsPath>,
}

/// Checks each mirror; errors name `containerd.mirrors[N].FIELD`.
pub(crate) fn validate(list: Vec<MirrorInput>) -> Result<Vec<Mirror>, KeyError> {
    if list.len() > MAX_MIRRORS {
        return Err(KeyError::new(
            "containerd.mirrors",
            format!("{} mirrors; at most {MAX_MIRRORS}", list.len()),
        ));
    }
    let mut out: Vec<Mirror> = Vec::with_capacity(list.len());
    for (i, m) in list.into_iter().enumerate() {
        let key = |field: &str| format!("containerd.mirrors[{i}].{field}");
        host_port(&m.registry).map_err(|why| {
            KeyError::new(
                key("registry"),
                format!("{:?}: {why}", crate::text::printable(&m.registry)),
            )
        })?;
        let bad_url =
            |why: String| KeyError::new(key("url"), format!("{:?}: {why}", crate::text::printable(&m.url)));
        let (scheme, rest) = m.url.split_once("://").ok_or_else(|| {
            bad_url("not a URL: it must start with https:// (or http:// with plain_http)".into())
        })?;
        match (scheme, m.plain_http) {
            ("https", false) => {}
            ("http", true) => {
                if m.ca_file.is_some() {
                    return Err(KeyError::new(
                        key("ca_file"),
                        "a CA is for https; this mirror is plain http",
                    ));
                }
            }
            ("http", false) => {
                return Err(bad_url("plain http: set plain_http = true to allow it".into()));
            }
            ("https", true) => {
                return Err(KeyError::new(
                    key("plain_http"),
                    "the url is https; plain_http is for an http:// url",
                ));
            }
            _ => return Err(bad_url(format!("scheme {scheme:?}: https or http only"))),
        }
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        host_port(authority).map_err(bad_url)?;
        if path.len() > 256
            || !path
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"/._-~".contains(&b))
        {
            return Err(bad_url(
                "the path may hold letters, digits and / . _ - ~ only".into(),
            ));
        }
        let url = m.url.trim_end_matches('/').to_owned();
        if out.iter().any(|o| o.registry == m.registry && o.url == url) {
            return Err(bad_url(format!("listed twice for {}", m.registry)));
        }
        out.push(Mirror {
            registry: m.registry,
            url,
            ca_file: m.ca_file,
        });
    }
    Ok(out)
}

/// `host[:port]`: a DNS name or IPv4 address in lowercase, an optional port.
fn host_port(s: &str) -> Result<(), String> {
    let (host, port) = match s.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (s, None),
    };
    if host.is_empty() || host.len() > MAX_NAME {
        return Err("the host name is empty or too long".into());
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    if !host.split('.').all(label_ok) {
        return Err("a host name is lowercase letters, digits, '-' and '.'".into());
    }
    if let Some(p) = port {
        if p.parse::<u16>().map_or(true, |n| n == 0) {
            return Err(format!("port {p:?} is not a port number"));
        }
    }
    Ok(())
}

/// Where containerd pulls one image from, as nodeward's `hosts.toml` orders it: the image's
/// registry, the mirrors configured for it (in the configuration's order), then the registry's own
/// server. The one derivation every reader of `[[containerd.mirrors]]` uses: the kubelet's own
/// pull (`kubelet::pull_source`), `nodeward check`'s probe (`check::image_sources`) and the names
/// the image step compares (`types::image`, whose registry split this is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PullPath<'a> {
    /// `registry.k8s.io`, `docker.io`, `host:5000`.
    pub(crate) registry: &'a str,
    /// The name after its registry, tag and digest kept; Docker Hub's official images under
    /// `library/` (`busybox` → `library/busybox`), as a mirror serves them.
    pub(crate) path: String,
    /// The registry's mirrors, in the configuration's order.
    pub(crate) mirrors: Vec<&'a Mirror>,
}

impl PullPath<'_> {
    /// The registry's own server, tried last.
    pub(crate) fn server(&self) -> String {
        server(self.registry)
    }
}

/// [`PullPath`] of `image` with these mirrors.
pub(crate) fn pull_path<'a>(image: &'a str, mirrors: &'a [Mirror]) -> PullPath<'a> {
    let (registry, rest) = crate::types::image::split_registry(image);
    let name = rest.split_once('@').map_or(rest, |(n, _)| n);
    let path = if registry == "docker.io" && !name.contains('/') {
        format!("library/{rest}")
    } else {
        rest.to_owned()
    };
    PullPath {
        registry,
        path,
        mirrors: mirrors.iter().filter(|m| m.registry == registry).collect(),
    }
}

/// The configured mirrors grouped by registry, each list in the configuration's order.
pub(crate) fn by_registry(mirrors: &[Mirror]) -> BTreeMap<&str, Vec<&Mirror>> {
    let mut out: BTreeMap<&str, Vec<&Mirror>> = BTreeMap::new();
    for m in mirrors {
        out.entry(m.registry.as_str()).or_default().push(m);
    }
    out
}

/// Where containerd looks for a registry's hosts: the image names Docker Hub `docker.io`, its
/// API is `registry-1.docker.io` (containerd's `docs/hosts.md`).
pub(crate) fn server(registry: &str) -> String {
    match registry {
        "docker.io" => "https://registry-1.docker.io".to_owned(),
        r => format!("https://{r}"),
    }
}

/// A registry's `hosts.toml`: its mirrors in order, pull and resolve only (never push), and the
/// registry itself last.
pub(crate) fn render_hosts(registry: &str, mirrors: &[&Mirror]) -> String {
    let quote = |s: &str| toml::Value::String(s.to_owned()).to_string();
    let mut s = String::new();
    let _ = writeln!(s, "{MARKER}");
    let _ = writeln!(s, "server = {}", quote(&server(registry)));
    for m in mirrors {
        let _ = write!(
            s,
            "\n[host.{}]\ncapabilities = [\"pull\", \"resolve\"]\n",
            quote(&m.url)
        );
        if let Some(ca) = &m.ca_file {
            let _ = writeln!(s, "ca = {}", quote(ca.as_str()));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(registry: &str, url: &str) -> MirrorInput {
        MirrorInput {
            registry: registry.into(),
            url: url.into(),
            ca_file: None,
            plain_http: false,
        }
    }

    /// Each bound at its edge: the most allowed passes, one more is refused (what the mutation run
    /// found untested).
    #[test]
    fn bounds_hold_at_their_edges() {
        let many = |n: usize| -> Vec<MirrorInput> {
            (0..n)
                .map(|i| input("quay.io", &format!("https://m{i}.example.com")))
                .collect()
        };
        assert_eq!(
            validate(many(MAX_MIRRORS)).expect("at the limit").len(),
            MAX_MIRRORS
        );
        let e = validate(many(MAX_MIRRORS + 1)).expect_err("past the limit");
        assert!(e.to_string().contains("at most 64"), "{e}");

        let path = |n: usize| format!("https://m.example.com/{}", "p".repeat(n - 1));
        assert!(
            validate(vec![input("quay.io", &path(256))]).is_ok(),
            "a 256-byte path"
        );
        assert!(
            validate(vec![input("quay.io", &path(257))]).is_err(),
            "a 257-byte path"
        );

        let host = |n: usize| {
            let labels: Vec<String> = (0..n.div_ceil(50)).map(|_| "a".repeat(49)).collect();
            let joined = labels.join(".");
            joined[..n].trim_end_matches('.').to_owned()
        };
        let at = host(MAX_NAME);
        assert_eq!(at.len(), MAX_NAME);
        assert!(
            validate(vec![input(&at, "https://m.example.com")]).is_ok(),
            "a 253-byte name"
        );
        let over = format!("{at}a");
        assert!(
            validate(vec![input(&over, "https://m.example.com")]).is_err(),
            "254 bytes"
        );
        assert!(
            validate(vec![input(":5000", "https://m.example.com")]).is_err(),
            "no host"
        );
        assert!(
            validate(vec![input("quay.io", "https://:5000")]).is_err(),
            "a url with no host"
        );
    }

    #[test]
    fn golden_hosts_toml() {
        let mirrors = validate(vec![
            MirrorInput {
                ca_file: Some(crate::abs_path!("/etc/pki/mirror.pem")),
                ..input("quay.io", "https://mirror.example.com:5000/")
            },
            MirrorInput {
                plain_http: true,
                ..input("quay.io", "http://10.0.0.5:5000")
            },
            input("docker.io", "https://hub-cache.example.com/v2/cache"),
        ])
        .expect("valid");
        let grouped = by_registry(&mirrors);
        assert_eq!(
            grouped.keys().copied().collect::<Vec<_>>(),
            ["docker.io", "quay.io"]
        );
        assert_eq!(
            render_hosts("quay.io", &grouped["quay.io"]),
            "# Written by nodeward from its [[containerd.mirrors]]; changes are overwritten.\n\
             server = \"https://quay.io\"\n\
             \n[host.\"https://mirror.example.com:5000\"]\n\
             capabilities = [\"pull\", \"resolve\"]\n\
             ca = \"/etc/pki/mirror.pem\"\n\
             \n[host.\"http://10.0.0.5:5000\"]\n\
             capabilities = [\"pull\", \"resolve\"]\n"
        );
        let hub = render_hosts("docker.io", &grouped["docker.io"]);
        assert!(
            hub.contains("server = \"https://registry-1.docker.io\"\n"),
            "{hub}"
        );
        let parsed: toml::Table = hub.parse().expect("valid TOML");
        assert!(
            parsed["host"]
                .get("https://hub-cache.example.com/v2/cache")
                .is_some()
        );
    }

    #[test]
    fn refusals_name_the_entry_and_field() {
        let cases = [
            (
                input("quay.io", "http://m:5000"),
                "containerd.mirrors[0].url",
                "plain_http = true",
            ),
            (
                MirrorInput {
                    plain_http: true,
                    ..input("quay.io", "https://m")
                },
                "containerd.mirrors[0].plain_http",
                "http:// url",
            ),
            (
                MirrorInput {
                    plain_http: true,
                    ca_file: Some(crate::abs_path!("/ca.pem")),
                    ..input("quay.io", "http://m")
                },
                "containerd.mirrors[0].ca_file",
                "plain http",
            ),
            (
                input("Quay.io", "https://m"),
                "containerd.mirrors[0].registry",
                "lowercase",
            ),
            (
                input("https://quay.io", "https://m"),
                "containerd.mirrors[0].registry",
                "port",
            ),
            (input("quay.io", "ftp://m"), "containerd.mirrors[0].url", "scheme"),
            (
                input("quay.io", "m:5000"),
                "containerd.mirrors[0].url",
                "not a URL",
            ),
            (
                input("quay.io", "https://m:0"),
                "containerd.mirrors[0].url",
                "port",
            ),
            (
                input("quay.io", "https://m/a?b"),
                "containerd.mirrors[0].url",
                "path",
            ),
            (
                input("quay.io", "https://m/\"]\nx"),
                "containerd.mirrors[0].url",
                "path",
            ),
        ];
        for (m, key, why) in cases {
            let e = validate(vec![m.clone()]).expect_err(&format!("{m:?}"));
            assert_eq!(e.key, key, "{m:?}: {}", e.message);
            assert!(e.message.contains(why), "{m:?}: {}", e.message);
        }
    }

    #[test]
    fn duplicates_and_the_count_are_bounded() {
        let twice = validate(vec![
            input("quay.io", "https://m"),
            input("quay.io", "https://m/"),
        ]);
        assert!(twice.expect_err("twice").message.contains("listed twice"));
        let many = validate(
            (0..=MAX_MIRRORS)
                .map(|i| input("quay.io", &format!("https://m{i}")))
                .collect(),
        );
        assert_eq!(many.expect_err("many").key, "containerd.mirrors");
        // Controls: the same shapes, valid.
        assert!(validate(vec![input("registry.k8s.io", "https://m:5000/path_x")]).is_ok());
        assert!(
            validate(vec![MirrorInput {
                plain_http: true,
                ..input("127.0.0.1:5000", "http://127.0.0.1:5000")
            }])
            .is_ok()
        );
    }
}
