//! The `dirs` step: every configured directory exists with its mode and owner. Missing parents are
//! created `0755 root:root`, as `mkdir -p` would. A directory created here gets its SELinux label at
//! creation; labels of existing ones are the `selinux` step's business.

use std::collections::BTreeSet;
use std::path::PathBuf;

use crate::host::HostError;
use crate::host::fs::{self, Kind, Observed};
use crate::plan::Step;
use crate::plan::{Action, Change, StepPlan};
use crate::steps::context::Context;
use crate::steps::files;
use crate::types::{AbsPath, Mode};

/// The owner and mode a directory must have, names resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Wanted {
    pub(crate) mode: Mode,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

/// The actions that take an observed directory to the wanted one; `Err` when something other
/// than a directory is in the way (never removed: that is for a person to decide).
pub(crate) fn diff(wanted: &Wanted, observed: &Observed) -> Result<Vec<DirAction>, Kind> {
    if observed.kind != Kind::Dir {
        return Err(observed.kind);
    }
    let mut actions = Vec::new();
    if observed.uid != wanted.uid || observed.gid != wanted.gid {
        actions.push(DirAction::Chown);
    }
    // chown clears setuid/setgid bits, so the mode goes second.
    if observed.mode != wanted.mode.bits() {
        actions.push(DirAction::Chmod);
    }
    Ok(actions)
}

/// The kinds of fix an existing directory can need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DirAction {
    Chown,
    Chmod,
}

pub(crate) fn plan(ctx: &Context<'_>) -> Result<StepPlan, HostError> {
    let mut out = StepPlan::new(Step::Dirs);
    let configured: BTreeSet<&AbsPath> = ctx.settings.dirs.iter().map(|d| &d.path).collect();
    let mut planned_parents: BTreeSet<AbsPath> = BTreeSet::new();
    for spec in &ctx.settings.dirs {
        let wanted = Wanted {
            mode: spec.mode,
            uid: ctx
                .accounts
                .uid(&spec.owner)
                .map_err(|e| context(&spec.path, e))?,
            gid: ctx
                .accounts
                .gid(&spec.group)
                .map_err(|e| context(&spec.path, e))?,
        };
        plan_missing_parents(ctx, &spec.path, &configured, &mut planned_parents, &mut out)?;
        let target = resolve(ctx, &spec.path)?;
        let subject = spec.path.to_string();
        match fs::observe(&target)? {
            None => out.changes.push(create(ctx, &spec.path, target, &wanted, false)),
            Some(observed) => {
                let actions = diff(&wanted, &observed).map_err(|found| HostError::NotADirectory {
                    path: target.clone(),
                    found: found.name(),
                })?;
                for a in actions {
                    out.changes.push(match a {
                        DirAction::Chown => files::chown(
                            subject.clone(),
                            target.clone(),
                            ctx.accounts.owner_label(observed.uid, observed.gid),
                            ctx.accounts.owner_label(wanted.uid, wanted.gid),
                            wanted.uid,
                            wanted.gid,
                        ),
                        DirAction::Chmod => files::chmod(
                            subject.clone(),
                            target.clone(),
                            Mode::new(observed.mode),
                            wanted.mode,
                        ),
                    });
                }
            }
        }
    }
    Ok(out)
}

/// Adds creations for ancestors of `path` that do not exist and are not configured themselves.
fn plan_missing_parents(
    ctx: &Context<'_>,
    path: &AbsPath,
    configured: &BTreeSet<&AbsPath>,
    planned: &mut BTreeSet<AbsPath>,
    out: &mut StepPlan,
) -> Result<(), HostError> {
    let mut missing = Vec::new();
    let mut cur = path.parent();
    while let Some(p) = cur {
        if p.as_str() == "/" || configured.contains(&p) || planned.contains(&p) {
            break;
        }
        let target = resolve(ctx, &p)?;
        match fs::observe(&target)? {
            Some(o) if o.kind == Kind::Dir => break,
            Some(o) => {
                return Err(HostError::NotADirectory {
                    path: target,
                    found: o.kind.name(),
                });
            }
            None => missing.push((p.clone(), target)),
        }
        cur = p.parent();
    }
    let wanted = Wanted {
        mode: Mode::new(0o755),
        uid: 0,
        gid: 0,
    };
    for (p, target) in missing.into_iter().rev() {
        out.changes.push(create(ctx, &p, target, &wanted, true));
        planned.insert(p);
    }
    Ok(())
}

fn create(ctx: &Context<'_>, path: &AbsPath, target: PathBuf, wanted: &Wanted, parent: bool) -> Change {
    let label = ctx.labeling.label_for(path);
    let action = Action::CreateDir {
        mode: wanted.mode,
        uid: wanted.uid,
        gid: wanted.gid,
        owner: ctx.accounts.owner_label(wanted.uid, wanted.gid),
        label: label.clone(),
        parent,
    };
    let meta = fs::Meta {
        mode: wanted.mode.bits(),
        uid: wanted.uid,
        gid: wanted.gid,
        label,
    };
    files::create_dir(path.to_string(), target, action, meta)
}

fn resolve(ctx: &Context<'_>, path: &AbsPath) -> Result<std::path::PathBuf, HostError> {
    ctx.root
        .resolve(path)
        .map_err(HostError::resolve(path.to_path_buf()))
}

fn context(path: &AbsPath, e: HostError) -> HostError {
    HostError::Context {
        path: path.to_path_buf(),
        op: "resolve owner",
        source: Box::new(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(kind: Kind, mode: u32, uid: u32, gid: u32) -> Observed {
        Observed {
            kind,
            mode,
            uid,
            gid,
            dev: 0,
        }
    }

    fn wanted(mode: u32, uid: u32, gid: u32) -> Wanted {
        Wanted {
            mode: Mode::new(mode),
            uid,
            gid,
        }
    }

    #[test]
    fn converged_dir_needs_nothing() {
        assert_eq!(
            diff(&wanted(0o755, 0, 0), &obs(Kind::Dir, 0o755, 0, 0)),
            Ok(vec![])
        );
    }

    #[test]
    fn owner_is_fixed_before_mode() {
        assert_eq!(
            diff(&wanted(0o2750, 0, 232), &obs(Kind::Dir, 0o755, 0, 0)),
            Ok(vec![DirAction::Chown, DirAction::Chmod])
        );
        assert_eq!(
            diff(&wanted(0o750, 0, 0), &obs(Kind::Dir, 0o755, 0, 0)),
            Ok(vec![DirAction::Chmod])
        );
    }

    #[test]
    fn a_file_in_the_way_is_a_conflict_not_a_change() {
        assert_eq!(
            diff(&wanted(0o755, 0, 0), &obs(Kind::File, 0o644, 0, 0)),
            Err(Kind::File)
        );
        assert_eq!(
            diff(&wanted(0o755, 0, 0), &obs(Kind::Symlink, 0o777, 0, 0)),
            Err(Kind::Symlink)
        );
    }
}
