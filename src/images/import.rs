//! Feeding an archive's tar stream to an engine's import command (`ctr images import -`,
//! `podman load`, `docker load`) on its standard input, within a time limit. The engine checks
//! what it stores by digest as well; nodeward checked the archive first.

use std::io::{self, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What the engine printed last on its error output, kept for the error (its own words are the
/// best diagnosis).
const KEPT_ERRORS: usize = 2048;
/// Its standard output, kept for the caller (an image listing is a line per image).
const KEPT_OUTPUT: usize = 1 << 20;

/// Why an import failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ImportError {
    #[error("{command}: could not run it: {source}")]
    Spawn {
        command: String,
        #[source]
        source: io::Error,
    },
    #[error("{command}: stopped after {seconds} s (images.import_timeout_seconds)")]
    Timeout { command: String, seconds: u64 },
    #[error("{command}: exited with {status}: {output}")]
    Failed {
        command: String,
        status: String,
        output: String,
    },
    #[error("reading the archive while importing it: {0}")]
    Source(#[source] io::Error),
}

/// Runs `program args…` with `source` on its standard input; `Ok` with (the end of) its standard
/// output when it exits 0 within `limit`.
pub(crate) fn feed(
    program: &Path,
    args: &[&str],
    source: Box<dyn Read + Send>,
    limit: Duration,
) -> Result<String, ImportError> {
    let command = std::iter::once(program.display().to_string())
        .chain(args.iter().map(|a| (*a).to_owned()))
        .collect::<Vec<_>>()
        .join(" ");
    use std::os::unix::process::CommandExt as _;
    let mut child = Command::new(program)
        .args(args)
        // Its own process group: a timeout stops whatever it started too (a helper left holding
        // its output pipes would hold this import).
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("NOTIFY_SOCKET")
        .env_remove("LISTEN_FDS")
        .env_remove("LISTEN_PID")
        .spawn()
        .map_err(|source| ImportError::Spawn {
            command: command.clone(),
            source,
        })?;
    let stdin = child.stdin.take();
    // The copy runs beside the wait: an engine that stops reading cannot hold this thread past
    // the limit (killing it ends the copy with a broken pipe).
    let copier = std::thread::spawn(move || -> io::Result<u64> {
        let Some(mut stdin) = stdin else { return Ok(0) };
        let mut source = source;
        io::copy(&mut source, &mut stdin)
    });
    let stdout = child.stdout.take().map(|p| tail_reader(p, KEPT_OUTPUT));
    let stderr = child.stderr.take().map(|p| tail_reader(p, KEPT_ERRORS));
    let status = wait_within(&mut child, limit);
    let copied = copier
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("the copy panicked")));
    let joined =
        |h: Option<std::thread::JoinHandle<String>>| h.and_then(|h| h.join().ok()).unwrap_or_default();
    let (printed, errors) = (joined(stdout), joined(stderr));
    let status = match status {
        Some(s) => s,
        None => {
            return Err(ImportError::Timeout {
                command,
                seconds: limit.as_secs(),
            });
        }
    };
    if !status.success() {
        return Err(ImportError::Failed {
            command,
            status: status.to_string(),
            output: crate::text::printable(errors.trim()).to_string(),
        });
    }
    // The engine succeeded but the archive could not be read to its end: not the file inspected.
    copied.map_err(ImportError::Source)?;
    Ok(printed.trim().to_owned())
}

/// Waits for the child until `limit`; kills it then (and reaps it) and says `None`.
fn wait_within(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            _ => {
                if let Ok(pid) = i32::try_from(child.id()) {
                    let _ = nix::sys::signal::killpg(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

/// Reads a pipe to its end on a thread, keeping the last `keep` bytes.
fn tail_reader(mut pipe: impl Read + Send + 'static, keep: usize) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut kept: Vec<u8> = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            kept.extend_from_slice(&buf[..n]);
            if kept.len() > keep {
                kept.drain(..kept.len() - keep);
            }
        }
        String::from_utf8_lossy(&kept).into_owned()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str, input: &[u8], limit: Duration) -> Result<String, ImportError> {
        let args = ["-c", script];
        feed(
            Path::new("/bin/sh"),
            &args,
            Box::new(io::Cursor::new(input.to_vec())),
            limit,
        )
    }

    #[test]
    fn the_stream_reaches_the_commands_standard_input() {
        let out = sh("wc -c", &[7u8; 100_000], Duration::from_secs(30)).expect("sh runs");
        assert_eq!(out, "100000");
    }

    #[test]
    fn a_failing_command_is_an_error_with_its_words() {
        let err = sh(
            "cat >/dev/null; echo 'unrecognized image format' >&2; exit 3",
            b"x",
            Duration::from_secs(30),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("exit status: 3") && err.contains("unrecognized image format"),
            "{err}"
        );
    }

    #[test]
    fn a_command_that_stops_reading_is_killed_at_the_limit() {
        let started = Instant::now();
        // 64 MiB will not fit in a pipe: the copy blocks until the kill. The command would sleep
        // an hour: the error says the limit ended it (a state), and the minute is a hang detector
        // that still tells a kill at the limit from a wait for the command's own end.
        let err = sh("sleep 3600", &vec![0u8; 64 << 20], Duration::from_millis(300)).unwrap_err();
        assert!(matches!(err, ImportError::Timeout { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_secs(60));
    }
}
