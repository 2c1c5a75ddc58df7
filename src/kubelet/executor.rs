//! Carrying out one decision about the kubelet container: adopt it, start it (mount sources
//! prepared, image made present), start it again in place, or replace it. The supervisor calls
//! this for each decision of its loop; `nodeward apply` calls it once ([`super::oneshot`]).

use std::sync::Mutex;

use super::decide::{Seen, decide};
use super::runtime::{Container, Image, PullProgress, Runtime, RuntimeError};
use super::spec::{Desired, KubeletSpec, PREPARE_DIRS};
use super::status::{KubeletState, KubeletStatus, SharedStatus};
use crate::event;
use crate::kubelet::settings::Tuning;
use crate::plan::KubeletOp;
use crate::root::HostRoot;

/// A container of the supervisor's own that exited, as it was when it ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Exited {
    pub(crate) id: String,
    pub(crate) hash: String,
    pub(crate) image: String,
    pub(crate) image_id: String,
}

pub(crate) struct Executor {
    pub(crate) runtime: Runtime,
    pub(crate) root: HostRoot,
    pub(crate) status: SharedStatus,
    on_change: Box<dyn Fn() + Send + Sync>,
    /// The image the last container started from, for the spec's image list: known present, so a
    /// restart does not ask again. Forgotten when a start fails.
    image: Mutex<Option<(Vec<String>, Image)>>,
}

impl Executor {
    /// `status` is updated with what happens; `on_change` is called after each update.
    pub(crate) fn new(
        runtime: Runtime,
        root: HostRoot,
        status: SharedStatus,
        on_change: Box<dyn Fn() + Send + Sync>,
    ) -> Executor {
        if let Ok(mut s) = status.lock() {
            s.runtime = runtime.name().to_owned();
        }
        Executor {
            runtime,
            root,
            status,
            on_change,
            image: Mutex::new(None),
        }
    }

    pub(crate) fn update(&self, f: impl FnOnce(&mut KubeletStatus)) {
        if let Ok(mut s) = self.status.lock() {
            f(&mut s);
        }
        (self.on_change)();
    }

    /// Adopts the running kubelet if its spec matches, else clears the way (a stale container of the
    /// same name, or one with another spec) and starts a new one. Returns it and whether it was
    /// adopted. The decision is [`decide`]'s, the same `plan` shows.
    pub(crate) async fn ensure_started(
        &self,
        w: &Desired,
        t: &Tuning,
    ) -> Result<(Container, bool), RuntimeError> {
        let existing = self.runtime.inspect(&w.spec.name).await?;
        let op = decide(existing.as_ref(), w);
        self.execute(w, t, existing, op).await
    }

    /// Carries out a decision made earlier (by `plan`), once the container it was made about is
    /// found to be still the one there; otherwise nothing is touched.
    pub(crate) async fn execute_planned(
        &self,
        w: &Desired,
        t: &Tuning,
        op: Option<KubeletOp>,
        seen: &Seen,
    ) -> Result<(Container, bool), RuntimeError> {
        let existing = self.runtime.inspect(&w.spec.name).await?;
        let now = Seen::of(existing.as_ref());
        if now != *seen {
            return Err(RuntimeError::Changed {
                name: w.spec.name.clone(),
                planned: seen.to_string(),
                found: now.to_string(),
            });
        }
        self.execute(w, t, existing, op).await
    }

    pub(crate) async fn execute(
        &self,
        w: &Desired,
        t: &Tuning,
        existing: Option<Container>,
        op: Option<KubeletOp>,
    ) -> Result<(Container, bool), RuntimeError> {
        match (op, existing) {
            (None, Some(c)) => {
                tracing::info!(container = %c.id, hash = %w.hash, "adopted the running kubelet (same spec)");
                self.publish(&c, true);
                return Ok((c, true));
            }
            (Some(KubeletOp::Replace), Some(c)) => {
                tracing::info!(message_id = event::KUBELET_REPLACED, container = %c.id, old = ?c.spec_hash,
                    new = %w.hash, "running kubelet has another spec: replacing it");
                self.runtime.stop(&c.id, t.stop_grace).await?;
                return self.start(w, true).await.map(|c| (c, false));
            }
            (Some(KubeletOp::ReplaceStale), Some(c)) => {
                tracing::info!(container = %c.id, "replacing a stale kubelet container");
                return self.start(w, true).await.map(|c| (c, false));
            }
            // Start, or nothing there to replace or adopt.
            _ => {}
        }
        self.start(w, false).await.map(|c| (c, false))
    }

    /// Prepares the mount sources, makes the image present and starts the container (`replace`: in
    /// place of a stopped one holding the name). What started is known from the run itself, so no
    /// inspect follows it; the wait that follows reports a container that died at once.
    pub(crate) async fn start(&self, w: &Desired, replace: bool) -> Result<Container, RuntimeError> {
        self.prepare_dirs(&w.spec)?;
        self.update(|s| {
            s.state = KubeletState::Starting;
            s.health = "starting".into();
        });
        // The image is known present from the last start; or, nothing known yet, the first one is
        // tried as it is (`--pull=never`): on a node whose image was pulled beforehand that is one
        // podman query less at every daemon start. Only when that run fails are the images looked
        // up, pulled if need be (mirrors in order), and the run tried once more.
        let (image, looked_up) = match (self.known_image(&w.spec.images), w.spec.images.first()) {
            (Some(image), _) => (image, true),
            (None, Some(first)) if self.runtime.lists_images() => (
                Image {
                    reference: first.clone(),
                    id: String::new(),
                },
                false,
            ),
            (None, _) => (self.ensure_image(w).await?, true),
        };
        tracing::info!(image = %image.reference, hash = %w.hash, "starting the kubelet container");
        let started = self
            .runtime
            .start(&w.spec, &image.reference, &w.hash, replace)
            .await;
        let (image, started) = match started {
            Err(e) if !looked_up => {
                tracing::debug!(error = %e, "starting from the first image as it is failed; looking the images up");
                let image = self.ensure_image(w).await?;
                let again = self
                    .runtime
                    .start(&w.spec, &image.reference, &w.hash, replace)
                    .await;
                (image, again)
            }
            other => (image, other),
        };
        let id = match started {
            Ok(id) => id,
            Err(e) => {
                // The image may be what failed (removed since): the next attempt looks again.
                self.remember_image(None);
                return Err(e);
            }
        };
        self.remember_image(Some((w.spec.images.clone(), image.clone())));
        let started = Container {
            id,
            running: true,
            exit_code: None,
            image: image.reference,
            image_id: image.id,
            started_at: None,
            spec_hash: Some(w.hash.clone()),
            pid: self.runtime.started_pid(),
        };
        tracing::info!(container = %started.id, image = %started.image, hash = %w.hash, "kubelet started");
        self.publish(&started, false);
        super::spec_record::record(&self.root, w);
        Ok(started)
    }

    /// Starts the supervisor's own exited container again, as it was created (same spec, image,
    /// name and id).
    pub(crate) async fn start_again(&self, w: &Desired, exited: Exited) -> Result<Container, RuntimeError> {
        self.prepare_dirs(&w.spec)?;
        self.update(|s| {
            s.state = KubeletState::Starting;
            s.health = "starting".into();
        });
        self.runtime.start_again(&exited.id).await?;
        let started = Container {
            id: exited.id,
            running: true,
            exit_code: None,
            image: exited.image,
            image_id: exited.image_id,
            started_at: None,
            spec_hash: Some(exited.hash),
            pid: self.runtime.started_pid(),
        };
        tracing::info!(container = %started.id, "kubelet started again in its container");
        self.publish(&started, false);
        Ok(started)
    }

    /// Makes the wanted kubelet's image present before a running kubelet is taken down for it,
    /// and remembers it for the start that follows. A failure is said and left to that start
    /// (which pulls again and fails as it would have).
    pub(crate) async fn prefetch(&self, w: &Desired) {
        if self.known_image(&w.spec.images).is_some() {
            return;
        }
        match self.ensure_image(w).await {
            Ok(image) => self.remember_image(Some((w.spec.images.clone(), image))),
            Err(e) => tracing::warn!(error = %crate::text::printable(&e.to_string()),
                "cannot pull the new kubelet's image before replacing the running one"),
        }
    }

    /// Makes one of the images present (see [`Runtime::ensure_image`]), the pull's progress and
    /// what it came to kept in the status (STATUS, `nodeward status`, `kubelet show`).
    async fn ensure_image(&self, w: &Desired) -> Result<Image, RuntimeError> {
        let progress = |p: Option<PullProgress>| self.update(|s| s.pull = p);
        let (image, pulled) = self.runtime.ensure_image(&w.pull_sources(), &progress).await?;
        if pulled.is_some() {
            self.update(|s| s.last_pull = pulled);
        }
        Ok(image)
    }

    pub(crate) fn publish(&self, c: &Container, adopted: bool) {
        self.update(|s| {
            s.state = KubeletState::Running;
            s.container_id = Some(c.id.clone());
            s.image = Some(c.image.clone());
            s.image_id = (!c.image_id.is_empty()).then(|| c.image_id.clone());
            s.spec_hash = c.spec_hash.clone();
            s.since = Some(crate::clock::now());
            s.adopted = adopted;
            s.error = None;
            if s.health.is_empty() || s.health == "exited" {
                s.health = "starting".into();
            }
        });
    }

    /// Asks the engine for the id of the image the running kubelet started from, when the start did
    /// not learn it, and keeps it with the image.
    pub(crate) async fn learn_image_id(&self, w: &Desired) {
        let Some(mut image) = self.known_image(&w.spec.images).filter(|i| i.id.is_empty()) else {
            return;
        };
        let Some(id) = self.runtime.image_id(&image.reference).await else {
            return;
        };
        image.id = id.clone();
        self.remember_image(Some((w.spec.images.clone(), image)));
        self.update(|s| s.image_id = Some(id));
    }

    /// The image known present for this list of images, if any.
    pub(crate) fn known_image(&self, images: &[String]) -> Option<Image> {
        let known = self.image.lock().ok()?;
        known
            .as_ref()
            .filter(|(for_images, _)| for_images.as_slice() == images)
            .map(|(_, image)| image.clone())
    }

    pub(crate) fn remember_image(&self, image: Option<(Vec<String>, Image)>) {
        if let Ok(mut known) = self.image.lock() {
            *known = image;
        }
    }

    /// Creates the directories Typhoon `mkdir -p`s before starting the kubelet, and checks that every
    /// other mount source exists (the engine's own error would not say which one is missing).
    pub(crate) fn prepare_dirs(&self, spec: &KubeletSpec) -> Result<(), RuntimeError> {
        let dirs = spec
            .mounts
            .iter()
            .filter(|m| m.create)
            .map(|m| m.source.as_str())
            .chain(PREPARE_DIRS.iter().copied());
        for dir in dirs {
            let path = self
                .root
                .resolve_str(dir)
                .map_err(|source| RuntimeError::Resolve {
                    path: dir.to_owned(),
                    source,
                })?;
            std::fs::create_dir_all(&path).map_err(|source| RuntimeError::Spawn {
                command: format!("mkdir -p {}", path.display()),
                source,
            })?;
        }
        for m in spec.mounts.iter().filter(|m| self.runtime.takes(m.only)) {
            let path = self.root.resolve_str(&m.source);
            if !path.is_ok_and(|p| std::fs::symlink_metadata(p).is_ok()) {
                return Err(RuntimeError::MountSource {
                    source_path: m.source.clone(),
                    target: m.target.clone(),
                });
            }
        }
        Ok(())
    }
}
