//! The host's processes by command name: `/proc/PID/comm`, then the argument vector of those that
//! match. Bounded: at most [`MAX_PROCESSES`] entries of `/proc` are looked at, each file through the
//! bounded reader; a process that ends while it is read is skipped.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::read::{self, Kind};

/// More than any node runs (the kernel's default `pid_max` is 4 M, but a node with more than a
/// quarter of a million processes has other trouble): past it the scan says it cannot tell.
pub(crate) const MAX_PROCESSES: usize = 1 << 18;

/// A process found by its command name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Process {
    pub(crate) pid: i32,
    pub(crate) argv: Vec<String>,
}

/// Every process under `proc` (the kernel's `/proc`) whose command name (`comm`, the executable's
/// file name as the kernel keeps it, at most 15 bytes) is `comm`, with its arguments. `Err` when
/// `/proc` cannot be listed or holds more than [`MAX_PROCESSES`] entries.
pub(crate) fn by_command(proc: &Path, comm: &str) -> std::io::Result<Vec<Process>> {
    by_command_within(proc, comm, MAX_PROCESSES)
}

fn by_command_within(proc: &Path, comm: &str, max: usize) -> std::io::Result<Vec<Process>> {
    let mut found = Vec::new();
    for (seen, entry) in std::fs::read_dir(proc)?.enumerate() {
        if seen >= max {
            return Err(std::io::Error::other(format!(
                "{} holds more than {max} entries",
                proc.display()
            )));
        }
        let Ok(entry) = entry else { continue };
        let Some(pid) = pid_of(&entry.file_name()) else {
            continue;
        };
        let dir = entry.path();
        // Gone in between, or not ours to read: not the process looked for, or not any more.
        let Ok(name) = read::read_path_text(&dir.join("comm"), Kind::Kernel) else {
            continue;
        };
        if name.trim_end_matches('\n') != comm {
            continue;
        }
        let Ok(cmdline) = read::read_path(&dir.join("cmdline"), Kind::Kernel) else {
            continue;
        };
        found.push(Process {
            pid,
            argv: split_cmdline(&cmdline),
        });
    }
    Ok(found)
}

fn pid_of(name: &OsStr) -> Option<i32> {
    let name = name.as_bytes();
    (!name.is_empty() && name.iter().all(u8::is_ascii_digit))
        .then(|| std::str::from_utf8(name).ok()?.parse().ok())
        .flatten()
}

/// `/proc/PID/cmdline`: the arguments, each ended by a NUL.
fn split_cmdline(raw: &[u8]) -> Vec<String> {
    let raw = raw.strip_suffix(&[0]).unwrap_or(raw);
    if raw.is_empty() {
        return Vec::new();
    }
    raw.split(|&b| b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cmdline_is_split_at_its_nuls() {
        assert_eq!(
            split_cmdline(b"conmon\0-n\0kubelet\0"),
            ["conmon", "-n", "kubelet"]
        );
        assert_eq!(split_cmdline(b"a\0\0b\0"), ["a", "", "b"]);
        assert!(split_cmdline(b"").is_empty());
    }

    #[test]
    fn only_numeric_entries_are_processes() {
        assert_eq!(pid_of(OsStr::new("123")), Some(123));
        for other in ["self", "", "12a", "99999999999"] {
            assert_eq!(pid_of(OsStr::new(other)), None, "{other}");
        }
    }

    /// A `/proc` past the cap is "cannot tell", not a scan without end; a long cmdline is cut at
    /// the reader's cap (a FIFO or a huge file at `cmdline` is refused by the bounded reader).
    #[test]
    fn a_proc_past_the_cap_cannot_tell_and_a_process_within_it_is_read() {
        let dir = tempfile::tempdir().expect("tmp");
        for pid in 1..=5 {
            let p = dir.path().join(pid.to_string());
            std::fs::create_dir(&p).expect("dir");
            std::fs::write(p.join("comm"), "conmon\n").expect("comm");
            std::fs::write(p.join("cmdline"), b"conmon\0-n\0kubelet\0").expect("cmdline");
        }
        let e = by_command_within(dir.path(), "conmon", 3).expect_err("past the cap");
        assert!(e.to_string().contains("more than 3 entries"), "{e}");
        let all = by_command_within(dir.path(), "conmon", 5).expect("within");
        assert_eq!(all.len(), 5);
        assert!(all.iter().all(|p| p.argv == ["conmon", "-n", "kubelet"]));
        // The control: another command name finds none of them.
        assert!(
            by_command_within(dir.path(), "podman", 5)
                .expect("within")
                .is_empty()
        );
    }

    #[test]
    fn this_process_is_found_by_its_command_name() {
        let me = std::process::id() as i32;
        let comm = read::read_path_text(Path::new("/proc/self/comm"), Kind::Kernel).expect("comm");
        let found = by_command(Path::new("/proc"), comm.trim_end()).expect("scan");
        let this = found
            .iter()
            .find(|p| p.pid == me)
            .expect("this process among them");
        assert!(!this.argv.is_empty());
        // The control: a name no process has.
        assert!(
            by_command(Path::new("/proc"), "no-such-comm-x")
                .expect("scan")
                .is_empty()
        );
    }
}
