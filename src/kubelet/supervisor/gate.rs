//! The supervisor's fleet duties: a new spec on trial (healthy within its grace period, or rolled
//! back to the last healthy one) and the FleetLock slot taken before a running, healthy kubelet is
//! replaced (given back once the new one is healthy, kept after a rollback).
//!
//! The decisions are [`crate::kubelet::rollout`]'s and the requests [`crate::fleetlock`]'s; this
//! file carries them out inside the supervisor's loop.

use std::time::Duration;

use tokio::time::Instant;

use super::slot::InFlight;
use super::{Loop, Refused, Reply, Supervisor};
use crate::event;
use crate::fleetlock::Settings;
use crate::fleetlock::client::{self, LockError, Op};
use crate::fleetlock::held::{self, Held};
use crate::kubelet::rollout::Trial;
use crate::kubelet::spec::Desired;

impl Supervisor {
    /// New FleetLock settings (sent before each wanted spec). The first time, the record on disk
    /// says whether this node holds a slot from before a restart or a reboot: a slot kept after a
    /// rollback stays kept; any other is given back once the kubelet is healthy.
    pub(super) fn on_fleet(&self, l: &mut Loop, fleet: Option<(Settings, String)>) {
        if l.gate.settings == fleet {
            return;
        }
        let turned_off = fleet.is_none() && l.gate.settings.is_some();
        if let Some((s, _)) = &fleet {
            l.gate.last = Some(s.clone());
        }
        l.gate.settings = fleet;
        if turned_off && l.gate.held.is_some() {
            // FleetLock turned off: nothing coordinates this node any more, and a slot it holds
            // would be held forever. Given back where its record says.
            tracing::info!(
                message_id = event::FLEET_LOCK,
                "fleet_lock turned off: giving the recorded slot back"
            );
            if l.gate.request.as_ref().is_some_and(|r| r.op == Op::Lock) {
                if let Some(r) = l.gate.request.take() {
                    r.task.abort();
                }
            }
            l.pending = None;
            if l.gate.request.is_none() {
                self.ask(l, Op::Unlock);
            }
        }
        l.gate.reset_bound();
        if !l.gate.loaded && l.gate.settings.is_some() {
            l.gate.loaded = true;
            l.gate.held = held::load(&self.exec.root);
            if let Some(h) = &l.gate.held {
                tracing::info!(message_id = event::FLEET_LOCK, group = %h.group, halted = h.halted,
                    "this node holds a FleetLock slot from before its restart");
            }
        }
        self.publish_rollout(l);
    }

    /// Whether replacing the running kubelet needs a slot first: FleetLock is on, none is held,
    /// and the kubelet runs healthy (replacing an unhealthy one takes nothing away, and the
    /// in-cluster lock server may be unreachable then).
    pub(super) fn needs_slot(&self, l: &Loop) -> bool {
        l.gate.settings.is_some()
            && l.gate.held.is_none()
            && l.current.as_ref().is_some_and(|c| c.healthy_since.is_some())
    }

    /// Keeps the running kubelet and asks for a slot for `next`.
    pub(super) fn wait_for_slot(&self, l: &mut Loop, next: Desired) {
        if l.pending.as_ref().is_some_and(|p| p.hash == next.hash) {
            return;
        }
        tracing::info!(new = %next.hash, "kubelet spec changed: asking for a FleetLock slot before replacing the running kubelet");
        l.pending = Some(next);
        l.gate.waiting = Some("asking".into());
        if l.gate.request.is_none() && l.gate.retry_at.is_none() {
            // A configuration push reaches the whole fleet in the same second: the first request
            // too waits a random time below the retry bound, so the lock server sees a spread.
            l.gate.reset_bound();
            l.gate.back_off();
        }
        self.publish_rollout(l);
    }

    /// Sends a request off the loop: a lock to the configured server, a release to where the
    /// slot's record says it was taken.
    fn ask(&self, l: &mut Loop, op: Op) {
        let target = match op {
            Op::Lock => l.gate.settings.clone(),
            Op::Unlock => l.gate.held.as_ref().and_then(|h| l.gate.release_target(h)),
        };
        let Some(target) = target else {
            return;
        };
        l.gate.retry_at = None;
        let (s, id) = target.clone();
        let task = tokio::task::spawn_blocking(move || client::request(&s, &id, op));
        l.gate.request = Some(InFlight {
            op,
            target,
            task,
            replies: Vec::new(),
        });
    }

    /// A retry is due: ask again for what is still wanted.
    pub(super) fn on_lock_retry(&self, l: &mut Loop) {
        l.gate.retry_at = None;
        if l.gate.request.is_some() {
            return;
        }
        if l.pending.is_some() && l.gate.held.is_none() {
            self.ask(l, Op::Lock);
        } else if self.release_due(l) {
            self.ask(l, Op::Unlock);
        }
    }

    /// A slot held and not kept on purpose, while the kubelet runs healthy and no spec is on trial.
    fn release_due(&self, l: &Loop) -> bool {
        l.gate.held.as_ref().is_some_and(|h| !h.halted)
            && l.rollout.trial.is_none()
            && l.pending.is_none()
            && l.current.as_ref().is_some_and(|c| c.healthy_since.is_some())
    }

    pub(super) async fn on_lock_answer(
        &self,
        l: &mut Loop,
        answer: Result<Result<(), LockError>, tokio::task::JoinError>,
    ) {
        let Some(InFlight {
            op, target, replies, ..
        }) = l.gate.request.take()
        else {
            return;
        };
        let reply_all = |result: Result<String, Refused>| {
            for r in &replies {
                let _ = r.send(result.clone());
            }
        };
        let answer = answer.unwrap_or_else(|e| {
            Err(LockError::Unreachable {
                url: String::new(),
                message: e.to_string(),
            })
        });
        match (op, answer) {
            (Op::Lock, Ok(())) => self.slot_taken(l, target).await,
            (Op::Lock, Err(e)) => {
                tracing::warn!(error = %e, kind = e.kind(), "no FleetLock slot: keeping the running kubelet; retrying");
                l.gate.waiting = Some(e.to_string());
                l.gate.back_off();
            }
            (Op::Unlock, Ok(())) => {
                tracing::info!(message_id = event::FLEET_LOCK, group = %target.0.group, server = %target.0.base_url,
                    "FleetLock slot given back");
                l.gate.held = None;
                held::clear(&self.exec.root);
                reply_all(Ok(format!(
                    "FleetLock slot of group {} given back",
                    target.0.group
                )));
            }
            (Op::Unlock, Err(e)) if e.not_ours() => {
                tracing::warn!(error = %e, "the FleetLock server says the recorded slot is not this node's: forgetting it");
                l.gate.held = None;
                held::clear(&self.exec.root);
                reply_all(Ok(format!(
                    "the FleetLock server says the slot is not this node's ({e}): forgotten"
                )));
            }
            (Op::Unlock, Err(e)) => {
                tracing::warn!(error = %e, "cannot give the FleetLock slot back; retrying");
                reply_all(Err(Refused(format!("cannot give the FleetLock slot back: {e}"))));
                l.gate.back_off();
            }
        }
        self.publish_rollout(l);
    }

    /// A slot is ours: recorded first (with the server, group and id the request went to), then
    /// the waiting change is carried out. FleetLock turned off meanwhile: the slot goes back.
    async fn slot_taken(&self, l: &mut Loop, (s, id): (Settings, String)) {
        if l.gate.settings.is_none() {
            l.gate.held = Some(self.held_record(&s, &id, ""));
            if let Err(e) = held::save(&self.exec.root, &self.held_record(&s, &id, "")) {
                tracing::warn!(error = %e, "cannot record the FleetLock slot");
            }
            self.ask(l, Op::Unlock);
            return;
        }
        let Some(next) = l.pending.take() else {
            // The change went away while asking: the slot goes back.
            l.gate.held = Some(self.held_record(&s, &id, ""));
            self.ask(l, Op::Unlock);
            return;
        };
        let record = self.held_record(&s, &id, &next.hash);
        if let Err(e) = held::save(&self.exec.root, &record) {
            tracing::warn!(error = %e, "cannot record the FleetLock slot; giving it back");
            l.gate.held = Some(record);
            l.pending = Some(next);
            self.ask(l, Op::Unlock);
            return;
        }
        tracing::info!(message_id = event::FLEET_LOCK, group = %s.group, server = %s.base_url, new = %next.hash,
            "FleetLock slot taken: replacing the kubelet");
        l.gate.held = Some(record);
        l.gate.waiting = None;
        self.replace_now(l, next, "replaced: spec changed").await;
    }

    fn held_record(&self, s: &Settings, id: &str, spec: &str) -> Held {
        Held {
            base_url: s.base_url.clone(),
            group: s.group.clone(),
            id: id.to_owned(),
            since: crate::clock::now(),
            for_spec: spec.to_owned(),
            halted: false,
        }
    }

    /// Takes the running kubelet down and wants `next` at once.
    pub(super) async fn replace_now(&self, l: &mut Loop, next: Desired, reason: &str) {
        if let (Some(c), Some(t)) = (l.current.take(), l.tuning) {
            tracing::info!(old = %c.hash, new = %next.hash, "replacing the kubelet container");
            l.name = self.take_down(c, t.stop_grace, reason, true).await;
        }
        l.want = Some(next);
        l.next_start = Instant::now();
    }

    /// At a start with the name's holder unknown (the daemon just started): a running, healthy
    /// kubelet of another spec (nodeward restarted with a new configuration or package) is
    /// watched as it is, and replaced only once a slot is ours. Returns whether it was kept.
    pub(super) async fn keep_other_spec_for_slot(&self, l: &mut Loop, w: &Desired) -> bool {
        if l.gate.settings.is_none() || l.gate.held.is_some() {
            return false;
        }
        let Ok(Some(c)) = self.exec.runtime.inspect(&w.spec.name).await else {
            return false;
        };
        let other = c.spec_hash.clone().filter(|h| *h != w.hash);
        let (true, Some(hash)) = (c.running, other) else {
            return false;
        };
        let healthy = match &w.healthz {
            Some((host, port)) => crate::kubelet::healthz::probe_healthz(host, *port).await.is_ok(),
            None => true,
        };
        if !healthy {
            return false;
        }
        let t = l.tuning.map_or(Duration::ZERO, |t| t.startup_grace);
        let started = Instant::now().checked_sub(t).unwrap_or_else(Instant::now);
        let mut watched = self.watch(&c, &hash, started);
        watched.healthy_since = Some(Instant::now());
        self.exec.publish(&c, true);
        tracing::info!(container = %c.id, running = %hash, new = %w.hash,
            "a healthy kubelet of another spec runs: kept until a FleetLock slot is ours");
        l.current = Some(watched);
        self.wait_for_slot(l, w.clone());
        true
    }

    /// The kubelet exited or went unhealthy: a change waiting for a slot needs none any more.
    pub(super) fn promote_pending(&self, l: &mut Loop) {
        if let Some(next) = l.pending.take() {
            tracing::info!(new = %next.hash, "the running kubelet is down: its replacement needs no FleetLock slot");
            l.gate.waiting = None;
            l.want = Some(next);
            self.publish_rollout(l);
        }
    }

    /// Before a start: a spec other than the last healthy one begins a trial.
    pub(super) fn begin_trial(&self, l: &mut Loop) {
        let (Some(w), Some(t)) = (&l.want, &l.tuning) else {
            return;
        };
        if t.rollback_grace.is_some() && l.rollout.begins_trial(w) {
            tracing::info!(spec = %w.hash, grace = ?t.rollback_grace, "new kubelet spec on trial");
            l.rollout.trial = Some(Trial {
                hash: w.hash.clone(),
                clock: None,
                failures: 0,
                last_failure: None,
            });
            self.publish_rollout(l);
        }
    }

    /// After a start attempt: the trial's grace period counts from here (the image pulled).
    pub(super) fn start_trial_clock(&self, l: &mut Loop) {
        let hash = l.want.as_ref().map(|w| w.hash.as_str());
        if let Some(tr) = l
            .rollout
            .trial
            .as_mut()
            .filter(|tr| Some(tr.hash.as_str()) == hash)
        {
            tr.clock.get_or_insert_with(Instant::now);
        }
    }

    /// A failure of the spec `hash` (an exit, a failed start, unhealthiness), for the trial's reason.
    pub(super) fn note_failure(&self, l: &mut Loop, hash: &str, what: String) {
        if let Some(tr) = l.rollout.trial.as_mut().filter(|tr| tr.hash == hash) {
            tr.failures += 1;
            tr.last_failure = Some(what);
        }
    }

    /// The running kubelet is healthy: its spec is the one to come back to, a trial ends, and a
    /// slot held for it goes back.
    pub(super) fn confirmed_healthy(&self, l: &mut Loop) {
        let Some(w) = l.want.clone() else { return };
        if l.rollout.healthy(&w) {
            tracing::info!(message_id = event::KUBELET_REPLACED, spec = %w.hash, "new kubelet spec healthy: kept");
            self.publish_rollout(l);
        }
        if self.release_due(l) && l.gate.request.is_none() && l.gate.retry_at.is_none() {
            // Given back after a random wait below the retry bound, as every request (a fleet
            // rebooted together must not release together).
            l.gate.reset_bound();
            l.gate.back_off();
        }
    }

    /// A trial past its grace period is rolled back.
    pub(super) async fn check_trial(&self, l: &mut Loop) {
        let (Some(tr), Some(t)) = (&l.rollout.trial, &l.tuning) else {
            return;
        };
        let Some(grace) = t.rollback_grace else { return };
        if !tr.expired(Instant::now(), grace) {
            return;
        }
        let reason = tr.reason(grace);
        let Some(bad) = l.want.clone().filter(|w| w.hash == tr.hash) else {
            l.rollout.trial = None;
            return;
        };
        let Some((rb, good)) = l.rollout.roll_back(&bad, reason, crate::clock::now()) else {
            return;
        };
        tracing::error!(message_id = event::KUBELET_ROLLED_BACK, bad = %rb.bad, image = %rb.bad_image, to = %rb.to,
            reason = %rb.reason, "kubelet spec {} rolled back to {}: {}", rb.bad, rb.to, rb.reason);
        if let Some(h) = l.gate.held.as_mut() {
            h.halted = true;
            if let Err(e) = held::save(&self.exec.root, h) {
                tracing::warn!(error = %e, "cannot record the kept FleetLock slot");
            }
            tracing::warn!(message_id = event::FLEET_LOCK, group = %h.group,
                "FleetLock slot kept after the rollback: the rollout halts here; configure a release that works (its healthy start gives the slot back); `nodeward kubelet release` with this image still configured hands the slot to the next node, which then runs it");
        }
        self.update(|s| s.rollbacks += 1);
        l.backoff.reset();
        self.replace_now(l, good, "rolled back").await;
        self.publish_rollout(l);
    }

    /// `nodeward kubelet retry`: the held-back spec is wanted again, on trial.
    pub(super) async fn retry(&self, l: &mut Loop, reply: Reply) {
        let (Some(rb), Some(wanted)) = (l.rollout.retry(), l.wanted.clone()) else {
            let _ = reply.send(Err(Refused("no kubelet spec is held back by a rollback".into())));
            return;
        };
        tracing::info!(spec = %rb.bad, "retrying the rolled-back kubelet spec on request");
        if let Some(h) = l.gate.held.as_mut().filter(|h| h.halted) {
            // The slot kept by the rollback serves the retry.
            h.halted = false;
            h.for_spec = wanted.hash.clone();
            let _ = held::save(&self.exec.root, h);
        }
        let message = format!("retrying kubelet spec {} (image {})", rb.bad, rb.bad_image);
        if self.needs_slot(l) {
            self.wait_for_slot(l, wanted);
        } else {
            self.replace_now(l, wanted, "retry on request").await;
        }
        self.publish_rollout(l);
        let _ = reply.send(Ok(message));
    }

    /// `nodeward kubelet release`: gives back the slot this node holds, whatever kept it. The
    /// release runs beside the loop (a slow lock server never holds up the kubelet's supervision);
    /// a second request while one is in flight rides on it, and all are answered when it ends.
    pub(super) async fn release(&self, l: &mut Loop, reply: Reply) {
        let Some(h) = l.gate.held.clone() else {
            let _ = reply.send(Err(Refused("this node holds no FleetLock slot".into())));
            return;
        };
        if let Some(r) = l.gate.request.as_mut().filter(|r| r.op == Op::Unlock) {
            r.replies.push(reply);
            return;
        }
        if let Some(r) = l.gate.request.take() {
            r.task.abort();
        }
        if l.gate.release_target(&h).is_none() {
            let _ = reply.send(Err(Refused(
                "FleetLock was never configured on this run: no server to give the slot back to".into(),
            )));
            return;
        }
        tracing::info!(message_id = event::FLEET_LOCK, group = %h.group, "giving the FleetLock slot back on request");
        self.ask(l, Op::Unlock);
        if let Some(r) = l.gate.request.as_mut() {
            r.replies.push(reply);
        }
        self.publish_rollout(l);
    }

    /// A new spec from the configuration ends a halt: it is the operator's decision to go on, so
    /// the slot the rollback kept serves it, and is given back once it is healthy (a new spec that
    /// fails halts again).
    pub(super) fn new_spec_ends_halt(&self, l: &mut Loop, wanted: &Desired) {
        if l.rollout.holding_back(&wanted.hash).is_some() {
            return;
        }
        let Some(h) = l
            .gate
            .held
            .as_mut()
            .filter(|h| h.halted && h.for_spec != wanted.hash)
        else {
            return;
        };
        tracing::info!(message_id = event::FLEET_LOCK, group = %h.group, new = %wanted.hash,
            "a new kubelet spec ends the halted rollout: it runs on the kept slot, given back once healthy");
        h.halted = false;
        h.for_spec = wanted.hash.clone();
        if let Err(e) = held::save(&self.exec.root, h) {
            tracing::warn!(error = %e, "cannot record the FleetLock slot");
        }
    }

    /// Publishes the rollback, the trial and FleetLock in the status.
    pub(super) fn publish_rollout(&self, l: &Loop) {
        let rolled_back = l
            .rollout
            .rolled_back()
            .filter(|rb| l.wanted.as_ref().is_some_and(|w| w.hash == rb.bad))
            .cloned();
        let trial = l.rollout.trial.as_ref().map(|tr| {
            let grace = l.tuning.and_then(|t| t.rollback_grace).unwrap_or_default();
            format!(
                "spec {} on trial: healthy within {} s of its start, or rolled back",
                tr.hash,
                grace.as_secs()
            )
        });
        let fleet = l.gate.status();
        self.update(|s| {
            s.rolled_back = rolled_back;
            s.trial = trial;
            s.fleet_lock = fleet;
        });
    }
}
