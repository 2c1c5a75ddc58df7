//! What podman and docker share, one CLI: the arguments that run the kubelet container, and the
//! reading of `inspect`'s output. (podman's own flags, `--replace` and `--pidfile`, are asked for
//! by the caller.)

use std::path::Path;

use super::types::{Container, HASH_LABEL};
use crate::kubelet::spec::{KubeletSpec, Mount, Only};
use crate::types::Invalid;

/// `podman run` / `docker run -d`, with Typhoon's flags and mounts, logging to the journal. `podman`: `None` for docker,
/// else whether `--replace` is given and where `--pidfile` writes the kubelet's pid. The image is
/// always made present before (`--pull=never`): a run never pulls on its own, so a missing image is
/// one clear error, and the mirrors are tried in order by [`Runtime::ensure_image`].
pub fn run_args(spec: &KubeletSpec, image: &str, hash: &str, podman: Option<(bool, &Path)>) -> Vec<String> {
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
    for m in spec.mounts.iter().filter(|m| match m.only {
        Only::All => true,
        Only::Podman => podman,
        Only::Rkt => false,
    }) {
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
pub fn container_id(raw: &str) -> Result<String, Invalid> {
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
