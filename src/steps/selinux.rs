//! The `selinux` step: everything in the labelled trees carries the configured context, recursively,
//! without crossing into other filesystems, skipping what is already right.

use crate::host::fs::{self, Kind};
use crate::host::{HostError, selinux};
use crate::plan::Step;
use crate::plan::StepPlan;
use crate::steps::context::Context;
use crate::steps::files;

/// Pod volume trees below the kubelet's root. Their files carry each pod's own MCS pair
/// (`s0:c12,c34`, set by the runtime for that pod alone); relabelling them to the shared `s0` would
/// hand every pod's data to every other (Typhoon #1123 is this bug in podman's `:z`).
const POD_VOLUMES: &[&str] = &[
    "/var/lib/kubelet/pods/*/volumes",
    "/var/lib/kubelet/pods/*/volume-subpaths",
];

/// Whether a host path is (the top of) a pod's volume tree.
pub fn is_pod_volume(host_path: &str) -> bool {
    POD_VOLUMES.iter().any(|p| crate::glob::glob_match(p, host_path))
}

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
        let skip = |p: &std::path::Path| is_pod_volume(&ctx.root.display(p));
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
    fn pod_volume_trees_are_recognised() {
        assert!(is_pod_volume("/var/lib/kubelet/pods/0c1d-22/volumes"));
        assert!(is_pod_volume("/var/lib/kubelet/pods/0c1d-22/volume-subpaths"));
        assert!(!is_pod_volume("/var/lib/kubelet/pods/0c1d-22/containers"));
        assert!(!is_pod_volume("/var/lib/kubelet/pods"));
        assert!(!is_pod_volume("/var/lib/kubelet/pki"));
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
