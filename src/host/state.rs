//! nodeward's own state: the one place that names its files under `/run/nodeward` (gone at reboot)
//! and `/var/lib/nodeward` (kept across reboots), and their only writer — whole, through the
//! atomic writer, with the mode each needs from its first byte (a bundle's secrets never
//! world-readable, not even for an instant). Readers read them here too, through the one door.
//!
//! Two files are made by others and only resolved here: the kubelet's pid file (podman's conmon
//! writes it) and the control socket (bound by the daemon); the locks are flocked in `host::lock`.
//! The architecture test refuses the two directories' names anywhere else in the code.

use std::path::PathBuf;

use super::HostError;
use super::fs::{Meta, Prepared, WriteOutcome};
use super::read::{self, Kind, ReadError};
use crate::root::HostRoot;
use crate::types::AbsPath;

/// Where the files that live until the next boot are.
pub(crate) const RUN_DIR: &str = "/run/nodeward";
/// Where the files kept across reboots are.
pub(crate) const LIB_DIR: &str = "/var/lib/nodeward";
/// Where Ignition (or an operator) puts image archives for nodeward to import (`images.dirs`).
pub(crate) const SHIPPED_IMAGES_DIR: &str = "/var/lib/nodeward/images";

/// One of nodeward's own files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StateFile {
    /// The daemon's report (`nodeward status`, the checks): `/run/nodeward/state.json`.
    DaemonState,
    /// A lock (`host::lock`), by name.
    Lock(String),
    /// The daemon's control socket.
    ControlSocket,
    /// The spec of the kubelet container last started, with its hash.
    KubeletSpec,
    /// The command line that started the running kubelet (`kubelet show`).
    KubeletArgv,
    /// podman's conmon pid file for the kubelet container.
    KubeletPid,
    /// An effect owed to the host (`plan::owed`), by its subject.
    Owed(String),
    /// A soft dependency this machine cannot load, noted until the next boot.
    SoftdepUnavailable(String),
    /// The last healthy kubelet spec and the trial of a new one (`kubelet::rollout`).
    KubeletRollout,
    /// The FleetLock slot this node holds (`fleetlock::held`).
    FleetLock,
    /// The bundle install's record of what it installed.
    BundleManifest,
    /// The bundle install's journal (an install under way).
    BundleJournal,
    /// The bundle install's staging record.
    BundleStaging,
    /// The last download whose digest matched the pin.
    BundleDownload,
    /// The image archives imported, and into which engines (`images::record`).
    ImageImports,
    /// A copy of a mirror's CA, by the mirror's host, as `podman pull --cert-dir` reads it (a
    /// directory of `*.crt`), for pulling the kubelet's image through the mirror.
    MirrorCa(String),
}

/// A name made safe as one path segment: `[A-Za-z0-9._-]`, never `.` or `..`.
fn segment(name: &str) -> String {
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    match safe.as_str() {
        "" | "." | ".." => format!("_{safe}"),
        _ => safe,
    }
}

impl StateFile {
    /// The file's host path.
    pub(crate) fn path(&self) -> AbsPath {
        let run = |name: &str| format!("{RUN_DIR}/{name}");
        let lib = |name: &str| format!("{LIB_DIR}/{name}");
        let text = match self {
            StateFile::DaemonState => run("state.json"),
            StateFile::Lock(name) => run(&segment(name)),
            StateFile::ControlSocket => run("control.sock"),
            StateFile::KubeletSpec => run("kubelet-spec.json"),
            StateFile::KubeletArgv => run("kubelet-argv.json"),
            StateFile::KubeletPid => run("kubelet.pid"),
            StateFile::Owed(subject) => run(&format!("owed/{}", segment(subject))),
            StateFile::SoftdepUnavailable(module) => run(&format!("softdep-unavailable/{}", segment(module))),
            StateFile::KubeletRollout => lib("kubelet-rollout.json"),
            StateFile::FleetLock => lib("fleetlock.json"),
            StateFile::BundleManifest => lib("bundle/manifest.json"),
            StateFile::BundleJournal => lib("bundle/journal.json"),
            StateFile::BundleStaging => lib("bundle/staging.json"),
            StateFile::BundleDownload => lib("bundle/download"),
            StateFile::ImageImports => lib("image-imports.json"),
            StateFile::MirrorCa(host) => run(&format!("mirror-ca/{}/ca.crt", segment(host))),
        };
        // Fixed directories and one safe segment (`segment`): always an absolute path.
        AbsPath::from_checked(text)
    }

    /// The bundle's records and download hold or name secrets: 0600 in a 0700 directory.
    fn secret(&self) -> bool {
        matches!(
            self,
            StateFile::BundleManifest
                | StateFile::BundleJournal
                | StateFile::BundleStaging
                | StateFile::BundleDownload
        )
    }

    fn meta(&self) -> Meta {
        Meta {
            mode: if self.secret() { 0o600 } else { 0o644 },
            uid: 0,
            gid: 0,
            label: None,
        }
    }

    fn dir_mode(&self) -> u32 {
        if self.secret() { 0o700 } else { 0o755 }
    }

    /// The file below the root, its directories resolved inside the root (a `ROOT/run` symlink
    /// stays inside). For the files others make (the socket, the pid file, the locks) and for
    /// messages; writing goes through [`StateFile::write`].
    pub(crate) fn resolve(&self, root: &HostRoot) -> Result<PathBuf, HostError> {
        let path = self.path();
        root.resolve_parent(&path)
            .map_err(HostError::resolve(path.to_path_buf()))
    }

    /// Writes the whole file atomically (a reader sees the old content or the new, never a mix),
    /// creating its directory.
    pub(crate) fn write(&self, root: &HostRoot, contents: &[u8]) -> Result<WriteOutcome, HostError> {
        let path = self.resolve(root)?;
        super::fs::write_atomic_creating(&path, contents, &self.meta(), self.dir_mode())
    }

    /// Stages the whole file beside its place, renamed in by [`Prepared::commit`] (the bundle
    /// install commits its records with its own `syncfs`).
    pub(crate) fn prepare(&self, root: &HostRoot, contents: &[u8]) -> Result<Prepared, HostError> {
        let path = self.resolve(root)?;
        if let Some(dir) = path.parent() {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(self.dir_mode())
                .create(dir)
                .map_err(HostError::io(dir, "create directory"))?;
        }
        super::fs::prepare_atomic(&path, contents, &self.meta())
    }

    /// Removes the file; one already gone is fine.
    pub(crate) fn remove(&self, root: &HostRoot) -> Result<(), HostError> {
        let path = self.resolve(root)?;
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(HostError::io(path, "remove")(e)),
            _ => Ok(()),
        }
    }

    /// Reads the file through the one door (a regular file, not through a symlink, capped).
    pub(crate) fn read(&self, root: &HostRoot) -> Result<Vec<u8>, ReadError> {
        read::read(root, &self.path(), Kind::State)
    }

    /// Reads a file as large as a bundle may be (the kept download), capped as `kind` says and
    /// read in two halves at once when large (see `read::read_large`).
    pub(crate) fn read_large(&self, root: &HostRoot, kind: Kind) -> Result<Vec<u8>, ReadError> {
        let path = self.resolve(root).map_err(|e| ReadError::Io {
            path: self.path().to_string(),
            source: std::io::Error::other(e.to_string()),
        })?;
        read::read_large(&path, kind)
    }

    /// Whether the file is there.
    pub(crate) fn exists(&self, root: &HostRoot) -> bool {
        self.resolve(root).is_ok_and(|p| p.symlink_metadata().is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn dynamic_names_stay_one_segment_below_their_directory() {
        for (name, want) in [
            (
                "/etc/NetworkManager/conf.d/x.conf",
                "_etc_NetworkManager_conf.d_x.conf",
            ),
            ("..", "_.."),
            (".", "_."),
            ("", "_"),
            ("ip_vs", "ip_vs"),
        ] {
            assert_eq!(
                StateFile::Owed(name.into()).path().as_str(),
                format!("{RUN_DIR}/owed/{want}")
            );
        }
    }

    #[test]
    fn secrets_are_0600_in_a_0700_directory_and_others_0644() {
        let t = tempfile::tempdir().expect("tempdir");
        let root = HostRoot::at(t.path());
        StateFile::BundleDownload.write(&root, b"key").expect("write");
        StateFile::FleetLock.write(&root, b"{}").expect("write");
        let mode = |p: &str| {
            std::fs::metadata(t.path().join(p))
                .expect("stat")
                .permissions()
                .mode()
                & 0o7777
        };
        assert_eq!(mode("var/lib/nodeward/bundle/download"), 0o600);
        assert_eq!(mode("var/lib/nodeward/bundle"), 0o700);
        assert_eq!(mode("var/lib/nodeward/fleetlock.json"), 0o644);
        assert_eq!(StateFile::FleetLock.read(&root).expect("read"), b"{}");
        StateFile::FleetLock.remove(&root).expect("remove");
        StateFile::FleetLock.remove(&root).expect("gone is fine");
        assert!(!StateFile::FleetLock.exists(&root));
    }
}
