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
use nodeward::host::lock::FileLock;
use nodeward::plan::render;
use nodeward::root::HostRoot;
use nodeward::steps::{self, Context, Step};

/// How long a one-shot command waits for a converge in progress to release the write lock.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// Writes to stdout; a closed pipe (`nodeward status | head`) ends the process quietly, as other
/// command-line tools do, instead of panicking.
fn write_stdout(text: std::fmt::Arguments<'_>, newline: bool) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let result = out
        .write_fmt(text)
        .and_then(|()| if newline { out.write_all(b"\n") } else { Ok(()) });
    if let Err(e) = result {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(i32::from(exit::OK));
        }
        eprintln!("nodeward: cannot write to stdout: {e}");
        std::process::exit(i32::from(exit::FAILED));
    }
}

macro_rules! out {
    ($($arg:tt)*) => { write_stdout(format_args!($($arg)*), false) };
}

macro_rules! outln {
    ($($arg:tt)*) => { write_stdout(format_args!($($arg)*), true) };
}

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
    /// The kubelet container: `auto` starts/replaces it only without --root; `live` also with
    /// --root (tests with a stand-in runtime); `skip` never (it is planned, not checked).
    #[arg(long, global = true, value_enum, default_value_t = Kernel::Auto)]
    containers: Kernel,
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
    /// Work with an assets bundle file directly.
    #[command(subcommand)]
    Bundle(BundleCommand),
    /// Kernel modules as nodeward resolves them.
    #[command(subcommand)]
    Modules(ModulesCommand),
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
enum BundleCommand {
    /// Parse a bundle and check that the layout places every entry (and its sha256, if given).
    Verify {
        file: PathBuf,
        #[arg(long)]
        sha256: Option<String>,
        #[arg(long, value_enum)]
        layout: Option<LayoutArg>,
    },
    /// List a bundle's entries with their sizes and destinations (never their contents).
    List {
        file: PathBuf,
        #[arg(long, value_enum)]
        layout: Option<LayoutArg>,
        #[arg(long, value_enum, default_value_t = Output::Human)]
        output: Output,
    },
    /// Install a bundle file now: the same code path as `apply`'s bundle step (honours --root).
    Install {
        file: PathBuf,
        #[arg(long, value_enum)]
        layout: Option<LayoutArg>,
        #[arg(long, value_enum, default_value_t = Output::Human)]
        output: Output,
    },
    /// Finish or undo an install that was interrupted (done automatically by every install).
    Recover,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LayoutArg {
    Controller,
    Worker,
    Custom,
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

impl Kernel {
    /// `auto` means live only on the running system (no --root).
    fn is_live(self, root: &HostRoot) -> bool {
        match self {
            Kernel::Auto => root.is_live(),
            Kernel::Live => true,
            Kernel::Skip => false,
        }
    }
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
    let kernel_live = cli.kernel.is_live(&root);
    let containers_live = cli.containers.is_live(&root);
    let load = || config::load(&root, extra.as_deref()).context("loading configuration");
    let context = |root, settings| observe(root, settings, kernel_live, containers_live);
    match cli.command {
        Command::Run => {
            daemon::run(daemon::Options {
                root: root.clone(),
                extra_config: cli.config,
                kernel_live,
                containers_live,
            })?;
            Ok(exit::OK)
        }
        Command::Bundle(cmd) => {
            let loaded = load()?;
            bundle_command(cmd, &root, loaded.settings, kernel_live)
        }
        Command::Modules(ModulesCommand::Explain { names, output }) => {
            let loaded = load()?;
            let ctx = Context::new(&root, &loaded.settings, kernel_live).context("observing the host")?;
            let explained = steps::modules::explain(&ctx, &names)?;
            match output {
                Output::Json => outln!("{}", serde_json::to_string_pretty(&explained)?),
                Output::Human => out!("{}", render::modules_explained(&explained)),
            }
            Ok(if explained.iter().any(|e| e.error.is_some()) {
                exit::FAILED
            } else {
                exit::OK
            })
        }
        Command::Config { output } => {
            let loaded = load()?;
            match output {
                Output::Human => {
                    for f in &loaded.files {
                        outln!("# read {}", f.display());
                    }
                    out!("{}", config::render_effective(&loaded.merged));
                }
                Output::Json => {
                    let doc = serde_json::json!({ "files": loaded.files, "config": loaded.merged.table, "sources": loaded.merged.sources });
                    outln!("{}", serde_json::to_string_pretty(&doc)?);
                }
            }
            Ok(exit::OK)
        }
        Command::Plan {
            steps: args,
            detailed_exitcode,
        } => {
            let loaded = load()?;
            let ctx = context(&root, &loaded.settings).context("observing the host")?;
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
            let ctx = context(&root, &loaded.settings).context("observing the host")?;
            let plan = steps::plan(&ctx, &args.only);
            let daemon = daemon::state::DaemonState::load(&root);
            match args.output {
                Output::Json => {
                    let doc = serde_json::json!({ "daemon": daemon, "plan": plan });
                    outln!("{}", serde_json::to_string_pretty(&doc)?);
                }
                Output::Human => {
                    out!("{}", render_daemon(daemon.as_ref()));
                    out!("{}", render::plan(&plan));
                }
            }
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
            let ctx = context(&root, &loaded.settings).context("observing the host")?;
            let report = steps::apply(&ctx, &args.only, LOCK_WAIT)?;
            emit(args.output, &report, || render::report(&report))?;
            Ok(if report.failed_steps().next().is_some() {
                exit::FAILED
            } else {
                exit::OK
            })
        }
    }
}

fn bundle_command(
    cmd: BundleCommand,
    root: &HostRoot,
    mut settings: config::Settings,
    kernel_live: bool,
) -> anyhow::Result<u8> {
    use nodeward::bundle::{install, layout};
    use nodeward::config::input::LayoutChoice;
    use nodeward::steps::bundle as step;
    let set_layout = |settings: &mut config::Settings, l: Option<LayoutArg>| {
        if let Some(l) = l {
            settings.bundle.layout = match l {
                LayoutArg::Controller => LayoutChoice::Controller,
                LayoutArg::Worker => LayoutChoice::Worker,
                LayoutArg::Custom => LayoutChoice::Custom,
            };
        }
    };
    let max = settings.bundle.max_bytes;
    let read = |file: &PathBuf| nodeward::bundle::fetch::read_file(file, &file.display().to_string(), max);
    match cmd {
        BundleCommand::Recover => {
            let _lock = FileLock::writer(root)?;
            let found = install::recover(root)?;
            outln!(
                "{}",
                if found {
                    "finished an interrupted install"
                } else {
                    "nothing to recover"
                }
            );
            Ok(exit::OK)
        }
        BundleCommand::Verify {
            file,
            sha256,
            layout: l,
        } => {
            set_layout(&mut settings, l);
            let bytes = read(&file)?;
            let name = file.display().to_string();
            if let Some(want) = sha256 {
                nodeward::bundle::fetch::verify_sha256(&bytes, &want, &name)?;
            }
            let size = bytes.len();
            let bundle = step::parse(&settings.bundle, bytes, &name)?;
            let rules = step::rules(&settings.bundle, settings.node.role);
            layout::place(&bundle, &rules, settings.bundle.unmatched).with_context(|| name.clone())?;
            outln!(
                "{name}: ok: {} entries, {size} bytes, all placed by the layout",
                bundle.entries.len(),
            );
            Ok(exit::OK)
        }
        BundleCommand::List {
            file,
            layout: l,
            output,
        } => {
            set_layout(&mut settings, l);
            let bytes = read(&file)?;
            let name = file.display().to_string();
            let bundle = step::parse(&settings.bundle, bytes, &name)?;
            let rules = step::rules(&settings.bundle, settings.node.role);
            let placed = layout::place(&bundle, &rules, layout::Unmatched::Ignore)?;
            let rows: Vec<serde_json::Value> = bundle
                .entries
                .iter()
                .map(|e| {
                    let p = placed.iter().find(|p| p.entry == e.path);
                    let r = p.map(|p| &rules[p.rule]);
                    serde_json::json!({
                        "entry": e.path.to_string(),
                        "bytes": e.content.len(),
                        "sha256": install::sha256_hex(&e.content),
                        "dest": p.map(|p| p.dest.to_string()),
                        "mode": r.map(|r| r.mode.to_string()),
                        "owner": r.map(|r| format!("{}:{}", r.owner, r.group)),
                    })
                })
                .collect();
            match output {
                Output::Json => outln!("{}", serde_json::to_string_pretty(&rows)?),
                Output::Human => {
                    for r in &rows {
                        outln!(
                            "{:50} {:>8}  {}",
                            r["entry"].as_str().unwrap_or(""),
                            r["bytes"],
                            match (r["dest"].as_str(), r["mode"].as_str(), r["owner"].as_str()) {
                                (Some(d), Some(m), Some(o)) => format!("→ {d} {m} {o}"),
                                _ => "(no layout rule)".to_owned(),
                            }
                        );
                    }
                }
            }
            Ok(exit::OK)
        }
        BundleCommand::Install {
            file,
            layout: l,
            output,
        } => {
            set_layout(&mut settings, l);
            let bytes = read(&file)?;
            let ctx = Context::new(root, &settings, kernel_live).context("observing the host")?;
            // The same order as every apply: the lock, then an interrupted install finished, then
            // the plan.
            let _lock = FileLock::writer(root)?;
            install::recover(root)?;
            let plan = step::plan_bytes(&ctx, &settings.bundle, bytes, &file.display().to_string())?;
            let report = nodeward::plan::Report {
                root: root.dir().display().to_string(),
                steps: vec![nodeward::plan::apply_step(plan)],
            };
            emit(output, &report, || render::report(&report))?;
            Ok(if report.failed_steps().next().is_some() {
                exit::FAILED
            } else {
                exit::OK
            })
        }
    }
}

/// The steps' context for one command.
fn observe<'a>(
    root: &'a HostRoot,
    settings: &'a config::Settings,
    kernel_live: bool,
    containers_live: bool,
) -> Result<Context<'a>, nodeward::host::HostError> {
    let mut ctx = Context::new(root, settings, kernel_live)?;
    ctx.containers_live = containers_live;
    Ok(ctx)
}

fn render_daemon(state: Option<&daemon::state::DaemonState>) -> String {
    let Some(st) = state else {
        return "daemon: no state file (nodeward run has not run on this root)\n".to_owned();
    };
    let ago = |t: u64| daemon::state::now().saturating_sub(t);
    let mut out = format!(
        "daemon: pid {}, {}, {} converge(s), last {} s ago: {}\n",
        st.pid,
        if st.ready { "ready" } else { "not ready yet" },
        st.converges,
        ago(st.last_converge),
        st.status
    );
    for s in &st.steps {
        let state = match &s.error {
            Some(e) => format!("failing: {e}"),
            None => format!("ok ({} change(s) last pass)", s.changes),
        };
        out.push_str(&format!("  {:8} {state}\n", s.step));
    }
    if let Some(r) = &st.last_repair {
        out.push_str(&format!(
            "  last change {} s ago: {} {} {}\n",
            ago(r.at),
            r.step,
            r.subject,
            r.change
        ));
    }
    if let Some(k) = &st.kubelet {
        out.push_str(&render_kubelet(k, ago));
    }
    out
}

fn render_kubelet(k: &nodeward::kubelet::supervisor::KubeletStatus, ago: impl Fn(u64) -> u64) -> String {
    let mut out = format!("kubelet: {} ({})", k.state, k.runtime);
    if let Some(id) = &k.container_id {
        out.push_str(&format!(", container {}", nodeward::kubelet::short_id(id)));
    }
    if let Some(since) = k.since {
        let verb = if k.adopted { "adopted" } else { "up" };
        out.push_str(&format!(", {verb} {} s", ago(since)));
    }
    out.push_str(&format!(", {} restart(s)\n", k.restarts));
    if !k.health.is_empty() {
        out.push_str(&format!("  health   {}\n", k.health));
    }
    if let Some(image) = &k.image {
        out.push_str(&format!("  image    {image}\n"));
    }
    if let Some(id) = &k.image_id {
        out.push_str(&format!("  image id {id}\n"));
    }
    if let Some(hash) = &k.spec_hash {
        out.push_str(&format!("  spec     {hash}\n"));
    }
    if let Some(e) = &k.last_exit {
        let code = e.code.map_or_else(|| "-".to_owned(), |c| c.to_string());
        out.push_str(&format!(
            "  last exit {} s ago: {} (code {code})\n",
            ago(e.at),
            e.reason
        ));
    }
    if let Some(e) = &k.error {
        out.push_str(&format!("  error    {e}\n"));
    }
    out
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
        Output::Human => out!("{}", human()),
        Output::Json => outln!("{}", serde_json::to_string_pretty(value)?),
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
