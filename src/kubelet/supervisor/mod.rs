//! Keeping the kubelet container running: start it (or adopt the one already running with the same
//! spec), watch its process through the runtime, probe /healthz, restart on exit or sustained
//! unhealthiness with backoff, replace it when its spec changes, stop it gracefully on request.
//!
//! The supervisor is a tokio task fed by [`Command`]s; what it sees is published in a shared
//! [`KubeletStatus`] and announced through a callback, so the daemon can report it.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

mod bring_up;
mod command;
mod exiting;
mod failed_row;
mod gate;
mod on_exit;
mod slot;

use super::backoff::Backoff;
use super::executor::{Executor, Exited};
use super::healthz::{Unhealthy, probe_healthz};
use super::rollout::Rollout;
use super::runtime::{Container, Runtime, RuntimeError};
use super::spec::Desired;
use super::status::{KubeletState, KubeletStatus, LastExit, SharedStatus};
use crate::event;
pub use crate::kubelet::settings::Tuning;
use crate::root::HostRoot;
pub use command::{Command, Operator, Refused, Reply};
use exiting::{CodeFrom, Exiting, journal_exit, shutting_down};
use slot::Gate;

/// What the supervisor's loop keeps between events.
struct Loop {
    /// The spec run (or to run): the configuration's, or the last healthy one after a rollback.
    want: Option<Desired>,
    /// The spec the configuration wants.
    wanted: Option<Desired>,
    /// The last healthy spec, the one held back, the spec on trial.
    rollout: Rollout,
    /// A replacement waiting for a FleetLock slot; the running kubelet keeps running meanwhile.
    pending: Option<Desired>,
    gate: Gate,
    tuning: Option<Tuning>,
    current: Option<Watched>,
    backoff: Backoff,
    next_start: Instant,
    probe: tokio::time::Interval,
    /// Stopped by an operator: nothing is started until they say `start`.
    held: bool,
    /// An operator waiting for the next start.
    waiting: Option<Reply>,
    /// What holds the container's name while none is watched.
    name: NameHolds,
    /// An exit whose code is still to come.
    exiting: Option<Exiting>,
    /// The journal said the system is shutting down (once).
    shutdown_said: bool,
}

/// What holds the kubelet container's name, as far as the supervisor knows without asking the
/// engine. After its own container exited (or was stopped) it knows, so a restart is one engine
/// call with no inspect before it: each podman call is a process start, the largest part of a
/// restart's delay.
#[derive(Debug, Clone, PartialEq, Eq)]
enum NameHolds {
    /// Not known (first start, or after an error): ask the engine and decide.
    Unknown,
    /// Nothing: the container was removed.
    Free,
    /// This supervisor's own container, stopped: replaced by the next start (`run --replace`).
    OwnStopped,
    /// Nothing of the engine runs under the name (it says so without being asked: podman's
    /// monitors): whatever stopped container holds it is replaced by the next start, not removed
    /// before (it may not be this supervisor's).
    NotRunning,
    /// This supervisor's own podman container, exited by itself: started again in place when the
    /// spec is still the one it was created with (`podman start`: nothing to remove or create).
    OwnExited(Exited),
}

impl Loop {
    fn new(root: &HostRoot) -> Loop {
        Loop {
            want: None,
            wanted: None,
            rollout: Rollout::load(root),
            pending: None,
            gate: Gate::default(),
            tuning: None,
            current: None,
            backoff: Backoff::new(Duration::from_secs(60)),
            next_start: Instant::now(),
            probe: probe_interval(Duration::from_secs(10)),
            held: false,
            waiting: None,
            name: NameHolds::Unknown,
            exiting: None,
            shutdown_said: false,
        }
    }
}

fn probe_interval(every: Duration) -> tokio::time::Interval {
    let mut probe = tokio::time::interval(every);
    probe.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    probe
}

/// A container being watched.
struct Watched {
    id: String,
    hash: String,
    started: Instant,
    /// The engine's `wait`: the exit code. Not asked of podman when the pidfd watches the process:
    /// the exit is seen there and its code read from podman's events, and a podman process less
    /// competes with the kubelet's start.
    wait: Option<JoinHandle<Result<i32, RuntimeError>>>,
    /// The kubelet process's own exit, seen through a pidfd when its pid is known: at once, where
    /// podman's wait answers only after its cleanup (about a second on an emulated CPU).
    gone: Option<JoinHandle<()>>,
    /// Started without learning its image's id: asked once it is healthy.
    image_id_unknown: bool,
    failed: failed_row::FailedRow,
    healthy_since: Option<Instant>,
}

impl Watched {
    /// The first of: the engine reports the exit, or the process is seen gone.
    async fn ended(&mut self) -> Ended {
        match (&mut self.gone, &mut self.wait) {
            (Some(gone), Some(wait)) => tokio::select! {
                waited = wait => Ended::Waited(waited),
                _ = gone => Ended::Gone,
            },
            (Some(gone), None) => {
                let _ = gone.await;
                Ended::Gone
            }
            (None, Some(wait)) => Ended::Waited(wait.await),
            (None, None) => std::future::pending().await,
        }
    }

    fn abort(&self) {
        if let Some(w) = &self.wait {
            w.abort();
        }
        if let Some(g) = &self.gone {
            g.abort();
        }
    }
}

type Waited = Result<Result<i32, RuntimeError>, tokio::task::JoinError>;

enum Ended {
    Waited(Waited),
    Gone,
}

/// How long a kubelet started again in place runs before its last exit's code is asked for even
/// though it does not answer /healthz yet.
const ASK_CODE_AFTER: Duration = Duration::from_secs(5);

pub struct Supervisor {
    /// Carries out each decision of the loop.
    exec: Executor,
}

impl Supervisor {
    pub fn new(
        runtime: Runtime,
        root: HostRoot,
        status: SharedStatus,
        on_change: Box<dyn Fn() + Send + Sync>,
    ) -> Supervisor {
        Supervisor {
            exec: Executor::new(runtime, root, status, on_change),
        }
    }

    fn update(&self, f: impl FnOnce(&mut KubeletStatus)) {
        self.exec.update(f);
    }

    /// Runs until told to stop (or until every sender is gone, which leaves the kubelet running).
    /// Each event has its handler below; this loop only waits for the next one.
    pub async fn run(self, mut commands: mpsc::UnboundedReceiver<Command>) {
        let mut l = Loop::new(&self.exec.root);
        loop {
            self.start_if_due(&mut l).await;
            let waiting = l.current.is_none() && l.want.is_some();
            let (current, probe, next_start, exiting) =
                (&mut l.current, &mut l.probe, l.next_start, &mut l.exiting);
            let (request, lock_retry) = (&mut l.gate.request, l.gate.retry_at);
            tokio::select! {
                cmd = commands.recv() => match cmd {
                    None => {
                        if let Some(c) = l.current.take() {
                            c.abort();
                        }
                        return;
                    }
                    Some(Command::Want(new, t)) => self.on_want(&mut l, new.map(|b| *b), t).await,
                    Some(Command::Stop { kubelet }) => {
                        self.on_stop(&mut l, kubelet).await;
                        return;
                    }
                    Some(Command::Operator(op, reply)) => self.on_operator(&mut l, op, reply).await,
                    Some(Command::Fleet(fleet)) => self.on_fleet(&mut l, fleet.map(|b| *b)),
                },
                answer = async { (&mut request.as_mut().expect("guarded by is_some").task).await }, if request.is_some() => {
                    self.on_lock_answer(&mut l, answer).await;
                }
                _ = tokio::time::sleep_until(lock_retry.unwrap_or_else(Instant::now)), if lock_retry.is_some() => {
                    self.on_lock_retry(&mut l);
                }
                ended = async { current.as_mut().expect("guarded by is_some").ended().await }, if current.is_some() => {
                    match ended {
                        Ended::Waited(exit) => self.on_exit(&mut l, exit).await,
                        Ended::Gone => self.on_gone(&mut l),
                    }
                }
                code = async {
                    match exiting.as_mut().map(|e| &mut e.code) {
                        Some(CodeFrom::Asking(answer)) => answer.await,
                        _ => std::future::pending().await,
                    }
                }, if exiting.as_ref().is_some_and(|e| matches!(e.code, CodeFrom::Asking(_))) => {
                    self.on_exit_code(&mut l, code);
                }
                _ = probe.tick() => {
                    self.check_trial(&mut l).await;
                    self.on_probe(&mut l).await;
                }
                _ = tokio::time::sleep_until(next_start), if waiting => {}
            }
        }
    }

    /// Starts (or adopts) the kubelet when one is wanted, none is watched and the backoff allows.
    async fn start_if_due(&self, l: &mut Loop) {
        let (None, Some(w), Some(t), false) = (&l.current, &l.want, &l.tuning, l.held) else {
            return;
        };
        if Instant::now() < l.next_start {
            return;
        }
        let (w, t) = (w.clone(), *t);
        if shutting_down().await {
            // The shutdown stops the kubelet's container before nodeward: starting it again would
            // race the shutdown (and hold it while podman runs). Asked again in a few seconds.
            if !l.shutdown_said {
                l.shutdown_said = true;
                tracing::info!("the system is shutting down: the kubelet is not started again");
            }
            l.next_start = Instant::now() + Duration::from_secs(5);
            return;
        }
        // Nothing running under the name, seen without the engine: no container to adopt or to
        // keep for a FleetLock slot, so no `inspect` before the start (a first start's time).
        if matches!(l.name, NameHolds::Unknown) && self.exec.runtime.surely_not_running(&w.spec.name) {
            tracing::info!(name = %w.spec.name, "nothing runs under the kubelet's name (no engine monitor names it): starting without asking the engine first");
            l.name = NameHolds::NotRunning;
        }
        if matches!(l.name, NameHolds::Unknown) && self.keep_other_spec_for_slot(l, &w).await {
            return;
        }
        self.begin_trial(l);
        let name = std::mem::replace(&mut l.name, NameHolds::Unknown);
        let started = self.bring_up(&w, &t, name).await;
        self.start_trial_clock(l);
        match started {
            Ok(watched) => {
                if let Some(reply) = l.waiting.take() {
                    let _ = reply.send(Ok(format!("kubelet running in container {}", short(&watched.id))));
                }
                l.current = Some(watched);
            }
            Err(e) => {
                self.note_failure(l, &w.hash, format!("could not start: {e}"));
                // A start may pull from the registry: jittered (the restart of the same container
                // below is not).
                let delay = l.backoff.next_jittered();
                tracing::error!(error = %crate::text::printable(&e.to_string()), retry_in = ?delay, "cannot start the kubelet; retrying in {delay:?}");
                if let Some(reply) = l.waiting.take() {
                    let _ = reply.send(Err(Refused(format!(
                        "cannot start the kubelet: {e} (retrying in {delay:?})"
                    ))));
                }
                self.update(|s| {
                    s.state = KubeletState::Failing;
                    s.error = Some(e.to_string());
                });
                l.next_start = Instant::now() + delay;
            }
        }
    }

    /// A new wanted spec (or none): timings follow, and a container with another spec goes.
    async fn on_want(&self, l: &mut Loop, new: Option<Desired>, t: Tuning) {
        if l.tuning
            .is_none_or(|old| old.health_interval != t.health_interval)
        {
            l.probe = probe_interval(t.health_interval);
        }
        if l.tuning.is_none_or(|old| old.max_delay != t.max_delay) {
            l.backoff = Backoff::new(t.max_delay);
        }
        l.tuning = Some(t);
        l.wanted = new.clone();
        if let Some(w) = &new {
            self.new_spec_ends_halt(l, w);
        }
        let new = new.map(|n| l.rollout.effective(&n));
        let changed = match (&l.current, &new) {
            (Some(c), Some(n)) => c.hash != n.hash,
            (Some(_), None) => true,
            _ => false,
        };
        // The new release's image comes in while the running kubelet still runs (and before a
        // FleetLock slot is asked for): the kubelet is down for a stop and a start, not for a
        // pull (seen under rkt in the VM: down 2 min 30 s while the next release was fetched).
        if let (true, Some(next)) = (changed, &new) {
            self.exec.prefetch(next).await;
        }
        if let (true, Some(next)) = (changed && self.needs_slot(l), &new) {
            // The running kubelet stays until a FleetLock slot is ours.
            self.wait_for_slot(l, next.clone());
            return;
        }
        if l.pending.take().is_some() {
            l.gate.waiting = None;
        }
        if changed {
            if let Some(c) = l.current.take() {
                tracing::info!(old = %c.hash, new = ?new.as_ref().map(|n| &n.hash),
                    "kubelet spec changed: replacing the container");
                l.name = self
                    .take_down(c, t.stop_grace, "replaced: spec changed", true)
                    .await;
            }
            l.next_start = Instant::now();
        }
        if new.is_none() {
            l.rollout.trial = None;
            self.clear_name(l).await;
            self.update(|s| {
                s.state = KubeletState::NotWanted;
                s.container_id = None;
                s.health = String::new();
            });
        }
        l.want = new;
        self.publish_rollout(l);
    }

    /// An operator's restart, stop or start: the supervisor stays the only one touching the
    /// container, so there is never a second one.
    async fn on_operator(&self, l: &mut Loop, op: Operator, reply: Reply) {
        match op {
            Operator::Retry => return self.retry(l, reply).await,
            Operator::Release => return self.release(l, reply).await,
            Operator::Restart | Operator::Stop | Operator::Start => {}
        }
        let Some(t) = l.tuning.filter(|_| l.want.is_some()) else {
            let _ = reply.send(Err(Refused(
                "no kubelet is wanted on this node (kubelet.enabled, kubelet.image)".into(),
            )));
            return;
        };
        if let Some(c) = l.current.take().filter(|_| op != Operator::Start) {
            tracing::info!(container = %c.id, ?op, "kubelet stopped on request");
            l.name = self
                .take_down(c, t.stop_grace, "stopped on request", op == Operator::Restart)
                .await;
        }
        match op {
            Operator::Stop => {
                l.held = true;
                self.update(|s| {
                    s.state = KubeletState::Stopped;
                    s.health = "stopped on request (nodeward kubelet start)".into();
                });
                let _ = reply.send(Ok(
                    "kubelet stopped; `nodeward kubelet start` starts it again".into()
                ));
            }
            Operator::Retry | Operator::Release => {}
            Operator::Restart | Operator::Start => {
                l.held = false;
                l.next_start = Instant::now();
                if let Some(c) = &l.current {
                    // `start` of a running kubelet: nothing to do.
                    let _ = reply.send(Ok(format!(
                        "kubelet already running in container {}",
                        short(&c.id)
                    )));
                } else {
                    l.waiting = Some(reply);
                }
            }
        }
    }

    /// Stops supervising: the kubelet is stopped too, or left running for the next nodeward.
    async fn on_stop(&self, l: &mut Loop, kubelet: bool) {
        self.flush_exiting(l);
        match l.current.take() {
            Some(c) if kubelet => {
                let grace = l.tuning.map_or(Duration::from_secs(45), |t| t.stop_grace);
                tracing::info!(grace = grace.as_secs(), "stopping the kubelet");
                l.name = self.take_down(c, grace, "stopped with nodeward", false).await;
                self.update(|s| s.state = KubeletState::Stopped);
            }
            None if kubelet => self.clear_name(l).await,
            Some(c) => {
                tracing::info!(container = %c.id, "leaving the kubelet running for the next nodeward");
                c.abort();
            }
            None => {}
        }
    }

    /// The kubelet's process is gone and the engine has not said so yet: the restart is due now
    /// (after the backoff). podman's container is started again in place, and the exit code comes
    /// from its events later; another engine's container is replaced while its wait carries on
    /// for the code. Either way it is journalled by [`Self::on_exit_code`].
    fn on_gone(&self, l: &mut Loop) {
        let Some(c) = l.current.take() else { return };
        self.flush_exiting(l);
        self.note_failure(l, &c.hash, "exited".into());
        self.promote_pending(l);
        let delay = l.backoff.next_delay();
        let at = crate::clock::now();
        tracing::debug!(container = %c.id, "kubelet process gone; restarting before the engine reports its exit");
        let exited = self.exited(&c);
        let (code, name) = match c.wait {
            Some(wait) if !self.exec.runtime.restarts_in_place() => {
                (CodeFrom::Asking(wait), NameHolds::OwnStopped)
            }
            wait => {
                if let Some(w) = wait {
                    w.abort();
                }
                (CodeFrom::Events, NameHolds::OwnExited(exited))
            }
        };
        l.exiting = Some(Exiting {
            id: c.id,
            code,
            at,
            restart_in: delay,
        });
        l.name = name;
        self.record_exit(None, at, delay);
        l.next_start = Instant::now() + delay;
    }

    /// A health probe: healthy for long enough resets the backoff; unhealthy past the startup
    /// grace and the threshold restarts the container.
    async fn on_probe(&self, l: &mut Loop) {
        let (Some(c), Some(w), Some(t)) = (l.current.as_mut(), &l.want, &l.tuning) else {
            return;
        };
        let verdict = match &w.healthz {
            Some((host, port)) => probe_healthz(host, *port).await,
            None => Ok(()),
        };
        let now = Instant::now();
        if verdict.is_ok() || now.duration_since(c.started) >= ASK_CODE_AFTER {
            self.ask_exit_code(&mut l.exiting);
        }
        let why = match verdict {
            Ok(()) => {
                c.failed.reset();
                if std::mem::take(&mut c.image_id_unknown) {
                    // Off the start's path: the image id `status` shows, asked once it runs.
                    self.exec.learn_image_id(w).await;
                }
                let since = *c.healthy_since.get_or_insert(now);
                if now.duration_since(since) >= t.healthy_reset && l.backoff.failures() > 0 {
                    tracing::info!("kubelet healthy for a while: restart backoff reset");
                    l.backoff.reset();
                }
                let health = if w.healthz.is_some() {
                    "healthy"
                } else {
                    "running (no healthz endpoint)"
                };
                if self.exec.status.lock().is_ok_and(|s| s.health != health) {
                    self.update(|s| s.health = health.into());
                }
                // Healthy: /healthz answers, or (health off) it ran for the rollback grace. Only
                // the spec it was started with counts (an adopted older one waits for its slot).
                let judged_after = t.rollback_grace.unwrap_or(t.startup_grace);
                if c.hash == w.hash && (w.healthz.is_some() || now.duration_since(c.started) >= judged_after)
                {
                    self.confirmed_healthy(l);
                }
                return;
            }
            Err(why) => why,
        };
        c.healthy_since = None;
        if now.duration_since(c.started) < t.startup_grace {
            self.update(|s| s.health = format!("starting ({why})"));
            return;
        }
        let failed = c.failed.failed(now, matches!(why, Unhealthy::TimedOut));
        let patience = if c.failed.waiting_on_slow(now) {
            format!(
                "; {} s of {} s for a slow answer",
                c.failed.lasted(now).as_secs(),
                failed_row::SLOW_PATIENCE.as_secs()
            )
        } else {
            String::new()
        };
        self.update(|s| s.health = format!("unhealthy: {why} ({failed} in a row{patience})"));
        if !c.failed.restarts(now, t.unhealthy_threshold) {
            return;
        }
        let (t, Some(c)) = (*t, l.current.take()) else {
            return;
        };
        self.note_failure(l, &c.hash, format!("unhealthy ({why})"));
        self.promote_pending(l);
        let delay = l.backoff.next_delay();
        tracing::warn!(message_id = event::KUBELET_UNHEALTHY, %why, restart_in = ?delay,
            "kubelet unhealthy ({why}): restarting it");
        l.name = self.take_down(c, t.stop_grace, "unhealthy", true).await;
        self.update(|s| {
            s.restarts += 1;
            s.state = KubeletState::Restarting;
        });
        l.next_start = Instant::now() + delay;
    }
}

/// A container id as engines show it.
fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}
