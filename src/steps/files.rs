//! Planning a whole file the agent owns (sysctl.d, modules-load.d, NetworkManager conf): create it,
//! replace it when its contents, mode or owner differ, or leave it alone.

use crate::host::HostError;
use crate::host::fs::{self, Kind};
use crate::types::{AbsPath, Mode};
use std::path::PathBuf;

use crate::plan::{Action, Change, Effect, EffectError};
use crate::steps::context::Context;

/// A file as it must be.
pub(crate) struct Wanted<'a> {
    pub(crate) path: &'a AbsPath,
    pub(crate) contents: String,
    pub(crate) mode: Mode,
}

/// [`plan`] for a file at a fixed host path with mode 0644 (the agent's drop-ins).
pub(crate) fn plan_dropin(
    ctx: &Context<'_>,
    path: &str,
    contents: String,
) -> Result<Option<Change>, HostError> {
    let path: AbsPath = path.parse().map_err(HostError::invalid(path, "parse path"))?;
    plan(
        ctx,
        Wanted {
            path: &path,
            contents,
            mode: Mode::new(0o644),
        },
    )
}

/// The change that makes the file as wanted, or `None` when it already is (nothing is written,
/// so no mtime moves).
pub(crate) fn plan(ctx: &Context<'_>, want: Wanted<'_>) -> Result<Option<Change>, HostError> {
    let target = ctx
        .root
        .resolve_parent(want.path)
        .map_err(HostError::resolve(want.path.to_path_buf()))?;
    let label = ctx.labeling.label_for(want.path);
    let existing = match fs::observe(&target)? {
        None => None,
        Some(o) if o.kind == Kind::File => Some(o),
        Some(o) => {
            return Err(HostError::NotAFile {
                path: target,
                found: o.kind.name(),
            });
        }
    };
    let meta = fs::Meta {
        mode: want.mode.bits(),
        uid: 0,
        gid: 0,
        label,
    };
    if let Some(o) = &existing {
        if fs::matches(&target, o, want.contents.as_bytes(), &meta)? {
            return Ok(None);
        }
    }
    let action = Action::WriteFile {
        mode: want.mode,
        owner: ctx.accounts.owner_label(0, 0),
        uid: 0,
        gid: 0,
        bytes: want.contents.len(),
        replaces: existing.is_some(),
        label: meta.label.clone(),
    };
    let effect = WriteFile {
        meta,
        contents: want.contents.into_bytes(),
    };
    Ok(Some(Change::new(want.path.to_string(), target, action, effect)))
}

/// Whether any of these host paths exists in the root (a service's binary: is it installed?).
pub(crate) fn any_exists(ctx: &Context<'_>, paths: &[&str]) -> bool {
    paths.iter().any(|b| {
        b.parse::<AbsPath>()
            .ok()
            .and_then(|p| ctx.root.resolve(&p).ok())
            .is_some_and(|p| p.exists())
    })
}

/// The names in a host directory (UTF-8 ones, at most `max` read, sorted); none when it is not
/// there. For the few files a step looks for among an administrator's.
pub(crate) fn names_in(ctx: &Context<'_>, dir: &AbsPath, max: usize) -> Vec<String> {
    let Ok(real) = ctx.root.resolve(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = std::fs::read_dir(real)
        .into_iter()
        .flatten()
        .flatten()
        .take(max)
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    names
}

/// The change that removes a file the agent owns, or `None` when it is not there.
pub(crate) fn plan_remove(ctx: &Context<'_>, path: &str) -> Result<Option<Change>, HostError> {
    let abs: AbsPath = path.parse().map_err(HostError::invalid(path, "parse path"))?;
    let target = ctx
        .root
        .resolve_parent(&abs)
        .map_err(HostError::resolve(abs.to_path_buf()))?;
    Ok(match fs::observe(&target)? {
        Some(o) if o.kind == Kind::File => Some(Change::new(
            abs.to_string(),
            target,
            Action::RemoveFile,
            RemoveFile,
        )),
        _ => None,
    })
}

/// [`plan_remove`], but only for a file that carries nodeward's first line (a file an admin put
/// at the same path is theirs).
pub(crate) fn plan_remove_ours(ctx: &Context<'_>, path: &str) -> Result<Option<Change>, HostError> {
    let Some(change) = plan_remove(ctx, path)? else {
        return Ok(None);
    };
    let text = crate::host::read::read_below(ctx.root, &change.target, crate::host::read::Kind::Config)?;
    Ok(text.starts_with(b"# Written by nodeward").then_some(change))
}

/// Files the agent changes and the reload that makes a running service read them: the reload is
/// planned when any of them changes, or while an earlier failed reload is still owed (see
/// `plan::owed`), and only on the live system. With `--root`, returns a note instead.
pub(crate) fn with_reload(
    ctx: &Context<'_>,
    writes: Vec<Change>,
    subject: &str,
    action: Action,
    effect: impl Effect + 'static,
    changes: &mut Vec<Change>,
) -> Option<String> {
    if writes.is_empty() && !crate::plan::owed::is_owed(ctx.root, subject) {
        return None;
    }
    let written: Vec<String> = writes.iter().map(|c| c.subject.clone()).collect();
    changes.extend(writes);
    if !ctx.kernel_live {
        return Some(format!("{subject} not reloaded (--root without --kernel live)"));
    }
    // A reload after a failed write would load the old file: it waits for the write.
    changes.push(Change::new(subject, ctx.root.dir(), action, Owed(effect)).after(written));
    None
}

/// An effect on a running service (a reload) that is remembered as owed when it fails, so the
/// next plan asks for it again although the files it was for are already right. The change's
/// target is the root.
#[derive(Debug)]
pub(crate) struct Owed<E>(pub E);

impl<E: Effect> Effect for Owed<E> {
    fn apply(&self, change: &Change) -> Result<(), EffectError> {
        crate::plan::owed::settle(&change.target, &change.subject, self.0.apply(change))
    }
}

/// Asks systemd to reload the unit named by the change's subject, or restart it when it runs and
/// cannot reload.
#[derive(Debug)]
pub(crate) struct ReloadUnit;

/// A reload or restart systemd refused or did not answer.
#[derive(Debug, thiserror::Error)]
#[error("D-Bus: {unit}: {source}")]
pub(crate) struct ReloadFailed {
    pub(crate) unit: String,
    #[source]
    pub(crate) source: zbus::Error,
}

impl Effect for ReloadUnit {
    fn apply(&self, change: &Change) -> Result<(), EffectError> {
        crate::host::dbus::reload_or_try_restart(&change.subject).map_err(|source| {
            Box::new(ReloadFailed {
                unit: change.subject.clone(),
                source,
            }) as EffectError
        })
    }
}

// The plain file-system changes every file-owning step plans (dirs, selinux, hostfiles, nm,
// modules, sysctl, kubelet), each built with the effect that carries it out.

/// Creates a directory with its final metadata.
pub(crate) fn create_dir(subject: String, target: PathBuf, action: Action, meta: fs::Meta) -> Change {
    Change::new(subject, target, action, CreateDir(meta))
}

/// Changes permission bits.
pub(crate) fn chmod(subject: String, target: PathBuf, from: Mode, to: Mode) -> Change {
    Change::new(subject, target, Action::Chmod { from, to }, SetMode(to.bits()))
}

/// Changes owner and group; `from`/`to` are how a plan names them.
pub(crate) fn chown(
    subject: String,
    target: PathBuf,
    from: String,
    to: String,
    uid: u32,
    gid: u32,
) -> Change {
    let action = Action::Chown { from, to, uid, gid };
    Change::new(subject, target, action, SetOwner { uid, gid })
}

/// Sets the SELinux context.
pub(crate) fn relabel(subject: String, target: PathBuf, from: Option<String>, to: String) -> Change {
    let effect = SetLabel(to.clone());
    Change::new(subject, target, Action::Relabel { from, to }, effect)
}

#[derive(Debug)]
struct CreateDir(fs::Meta);

impl Effect for CreateDir {
    fn apply(&self, change: &Change) -> Result<(), EffectError> {
        Ok(fs::create_dir(&change.target, &self.0)?)
    }
}

#[derive(Debug)]
struct SetMode(u32);

impl Effect for SetMode {
    fn apply(&self, change: &Change) -> Result<(), EffectError> {
        Ok(fs::set_mode(&change.target, self.0)?)
    }
}

#[derive(Debug)]
struct SetOwner {
    uid: u32,
    gid: u32,
}

impl Effect for SetOwner {
    fn apply(&self, change: &Change) -> Result<(), EffectError> {
        Ok(fs::set_owner(&change.target, self.uid, self.gid)?)
    }
}

#[derive(Debug)]
struct SetLabel(String);

impl Effect for SetLabel {
    fn apply(&self, change: &Change) -> Result<(), EffectError> {
        fs::set_label(&change.target, &self.0)?;
        Ok(())
    }
}

/// Writes the whole file atomically, created with its final metadata; a missing parent directory
/// is created first.
struct WriteFile {
    meta: fs::Meta,
    /// Never printed: secrets go through this effect.
    contents: Vec<u8>,
}

impl std::fmt::Debug for WriteFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteFile")
            .field("meta", &self.meta)
            .field("bytes", &self.contents.len())
            .finish()
    }
}

impl Effect for WriteFile {
    fn apply(&self, change: &Change) -> Result<(), EffectError> {
        if let Some(dir) = change.target.parent() {
            if !dir.exists() {
                std::fs::create_dir_all(dir).map_err(HostError::io(dir, "create directory"))?;
            }
        }
        fs::write_atomic(&change.target, &self.contents, &self.meta)?;
        Ok(())
    }
}

/// Removes the file; one already gone is fine.
#[derive(Debug)]
struct RemoveFile;

impl Effect for RemoveFile {
    fn apply(&self, change: &Change) -> Result<(), EffectError> {
        match std::fs::remove_file(&change.target) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(Box::new(HostError::io(&change.target, "remove")(e)))
            }
            _ => Ok(()),
        }
    }
}
