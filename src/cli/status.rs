//! How the daemon's state and the kubelet's read in `nodeward status`.

use std::fmt::Write;

use nodeward::daemon::state::DaemonState;
use nodeward::kubelet::runtime::pull;
use nodeward::kubelet::status::KubeletStatus;

/// The daemon part of `status` when its state file is there and cannot be read: why, never "no
/// state file" (a daemon may well be running).
pub fn render_unreadable(why: &str) -> String {
    format!(
        "daemon: state file unreadable: {}\n",
        nodeward::text::printable(why)
    )
}

/// The daemon part of `status`; `now` is the current Unix time, passed in so tests are exact.
pub fn render_daemon(state: Option<&DaemonState>, alive: bool, now: u64) -> String {
    let Some(st) = state else {
        return "daemon: no state file (nodeward run has not run on this root)\n".to_owned();
    };
    let ago = |t: u64| now.saturating_sub(t);
    if !alive {
        return format!(
            "daemon: not running (last state from pid {}, written {} s ago: {})\n",
            st.pid,
            ago(st.last_converge.max(st.started)),
            nodeward::text::printable(&st.status)
        );
    }
    let mut out = format!(
        "daemon: pid {}, {}, {} converge(s), last {} s ago: {}\n",
        st.pid,
        match st.phase {
            nodeward::daemon::lifecycle::Phase::Starting => "starting (first pass not finished)",
            nodeward::daemon::lifecycle::Phase::Degraded => "ready, degraded",
            nodeward::daemon::lifecycle::Phase::Converged => "ready, converged",
            nodeward::daemon::lifecycle::Phase::Stopping => "stopping",
        },
        st.converges,
        ago(st.last_converge),
        st.status
    );
    for s in &st.steps {
        let state = match &s.error {
            Some(e) => format!("failing: {e}"),
            None => format!("ok ({} change(s) last pass)", s.changes),
        };
        let _ = writeln!(out, "  {:8} {state}", s.step);
    }
    if let Some(r) = &st.last_repair {
        let _ = writeln!(
            out,
            "  last change {} s ago: {} {} {}",
            ago(r.at),
            r.step,
            r.subject,
            r.change
        );
    }
    if !st.checks_failing.is_empty() {
        let _ = writeln!(
            out,
            "  checks failing: {} (nodeward check)",
            st.checks_failing.join(", ")
        );
    }
    if !st.images.is_empty() {
        let from: Vec<String> = st
            .images
            .iter()
            .map(|i| {
                format!(
                    "{} {} ({})",
                    i.role,
                    nodeward::text::printable(&i.image),
                    i.source
                )
            })
            .collect();
        let _ = writeln!(out, "  images   {}", from.join("; "));
    }
    if let Some(k) = &st.kubelet {
        out.push_str(&render_kubelet(k, now));
    }
    out
}

fn render_kubelet(k: &KubeletStatus, now: u64) -> String {
    let ago = |t: u64| now.saturating_sub(t);
    let mut out = format!("kubelet: {} ({})", k.state, k.runtime);
    if let Some(id) = &k.container_id {
        let _ = write!(out, ", container {}", nodeward::kubelet::short_id(id));
    }
    if let Some(since) = k.since {
        let verb = if k.adopted { "adopted" } else { "up" };
        let _ = write!(out, ", {verb} {} s", ago(since));
    }
    let _ = writeln!(out, ", {} restart(s)", k.restarts);
    let lines = [
        ("health  ", (!k.health.is_empty()).then_some(&k.health)),
        ("image   ", k.image.as_ref()),
        ("image id", k.image_id.as_ref()),
        ("spec    ", k.spec_hash.as_ref()),
    ];
    for (label, value) in lines {
        if let Some(v) = value {
            let _ = writeln!(out, "  {label} {v}");
        }
    }
    if let Some(e) = &k.last_exit {
        let code = e.code.map_or_else(|| "-".to_owned(), |c| c.to_string());
        let _ = writeln!(out, "  last exit {} s ago: {} (code {code})", ago(e.at), e.reason);
    }
    if let Some(e) = &k.error {
        let _ = writeln!(out, "  error    {e}");
    }
    out.push_str(&render_pull(k, now));
    out.push_str(&render_rollout(k, now));
    out
}

/// An image pull under way and the last one made, when there is anything to say.
pub(super) fn render_pull(k: &KubeletStatus, now: u64) -> String {
    let mut out = String::new();
    if let Some(p) = &k.pull {
        let _ = writeln!(out, "  pull     {}", pull::describe(p, now));
    }
    if let Some(d) = &k.last_pull {
        let _ = writeln!(
            out,
            "  last pull {} s ago: {}",
            now.saturating_sub(d.at),
            pull::describe_done(d)
        );
    }
    out
}

/// The rollback, the trial and FleetLock, when there is anything to say.
pub(super) fn render_rollout(k: &KubeletStatus, now: u64) -> String {
    let mut out = String::new();
    if let Some(rb) = &k.rolled_back {
        let _ = writeln!(
            out,
            "  rolled back {} s ago: spec {} (image {}) {}; running {} (configure a release that works, or nodeward kubelet retry)",
            now.saturating_sub(rb.at),
            rb.bad,
            rb.bad_image,
            rb.reason,
            rb.to
        );
    }
    if let Some(t) = &k.trial {
        let _ = writeln!(out, "  trial    {t}");
    }
    if let Some(f) = &k.fleet_lock {
        let state = match (f.held, f.halted, &f.waiting) {
            (true, true, _) => {
                "slot kept after a rollback: rollout halted; the way out: configure a release that works (its healthy start gives the slot back); `nodeward kubelet release` with the bad image still configured hands the slot to the next node, which then runs it".to_owned()
            }
            (true, false, _) => "slot held".to_owned(),
            (false, _, Some(why)) => format!("waiting for a slot: {why}"),
            (false, _, None) => "no slot held".to_owned(),
        };
        let _ = writeln!(out, "  fleetlock group {}: {state}", f.group);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodeward::kubelet::status::{KubeletState, LastExit};

    fn state() -> DaemonState {
        serde_json::from_value(serde_json::json!({
            "pid": 42, "ready": true, "phase": "converged", "converges": 3, "last_converge": 990, "started": 900,
            "status": "converged",
            "steps": [
                {"step": "dirs", "ok": true, "changes": 0},
                {"step": "sysctl", "ok": false, "changes": 1, "error": "net.ipv4.ip_forward: read-only"}
            ],
            "last_repair": {"at": 980, "step": "sysctl", "subject": "net.ipv4.ip_forward", "change": "set 0 → 1"},
            "images": [
                {"role": "kubelet", "image": "quay.io/poseidon/kubelet:v1.36.3", "source": "mirror"},
                {"role": "sandbox", "image": "registry.k8s.io/pause:3.10.1", "source": "shipped"}
            ]
        }))
        .expect("a state document")
    }

    #[test]
    fn no_state_file_says_so() {
        assert_eq!(
            render_daemon(None, true, 1000),
            "daemon: no state file (nodeward run has not run on this root)\n"
        );
    }

    #[test]
    fn a_dead_writer_is_not_repeated_as_ready() {
        assert_eq!(
            render_daemon(Some(&state()), false, 1000),
            "daemon: not running (last state from pid 42, written 10 s ago: converged)\n"
        );
    }

    #[test]
    fn daemon_steps_and_last_repair() {
        assert_eq!(
            render_daemon(Some(&state()), true, 1000),
            "daemon: pid 42, ready, converged, 3 converge(s), last 10 s ago: converged\n\
             \x20 dirs     ok (0 change(s) last pass)\n\
             \x20 sysctl   failing: net.ipv4.ip_forward: read-only\n\
             \x20 last change 20 s ago: sysctl net.ipv4.ip_forward set 0 → 1\n\
             \x20 images   kubelet quay.io/poseidon/kubelet:v1.36.3 (mirror); sandbox registry.k8s.io/pause:3.10.1 (shipped)\n"
        );
    }

    #[test]
    fn kubelet_adopted_with_a_last_exit() {
        let k = KubeletStatus {
            runtime: "podman".into(),
            state: KubeletState::Running,
            container_id: Some("0123456789abcdef".into()),
            image: Some("quay.io/poseidon/kubelet:v1.34.1".into()),
            image_id: None,
            spec_hash: Some("abc".into()),
            since: Some(940),
            adopted: true,
            restarts: 2,
            last_exit: Some(LastExit {
                code: Some(1),
                at: 930,
                reason: "exited".into(),
                restart_in_ms: Some(1000),
            }),
            exits: Vec::new(),
            health: "healthy".into(),
            error: None,
            ..KubeletStatus::default()
        };
        assert_eq!(
            render_kubelet(&k, 1000),
            "kubelet: running (podman), container 0123456789ab, adopted 60 s, 2 restart(s)\n\
             \x20 health   healthy\n\
             \x20 image    quay.io/poseidon/kubelet:v1.34.1\n\
             \x20 spec     abc\n\
             \x20 last exit 70 s ago: exited (code 1)\n"
        );
    }

    #[test]
    fn a_pull_shows_its_layers_and_the_last_one_its_size_and_rate() {
        let k = KubeletStatus {
            runtime: "podman".into(),
            state: KubeletState::Starting,
            health: "starting".into(),
            pull: Some(pull::PullProgress {
                image: "quay.io/poseidon/kubelet@sha256:00".into(),
                since: 928,
                layers_started: 5,
                layers_done: 2,
                total_known: false,
            }),
            last_pull: Some(pull::PullDone {
                image: "mirror.example/kubelet@sha256:00".into(),
                at: 900,
                millis: 38_000,
                layers: 5,
                bytes: Some(398_458_880),
            }),
            ..KubeletStatus::default()
        };
        assert_eq!(
            render_kubelet(&k, 1000),
            "kubelet: starting (podman), 0 restart(s)\n\
             \x20 health   starting\n\
             \x20 pull     pulling quay.io/poseidon/kubelet@sha256:00 for 1m12s: 2 layers done, 5 begun\n\
             \x20 last pull 100 s ago: pulled mirror.example/kubelet@sha256:00: 5 layers, 380.0 MiB in 38s (10.0 MiB/s)\n"
        );
    }

    #[test]
    fn a_failing_kubelet_shows_its_error() {
        let k = KubeletStatus {
            runtime: "docker".into(),
            state: KubeletState::Failing,
            error: Some("no kubelet image could be pulled".into()),
            ..KubeletStatus::default()
        };
        assert_eq!(
            render_kubelet(&k, 1000),
            "kubelet: failing (docker), 0 restart(s)\n  error    no kubelet image could be pulled\n"
        );
    }

    #[test]
    fn a_rollback_and_a_halted_rollout_are_shown() {
        let k = KubeletStatus {
            rolled_back: Some(nodeward::kubelet::rollout::RolledBack {
                bad: "bad0".into(),
                bad_image: "quay.io/poseidon/kubelet:v1.37.0".into(),
                to: "good0".into(),
                at: 900,
                reason: "not healthy within 120 s of its start: 3 failure(s), the last exited (code 1)"
                    .into(),
            }),
            fleet_lock: Some(nodeward::kubelet::status::FleetLockStatus {
                group: "workers".into(),
                held: true,
                halted: true,
                waiting: None,
            }),
            ..KubeletStatus::default()
        };
        assert_eq!(
            render_rollout(&k, 1000),
            "  rolled back 100 s ago: spec bad0 (image quay.io/poseidon/kubelet:v1.37.0) not healthy within 120 s of its start: 3 failure(s), the last exited (code 1); running good0 (configure a release that works, or nodeward kubelet retry)\n\
             \x20 fleetlock group workers: slot kept after a rollback: rollout halted; the way out: configure a release that works (its healthy start gives the slot back); `nodeward kubelet release` with the bad image still configured hands the slot to the next node, which then runs it\n"
        );
        assert_eq!(render_rollout(&KubeletStatus::default(), 1000), "");
    }
}
