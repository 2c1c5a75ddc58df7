//! The container engines that can run the kubelet, behind one trait ([`engine::Engine`]): podman
//! (Fedora CoreOS), docker (Flatcar) and rkt (Container Linux), each in its own file. Each is
//! driven through its CLI, as Typhoon's units do; the command lines are golden-tested against
//! those units. [`Runtime`] is an engine with the program that runs it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

mod conmon;
mod docker;
mod engine;
mod engine_cli;
mod podman;
mod process;
pub(crate) use process::find_in_path;
pub mod pull;
mod registry;
mod rkt;
mod types;

use engine::{Engine, Paths};
pub use pull::{PullDone, PullProgress};
use registry::ENGINES;
pub use types::{Container, HASH_LABEL, Image, Kind, RuntimeError};

/// Typhoon's mount table: the mounts every engine takes, each engine's own (declared in its file,
/// listed in the registry) placed where Typhoon's units list them. Its order and tags are in the
/// hash running kubelets carry (`tests/kubelet_cmdline.rs` pins it).
pub fn default_mounts() -> Vec<Mount> {
    super::container::compose(registry::own_mounts())
}

/// How often a pull in progress is journalled.
const PULL_LOG_EVERY: Duration = Duration::from_secs(10);

use super::container::{KubeletSpec, Mount, Only};
use super::pull_source::{PullSource, Transport};
use crate::host::state::StateFile;
use crate::kubelet::settings::input::RuntimeChoice;
use crate::root::HostRoot;

/// One engine and where its CLI is.
#[derive(Debug, Clone)]
pub struct Runtime {
    engine: Arc<dyn Engine>,
    pub program: PathBuf,
    /// Where the command line of the last start is recorded (`StateFile::KubeletArgv`).
    state_root: HostRoot,
}

impl Runtime {
    /// The engine `kind` run by `program`; rkt keeps its pod's uuid in `uuid_file`, podman the
    /// kubelet's pid in `pid_file` (`StateFile::KubeletPid` resolved below `root`, where the last
    /// command line is also recorded).
    pub fn new(kind: Kind, program: PathBuf, uuid_file: &Path, pid_file: &Path, root: &HostRoot) -> Runtime {
        let paths = Paths {
            uuid_file: uuid_file.to_path_buf(),
            pid_file: pid_file.to_path_buf(),
        };
        Runtime {
            engine: registry::make(kind, &paths),
            program,
            state_root: root.clone(),
        }
    }

    /// The runtime configured, or with `auto` the first engine of the registry found in `path`
    /// (a `PATH`-style list).
    pub(crate) fn detect(
        choice: RuntimeChoice,
        path: &str,
        uuid_file: &Path,
        pid_file: &Path,
        root: &HostRoot,
    ) -> Result<Runtime, RuntimeError> {
        let wanted = |kind: Kind| match choice {
            RuntimeChoice::Auto => true,
            RuntimeChoice::Engine(named) => kind == named,
        };
        let kinds: Vec<Kind> = ENGINES
            .iter()
            .map(|(k, _, _)| *k)
            .filter(|k| wanted(*k))
            .collect();
        for &kind in &kinds {
            if let Some(program) = find_in_path(kind.program(), path) {
                return Ok(Runtime::new(kind, program, uuid_file, pid_file, root));
            }
        }
        Err(RuntimeError::NotFound {
            looked: kinds.iter().map(|k| k.program()).collect::<Vec<_>>().join(", "),
        })
    }

    pub(crate) fn kind(&self) -> Kind {
        self.engine.kind()
    }

    /// The engine's name, as its program is called.
    pub fn name(&self) -> &'static str {
        self.kind().program()
    }

    /// Whether the engine mounts what the mount table marks `only`.
    pub(crate) fn takes(&self, only: Only) -> bool {
        self.engine.takes(only)
    }

    /// Whether an exited container is started again in place (and its exit code asked later).
    pub(crate) fn restarts_in_place(&self) -> bool {
        self.engine.restarts_in_place()
    }

    /// Whether a start with `replace` removes a stopped container within the same call.
    pub(crate) fn replaces_in_start(&self) -> bool {
        self.engine.replaces_in_start()
    }

    /// Whether local images can be looked up before pulling.
    pub(crate) fn lists_images(&self) -> bool {
        self.engine.lists_images()
    }

    /// Whether nothing of the engine's can be running under `name` ([`Engine::surely_not_running`]).
    pub(crate) fn surely_not_running(&self, name: &str) -> bool {
        self.engine.surely_not_running(&self.program, name)
    }

    /// The program and arguments that load an image archive from standard input, if the engine
    /// has such a command.
    pub(crate) fn load_command(&self) -> Option<(&Path, &'static [&'static str])> {
        self.engine.load_args().map(|args| (self.program.as_path(), args))
    }

    /// The arguments that start the kubelet container (after the program name). `replace`: a
    /// stopped container may hold the name.
    pub fn run_args(&self, spec: &KubeletSpec, image: &str, hash: &str, replace: bool) -> Vec<String> {
        self.engine.run_args(spec, image, hash, replace)
    }

    /// The kubelet container, if one with the spec's name exists.
    pub async fn inspect(&self, name: &str) -> Result<Option<Container>, RuntimeError> {
        self.engine.inspect(&self.program, name).await
    }

    /// Makes one of the sources' images available locally: present already (the configured
    /// references first), or the first that pulls, in order. A source this engine cannot reach
    /// from its command line is passed over, and said. A pull's progress goes to `progress` as it
    /// moves (`None` once it is over); what the pull came to (size, time, rate) is returned with
    /// the image.
    pub(crate) async fn ensure_image(
        &self,
        sources: &[PullSource],
        progress: &(dyn Fn(Option<PullProgress>) + Send + Sync),
    ) -> Result<(Image, Option<PullDone>), RuntimeError> {
        if self.lists_images() {
            let configured = sources.iter().filter(|s| s.mirror.is_none());
            let mirrored = sources.iter().filter(|s| s.mirror.is_some());
            for source in configured.chain(mirrored) {
                if let Some(id) = self.image_id(&source.reference).await {
                    let image = Image {
                        reference: source.reference.clone(),
                        id,
                    };
                    return Ok((image, None));
                }
            }
        }
        // Not listed here (or an engine that lists none: rkt): a pull. A fleet powered on together
        // spreads its first ones (the boot gate).
        let gate = crate::jitter::until_boot_gate();
        if !gate.is_zero() {
            tracing::info!(wait = ?gate, "pulling the kubelet image at this node's place in the fleet's boot spread");
            tokio::time::sleep(gate).await;
        }
        let mut tried = Vec::new();
        for source in sources {
            let image = &source.reference;
            let options = match self.pull_options(source) {
                Ok(options) => options,
                Err(why) => {
                    tracing::info!(%image, mirror = ?source.mirror, %why, "kubelet image source passed over");
                    tried.push(format!("{image}: {why}"));
                    continue;
                }
            };
            let pulled = self.pull(&options, image, progress).await;
            progress(None);
            match pulled {
                Ok(done) => {
                    let id = self.image_id(image).await.unwrap_or_default();
                    let image = Image {
                        reference: image.clone(),
                        id,
                    };
                    return Ok((image, Some(done)));
                }
                Err(e) => {
                    tracing::warn!(%image, mirror = ?source.mirror, error = %e, "kubelet image pull failed; trying the next source");
                    tried.push(format!("{image}: {e}"));
                }
            }
        }
        Err(RuntimeError::NoImage { tried })
    }

    /// Whether this engine's pulls can reach a host the way `transport` asks.
    pub(crate) fn reaches(&self, transport: &Transport) -> bool {
        self.engine
            .pull_options(transport, Some(Path::new("/")))
            .is_some()
    }

    /// The engine's options for reaching a source's host; for a CA, its copy where the engine
    /// reads it (`StateFile::MirrorCa`, rewritten at each pull: the file may have changed).
    fn pull_options(&self, source: &PullSource) -> Result<Vec<String>, String> {
        let ca_dir = match &source.transport {
            Transport::Ca(file) => Some(self.mirror_ca_dir(source, file)?),
            _ => None,
        };
        self.engine
            .pull_options(&source.transport, ca_dir.as_deref())
            .ok_or_else(|| {
                format!(
                    "{} cannot reach {} {} from its command line (its daemon's configuration must trust it)",
                    self.name(),
                    source.mirror.as_deref().unwrap_or("the registry"),
                    match source.transport {
                        Transport::PlainHttp => "over plain http",
                        _ => "with its own CA",
                    }
                )
            })
    }

    fn mirror_ca_dir(&self, source: &PullSource, file: &str) -> Result<PathBuf, String> {
        let host = source.reference.split('/').next().unwrap_or_default();
        let ca: crate::types::AbsPath = file.parse().map_err(|e| format!("CA {file:?}: {e}"))?;
        let pem = crate::host::read::read(&self.state_root, &ca, crate::host::read::Kind::Config)
            .map_err(|e| e.to_string())?;
        let copy = StateFile::MirrorCa(host.to_owned());
        copy.write(&self.state_root, &pem).map_err(|e| e.to_string())?;
        let path = copy.resolve(&self.state_root).map_err(|e| e.to_string())?;
        Ok(path.parent().map(Path::to_path_buf).unwrap_or(path))
    }

    /// Pulls one image, counting its layers as the engine prints them and journalling how it
    /// moves every 10 s; then its size and rate.
    async fn pull(
        &self,
        options: &[String],
        image: &str,
        progress: &(dyn Fn(Option<PullProgress>) + Send + Sync),
    ) -> Result<PullDone, RuntimeError> {
        let since = crate::clock::now();
        let started = std::time::Instant::now();
        let count = std::sync::Mutex::new((pull::LayerCount::default(), started));
        tracing::info!(%image, "pulling the kubelet image");
        progress(Some(pull::LayerCount::default().progress(image, since)));
        let on_line = |line: &str| {
            let Ok(mut c) = count.lock() else { return };
            if !c.0.line(line) {
                return;
            }
            let p = c.0.progress(image, since);
            if c.1.elapsed() >= PULL_LOG_EVERY {
                c.1 = std::time::Instant::now();
                tracing::info!(%image, layers_done = p.layers_done, layers_begun = p.layers_started,
                    "{}", pull::describe(&p, crate::clock::now()));
            }
            progress(Some(p));
        };
        self.engine.pull(&self.program, options, image, &on_line).await?;
        let layers = count.lock().map(|c| c.0.layers()).unwrap_or(0);
        let done = PullDone {
            image: image.to_owned(),
            at: crate::clock::now(),
            millis: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            layers,
            bytes: self.engine.image_size(&self.program, image).await,
        };
        tracing::info!(%image, millis = done.millis, bytes = ?done.bytes, layers, "{}", pull::describe_done(&done));
        Ok(done)
    }

    /// The content id of a local image (`sha256:…`), `None` when it is not present.
    pub(crate) async fn image_id(&self, image: &str) -> Option<String> {
        self.engine.image_id(&self.program, image).await
    }

    /// The registry digests the engine records for a local image (`name@sha256:…`); empty for an
    /// image that never came from a registry (imported), or under rkt.
    pub async fn image_digests(&self, image: &str) -> Vec<String> {
        self.engine.image_digests(&self.program, image).await
    }

    /// Starts the container detached (podman and docker keep it running on their own, so it
    /// outlives this process; rkt fly's pod is started in its own session and watched through its
    /// uuid). `replace`: a stopped container may hold the name and is removed first (by podman
    /// within the same `run --replace`). Without it, a name in use fails the run: nothing running
    /// is ever removed that was not seen.
    pub(crate) async fn start(
        &self,
        spec: &KubeletSpec,
        image: &str,
        hash: &str,
        replace: bool,
    ) -> Result<String, RuntimeError> {
        let args = self.run_args(spec, image, hash, replace);
        let started = self
            .engine
            .start(&self.program, &spec.name, &args, hash, replace)
            .await?;
        self.record_argv(&args);
        Ok(started)
    }

    /// Keeps the command line that started the running kubelet (no secret in it: flags, paths,
    /// the image). Written whole and atomically; a failure only costs `kubelet show`.
    fn record_argv(&self, args: &[String]) {
        let argv: Vec<String> = std::iter::once(self.program.display().to_string())
            .chain(args.iter().cloned())
            .collect();
        let written = serde_json::to_vec(&argv)
            .map_err(|e| e.to_string())
            .and_then(|json| {
                StateFile::KubeletArgv
                    .write(&self.state_root, &json)
                    .map_err(|e| e.to_string())
            });
        if let Err(e) = written {
            tracing::debug!(error = %e, "the kubelet's command line was not recorded");
        }
    }

    /// The command line [`Runtime::start`] last started the kubelet with, if recorded.
    pub fn started_argv(&self) -> Option<Vec<String>> {
        let text = StateFile::KubeletArgv.read(&self.state_root).ok()?;
        serde_json::from_slice(&text).ok()
    }

    /// Starts a container that exited again, in place (engines that can: see
    /// [`Runtime::restarts_in_place`]).
    pub(crate) async fn start_again(&self, id: &str) -> Result<(), RuntimeError> {
        self.engine.start_again(&self.program, id).await
    }

    /// The code of the container's first exit at or after `since` (Unix seconds), from the
    /// engine's events, for an exit whose `wait` was given up because the container was started
    /// again in place. `None` when the engine keeps no events or fails.
    pub(crate) async fn exit_code_since(&self, id: &str, since: u64) -> Option<i32> {
        self.engine.exit_code_since(&self.program, id, since).await
    }

    /// The pid of the container just started, when the engine writes it down.
    pub(crate) fn started_pid(&self) -> Option<i32> {
        self.engine.started_pid()
    }

    /// Waits until the container exits and returns its exit code.
    pub(crate) async fn wait(&self, id: &str) -> Result<i32, RuntimeError> {
        self.engine.wait(&self.program, id).await
    }

    /// Stops the container: SIGTERM, then SIGKILL after `grace`.
    pub(crate) async fn stop(&self, id: &str, grace: Duration) -> Result<(), RuntimeError> {
        self.engine.stop(&self.program, id, grace).await
    }

    /// Removes the container (stopped or not); a missing one is not an error.
    pub(crate) async fn remove(&self, id: &str) -> Result<(), RuntimeError> {
        self.engine.remove(&self.program, id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// podman reaches every mirror from its command line; docker only those its daemon trusts
    /// already (the control: the same transports refused).
    #[test]
    fn each_engine_reaches_the_mirrors_its_command_line_can() {
        let engine = |kind| {
            registry::make(
                kind,
                &Paths {
                    uuid_file: PathBuf::from("/u"),
                    pid_file: PathBuf::from("/p"),
                },
            )
        };
        let (podman, docker) = (engine(podman::KIND), engine(docker::KIND));
        let ca = Transport::Ca("/etc/pki/m.pem".into());
        let dir = Path::new("/run/nodeward/mirror-ca/m_8443");
        assert_eq!(podman.pull_options(&Transport::Https, None), Some(vec![]));
        assert_eq!(
            podman.pull_options(&Transport::PlainHttp, None),
            Some(vec!["--tls-verify=false".to_owned()])
        );
        assert_eq!(
            podman.pull_options(&ca, Some(dir)),
            Some(vec!["--cert-dir".to_owned(), dir.display().to_string()])
        );
        assert_eq!(
            podman.pull_options(&ca, None),
            None,
            "no copy of the CA: not reached"
        );
        assert_eq!(docker.pull_options(&Transport::Https, None), Some(vec![]));
        assert_eq!(docker.pull_options(&Transport::PlainHttp, None), None);
        assert_eq!(docker.pull_options(&ca, Some(dir)), None);
    }

    #[test]
    fn detect_prefers_podman_and_reports_what_it_looked_for() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().expect("tempdir");
        let uuid = Path::new("/var/cache/kubelet-pod.uuid");
        let pid = Path::new("/run/nodeward/kubelet.pid");
        let path = t.path().display().to_string();
        let err = Runtime::detect(RuntimeChoice::Auto, &path, uuid, pid, &HostRoot::at(t.path()))
            .expect_err("none");
        assert!(err.to_string().contains("podman, docker, rkt"), "{err}");
        for name in ["docker", "rkt"] {
            let p = t.path().join(name);
            std::fs::write(&p, "#!/bin/sh\n").expect("write");
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        assert_eq!(
            Runtime::detect(RuntimeChoice::Auto, &path, uuid, pid, &HostRoot::at(t.path()))
                .expect("docker")
                .kind(),
            docker::KIND
        );
        assert_eq!(
            Runtime::detect(
                RuntimeChoice::Engine(rkt::KIND),
                &path,
                uuid,
                pid,
                &HostRoot::at(t.path())
            )
            .expect("rkt")
            .kind(),
            rkt::KIND
        );
        assert!(
            Runtime::detect(
                RuntimeChoice::Engine(podman::KIND),
                &path,
                uuid,
                pid,
                &HostRoot::at(t.path())
            )
            .is_err()
        );
    }
}
