//! What the supervisor does on an exit: each recorded with its code (asked of the engine, or the
//! process's own), journalled once, and the restart scheduled with its backoff. An exit still
//! waiting for its code is `exiting.rs`'s record.

use super::*;

impl Supervisor {
    /// The watched container as it ran, with the image `status` showed for it.
    pub(super) fn exited(&self, c: &Watched) -> Exited {
        let (image, image_id) = self
            .exec
            .status
            .lock()
            .map(|s| (s.image.clone(), s.image_id.clone()))
            .unwrap_or_default();
        Exited {
            id: c.id.clone(),
            hash: c.hash.clone(),
            image: image.unwrap_or_default(),
            image_id: image_id.unwrap_or_default(),
        }
    }

    /// Asks podman's events for the last exit's code once the kubelet started in its place is up.
    pub(super) fn ask_exit_code(&self, exiting: &mut Option<Exiting>) {
        if let Some(e) = exiting.as_mut().filter(|e| matches!(e.code, CodeFrom::Events)) {
            let code = e.code_from_events(self.exec.runtime.clone());
            e.code = CodeFrom::Asking(tokio::spawn(async move {
                code.await.ok_or_else(|| RuntimeError::Output {
                    command: "podman events".into(),
                    message: "no died event".into(),
                })
            }));
        }
    }

    /// One more restart after an exit, with its code when known and the backoff before it.
    pub(super) fn record_exit(&self, code: Option<i32>, at: u64, restart_in: Duration) {
        self.update(|s| {
            s.restarts += 1;
            s.state = KubeletState::Restarting;
            s.health = "exited".into();
            s.container_id = None;
            s.push_exit(LastExit {
                code,
                at,
                reason: "exited".into(),
                restart_in_ms: Some(u64::try_from(restart_in.as_millis()).unwrap_or(u64::MAX)),
            });
        });
    }

    /// The engine reported the exit code of a container whose exit was seen earlier.
    pub(super) fn on_exit_code(&self, l: &mut Loop, waited: Waited) {
        let Some(e) = l.exiting.take() else { return };
        let code = match waited {
            Ok(Ok(code)) => Some(code),
            Ok(Err(err)) => {
                tracing::debug!(error = %err, "no exit code from the engine");
                None
            }
            Err(_) => None,
        };
        self.journal_exit(&e, code);
    }

    /// Journals a pending exit before the next one replaces it: without its code when the engine
    /// was still answering, or, never asked, once podman's events give it (in the background).
    pub(super) fn flush_exiting(&self, l: &mut Loop) {
        let Some(e) = l.exiting.take() else { return };
        match &e.code {
            CodeFrom::Asking(answer) => {
                answer.abort();
                self.journal_exit(&e, None);
            }
            CodeFrom::Events => {
                let code = e.code_from_events(self.exec.runtime.clone());
                tokio::spawn(async move { journal_exit(&e, code.await) });
            }
        }
    }

    pub(super) fn journal_exit(&self, e: &Exiting, code: Option<i32>) {
        journal_exit(e, code);
        if let Some(code) = code {
            self.update(|s| s.exit_code_known(e.at, code));
        }
    }

    /// The watched container's wait returned: it exited (restart after the backoff), or the wait
    /// itself failed while the container still runs (watch it again).
    pub(super) async fn on_exit(&self, l: &mut Loop, exit: Waited) {
        let Some(c) = l.current.take() else { return };
        if let Some(g) = &c.gone {
            g.abort();
        }
        // Whether the name is known to hold this container, exited (the wait said so).
        let (code, own) = match exit {
            Ok(Ok(code)) => (Some(code), true),
            Ok(Err(e)) => match self.exec.runtime.inspect(&self.name(&l.want)).await {
                Ok(Some(state)) if state.running && state.id == c.id => {
                    tracing::warn!(error = %crate::text::printable(&e.to_string()), "waiting on the kubelet failed; watching it again");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    l.current = Some(Watched {
                        wait: Some(self.spawn_wait(&c.id)),
                        gone: None,
                        ..c
                    });
                    return;
                }
                Ok(Some(state)) => (state.exit_code, state.id == c.id),
                _ => (None, false),
            },
            Err(_) => (None, false),
        };
        let shown = code.map_or_else(|| "unknown".to_owned(), |c| c.to_string());
        self.note_failure(l, &c.hash, format!("exited (code {shown})"));
        self.promote_pending(l);
        let delay = l.backoff.next_delay();
        tracing::warn!(message_id = event::KUBELET_EXITED, container = %c.id, code = ?code, restart_in = ?delay,
            "kubelet exited (code {code:?}): restarting it in {delay:?}");
        l.name = match self.after_stop(&c.id, own).await {
            NameHolds::Free if !own => NameHolds::Unknown,
            holds => holds,
        };
        self.record_exit(code, crate::clock::now(), delay);
        l.next_start = Instant::now() + delay;
    }
}
