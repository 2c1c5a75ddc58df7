//! docker (Flatcar): the kubelet container through docker's CLI, as Typhoon's Flatcar unit runs it.
//! No pid file and no start in place: an exited container is removed and replaced.

use std::path::Path;
use std::time::Duration;

use super::engine::{Engine, Fut};
use super::engine_cli;
use super::types::{Container, Kind, RuntimeError};
use crate::kubelet::spec::{KubeletSpec, Only};

#[derive(Debug)]
pub(crate) struct Docker;

impl Engine for Docker {
    fn kind(&self) -> Kind {
        Kind::Docker
    }

    fn takes(&self, only: Only) -> bool {
        only == Only::All
    }

    fn run_args(&self, spec: &KubeletSpec, image: &str, hash: &str, _replace: bool) -> Vec<String> {
        engine_cli::run_args(spec, image, hash, None)
    }

    fn inspect<'a>(
        &'a self,
        program: &'a Path,
        name: &'a str,
    ) -> Fut<'a, Result<Option<Container>, RuntimeError>> {
        Box::pin(engine_cli::inspect(program, name))
    }

    fn image_id<'a>(&'a self, program: &'a Path, image: &'a str) -> Fut<'a, Option<String>> {
        Box::pin(engine_cli::image_id(program, image))
    }

    fn image_digests<'a>(&'a self, program: &'a Path, image: &'a str) -> Fut<'a, Vec<String>> {
        Box::pin(engine_cli::image_digests(program, image))
    }

    fn pull<'a>(&'a self, program: &'a Path, image: &'a str) -> Fut<'a, Result<(), RuntimeError>> {
        Box::pin(engine_cli::pull(program, image))
    }

    fn start<'a>(
        &'a self,
        program: &'a Path,
        name: &'a str,
        args: &'a [String],
        _hash: &'a str,
        replace: bool,
    ) -> Fut<'a, Result<String, RuntimeError>> {
        Box::pin(async move {
            if replace {
                engine_cli::remove(program, name).await?;
            }
            engine_cli::run(program, args).await
        })
    }

    fn wait<'a>(&'a self, program: &'a Path, id: &'a str) -> Fut<'a, Result<i32, RuntimeError>> {
        Box::pin(engine_cli::wait(program, id))
    }

    fn stop<'a>(
        &'a self,
        program: &'a Path,
        id: &'a str,
        grace: Duration,
    ) -> Fut<'a, Result<(), RuntimeError>> {
        Box::pin(engine_cli::stop(program, id, grace))
    }

    fn remove<'a>(&'a self, program: &'a Path, id: &'a str) -> Fut<'a, Result<(), RuntimeError>> {
        Box::pin(engine_cli::remove(program, id))
    }
}
