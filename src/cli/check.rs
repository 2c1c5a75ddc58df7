//! `nodeward check`: the preflight checks, once.

use anyhow::Context as _;

use nodeward::check::{self, Observation, Status};

use super::env::Env;
use super::exit::Outcome;
use super::output::{Doc, Output, emit};

#[derive(clap::Args)]
pub struct CheckArgs {
    /// Checks whose failures and warnings are shown as ignored and not counted (comma-separated;
    /// added to `check.ignore`).
    #[arg(long, value_delimiter = ',', value_name = "NAME")]
    pub ignore: Vec<String>,
    #[arg(long, value_enum, default_value_t = Output::Human)]
    pub output: Output,
}

pub fn run(env: &Env, args: &CheckArgs) -> anyhow::Result<Outcome> {
    if let Some(unknown) = args
        .ignore
        .iter()
        .find(|n| !check::names().any(|k| k == n.as_str()))
    {
        eprintln!(
            "nodeward: error: --ignore: no check named {unknown:?} (known: {})",
            check::names().collect::<Vec<_>>().join(", ")
        );
        return Ok(Outcome::Usage);
    }
    let loaded = env.load()?;
    let ctx = env.context(&loaded.settings).context("observing the host")?;
    let mut obs = Observation::gather(&ctx);
    check::ask_registries(&mut obs);
    let mut ignore = loaded.settings.check_ignore.clone();
    ignore.extend(args.ignore.iter().cloned());
    let found = check::run(&obs, &loaded.settings, &ignore);
    let worst = check::worst(&found);
    let doc = serde_json::json!({ "result": worst, "checks": found });
    emit(args.output, Doc::Check, &doc, || check::render::findings(&found))?;
    Ok(match worst {
        Status::Fail => Outcome::CheckFailed,
        Status::Warn => Outcome::CheckWarnings,
        _ => Outcome::Ok,
    })
}
