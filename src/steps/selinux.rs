//! The `selinux` step: everything in the labelled trees carries the configured context, recursively,
//! without crossing into other filesystems, skipping what is already right.

use crate::host::fs::{self, Kind};
use crate::host::{HostError, selinux};
use crate::plan::{Action, Change, StepPlan};
use crate::steps::{Context, Step};

/// Whether a file's current label needs changing.
pub fn needs_relabel(current: Option<&str>, wanted: &str) -> bool {
    current != Some(wanted)
}

pub fn plan(ctx: &Context<'_>) -> Result<StepPlan, HostError> {
    let mut out = StepPlan::new(Step::Selinux);
    let Some(wanted) = ctx.labeling.context.clone() else {
        out.notes.push(ctx.labeling.reason.clone());
        return Ok(out);
    };
    for tree in &ctx.labeling.trees {
        let top = ctx.root.resolve(tree).map_err(|e| HostError::Io {
            path: tree.to_path_buf(),
            op: "resolve",
            source: std::io::Error::other(e.to_string()),
        })?;
        match fs::observe(&top)? {
            None => {
                out.notes
                    .push(format!("{tree}: does not exist yet (labelled when created)"));
                continue;
            }
            Some(o) if o.kind != Kind::Dir => {
                return Err(HostError::NotADirectory {
                    path: top,
                    found: o.kind.name(),
                });
            }
            Some(_) => {}
        }
        let mut paths = vec![top.clone()];
        paths.extend(fs::walk_same_fs(&top)?);
        for path in paths {
            let current = selinux::get_label(&path).map_err(HostError::io(&path, "read SELinux label"))?;
            if needs_relabel(current.as_deref(), &wanted) {
                out.changes.push(Change {
                    subject: ctx.root.display(&path),
                    action: Action::Relabel {
                        from: current,
                        to: wanted.clone(),
                    },
                    target: path,
                    batch: None,
                });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;
    use crate::config::input::LabelPolicy;
    use crate::root::HostRoot;
    use crate::steps::Labeling;

    fn settings(policy: LabelPolicy) -> Settings {
        let t = tempfile::tempdir().expect("tempdir");
        let mut s = crate::config::load(&HostRoot::at(t.path()), None)
            .expect("defaults")
            .settings;
        s.selinux.labels = policy;
        s
    }

    #[test]
    fn label_decision() {
        assert!(
            Labeling::decide(&settings(LabelPolicy::Auto), false)
                .context
                .is_none()
        );
        assert!(
            Labeling::decide(&settings(LabelPolicy::Auto), true)
                .context
                .is_some()
        );
        assert!(
            Labeling::decide(&settings(LabelPolicy::Never), true)
                .context
                .is_none()
        );
        assert!(
            Labeling::decide(&settings(LabelPolicy::Always), false)
                .context
                .is_some()
        );
        let on = Labeling::decide(&settings(LabelPolicy::Auto), true);
        let p = |s: &str| s.parse().expect("path");
        assert_eq!(
            on.label_for(&p("/var/lib/kubelet/pki")).as_deref(),
            Some("system_u:object_r:container_file_t:s0")
        );
        assert_eq!(on.label_for(&p("/var/lib/calico")), None);
        assert_eq!(on.label_for(&p("/etc/kubernetes-old")), None);
    }

    #[test]
    fn relabel_skips_what_is_right() {
        let want = "system_u:object_r:container_file_t:s0";
        assert!(!needs_relabel(Some(want), want));
        assert!(needs_relabel(None, want));
        assert!(needs_relabel(
            Some("system_u:object_r:container_file_t:s0:c1,c2"),
            want
        ));
        assert!(needs_relabel(Some("system_u:object_r:etc_t:s0"), want));
    }
}
