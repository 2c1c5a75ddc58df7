//! Bringing the kubelet container up and taking it down: adopt or start it by what holds its name,
//! watch its process and the engine's wait, stop it with its grace, and clear the name after.

use super::*;

impl Supervisor {
    pub(super) fn name(&self, want: &Option<Desired>) -> String {
        want.as_ref()
            .map_or_else(|| "kubelet".to_owned(), |w| w.spec.name.clone())
    }

    pub(super) fn spawn_wait(&self, id: &str) -> JoinHandle<Result<i32, RuntimeError>> {
        let runtime = self.exec.runtime.clone();
        let id = id.to_owned();
        tokio::spawn(async move { runtime.wait(&id).await })
    }

    /// Adopts or starts the kubelet and watches it. When the supervisor knows what holds the name
    /// (its own stopped container, nothing, or nothing running), it starts at once; otherwise it
    /// asks and decides.
    pub(super) async fn bring_up(
        &self,
        w: &Desired,
        t: &Tuning,
        name: NameHolds,
    ) -> Result<Watched, RuntimeError> {
        let (c, adopted) = match name {
            NameHolds::Unknown => self.exec.ensure_started(w, t).await?,
            NameHolds::Free => (self.exec.start(w, false).await?, false),
            NameHolds::OwnStopped | NameHolds::NotRunning => (self.exec.start(w, true).await?, false),
            NameHolds::OwnExited(exited) if exited.hash == w.hash => {
                match self.exec.start_again(w, exited).await {
                    Ok(c) => (c, false),
                    Err(e) => {
                        // Removed or broken since: look, and start anew.
                        tracing::warn!(error = %crate::text::printable(&e.to_string()), "cannot start the kubelet's container again; creating a new one");
                        self.exec.ensure_started(w, t).await?
                    }
                }
            }
            // Created with another spec: replaced.
            NameHolds::OwnExited(_) => (self.exec.start(w, true).await?, false),
        };
        // An adopted kubelet is past its startup: failed probes count at once.
        let started = if adopted {
            Instant::now()
                .checked_sub(t.startup_grace)
                .unwrap_or_else(Instant::now)
        } else {
            Instant::now()
        };
        Ok(self.watch(&c, &w.hash, started))
    }

    pub(super) fn watch(&self, c: &Container, hash: &str, started: Instant) -> Watched {
        let gone = c.pid.and_then(watch_process);
        let wait = (gone.is_none() || !self.exec.runtime.restarts_in_place()).then(|| self.spawn_wait(&c.id));
        Watched {
            id: c.id.clone(),
            hash: hash.to_owned(),
            started,
            wait,
            gone,
            image_id_unknown: c.image_id.is_empty(),
            failed: super::failed_row::FailedRow::default(),
            healthy_since: None,
        }
    }

    /// After the container `id` stopped: with a start to follow (`restarting`), podman's
    /// `run --replace` will remove it, so it stays until then; otherwise it is removed now.
    pub(super) async fn after_stop(&self, id: &str, restarting: bool) -> NameHolds {
        if restarting && self.exec.runtime.replaces_in_start() {
            return NameHolds::OwnStopped;
        }
        match self.exec.runtime.remove(id).await {
            Ok(()) => NameHolds::Free,
            Err(e) => {
                tracing::warn!(error = %crate::text::printable(&e.to_string()), "cannot remove the stopped kubelet container");
                NameHolds::Unknown
            }
        }
    }

    /// Removes a stopped container of its own left for a restart that is no longer coming.
    pub(super) async fn clear_name(&self, l: &mut Loop) {
        let own = match &l.name {
            NameHolds::OwnStopped => self.name(&l.want),
            NameHolds::OwnExited(exited) => exited.id.clone(),
            NameHolds::Unknown | NameHolds::Free | NameHolds::NotRunning => return,
        };
        l.name = self.after_stop(&own, false).await;
    }

    pub(super) async fn take_down(
        &self,
        c: Watched,
        grace: Duration,
        reason: &str,
        restarting: bool,
    ) -> NameHolds {
        c.abort();
        if let Err(e) = self.exec.runtime.stop(&c.id, grace).await {
            tracing::warn!(error = %crate::text::printable(&e.to_string()), "stopping the kubelet failed");
        }
        let name = self.after_stop(&c.id, restarting).await;
        self.update(|s| {
            s.container_id = None;
            s.health = String::new();
            s.push_exit(LastExit {
                code: None,
                at: crate::clock::now(),
                reason: reason.to_owned(),
                restart_in_ms: None,
            });
        });
        name
    }
}

/// A task that ends when the process `pid` exits; `None` when it cannot be watched (the engine's
/// wait alone then reports the exit).
pub(super) fn watch_process(pid: i32) -> Option<JoinHandle<()>> {
    match crate::host::pidfd::ProcessExit::watch(pid) {
        Ok(Some(exit)) => Some(tokio::spawn(exit.exited())),
        // Already gone: the engine's wait reports it.
        Ok(None) => None,
        Err(e) => {
            tracing::debug!(pid, error = %e, "cannot watch the kubelet process; relying on the engine's wait");
            None
        }
    }
}
