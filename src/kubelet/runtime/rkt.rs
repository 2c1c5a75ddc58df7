//! rkt, the engine of Typhoon's early Container Linux nodes: the pod runs as a child (moved into a
//! scope of its own under systemd, its output in the journal) whose uuid file names it; the spec
//! hash is kept next to that file. rkt owns both files. It lists no local images (a start
//! fetches), and waits by polling the pod's status.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

use super::engine::{Engine, Fut, Paths};
use super::process::{self, COMMAND_TIMEOUT, PULL_TIMEOUT, describe, output, without_unit_env};
use super::types::{Container, Kind, RuntimeError};
use crate::kubelet::container::{KubeletSpec, Mount, Only, Placed};
use crate::kubelet::pull_source::Transport;

/// This engine, by its name (its program's, and `kubelet.runtime = "rkt"`).
pub(crate) const KIND: Kind = Kind::new("rkt");

/// What rkt fly needs beyond the shared table: its stage1 does not share the host's /etc, so DNS
/// and the CAs come in as mounts (Typhoon's Container Linux unit), after the OS release file.
pub(super) fn own_mounts() -> Vec<Placed> {
    vec![Placed {
        after: "/etc/os-release",
        mounts: vec![
            Mount::new("/etc/resolv.conf").ro().only(Only::Engine(KIND)),
            Mount::new("/etc/ssl/certs").ro().only(Only::Engine(KIND)),
            Mount::new("/usr/share/ca-certificates")
                .ro()
                .only(Only::Engine(KIND)),
        ],
    }]
}

#[derive(Debug)]
pub(crate) struct Rkt {
    uuid_file: PathBuf,
}

impl Rkt {
    pub(super) fn new(paths: &Paths) -> Rkt {
        Rkt {
            uuid_file: paths.uuid_file.clone(),
        }
    }

    fn uuid_arg(&self) -> String {
        format!("--uuid-file={}", self.uuid_file.display())
    }
}

impl Engine for Rkt {
    fn kind(&self) -> Kind {
        KIND
    }

    fn run_args(&self, spec: &KubeletSpec, image: &str, _hash: &str, _replace: bool) -> Vec<String> {
        run_args(spec, image, &self.uuid_file)
    }

    /// The pod the uuid file names (the name is rkt's: one pod per file).
    fn inspect<'a>(
        &'a self,
        program: &'a Path,
        _name: &'a str,
    ) -> Fut<'a, Result<Option<Container>, RuntimeError>> {
        Box::pin(inspect(program, &self.uuid_file))
    }

    fn image_id<'a>(&'a self, _program: &'a Path, _image: &'a str) -> Fut<'a, Option<String>> {
        Box::pin(async { None })
    }

    fn image_digests<'a>(&'a self, _program: &'a Path, _image: &'a str) -> Fut<'a, Vec<String>> {
        Box::pin(async { Vec::new() })
    }

    /// rkt's `--insecure-options`: `image` always (a docker image carries no signature rkt could
    /// check), `http` too for a plain-http source (without it rkt speaks https to it and fails
    /// with `fetch: EOF`). It has no per-fetch CA option: a private-CA source is passed over.
    fn pull_options(&self, transport: &Transport, _ca_dir: Option<&Path>) -> Option<Vec<String>> {
        match transport {
            Transport::Https => Some(vec!["--insecure-options=image".to_owned()]),
            Transport::PlainHttp => Some(vec!["--insecure-options=image,http".to_owned()]),
            Transport::Ca(_) => None,
        }
    }

    /// `rkt fetch --pull-policy=new`: the store's copy when it has one. rkt's default for `fetch`
    /// is `update`, which downloads a docker image whole again every time (measured: every blob
    /// requested again), and rkt lists no images, so every start of the kubelet would.
    fn pull<'a>(
        &'a self,
        program: &'a Path,
        options: &'a [String],
        image: &'a str,
        on_line: &'a (dyn Fn(&str) + Send + Sync),
    ) -> Fut<'a, Result<(), RuntimeError>> {
        Box::pin(async move {
            let reference = format!("docker://{image}");
            let insecure = options.first().map_or("--insecure-options=image", String::as_str);
            process::streamed(
                program,
                &["fetch", "--pull-policy=new", insecure, &reference],
                PULL_TIMEOUT,
                on_line,
            )
            .await
        })
    }

    /// rkt's image store does not report a size nodeward could read.
    fn image_size<'a>(&'a self, _program: &'a Path, _image: &'a str) -> Fut<'a, Option<u64>> {
        Box::pin(async { None })
    }

    fn start<'a>(
        &'a self,
        program: &'a Path,
        name: &'a str,
        args: &'a [String],
        hash: &'a str,
        replace: bool,
    ) -> Fut<'a, Result<String, RuntimeError>> {
        Box::pin(async move {
            if replace {
                self.remove(program, name).await?;
            }
            start(program, name, &self.uuid_file, args, hash).await
        })
    }

    fn wait<'a>(&'a self, program: &'a Path, _id: &'a str) -> Fut<'a, Result<i32, RuntimeError>> {
        Box::pin(async move {
            loop {
                match inspect(program, &self.uuid_file).await? {
                    Some(c) if c.running => tokio::time::sleep(Duration::from_millis(500)).await,
                    Some(c) => return Ok(c.exit_code.unwrap_or(-1)),
                    None => return Ok(-1),
                }
            }
        })
    }

    fn stop<'a>(
        &'a self,
        program: &'a Path,
        id: &'a str,
        grace: Duration,
    ) -> Fut<'a, Result<(), RuntimeError>> {
        Box::pin(async move {
            let uuid_arg = self.uuid_arg();
            output(program, &["stop", &uuid_arg], COMMAND_TIMEOUT, true).await?;
            if tokio::time::timeout(grace, self.wait(program, id)).await.is_err() {
                tracing::warn!(
                    grace = grace.as_secs(),
                    "kubelet pod did not stop in time; forcing"
                );
                output(program, &["stop", "--force", &uuid_arg], COMMAND_TIMEOUT, true).await?;
            }
            Ok(())
        })
    }

    fn remove<'a>(&'a self, program: &'a Path, _id: &'a str) -> Fut<'a, Result<(), RuntimeError>> {
        Box::pin(async move {
            let uuid_arg = self.uuid_arg();
            output(program, &["rm", &uuid_arg], COMMAND_TIMEOUT, true).await?;
            let _ = std::fs::remove_file(&self.uuid_file);
            let _ = std::fs::remove_file(hash_file(&self.uuid_file));
            let _ = std::fs::remove_file(exit_file(&self.uuid_file));
            let _ = std::fs::remove_file(image_file(&self.uuid_file));
            Ok(())
        })
    }

    fn lists_images(&self) -> bool {
        false
    }

    /// rkt fetches ACIs and docker images itself; it has no command that loads an archive.
    fn load_args(&self) -> Option<&'static [&'static str]> {
        None
    }
}

/// `rkt run` with the fly stage1, as Typhoon's Container Linux unit.
/// The mounts rkt takes: the shared ones and its own.
fn takes(only: Only) -> bool {
    only.for_engine(KIND)
}

pub(super) fn run_args(spec: &KubeletSpec, image: &str, uuid_file: &Path) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "run".into(),
        format!("--uuid-file-save={}", uuid_file.display()),
        "--stage1-from-dir=stage1-fly.aci".into(),
        "--hosts-entry".into(),
        "host".into(),
        "--insecure-options=image".into(),
    ];
    for m in spec.mounts.iter().filter(|m| takes(m.only)) {
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

pub(crate) fn hash_file(uuid_file: &Path) -> PathBuf {
    let mut name = uuid_file.as_os_str().to_owned();
    name.push(".spec-hash");
    PathBuf::from(name)
}

/// Where the reference the pod was started from is kept (rkt's status names no image).
pub(crate) fn image_file(uuid_file: &Path) -> PathBuf {
    let mut name = uuid_file.as_os_str().to_owned();
    name.push(".image");
    PathBuf::from(name)
}

/// Where the pod's exit code is kept (`UUID CODE`): the real rkt's `status --format=json` gives no
/// `exit_code` for a fly pod (fly records no app status; measured with rkt v1.30.0 and its fly
/// stage1: an app exiting 3 shows `"state":"exited"` and no code), while the foreground `rkt run`
/// exits with the app's code. So the code is taken from the `run` process nodeward started.
pub(crate) fn exit_file(uuid_file: &Path) -> PathBuf {
    let mut name = uuid_file.as_os_str().to_owned();
    name.push(".exit");
    PathBuf::from(name)
}

/// The code the pod `uuid` exited with, as its `rkt run` process said.
fn recorded_exit(uuid_file: &Path, uuid: &str) -> Option<i32> {
    let text =
        crate::host::read::read_path_text(&exit_file(uuid_file), crate::host::read::Kind::State).ok()?;
    let (who, code) = text.trim().split_once(' ')?;
    (who == uuid).then(|| code.parse().ok()).flatten()
}

/// The pod's output: the journal under the container's name (as podman's journald log driver
/// gives it, so `journalctl -t kubelet` reads either engine's kubelet), or nowhere without one.
fn journal_output(name: &str) -> (Stdio, Stdio) {
    use crate::host::journal_stream::{OPEN_LIMIT, SOCKET, stream, stream_within};
    let identifier = name.to_owned();
    let opened = stream_within(OPEN_LIMIT, move || stream(Path::new(SOCKET), &identifier));
    match opened.and_then(|fd| Ok((fd.try_clone()?, fd))) {
        Ok((out, err)) => (Stdio::from(out), Stdio::from(err)),
        Err(e) => {
            tracing::debug!(error = %e, "no journal stream: the kubelet pod's output is dropped");
            (Stdio::null(), Stdio::null())
        }
    }
}

/// Under systemd, the pod leaves nodeward's cgroup for a scope of its own (`NAME-rkt-PID.scope`),
/// so that stopping or restarting nodeward leaves the kubelet running, as it leaves podman's:
/// nodeward.service's `KillMode=mixed` SIGKILLs whatever stays in its cgroup. Moved at once, before
/// rkt forks (what it starts later is started in the scope). Not under systemd (by hand, a test),
/// or when the bus refuses, the pod stays where it is: said, not fatal.
async fn own_scope(name: &str, pid: u32) {
    if !crate::host::dbus::in_a_service() {
        return;
    }
    let unit = format!("{name}-rkt-{pid}.scope");
    let description = format!("the {name} pod run by nodeward through rkt");
    let asked = unit.clone();
    let moved =
        tokio::task::spawn_blocking(move || crate::host::dbus::move_to_scope(&asked, pid, &description))
            .await;
    match moved {
        Ok(Ok(())) => tracing::info!(%unit, pid, "the kubelet pod runs in its own scope"),
        Ok(Err(e)) => tracing::warn!(%unit, pid, error = %e,
            "the kubelet pod stays in nodeward's cgroup: stopping or restarting nodeward stops it"),
        Err(e) => tracing::warn!(%unit, pid, error = %e, "moving the kubelet pod to its scope failed"),
    }
}

pub(super) async fn start(
    program: &Path,
    name: &str,
    uuid_file: &Path,
    args: &[String],
    hash: &str,
) -> Result<String, RuntimeError> {
    let _ = std::fs::remove_file(uuid_file);
    let _ = std::fs::remove_file(exit_file(uuid_file));
    if let Some(dir) = uuid_file.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    std::fs::write(hash_file(uuid_file), hash).map_err(|source| RuntimeError::Spawn {
        command: format!("write {}", hash_file(uuid_file).display()),
        source,
    })?;
    // Only `kubelet show` and `status` read it: a failure to keep it costs the image's name there.
    let _ = std::fs::write(image_file(uuid_file), started_image(args).unwrap_or_default());
    let command = describe(program, &args.iter().map(String::as_str).collect::<Vec<_>>());
    let mut cmd = Command::new(program);
    let (stdout, stderr) = journal_output(name);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0);
    without_unit_env(&mut cmd);
    let mut child = cmd.spawn().map_err(|source| RuntimeError::Spawn {
        command: command.clone(),
        source,
    })?;
    if let Some(pid) = child.id() {
        own_scope(name, pid).await;
    }
    // The uuid file appears once the pod is prepared.
    for _ in 0..600 {
        if let Ok(uuid) = crate::host::read::read_path_text(uuid_file, crate::host::read::Kind::State) {
            if !uuid.trim().is_empty() {
                // The pod is watched through its uuid; its code comes from this process's exit.
                let (uuid, exit) = (uuid.trim().to_owned(), exit_file(uuid_file));
                let pod = uuid.clone();
                tokio::spawn(async move {
                    if let Ok(status) = child.wait().await {
                        use std::os::unix::process::ExitStatusExt;
                        let code = status
                            .code()
                            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
                        let _ = std::fs::write(&exit, format!("{pod} {code}\n"));
                    }
                });
                return Ok(uuid);
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

pub(super) async fn inspect(program: &Path, uuid_file: &Path) -> Result<Option<Container>, RuntimeError> {
    let Ok(uuid) = crate::host::read::read_path_text(uuid_file, crate::host::read::Kind::State) else {
        return Ok(None);
    };
    let uuid = uuid.trim().to_owned();
    if uuid.is_empty() {
        return Ok(None);
    }
    let asked = output(
        program,
        &["status", "--format=json", &uuid],
        COMMAND_TIMEOUT,
        true,
    )
    .await;
    let out = match asked {
        Ok(Some(out)) => out,
        Ok(None) => return Ok(None),
        // The uuid file is saved once the pod is prepared; until its stage1 has started, the real
        // rkt cannot say (`unable to print status: error converting pod: invalid creation time`,
        // exit 254; seen in the VM right after the kubelet's start). The pod is there: running
        // until its `rkt run` process said how it exited.
        Err(RuntimeError::Failed { stderr, .. }) if stderr.contains(PREPARING) => {
            let exit_code = recorded_exit(uuid_file, &uuid);
            return Ok(Some(Container {
                id: uuid,
                running: exit_code.is_none(),
                exit_code,
                image: recorded_image(uuid_file),
                image_id: String::new(),
                started_at: None,
                spec_hash: recorded_hash(uuid_file),
                pid: None,
            }));
        }
        Err(e) => return Err(e),
    };
    let v: serde_json::Value = serde_json::from_str(&out).map_err(|e| RuntimeError::Output {
        command: format!("rkt status {uuid}"),
        message: e.to_string(),
    })?;
    let state = v["state"].as_str().unwrap_or("");
    let app = &v["apps"][0];
    let recorded = (state != "running")
        .then(|| recorded_exit(uuid_file, &uuid))
        .flatten();
    // rkt's status names no image (measured: v1.30.0 gives `image_id` only): the reference the
    // pod was started from, as kept at its start.
    let image = match app["image_name"].as_str() {
        Some(name) if !name.is_empty() => name.to_owned(),
        _ => recorded_image(uuid_file),
    };
    Ok(Some(Container {
        id: uuid,
        running: state == "running",
        exit_code: app["exit_code"]
            .as_i64()
            .and_then(|c| i32::try_from(c).ok())
            .or(recorded),
        image,
        image_id: app["image_id"].as_str().unwrap_or("").to_owned(),
        started_at: v["started_at"].as_i64().map(|t| t.to_string()),
        spec_hash: recorded_hash(uuid_file),
        pid: None,
    }))
}

/// What the real rkt says of a pod prepared but not yet started.
const PREPARING: &str = "invalid creation time";

fn recorded_hash(uuid_file: &Path) -> Option<String> {
    crate::host::read::read_path_text(&hash_file(uuid_file), crate::host::read::Kind::State)
        .ok()
        .map(|h| h.trim().to_owned())
}

fn recorded_image(uuid_file: &Path) -> String {
    crate::host::read::read_path_text(&image_file(uuid_file), crate::host::read::Kind::State)
        .map(|i| i.trim().to_owned())
        .unwrap_or_default()
}

/// The image reference the pod was started from (`rkt run`'s `docker://` argument, without it).
fn started_image(args: &[String]) -> Option<&str> {
    args.iter().find_map(|a| a.strip_prefix("docker://"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_sources_get_rkts_http_option_and_private_cas_none() {
        let rkt = Rkt {
            uuid_file: PathBuf::from("/var/cache/kubelet-pod.uuid"),
        };
        let options = |t: Transport| rkt.pull_options(&t, None);
        assert_eq!(
            options(Transport::Https),
            Some(vec!["--insecure-options=image".to_owned()])
        );
        // Without `http` the real rkt v1.30.0 speaks https to a plain-http registry: `fetch: EOF`.
        assert_eq!(
            options(Transport::PlainHttp),
            Some(vec!["--insecure-options=image,http".to_owned()])
        );
        assert_eq!(options(Transport::Ca("/etc/ca.pem".into())), None);
    }
}
