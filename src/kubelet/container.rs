//! The kubelet container as data: its mounts and the spec the runtimes turn into command lines,
//! with the hash that labels a running kubelet. Each engine declares the mounts only it takes in
//! its own file (`runtime/podman.rs`, `runtime/rkt.rs`); the engines' registry composes them with
//! [`shared_mounts`] (`runtime::default_mounts`).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::types::EngineKind as Kind;

/// Calico's node name file's directory; Typhoon dropped the mount with Calico, kept where Calico
/// may run.
pub(crate) const CALICO_DIR: &str = "/var/lib/calico";

/// Which runtimes a mount is passed to (Typhoon's units differ per OS): every engine, or one
/// engine's own (declared in its file: podman's SELinux state and lock directory on Fedora CoreOS,
/// rkt fly's DNS and CAs, which its stage1 does not share from the host's /etc). Written `all` or
/// the engine's name, as in the spec records running kubelets carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Only {
    All,
    Engine(Kind),
}

impl Only {
    /// Whether the engine `kind` takes such a mount.
    pub(crate) fn for_engine(self, kind: Kind) -> bool {
        match self {
            Only::All => true,
            Only::Engine(own) => own == kind,
        }
    }
}

impl Serialize for Only {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Only::All => s.serialize_str("all"),
            Only::Engine(kind) => kind.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Only {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Only, D::Error> {
        let name = String::deserialize(d)?;
        if name == "all" {
            return Ok(Only::All);
        }
        Kind::deserialize(serde::de::value::StrDeserializer::<D::Error>::new(&name)).map(Only::Engine)
    }
}

/// A bind mount into the kubelet container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mount {
    pub source: String,
    pub target: String,
    pub read_only: bool,
    /// podman's `z`: relabel shared for containers (SELinux hosts).
    pub(crate) relabel: bool,
    /// Mounts made below it propagate both ways (`rshared`; rkt: `recursive=true`).
    pub(crate) rshared: bool,
    pub(crate) only: Only,
    /// Created (0755) before the kubelet starts if missing.
    pub(crate) create: bool,
    /// SELinux state: only mounted where the kernel has SELinux (the source exists only there).
    pub(crate) selinux: bool,
}

impl Mount {
    pub(crate) fn new(source: &str) -> Mount {
        Mount {
            source: source.to_owned(),
            target: source.to_owned(),
            read_only: false,
            relabel: false,
            rshared: false,
            only: Only::All,
            create: false,
            selinux: false,
        }
    }
    pub(crate) fn at(mut self, target: &str) -> Mount {
        self.target = target.to_owned();
        self
    }
    pub(crate) fn ro(mut self) -> Mount {
        self.read_only = true;
        self
    }
    pub(crate) fn z(mut self) -> Mount {
        self.relabel = true;
        self
    }
    pub(crate) fn rshared(mut self) -> Mount {
        self.rshared = true;
        self
    }
    pub(crate) fn only(mut self, only: Only) -> Mount {
        self.only = only;
        self
    }
    pub(crate) fn create(mut self) -> Mount {
        self.create = true;
        self
    }
    pub(crate) fn selinux(mut self) -> Mount {
        self.selinux = true;
        self
    }
}

/// A mount an engine takes alone, placed in the table right after the shared mount at `after` (the
/// order is Typhoon's units', and part of the hash).
#[derive(Debug, Clone)]
pub(crate) struct Placed {
    pub(crate) after: &'static str,
    pub(crate) mounts: Vec<Mount>,
}

/// Typhoon's mounts every engine takes (Fedora CoreOS's kubelet.service, Flatcar's).
pub(crate) fn shared_mounts() -> Vec<Mount> {
    vec![
        Mount::new("/etc/cni/net.d").ro().z().create(),
        Mount::new("/etc/kubernetes").ro().z().create(),
        Mount::new("/etc/machine-id").ro(),
        Mount::new("/usr/lib/os-release").at("/etc/os-release").ro(),
        Mount::new("/lib/modules").ro(),
        Mount::new("/run"),
        Mount::new("/sys/fs/cgroup"),
        Mount::new(CALICO_DIR).ro().create(),
        Mount::new("/var/lib/containerd"),
        Mount::new("/var/lib/kubelet").rshared().z().create(),
        Mount::new("/var/log"),
        Mount::new("/opt/cni/bin").z().create(),
        // Not Typhoon's: the kubelet resolves a pod's `hostPath` and binds its `subPath` in its
        // own mount namespace, so without the node's /tmp a `hostPath: /tmp` with a `subPath`
        // bound the container's own /tmp (the `[NodeConformance]` spec "HostPath should support
        // subPath"; typhoon#546). Never relabelled: /tmp is every program's.
        Mount::new("/tmp"),
    ]
}

/// The shared mounts with each engine's own placed after theirs.
pub(crate) fn compose(own: impl IntoIterator<Item = Placed>) -> Vec<Mount> {
    let mut table = shared_mounts();
    for placed in own {
        let at = table
            .iter()
            .position(|m| m.target == placed.after)
            .map_or(table.len(), |i| i + 1);
        table.splice(at..at, placed.mounts);
    }
    table
}

/// The kubelet container as it must run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubeletSpec {
    /// The container name.
    pub name: String,
    /// The image first, then the mirrors, tried in this order.
    pub images: Vec<String>,
    pub mounts: Vec<Mount>,
    /// The kubelet's arguments.
    pub args: Vec<String>,
    /// sha256 of the KubeletConfiguration file: the kubelet reads it only at start, so a change
    /// must replace the container.
    pub config_sha256: String,
}

impl KubeletSpec {
    /// A short digest of everything that matters, stored as a container label so a later nodeward
    /// can tell whether a running kubelet is the one it wants.
    pub fn hash(&self) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        hex::encode(&Sha256::digest(&json)[..12])
    }

    /// What differs from `old`, one phrase per difference (for `plan`).
    pub fn diff(&self, old: &KubeletSpec) -> Vec<String> {
        let mut out = Vec::new();
        if self.images != old.images {
            out.push(format!(
                "image {} → {}",
                old.images.first().map_or("(none)", String::as_str),
                self.images.first().map_or("(none)", String::as_str)
            ));
        }
        for a in old.args.iter().filter(|a| !self.args.contains(a)) {
            out.push(format!("-arg {a}"));
        }
        for a in self.args.iter().filter(|a| !old.args.contains(a)) {
            out.push(format!("+arg {a}"));
        }
        for m in old.mounts.iter().filter(|m| !self.mounts.contains(m)) {
            out.push(format!("-mount {}:{}", m.source, m.target));
        }
        for m in self.mounts.iter().filter(|m| !old.mounts.contains(m)) {
            out.push(format!("+mount {}:{}", m.source, m.target));
        }
        if self.config_sha256 != old.config_sha256 {
            out.push("kubelet configuration file changed".to_owned());
        }
        if self.name != old.name {
            out.push(format!("name {} → {}", old.name, self.name));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn targets(t: &[Mount]) -> Vec<&str> {
        t.iter().map(|m| m.target.as_str()).collect()
    }

    #[test]
    fn an_engines_own_mounts_go_right_after_their_place() {
        let table = compose([
            Placed {
                after: "/var/log",
                mounts: vec![Mount::new("/var/run/lock").only(Only::Engine(Kind::new("own")))],
            },
            Placed {
                after: "/etc/os-release",
                mounts: vec![Mount::new("/a"), Mount::new("/b")],
            },
        ]);
        let t = targets(&table);
        let at = |target: &str| t.iter().position(|x| *x == target).expect(target);
        assert_eq!(at("/var/run/lock"), at("/var/log") + 1);
        assert_eq!(
            (at("/a"), at("/b")),
            (at("/etc/os-release") + 1, at("/etc/os-release") + 2)
        );
        assert_eq!(t.len(), shared_mounts().len() + 3);
        // The control: a place the shared table does not have puts the mounts last, none lost.
        let last = compose([Placed {
            after: "/nowhere",
            mounts: vec![Mount::new("/c")],
        }]);
        assert_eq!(targets(&last).last(), Some(&"/c"));
    }
}
