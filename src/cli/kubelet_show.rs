//! `nodeward kubelet show`: the kubelet as nodeward runs it — the engine's exact command line, the
//! image and its digest, the container, what the daemon's supervisor has seen (restarts, exits) and
//! what the kubelet still waits for. Read-only: it asks the engine and reads the daemon's state file.

use std::fmt::Write as _;

use anyhow::Context as _;
use serde::Serialize;

use nodeward::daemon::state::DaemonState;
use nodeward::kubelet::runtime::Container;
use nodeward::kubelet::status::KubeletStatus;
use nodeward::steps::kubelet as step;

use super::env::Env;
use super::exit::Outcome;
use super::output::{Doc, Output, emit};

/// What `kubelet show` prints (`--output json` as is).
#[derive(Debug, Default, Serialize)]
pub struct Shown {
    /// The engine (`podman`, `docker`, `rkt`), when one is found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    /// Why nothing more can be shown: the kubelet is not managed, or no engine.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// What the kubelet waits for before it can start (a kubeconfig, a socket, metadata, DNS).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
    /// The whole command line that started the kubelet running now (program first), as recorded
    /// at its start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_argv: Option<Vec<String>>,
    /// The whole command line that starts the wanted kubelet (program first).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub argv: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Where the image is pulled from, in order, when `[[containerd.mirrors]]` serve it too.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pull_from: Vec<nodeward::kubelet::spec::PullSource>,
    /// The registry digests the engine records for that image.
    pub image_digests: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wanted_spec: Option<String>,
    /// The container holding the kubelet's name, as the engine reports it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<Container>,
    /// The daemon's supervisor: state, restarts, the last exits with codes and times.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub supervisor: Option<KubeletStatus>,
    /// Why the daemon's state file could not be read, when it is there and cannot be (a daemon
    /// may well be running: never said as "no daemon state").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_unreadable: Option<String>,
}

/// The engine to ask (the host's, with live containers), else the one the image under `--root`
/// carries: the build host's engine is not the image's, so it is never asked, and the command is
/// shown for the image's own.
fn engines(
    ctx: &nodeward::steps::Context<'_>,
    notes: &mut Vec<String>,
) -> (
    Option<nodeward::kubelet::runtime::Runtime>,
    Option<nodeward::kubelet::runtime::Runtime>,
) {
    if ctx.containers_live {
        return match step::runtime(ctx) {
            Ok(r) => (Some(r), None),
            Err(e) => {
                notes.push(e.to_string());
                (None, None)
            }
        };
    }
    notes.push("the container engine is not asked (--root without --containers live)".into());
    match step::runtime_of_image(ctx) {
        Ok(r) => (None, Some(r)),
        Err(e) => {
            notes.push(format!("in the image: {e}"));
            (None, None)
        }
    }
}

pub fn show(env: &Env, output: Output) -> anyhow::Result<Outcome> {
    let loaded = env.load()?;
    let ctx = env.context(&loaded.settings).context("observing the host")?;
    let state = DaemonState::read(env.root());
    let mut shown = Shown {
        state_unreadable: state.as_ref().err().map(ToString::to_string),
        supervisor: state
            .ok()
            .flatten()
            .filter(DaemonState::writer_alive)
            .and_then(|d| d.kubelet),
        ..Shown::default()
    };
    let (runtime, image_engine) = engines(&ctx, &mut shown.notes);
    if let Some(r) = runtime.as_ref().or(image_engine.as_ref()) {
        shown.runtime = Some(r.name().to_owned());
    }
    let name = &loaded.settings.kubelet.name;
    // While the kubelet waits, the command it will start with is shown all the same.
    let wanted = match step::wanted(&ctx) {
        Ok(w) => Ok(w),
        Err(e) => {
            shown.waiting_for = Some(e.to_string());
            step::wanted_once_ready(&ctx)
        }
    };
    if let Ok(w) = wanted {
        if shown.waiting_for.is_none() {
            shown.notes.extend(w.notes);
        }
        if let (Some(d), Some(r)) = (&w.desired, &runtime) {
            let existing = nodeward::kubelet::block_on(r.inspect(name)).ok().flatten();
            shown.argv = step::engine_argv(r, d, existing.is_some());
            shown.container = existing;
        } else if let (Some(d), Some(r)) = (&w.desired, &image_engine) {
            shown.argv = step::engine_argv(r, d, false);
        }
        if let Some(d) = &w.desired {
            shown.wanted_spec = Some(d.hash.clone());
            shown.image = d.spec.images.first().cloned();
            shown.pull_from = d.pull_from.clone();
        }
    }
    // Without a daemon nothing else says what the kubelet would wait for: the kubeconfig it starts
    // from is looked at here.
    if shown.waiting_for.is_none() && shown.supervisor.is_none() && loaded.settings.kubelet.image.is_some() {
        let present = |p: &str| {
            p.parse::<nodeward::types::AbsPath>()
                .ok()
                .and_then(|p| env.root().resolve(&p).ok())
                .is_some_and(|p| p.is_file())
        };
        if !present("/etc/kubernetes/kubeconfig") && !present("/var/lib/kubelet/kubeconfig") {
            shown.waiting_for = Some(
                "the kubeconfig: /etc/kubernetes/kubeconfig does not exist yet (Ignition or an SSH copy delivers it)"
                    .into(),
            );
        }
    }
    if let Some(r) = &runtime {
        shown.started_argv = r.started_argv();
        if shown.container.is_none() {
            shown.container = nodeward::kubelet::block_on(r.inspect(name)).ok().flatten();
        }
        let image = shown
            .container
            .as_ref()
            .map(|c| c.image.clone())
            .or(shown.image.clone());
        if let Some(image) = image {
            shown.image_digests = nodeward::kubelet::block_on(r.image_digests(&image));
        }
    }
    let now = nodeward::clock::now();
    emit(output, Doc::KubeletShow, &shown, || render(&shown, now))?;
    Ok(Outcome::Ok)
}

/// `REF (mirror URL, plain http)`, or the reference alone for the image as configured.
fn pull_source_words(p: &nodeward::kubelet::spec::PullSource) -> String {
    use nodeward::kubelet::spec::Transport;
    let how = match &p.transport {
        Transport::Https => String::new(),
        Transport::PlainHttp => ", plain http".to_owned(),
        Transport::Ca(ca) => format!(", CA {ca}"),
    };
    match &p.mirror {
        Some(m) => format!("{} (mirror {m}{how})", p.reference),
        None => p.reference.clone(),
    }
}

/// The text form; `now` is passed in so tests are exact.
pub fn render(s: &Shown, now: u64) -> String {
    let mut out = format!("kubelet ({})\n", s.runtime.as_deref().unwrap_or("no engine"));
    for n in &s.notes {
        let _ = writeln!(out, "  note:        {n}");
    }
    let _ = writeln!(
        out,
        "  waiting for: {}",
        s.waiting_for.as_deref().unwrap_or("nothing")
    );
    render_container(&mut out, s);
    if !s.pull_from.is_empty() {
        let list: Vec<String> = s.pull_from.iter().map(pull_source_words).collect();
        let _ = writeln!(out, "  pulls from:  {}", list.join("; "));
    }
    let digests = if s.image_digests.is_empty() {
        "none recorded (not pulled from a registry)".to_owned()
    } else {
        s.image_digests.join(" ")
    };
    let _ = writeln!(out, "  digest:      {digests}");
    match &s.supervisor {
        Some(k) => {
            let _ = writeln!(
                out,
                "  supervisor:  {}, health {}, {} restart(s) since nodeward started",
                k.state,
                if k.health.is_empty() { "-" } else { &k.health },
                k.restarts
            );
            for e in k.exits.iter().rev() {
                let code = e.code.map_or("code unknown".into(), |c| format!("code {c}"));
                let restart = match e.restart_in_ms {
                    Some(0) => ", restarted at once".to_owned(),
                    Some(ms) => format!(", restarted after {}", seconds(ms)),
                    None => String::new(),
                };
                let _ = writeln!(
                    out,
                    "    {} s ago: {} ({code}){restart}",
                    now.saturating_sub(e.at),
                    e.reason
                );
            }
            out.push_str(&super::status::render_pull(k, now));
            out.push_str(&super::status::render_rollout(k, now));
        }
        None => match &s.state_unreadable {
            Some(why) => {
                let _ = writeln!(
                    out,
                    "  supervisor:  unknown: state file unreadable: {}",
                    nodeward::text::printable(why)
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "  supervisor:  no daemon state (nodeward run is not running)"
                );
            }
        },
    }
    render_commands(&mut out, s);
    out
}

/// The container holding the kubelet's name, and its image.
fn render_container(out: &mut String, s: &Shown) {
    match &s.container {
        Some(c) => {
            let state = if c.running {
                "running".to_owned()
            } else {
                format!(
                    "exited (code {})",
                    c.exit_code.map_or("?".into(), |c| c.to_string())
                )
            };
            let spec = match (&c.spec_hash, &s.wanted_spec) {
                (Some(have), Some(want)) if have == want => format!("spec {have} (as wanted)"),
                (have, want) => format!(
                    "spec {} (wanted {})",
                    have.as_deref().unwrap_or("none"),
                    want.as_deref().unwrap_or("none")
                ),
            };
            let _ = writeln!(out, "  container:   {} {state}, {spec}", c.id);
            // What runs, and what is wanted when it differs (a halted or waiting rollout runs the
            // previous image while the configuration names the next).
            let wanted = s
                .image
                .as_deref()
                .filter(|w| *w != c.image)
                .map(|w| format!("; wanted {w}"))
                .unwrap_or_default();
            let _ = writeln!(out, "  image:       {} ({}){wanted}", c.image, c.image_id);
        }
        None => {
            let _ = writeln!(out, "  container:   none");
            if let Some(i) = &s.image {
                let _ = writeln!(out, "  image:       {i}");
            }
        }
    }
}

/// The command that started the running kubelet, and the wanted one when it differs.
fn render_commands(out: &mut String, s: &Shown) {
    let command = |out: &mut String, title: &str, argv: &[String]| {
        let _ = writeln!(out, "  {title}:\n    {}", shell_lines(argv).join(" \\\n      "));
    };
    match (&s.started_argv, s.container.is_some()) {
        (Some(started), true) => {
            command(out, "started with", started);
            // podman's --replace is given only when a stopped container holds the name.
            let same = |a: &[String]| {
                a.iter()
                    .filter(|x| *x != "--replace")
                    .cloned()
                    .collect::<Vec<_>>()
            };
            // The running container's spec hash is the wanted one: the commands may still differ
            // in the image's reference (a mirror's, where the start pulled from one), which the
            // next converge does not replace.
            let as_wanted = matches!(
                (s.container.as_ref().and_then(|c| c.spec_hash.as_ref()), &s.wanted_spec),
                (Some(have), Some(want)) if have == want
            );
            if !as_wanted && !s.argv.is_empty() && same(started) != same(&s.argv) {
                command(out, "wanted now (the next converge replaces it)", &s.argv);
            }
        }
        _ if !s.argv.is_empty() => command(out, "command", &s.argv),
        _ => {}
    }
}

/// A command line as shell words, one option a line as a person writes it: the program with its
/// subcommand, then each `--flag` with its value (`--volume SRC:DST`), each `--flag=value` alone.
fn shell_lines(argv: &[String]) -> Vec<String> {
    let mut lines = Vec::new();
    let mut words = argv.iter().map(|a| (a.as_str(), shell_quote(a))).peekable();
    if let Some((_, program)) = words.next() {
        let sub = words.next_if(|(a, _)| !a.starts_with('-')).map(|(_, q)| q);
        lines.push(sub.map_or(program.clone(), |sub| format!("{program} {sub}")));
    }
    while let Some((arg, quoted)) = words.next() {
        let takes_value = arg.starts_with("--") && !arg.contains('=');
        match words.next_if(|(next, _)| takes_value && !next.starts_with('-')) {
            Some((_, value)) => lines.push(format!("{quoted} {value}")),
            None => lines.push(quoted),
        }
    }
    lines
}

/// `arg` as a POSIX shell word: unchanged when it is plain, else in single quotes.
fn shell_quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c));
    if plain {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

/// Milliseconds as seconds for people: `4 s`, `1.5 s`.
fn seconds(ms: u64) -> String {
    if ms % 1000 == 0 {
        format!("{} s", ms / 1000)
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodeward::kubelet::status::{KubeletState, LastExit};

    #[test]
    fn a_running_kubelet_with_its_exits_and_command() {
        let mut k = KubeletStatus {
            runtime: "podman".into(),
            state: KubeletState::Running,
            health: "healthy".into(),
            restarts: 2,
            ..KubeletStatus::default()
        };
        for (at, code, restart_in_ms) in [
            (900, Some(137), Some(0)),
            (950, None, Some(1500)),
            (960, None, None),
        ] {
            k.push_exit(LastExit {
                code,
                at,
                reason: "exited".into(),
                restart_in_ms,
            });
        }
        let s = Shown {
            runtime: Some("podman".into()),
            argv: vec![
                "/usr/bin/podman".into(),
                "run".into(),
                "--label".into(),
                "a b".into(),
            ],
            image: Some("quay.io/poseidon/kubelet@sha256:ab".into()),
            image_digests: vec!["quay.io/poseidon/kubelet@sha256:ab".into()],
            wanted_spec: Some("h1".into()),
            container: Some(Container {
                id: "c0ffee".into(),
                running: true,
                exit_code: None,
                image: "quay.io/poseidon/kubelet@sha256:ab".into(),
                image_id: "sha256:1d".into(),
                started_at: None,
                spec_hash: Some("h1".into()),
                pid: None,
            }),
            supervisor: Some(k),
            ..Shown::default()
        };
        assert_eq!(
            render(&s, 1000),
            "kubelet (podman)\n\
             \x20 waiting for: nothing\n\
             \x20 container:   c0ffee running, spec h1 (as wanted)\n\
             \x20 image:       quay.io/poseidon/kubelet@sha256:ab (sha256:1d)\n\
             \x20 digest:      quay.io/poseidon/kubelet@sha256:ab\n\
             \x20 supervisor:  running, health healthy, 2 restart(s) since nodeward started\n\
             \x20   40 s ago: exited (code unknown)\n\
             \x20   50 s ago: exited (code unknown), restarted after 1.5 s\n\
             \x20   100 s ago: exited (code 137), restarted at once\n\
             \x20 command:\n\
             \x20   /usr/bin/podman run \\\n      --label 'a b'\n"
        );
    }

    /// Seen under the real rkt: started from the mirror's reference, wanted by the configured
    /// one, the same spec: no "wanted now" (the next converge replaces nothing). The control, another
    /// spec wanted: shown.
    #[test]
    fn a_start_from_a_mirror_is_not_a_command_to_replace() {
        let started = |image: &str| -> Vec<String> {
            [
                "/usr/bin/rkt",
                "run",
                image,
                "--",
                "--config=/etc/kubernetes/kubelet.yaml",
            ]
            .map(str::to_owned)
            .to_vec()
        };
        let mut s = Shown {
            runtime: Some("rkt".into()),
            started_argv: Some(started("docker://127.0.0.1:5000/poseidon/kubelet@sha256:ab")),
            argv: started("docker://quay.io/poseidon/kubelet@sha256:ab"),
            wanted_spec: Some("h1".into()),
            container: Some(Container {
                id: "55c1c876".into(),
                running: true,
                exit_code: None,
                image: String::new(),
                image_id: String::new(),
                started_at: None,
                spec_hash: Some("h1".into()),
                pid: None,
            }),
            ..Shown::default()
        };
        assert!(!render(&s, 0).contains("wanted now"), "{}", render(&s, 0));
        s.wanted_spec = Some("h2".into());
        assert!(render(&s, 0).contains("wanted now (the next converge replaces it)"));
    }

    #[test]
    fn the_pull_sources_read_in_order_with_how_each_is_reached() {
        use nodeward::kubelet::spec::{PullSource, Transport};
        let source = |reference: &str, transport, mirror: Option<&str>| PullSource {
            reference: reference.into(),
            transport,
            mirror: mirror.map(str::to_owned),
        };
        let s = Shown {
            pull_from: vec![
                source("m:5000/k@sha256:ab", Transport::PlainHttp, Some("http://m:5000")),
                source(
                    "n/k@sha256:ab",
                    Transport::Ca("/etc/ca.pem".into()),
                    Some("https://n"),
                ),
                source("quay.io/k@sha256:ab", Transport::Https, None),
            ],
            ..Shown::default()
        };
        let text = render(&s, 0);
        assert!(
            text.contains(
                "  pulls from:  m:5000/k@sha256:ab (mirror http://m:5000, plain http); \
                 n/k@sha256:ab (mirror https://n, CA /etc/ca.pem); quay.io/k@sha256:ab\n"
            ),
            "{text}"
        );
        // The control: no mirror serves it, no line.
        assert!(!render(&Shown::default(), 0).contains("pulls from"));
    }

    #[test]
    fn waiting_without_a_daemon() {
        let s = Shown {
            runtime: Some("docker".into()),
            waiting_for: Some("kubelet: waiting for the kubeconfig".into()),
            ..Shown::default()
        };
        let text = render(&s, 0);
        assert!(
            text.contains("waiting for: kubelet: waiting for the kubeconfig\n"),
            "{text}"
        );
        assert!(text.contains("container:   none\n"), "{text}");
        assert!(text.contains("no daemon state"), "{text}");
        assert!(!text.contains("command:"), "{text}");
    }

    #[test]
    fn one_option_a_line() {
        let argv: Vec<String> = [
            "/usr/bin/podman",
            "run",
            "--detach",
            "--name",
            "kubelet",
            "--pull=never",
            "--volume",
            "/run:/run",
            "quay.io/poseidon/kubelet:v1.36.1",
            "--config=/etc/kubernetes/kubelet.yaml",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        assert_eq!(
            shell_lines(&argv),
            [
                "/usr/bin/podman run",
                "--detach",
                "--name kubelet",
                "--pull=never",
                "--volume /run:/run",
                "quay.io/poseidon/kubelet:v1.36.1",
                "--config=/etc/kubernetes/kubelet.yaml",
            ]
        );
    }

    #[test]
    fn shell_words() {
        assert_eq!(shell_quote("--volume=/a:/b:ro,z"), "--volume=/a:/b:ro,z");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
