//! Whether nodeward runs inside a container, which kind, and how privileged: read once per run
//! from the evidence systemd-detect-virt uses, through the host and kernel roots.
//!
//! Inside a container the kernel is the host's: modules cannot be loaded from inside, and a
//! host-wide sysctl written from a privileged container retunes every other tenant too. The steps
//! read this to adapt instead of failing obscurely.

use std::fmt;

use serde::Serialize;

use crate::root::{HostRoot, KernelRoot};

/// The container manager, as its own `container=` name says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Kind {
    /// Plain LXC (Proxmox, lxc-start).
    Lxc,
    /// LXC managed by LXD (`/dev/lxd/sock` inside).
    Lxd,
    /// LXC managed by Incus (`/dev/incus/sock` inside).
    Incus,
    SystemdNspawn,
    Docker,
    Podman,
    /// Any other name a manager sets (`container=NAME`).
    Other(String),
}

impl Kind {
    /// The kind for a `container=` value.
    pub(crate) fn from_name(name: &str) -> Kind {
        match name {
            "lxc" | "lxc-libvirt" => Kind::Lxc,
            "systemd-nspawn" => Kind::SystemdNspawn,
            "docker" => Kind::Docker,
            "podman" => Kind::Podman,
            other => Kind::Other(other.to_owned()),
        }
    }

    pub(crate) fn name(&self) -> &str {
        match self {
            Kind::Lxc => "lxc",
            Kind::Lxd => "lxd",
            Kind::Incus => "incus",
            Kind::SystemdNspawn => "systemd-nspawn",
            Kind::Docker => "docker",
            Kind::Podman => "podman",
            Kind::Other(name) => name,
        }
    }
}

/// Whose user namespace the container runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum UserNamespace {
    /// The host's: uid 0 inside is the host's root (a privileged container).
    Initial,
    /// A mapped one (`0 100000 65536`): root inside is an ordinary user outside.
    Mapped,
}

impl UserNamespace {
    pub(crate) fn name(self) -> &'static str {
        match self {
            UserNamespace::Initial => "initial",
            UserNamespace::Mapped => "mapped",
        }
    }
}

/// A container nodeward runs in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Container {
    pub(crate) kind: Kind,
    /// In the initial user namespace (uid 0 is the host's root) with CAP_SYS_ADMIN.
    pub(crate) privileged: bool,
    pub(crate) user_namespace: UserNamespace,
    /// Where the kind was read.
    pub(crate) evidence: String,
}

impl fmt::Display for Container {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let privilege = if self.privileged {
            "privileged"
        } else {
            "unprivileged"
        };
        write!(
            f,
            "{}, {privilege}, {} user namespace (from {})",
            self.kind.name(),
            self.user_namespace.name(),
            self.evidence
        )
    }
}

/// The `container=` value in a NUL-separated environment block (`/proc/1/environ`).
pub(crate) fn container_from_environ(environ: &[u8]) -> Option<String> {
    environ
        .split(|b| *b == 0)
        .find_map(|var| var.strip_prefix(b"container="))
        .map(|v| String::from_utf8_lossy(v).trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// True when a `uid_map` is the identity over the whole range: the initial user namespace.
pub(crate) fn is_initial_uid_map(uid_map: &str) -> bool {
    let lines: Vec<Vec<&str>> = uid_map
        .lines()
        .map(|l| l.split_whitespace().collect())
        .filter(|f: &Vec<&str>| !f.is_empty())
        .collect();
    matches!(lines.as_slice(), [f] if f.as_slice() == ["0", "0", "4294967295"])
}

/// True when the `CapEff:` line of a `/proc/PID/status` holds CAP_SYS_ADMIN (bit 21).
pub(crate) fn has_sys_admin(status: &str) -> bool {
    const CAP_SYS_ADMIN: u32 = 21;
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_SYS_ADMIN) != 0)
}

/// Detects the container nodeward runs in, or `None` on a VM or bare metal. systemd's order: the
/// file PID 1 writes inside a container (`/run/systemd/container`), PID 1's `container=`, then
/// podman's and docker's marker files. LXC is refined to LXD or Incus by their guest sockets.
pub(crate) fn detect(root: &HostRoot, kernel: &KernelRoot) -> Option<Container> {
    // Resolved inside the root: under `--root`, a marker that is a symlink to an absolute path
    // names the image's file, not the build machine's.
    let read_host =
        |rel: &str| super::read::read_below_text(root, &root.dir().join(rel), super::read::Kind::System).ok();
    let exists = |rel: &str| {
        root.resolve_below(&root.dir().join(rel))
            .is_ok_and(|p| p.symlink_metadata().is_ok())
    };
    let (name, evidence) = if let Some(name) = read_host("run/systemd/container")
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
    {
        (name, "/run/systemd/container".to_owned())
    } else if let Some(name) =
        super::read::read_path(&kernel.path("proc/1/environ"), super::read::Kind::Kernel)
            .ok()
            .and_then(|e| container_from_environ(&e))
    {
        (name, "PID 1's environment".to_owned())
    } else if exists("run/.containerenv") {
        ("podman".to_owned(), "/run/.containerenv".to_owned())
    } else if exists(".dockerenv") {
        ("docker".to_owned(), "/.dockerenv".to_owned())
    } else {
        return None;
    };
    let mut kind = Kind::from_name(&name);
    if kind == Kind::Lxc {
        if exists("dev/lxd/sock") {
            kind = Kind::Lxd;
        } else if exists("dev/incus/sock") {
            kind = Kind::Incus;
        }
    }
    let kernel_text = |rel: &str| super::read::read_path_text(&kernel.path(rel), super::read::Kind::Kernel);
    let initial = kernel_text("proc/self/uid_map").is_ok_and(|m| is_initial_uid_map(&m));
    let sys_admin = kernel_text("proc/self/status").is_ok_and(|s| has_sys_admin(&s));
    Some(Container {
        kind,
        privileged: initial && sys_admin,
        user_namespace: if initial {
            UserNamespace::Initial
        } else {
            UserNamespace::Mapped
        },
        evidence,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environ_names_the_manager() {
        assert_eq!(
            container_from_environ(b"TERM=linux\0container=lxc\0HOME=/\0"),
            Some("lxc".into())
        );
        assert_eq!(container_from_environ(b"TERM=linux\0HOME=/\0"), None);
        assert_eq!(container_from_environ(b"container=\0"), None);
        assert_eq!(container_from_environ(b"xcontainer=lxc\0"), None);
    }

    #[test]
    fn uid_maps() {
        assert!(is_initial_uid_map("         0          0 4294967295\n"));
        assert!(!is_initial_uid_map("0 100000 65536\n"));
        assert!(!is_initial_uid_map("0 0 1000\n1000 101000 64536\n"));
        assert!(!is_initial_uid_map(""));
    }

    #[test]
    fn capabilities() {
        assert!(has_sys_admin("Name:\tx\nCapEff:\t000001ffffffffff\n"));
        assert!(
            !has_sys_admin("CapEff:\t00000000a80425fb\n"),
            "docker's default set"
        );
        assert!(!has_sys_admin("CapEff:\tnot-hex\n"));
        assert!(!has_sys_admin("Name:\tx\n"));
    }

    struct Trees {
        host: tempfile::TempDir,
        kernel: tempfile::TempDir,
    }

    impl Trees {
        fn new() -> Trees {
            Trees {
                host: tempfile::tempdir().expect("tempdir"),
                kernel: tempfile::tempdir().expect("tempdir"),
            }
        }
        fn host(&self, rel: &str, content: &str) -> &Self {
            let p = self.host.path().join(rel);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(p, content).expect("write");
            self
        }
        fn kernel(&self, rel: &str, content: &[u8]) -> &Self {
            let p = self.kernel.path().join(rel);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(p, content).expect("write");
            self
        }
        fn detect(&self) -> Option<Container> {
            detect(
                &HostRoot::at(self.host.path()),
                &KernelRoot::at(self.kernel.path()),
            )
        }
    }

    #[test]
    fn no_evidence_is_no_container() {
        let t = Trees::new();
        t.kernel("proc/1/environ", b"TERM=linux\0");
        assert_eq!(t.detect(), None);
    }

    #[test]
    fn privileged_lxd() {
        let t = Trees::new();
        t.host("run/systemd/container", "lxc\n").host("dev/lxd/sock", "");
        t.kernel("proc/self/uid_map", b"0 0 4294967295\n")
            .kernel("proc/self/status", b"CapEff:\t000001ffffffffff\n");
        let c = t.detect().expect("a container");
        assert_eq!(c.kind, Kind::Lxd);
        assert!(c.privileged);
        assert_eq!(
            c.to_string(),
            "lxd, privileged, initial user namespace (from /run/systemd/container)"
        );
    }

    #[test]
    fn unprivileged_lxc_from_pid1_environment() {
        let t = Trees::new();
        t.kernel("proc/1/environ", b"container=lxc\0")
            .kernel("proc/self/uid_map", b"0 100000 65536\n")
            .kernel("proc/self/status", b"CapEff:\t000001ffffffffff\n");
        let c = t.detect().expect("a container");
        assert_eq!(c.kind, Kind::Lxc);
        assert!(
            !c.privileged,
            "root in a mapped user namespace is not the host's root"
        );
        assert_eq!(c.user_namespace, UserNamespace::Mapped);
        assert_eq!(c.evidence, "PID 1's environment");
    }

    #[test]
    fn marker_files() {
        let t = Trees::new();
        t.host(".dockerenv", "");
        assert_eq!(t.detect().map(|c| c.kind), Some(Kind::Docker));
        t.host("run/.containerenv", "engine=\"podman-4.3.1\"\n");
        assert_eq!(
            t.detect().map(|c| c.kind),
            Some(Kind::Podman),
            "podman's file first"
        );
        t.host("run/systemd/container", "systemd-nspawn\n");
        assert_eq!(
            t.detect().map(|c| c.kind),
            Some(Kind::SystemdNspawn),
            "systemd's file first"
        );
    }
}
