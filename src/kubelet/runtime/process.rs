//! Running an engine's CLI: bounded in time, without nodeward's systemd environment, and failing
//! with the command line and its stderr.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

use super::types::RuntimeError;

/// Commands that only query or change runtime state get this long (a pull gets much longer).
pub(crate) const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);
pub(crate) const PULL_TIMEOUT: Duration = Duration::from_secs(900);

pub(super) fn command(program: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(Stdio::null()).kill_on_drop(true);
    without_unit_env(&mut cmd);
    cmd
}

/// Awaits a command's run within `limit`: a timeout or an error running it names the command.
async fn bounded<T>(
    line: &str,
    limit: Duration,
    run: impl std::future::Future<Output = std::io::Result<T>>,
) -> Result<T, RuntimeError> {
    match tokio::time::timeout(limit, run).await {
        Err(_) => Err(RuntimeError::Timeout {
            command: line.to_owned(),
            seconds: limit.as_secs(),
        }),
        Ok(Err(source)) => Err(RuntimeError::Spawn {
            command: line.to_owned(),
            source,
        }),
        Ok(Ok(value)) => Ok(value),
    }
}

/// Runs a command to completion. `Ok(None)` when it failed and `missing_ok` says that failure
/// means "no such object" (exit status 1 or 125 with such a message, or any failure of
/// `image exists`/`image inspect`, whose only answer is the status).
pub(super) async fn output(
    program: &Path,
    args: &[&str],
    limit: Duration,
    missing_ok: bool,
) -> Result<Option<String>, RuntimeError> {
    let line = describe(program, args);
    let mut cmd = command(program, args);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let out = bounded(&line, limit, cmd.output()).await?;
    if out.status.success() {
        return Ok(Some(String::from_utf8_lossy(&out.stdout).into_owned()));
    }
    let stderr = String::from_utf8_lossy(&out.stderr).to_ascii_lowercase();
    let is_query = args.first() == Some(&"image");
    // podman and docker say "no such …"/"not found"; rkt says `no matches found for "UUID"` for a
    // pod it no longer knows (removed, collected), exit 254.
    let missing = ["no such", "not found", "no matches found"]
        .iter()
        .any(|m| stderr.contains(m));
    if missing_ok && (is_query || missing) {
        return Ok(None);
    }
    Err(failed(line, &out))
}

/// Runs a command to completion, handing each line it prints (stdout and stderr) to `on_line` as
/// it comes: a pull's progress. Fails as [`output`] does, with the end of its stderr.
pub(super) async fn streamed(
    program: &Path,
    args: &[&str],
    limit: Duration,
    on_line: &(dyn Fn(&str) + Send + Sync),
) -> Result<(), RuntimeError> {
    use tokio::io::BufReader;
    let line = describe(program, args);
    let mut cmd = command(program, args);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|source| RuntimeError::Spawn {
        command: line.clone(),
        source,
    })?;
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(RuntimeError::Spawn {
            command: line,
            source: std::io::Error::other("no pipes"),
        });
    };
    // Only the end of stderr is kept for the error; a chatty engine cannot grow it without bound.
    let tail = std::sync::Mutex::new(String::new());
    let run = async {
        let out = async {
            let (mut r, mut buf) = (BufReader::new(stdout), Vec::new());
            while let Ok(true) = next_line(&mut r, &mut buf).await {
                on_line(&String::from_utf8_lossy(&buf));
            }
        };
        let err = async {
            let (mut r, mut buf) = (BufReader::new(stderr), Vec::new());
            while let Ok(true) = next_line(&mut r, &mut buf).await {
                let l = String::from_utf8_lossy(&buf);
                on_line(&l);
                if let Ok(mut t) = tail.lock() {
                    t.push_str(&l);
                    t.push('\n');
                    if t.len() > 4096 {
                        let cut = t.len() - 2048;
                        let cut = (cut..t.len()).find(|&i| t.is_char_boundary(i)).unwrap_or(0);
                        t.drain(..cut);
                    }
                }
            }
        };
        tokio::join!(out, err);
        child.wait().await
    };
    let status = bounded(&line, limit, run).await?;
    if status.success() {
        return Ok(());
    }
    let stderr = tail
        .lock()
        .map(|t| t.trim().chars().rev().take(400).collect::<Vec<_>>())
        .unwrap_or_default();
    Err(RuntimeError::Failed {
        command: line,
        status: status.to_string(),
        stderr: stderr.into_iter().rev().collect(),
    })
}

/// The longest line kept of a child's output: the rest of a longer line is read and dropped, so a
/// line without a newline cannot grow a buffer without bound.
pub(crate) const MAX_LINE: usize = 4096;

/// The next line of `r` into `buf` (without its newline, cut at [`MAX_LINE`] bytes); false at the
/// end of the output.
pub(crate) async fn next_line(
    r: &mut (impl tokio::io::AsyncBufRead + Unpin),
    buf: &mut Vec<u8>,
) -> std::io::Result<bool> {
    use tokio::io::AsyncBufReadExt;
    buf.clear();
    let mut any = false;
    loop {
        let chunk = r.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(any);
        }
        any = true;
        let (used, line_end) = match memchr::memchr(b'\n', chunk) {
            Some(i) => (i + 1, i),
            None => (chunk.len(), chunk.len()),
        };
        let room = MAX_LINE.saturating_sub(buf.len());
        buf.extend_from_slice(&chunk[..line_end.min(room)]);
        r.consume(used);
        if line_end < used {
            return Ok(true);
        }
    }
}

/// The engine must not inherit nodeward's sd_notify socket: podman hands `NOTIFY_SOCKET` to conmon
/// or the container, whose messages systemd then rejects (or, with NotifyAccess=all, believes).
/// Nor the unit's `INVOCATION_ID`: podman takes it for "run by a unit that owns the container"
/// and leaves conmon in the caller's cgroup (libpod's `moveConmonToCgroupAndSignal`) — nodeward's,
/// whose stop (KillMode=mixed) then kills conmon with it, the kubelet left without the pipe its
/// output goes through. Without it podman moves conmon to a scope of its own
/// (`libpod-conmon-ID.scope`), as it does for any `podman run` outside a unit.
pub(crate) fn without_unit_env(cmd: &mut Command) {
    for var in [
        "NOTIFY_SOCKET",
        "INVOCATION_ID",
        "WATCHDOG_USEC",
        "WATCHDOG_PID",
        "LISTEN_FDS",
        "LISTEN_PID",
        "LISTEN_FDNAMES",
    ] {
        cmd.env_remove(var);
    }
}

pub(super) fn failed(command: String, out: &std::process::Output) -> RuntimeError {
    RuntimeError::Failed {
        command,
        status: out.status.to_string(),
        stderr: String::from_utf8_lossy(&out.stderr)
            .trim()
            .chars()
            .take(400)
            .collect(),
    }
}

pub(super) fn describe(program: &Path, args: &[&str]) -> String {
    let name = program.file_name().map_or_else(
        || program.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let mut s = name;
    for a in args.iter().take(4) {
        s.push(' ');
        s.push_str(a);
    }
    if args.len() > 4 {
        s.push_str(" …");
    }
    s
}

pub(crate) fn find_in_path(program: &str, path: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    path.split(':').filter(|d| !d.is_empty()).find_map(|dir| {
        let candidate = Path::new(dir).join(program);
        let meta = std::fs::metadata(&candidate).ok()?;
        (meta.is_file() && meta.permissions().mode() & 0o111 != 0).then_some(candidate)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines_of(input: &[u8]) -> Vec<Vec<u8>> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        rt.block_on(async {
            // A small buffer, so lines cross reads.
            let mut r = tokio::io::BufReader::with_capacity(7, input);
            let (mut buf, mut out) = (Vec::new(), Vec::new());
            while next_line(&mut r, &mut buf).await.expect("read") {
                out.push(buf.clone());
            }
            out
        })
    }

    #[test]
    fn lines_are_cut_at_the_cap_and_the_rest_dropped() {
        assert_eq!(lines_of(b"a\nbc\n\nlast"), [&b"a"[..], b"bc", b"", b"last"]);
        let mut long = vec![b'x'; MAX_LINE * 3];
        long.extend_from_slice(b"\nnext\n");
        let got = lines_of(&long);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].len(), MAX_LINE, "cut at the cap");
        assert_eq!(got[1], b"next", "the line after a cut one is whole");
        // Control: a line of exactly the cap is kept whole.
        let mut exact = vec![b'y'; MAX_LINE];
        exact.push(b'\n');
        assert_eq!(lines_of(&exact)[0].len(), MAX_LINE);
    }
}
