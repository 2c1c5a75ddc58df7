//! The one trait every container engine implements (the registry is registry.rs). An engine owns
//! its state (podman its pid file, rkt its pod's uuid file) and its differences (its `run`
//! arguments and mounts, how it starts, waits, stops and removes, whether an exited container can
//! be started again in place). Nothing outside an engine's file asks which engine it is.
//!
//! A new engine (containerd's `nerdctl`, say) is a file with an `impl Engine`, its `KIND` and its
//! own mounts, and one line in `registry.rs`; `kubelet.runtime` takes its name from there.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;

use super::engine_cli;
use super::types::{Container, Kind, RuntimeError};
use crate::kubelet::container::{KubeletSpec, Only};
use crate::kubelet::pull_source::Transport;

/// A boxed future: the trait is used as `dyn Engine`.
pub(crate) type Fut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where the engines that keep state keep it.
#[derive(Debug, Clone)]
pub(crate) struct Paths {
    /// rkt: the pod's uuid file (the spec hash is kept next to it).
    pub(crate) uuid_file: PathBuf,
    /// podman: where `run --pidfile` writes the kubelet's pid.
    pub(crate) pid_file: PathBuf,
}

pub(crate) trait Engine: std::fmt::Debug + Send + Sync {
    fn kind(&self) -> Kind;

    /// Whether it mounts what the mount table marks `only`: every engine's, and its own.
    fn takes(&self, only: Only) -> bool {
        only.for_engine(self.kind())
    }

    /// The arguments that start the kubelet container (after the program name). `replace`: a
    /// stopped container may hold the name and is to be removed.
    fn run_args(&self, spec: &KubeletSpec, image: &str, hash: &str, replace: bool) -> Vec<String>;

    /// The kubelet container, if one with this name exists. (The defaults are the CLI podman and
    /// docker share; rkt overrides them.)
    fn inspect<'a>(
        &'a self,
        program: &'a Path,
        name: &'a str,
    ) -> Fut<'a, Result<Option<Container>, RuntimeError>> {
        Box::pin(engine_cli::inspect(program, name))
    }

    /// The content id of a local image; `None` when it is not there (or the engine cannot say).
    fn image_id<'a>(&'a self, program: &'a Path, image: &'a str) -> Fut<'a, Option<String>> {
        Box::pin(engine_cli::image_id(program, image))
    }

    /// The registry digests the engine records for a local image.
    fn image_digests<'a>(&'a self, program: &'a Path, image: &'a str) -> Fut<'a, Vec<String>> {
        Box::pin(engine_cli::image_digests(program, image))
    }

    /// The options that make a pull reach a source's host the way it asks (see
    /// [`crate::kubelet::pull_source`]); `None` when this engine's command line cannot (docker
    /// takes its registries' trust from its daemon's configuration alone). `ca_dir`: a directory
    /// holding the source's CA as `ca.crt`.
    fn pull_options(&self, transport: &Transport, _ca_dir: Option<&Path>) -> Option<Vec<String>> {
        (*transport == Transport::Https).then(Vec::new)
    }

    /// Pulls (or fetches) `image` with `options` (from [`Engine::pull_options`]), handing each
    /// line the CLI prints to `on_line` (a pull's progress, see `pull.rs`).
    fn pull<'a>(
        &'a self,
        program: &'a Path,
        options: &'a [String],
        image: &'a str,
        on_line: &'a (dyn Fn(&str) + Send + Sync),
    ) -> Fut<'a, Result<(), RuntimeError>> {
        Box::pin(engine_cli::pull(program, options, image, on_line))
    }

    /// The arguments that load an image archive (Docker or OCI layout, uncompressed) from
    /// standard input; `None` when the engine has no such command.
    fn load_args(&self) -> Option<&'static [&'static str]> {
        Some(&["load"])
    }

    /// The local image's size in bytes, when the engine says (after a pull: its rate).
    fn image_size<'a>(&'a self, program: &'a Path, image: &'a str) -> Fut<'a, Option<u64>> {
        Box::pin(engine_cli::image_size(program, image))
    }

    /// Starts the container detached with `args` (from [`Engine::run_args`]), removing a stopped
    /// one holding `name` first when `replace`. Returns its id.
    fn start<'a>(
        &'a self,
        program: &'a Path,
        name: &'a str,
        args: &'a [String],
        hash: &'a str,
        replace: bool,
    ) -> Fut<'a, Result<String, RuntimeError>>;

    /// Waits until the container exits; its exit code.
    fn wait<'a>(&'a self, program: &'a Path, id: &'a str) -> Fut<'a, Result<i32, RuntimeError>> {
        Box::pin(engine_cli::wait(program, id))
    }

    /// SIGTERM, then SIGKILL after `grace`.
    fn stop<'a>(
        &'a self,
        program: &'a Path,
        id: &'a str,
        grace: Duration,
    ) -> Fut<'a, Result<(), RuntimeError>> {
        Box::pin(engine_cli::stop(program, id, grace))
    }

    /// Removes the container; a missing one is not an error.
    fn remove<'a>(&'a self, program: &'a Path, id: &'a str) -> Fut<'a, Result<(), RuntimeError>> {
        Box::pin(engine_cli::remove(program, id))
    }

    /// Whether a container that exited is started again in place ([`Engine::start_again`]), its
    /// exit code read afterwards ([`Engine::exit_code_since`]); else it is removed and replaced.
    fn restarts_in_place(&self) -> bool {
        false
    }

    /// Whether [`Engine::start`] with `replace` removes the old container within the same call, so
    /// a stopped one is left for it.
    fn replaces_in_start(&self) -> bool {
        false
    }

    /// Whether local images can be looked up before pulling.
    fn lists_images(&self) -> bool {
        true
    }

    /// Whether, without asking the engine, nothing of it can be running under `name` (so a start
    /// may replace whatever stopped container holds the name, without inspecting it first).
    /// `false` when it cannot tell: the supervisor then asks the engine.
    fn surely_not_running(&self, _program: &Path, _name: &str) -> bool {
        false
    }

    /// Starts an exited container again in place.
    fn start_again<'a>(&'a self, _program: &'a Path, id: &'a str) -> Fut<'a, Result<(), RuntimeError>> {
        let message = format!(
            "{}: containers are not started again in place",
            self.kind().program()
        );
        let command = format!("{} start {id}", self.kind().program());
        Box::pin(async move { Err(RuntimeError::Output { command, message }) })
    }

    /// The code of the container's first exit at or after `since` (Unix seconds).
    fn exit_code_since<'a>(&'a self, _program: &'a Path, _id: &'a str, _since: u64) -> Fut<'a, Option<i32>> {
        Box::pin(async { None })
    }

    /// The pid of the container just started, when the engine writes it down.
    fn started_pid(&self) -> Option<i32> {
        None
    }
}
