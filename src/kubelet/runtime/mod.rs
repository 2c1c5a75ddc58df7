//! The container engines that can run the kubelet, behind one interface: podman (Fedora CoreOS),
//! docker (Flatcar) and rkt (Container Linux). Each is driven through its CLI, as Typhoon's units do;
//! the command lines are golden-tested against those units.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

mod engine_cli;
mod process;
mod rkt;
mod types;

use process::{COMMAND_TIMEOUT, PULL_TIMEOUT, describe, failed, find_in_path};
pub use types::{Container, HASH_LABEL, Image, Kind, RuntimeError};

use super::spec::KubeletSpec;
use crate::config::kubelet::RuntimeChoice;

/// One engine and where its CLI is.
#[derive(Debug, Clone)]
pub struct Runtime {
    pub kind: Kind,
    pub program: PathBuf,
    /// rkt: the pod's uuid file (the spec hash is kept next to it, in `<file>.spec-hash`).
    pub uuid_file: PathBuf,
    /// podman: where `run --pidfile` writes the kubelet's pid, so its exit is noticed at once.
    pub pid_file: PathBuf,
}

/// Where podman writes the kubelet's pid (under the run directory, so gone after a reboot).
pub(crate) const PID_FILE: &str = "kubelet.pid";
/// Beside it: the engine's whole command line of the last start, for `nodeward kubelet show`.
pub(crate) const ARGV_FILE: &str = "kubelet-argv.json";

impl Runtime {
    /// The runtime configured, or with `auto` the first of podman, docker, rkt found in `path`
    /// (a `PATH`-style list).
    pub(crate) fn detect(
        choice: RuntimeChoice,
        path: &str,
        uuid_file: &Path,
        pid_file: &Path,
    ) -> Result<Runtime, RuntimeError> {
        let kinds: &[Kind] = match choice {
            RuntimeChoice::Auto => &[Kind::Podman, Kind::Docker, Kind::Rkt],
            RuntimeChoice::Podman => &[Kind::Podman],
            RuntimeChoice::Docker => &[Kind::Docker],
            RuntimeChoice::Rkt => &[Kind::Rkt],
        };
        for &kind in kinds {
            if let Some(program) = find_in_path(kind.program(), path) {
                return Ok(Runtime {
                    kind,
                    program,
                    uuid_file: uuid_file.to_path_buf(),
                    pid_file: pid_file.to_path_buf(),
                });
            }
        }
        Err(RuntimeError::NotFound {
            looked: kinds.iter().map(|k| k.program()).collect::<Vec<_>>().join(", "),
        })
    }

    /// The arguments that start the kubelet container (after the program name). `replace`: podman
    /// removes a container holding the name in the same call (`--replace`).
    pub fn run_args(&self, spec: &KubeletSpec, image: &str, hash: &str, replace: bool) -> Vec<String> {
        match self.kind {
            Kind::Podman => engine_cli::run_args(spec, image, hash, Some((replace, &self.pid_file))),
            Kind::Docker => engine_cli::run_args(spec, image, hash, None),
            Kind::Rkt => rkt::run_args(spec, image, &self.uuid_file),
        }
    }

    /// The kubelet container, if one with the spec's name exists.
    pub async fn inspect(&self, name: &str) -> Result<Option<Container>, RuntimeError> {
        match self.kind {
            Kind::Podman | Kind::Docker => {
                let out = process::output(
                    &self.program,
                    &["container", "inspect", name],
                    COMMAND_TIMEOUT,
                    true,
                )
                .await?;
                let Some(stdout) = out else { return Ok(None) };
                engine_cli::parse_inspect(&stdout).map_err(|e| RuntimeError::Output {
                    command: format!("{} container inspect {name}", self.kind.program()),
                    message: e.0,
                })
            }
            Kind::Rkt => rkt::inspect(&self.program, &self.uuid_file).await,
        }
    }

    /// Makes one of the spec's images available locally: present already, or the first that pulls.
    pub async fn ensure_image(&self, images: &[String]) -> Result<Image, RuntimeError> {
        if self.kind != Kind::Rkt {
            for image in images {
                if let Some(id) = self.image_id(image).await {
                    return Ok(Image {
                        reference: image.clone(),
                        id,
                    });
                }
            }
        }
        let mut tried = Vec::new();
        for image in images {
            let pulled = match self.kind {
                Kind::Rkt => {
                    let reference = format!("docker://{image}");
                    process::output(
                        &self.program,
                        &["fetch", "--insecure-options=image", &reference],
                        PULL_TIMEOUT,
                        false,
                    )
                    .await
                }
                _ => process::output(&self.program, &["pull", image], PULL_TIMEOUT, false).await,
            };
            match pulled {
                Ok(_) => {
                    let id = self.image_id(image).await.unwrap_or_default();
                    return Ok(Image {
                        reference: image.clone(),
                        id,
                    });
                }
                Err(e) => {
                    tracing::warn!(%image, error = %e, "kubelet image pull failed; trying the next mirror");
                    tried.push(format!("{image}: {e}"));
                }
            }
        }
        Err(RuntimeError::NoImage { tried })
    }

    /// The content id of a local image (`sha256:…`), `None` when it is not present. One call that
    /// answers both "is it there" and "which one is it" (podman's `image exists` answers only the
    /// first).
    pub async fn image_id(&self, image: &str) -> Option<String> {
        match self.kind {
            Kind::Rkt => None,
            _ => process::output(
                &self.program,
                &["image", "inspect", "--format", "{{.Id}}", image],
                COMMAND_TIMEOUT,
                true,
            )
            .await
            .ok()
            .flatten()
            .map(|out| out.trim().to_owned()),
        }
    }

    /// The registry digests the engine records for a local image (`name@sha256:…`); empty for an
    /// image that never came from a registry (imported), or under rkt.
    pub async fn image_digests(&self, image: &str) -> Vec<String> {
        if self.kind == Kind::Rkt {
            return Vec::new();
        }
        process::output(
            &self.program,
            &[
                "image",
                "inspect",
                "--format",
                "{{range .RepoDigests}}{{.}} {{end}}",
                image,
            ],
            COMMAND_TIMEOUT,
            true,
        )
        .await
        .ok()
        .flatten()
        .map(|out| out.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default()
    }

    /// Starts the container detached. podman and docker keep it running on their own (conmon,
    /// containerd-shim), so it outlives this process; rkt fly's pod *is* the `rkt run` process, so
    /// it is started in its own session and watched through its uuid.
    ///
    /// `replace`: a stopped container may hold the name (one of nodeward's that exited, or a stale
    /// one); it is removed first, by podman within the same `run --replace`, by docker and rkt with
    /// an `rm` of their own. Without it, a name in use fails the run: nothing running is ever
    /// removed that was not seen.
    pub async fn start(
        &self,
        spec: &KubeletSpec,
        image: &str,
        hash: &str,
        replace: bool,
    ) -> Result<String, RuntimeError> {
        if replace && self.kind != Kind::Podman {
            self.remove(&spec.name).await?;
        }
        let args = self.run_args(spec, image, hash, replace);
        if self.kind == Kind::Podman {
            self.fresh_pid_file()?;
        }
        let started = match self.kind {
            Kind::Podman | Kind::Docker => {
                let refs: Vec<&str> = args.iter().map(String::as_str).collect();
                let out = process::output(&self.program, &refs, PULL_TIMEOUT, false)
                    .await?
                    .unwrap_or_default();
                let last = out.trim().lines().last().unwrap_or("");
                engine_cli::container_id(last).map_err(|e| RuntimeError::Output {
                    command: format!("{} run", self.kind.program()),
                    message: e.0,
                })
            }
            Kind::Rkt => rkt::start(&self.program, &self.uuid_file, &args, hash).await,
        }?;
        self.record_argv(&args);
        Ok(started)
    }

    /// Keeps the command line that started the running kubelet (no secret in it: flags, paths,
    /// the image). Written whole through a temporary file; a failure only costs `kubelet show`.
    fn record_argv(&self, args: &[String]) {
        let Some(dir) = self.pid_file.parent() else { return };
        let argv: Vec<String> = std::iter::once(self.program.display().to_string())
            .chain(args.iter().cloned())
            .collect();
        let path = dir.join(ARGV_FILE);
        let tmp = dir.join(format!(".{ARGV_FILE}.tmp"));
        let written = serde_json::to_vec(&argv)
            .map_err(std::io::Error::other)
            .and_then(|json| {
                let _ = std::fs::remove_file(&tmp);
                std::fs::write(&tmp, json)?;
                std::fs::rename(&tmp, &path)
            });
        if let Err(e) = written {
            tracing::debug!(path = %path.display(), error = %e, "the kubelet's command line was not recorded");
        }
    }

    /// The command line [`Runtime::start`] last started the kubelet with, if recorded.
    pub fn started_argv(&self) -> Option<Vec<String>> {
        let path = self.pid_file.parent()?.join(ARGV_FILE);
        let text = crate::host::read::read_path(&path, crate::host::read::Kind::State).ok()?;
        serde_json::from_slice(&text).ok()
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

    /// Starts a container that exited again, in place (podman): no container is removed or created,
    /// so a restart is this one call. Its pid file is written anew; the last run's is removed first
    /// so that [`Runtime::started_pid`] never reads a pid that is gone.
    pub async fn start_again(&self, id: &str) -> Result<(), RuntimeError> {
        self.fresh_pid_file()?;
        process::output(&self.program, &["start", id], COMMAND_TIMEOUT, false).await?;
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
    }

    /// The code of the container's first exit at or after `since` (Unix seconds), from podman's
    /// `died` event: for an exit whose `wait` was given up because the container was started again
    /// in place. `None` when the engine keeps no events (`events_logger = "none"`) or fails.
    pub async fn exit_code_since(&self, id: &str, since: u64) -> Option<i32> {
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
        match process::output(&self.program, &args, COMMAND_TIMEOUT, false).await {
            Ok(Some(out)) => out.lines().find_map(|l| l.trim().parse().ok()),
            Ok(None) => None,
            Err(e) => {
                tracing::debug!(error = %e, "no exit code from the engine's events");
                None
            }
        }
    }

    /// The pid podman wrote for the container just started (`None` for the other engines, or when
    /// the file is missing or not a pid).
    pub(crate) fn started_pid(&self) -> Option<i32> {
        if self.kind != Kind::Podman {
            return None;
        }
        let text = crate::host::read::read_path_text(&self.pid_file, crate::host::read::Kind::State).ok()?;
        text.trim().parse().ok().filter(|&p: &i32| p > 0)
    }

    /// Waits until the container exits and returns its exit code.
    pub async fn wait(&self, id: &str) -> Result<i32, RuntimeError> {
        match self.kind {
            Kind::Podman | Kind::Docker => {
                let mut cmd = process::command(&self.program, &["wait", id]);
                let command = describe(&self.program, &["wait", id]);
                let out = cmd
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .output()
                    .await
                    .map_err(|source| RuntimeError::Spawn {
                        command: command.clone(),
                        source,
                    })?;
                if !out.status.success() {
                    return Err(failed(command, &out));
                }
                let text = String::from_utf8_lossy(&out.stdout);
                text.trim()
                    .lines()
                    .last()
                    .and_then(|l| l.trim().parse().ok())
                    .ok_or_else(|| RuntimeError::Output {
                        command,
                        message: format!("exit code expected, got {:?}", text.trim()),
                    })
            }
            Kind::Rkt => loop {
                match rkt::inspect(&self.program, &self.uuid_file).await? {
                    Some(c) if c.running => tokio::time::sleep(Duration::from_millis(500)).await,
                    Some(c) => return Ok(c.exit_code.unwrap_or(-1)),
                    None => return Ok(-1),
                }
            },
        }
    }

    /// Stops the container: SIGTERM, then SIGKILL after `grace` (the engine's own timer, backed by
    /// ours in case the engine hangs).
    pub async fn stop(&self, id: &str, grace: Duration) -> Result<(), RuntimeError> {
        let secs = grace.as_secs().to_string();
        let limit = grace + Duration::from_secs(30);
        match self.kind {
            Kind::Podman | Kind::Docker => {
                match process::output(&self.program, &["stop", "-t", &secs, id], limit, false).await {
                    Ok(_) => Ok(()),
                    Err(e) => {
                        tracing::warn!(error = %e, "graceful stop failed; killing the kubelet container");
                        process::output(&self.program, &["kill", id], COMMAND_TIMEOUT, true)
                            .await
                            .map(|_| ())
                    }
                }
            }
            Kind::Rkt => {
                let uuid_arg = format!("--uuid-file={}", self.uuid_file.display());
                process::output(&self.program, &["stop", &uuid_arg], COMMAND_TIMEOUT, true).await?;
                let waited = tokio::time::timeout(grace, self.wait(id)).await;
                if waited.is_err() {
                    tracing::warn!(
                        grace = grace.as_secs(),
                        "kubelet pod did not stop in time; forcing"
                    );
                    process::output(
                        &self.program,
                        &["stop", "--force", &uuid_arg],
                        COMMAND_TIMEOUT,
                        true,
                    )
                    .await?;
                }
                Ok(())
            }
        }
    }

    /// Removes the container (stopped or not); a missing one is not an error.
    pub async fn remove(&self, id: &str) -> Result<(), RuntimeError> {
        match self.kind {
            Kind::Podman | Kind::Docker => {
                process::output(&self.program, &["rm", "-f", id], COMMAND_TIMEOUT, true)
                    .await
                    .map(|_| ())
            }
            Kind::Rkt => {
                let uuid_arg = format!("--uuid-file={}", self.uuid_file.display());
                process::output(&self.program, &["rm", &uuid_arg], COMMAND_TIMEOUT, true).await?;
                let _ = std::fs::remove_file(&self.uuid_file);
                let _ = std::fs::remove_file(rkt::hash_file(&self.uuid_file));
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detect_prefers_podman_and_reports_what_it_looked_for() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().expect("tempdir");
        let uuid = Path::new("/var/cache/kubelet-pod.uuid");
        let pid = Path::new("/run/nodeward/kubelet.pid");
        let path = t.path().display().to_string();
        let err = Runtime::detect(RuntimeChoice::Auto, &path, uuid, pid).expect_err("none");
        assert!(err.to_string().contains("podman, docker, rkt"), "{err}");
        for name in ["docker", "rkt"] {
            let p = t.path().join(name);
            std::fs::write(&p, "#!/bin/sh\n").expect("write");
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        assert_eq!(
            Runtime::detect(RuntimeChoice::Auto, &path, uuid, pid)
                .expect("docker")
                .kind,
            Kind::Docker
        );
        assert_eq!(
            Runtime::detect(RuntimeChoice::Rkt, &path, uuid, pid)
                .expect("rkt")
                .kind,
            Kind::Rkt
        );
        assert!(Runtime::detect(RuntimeChoice::Podman, &path, uuid, pid).is_err());
    }
}
