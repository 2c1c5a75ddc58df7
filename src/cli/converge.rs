//! `nodeward plan`, `apply` and `status`: the steps planned, applied, or compared with the node.

use anyhow::Context as _;

use nodeward::daemon::state::DaemonState;
use nodeward::plan::render;
use nodeward::steps::{self, Step};

use super::env::Env;
use super::exit::Outcome;
use super::output::{Doc, Output, emit, write_json, write_stdout};
use super::status::{render_daemon, render_unreadable};

use nodeward::host::lock::ONE_SHOT_WAIT as LOCK_WAIT;

#[derive(clap::Args)]
pub struct StepArgs {
    /// Act on these steps only (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', value_name = "STEP")]
    pub only: Vec<Step>,
    #[arg(long, value_enum, default_value_t = Output::Human)]
    pub output: Output,
}

pub fn plan(env: &Env, args: &StepArgs, detailed_exitcode: bool) -> anyhow::Result<Outcome> {
    let loaded = env.load()?;
    let ctx = env.context(&loaded.settings).context("observing the host")?;
    let plan = steps::plan(&ctx, &args.only);
    emit(args.output, Doc::Plan, &plan, || {
        let mut text = render::plan(&plan);
        // On the running system, the far-away failures a converge cannot fix come last.
        if env.root().is_live() && env.mode.kernel_live {
            let failing = failing_checks(&ctx);
            if !failing.is_empty() {
                text.push_str(&format!(
                    "Checks failing: {} (nodeward check).\n",
                    failing.join(", ")
                ));
            }
        }
        text
    })?;
    Ok(Outcome::of_steps(
        plan.failure(),
        detailed_exitcode && plan.change_count() > 0,
    ))
}

/// The preflight checks failing on this node, ignore lists applied.
fn failing_checks(ctx: &nodeward::steps::Context<'_>) -> Vec<&'static str> {
    let obs = nodeward::check::Observation::gather(ctx);
    let found = nodeward::check::run(&obs, ctx.settings, &ctx.settings.check_ignore);
    nodeward::check::failing(&found)
}

pub fn status(env: &Env, args: &StepArgs) -> anyhow::Result<Outcome> {
    let loaded = env.load()?;
    let ctx = env.context(&loaded.settings).context("observing the host")?;
    let plan = steps::plan(&ctx, &args.only);
    let read = DaemonState::read(env.root());
    let daemon = read.as_ref().ok().cloned().flatten();
    let alive = daemon.as_ref().is_some_and(DaemonState::writer_alive);
    match args.output {
        Output::Json => {
            let doc = serde_json::json!({ "daemon": daemon, "daemon_running": alive, "plan": plan });
            write_json(Doc::Status, &doc)?;
        }
        Output::Human => {
            let now = nodeward::clock::now();
            write_stdout(format_args!(
                "{}{}",
                match &read {
                    Err(why) => render_unreadable(&why.to_string()),
                    Ok(_) => render_daemon(daemon.as_ref(), alive, now),
                },
                render::plan(&plan)
            ));
        }
    }
    Ok(Outcome::of_steps(plan.failure(), plan.change_count() > 0))
}

pub fn apply(env: &Env, args: &StepArgs) -> anyhow::Result<Outcome> {
    if !env.root().is_live() {
        // A demo or image root may not exist yet; everything below it is planned as usual.
        std::fs::create_dir_all(env.root().dir())
            .with_context(|| format!("creating the root {}", env.root().dir().display()))?;
    }
    let loaded = env.load()?;
    let ctx = env.context(&loaded.settings).context("observing the host")?;
    let report = steps::apply(&ctx, &args.only, LOCK_WAIT)?;
    emit(args.output, Doc::Report, &report, || render::report(&report))?;
    Ok(Outcome::of_steps(report.failure(), false))
}
