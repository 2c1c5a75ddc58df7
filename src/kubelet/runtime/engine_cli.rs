//! What podman and docker share, one CLI: the arguments that run the kubelet container, the
//! reading of `inspect`'s output, and the calls both answer alike (inspect, image, pull, run,
//! wait, stop, rm). (podman's own flags, `--replace` and `--pidfile`, are asked for by podman.rs.)

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use super::process::{self, COMMAND_TIMEOUT, PULL_TIMEOUT, describe, failed};
use super::types::{Container, HASH_LABEL, RuntimeError};
use crate::kubelet::container::{KubeletSpec, Mount, Only};
use crate::types::Invalid;

/// `podman run` / `docker run -d`, with Typhoon's flags and mounts, logging to the journal. `podman`: `None` for docker,
/// else whether `--replace` is given and where `--pidfile` writes the kubelet's pid. The image is
/// always made present before (`--pull=never`): a run never pulls on its own, so a missing image is
/// one clear error, and the mirrors are tried in order by [`Runtime::ensure_image`]. `takes`: the
/// engine's own answer to which of the table's mounts it passes.
pub(super) fn run_args(
    spec: &KubeletSpec,
    image: &str,
    hash: &str,
    podman: Option<(bool, &Path)>,
    takes: impl Fn(Only) -> bool,
) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "run".into(),
        "--detach".into(),
        "--name".into(),
        spec.name.clone(),
    ];
    if podman.is_some_and(|(replace, _)| replace) {
        a.push("--replace".into());
    }
    a.push("--pull=never".into());
    if let Some((_, pid_file)) = podman {
        a.extend(["--pidfile".into(), pid_file.display().to_string()]);
    }
    let podman = podman.is_some();
    // The kubelet's output goes to the journal under its container name as identifier, for both
    // engines: `journalctl -t kubelet`, as Typhoon's foreground unit gave `journalctl -u kubelet`.
    a.extend([
        "--log-driver".into(),
        "journald".into(),
        "--log-opt".into(),
        format!("tag={}", spec.name),
        "--label".into(),
        format!("{HASH_LABEL}={hash}"),
        "--privileged".into(),
        "--pid".into(),
        "host".into(),
        "--network".into(),
        "host".into(),
    ]);
    for m in spec.mounts.iter().filter(|m| takes(m.only)) {
        a.push("--volume".into());
        a.push(volume(m, podman));
    }
    a.push(image.to_owned());
    a.extend(spec.args.iter().cloned());
    a
}

fn volume(m: &Mount, podman: bool) -> String {
    let mut opts = Vec::new();
    if m.read_only {
        opts.push("ro");
    }
    if m.rshared {
        opts.push("rshared");
    }
    // docker on Flatcar has no SELinux: Typhoon's docker unit drops `z`.
    if m.relabel && podman {
        opts.push("z");
    }
    let mut s = format!("{}:{}", m.source, m.target);
    if !opts.is_empty() {
        s.push(':');
        s.push_str(&opts.join(","));
    }
    s
}

/// A container id as podman and docker print it: 12 to 64 lowercase hex digits. Anything else is
/// refused rather than shown or handed back to the engine (an id is printed by `status` and
/// passed as an argument).
pub(super) fn container_id(raw: &str) -> Result<String, Invalid> {
    let ok = (12..=64).contains(&raw.len())
        && raw
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if ok {
        Ok(raw.to_owned())
    } else {
        Err(Invalid(format!(
            "{:?} is not a container id (12 to 64 hex digits)",
            crate::text::printable(raw)
        )))
    }
}

/// Reads `podman/docker container inspect` output (a JSON array of one object).
pub(crate) fn parse_inspect(stdout: &str) -> Result<Option<Container>, Invalid> {
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).map_err(|e| Invalid(e.to_string()))?;
    let Some(c) = v.as_array().and_then(|a| a.first()) else {
        return Ok(None);
    };
    let id = container_id(c["Id"].as_str().ok_or_else(|| Invalid("no Id".into()))?)?;
    let state = &c["State"];
    let running = state["Running"].as_bool().unwrap_or(false);
    let label = &c["Config"]["Labels"][HASH_LABEL];
    Ok(Some(Container {
        id,
        running,
        exit_code: (!running)
            .then(|| state["ExitCode"].as_i64().and_then(|x| i32::try_from(x).ok()))
            .flatten(),
        // podman: ImageName; docker: Config.Image.
        image: c["ImageName"]
            .as_str()
            .or_else(|| c["Config"]["Image"].as_str())
            .unwrap_or("")
            .to_owned(),
        image_id: c["Image"].as_str().unwrap_or("").to_owned(),
        started_at: state["StartedAt"].as_str().map(str::to_owned),
        spec_hash: label.as_str().map(str::to_owned),
        pid: state["Pid"]
            .as_i64()
            .and_then(|p| i32::try_from(p).ok())
            .filter(|&p| running && p > 0),
    }))
}

/// `container inspect NAME`: the container, if one has that name.
pub(super) async fn inspect(program: &Path, name: &str) -> Result<Option<Container>, RuntimeError> {
    let out = process::output(program, &["container", "inspect", name], COMMAND_TIMEOUT, true).await?;
    let Some(stdout) = out else { return Ok(None) };
    parse_inspect(&stdout).map_err(|e| RuntimeError::Output {
        command: describe(program, &["container", "inspect", name]),
        message: e.0,
    })
}

/// `image inspect --format {{.Id}}`: one call answers both "is it there" and "which one is it"
/// (podman's `image exists` answers only the first).
pub(super) async fn image_id(program: &Path, image: &str) -> Option<String> {
    process::output(
        program,
        &["image", "inspect", "--format", "{{.Id}}", image],
        COMMAND_TIMEOUT,
        true,
    )
    .await
    .ok()
    .flatten()
    .map(|out| out.trim().to_owned())
}

/// The registry digests recorded for a local image (`name@sha256:…`); empty for an imported one.
pub(super) async fn image_digests(program: &Path, image: &str) -> Vec<String> {
    let format = "{{range .RepoDigests}}{{.}} {{end}}";
    process::output(
        program,
        &["image", "inspect", "--format", format, image],
        COMMAND_TIMEOUT,
        true,
    )
    .await
    .ok()
    .flatten()
    .map(|out| out.split_whitespace().map(str::to_owned).collect())
    .unwrap_or_default()
}

pub(super) async fn pull(
    program: &Path,
    options: &[String],
    image: &str,
    on_line: &(dyn Fn(&str) + Send + Sync),
) -> Result<(), RuntimeError> {
    let args: Vec<&str> = std::iter::once("pull")
        .chain(options.iter().map(String::as_str))
        .chain([image])
        .collect();
    process::streamed(program, &args, PULL_TIMEOUT, on_line).await
}

/// `image inspect --format {{.Size}}`: the image's size in bytes, `None` when it does not say.
pub(super) async fn image_size(program: &Path, image: &str) -> Option<u64> {
    let out = process::output(
        program,
        &["image", "inspect", "--format", "{{.Size}}", image],
        COMMAND_TIMEOUT,
        true,
    )
    .await
    .ok()
    .flatten()?;
    out.trim().parse().ok()
}

/// `run --detach …`: the new container's id (the last line it prints).
pub(super) async fn run(program: &Path, args: &[String]) -> Result<String, RuntimeError> {
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = process::output(program, &refs, PULL_TIMEOUT, false)
        .await?
        .unwrap_or_default();
    let last = out.trim().lines().last().unwrap_or("");
    container_id(last).map_err(|e| RuntimeError::Output {
        command: describe(program, &["run"]),
        message: e.0,
    })
}

/// `wait ID`: its exit code.
pub(super) async fn wait(program: &Path, id: &str) -> Result<i32, RuntimeError> {
    let mut cmd = process::command(program, &["wait", id]);
    let command = describe(program, &["wait", id]);
    let out = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .await
        .map_err(|source| RuntimeError::Spawn {
            command: command.clone(),
            source,
        })?;
    if !out.status.success() {
        return Err(failed(command, &out));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .ok_or_else(|| RuntimeError::Output {
            command,
            message: format!("exit code expected, got {:?}", text.trim()),
        })
}

/// `stop -t GRACE`, and `kill` when that fails (the engine's own timer, backed by ours).
pub(super) async fn stop(program: &Path, id: &str, grace: Duration) -> Result<(), RuntimeError> {
    let secs = grace.as_secs().to_string();
    let limit = grace + Duration::from_secs(30);
    match process::output(program, &["stop", "-t", &secs, id], limit, false).await {
        Ok(_) => Ok(()),
        Err(e) => {
            tracing::warn!(error = %e, "graceful stop failed; killing the kubelet container");
            process::output(program, &["kill", id], COMMAND_TIMEOUT, true)
                .await
                .map(|_| ())
        }
    }
}

/// `rm -f ID`; a missing one is not an error.
pub(super) async fn remove(program: &Path, id: &str) -> Result<(), RuntimeError> {
    process::output(program, &["rm", "-f", id], COMMAND_TIMEOUT, true)
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inspect_output_of_podman_and_docker() {
        let podman = r#"[{"Id":"0123456789abcdef","Image":"sha256:1111","ImageName":"quay.io/poseidon/kubelet@sha256:22",
            "State":{"Status":"running","Running":true,"Pid":4242,"ExitCode":0,"StartedAt":"2026-11-22T10:00:00Z"},
            "Config":{"Labels":{"io.nodeward.spec-hash":"h1"}}}]"#;
        let c = parse_inspect(podman).expect("parse").expect("container");
        assert_eq!(c.id, "0123456789abcdef");
        assert!(c.running);
        assert_eq!(c.exit_code, None);
        assert_eq!(c.image, "quay.io/poseidon/kubelet@sha256:22");
        assert_eq!(c.spec_hash.as_deref(), Some("h1"));
        assert_eq!(c.pid, Some(4242));
        let docker = r#"[{"Id":"fedcba9876543210","Image":"sha256:2222","State":{"Running":false,"Pid":0,"ExitCode":137},
            "Config":{"Image":"psdn/kubelet","Labels":null}}]"#;
        let c = parse_inspect(docker).expect("parse").expect("container");
        assert_eq!(c.exit_code, Some(137));
        assert_eq!(c.pid, None);
        assert_eq!(c.image, "psdn/kubelet");
        assert_eq!(c.spec_hash, None);
        assert_eq!(parse_inspect("[]").expect("empty"), None);
        assert!(parse_inspect("not json").is_err());
        // An engine (or something posing as one) printing a deceptive id is refused, not shown.
        let spoofed = podman.replace("0123456789abcdef", "0123456789ab\u{202e}cdef");
        assert!(parse_inspect(&spoofed).is_err(), "{spoofed}");
    }
}
