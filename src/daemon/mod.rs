//! `nodeward run`: converge at start, tell systemd the truth, and keep the node converged.
//!
//! One thread waits for signals, one watches directories with inotify, and a timer decides the next
//! converge; all feed the main loop.
//! READY=1 is sent after the first converge in which every step succeeded. A failing step is
//! retried with exponential backoff (capped at the drift interval) while the rest keeps converging.

pub mod notify;
pub mod state;
pub mod watch;

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

use crate::config::{self, ConfigError, Settings};
use crate::plan::Report;
use crate::root::HostRoot;
use crate::steps::{self, Context};
use notify::Notifier;

/// Why the daemon stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Lock(#[from] state::LockError),
    #[error("cannot set up {what}: {source}")]
    Setup {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// How the daemon was started.
pub struct Options {
    pub root: HostRoot,
    pub extra_config: Option<PathBuf>,
    /// Whether kernel state is changed (see `steps::Context::kernel_live`).
    pub kernel_live: bool,
}

const FIRST_RETRY: Duration = Duration::from_secs(1);

/// Runs until SIGTERM or SIGINT.
pub fn run(opts: Options) -> Result<(), DaemonError> {
    let _lock = state::InstanceLock::acquire(&opts.root)?;
    let notifier = Notifier::from_env().map_err(|source| DaemonError::Setup {
        what: "sd_notify",
        source,
    })?;
    let watchdog = notify::watchdog_interval().map(|d| d / 2);
    let (tx, events) = mpsc::channel();
    spawn_signal_thread(tx.clone())?;
    // Started after the first converge, which creates the drop-in directories it watches.
    let mut watcher = Some(tx);
    // A broken configuration at start is permanent (exit 3); on reload the old one is kept.
    let mut settings = config::load(&opts.root, opts.extra_config.as_deref())?.settings;
    let mut ready = false;
    let mut status = state::DaemonState {
        pid: std::process::id(),
        started: state::now(),
        ..Default::default()
    };
    let mut retry = FIRST_RETRY;
    let mut next_converge = Instant::now();
    let mut next_ping = Instant::now();
    loop {
        let now = Instant::now();
        if let Some(period) = watchdog {
            if now >= next_ping {
                let _ = notifier.watchdog();
                next_ping = now + period;
            }
        }
        if now >= next_converge {
            let interval = Duration::from_secs(settings.daemon.interval_seconds);
            let healthy = converge(&opts, &settings, &notifier, &mut ready, &mut status, &mut watcher);
            next_converge = Instant::now() + if healthy { interval } else { retry.min(interval) };
            retry = if healthy {
                FIRST_RETRY
            } else {
                (retry * 2).min(interval)
            };
        }
        let mut wake = next_converge;
        if watchdog.is_some() {
            wake = wake.min(next_ping);
        }
        match events.recv_timeout(wake.saturating_duration_since(Instant::now())) {
            Ok(Event::Signal(SIGHUP)) | Ok(Event::Watch(watch::Change::Config)) => {
                tracing::info!("configuration changed (SIGHUP or a drop-in): reloading");
                match config::load(&opts.root, opts.extra_config.as_deref()) {
                    Ok(loaded) => settings = loaded.settings,
                    Err(e) => {
                        tracing::error!(error = %e, "configuration reload failed; keeping the previous one");
                        let _ = notifier.status(&format!("config reload failed: {e}"));
                    }
                }
                next_converge = Instant::now();
            }
            Ok(Event::Watch(watch::Change::Drift)) => {
                tracing::debug!("a managed directory changed: checking for drift now");
                next_converge = Instant::now();
            }
            Ok(Event::Signal(sig)) => {
                tracing::info!(signal = sig, "stopping");
                let _ = notifier.stopping();
                return Ok(());
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(DaemonError::Setup {
                    what: "signal handling",
                    source: std::io::Error::other("signal thread ended"),
                });
            }
        }
    }
}

/// One converge pass; returns true when every step succeeded.
fn converge(
    opts: &Options,
    settings: &Settings,
    notifier: &Notifier,
    ready: &mut bool,
    state: &mut state::DaemonState,
    watcher: &mut Option<mpsc::Sender<Event>>,
) -> bool {
    let report = match Context::new(&opts.root, settings, opts.kernel_live) {
        Ok(ctx) => steps::apply(&ctx, &[]),
        Err(e) => {
            tracing::error!(error = %e, "cannot observe the host");
            let _ = notifier.status(&format!("cannot observe the host: {e}"));
            return false;
        }
    };
    let status = summary(&report);
    let healthy = report.failed_steps().next().is_none();
    if let Some(tx) = watcher.take() {
        // After the first converge (which creates the drop-in directories it watches) and before
        // READY: a change made after READY is never missed.
        match watch::spawn(&opts.root, tx, Event::Watch) {
            Ok(dirs) => tracing::debug!(?dirs, "watching for changes"),
            Err(e) => tracing::warn!(error = %e, "inotify unavailable; relying on the interval"),
        }
    }
    if healthy && !*ready {
        let _ = notifier.ready(&status);
        *ready = true;
        tracing::info!(changes = report.change_count(), "node converged; ready");
    } else {
        let _ = notifier.status(&status);
    }
    for step in report.failed_steps() {
        tracing::warn!(step = %step.step, error = step.error.as_deref().unwrap_or(""), "step failing; will retry");
    }
    state.ready = *ready;
    state.record(&report, status);
    if let Err(e) = state.save(&opts.root) {
        tracing::warn!(error = %e, "cannot write the state file");
    }
    healthy
}

/// The STATUS= line: what is failing, or that the node is converged.
pub fn summary(report: &Report) -> String {
    let failing: Vec<String> = report
        .failed_steps()
        .map(|s| format!("{}: {}", s.step, s.error.as_deref().unwrap_or("failed")))
        .collect();
    if failing.is_empty() {
        format!("converged ({} change(s) in last pass)", report.change_count())
    } else {
        format!("failing: {}", failing.join("; "))
    }
}

/// What wakes the main loop.
#[derive(Debug)]
enum Event {
    Signal(i32),
    Watch(watch::Change),
}

fn spawn_signal_thread(tx: mpsc::Sender<Event>) -> Result<(), DaemonError> {
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP]).map_err(|source| {
        DaemonError::Setup {
            what: "signal handlers",
            source,
        }
    })?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                if tx.send(Event::Signal(sig)).is_err() {
                    break;
                }
            }
        })
        .map_err(|source| DaemonError::Setup {
            what: "signal thread",
            source,
        })?;
    Ok(())
}
