//! Container image names: the reference type the configuration takes, and Docker's
//! normalization (`busybox` is `docker.io/library/busybox:latest`), the one every part of nodeward
//! that compares names or picks a registry's mirrors goes through.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::invalid::Invalid;

/// A container image reference: `[registry/]repository[:tag][@sha256:<64 hex>]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRef {
    text: String,
    /// Where the tag/digest part starts (the repository is `text[..repo_end]`).
    repo_end: usize,
    digest: Option<String>,
}

impl ImageRef {
    pub(crate) fn repository(&self) -> &str {
        &self.text[..self.repo_end]
    }
    /// The tag (`v1.36.1` in `…/kubelet:v1.36.1@sha256:…`), if any.
    pub(crate) fn tag(&self) -> Option<&str> {
        let name = self.text.split_once('@').map_or(self.text.as_str(), |(n, _)| n);
        name.get(self.repo_end..)?.strip_prefix(':')
    }
    /// The `sha256:…` digest the reference is pinned to, if any.
    pub(crate) fn digest(&self) -> Option<&str> {
        self.digest.as_deref()
    }
}

impl ImageRef {
    /// A built-in reference (`repository:tag`, no digest), whose parse a unit test proves: no
    /// run-time parse and no `panic!` stand behind the defaults.
    pub(crate) fn known(s: &'static str) -> ImageRef {
        let last_slash = s.rfind('/').map_or(0, |i| i + 1);
        ImageRef {
            text: s.to_owned(),
            repo_end: s[last_slash..].rfind(':').map_or(s.len(), |i| last_slash + i),
            digest: None,
        }
    }

    fn parse_str(s: &str) -> Result<Self, String> {
        let bad = |why: &str| Err(format!("{s:?} is not an image reference: {why}"));
        if s.is_empty() || s.len() > 512 {
            return bad("empty or too long");
        }
        if s.bytes().any(|b| !(b.is_ascii_graphic()) || b == b'\\') {
            return bad("spaces, control or non-ASCII characters");
        }
        let (name, digest) = match s.split_once('@') {
            Some((n, d)) => {
                let Some(hex) = d.strip_prefix("sha256:") else {
                    return bad("the digest must be sha256:<64 hex digits>");
                };
                if hex.len() != 64
                    || !hex
                        .bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
                {
                    return bad("the digest must be sha256:<64 lowercase hex digits>");
                }
                (n, Some(d.to_owned()))
            }
            None => (s, None),
        };
        // A tag follows the last ':' after the last '/', so a registry port is not a tag.
        let last_slash = name.rfind('/').map_or(0, |i| i + 1);
        let repo_end = match name[last_slash..].rfind(':') {
            Some(i) => {
                let tag = &name[last_slash + i + 1..];
                if tag.is_empty()
                    || tag.len() > 128
                    || !tag
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
                {
                    return bad("invalid tag");
                }
                last_slash + i
            }
            None => name.len(),
        };
        let repo = &name[..repo_end];
        if repo.is_empty()
            || repo.starts_with(['/', '-', '.'])
            || repo.ends_with('/')
            || repo.contains("//")
            || !repo
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-/:".contains(&b))
        {
            return bad("invalid repository name");
        }
        Ok(ImageRef {
            text: s.to_owned(),
            repo_end,
            digest,
        })
    }
}

impl FromStr for ImageRef {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<Self, Invalid> {
        Self::parse_str(s).map_err(Invalid)
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for ImageRef {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for ImageRef {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A name's registry and the rest, by Docker's rule: the first component is a registry when it
/// has a `.` or a `:` or is `localhost`; otherwise the registry is `docker.io`.
pub(crate) fn split_registry(name: &str) -> (&str, &str) {
    match name.split_once('/') {
        Some((first, rest)) if first.contains('.') || first.contains(':') || first == "localhost" => {
            (first, rest)
        }
        _ => ("docker.io", name),
    }
}

/// A reference as engines store it: the registry named (`docker.io` when none), Docker Hub's
/// official images under `library/`, and `:latest` when there is neither tag nor digest.
pub(crate) fn normalize(reference: &str) -> String {
    let (name, digest) = match reference.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (reference, None),
    };
    let (registry, path) = split_registry(name);
    // Docker Hub's official images live under `library/`, named with the registry or without.
    let mut out = if registry == "docker.io" && !path.contains('/') {
        format!("docker.io/library/{path}")
    } else {
        format!("{registry}/{path}")
    };
    let last = out.rsplit('/').next().unwrap_or("");
    if digest.is_none() && !last.contains(':') {
        out.push_str(":latest");
    }
    if let Some(d) = digest {
        out.push('@');
        out.push_str(d);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn built_in_references_parse_as_written() {
        for known in [
            "registry.k8s.io/pause:3.10.1",
            "registry.example:5000/pause:3.10",
            "pause",
        ] {
            assert_eq!(Ok(ImageRef::known(known)), known.parse::<ImageRef>(), "{known}");
        }
    }

    #[test]
    fn image_references() {
        let pinned: ImageRef = format!("quay.io/poseidon/kubelet@{DIGEST}")
            .parse()
            .expect("pinned");
        assert_eq!(pinned.repository(), "quay.io/poseidon/kubelet");
        assert_eq!(pinned.digest(), Some(DIGEST));
        let both: ImageRef = format!("quay.io/poseidon/kubelet:v1.34.1@{DIGEST}")
            .parse()
            .expect("tag and digest");
        assert_eq!(both.repository(), "quay.io/poseidon/kubelet");
        assert_eq!(both.tag(), Some("v1.34.1"));
        assert_eq!(pinned.tag(), None);
        let port: ImageRef = "localhost:5000/kubelet".parse().expect("registry port");
        assert_eq!(port.tag(), None);
        assert_eq!(port.repository(), "localhost:5000/kubelet");
        assert_eq!(port.digest(), None);
        let tagged: ImageRef = "localhost:5000/kubelet:v1".parse().expect("tag");
        assert_eq!(tagged.tag(), Some("v1"));
        assert_eq!(tagged.repository(), "localhost:5000/kubelet");
        for bad in [
            "",
            "quay.io/kubelet@sha256:abc",
            "quay.io/kubelet@md5:0123",
            "quay.io/kubelet:",
            "quay.io/kube let",
            "/kubelet",
            "kubelet:v1;rm",
            "--privileged",
        ] {
            assert!(bad.parse::<ImageRef>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn names_normalize_as_docker_normalizes_them() {
        for (name, full) in [
            ("busybox", "docker.io/library/busybox:latest"),
            ("library/busybox:1", "docker.io/library/busybox:1"),
            ("docker.io/busybox", "docker.io/library/busybox:latest"),
            ("docker.io/library/busybox", "docker.io/library/busybox:latest"),
            ("docker.io/poseidon/x:1", "docker.io/poseidon/x:1"),
            (
                "quay.io/poseidon/kubelet:v1.36.1",
                "quay.io/poseidon/kubelet:v1.36.1",
            ),
            ("localhost/x", "localhost/x:latest"),
            ("host:5000/x", "host:5000/x:latest"),
            ("pause@sha256:abc", "docker.io/library/pause@sha256:abc"),
        ] {
            assert_eq!(normalize(name), full, "{name}");
        }
        assert_eq!(
            split_registry("registry.k8s.io/pause:3.10"),
            ("registry.k8s.io", "pause:3.10")
        );
        assert_eq!(
            split_registry("poseidon/kubelet"),
            ("docker.io", "poseidon/kubelet")
        );
    }
}
