//! docker (Flatcar): the kubelet container through docker's CLI, as Typhoon's Flatcar unit runs it.
//! No pid file and no start in place: an exited container is removed and replaced.

use std::path::Path;

use super::engine::{Engine, Fut};
use super::engine_cli;
use super::types::{Kind, RuntimeError};
use crate::kubelet::container::KubeletSpec;

/// This engine, by its name (its program's, and `kubelet.runtime = "docker"`).
pub(crate) const KIND: Kind = Kind::new("docker");

#[derive(Debug)]
pub(crate) struct Docker;

impl Engine for Docker {
    fn kind(&self) -> Kind {
        KIND
    }

    fn run_args(&self, spec: &KubeletSpec, image: &str, hash: &str, _replace: bool) -> Vec<String> {
        engine_cli::run_args(spec, image, hash, None, |o| self.takes(o))
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
}
