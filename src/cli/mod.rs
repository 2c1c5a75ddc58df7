//! The `nodeward` command line: arguments, the environment every command shares, and the one
//! mapping from outcomes to exit codes. One file per command group; all the work is in the library.

mod bundle;
mod check;
mod config;
mod control;
mod converge;
mod docs;
mod env;
mod exit;
mod journal;
mod kubelet_show;
mod logging;
mod modules;
mod output;
mod status;
mod wait;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use nodeward::daemon;

use env::{Env, LiveMode};
use exit::Outcome;
use output::Output;

#[derive(Parser)]
#[command(
    name = "nodeward",
    // `0.1.0 (3a73f17fb0f9 2026-11-25)`: the commit and its date, as rustc --version says its own.
    version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("NODEWARD_COMMIT"), " ", env!("NODEWARD_BUILD_DATE"), ")"),
    about = "Prepares a Kubernetes node and keeps it prepared"
)]
struct Cli {
    /// Act on this directory as if it were `/` (image builds, tests). Kernel state is not touched.
    #[arg(long, global = true, value_name = "DIR")]
    root: Option<PathBuf>,
    /// Kernel state (sysctls, modules): `auto` changes it only without --root; `live` also with
    /// --root (files under the root, kernel real: tests in a private namespace); `skip` never.
    #[arg(long, global = true, value_enum, default_value_t = LiveMode::Auto)]
    kernel: LiveMode,
    /// The kubelet container: `auto` starts/replaces it only without --root; `live` also with
    /// --root (tests with a stand-in runtime); `skip` never (it is planned, not checked).
    #[arg(long, global = true, value_enum, default_value_t = LiveMode::Auto)]
    containers: LiveMode,
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
    Apply(converge::StepArgs),
    /// Show what `apply` would change, touching nothing.
    Plan {
        #[command(flatten)]
        steps: converge::StepArgs,
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
    Status(converge::StepArgs),
    /// Ask the running daemon to converge now; prints the result when the pass is done.
    Converge {
        #[arg(long, value_enum, default_value_t = Output::Human)]
        output: Output,
    },
    /// Restart, stop or start the kubelet through the running daemon (its supervisor stays the
    /// only one touching the container).
    #[command(subcommand)]
    Kubelet(control::KubeletCommand),
    /// Preflight checks: what would break the kubelet far from its cause, and the fix (exit 5 on
    /// warnings, 6 on failures).
    Check(check::CheckArgs),
    /// Run as the node's daemon: converge, notify systemd, repair drift until stopped.
    Run,
    /// Wait until the running daemon reports the node converged (every step succeeded, the
    /// kubelet runs); exit 1 with what is failing after --timeout.
    Wait {
        /// Seconds to wait at most (up to a year).
        #[arg(long, default_value_t = 900, value_parser = clap::value_parser!(u64).range(0..=wait::MAX_TIMEOUT))]
        timeout: u64,
        /// The daemon's systemd unit: while no running daemon has written its state, exit 1 at
        /// once if systemd says nothing will run it (masked, not installed, stopped or failed
        /// with no job queued).
        #[arg(long, value_name = "UNIT", value_parser = wait::unit_name)]
        unit: Option<String>,
    },
    /// Work with an assets bundle file directly.
    #[command(subcommand)]
    Bundle(bundle::BundleCommand),
    /// Kernel modules as nodeward resolves them.
    #[command(subcommand)]
    Modules(ModulesCommand),
    /// The images this node needs before its pods run.
    #[command(subcommand)]
    Images(ImagesCommand),
    /// Print a shell completion script (the packages install them), generated from this command
    /// line's own definition.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page, nodeward(1), in roff (the packages install it).
    Manpage,
}

#[derive(Subcommand)]
enum ModulesCommand {
    /// What loading NAME means: every module in load order (dependencies, soft pre/post
    /// dependencies through aliases), each with the file and line it came from, options, what was
    /// skipped and why. Reads the module tree of --root (or the running kernel's); loads nothing.
    Explain {
        #[arg(required = true)]
        names: Vec<String>,
        #[arg(long, value_enum, default_value_t = Output::Human)]
        output: Output,
    },
}

#[derive(Subcommand)]
enum ImagesCommand {
    /// Print each image this node's configuration needs, one per line: its reference, a space, and
    /// what needs it (`kubelet`, `sandbox`, `static-pod FILE`). With --root, an image build's: what
    /// to ship with the node (packaging/images/save makes the archives).
    List,
}

pub fn main() -> ExitCode {
    // What nodeward creates without an explicit mode (its run directory, a parent directory) must
    // not depend on the caller: under umask 000, /run/nodeward (a config source) came out 0777.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            let outcome = if e.use_stderr() {
                Outcome::Usage
            } else {
                Outcome::Ok
            };
            return ExitCode::from(outcome.code());
        }
    };
    logging::init(cli.verbose, cli.quiet, matches!(cli.command, Command::Run));
    let outcome = run(cli).unwrap_or_else(|e| {
        eprintln!("nodeward: error: {}", output::said_once(&e));
        Outcome::of_error(&e)
    });
    ExitCode::from(outcome.code())
}

fn run(cli: Cli) -> anyhow::Result<Outcome> {
    let env = Env::new(cli.root, cli.kernel, cli.containers, cli.config);
    match cli.command {
        Command::Run => {
            daemon::run(daemon::Options {
                mode: env.mode.clone(),
                extra_config: env.extra_config.clone(),
            })?;
            Ok(Outcome::Ok)
        }
        Command::Bundle(cmd) => bundle::run(&env, cmd),
        Command::Modules(ModulesCommand::Explain { names, output }) => modules::explain(&env, &names, output),
        Command::Images(ImagesCommand::List) => images_list(&env),
        Command::Config { output } => config::show(&env, output),
        Command::Plan {
            steps,
            detailed_exitcode,
        } => converge::plan(&env, &steps, detailed_exitcode),
        Command::Status(args) => converge::status(&env, &args),
        Command::Check(args) => check::run(&env, &args),
        Command::Converge { output } => control::converge(&env, output),
        Command::Wait { timeout, unit } => wait::run(&env, timeout, unit.as_deref()),
        Command::Kubelet(cmd) => control::kubelet(&env, cmd),
        Command::Apply(args) => converge::apply(&env, &args),
        Command::Completions { shell } => docs::completions(Cli::command(), shell),
        Command::Manpage => docs::manpage(Cli::command()),
    }
}

/// `nodeward images list`.
fn images_list(env: &Env) -> anyhow::Result<Outcome> {
    use anyhow::Context as _;
    let loaded = env.load()?;
    let ctx = env.context(&loaded.settings).context("observing the host")?;
    let mut text = String::new();
    for n in nodeward::check::images_needed(&ctx) {
        text.push_str(&format!("{} {}\n", n.reference, n.need));
    }
    output::write_stdout(format_args!("{text}"));
    Ok(Outcome::Ok)
}
