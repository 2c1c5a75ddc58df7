//! `nodeward run`: converge at start, tell systemd the truth, and keep the node converged.
//!
//! One thread waits for signals, one watches directories with inotify, and a timer decides the next
//! converge; all feed the main loop.
//! READY=1 is sent when the first pass finishes, whatever it found (see `lifecycle`): no failing
//! step and no kubelet that cannot start yet holds the boot. A failing step is retried with
//! exponential backoff (capped at the drift interval) while the rest keeps converging; bundle
//! downloads and image imports run beside the passes (`steps::context::Beside`), so neither holds
//! READY nor a pass.
//!
//! The kubelet is supervised by a tokio task on a thread of its own (see `kubelet::supervisor`),
//! which the main loop feeds with the wanted spec after each converge.

pub mod control;
pub(crate) mod exporter;
mod finish;
mod first_start;
mod inputs;
pub mod lifecycle;
pub(crate) mod notes;
mod notify;
mod pass;
pub mod prospect;
mod retry;
pub mod state;
mod status_line;
mod supervised;
pub(crate) mod watch;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

use crate::config::{self, ConfigError, Settings};
use crate::kubelet::handoff::Handoff;
use crate::kubelet::settings::input::OnAgentStop;
use crate::kubelet::status::KubeletState;
use crate::kubelet::supervisor;
use crate::steps::context::Beside;
use finish::{Finished, finish_converge};
use first_start::FirstStart;
pub use inputs::Options;
use inputs::{Event, machine_id};
use lifecycle::{Input, Lifecycle, Output};
use notes::{EVENT_QUEUE, Notifications};
use notify::Notifier;
use pass::{Outcome, converge, log_check_changes};
use retry::Retry;
use supervised::{KubeletHandle, feed_kubelet};

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

/// The preflight checks' cadence when drift checks come faster (a short interval, inotify).
const CHECKS_EVERY: Duration = Duration::from_secs(30);

/// Sets the process's boot gate (`daemon.boot_spread_seconds` from the daemon's start; see
/// [`crate::jitter::BootGate`]).
fn open_boot_gate(opts: &Options, settings: &Settings, started: Instant) {
    let gate = crate::jitter::BootGate::new(
        &machine_id(&opts.mode.root),
        started,
        settings.daemon.boot_spread,
        inputs::uptime(),
    );
    crate::jitter::open_boot_gate(gate);
}

/// Runs until SIGTERM or SIGINT.
pub fn run(opts: Options) -> Result<(), DaemonError> {
    let _lock = state::InstanceLock::acquire(&opts.mode.root)?;
    let notifier = Notifier::from_env().map_err(|source| DaemonError::Setup {
        what: "sd_notify",
        source,
    })?;
    let (tx, events) = mpsc::sync_channel(EVENT_QUEUE);
    spawn_signal_thread(tx.clone())?;
    // A broken configuration at start is permanent (exit 3); on reload the old one is kept.
    let settings = config::load(&opts.mode.root, opts.extra_config.as_deref())?.settings;
    let started = Instant::now();
    if settings.kubelet.enabled {
        // Whether the system is stopping, asked beside the first pass: the kubelet's first start
        // asks it before `run`, and would otherwise wait for the bus conversation then.
        crate::host::dbus::ask_system_stopping_early();
    }
    open_boot_gate(&opts, &settings, started);
    let notes = Notifications::default();
    let beside = std::sync::Arc::new(Beside::new(
        notes.beside.sender(&tx, || Event::BesideDone),
        notes.beside.sender(&tx, || Event::BesideDone),
    ));
    if settings.kubelet.enabled {
        // The checks of recorded archives ask the engines as the first checks do: after the
        // kubelet's first start (see `first_start`).
        beside.imports.hold_checks(first_start::FIRST_CHECKS_WAIT);
    }
    // Read once: a changed [metrics] takes effect at the next start.
    let exporter = exporter::Exporter::start(&settings.metrics, &opts.mode.root);
    let d = Daemon {
        exporter,
        first_start: std::sync::Arc::new(FirstStart::new(settings.kubelet.enabled)),
        converge_waiters: Vec::new(),
        answered_by_pass: Vec::new(),
        next_checks: Instant::now(),
        watchdog: notify::watchdog_interval().map(|d| d / 2),
        settings,
        life: Lifecycle::default(),
        beside,
        status: state::DaemonState {
            pid: std::process::id(),
            writer: Some(state::Writer::this_process()),
            started: crate::clock::now(),
            ..Default::default()
        },
        kubelet: None,
        pass_status: String::new(),
        shown_status: String::new(),
        config_error: None,
        kubelet_seen: None,
        retry: Retry::default(),
        machine_id: machine_id(&opts.mode.root),
        started,
        next_converge: Instant::now(),
        next_ping: Instant::now(),
        converging: false,
        pending_now: false,
        withheld: false,
        shown_activity: crate::progress::activity().0,
        events: tx.clone(),
        notes,
        // Started after the first converge, which creates the drop-in directories it watches.
        watcher: Some(tx),
        opts,
        notifier,
    };
    d.start_first_pass(&events)
}

impl Daemon {
    /// The first pass begins before the control socket is served (its listener's thread then starts
    /// beside the pass, not ahead of the kubelet's first start); the socket is up long before the
    /// pass ends, so before READY. Then the loop.
    fn start_first_pass(mut self, events: &mpsc::Receiver<Event>) -> Result<(), DaemonError> {
        self.start_converge_if_due(Instant::now());
        serve_control(&self.opts.mode.root, &self.events);
        self.run(events)
    }

    /// The loop: pings, passes and events, until SIGTERM or SIGINT.
    fn run(mut self, events: &mpsc::Receiver<Event>) -> Result<(), DaemonError> {
        loop {
            let now = Instant::now();
            self.ping_watchdog(now);
            self.show_activity();
            self.start_converge_if_due(now);
            match events.recv_timeout(self.wake_at(now).saturating_duration_since(Instant::now())) {
                Ok(Event::Signal(sig)) if sig != SIGHUP => {
                    self.on_stop(sig);
                    return Ok(());
                }
                // A notification's event only wakes the loop: its flag below says what to do.
                Ok(Event::Kubelet | Event::BesideDone) => {}
                Ok(event) => self.on_event(event),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(DaemonError::Setup {
                        what: "signal handling",
                        source: std::io::Error::other("signal thread ended"),
                    });
                }
            }
            self.on_notes();
        }
    }
}

/// The control socket, whose requests the loop answers. Its listener answers "busy" past its bound,
/// so the requests it queues here are bounded too.
fn serve_control(root: &crate::root::HostRoot, tx: &mpsc::SyncSender<Event>) {
    let to_loop = std::sync::Mutex::new(tx.clone());
    match control::serve(root, move |asked| {
        if let Ok(tx) = to_loop.lock() {
            let _ = tx.send(Event::Control(asked));
        }
    }) {
        Ok(path) => tracing::debug!(path = %path.display(), "control socket ready"),
        Err(e) => {
            tracing::warn!(error = %e, "no control socket: `nodeward kubelet …` and `nodeward converge` will not reach this daemon")
        }
    }
}

/// The daemon's loop state. The converge runs on a worker thread, so the loop always answers
/// signals and decides about the watchdog; `converging` is set while one runs.
struct Daemon {
    opts: Options,
    notifier: Notifier,
    /// Half systemd's watchdog period, when it has one.
    watchdog: Option<Duration>,
    settings: Settings,
    /// The phase: starting, degraded, converged, stopping (READY's rules live there).
    life: Lifecycle,
    /// Bundle downloads and image imports, beside the passes.
    beside: std::sync::Arc<Beside>,
    status: state::DaemonState,
    kubelet: Option<KubeletHandle>,
    /// What the last pass found, STATUS's first part.
    pass_status: String,
    /// The STATUS= systemd shows now.
    shown_status: String,
    /// The last reload's error: the daemon runs on the previous configuration meanwhile.
    config_error: Option<String>,
    /// The kubelet as last fed to the lifecycle: (wanted, running).
    kubelet_seen: Option<(bool, bool)>,
    retry: Retry,
    /// This node's machine id: its periodic converge ticks at a phase of its own.
    machine_id: String,
    /// When this daemon started: the boot gate counts from it.
    started: Instant,
    next_converge: Instant,
    next_ping: Instant,
    converging: bool,
    /// A drift or config event came during a converge: another one right after it.
    pending_now: bool,
    /// Watchdog pings are being withheld from a stalled converge.
    withheld: bool,
    shown_activity: u64,
    events: mpsc::SyncSender<Event>,
    notes: Notifications,
    watcher: Option<mpsc::SyncSender<Event>>,
    exporter: exporter::Exporter,
    /// `nodeward converge` callers waiting for the next pass to start: a pass already running may
    /// have read the node before the caller changed it.
    converge_waiters: Vec<control::Reply>,
    /// The callers the running pass answers (it started after they asked).
    answered_by_pass: Vec<control::Reply>,
    /// When the preflight checks run again (with the next converge from then on).
    next_checks: Instant,
    /// The first checks wait for the kubelet's first start (see [`first_start`]).
    first_start: std::sync::Arc<FirstStart>,
}

impl Daemon {
    /// The coalesced notifications set since the last wake.
    fn on_notes(&mut self) {
        if self.notes.kubelet.take() {
            self.on_event(Event::Kubelet);
        }
        if self.notes.beside.take() {
            self.on_event(Event::BesideDone);
        }
    }

    /// Every event but a stop.
    fn on_event(&mut self, event: Event) {
        match event {
            Event::KubeletWanted(want) => self.on_kubelet_wanted(*want),
            Event::Converged(outcome) => self.on_converged(*outcome),
            Event::Checked(checked) => self.on_checked(*checked),
            Event::Signal(_) | Event::Watch(watch::Change::Config) => self.on_reload(),
            Event::Watch(watch::Change::Arrival) => {
                tracing::debug!("something the kubelet waits for may have arrived: converging now");
                self.converge_soon();
            }
            Event::Watch(watch::Change::Drift) => {
                tracing::debug!("a managed directory changed: checking for drift now");
                self.converge_soon();
            }
            Event::Kubelet => self.on_kubelet(),
            Event::BesideDone => {
                tracing::debug!("a bundle download or an image import finished: converging");
                self.converge_soon();
            }
            Event::Control((request, reply)) => self.on_control(request, reply),
        }
    }

    /// Honest pings: idle, or a converge that moved forward within the watchdog period. A converge
    /// stuck in one call gets no pings, and systemd restarts us.
    fn ping_watchdog(&mut self, now: Instant) {
        let Some(period) = self.watchdog else { return };
        if now < self.next_ping {
            return;
        }
        let stalled = self.converging && crate::progress::since_last_beat() >= period * 2;
        if stalled {
            if !self.withheld {
                tracing::error!(
                    stalled_for = ?crate::progress::since_last_beat(),
                    "the converge has made no progress; withholding the watchdog"
                );
                self.show(format!(
                    "stalled: no progress for {} s; systemd's watchdog will restart nodeward",
                    crate::progress::since_last_beat().as_secs()
                ));
            }
            self.withheld = true;
        } else {
            let _ = self.notifier.watchdog();
            self.withheld = false;
        }
        self.next_ping = now + period;
    }

    /// What a long converge is doing, so `systemctl status` says why it takes long.
    fn show_activity(&mut self) {
        if !self.converging {
            return;
        }
        let (generation, what) = crate::progress::activity();
        if generation != self.shown_activity && !self.withheld {
            self.shown_activity = generation;
            self.show(format!("converging: {what}"));
        }
    }

    fn start_converge_if_due(&mut self, now: Instant) {
        if now >= self.next_converge && !self.converging {
            self.converging = true;
            self.answered_by_pass.append(&mut self.converge_waiters);
            crate::progress::beat();
            // The checks read more of the node than a drift check (sockets, the runtime's
            // filesystems): after every converge, but at most once per CHECKS_EVERY.
            let run_checks = now >= self.next_checks;
            if run_checks {
                self.next_checks = now + CHECKS_EVERY;
            }
            spawn_converge(
                &self.opts,
                &self.settings,
                self.beside.clone(),
                self.events.clone(),
                run_checks.then(|| self.first_start.clone()),
            );
        }
    }

    /// When the loop must look again: soon during a converge, else at the next one or ping.
    fn wake_at(&self, now: Instant) -> Instant {
        let wake = if self.converging {
            now + Duration::from_millis(500)
        } else {
            self.next_converge
        };
        if self.watchdog.is_some() {
            wake.min(self.next_ping)
        } else {
            wake
        }
    }

    /// The kubelet's first start came to something: what waited for it goes on.
    fn first_start_settled(&self) {
        self.first_start.settle();
        self.beside.imports.release_checks();
    }

    /// The pass's kubelet step is done: the supervisor starts, adopts or replaces the kubelet now,
    /// while the pass goes on.
    fn on_kubelet_wanted(&mut self, want: Handoff) {
        if want.desired.is_none() {
            self.first_start_settled();
        }
        feed_kubelet(
            &self.opts,
            &self.settings,
            &mut self.kubelet,
            want,
            &self.events,
            &self.notes.kubelet,
        );
    }

    fn on_converged(&mut self, outcome: Outcome) {
        // A pass whose checks follow is done when they are (the next one waits for them).
        self.converging = outcome.checks_follow && outcome.report.is_ok();
        let interval = Duration::from_secs(self.settings.daemon.interval_seconds);
        let Finished { ok, failure, status } = finish_converge(
            outcome,
            &self.opts,
            &mut self.status,
            &mut self.watcher,
            &mut self.exporter,
        );
        self.pass_status = status;
        self.refresh_kubelet();
        self.publish_status();
        for waiter in self.answered_by_pass.drain(..) {
            let _ = waiter.send(if ok {
                Ok(self.status.status.clone())
            } else {
                Err(control::Refused(self.status.status.clone()))
            });
        }
        // The kubelet as this pass left it first (wanted now, perhaps), so the pass's verdict is not
        // "converged" for an instant before the kubelet's "degraded".
        let kubelet = self.kubelet_now();
        self.kubelet_seen = Some(kubelet);
        self.step(Input::Kubelet {
            wanted: kubelet.0,
            running: kubelet.1,
        });
        self.step(Input::PassFinished { steps_ok: ok });
        self.on_kubelet();
        // A drift or config event during the converge asks for another one at once.
        let wait = self.retry.after(failure, interval);
        let wait = retry::beside_imports(failure, wait, self.beside.imports.busy());
        let phase = crate::jitter::phase(&self.machine_id, interval);
        let wait = retry::spread(failure, wait, interval, phase, crate::clock::now_ms());
        self.next_converge = if self.pending_now {
            Instant::now()
        } else {
            Instant::now() + wait
        };
        self.pending_now = false;
    }

    /// The checks of the last pass: the journal, STATUS, the state file and the metrics.
    fn on_checked(&mut self, checked: pass::Checked) {
        self.converging = false;
        // What asked for a pass while the checks ran (an import's or a download's end, a
        // `converge` request, a drift) is taken here: the pass's own end, which takes such asks,
        // came before it. Left to the next pass's end, it waited for whatever pass came next —
        // seen in the fleet: an import ending during the first checks left the kubelet waiting
        // 13 s for the bundle download's next failure to wake the daemon.
        if std::mem::take(&mut self.pending_now) {
            self.next_converge = Instant::now();
        }
        log_check_changes(&checked.checks, &mut self.status);
        self.exporter.checked(&checked.checks, &checked.images);
        let images: Vec<state::ImageFrom> = checked.images.iter().map(state::ImageFrom::from).collect();
        let images_changed = images != self.status.images;
        self.status.images = images;
        self.publish_status();
        // `status` reads the images from the state file, which a STATUS= line unchanged did not
        // write.
        if images_changed {
            self.save_state();
        }
    }

    /// An operator's request over the control socket.
    fn on_control(&mut self, request: control::Request, reply: control::Reply) {
        tracing::info!(request = request.line(), "request over the control socket");
        match request {
            control::Request::Converge => {
                self.converge_waiters.push(reply);
                self.next_checks = Instant::now();
                self.converge_soon();
            }
            control::Request::Kubelet(op) => match &self.kubelet {
                Some(h) => {
                    if let Err(e) = h.commands.send(supervisor::Command::Operator(op, reply)) {
                        tracing::warn!(error = %e, "the kubelet supervisor is gone");
                    }
                }
                None => {
                    let _ = reply.send(Err(control::Refused(
                        "this daemon runs no kubelet (kubelet.enabled = false, or no image)".into(),
                    )));
                }
            },
        }
    }

    fn on_reload(&mut self) {
        tracing::info!("configuration changed (SIGHUP or a drop-in): reloading");
        self.next_checks = Instant::now();
        match config::load(&self.opts.mode.root, self.opts.extra_config.as_deref()) {
            Ok(loaded) => {
                self.settings = loaded.settings;
                open_boot_gate(&self.opts, &self.settings, self.started);
                self.config_error = None;
            }
            Err(e) => {
                tracing::error!(error = %e, "configuration reload failed; keeping the previous one");
                self.config_error = Some(e.to_string());
            }
        }
        self.publish_status();
        self.converge_soon();
    }

    /// Runs a converge now, or right after the one in progress.
    fn converge_soon(&mut self) {
        if self.converging {
            self.pending_now = true;
        } else {
            self.next_converge = Instant::now();
        }
    }

    /// The kubelet's status changed (or a pass finished): the state file, metrics and the phase.
    fn on_kubelet(&mut self) {
        self.refresh_kubelet();
        if self
            .status
            .kubelet
            .as_ref()
            .is_some_and(|k| k.state != KubeletState::Starting)
        {
            self.first_start_settled();
        }
        self.publish_status();
        let (wanted, running) = self.kubelet_now();
        if self.kubelet_seen != Some((wanted, running)) {
            self.kubelet_seen = Some((wanted, running));
            self.step(Input::Kubelet { wanted, running });
        }
        self.save_state();
        self.exporter
            .kubelet(self.status.kubelet.clone(), self.life.ready());
    }

    /// Whether a kubelet is wanted, and whether it runs.
    fn kubelet_now(&self) -> (bool, bool) {
        let wanted = self.kubelet.as_ref().is_some_and(|k| k.wanted);
        let running = self
            .status
            .kubelet
            .as_ref()
            .is_some_and(|s| s.state == KubeletState::Running);
        (wanted, running)
    }

    fn refresh_kubelet(&mut self) {
        self.status.kubelet = self
            .kubelet
            .as_ref()
            .and_then(|k| k.status.lock().ok().map(|s| s.clone()));
    }

    /// STATUS= from the last pass, the kubelet and the checks; sent when it says something new.
    fn publish_status(&mut self) {
        let line = status_line::compose(status_line::Parts {
            config_error: self.config_error.as_deref(),
            pass: &self.pass_status,
            kubelet: self.status.kubelet.as_ref(),
            checks_failing: &self.status.checks_failing,
        });
        if line != self.status.status {
            self.status.status = line.clone();
            // The state file before STATUS=, so `nodeward status` never lags what systemd shows.
            self.save_state();
        }
        self.show(line);
    }

    /// Every STATUS= goes through here, so a line is sent once and a passing "converging: …"
    /// is always replaced.
    fn show(&mut self, line: String) {
        if line != self.shown_status {
            let _ = self.notifier.status(&line);
            self.shown_status = line;
        }
    }

    /// Feeds the lifecycle and carries out what it says.
    fn step(&mut self, input: Input) {
        let outputs = self.life.on(input);
        self.status.ready = self.life.ready();
        self.status.phase = self.life.phase;
        for out in outputs {
            match out {
                Output::Ready => {
                    // The state file first: whatever READY starts (an `After=` unit running
                    // `nodeward status`) reads a state that agrees with it.
                    self.save_state();
                    if let Err(e) = self.notifier.ready(&self.status.status) {
                        tracing::warn!(error = %e, "cannot send READY=1 to systemd");
                    }
                    tracing::info!(phase = ?self.life.phase, "first pass finished; ready");
                }
                Output::Converged => {
                    tracing::info!(message_id = crate::event::NODE_CONVERGED, "node converged")
                }
                Output::Degraded => {
                    tracing::warn!(message_id = crate::event::NODE_DEGRADED, status = %self.status.status, "node degraded: {}", self.status.status)
                }
            }
        }
    }

    fn save_state(&self) {
        if let Err(e) = self.status.save(&self.opts.mode.root) {
            tracing::warn!(error = %e, "cannot write the state file");
        }
    }

    /// SIGTERM/SIGINT: a converge in progress stops at its next check; one stuck in a bounded call
    /// is left behind (every write it makes is atomic or journaled, so exiting is safe). The
    /// kubelet is stopped or left running as configured.
    fn on_stop(&mut self, sig: i32) {
        tracing::info!(signal = sig, "stopping");
        crate::progress::cancel();
        let _ = self.notifier.stopping();
        self.step(Input::Stop);
        self.save_state();
        let Some(k) = self.kubelet.take() else { return };
        let setting = self.settings.kubelet.on_agent_stop;
        // systemd is asked only when its answer matters.
        let job = (setting == OnAgentStop::Stop).then(crate::host::dbus::own_job);
        let stop = job.as_ref().is_some_and(|j| lifecycle::stops_kubelet(setting, j));
        if !stop {
            tracing::info!(?job, on_agent_stop = ?self.settings.kubelet.on_agent_stop,
                "leaving the kubelet running (only an explicit stop of nodeward stops it)");
        }
        self.show(
            if stop {
                "stopping the kubelet"
            } else {
                "leaving the kubelet running"
            }
            .to_string(),
        );
        k.stop(
            stop,
            self.settings.kubelet.tuning.stop_grace + Duration::from_secs(40),
        );
    }
}

/// Starts one converge pass on a worker thread; it reports with `Event::Converged`.
fn spawn_converge(
    opts: &Options,
    settings: &Settings,
    beside: std::sync::Arc<Beside>,
    events: mpsc::SyncSender<Event>,
    checks: Option<std::sync::Arc<FirstStart>>,
) {
    let mode = opts.mode.clone();
    let settings = settings.clone();
    let spawned = std::thread::Builder::new()
        .name("converge".into())
        .spawn(move || {
            let wanted = |want| {
                let _ = events.send(Event::KubeletWanted(Box::new(want)));
            };
            let passed = |outcome| {
                let _ = events.send(Event::Converged(Box::new(outcome)));
            };
            if let Some(checked) = converge(&mode, &settings, &beside, checks.as_deref(), wanted, passed) {
                let _ = events.send(Event::Checked(Box::new(checked)));
            }
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start a converge");
    }
}

fn spawn_signal_thread(tx: mpsc::SyncSender<Event>) -> Result<(), DaemonError> {
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
