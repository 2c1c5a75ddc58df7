//! The daemon's image imports, off the converge thread. Checking and loading a shipped archive
//! takes minutes on a slow disk or a loaded host (a 227 MiB kubelet archive: ~5 minutes of
//! `podman load` under TCG): a pass that waited for it would hold READY past systemd's start
//! timeout and starve the watchdog, and systemd would kill the import and start it again forever.
//!
//! So the `images` step hands an archive here and goes on; one worker thread checks and imports
//! the queued archives one at a time (an engine's load is disk-bound: two at once only share the
//! disk), wakes the daemon after each (`on_done`), and the next pass finds it in the record. The
//! `kubelet` step asks [`Importer::brings`] whether an import under way may bring the kubelet's
//! image, and waits for it rather than pulling the image from a registry meanwhile.
//!
//! An interrupted import (a stop, a crash) left no record: the next daemon queues it again, beside
//! its passes, holding nothing. A failed one is tried again after a backoff (5 s doubling to
//! 5 minutes), so a broken engine costs one import per backoff, not one per pass.
//! One-shot commands (`apply`) import inline instead.
//!
//! An archive the record says is in its engines is checked here too, not on the pass: asking the
//! engines (containerd's image list, the kubelet engine's inspect) took 2.4 s of each pass under
//! TCG, on the way to the kubelet's start. Such a check (`Job::verify`) holds nothing, wakes
//! nobody and is not waited for; only when it finds an engine without its image does it become an
//! import like any other.
//!
//! At the daemon's start those checks also wait for the kubelet's first start ([`Importer::hold_checks`],
//! bounded): each asks the engines with processes of their own (`ctr`, `podman image inspect`),
//! which on a node of one or two vCPUs slowed the kubelet's own `podman run` beside them. Imports
//! never wait: the kubelet may be waiting for one.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::archive::ShippedImage;
use super::decide::Targets;
use super::record::Fingerprint;
use super::settings::ImagesSettings;
use super::{Done, Engines, Found, ImagesError};
use crate::root::HostRoot;

/// One archive to import, as the step planned it.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    pub(crate) root: HostRoot,
    pub(crate) settings: ImagesSettings,
    pub(crate) engines: Engines,
    pub(crate) found: Found,
    /// The engines the record and the engines agree already hold it.
    pub(crate) already: Vec<String>,
    /// When the step read the record and asked the engines it decided on.
    pub(crate) planned_at: Instant,
    /// The record says the engines hold it: ask them first, and import only what one lacks.
    pub(crate) verify: Option<Verify>,
}

/// What the engines hold, asked when a check needs it (the step that builds it knows the engines).
pub(crate) trait Holds: Send + Sync {
    fn has(&self, engine: &str, image: &str) -> bool;
}

/// The engines' answers for a check of a recorded archive.
#[derive(Clone)]
pub(crate) struct Verify(pub(crate) Arc<dyn Holds>);

impl std::fmt::Debug for Verify {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Verify")
    }
}

/// What the step hears about an archive it hands in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Queued {
    /// Being checked or imported now: what it is doing (checking, or loading into the engines).
    Running { what: String },
    /// Waiting for the imports before it: its place in the queue (1: next).
    Waiting { place: usize },
    /// Its last import failed; the next is not due yet: why, and in how many seconds.
    Failed { why: String, retry_in: u64 },
    /// Imported after the step decided (its record was read before the import ended).
    JustDone,
}

/// An archive's last failure and when it may be tried again.
#[derive(Debug)]
struct Failure {
    file: Fingerprint,
    why: String,
    next: Instant,
    backoff: Duration,
}

/// The archive being imported.
#[derive(Debug)]
struct Running {
    path: String,
    file: Fingerprint,
    targets: Targets,
    /// What it holds, once checked (until then it may hold anything).
    images: Option<Vec<ShippedImage>>,
    /// Only asking the engines whether they still hold what the record says (not an import yet).
    asking: bool,
}

/// What a job came to.
enum Ran {
    /// The engines hold what the record says: nothing done.
    Held,
    Imported(Done),
}

#[derive(Debug, Default)]
struct State {
    queue: VecDeque<Job>,
    running: Option<Running>,
    failed: BTreeMap<String, Failure>,
    /// The last import of each archive that succeeded: its file and when it ended.
    finished: BTreeMap<String, (Fingerprint, Instant)>,
    /// A worker thread is alive (it ends when the queue is empty).
    worker: bool,
    /// Checks of recorded archives wait until then (or until released), imports do not.
    checks_held_until: Option<Instant>,
}

impl State {
    /// Where the next job to run is in the queue: the first one, or while checks are held the
    /// first import (`None`: nothing may run now).
    fn runnable(&self, now: Instant) -> Option<usize> {
        let held = self.checks_held_until.is_some_and(|until| now < until);
        if held {
            self.queue.iter().position(|q| q.verify.is_none())
        } else if self.queue.is_empty() {
            None
        } else {
            Some(0)
        }
    }
}

/// The imports of one daemon.
pub(crate) struct Importer {
    state: Arc<Mutex<State>>,
    /// Told when the queue grows or held checks are released (a waiting worker looks again).
    changed: Arc<Condvar>,
    on_done: Arc<dyn Fn() + Send + Sync>,
}

impl std::fmt::Debug for Importer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Importer").finish_non_exhaustive()
    }
}

const FIRST_BACKOFF: Duration = Duration::from_secs(5);
const MAX_BACKOFF: Duration = Duration::from_secs(300);

impl Importer {
    pub(crate) fn new(on_done: impl Fn() + Send + Sync + 'static) -> Importer {
        Importer {
            state: Arc::default(),
            changed: Arc::default(),
            on_done: Arc::new(on_done),
        }
    }

    /// Checks of recorded archives wait until [`release_checks`](Self::release_checks), or `limit`
    /// from now, whichever is first (the daemon's start: until the kubelet's first start came to
    /// something). Imports go on meanwhile.
    pub(crate) fn hold_checks(&self, limit: Duration) {
        if let Ok(mut st) = self.state.lock() {
            st.checks_held_until = Some(Instant::now() + limit);
        }
    }

    /// Held checks may run now.
    pub(crate) fn release_checks(&self) {
        if let Ok(mut st) = self.state.lock() {
            if st.checks_held_until.take().is_some() {
                self.changed.notify_all();
            }
        }
    }

    /// Hands in an archive the step found to import: queued unless it is already (the same file),
    /// or failed recently. Says where it stands.
    pub(crate) fn submit(&self, job: Job) -> Queued {
        let Ok(mut st) = self.state.lock() else {
            return Queued::Failed {
                why: "the import state is poisoned".into(),
                retry_in: 0,
            };
        };
        let path = job.found.path.to_string();
        let now = Instant::now();
        if let Some(r) = st
            .running
            .as_ref()
            .filter(|r| r.path == path && r.file == job.found.file)
        {
            let what = match &r.images {
                None => "checking every blob".to_owned(),
                Some(_) => "loading into the engines".to_owned(),
            };
            return Queued::Running { what };
        }
        // A pass that read the record before this archive's import ended wants it again: done.
        let done_since = st
            .finished
            .get(&path)
            .filter(|(file, at)| *file == job.found.file && *at >= job.planned_at);
        if done_since.is_some() {
            return Queued::JustDone;
        }
        if let Some(f) = st
            .failed
            .get(&path)
            .filter(|f| f.file == job.found.file && now < f.next)
        {
            return Queued::Failed {
                why: f.why.clone(),
                retry_in: f.next.saturating_duration_since(now).as_secs().max(1),
            };
        }
        // The file changed since it was queued, or only a check of it is queued: this replaces it.
        st.queue.retain(|q| {
            q.found.path != job.found.path || (q.found.file == job.found.file && q.verify.is_none())
        });
        let place = match st.queue.iter().position(|q| q.found.path == job.found.path) {
            Some(at) => at + 1,
            None => {
                st.queue.push_back(job);
                st.queue.len()
            }
        };
        let start = !st.worker;
        st.worker = true;
        // Started with the lock released: a failed start takes it again to say so.
        drop(st);
        if start {
            self.spawn();
        } else {
            self.changed.notify_all();
        }
        Queued::Waiting { place }
    }

    /// Hands in a recorded archive to check that the engines still hold it (`job.verify`): queued
    /// unless it is already queued or under way. Nothing waits for it.
    pub(crate) fn check_held(&self, job: Job) {
        let Ok(mut st) = self.state.lock() else { return };
        let path = job.found.path.to_string();
        let known = st.running.as_ref().is_some_and(|r| r.path == path)
            || st.queue.iter().any(|q| q.found.path == job.found.path);
        if known {
            return;
        }
        st.queue.push_back(job);
        let start = !st.worker;
        st.worker = true;
        drop(st);
        if start {
            self.spawn();
        } else {
            self.changed.notify_all();
        }
    }

    /// Whether an import is queued or under way (its end wakes the daemon); checks of recorded
    /// archives are not imports.
    pub(crate) fn busy(&self) -> bool {
        self.state.lock().is_ok_and(|st| {
            st.running.as_ref().is_some_and(|r| !r.asking) || st.queue.iter().any(|q| q.verify.is_none())
        })
    }

    /// The archive of an import queued or under way that may bring `kubelet_engine` an image of
    /// `repository` (one not yet checked may hold anything): the kubelet waits for it.
    pub(crate) fn brings(&self, kubelet_engine: &str, repository: &str) -> Option<String> {
        let st = self.state.lock().ok()?;
        let may_bring = |targets: &Targets, images: Option<&[ShippedImage]>| {
            targets.kubelet_engine.as_deref() == Some(kubelet_engine)
                && targets.kubelet_repository == repository
                && images.is_none_or(|list| targets.for_images(list).iter().any(|e| e == kubelet_engine))
        };
        if let Some(r) = st
            .running
            .as_ref()
            .filter(|r| !r.asking && may_bring(&r.targets, r.images.as_deref()))
        {
            return Some(r.path.clone());
        }
        st.queue
            .iter()
            .find(|q| q.verify.is_none() && may_bring(&q.engines.targets, None))
            .map(|q| q.found.path.to_string())
    }

    /// Imports whatever is queued, one archive at a time, on a thread of its own; ends when the
    /// queue is empty or the daemon stops.
    fn spawn(&self) {
        let state = self.state.clone();
        let changed = self.changed.clone();
        let on_done = self.on_done.clone();
        let spawned = std::thread::Builder::new().name("import".into()).spawn(move || {
            // Its time is not the converge's: a long import neither holds nor feeds the
            // watchdog's judgement of the passes.
            crate::progress::detach_this_thread();
            while let Some(job) = next(&state, &changed) {
                let result = run(&state, &job);
                if finish(&state, &job, result) {
                    on_done();
                }
            }
        });
        if let Err(e) = spawned {
            if let Ok(mut st) = self.state.lock() {
                st.worker = false;
            }
            tracing::error!(error = %e, "cannot start an image import thread");
        }
    }
}

/// The next job, marked running; `None` (and the worker gone) when there is none or the daemon
/// stops. Held checks are waited for here (looking again at least every second, for a stop).
fn next(state: &Mutex<State>, changed: &Condvar) -> Option<Job> {
    let mut st = state.lock().ok()?;
    let job = loop {
        if crate::progress::cancelled() {
            break None;
        }
        let now = Instant::now();
        if let Some(at) = st.runnable(now) {
            break st.queue.remove(at);
        }
        let Some(until) = st.checks_held_until.filter(|u| now < *u && !st.queue.is_empty()) else {
            break None;
        };
        let wait = until.saturating_duration_since(now).min(Duration::from_secs(1));
        st = changed.wait_timeout(st, wait).ok()?.0;
    };
    match &job {
        Some(j) => {
            st.running = Some(Running {
                path: j.found.path.to_string(),
                file: j.found.file,
                targets: j.engines.targets.clone(),
                images: None,
                asking: j.verify.is_some(),
            });
        }
        None => st.worker = false,
    }
    job
}

fn run(state: &Mutex<State>, job: &Job) -> Result<Ran, ImagesError> {
    let already = match &job.verify {
        None => job.already.clone(),
        Some(Verify(holds)) => match still_held(job, holds.as_ref()) {
            None => return Ok(Ran::Held),
            Some(already) => {
                // An import from here on: the kubelet waits for it as for any other.
                if let Ok(mut st) = state.lock() {
                    if let Some(r) = st.running.as_mut() {
                        r.asking = false;
                    }
                }
                already
            }
        },
    };
    let checked = |images: &[ShippedImage]| {
        if let Ok(mut st) = state.lock() {
            if let Some(r) = st.running.as_mut() {
                r.images = Some(images.to_vec());
            }
        }
    };
    super::import_archive_then(
        &job.root,
        &job.settings,
        &job.engines,
        &job.found,
        &already,
        checked,
    )
    .map(Ran::Imported)
}

/// `None` when the engines hold what the record says this archive brought them; otherwise the
/// engines that still hold it (the import skips them).
fn still_held(job: &Job, holds: &dyn Holds) -> Option<Vec<String>> {
    let path = job.found.path.to_string();
    let (record, _) = super::read_record(&job.root);
    let present = |engine: &str, image: &str| holds.has(engine, image);
    match super::decide::decide(&path, job.found.file, &record, &job.engines.targets, &present) {
        super::decide::Decision::Import { why, already } => {
            tracing::info!(archive = %path, why = %why, "importing a shipped archive again");
            Some(already)
        }
        super::decide::Decision::Unchanged | super::decide::Decision::Refused { .. } => None,
    }
}

/// Keeps the outcome: a failure waits out its backoff before the step may queue the file again.
/// Whether the daemon is woken for it (a check that found everything held is not news).
fn finish(state: &Mutex<State>, job: &Job, result: Result<Ran, ImagesError>) -> bool {
    let path = job.found.path.to_string();
    match &result {
        Ok(Ran::Imported(done)) => super::log_imported(&job.found, done),
        Ok(Ran::Held) => {}
        Err(e) => tracing::warn!(archive = %path, error = %e, "image archive not imported"),
    }
    let Ok(mut st) = state.lock() else {
        return true;
    };
    st.running = None;
    match result {
        Ok(Ran::Held) => return false,
        Ok(Ran::Imported(_)) => {
            st.failed.remove(&path);
            st.finished.insert(path, (job.found.file, Instant::now()));
        }
        // A refusal is in the record (the step reads it from there, once); the rest is retried.
        Err(ImagesError::Archive { .. }) => {
            st.failed.remove(&path);
        }
        Err(e) => {
            let backoff = st
                .failed
                .get(&path)
                .filter(|f| f.file == job.found.file)
                .map_or(FIRST_BACKOFF, |f| (f.backoff * 2).min(MAX_BACKOFF));
            st.failed.insert(
                path,
                Failure {
                    file: job.found.file,
                    why: e.to_string(),
                    next: Instant::now() + backoff,
                    backoff,
                },
            );
        }
    }
    true
}

#[cfg(test)]
#[path = "background_tests.rs"]
mod tests;
