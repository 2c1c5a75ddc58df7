//! The container engines that can run the kubelet, behind one interface: podman (Fedora CoreOS),
//! docker (Flatcar) and rkt (Container Linux). Each is driven through its CLI, as Typhoon's units do;
//! the command lines are golden-tested against those units.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde::Serialize;
use tokio::process::Command;

use super::spec::{KubeletSpec, Mount, Only};
use crate::config::kubelet::RuntimeChoice;

/// The label carrying [`KubeletSpec::hash`].
pub const HASH_LABEL: &str = "io.nodeward.spec-hash";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Podman,
    Docker,
    Rkt,
}

impl Kind {
    pub fn program(self) -> &'static str {
        match self {
            Kind::Podman => "podman",
            Kind::Docker => "docker",
            Kind::Rkt => "rkt",
        }
    }
}

/// A runtime failure, naming the command that failed.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("no container runtime found (looked for {looked} in PATH)")]
    NotFound { looked: String },
    #[error("{command}: cannot run: {source}")]
    Spawn {
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{command}: exited with {status}: {stderr}")]
    Failed {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("{command}: timed out after {seconds} s")]
    Timeout { command: String, seconds: u64 },
    #[error("{command}: unexpected output: {message}")]
    Output { command: String, message: String },
    #[error("mkdir -p {path}: {source}")]
    Resolve {
        path: String,
        #[source]
        source: crate::root::RootError,
    },
    #[error("mount source {source_path} (for {target}) does not exist on this host")]
    MountSource { source_path: String, target: String },
    #[error("no kubelet image could be pulled: {}", .tried.join("; "))]
    NoImage { tried: Vec<String> },
    #[error(
        "{name}: the container changed since it was planned (planned for {planned}, found {found}): nothing done; plan again"
    )]
    Changed {
        name: String,
        planned: String,
        found: String,
    },
}

/// A local image, by the reference it was found or pulled under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    pub reference: String,
    /// Its content id (`sha256:…`); empty when the engine does not say (rkt).
    pub id: String,
}

/// A kubelet container as the runtime reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Container {
    pub id: String,
    pub running: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The image reference it was started from.
    pub image: String,
    /// The image's content id (`sha256:…`).
    pub image_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// The spec hash it was started with, if nodeward started it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec_hash: Option<String>,
    /// Its main process (the kubelet), in nodeward's pid namespace, while it runs.
    #[serde(skip)]
    pub pid: Option<i32>,
}

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
pub const PID_FILE: &str = "kubelet.pid";

/// Commands that only query or change runtime state get this long (a pull gets much longer).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);
const PULL_TIMEOUT: Duration = Duration::from_secs(900);

impl Runtime {
    /// The runtime configured, or with `auto` the first of podman, docker, rkt found in `path`
    /// (a `PATH`-style list).
    pub fn detect(
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
            Kind::Podman => engine_run_args(spec, image, hash, Some((replace, &self.pid_file))),
            Kind::Docker => engine_run_args(spec, image, hash, None),
            Kind::Rkt => rkt_run_args(spec, image, &self.uuid_file),
        }
    }

    /// The kubelet container, if one with the spec's name exists.
    pub async fn inspect(&self, name: &str) -> Result<Option<Container>, RuntimeError> {
        match self.kind {
            Kind::Podman | Kind::Docker => {
                let out = self
                    .output(&["container", "inspect", name], COMMAND_TIMEOUT, true)
                    .await?;
                let Some(stdout) = out else { return Ok(None) };
                parse_engine_inspect(&stdout).map_err(|message| RuntimeError::Output {
                    command: format!("{} container inspect {name}", self.kind.program()),
                    message,
                })
            }
            Kind::Rkt => self.rkt_inspect().await,
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
                    self.output(
                        &["fetch", "--insecure-options=image", &reference],
                        PULL_TIMEOUT,
                        false,
                    )
                    .await
                }
                _ => self.output(&["pull", image], PULL_TIMEOUT, false).await,
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
            _ => self
                .output(
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
            if let Some(dir) = self.pid_file.parent() {
                std::fs::create_dir_all(dir).map_err(|source| RuntimeError::Spawn {
                    command: format!("mkdir -p {}", dir.display()),
                    source,
                })?;
            }
        }
        match self.kind {
            Kind::Podman | Kind::Docker => {
                let refs: Vec<&str> = args.iter().map(String::as_str).collect();
                let out = self.output(&refs, PULL_TIMEOUT, false).await?.unwrap_or_default();
                let id = out.trim().lines().last().unwrap_or("").to_owned();
                if id.is_empty() {
                    return Err(RuntimeError::Output {
                        command: format!("{} run", self.kind.program()),
                        message: "no container id printed".into(),
                    });
                }
                Ok(id)
            }
            Kind::Rkt => self.rkt_start(&args, hash).await,
        }
    }

    /// Starts a container that exited again, in place (podman): no container is removed or created,
    /// so a restart is this one call. Its pid file is written anew; the last run's is removed first
    /// so that [`Runtime::started_pid`] never reads a pid that is gone.
    pub async fn start_again(&self, id: &str) -> Result<(), RuntimeError> {
        match std::fs::remove_file(&self.pid_file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                tracing::debug!(path = %self.pid_file.display(), error = %e, "cannot remove the old pid file");
            }
            _ => {}
        }
        self.output(&["start", id], COMMAND_TIMEOUT, false).await?;
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
        match self.output(&args, COMMAND_TIMEOUT, false).await {
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
    pub fn started_pid(&self) -> Option<i32> {
        if self.kind != Kind::Podman {
            return None;
        }
        let text = std::fs::read_to_string(&self.pid_file).ok()?;
        text.trim().parse().ok().filter(|&p: &i32| p > 0)
    }

    /// Waits until the container exits and returns its exit code.
    pub async fn wait(&self, id: &str) -> Result<i32, RuntimeError> {
        match self.kind {
            Kind::Podman | Kind::Docker => {
                let mut cmd = self.command(&["wait", id]);
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
                match self.rkt_inspect().await? {
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
                match self.output(&["stop", "-t", &secs, id], limit, false).await {
                    Ok(_) => Ok(()),
                    Err(e) => {
                        tracing::warn!(error = %e, "graceful stop failed; killing the kubelet container");
                        self.output(&["kill", id], COMMAND_TIMEOUT, true)
                            .await
                            .map(|_| ())
                    }
                }
            }
            Kind::Rkt => {
                let uuid_arg = format!("--uuid-file={}", self.uuid_file.display());
                self.output(&["stop", &uuid_arg], COMMAND_TIMEOUT, true).await?;
                let waited = tokio::time::timeout(grace, self.wait(id)).await;
                if waited.is_err() {
                    tracing::warn!(
                        grace = grace.as_secs(),
                        "kubelet pod did not stop in time; forcing"
                    );
                    self.output(&["stop", "--force", &uuid_arg], COMMAND_TIMEOUT, true)
                        .await?;
                }
                Ok(())
            }
        }
    }

    /// Removes the container (stopped or not); a missing one is not an error.
    pub async fn remove(&self, id: &str) -> Result<(), RuntimeError> {
        match self.kind {
            Kind::Podman | Kind::Docker => self
                .output(&["rm", "-f", id], COMMAND_TIMEOUT, true)
                .await
                .map(|_| ()),
            Kind::Rkt => {
                let uuid_arg = format!("--uuid-file={}", self.uuid_file.display());
                self.output(&["rm", &uuid_arg], COMMAND_TIMEOUT, true).await?;
                let _ = std::fs::remove_file(&self.uuid_file);
                let _ = std::fs::remove_file(self.hash_file());
                Ok(())
            }
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.args(args).stdin(Stdio::null()).kill_on_drop(true);
        without_unit_env(&mut cmd);
        cmd
    }

    /// Runs a command to completion. `Ok(None)` when it failed and `missing_ok` says that failure
    /// means "no such object" (exit status 1 or 125 with such a message, or any failure of
    /// `image exists`/`image inspect`, whose only answer is the status).
    async fn output(
        &self,
        args: &[&str],
        limit: Duration,
        missing_ok: bool,
    ) -> Result<Option<String>, RuntimeError> {
        let command = describe(&self.program, args);
        let mut cmd = self.command(args);
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let out = match tokio::time::timeout(limit, cmd.output()).await {
            Err(_) => {
                return Err(RuntimeError::Timeout {
                    command,
                    seconds: limit.as_secs(),
                });
            }
            Ok(Err(source)) => return Err(RuntimeError::Spawn { command, source }),
            Ok(Ok(out)) => out,
        };
        if out.status.success() {
            return Ok(Some(String::from_utf8_lossy(&out.stdout).into_owned()));
        }
        let stderr = String::from_utf8_lossy(&out.stderr).to_ascii_lowercase();
        let is_query = args.first() == Some(&"image");
        if missing_ok && (is_query || stderr.contains("no such") || stderr.contains("not found")) {
            return Ok(None);
        }
        Err(failed(command, &out))
    }

    fn hash_file(&self) -> PathBuf {
        let mut name = self.uuid_file.as_os_str().to_owned();
        name.push(".spec-hash");
        PathBuf::from(name)
    }

    async fn rkt_start(&self, args: &[String], hash: &str) -> Result<String, RuntimeError> {
        let _ = std::fs::remove_file(&self.uuid_file);
        if let Some(dir) = self.uuid_file.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        std::fs::write(self.hash_file(), hash).map_err(|source| RuntimeError::Spawn {
            command: format!("write {}", self.hash_file().display()),
            source,
        })?;
        let command = describe(
            &self.program,
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        let mut cmd = Command::new(&self.program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        without_unit_env(&mut cmd);
        let mut child = cmd.spawn().map_err(|source| RuntimeError::Spawn {
            command: command.clone(),
            source,
        })?;
        // The uuid file appears once the pod is prepared.
        for _ in 0..600 {
            if let Ok(uuid) = std::fs::read_to_string(&self.uuid_file) {
                if !uuid.trim().is_empty() {
                    // tokio reaps the child when it exits; the pod is watched through its uuid.
                    drop(child);
                    return Ok(uuid.trim().to_owned());
                }
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(RuntimeError::Failed {
                    command,
                    status: status.to_string(),
                    stderr: "exited before saving the pod uuid".into(),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = child.start_kill();
        Err(RuntimeError::Timeout { command, seconds: 60 })
    }

    async fn rkt_inspect(&self) -> Result<Option<Container>, RuntimeError> {
        let Ok(uuid) = std::fs::read_to_string(&self.uuid_file) else {
            return Ok(None);
        };
        let uuid = uuid.trim().to_owned();
        if uuid.is_empty() {
            return Ok(None);
        }
        let Some(out) = self
            .output(&["status", "--format=json", &uuid], COMMAND_TIMEOUT, true)
            .await?
        else {
            return Ok(None);
        };
        let v: serde_json::Value = serde_json::from_str(&out).map_err(|e| RuntimeError::Output {
            command: format!("rkt status {uuid}"),
            message: e.to_string(),
        })?;
        let state = v["state"].as_str().unwrap_or("");
        let app = &v["apps"][0];
        Ok(Some(Container {
            id: uuid,
            running: state == "running",
            exit_code: app["exit_code"].as_i64().and_then(|c| i32::try_from(c).ok()),
            image: app["image_name"].as_str().unwrap_or("").to_owned(),
            image_id: app["image_id"].as_str().unwrap_or("").to_owned(),
            started_at: v["started_at"].as_i64().map(|t| t.to_string()),
            spec_hash: std::fs::read_to_string(self.hash_file())
                .ok()
                .map(|h| h.trim().to_owned()),
            pid: None,
        }))
    }
}

/// The engine must not inherit nodeward's sd_notify socket: podman hands `NOTIFY_SOCKET` to conmon
/// or the container, whose messages systemd then rejects (or, with NotifyAccess=all, believes).
fn without_unit_env(cmd: &mut Command) {
    for var in [
        "NOTIFY_SOCKET",
        "WATCHDOG_USEC",
        "WATCHDOG_PID",
        "LISTEN_FDS",
        "LISTEN_PID",
        "LISTEN_FDNAMES",
    ] {
        cmd.env_remove(var);
    }
}

fn failed(command: String, out: &std::process::Output) -> RuntimeError {
    RuntimeError::Failed {
        command,
        status: out.status.to_string(),
        stderr: String::from_utf8_lossy(&out.stderr)
            .trim()
            .chars()
            .take(400)
            .collect(),
    }
}

fn describe(program: &Path, args: &[&str]) -> String {
    let name = program.file_name().map_or_else(
        || program.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let mut s = name;
    for a in args.iter().take(4) {
        s.push(' ');
        s.push_str(a);
    }
    if args.len() > 4 {
        s.push_str(" …");
    }
    s
}

fn find_in_path(program: &str, path: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    path.split(':').filter(|d| !d.is_empty()).find_map(|dir| {
        let candidate = Path::new(dir).join(program);
        let meta = std::fs::metadata(&candidate).ok()?;
        (meta.is_file() && meta.permissions().mode() & 0o111 != 0).then_some(candidate)
    })
}

/// `podman run` / `docker run -d`, with Typhoon's flags and mounts. `podman`: `None` for docker,
/// else whether `--replace` is given and where `--pidfile` writes the kubelet's pid. The image is
/// always made present before (`--pull=never`): a run never pulls on its own, so a missing image is
/// one clear error, and the mirrors are tried in order by [`Runtime::ensure_image`].
fn engine_run_args(
    spec: &KubeletSpec,
    image: &str,
    hash: &str,
    podman: Option<(bool, &Path)>,
) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "run".into(),
        "--detach".into(),
        "--name".into(),
        spec.name.clone(),
    ];
    if podman.is_some_and(|(replace, _)| replace) {
        a.push("--replace".into());
    }
    a.push("--pull=never".into());
    if let Some((_, pid_file)) = podman {
        a.extend([
            "--pidfile".into(),
            pid_file.display().to_string(),
            "--log-driver".into(),
            "k8s-file".into(),
        ]);
    }
    let podman = podman.is_some();
    a.extend([
        "--label".into(),
        format!("{HASH_LABEL}={hash}"),
        "--privileged".into(),
        "--pid".into(),
        "host".into(),
        "--network".into(),
        "host".into(),
    ]);
    for m in spec.mounts.iter().filter(|m| match m.only {
        Only::All => true,
        Only::Podman => podman,
        Only::Rkt => false,
    }) {
        a.push("--volume".into());
        a.push(volume(m, podman));
    }
    a.push(image.to_owned());
    a.extend(spec.args.iter().cloned());
    a
}

fn volume(m: &Mount, podman: bool) -> String {
    let mut opts = Vec::new();
    if m.read_only {
        opts.push("ro");
    }
    if m.rshared {
        opts.push("rshared");
    }
    // docker on Flatcar has no SELinux: Typhoon's docker unit drops `z`.
    if m.relabel && podman {
        opts.push("z");
    }
    let mut s = format!("{}:{}", m.source, m.target);
    if !opts.is_empty() {
        s.push(':');
        s.push_str(&opts.join(","));
    }
    s
}

/// `rkt run` with the fly stage1, as Typhoon's Container Linux unit.
fn rkt_run_args(spec: &KubeletSpec, image: &str, uuid_file: &Path) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "run".into(),
        format!("--uuid-file-save={}", uuid_file.display()),
        "--stage1-from-dir=stage1-fly.aci".into(),
        "--hosts-entry".into(),
        "host".into(),
        "--insecure-options=image".into(),
    ];
    for m in spec.mounts.iter().filter(|m| m.only != Only::Podman) {
        let name = m.target.trim_start_matches('/').replace(['/', '.'], "-");
        let mut v = format!("{name},kind=host,source={}", m.source);
        if m.read_only {
            v.push_str(",readOnly=true");
        }
        if m.rshared {
            v.push_str(",recursive=true");
        }
        a.extend([
            "--volume".into(),
            v,
            "--mount".into(),
            format!("volume={name},target={}", m.target),
        ]);
    }
    a.push(format!("docker://{image}"));
    a.push("--".into());
    a.extend(spec.args.iter().cloned());
    a
}

/// Reads `podman/docker container inspect` output (a JSON array of one object).
fn parse_engine_inspect(stdout: &str) -> Result<Option<Container>, String> {
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).map_err(|e| e.to_string())?;
    let Some(c) = v.as_array().and_then(|a| a.first()) else {
        return Ok(None);
    };
    let id = c["Id"].as_str().ok_or("no Id")?.to_owned();
    let state = &c["State"];
    let running = state["Running"].as_bool().unwrap_or(false);
    let label = &c["Config"]["Labels"][HASH_LABEL];
    Ok(Some(Container {
        id,
        running,
        exit_code: (!running)
            .then(|| state["ExitCode"].as_i64().and_then(|x| i32::try_from(x).ok()))
            .flatten(),
        // podman: ImageName; docker: Config.Image.
        image: c["ImageName"]
            .as_str()
            .or_else(|| c["Config"]["Image"].as_str())
            .unwrap_or("")
            .to_owned(),
        image_id: c["Image"].as_str().unwrap_or("").to_owned(),
        started_at: state["StartedAt"].as_str().map(str::to_owned),
        spec_hash: label.as_str().map(str::to_owned),
        pid: state["Pid"]
            .as_i64()
            .and_then(|p| i32::try_from(p).ok())
            .filter(|&p| running && p > 0),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inspect_output_of_podman_and_docker() {
        let podman = r#"[{"Id":"abc","Image":"sha256:1111","ImageName":"quay.io/poseidon/kubelet@sha256:22",
            "State":{"Status":"running","Running":true,"Pid":4242,"ExitCode":0,"StartedAt":"2026-11-22T10:00:00Z"},
            "Config":{"Labels":{"io.nodeward.spec-hash":"h1"}}}]"#;
        let c = parse_engine_inspect(podman).expect("parse").expect("container");
        assert_eq!(c.id, "abc");
        assert!(c.running);
        assert_eq!(c.exit_code, None);
        assert_eq!(c.image, "quay.io/poseidon/kubelet@sha256:22");
        assert_eq!(c.spec_hash.as_deref(), Some("h1"));
        assert_eq!(c.pid, Some(4242));
        let docker = r#"[{"Id":"def","Image":"sha256:2222","State":{"Running":false,"Pid":0,"ExitCode":137},
            "Config":{"Image":"psdn/kubelet","Labels":null}}]"#;
        let c = parse_engine_inspect(docker).expect("parse").expect("container");
        assert_eq!(c.exit_code, Some(137));
        assert_eq!(c.pid, None);
        assert_eq!(c.image, "psdn/kubelet");
        assert_eq!(c.spec_hash, None);
        assert_eq!(parse_engine_inspect("[]").expect("empty"), None);
        assert!(parse_engine_inspect("not json").is_err());
    }

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
