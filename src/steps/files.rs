//! Planning a whole file the agent owns (sysctl.d, modules-load.d, NetworkManager conf): create it,
//! replace it when its contents, mode or owner differ, or leave it alone.

use crate::config::types::{AbsPath, Mode};
use crate::host::HostError;
use crate::host::fs::{self, Kind};
use crate::plan::{Action, Change};
use crate::steps::Context;

/// A file as it must be.
pub struct Wanted<'a> {
    pub path: &'a AbsPath,
    pub contents: String,
    pub mode: Mode,
}

/// [`plan`] for a file at a fixed host path with mode 0644 (the agent's drop-ins).
pub fn plan_dropin(ctx: &Context<'_>, path: &str, contents: String) -> Result<Option<Change>, HostError> {
    let path: AbsPath = path.parse().map_err(|e: String| HostError::Io {
        path: path.into(),
        op: "parse path",
        source: std::io::Error::other(e),
    })?;
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
pub fn plan(ctx: &Context<'_>, want: Wanted<'_>) -> Result<Option<Change>, HostError> {
    let target = ctx.root.resolve_parent(want.path).map_err(|e| HostError::Io {
        path: want.path.to_path_buf(),
        op: "resolve",
        source: std::io::Error::other(e.to_string()),
    })?;
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
    if let Some(o) = &existing {
        let same = o.mode == want.mode.bits()
            && o.uid == 0
            && o.gid == 0
            && std::fs::read(&target).map_err(HostError::io(&target, "read"))? == want.contents.as_bytes()
            && label.as_ref().is_none_or(|l| {
                crate::host::selinux::get_label(&target).ok().flatten().as_deref() == Some(l.as_str())
            });
        if same {
            return Ok(None);
        }
    }
    Ok(Some(Change {
        subject: want.path.to_string(),
        action: Action::WriteFile {
            mode: want.mode,
            owner: ctx.accounts.owner_label(0, 0),
            uid: 0,
            gid: 0,
            bytes: want.contents.len(),
            replaces: existing.is_some(),
            label,
            contents: want.contents.into_bytes(),
        },
        target,
        batch: None,
    }))
}

/// The change that removes a file the agent owns, or `None` when it is not there.
pub fn plan_remove(ctx: &Context<'_>, path: &str) -> Result<Option<Change>, HostError> {
    let abs: AbsPath = path.parse().map_err(|e: String| HostError::Io {
        path: path.into(),
        op: "parse path",
        source: std::io::Error::other(e),
    })?;
    let target = ctx.root.resolve_parent(&abs).map_err(|e| HostError::Io {
        path: abs.to_path_buf(),
        op: "resolve",
        source: std::io::Error::other(e.to_string()),
    })?;
    Ok(match fs::observe(&target)? {
        Some(o) if o.kind == Kind::File => Some(Change {
            subject: abs.to_string(),
            action: Action::RemoveFile,
            target,
            batch: None,
        }),
        _ => None,
    })
}

/// [`plan_remove`], but only for a file that carries nodeward's first line (a file an admin put
/// at the same path is theirs).
pub fn plan_remove_ours(ctx: &Context<'_>, path: &str) -> Result<Option<Change>, HostError> {
    let Some(change) = plan_remove(ctx, path)? else {
        return Ok(None);
    };
    let text = std::fs::read(&change.target).map_err(HostError::io(&change.target, "read"))?;
    Ok(text.starts_with(b"# Written by nodeward").then_some(change))
}

/// Files the agent changes and the reload that makes a running service read them: the reload is
/// planned when any of them changes, or while an earlier failed reload is still owed (see
/// `plan::owed`), and only on the live system. With `--root`, returns a note instead.
pub fn with_reload(
    ctx: &Context<'_>,
    writes: Vec<Change>,
    subject: &str,
    action: Action,
    changes: &mut Vec<Change>,
) -> Option<String> {
    if writes.is_empty() && !crate::plan::owed::is_owed(ctx.root, subject) {
        return None;
    }
    changes.extend(writes);
    if !ctx.kernel_live {
        return Some(format!("{subject} not reloaded (--root without --kernel live)"));
    }
    changes.push(Change {
        subject: subject.into(),
        action,
        target: ctx.root.dir().to_path_buf(),
        batch: None,
    });
    None
}
