//! Whether a podman container runs under a name, read from the host's processes instead of asked
//! of podman: every running podman container has its monitor, conmon, and podman starts conmon
//! with the container's name on its command line (`-n NAME`, beside `-c ID`; podman's
//! `libpod/oci_conmon_common.go` `sharedConmonArgs`, the same from podman 4 to 6) and with itself
//! as the exit command (`--exit-command PODMAN`). No conmon for the name, no running container:
//! the kubelet's start can replace whatever stopped one holds the name (`run --replace`) without
//! a `container inspect` first — about 1.7 s of a first start on a slow host.
//!
//! Erring towards asking: any conmon for the name counts, unless its exit command names a program
//! other than this podman (another podman on the host, or one no longer there: a test's stand-in).
//! Where `/proc` cannot be read the answer is "cannot tell".

use std::path::{Path, PathBuf};

use crate::host::processes;

/// No conmon under `proc` (the kernel's `/proc`) watches a container named `name` for `program`.
pub(super) fn none_for(proc: &Path, program: &Path, name: &str) -> bool {
    let Ok(ours) = std::fs::canonicalize(program) else {
        return false;
    };
    match processes::by_command(proc, "conmon") {
        Ok(monitors) => {
            let holding: Vec<i32> = monitors
                .iter()
                .filter(|p| watches(&p.argv, name, &ours))
                .map(|p| p.pid)
                .collect();
            tracing::debug!(monitors = monitors.len(), holding = ?holding, name, "conmon processes for the kubelet's name");
            holding.is_empty()
        }
        Err(e) => {
            tracing::debug!(error = %e, "cannot list the host's processes: asking the engine");
            false
        }
    }
}

/// Whether the conmon with arguments `argv` watches a container named `name` of the podman at
/// `ours` (canonical). Its exit command settles whose only when it names another existing program.
fn watches(argv: &[String], name: &str, ours: &Path) -> bool {
    if !names(argv, name) {
        return false;
    }
    match value_of(argv, "--exit-command").map(std::fs::canonicalize) {
        Some(Ok(theirs)) => theirs == ours,
        // A program no longer there is not this one (which is).
        Some(Err(_)) => false,
        // No exit command: counted.
        None => true,
    }
}

/// `-n NAME`, `--name NAME` or `--name=NAME`.
fn names(argv: &[String], name: &str) -> bool {
    value_of(argv, "-n").or_else(|| value_of(argv, "--name")) == Some(PathBuf::from(name))
        || argv.iter().any(|a| a.strip_prefix("--name=") == Some(name))
}

fn value_of(argv: &[String], flag: &str) -> Option<PathBuf> {
    argv.iter()
        .position(|a| a == flag)
        .and_then(|i| argv.get(i + 1))
        .map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(line: &str) -> Vec<String> {
        line.split(' ').map(str::to_owned).collect()
    }

    /// podman 4.3.1's conmon for nodeward's kubelet container, as `/proc` showed it in the `kubelet`
    /// VM scenario (ids shortened; after `--conmon-pidfile` as podman's `createOCIContainer` goes on).
    const REAL: &str = "/usr/bin/conmon --api-version 1 -c 3f1d -u 3f1d -r /usr/bin/runc -b /var/lib/containers/storage/overlay-containers/3f1d/userdata -p /run/nodeward/kubelet.pid -n kubelet --exit-dir /run/libpod/exits --full-attach -s -l journald --log-level warning --runtime-arg --log-format=json --runtime-arg --log --runtime-arg=/run/containers/storage/overlay-containers/3f1d/userdata/oci-log --log-tag kubelet --conmon-pidfile /run/containers/storage/overlay-containers/3f1d/userdata/conmon.pid --exit-command /usr/bin/podman --exit-command-arg --root";

    #[test]
    fn a_conmon_names_its_container() {
        let a = argv(REAL);
        assert!(names(&a, "kubelet"));
        // The control: another container's conmon, and a name only as another flag's value.
        assert!(!names(&a, "etcd"));
        assert!(!names(&argv("conmon -c kubelet -n other"), "kubelet"));
        assert!(names(&argv("conmon --name kubelet"), "kubelet"));
        assert!(names(&argv("conmon --name=kubelet"), "kubelet"));
    }

    #[test]
    fn another_podmans_conmon_does_not_hold_the_name_but_an_unknown_one_does() {
        let dir = tempfile::tempdir().expect("tmp");
        let (ours, theirs) = (dir.path().join("podman"), dir.path().join("other-podman"));
        for p in [&ours, &theirs] {
            std::fs::write(p, "").expect("program");
        }
        let ours = std::fs::canonicalize(&ours).expect("canonical");
        let conmon = |exit: &str| argv(&format!("conmon -n kubelet --exit-command {exit}"));
        assert!(watches(&conmon(&ours.display().to_string()), "kubelet", &ours));
        // Through a link to it: the same program.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&ours, &link).expect("link");
        assert!(watches(&conmon(&link.display().to_string()), "kubelet", &ours));
        assert!(!watches(&conmon(&theirs.display().to_string()), "kubelet", &ours));
        // A program no longer there is not this one; no exit command at all: counted.
        assert!(!watches(&conmon("/no/such/podman"), "kubelet", &ours));
        assert!(watches(&argv("conmon -n kubelet"), "kubelet", &ours));
    }

    #[test]
    fn an_unreadable_proc_cannot_tell() {
        let dir = tempfile::tempdir().expect("tmp");
        let program = dir.path().join("podman");
        std::fs::write(&program, "").expect("program");
        assert!(!none_for(&dir.path().join("no-proc"), &program, "kubelet"));
        // An empty /proc: no conmon at all.
        assert!(none_for(dir.path(), &program, "kubelet"));
        // A program that is not there: cannot tell.
        assert!(!none_for(dir.path(), &dir.path().join("gone"), "kubelet"));
    }
}
