//! The host changing between `plan` and `apply`: a directory swapped for a symlink, pods' own
//! labels, files vanishing. Planned and applied in-process, with the change made in between,
//! exactly where a racing pod or user would make it.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::Root;
use nodeward::config;
use nodeward::plan::apply_step;
use nodeward::root::{HostRoot, RunMode};
use nodeward::steps::{Context, Driver, Step, plan_step};

const CONTEXT: &str = "system_u:object_r:container_file_t:s0";

fn label(p: &Path) -> Option<String> {
    xattr::get(p, "security.selinux")
        .expect("getxattr")
        .map(|v| String::from_utf8_lossy(&v).trim_end_matches('\0').to_owned())
}

fn settings(root: &Root) -> config::Settings {
    config::load(&HostRoot::at(root.path()), None)
        .expect("config")
        .settings
}

fn labelling_root() -> Root {
    let root = Root::new();
    root.write(
        "etc/nodeward/config.d/10.toml",
        "[selinux]\nlabels = \"always\"\n",
    );
    root
}

/// A directory in a labelled tree swapped for a symlink after planning: nothing outside the tree
/// is labelled (it used to be, 10 times out of 10), and the step says why it stopped.
#[test]
fn relabelling_never_follows_a_symlink_swapped_in_after_planning() {
    let root = labelling_root();
    root.write("etc/kubernetes/addons/a.yaml", "x");
    let outside = tempfile::tempdir().expect("outside");
    std::fs::write(outside.path().join("a.yaml"), "secret elsewhere").expect("write");
    let settings = settings(&root);
    let mode = RunMode::tree(HostRoot::at(root.path()));
    let ctx = Context::new(&mode, &settings, Driver::OneShot).expect("context");
    let plan = plan_step(&ctx, Step::Selinux);
    assert!(
        plan.changes
            .iter()
            .any(|c| c.subject == "/etc/kubernetes/addons/a.yaml"),
        "{:?}",
        plan.changes
    );

    let addons = root.path().join("etc/kubernetes/addons");
    std::fs::rename(&addons, root.path().join("etc/kubernetes/addons.old")).expect("mv");
    std::os::unix::fs::symlink(outside.path(), &addons).expect("symlink");

    let report = apply_step(plan);
    assert_eq!(
        label(&outside.path().join("a.yaml")),
        None,
        "labelled outside the tree"
    );
    assert_eq!(label(outside.path()), None, "labelled outside the tree");
    let err = report.error.expect("the step stops");
    assert!(err.contains("symlink"), "{err}");
}

/// Everything in a pod's own directory keeps its per-pod MCS pair (or no label: the runtime sets
/// it); the rest of the kubelet's tree is labelled; files that vanish between plan and apply are
/// not an error.
#[test]
fn pod_volumes_keep_their_categories_and_vanished_files_are_fine() {
    let root = labelling_root();
    let secret = root.write(
        "var/lib/kubelet/pods/0a1b/volumes/kubernetes.io~secret/s/token",
        "t",
    );
    let private = "system_u:object_r:container_file_t:s0:c12,c34";
    for p in [
        secret.as_path(),
        secret.parent().expect("dir"),
        root.path().join("var/lib/kubelet/pods/0a1b/volumes").as_path(),
    ] {
        xattr::set(p, "security.selinux", format!("{private}\0").as_bytes()).expect("setxattr");
    }
    let hosts = root.write("var/lib/kubelet/pods/0a1b/etc-hosts", "h");
    let doomed = root.write("var/lib/kubelet/plugins/sock-dir/f", "f");
    let settings = settings(&root);
    let mode = RunMode::tree(HostRoot::at(root.path()));
    let ctx = Context::new(&mode, &settings, Driver::OneShot).expect("context");
    let plan = plan_step(&ctx, Step::Selinux);
    assert!(
        !plan.changes.iter().any(|c| c.subject.contains("/pods/0a1b")),
        "nothing of a pod's directory may be planned: {:?}",
        plan.changes.iter().map(|c| &c.subject).collect::<Vec<_>>()
    );
    std::fs::remove_file(&doomed).expect("rm");
    std::fs::remove_dir(doomed.parent().expect("dir")).expect("rmdir");
    let report = apply_step(plan);
    assert_eq!(report.error, None);
    assert_eq!(
        label(&hosts),
        None,
        "the pod's etc-hosts is the runtime's to label"
    );
    assert_eq!(
        label(&root.path().join("var/lib/kubelet/pods")).as_deref(),
        Some(CONTEXT)
    );
    assert_eq!(
        label(&secret).as_deref(),
        Some(private),
        "a pod's own pair is kept"
    );
}

/// A managed directory inside one a non-root user owns: the user swaps it for a symlink after
/// planning. The chmod must not land on the link's target (it did in 7 of 300 trials).
#[test]
fn directory_modes_never_follow_a_symlink_swapped_in_after_planning() {
    let root = Root::new();
    root.write(
        "etc/nodeward/config.d/10.toml",
        "[dirs.'/var/lib/u']\nowner = '1000'\nmode = '0755'\n[dirs.'/var/lib/u/inner']\nmode = '0700'\n",
    );
    let inner = root.path().join("var/lib/u/inner");
    std::fs::create_dir_all(&inner).expect("mkdir");
    std::os::unix::fs::chown(root.path().join("var/lib/u"), Some(1000), Some(0)).expect("chown");
    std::fs::set_permissions(&inner, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let outside = tempfile::tempdir().expect("outside");
    std::fs::set_permissions(outside.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");

    let settings = settings(&root);
    let mode = RunMode::tree(HostRoot::at(root.path()));
    let ctx = Context::new(&mode, &settings, Driver::OneShot).expect("context");
    let plan = plan_step(&ctx, Step::Dirs);
    assert!(
        plan.changes.iter().any(|c| c.subject == "/var/lib/u/inner"),
        "{:?}",
        plan.changes
    );

    std::fs::rename(&inner, root.path().join("var/lib/u/moved")).expect("mv");
    std::os::unix::fs::symlink(outside.path(), &inner).expect("symlink");
    let report = apply_step(plan);
    let mode = std::fs::metadata(outside.path())
        .expect("stat")
        .permissions()
        .mode()
        & 0o7777;
    assert_eq!(mode, 0o755, "the link's target must keep its mode");
    let err = report.error.expect("the step stops");
    assert!(err.contains("symlink"), "{err}");
}
