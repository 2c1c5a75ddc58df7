//! The `selinux` step: everything in the labelled trees carries the configured context, recursively,
//! without crossing into other filesystems, skipping what is already right.

use crate::host::fs::{self, Kind};
use crate::host::{HostError, selinux};
use crate::plan::Step;
use crate::plan::StepPlan;
use crate::steps::context::Context;
use crate::steps::files;

/// Each pod's own directory below the kubelet's root, skipped whole. What is in it carries that
/// pod's MCS pair (`s0:c12,c34`, set by the runtime for that pod alone): its volumes and volume
/// subpaths, its `etc-hosts`, its containers' termination logs (`containers/NAME/ID`), the
/// volume plugins' state (`plugins/`). Relabelling any of it to the shared `s0` would hand one
/// pod's files to every other (Typhoon #1123 is this bug in podman's `:z`). The `pods/` directory
/// itself is the kubelet's and is labelled.
const POD_DIRS: &[&str] = &["/var/lib/kubelet/pods/*"];

/// Whether a host path is (the top of) one pod's own directory.
pub(crate) fn is_pod_dir(host_path: &str) -> bool {
    POD_DIRS.iter().any(|p| crate::glob::glob_match(p, host_path))
}

/// Whether a file's current label needs changing.
pub(crate) fn needs_relabel(current: Option<&str>, wanted: &str) -> bool {
    current != Some(wanted)
}

pub(crate) fn plan(ctx: &Context<'_>) -> Result<StepPlan, HostError> {
    let mut out = StepPlan::new(Step::Selinux);
    let Some(wanted) = ctx.labeling.context.clone() else {
        out.notes.push(ctx.labeling.reason.clone());
        return Ok(out);
    };
    for tree in &ctx.labeling.trees {
        let top = ctx
            .root
            .resolve(tree)
            .map_err(HostError::resolve(tree.to_path_buf()))?;
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
        let skip = |p: &std::path::Path| is_pod_dir(&ctx.root.display(p));
        paths.extend(fs::walk_same_fs(&top, &skip)?);
        for path in paths {
            let current = match selinux::get_label(&path) {
                Ok(c) => c,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(HostError::io(&path, "read SELinux label")(e)),
            };
            if needs_relabel(current.as_deref(), &wanted) {
                out.changes.push(files::relabel(
                    ctx.root.display(&path),
                    path,
                    current,
                    wanted.clone(),
                ));
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
    use crate::steps::context::Labeling;

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
    fn each_pods_directory_is_recognised_and_nothing_else() {
        assert!(is_pod_dir("/var/lib/kubelet/pods/0c1d-22"));
        assert!(!is_pod_dir("/var/lib/kubelet/pods"));
        assert!(!is_pod_dir("/var/lib/kubelet/pki"));
        assert!(!is_pod_dir("/var/lib/kubelet/plugins/kubernetes.io"));
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
