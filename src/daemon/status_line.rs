//! The one-line STATUS= that `systemctl status nodeward` shows: what the last pass found, what the
//! kubelet is doing when it is not simply running, and the failing preflight checks. Pure text,
//! built in one place so READY, each pass and each kubelet change say the same thing.

use crate::kubelet::status::{KubeletState, KubeletStatus};
use crate::plan::Report;

/// What a finished pass found: the failing steps with their errors, or that it converged.
pub(super) fn pass(report: &Report) -> String {
    let failing: Vec<String> = report
        .failed_steps()
        .map(|s| {
            let error = s.error.as_deref().unwrap_or("failed");
            // Step errors often name their step already ("kubelet: waiting for …"): once is enough.
            let name = s.step.name();
            let error = error
                .strip_prefix(name)
                .and_then(|e| e.strip_prefix(": "))
                .unwrap_or(error);
            format!("{name}: {error}")
        })
        .collect();
    if failing.is_empty() {
        format!("converged ({} change(s) in last pass)", report.change_count())
    } else {
        format!("failing: {}", failing.join("; "))
    }
}

/// What STATUS= is made of.
pub(crate) struct Parts<'a> {
    /// A configuration reload that failed (the daemon runs on the previous one).
    pub(crate) config_error: Option<&'a str>,
    /// What the last pass found ([`pass`]).
    pub(crate) pass: &'a str,
    pub(crate) kubelet: Option<&'a KubeletStatus>,
    pub(crate) checks_failing: &'a [String],
}

/// The whole line: a failed reload first, the pass, then the kubelet when it is wanted but not
/// running (an image that cannot be pulled shows here, with its reason, while every step may have
/// succeeded), then the failing checks.
pub(crate) fn compose(parts: Parts<'_>) -> String {
    let Parts {
        config_error,
        pass,
        kubelet,
        checks_failing,
    } = parts;
    let mut line = match config_error {
        Some(e) => format!("config reload failed, running on the previous one: {e}; {pass}"),
        None => pass.to_string(),
    };
    if let Some(note) = kubelet.and_then(kubelet_note) {
        line = format!("{line}; {note}");
    }
    if !checks_failing.is_empty() {
        line = format!(
            "{line}; checks failing: {} (nodeward check)",
            checks_failing.join(", ")
        );
    }
    // It quotes host and engine text; systemctl shows it on a terminal.
    crate::text::printable(&line).into_owned()
}

/// The kubelet's part, only when something is wrong with it (or a change waits).
fn kubelet_note(k: &KubeletStatus) -> Option<String> {
    let mut notes: Vec<String> = Vec::new();
    if let Some(rb) = &k.rolled_back {
        notes.push(format!(
            "kubelet rolled back: spec {} (image {}) {}; running the last healthy spec {} (configure a release that works, or nodeward kubelet retry)",
            rb.bad, rb.bad_image, rb.reason, rb.to
        ));
    }
    if let Some(f) = &k.fleet_lock {
        if f.halted {
            notes.push(format!(
                "rollout halted: FleetLock slot of group {} kept (configure a release that works: its healthy start gives the slot back; nodeward kubelet release with this image still configured hands the slot to the next node, which then runs it)",
                f.group
            ));
        } else if let Some(why) = &f.waiting {
            notes.push(format!(
                "kubelet change waits for a FleetLock slot ({why}); the running kubelet is kept"
            ));
        }
    }
    notes.extend(state_note(k));
    (!notes.is_empty()).then(|| notes.join("; "))
}

fn state_note(k: &KubeletStatus) -> Option<String> {
    match k.state {
        KubeletState::Failing => Some(format!(
            "kubelet not started: {} (retrying with backoff)",
            k.error.as_deref().unwrap_or("failed")
        )),
        KubeletState::Restarting => Some(match &k.last_exit {
            Some(exit) => format!("kubelet restarting after {}", exit.reason),
            None => "kubelet restarting".to_string(),
        }),
        // Its image pulled, its container created: seconds, or minutes for a first pull.
        KubeletState::Starting => Some(match &k.pull {
            Some(p) => format!(
                "kubelet starting: {}",
                crate::kubelet::runtime::pull::describe(p, crate::clock::now())
            ),
            None => "kubelet starting".to_string(),
        }),
        // The next release's image coming in while this one runs (pulled before the replacement).
        KubeletState::Running => k.pull.as_ref().map(|p| {
            format!(
                "kubelet running; next release {}",
                crate::kubelet::runtime::pull::describe(p, crate::clock::now())
            )
        }),
        KubeletState::Stopped | KubeletState::NotWanted => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compose(pass: &str, kubelet: Option<&KubeletStatus>, checks_failing: &[String]) -> String {
        super::compose(Parts {
            config_error: None,
            pass,
            kubelet,
            checks_failing,
        })
    }

    fn kubelet(state: KubeletState, error: Option<&str>) -> KubeletStatus {
        KubeletStatus {
            state,
            error: error.map(str::to_string),
            ..KubeletStatus::default()
        }
    }

    #[test]
    fn a_converged_node_with_a_running_kubelet_says_converged_only() {
        let k = kubelet(KubeletState::Running, None);
        assert_eq!(
            compose("converged (0 change(s) in last pass)", Some(&k), &[]),
            "converged (0 change(s) in last pass)"
        );
    }

    #[test]
    fn an_image_that_cannot_be_pulled_is_named_next_to_a_converged_pass() {
        let k = kubelet(
            KubeletState::Failing,
            Some("podman pull localhost/kubelet:test: connection refused"),
        );
        assert_eq!(
            compose("converged (3 change(s) in last pass)", Some(&k), &["swap".into()]),
            "converged (3 change(s) in last pass); kubelet not started: podman pull \
             localhost/kubelet:test: connection refused (retrying with backoff); \
             checks failing: swap (nodeward check)"
        );
    }

    #[test]
    fn a_kubelet_waiting_for_its_image_says_how_the_pull_moves() {
        let mut k = kubelet(KubeletState::Starting, None);
        k.pull = Some(crate::kubelet::runtime::PullProgress {
            image: "quay.io/poseidon/kubelet@sha256:00".into(),
            since: crate::clock::now(),
            layers_started: 3,
            layers_done: 2,
            total_known: true,
        });
        let line = compose("converged (1 change(s) in last pass)", Some(&k), &[]);
        assert!(
            line.starts_with("converged (1 change(s) in last pass); kubelet starting: pulling quay.io/poseidon/kubelet@sha256:00 for ")
                && line.ends_with(": 2 of 3 layers"),
            "{line}"
        );
    }

    #[test]
    fn a_running_kubelet_says_the_next_release_pulled_before_its_replacement() {
        let mut k = kubelet(KubeletState::Running, None);
        k.pull = Some(crate::kubelet::runtime::PullProgress {
            image: "quay.io/poseidon/kubelet@sha256:11".into(),
            since: crate::clock::now(),
            layers_started: 2,
            layers_done: 1,
            total_known: false,
        });
        let line = compose("converged (0 change(s) in last pass)", Some(&k), &[]);
        assert!(
            line.starts_with("converged (0 change(s) in last pass); kubelet running; next release pulling quay.io/poseidon/kubelet@sha256:11 for ")
                && line.ends_with(": 1 layers done, 2 begun"),
            "{line}"
        );
    }

    #[test]
    fn a_failing_step_and_no_kubelet_show_the_step_only() {
        assert_eq!(
            compose("failing: modules: zfs not found", None, &[]),
            "failing: modules: zfs not found"
        );
        let stopped = kubelet(KubeletState::Stopped, Some("old error"));
        assert_eq!(compose("failing: x", Some(&stopped), &[]), "failing: x");
        let starting = kubelet(KubeletState::Starting, None);
        assert_eq!(
            compose("converged (1 change(s) in last pass)", Some(&starting), &[]),
            "converged (1 change(s) in last pass); kubelet starting"
        );
    }

    #[test]
    fn a_failing_step_is_named_once_with_its_error() {
        use crate::plan::{Step, StepReport};
        let step = |step, error: Option<&str>| StepReport {
            step,
            applied: Vec::new(),
            notes: Vec::new(),
            failed: Vec::new(),
            error: error.map(str::to_string),
            failure: None,
            seconds: 0.0,
        };
        let report = Report {
            root: "/".into(),
            container: None,
            steps: vec![
                step(Step::Dirs, None),
                step(Step::Kubelet, Some("kubelet: waiting for the kubeconfig")),
                step(Step::Modules, Some("zfs: not in this kernel's module tree")),
            ],
        };
        assert_eq!(
            pass(&report),
            "failing: kubelet: waiting for the kubeconfig; modules: zfs: not in this kernel's module tree"
        );
    }

    #[test]
    fn a_failed_reload_stays_in_front_until_a_good_one() {
        let line = super::compose(Parts {
            config_error: Some("/etc/nodeward/config.d/99.toml: not a regular file (a FIFO)"),
            pass: "converged (0 change(s) in last pass)",
            kubelet: None,
            checks_failing: &[],
        });
        assert_eq!(
            line,
            "config reload failed, running on the previous one: /etc/nodeward/config.d/99.toml: \
             not a regular file (a FIFO); converged (0 change(s) in last pass)"
        );
    }
}
