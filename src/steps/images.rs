//! The `images` step: image archives shipped with the node (`[images]`), imported into
//! containerd's CRI namespace and, for the kubelet's image, into its engine — before the kubelet
//! step, so a first boot needs no registry. The domain is `images`; this wires it to the node.

use crate::host::HostError;
use std::sync::{Arc, OnceLock};

use crate::images::background::{self, Holds, Queued, Verify};
use crate::images::decide::{self, Decision, Targets};
use crate::images::{self, Engines};
use crate::kubelet::runtime::find_in_path;
use crate::plan::{Action, Change, Effect, EffectError, FailureKind, Step, StepPlan};
use crate::steps::context::Context;
use crate::types::AbsPath;

/// How long listing containerd's images may take.
const LIST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

pub(crate) fn plan(ctx: &Context<'_>) -> Result<StepPlan, HostError> {
    let mut out = StepPlan::new(Step::Images);
    let settings = &ctx.settings.images;
    let (found, errors) = images::find(ctx.root, settings);
    for e in errors {
        let subject = subject_of(&e);
        out.fail_item(subject, FailureKind::Permanent, e);
    }
    if found.is_empty() {
        let dirs: Vec<&str> = settings.dirs.iter().map(AbsPath::as_str).collect();
        out.notes
            .push(format!("no image archives in {}", dirs.join(", ")));
        return Ok(out);
    }
    if !ctx.containers_live {
        out.notes.push(format!(
            "{} archive(s) found; imported on the running node only (no engines under --root)",
            found.len()
        ));
        return Ok(out);
    }
    if let Some(why) = images::record_blocked(ctx.root) {
        out.fail(FailureKind::Permanent, why);
        return Ok(out);
    }
    let engines = engines(ctx);
    // Before the record is read: an import that ends after this was not seen by this pass.
    let planned_at = std::time::Instant::now();
    let (record, set_aside) = images::read_record(ctx.root);
    out.notes.extend(set_aside);
    // The daemon's pass takes the record's word and its importer asks the engines beside the
    // pass (2.4 s of every pass under TCG, on the way to the kubelet's start); a one-shot command
    // asks them here.
    let pass = Archives {
        ctx,
        held: Arc::new(Held::new(&engines, ctx)),
        engines,
        planned_at,
    };
    let trust_record = ctx.imports.is_some();
    let present = |engine: &str, image: &str| trust_record || pass.held.has(engine, image);
    for f in &found {
        let path = f.path.to_string();
        match decide::decide(&path, f.file, &record, &pass.engines.targets, &present) {
            Decision::Unchanged => pass.recorded(&mut out, f, &record.archives[&path]),
            Decision::Refused { error } => {
                out.fail_item(
                    path,
                    FailureKind::Permanent,
                    format!("{error} (not read again until the file changes)"),
                );
            }
            Decision::Import { why, already } => {
                let targets = &pass.engines.targets;
                if !targets.containerd && targets.kubelet_engine.is_none() {
                    out.fail_item(path, FailureKind::Permanent, NOWHERE);
                    continue;
                }
                plan_import(ctx, &mut out, pass.job(f, already, None), why);
            }
        }
    }
    Ok(out)
}

/// What the step's archives share in one pass.
struct Archives<'c, 'a> {
    ctx: &'c Context<'a>,
    engines: Engines,
    /// When the record was read.
    planned_at: std::time::Instant,
    held: Arc<Held>,
}

impl Archives<'_, '_> {
    fn job(&self, found: &images::Found, already: Vec<String>, verify: Option<Verify>) -> background::Job {
        background::Job {
            root: self.ctx.root.clone(),
            settings: self.ctx.settings.images.clone(),
            engines: self.engines.clone(),
            found: found.clone(),
            already,
            planned_at: self.planned_at,
            verify,
        }
    }

    /// An archive the record says its engines took: said, checked beside the pass by the daemon's
    /// importer, and its images compared with the digest `kubelet.image` pins.
    fn recorded(&self, out: &mut StepPlan, found: &images::Found, done: &images::record::Imported) {
        let path = found.path.as_str();
        out.notes.push(format!(
            "{path}: imported before: {}",
            images::names(&done.images)
        ));
        if let Some(imports) = self.ctx.imports {
            imports.check_held(self.job(found, Vec::new(), Some(Verify(self.held.clone()))));
        }
        if let Some(pin) = pinned(self.ctx) {
            let repo = self.engines.targets.kubelet_repository.as_str();
            if let Some(why) = decide::pin_unmet(&done.images, repo, &pin) {
                out.notes.push(format!("{path}: {why}"));
            }
        }
    }
}

/// An archive to import: the daemon hands it to its importer (imported beside the passes, never
/// holding one, nor READY); a one-shot command imports it inline as a change.
fn plan_import(ctx: &Context<'_>, out: &mut StepPlan, job: background::Job, why: String) {
    let path = job.found.path.to_string();
    match ctx.imports {
        Some(imports) => {
            let (kind, said) = queued(imports.submit(job));
            out.fail_item(path, kind, said);
        }
        None => out.changes.push(Change::new(
            path,
            ctx.root.lexical(&job.found.path),
            Action::ImportImages { why },
            Import(job),
        )),
    }
}

/// What a pass says of an archive the importer has: waiting for it (its end wakes the daemon),
/// or a failure retried on the importer's own schedule.
fn queued(q: Queued) -> (FailureKind, String) {
    match q {
        // No running clock in the text: a step's error is journalled when it changes, so it says
        // the import's phase (checking, loading), not its seconds.
        Queued::Running { what } => (
            FailureKind::Waiting,
            format!("importing in the background ({what}); the other steps go on"),
        ),
        Queued::Waiting { place } => (
            FailureKind::Waiting,
            format!("queued for import in the background ({place} in line); the other steps go on"),
        ),
        Queued::JustDone => (
            FailureKind::Waiting,
            "imported just now; checked again next pass".to_owned(),
        ),
        Queued::Failed { why, retry_in } => (
            FailureKind::Transient,
            format!("{why}; next import in {retry_in} s"),
        ),
    }
}

/// The subject an error names: the archive's path (or the directory's) as its message starts.
fn subject_of(e: &images::ImagesError) -> String {
    let text = e.to_string();
    text.split(": ").next().unwrap_or("images").to_owned()
}

/// The digest `kubelet.image` pins, if it does.
fn pinned(ctx: &Context<'_>) -> Option<String> {
    ctx.settings.kubelet.image.as_ref()?.digest().map(str::to_owned)
}

/// Why nothing can take an archive.
const NOWHERE: &str = "no engine to import into: containerd's ctr is not installed and the kubelet's engine cannot load archives";

/// containerd (its `ctr`, and its socket: running) and the kubelet's engine, as this node has them.
pub(crate) fn engines(ctx: &Context<'_>) -> Engines {
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
    let ctr = find_in_path("ctr", &path);
    let socket_path = ctx
        .root
        .resolve(&crate::abs_path!("/run/containerd/containerd.sock"))
        .unwrap_or_else(|_| {
            ctx.root
                .lexical(&crate::abs_path!("/run/containerd/containerd.sock"))
        });
    let socket = socket_path.exists();
    let kubelet = &ctx.settings.kubelet;
    let runtime = kubelet
        .enabled
        .then(|| crate::steps::kubelet::runtime(ctx).ok())
        .flatten();
    let kubelet_load = runtime
        .as_ref()
        .and_then(|r| r.load_command().map(|(p, a)| (p.to_path_buf(), a)));
    let kubelet_repository = kubelet
        .image
        .as_ref()
        .map(|i| images::archive::normalize(i.repository()))
        .map(|n| decide::repository(&n).to_owned())
        .unwrap_or_default();
    Engines {
        targets: Targets {
            containerd: ctr.is_some(),
            kubelet_engine: kubelet_load
                .as_ref()
                .and(runtime.as_ref())
                .map(|r| r.name().to_owned()),
            kubelet_repository,
        },
        ctr,
        containerd_running: socket,
        containerd_socket: socket_path,
        kubelet_load,
    }
}

/// What the engines hold, asked when first needed (containerd's list once), on whichever thread
/// asks: the pass's for a one-shot command, the importer's for the daemon.
struct Held {
    engines: Engines,
    containerd: OnceLock<Option<Vec<String>>>,
    kubelet: Option<(String, crate::kubelet::runtime::Runtime)>,
}

impl Held {
    fn new(engines: &Engines, ctx: &Context<'_>) -> Held {
        let kubelet = engines
            .targets
            .kubelet_engine
            .clone()
            .and_then(|name| crate::steps::kubelet::runtime(ctx).ok().map(|r| (name, r)));
        Held {
            engines: engines.clone(),
            containerd: OnceLock::new(),
            kubelet,
        }
    }
}

impl Holds for Held {
    /// Whether `engine` holds `image`; unknown counts as not held (the import is idempotent).
    fn has(&self, engine: &str, image: &str) -> bool {
        if engine == decide::CONTAINERD {
            let e = &self.engines;
            return self
                .containerd
                .get_or_init(|| {
                    e.ctr
                        .as_deref()
                        .filter(|_| e.containerd_running)
                        .and_then(|ctr| images::containerd_images(ctr, &e.containerd_socket, LIST_TIMEOUT))
                })
                .as_ref()
                .is_some_and(|list| list.iter().any(|i| i == image));
        }
        match &self.kubelet {
            Some((name, runtime)) if name == engine => {
                crate::kubelet::block_on(runtime.image_id(image)).is_some()
            }
            _ => false,
        }
    }
}

/// Checks one archive and imports it inline (`images::import_archive`): one-shot commands.
#[derive(Debug)]
struct Import(background::Job);

impl Effect for Import {
    fn apply(&self, _: &Change) -> Result<(), EffectError> {
        let j = &self.0;
        let done = images::import_archive(&j.root, &j.settings, &j.engines, &j.found, &j.already)?;
        images::log_imported(&j.found, &done);
        Ok(())
    }
}
