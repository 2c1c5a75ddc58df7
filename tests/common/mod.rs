//! Helpers for tests that drive the real `nodeward` binary against a temporary root.
#![allow(dead_code)] // each test crate uses its own subset

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub const BIN: &str = env!("CARGO_BIN_EXE_nodeward");

/// A temporary directory standing in for `/`.
pub struct Root {
    pub dir: tempfile::TempDir,
}

impl Root {
    pub fn new() -> Root {
        Root {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a file below the root, creating parents.
    pub fn write(&self, rel: &str, body: &str) -> PathBuf {
        let p = self.path().join(rel.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(&p, body).expect("write");
        p
    }

    /// Runs `nodeward ARGS --root ROOT`.
    pub fn run(&self, args: &[&str]) -> Run {
        let out = Command::new(BIN)
            .args(args)
            .arg("--root")
            .arg(self.path())
            .output()
            .expect("run nodeward");
        Run::from(out)
    }

    /// Every path below the root with its metadata, for before/after comparisons. nodeward's own
    /// runtime directory (`/run/nodeward`: locks, the daemon's state) is not the node's state and
    /// is left out, as is `/run` itself when nothing else is in it.
    pub fn snapshot(&self) -> BTreeMap<PathBuf, Snap> {
        let mut out = BTreeMap::new();
        let mut stack = vec![self.path().to_path_buf()];
        let own = self.path().join("run/nodeward");
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).expect("read_dir") {
                let p = e.expect("entry").path();
                if p.starts_with(&own) || (p == self.path().join("run") && run_holds_only_ours(&p)) {
                    continue;
                }
                let m = std::fs::symlink_metadata(&p).expect("stat");
                if m.is_dir() {
                    stack.push(p.clone());
                }
                out.insert(p, Snap::of(&m));
            }
        }
        out
    }
}

fn run_holds_only_ours(run: &Path) -> bool {
    std::fs::read_dir(run)
        .map(|d| d.flatten().all(|e| e.file_name() == "nodeward"))
        .unwrap_or(false)
}

/// The default sysctls that are global, not per network namespace: tests that run nodeward on the
/// live kernel inside a private namespace drop them, so nothing they do can change the host.
pub const GLOBAL_SYSCTLS: &[&str] = &[
    "fs.inotify.max_user_watches",
    "fs.inotify.max_user_instances",
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
];

/// Metadata that any change would move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snap {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub ino: u64,
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
}

impl Snap {
    pub fn of(m: &std::fs::Metadata) -> Snap {
        Snap {
            mode: m.mode() & 0o7777,
            uid: m.uid(),
            gid: m.gid(),
            ino: m.ino(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }
}

/// A finished run.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(o: Output) -> Run {
        Run {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

impl Run {
    pub fn ok(self) -> Run {
        assert_eq!(self.code, 0, "stdout:\n{}\nstderr:\n{}", self.stdout, self.stderr);
        self
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("bad JSON ({e}):\n{}", self.stdout))
    }
}

/// Tests that mount filesystems or create namespaces need root; CI runs as root. Set
/// NODEWARD_SKIP_ROOT_TESTS=1 to skip them knowingly on a workstation.
pub fn require_root() -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    if std::env::var_os("NODEWARD_SKIP_ROOT_TESTS").is_some() {
        eprintln!("skipped: needs root");
        return false;
    }
    panic!("this test needs root (or set NODEWARD_SKIP_ROOT_TESTS=1 to skip it knowingly)");
}

/// Namespaces kept alive by a sleeping child; commands enter them with nsenter.
pub struct Namespaces {
    pub holder: std::process::Child,
    /// nsenter's flags for the namespaces the holder has (`-m`, `-n`).
    enter: Vec<&'static str>,
}

impl Namespaces {
    #[allow(clippy::zombie_processes)] // reaped in Drop
    /// `unshare UNSHARE… sleep`, entered with `nsenter ENTER…`; waits until the holder's `ns`
    /// namespace differs from ours.
    pub fn new(unshare: &[&str], enter: &[&'static str], ns: &str) -> Namespaces {
        let holder = Command::new("unshare")
            .args(unshare)
            .args(["sleep", "600"])
            .stdin(std::process::Stdio::null())
            .spawn()
            .expect("unshare");
        let mine = std::fs::read_link(format!("/proc/self/ns/{ns}")).expect("own namespace");
        for _ in 0..200 {
            let theirs = std::fs::read_link(format!("/proc/{}/ns/{ns}", holder.id()));
            if theirs.is_ok_and(|t| t != mine) {
                return Namespaces {
                    holder,
                    enter: enter.to_vec(),
                };
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("namespace holder did not unshare");
    }

    pub fn cmd(&self, program: &str) -> Command {
        let mut c = Command::new("nsenter");
        c.args(["-t", &self.holder.id().to_string()])
            .args(&self.enter)
            .args(["--", program]);
        c
    }

    pub fn sh(&self, script: &str) -> String {
        let out = self.cmd("sh").args(["-c", script]).output().expect("nsenter sh");
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// `nodeward ARGS --root ROOT --kernel live` inside the namespaces.
    pub fn nodeward(&self, root: &Root, args: &[&str]) -> Run {
        let out = self
            .cmd(BIN)
            .args(args)
            .arg("--root")
            .arg(root.path())
            .args(["--kernel", "live"])
            .output()
            .expect("nodeward");
        Run::from(out)
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}
