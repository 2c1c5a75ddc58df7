//! podman (Fedora CoreOS): the kubelet container through podman's CLI, as Typhoon's unit runs it.
//! podman owns the pid file `run --pidfile` writes (so the kubelet's exit is seen at once through a
//! pidfd), replaces a stopped container in the same `run --replace`, and starts an exited one
//! again in place (`podman start`), its exit code read afterwards from its `died` event.

use std::path::{Path, PathBuf};

use super::engine::{Engine, Fut, Paths};
use super::engine_cli;
use super::process::{self, COMMAND_TIMEOUT};
use super::types::{Kind, RuntimeError};
use crate::kubelet::container::{KubeletSpec, Mount, Only, Placed};
use crate::kubelet::pull_source::Transport;

/// This engine, by its name (its program's, and `kubelet.runtime = "podman"`).
pub(crate) const KIND: Kind = Kind::new("podman");

/// What Typhoon's Fedora CoreOS unit mounts beyond the shared table: SELinux's state (only where
/// the kernel has SELinux: the sources exist only there) after the cgroup tree, and the lock
/// directory after the logs.
pub(super) fn own_mounts() -> Vec<Placed> {
    vec![
        Placed {
            after: "/sys/fs/cgroup",
            mounts: vec![
                Mount::new("/etc/selinux").only(Only::Engine(KIND)).selinux(),
                Mount::new("/sys/fs/selinux").only(Only::Engine(KIND)).selinux(),
            ],
        },
        Placed {
            after: "/var/log",
            mounts: vec![Mount::new("/var/run/lock").z().only(Only::Engine(KIND))],
        },
    ]
}

#[derive(Debug)]
pub(crate) struct Podman {
    pid_file: PathBuf,
}

impl Podman {
    pub(super) fn new(paths: &Paths) -> Podman {
        Podman {
            pid_file: paths.pid_file.clone(),
        }
    }

    /// The pid file podman is told to write is created by podman alone, in a directory only root
    /// can write: whatever is at its name (a file from the last run, or a symlink someone planted
    /// to make podman write elsewhere) is removed first, without following it.
    fn fresh_pid_file(&self) -> Result<(), RuntimeError> {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
        let spawn = |what: String| {
            move |source| RuntimeError::Spawn {
                command: what,
                source,
            }
        };
        if let Some(dir) = self.pid_file.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(dir)
                .map_err(spawn(format!("mkdir -p {}", dir.display())))?;
            let meta = std::fs::symlink_metadata(dir).map_err(spawn(format!("stat {}", dir.display())))?;
            if !meta.is_dir() || (meta.uid() != 0 && meta.uid() != nix::unistd::geteuid().as_raw()) {
                return Err(RuntimeError::Spawn {
                    command: format!("podman run --pidfile {}", self.pid_file.display()),
                    source: std::io::Error::other(format!(
                        "{} is not a directory owned by root",
                        dir.display()
                    )),
                });
            }
            if meta.mode() & 0o022 != 0 {
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
                    .map_err(spawn(format!("chmod 0755 {}", dir.display())))?;
            }
        }
        match std::fs::remove_file(&self.pid_file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(RuntimeError::Spawn {
                command: format!("rm {}", self.pid_file.display()),
                source: e,
            }),
            _ => Ok(()),
        }
    }
}

impl Engine for Podman {
    fn kind(&self) -> Kind {
        KIND
    }

    fn run_args(&self, spec: &KubeletSpec, image: &str, hash: &str, replace: bool) -> Vec<String> {
        engine_cli::run_args(spec, image, hash, Some((replace, &self.pid_file)), |o| {
            self.takes(o)
        })
    }

    /// containers/image's own options: `--tls-verify=false` also allows plain http; `--cert-dir`
    /// adds the directory's `*.crt` to the system's trust for this pull.
    fn pull_options(&self, transport: &Transport, ca_dir: Option<&Path>) -> Option<Vec<String>> {
        match (transport, ca_dir) {
            (Transport::Https, _) => Some(Vec::new()),
            (Transport::PlainHttp, _) => Some(vec!["--tls-verify=false".to_owned()]),
            (Transport::Ca(_), Some(dir)) => Some(vec!["--cert-dir".to_owned(), dir.display().to_string()]),
            (Transport::Ca(_), None) => None,
        }
    }

    /// `run --replace` removes a stopped container holding the name in the same call.
    fn start<'a>(
        &'a self,
        program: &'a Path,
        _name: &'a str,
        args: &'a [String],
        _hash: &'a str,
        _replace: bool,
    ) -> Fut<'a, Result<String, RuntimeError>> {
        Box::pin(async move {
            self.fresh_pid_file()?;
            engine_cli::run(program, args).await
        })
    }

    fn restarts_in_place(&self) -> bool {
        true
    }

    fn replaces_in_start(&self) -> bool {
        true
    }

    /// A running podman container has a conmon watching it, named on its command line: none for
    /// `name` means none runs (see conmon.rs) — unless the kubelet nodeward last started is still
    /// alive without one (its conmon killed: a conmon podman could not move out of nodeward's
    /// cgroup dies with nodeward's restart), which is asked about too.
    fn surely_not_running(&self, program: &Path, name: &str) -> bool {
        let last_alive = self.started_pid().is_some_and(|pid| {
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) != Err(nix::errno::Errno::ESRCH)
        });
        !last_alive && super::conmon::none_for(std::path::Path::new("/proc"), program, name)
    }

    /// No container is removed or created: a restart is this one call. The pid file is written
    /// anew (the last run's removed first, so [`Engine::started_pid`] never reads a pid that is
    /// gone).
    fn start_again<'a>(&'a self, program: &'a Path, id: &'a str) -> Fut<'a, Result<(), RuntimeError>> {
        Box::pin(async move {
            self.fresh_pid_file()?;
            process::output(program, &["start", id], COMMAND_TIMEOUT, false).await?;
            // podman's start of a container it still counts running succeeds without starting it.
            if self.started_pid().is_none() {
                return Err(RuntimeError::Output {
                    command: format!("podman start {id}"),
                    message: format!(
                        "no pid written to {}: the container was not started",
                        self.pid_file.display()
                    ),
                });
            }
            Ok(())
        })
    }

    /// From podman's `died` event: `None` when it keeps no events (`events_logger = "none"`).
    fn exit_code_since<'a>(&'a self, program: &'a Path, id: &'a str, since: u64) -> Fut<'a, Option<i32>> {
        Box::pin(async move {
            let (since, container) = (since.to_string(), format!("container={id}"));
            let args = [
                "events",
                "--stream=false",
                "--since",
                &since,
                "--filter",
                &container,
                "--filter",
                "event=died",
                "--format",
                "{{.ContainerExitCode}}",
            ];
            match process::output(program, &args, COMMAND_TIMEOUT, false).await {
                Ok(Some(out)) => out.lines().find_map(|l| l.trim().parse().ok()),
                Ok(None) => None,
                Err(e) => {
                    tracing::debug!(error = %e, "no exit code from the engine's events");
                    None
                }
            }
        })
    }

    fn started_pid(&self) -> Option<i32> {
        let text = crate::host::read::read_path_text(&self.pid_file, crate::host::read::Kind::State).ok()?;
        text.trim().parse().ok().filter(|&p: &i32| p > 0)
    }
}
