//! The `nodeward` command line: parses arguments, loads configuration, runs a command, and maps
//! failures to exit codes. All the work is in the library.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};

use nodeward::config::{self, ConfigError};
use nodeward::daemon::{self, DaemonError};
use nodeward::exit;
use nodeward::plan::render;
use nodeward::root::HostRoot;
use nodeward::steps::{self, Context, Step};

#[derive(Parser)]
#[command(
    name = "nodeward",
    version,
    about = "Prepares a Kubernetes node and keeps it prepared"
)]
struct Cli {
    /// Act on this directory as if it were `/` (image builds, tests). Kernel state is not touched.
    #[arg(long, global = true, value_name = "DIR")]
    root: Option<PathBuf>,
    /// Kernel state (sysctls, modules): `auto` changes it only without --root; `live` also with
    /// --root (files under the root, kernel real: tests in a private namespace); `skip` never.
    #[arg(long, global = true, value_enum, default_value_t = Kernel::Auto)]
    kernel: Kernel,
    /// One more configuration fragment, applied over all drop-ins.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// More log output (repeat for more).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Less log output.
    #[arg(short, long, global = true, action = clap::ArgAction::Count, conflicts_with = "verbose")]
    quiet: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Converge the node once and exit.
    Apply(StepArgs),
    /// Show what `apply` would change, touching nothing.
    Plan {
        #[command(flatten)]
        steps: StepArgs,
        /// Exit 4 when changes are pending (0 when converged).
        #[arg(long)]
        detailed_exitcode: bool,
    },
    /// Print the effective configuration and which file set each value.
    Config {
        #[arg(long, value_enum, default_value_t = Output::Human)]
        output: Output,
    },
    /// Show whether the node is converged (exit 4 when changes are pending).
    Status(StepArgs),
    /// Run as the node's daemon: converge, notify systemd, repair drift until stopped.
    Run,
}

#[derive(clap::Args)]
struct StepArgs {
    /// Act on these steps only (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', value_name = "STEP")]
    only: Vec<Step>,
    #[arg(long, value_enum, default_value_t = Output::Human)]
    output: Output,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Kernel {
    Auto,
    Live,
    Skip,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    Human,
    Json,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { exit::USAGE } else { exit::OK });
        }
    };
    init_logging(cli.verbose, cli.quiet, matches!(cli.command, Command::Run));
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("nodeward: error: {e:#}");
            let code = if is_config_error(&e) {
                exit::CONFIG
            } else {
                exit::FAILED
            };
            ExitCode::from(code)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<u8> {
    let root = cli.root.as_ref().map_or_else(HostRoot::live, HostRoot::at);
    let extra = cli.config.clone();
    let kernel_live = match cli.kernel {
        Kernel::Auto => root.is_live(),
        Kernel::Live => true,
        Kernel::Skip => false,
    };
    let load = || config::load(&root, extra.as_deref()).context("loading configuration");
    match cli.command {
        Command::Run => {
            daemon::run(daemon::Options {
                root: root.clone(),
                extra_config: cli.config,
                kernel_live,
            })?;
            Ok(exit::OK)
        }
        Command::Config { output } => {
            let loaded = load()?;
            match output {
                Output::Human => {
                    for f in &loaded.files {
                        println!("# read {}", f.display());
                    }
                    print!("{}", config::render_effective(&loaded.merged));
                }
                Output::Json => {
                    let doc = serde_json::json!({ "files": loaded.files, "config": loaded.merged.table, "sources": loaded.merged.sources });
                    println!("{}", serde_json::to_string_pretty(&doc)?);
                }
            }
            Ok(exit::OK)
        }
        Command::Plan {
            steps: args,
            detailed_exitcode,
        } => {
            let loaded = load()?;
            let ctx = Context::new(&root, &loaded.settings, kernel_live).context("observing the host")?;
            let plan = steps::plan(&ctx, &args.only);
            emit(args.output, &plan, || render::plan(&plan))?;
            Ok(if plan.failed_steps().next().is_some() {
                exit::FAILED
            } else if detailed_exitcode && plan.change_count() > 0 {
                exit::PENDING
            } else {
                exit::OK
            })
        }
        Command::Status(args) => {
            let loaded = load()?;
            let ctx = Context::new(&root, &loaded.settings, kernel_live).context("observing the host")?;
            let plan = steps::plan(&ctx, &args.only);
            emit(args.output, &plan, || render::plan(&plan))?;
            Ok(if plan.failed_steps().next().is_some() {
                exit::FAILED
            } else if plan.change_count() > 0 {
                exit::PENDING
            } else {
                exit::OK
            })
        }
        Command::Apply(args) => {
            if !root.is_live() {
                // A demo or image root may not exist yet; everything below it is planned as usual.
                std::fs::create_dir_all(root.dir())
                    .with_context(|| format!("creating the root {}", root.dir().display()))?;
            }
            let loaded = load()?;
            let ctx = Context::new(&root, &loaded.settings, kernel_live).context("observing the host")?;
            let report = steps::apply(&ctx, &args.only);
            emit(args.output, &report, || render::report(&report))?;
            Ok(if report.failed_steps().next().is_some() {
                exit::FAILED
            } else {
                exit::OK
            })
        }
    }
}

/// Configuration errors are permanent and get their own exit code.
fn is_config_error(e: &anyhow::Error) -> bool {
    e.chain()
        .any(|c| c.is::<ConfigError>() || matches!(c.downcast_ref(), Some(DaemonError::Config(_))))
}

fn emit<T: serde::Serialize>(
    output: Output,
    value: &T,
    human: impl FnOnce() -> String,
) -> anyhow::Result<()> {
    match output {
        Output::Human => print!("{}", human()),
        Output::Json => println!("{}", serde_json::to_string_pretty(value)?),
    }
    Ok(())
}

/// Logs go to the journal, with structured fields, when systemd connected stderr to it
/// (`$JOURNAL_STREAM`); otherwise to stderr as text. stdout carries plans and reports.
/// The daemon logs at INFO by default (each repair is worth a line); one-shot commands at WARN.
fn init_logging(verbose: u8, quiet: u8, daemon: bool) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;

    let base = if daemon { 1 } else { 0 };
    let level = match (verbose + base, quiet) {
        (_, q) if q > 0 => tracing::Level::ERROR,
        (0, _) => tracing::Level::WARN,
        (1, _) => tracing::Level::INFO,
        (2, _) => tracing::Level::DEBUG,
        _ => tracing::Level::TRACE,
    };
    let filter = tracing_subscriber::filter::LevelFilter::from_level(level);
    if std::env::var_os("JOURNAL_STREAM").is_some() {
        if let Ok(journald) = tracing_journald::layer() {
            tracing_subscriber::registry().with(filter).with(journald).init();
            return;
        }
    }
    tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}
