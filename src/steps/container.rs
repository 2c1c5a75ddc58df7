//! The `container` step: what the kubelet needs from the machine it runs on that a container host
//! may not give it, repaired where nodeward can (kind, k3s and k0s do the same in their node
//! images):
//!
//! - `/` a shared mount: the kubelet refuses a private root ("/ is not a shared mount"), since the
//!   volumes it mounts must propagate into pods. systemd makes `/` shared at boot; LXC often does
//!   not. Made recursively shared, re-checked at every drift check.
//! - `/dev/kmsg`: the kubelet's OOM watcher opens it (k0s#744, kind#662); LXC does not create it.
//!   A link to `/dev/console`, as kind and the LXC guides do.
//!
//! On a VM or bare metal both already hold and the step changes nothing. Both are runtime state
//! (a mount flag, a device node on a tmpfs), so an image build (`--root` without `--kernel live`)
//! only notes them; the daemon's converge at every boot repairs them again.

use std::path::{Path, PathBuf};

use crate::host::HostError;
use crate::host::mountinfo::{self, Propagation};
use crate::plan::{Action, Change, Effect, EffectError, Step, StepPlan};
use crate::steps::context::Context;

pub(crate) const KMSG: &str = "/dev/kmsg";
/// What `/dev/kmsg` points to when it is missing: the console LXC does provide.
pub(crate) const KMSG_TARGET: &str = "/dev/console";

pub(crate) fn plan(ctx: &Context<'_>) -> Result<StepPlan, HostError> {
    let mut out = StepPlan::new(Step::Container);
    out.notes.push(match &ctx.container {
        Some(c) => format!("in a container: {c}"),
        None => "not in a container".to_owned(),
    });
    if !ctx.kernel_live {
        out.notes.push(
            "mount propagation and /dev/kmsg are the running system's: not checked (--root without --kernel live)"
                .into(),
        );
        return Ok(out);
    }
    if let Some(change) = plan_propagation(ctx, &mut out.notes)? {
        out.changes.push(change);
    }
    if let Some(change) = plan_kmsg(ctx)? {
        out.changes.push(change);
    }
    Ok(out)
}

/// `/` (the root nodeward works on) made recursively shared when it is not.
fn plan_propagation(ctx: &Context<'_>, notes: &mut Vec<String>) -> Result<Option<Change>, HostError> {
    let path = ctx.kernel_path("proc/self/mountinfo");
    let text = crate::host::read::read_path_text(&path, crate::host::read::Kind::Kernel)?;
    let mounts = mountinfo::parse(&text);
    let dir = ctx.root.dir();
    let Some(mount) = mountinfo::at(&mounts, dir) else {
        // Only with --root: the tree is not a mount of its own, and making its parent mount
        // shared would change a machine nodeward was not pointed at.
        notes.push(format!(
            "{} is not a mount point: its propagation is not checked",
            dir.display()
        ));
        return Ok(None);
    };
    if mount.propagation == Propagation::Shared {
        return Ok(None);
    }
    Ok(Some(Change::new(
        "/",
        dir,
        Action::MakeShared {
            from: mount.propagation.to_string(),
        },
        MakeShared,
    )))
}

/// `/dev/kmsg` as a link to the console when there is none at all.
fn plan_kmsg(ctx: &Context<'_>) -> Result<Option<Change>, HostError> {
    let path = ctx.root.resolve_str(KMSG).map_err(HostError::resolve(KMSG))?;
    match path.symlink_metadata() {
        Ok(_) => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let console = ctx
                .root
                .resolve_str(KMSG_TARGET)
                .map_err(HostError::resolve(KMSG_TARGET))?;
            if !console.exists() {
                return Err(HostError::Io {
                    path: console,
                    op: "find a console to link /dev/kmsg to",
                    source: std::io::Error::from(std::io::ErrorKind::NotFound),
                });
            }
            Ok(Some(Change::new(
                KMSG,
                path,
                Action::Symlink {
                    target: KMSG_TARGET.to_owned(),
                },
                LinkKmsg,
            )))
        }
        Err(e) => Err(HostError::Io {
            path,
            op: "inspect",
            source: e,
        }),
    }
}

/// `mount --make-rshared` on the change's target.
#[derive(Debug)]
struct MakeShared;

impl Effect for MakeShared {
    fn apply(&self, change: &Change) -> Result<(), EffectError> {
        mountinfo::make_rshared(&change.target).map_err(|errno| {
            Box::new(HostError::Io {
                path: change.target.clone(),
                op: "make the mount recursively shared",
                source: errno.into(),
            }) as EffectError
        })
    }
}

/// The `/dev/kmsg` link; an entry that appeared since the plan is left alone.
#[derive(Debug)]
struct LinkKmsg;

impl Effect for LinkKmsg {
    fn apply(&self, change: &Change) -> Result<(), EffectError> {
        match std::os::unix::fs::symlink(Path::new(KMSG_TARGET), &change.target) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(Box::new(HostError::Io {
                path: PathBuf::from(&change.target),
                op: "link to /dev/console",
                source: e,
            })),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::steps::context::fixture::Fixture;

    fn mountinfo_for(f: &Fixture, root_line: &str) {
        let text = format!(
            "1 0 254:0 / {} {root_line}\n2 1 0:5 / {}/proc rw shared:2 - proc proc rw",
            f.host.path().display(),
            f.host.path().display()
        );
        f.kernel_file("proc/self/mountinfo", &text, 0o444);
    }

    fn host_file(f: &Fixture, rel: &str) {
        let path = f.host.path().join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, "").expect("write");
    }

    #[test]
    fn a_private_root_is_made_shared_and_a_missing_kmsg_linked() {
        let f = Fixture::new();
        mountinfo_for(&f, "rw,relatime - ext4 /dev/vda rw");
        host_file(&f, "dev/console");
        let ctx = f.context();
        let plan = plan(&ctx).expect("plan");
        let actions: Vec<(String, Action)> = plan
            .changes
            .iter()
            .map(|c| (c.subject.clone(), c.action.clone()))
            .collect();
        assert!(matches!(&actions[0], (s, Action::MakeShared { from }) if s == "/" && from == "private"));
        assert!(matches!(&actions[1], (s, Action::Symlink { target }) if s == KMSG && target == KMSG_TARGET));
        // The link is made under the root (the mount flag needs a real mount namespace: see
        // tests/container.rs).
        plan.changes[1].apply().expect("link");
        assert_eq!(
            std::fs::read_link(f.host.path().join("dev/kmsg")).expect("link"),
            PathBuf::from(KMSG_TARGET)
        );
        let again = super::plan(&ctx).expect("plan");
        assert_eq!(
            again.changes.len(),
            1,
            "only the mount is left: {:?}",
            again.changes
        );
    }

    #[test]
    fn a_shared_root_and_a_present_kmsg_need_nothing() {
        let f = Fixture::new();
        mountinfo_for(&f, "rw,relatime shared:1 - ext4 /dev/vda rw");
        host_file(&f, "dev/kmsg");
        let plan = plan(&f.context()).expect("plan");
        assert!(plan.changes.is_empty(), "{:?}", plan.changes);
        assert_eq!(plan.notes, vec!["not in a container".to_owned()]);
    }

    #[test]
    fn a_root_that_is_not_a_mount_point_is_left_alone() {
        let f = Fixture::new();
        f.kernel_file(
            "proc/self/mountinfo",
            "1 0 254:0 / / rw - ext4 /dev/vda rw",
            0o444,
        );
        host_file(&f, "dev/kmsg");
        let plan = plan(&f.context()).expect("plan");
        assert!(plan.changes.is_empty());
        assert!(plan.notes[1].ends_with("is not a mount point: its propagation is not checked"));
    }

    #[test]
    fn no_console_to_link_is_an_error_naming_it() {
        let f = Fixture::new();
        mountinfo_for(&f, "rw shared:1 - ext4 /dev/vda rw");
        let err = plan(&f.context()).expect_err("no console");
        assert!(err.to_string().contains("dev/console"), "{err}");
    }

    #[test]
    fn an_image_build_only_notes_them() {
        let mut f = Fixture::new();
        f.mode.kernel_live = false;
        let ctx = f.context();
        let plan = plan(&ctx).expect("plan");
        assert!(plan.changes.is_empty());
        assert!(plan.notes[1].contains("not checked"));
    }
}
