//! `nodeward plan`, `apply`, `status` and `run` with a kubelet, through the stand-in engine
//! (tests/support/fake_runtime.rs) found in `PATH` as `podman`.

mod common;
#[path = "support/engine.rs"]
mod engine;

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::Root;

const IMAGE: &str = "quay.io/poseidon/kubelet:v1.34.1";

struct Node {
    root: Root,
    bin: PathBuf,
    _engine: tempfile::TempDir,
}

impl Node {
    fn new(extra_config: &str) -> Node {
        let root = Root::new();
        let engine = tempfile::tempdir().expect("tempdir");
        let bin = engine::engine_dir(engine.path(), "podman", &[IMAGE]);
        for m in nodeward::kubelet::spec::default_mounts() {
            std::fs::create_dir_all(root.path().join(m.source.trim_start_matches('/'))).expect("mkdir");
        }
        root.write(
            "etc/nodeward/config.d/10-node.toml",
            &format!(
                "[node]\nhostname = 'worker-1'\n[kubelet]\nruntime = 'podman'\nimage = '{IMAGE}'\nallow_tag = true\n\
                 health_interval_seconds = 1\nstop_timeout_seconds = 5\n{extra_config}"
            ),
        );
        Node {
            root,
            bin,
            _engine: engine,
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(common::BIN);
        cmd.arg("--root")
            .arg(self.root.path())
            .args(["--kernel", "skip", "--containers", "live"])
            .args(args)
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    self.bin.display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            );
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run nodeward")
    }

    fn runs(&self) -> usize {
        engine::log(&self.bin, "runs.log").len()
    }

    fn state(&self) -> serde_json::Value {
        let text =
            std::fs::read_to_string(self.root.path().join("run/nodeward/state.json")).unwrap_or_default();
        serde_json::from_str(&text).unwrap_or(serde_json::Value::Null)
    }

    fn wait_state(&self, what: &str, ok: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let s = self.state();
            if ok(&s["kubelet"]) {
                return s;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}: {s}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn plan_shows_start_apply_starts_then_nothing_then_replace_with_a_diff() {
    let node = Node::new("");
    let out = node.run(&["plan"]);
    let plan = text(&out);
    assert!(
        plan.contains(&format!("start with podman from {IMAGE}")),
        "{plan}"
    );
    assert!(plan.contains("/etc/kubernetes/kubelet.yaml"), "{plan}");
    assert_eq!(node.runs(), 0, "plan started a container");

    let out = node.run(&["apply"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(node.runs(), 1);
    let yaml =
        std::fs::read_to_string(node.root.path().join("etc/kubernetes/kubelet.yaml")).expect("kubelet.yaml");
    assert!(yaml.starts_with("# Written by nodeward") && yaml.contains("healthzPort: 10248"));
    let argv = engine::log(&node.bin, "argv.log");
    assert!(argv[0].contains("--hostname-override=worker-1"), "{argv:?}");

    // Converged: nothing to do, the running kubelet is kept.
    let out = node.run(&["plan", "--detailed-exitcode"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("runs with the wanted spec"), "{}", text(&out));
    let out = node.run(&["apply"]);
    assert!(out.status.success());
    assert_eq!(node.runs(), 1, "a second apply restarted the kubelet");

    // A spec change: the plan names the container and the difference; apply replaces it.
    node.root.write(
        "etc/nodeward/config.d/20-verbose.toml",
        "[kubelet]\nextra_args = ['--v=2']\n",
    );
    let plan = text(&node.run(&["plan"]));
    assert!(
        plan.contains("replace container") && plan.contains("+arg --v=2"),
        "{plan}"
    );
    let out = node.run(&["apply"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(node.runs(), 2);
    let stops = engine::log(&node.bin, "stops.log");
    assert!(stops.len() == 1 && stops[0].starts_with("term"), "{stops:?}");
    assert!(engine::log(&node.bin, "argv.log")[1].contains("--v=2"));

    // An exited kubelet holding the name: replaced.
    let pid = engine::kubelet_pid(&node.bin, "kubelet").expect("pid");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).expect("kill");
    std::thread::sleep(Duration::from_millis(300));
    let plan = text(&node.run(&["plan"]));
    assert!(plan.contains("remove the exited container"), "{plan}");
    assert!(node.run(&["apply"]).status.success());
    assert_eq!(node.runs(), 3);
}

/// `nodeward plan --only kubelet` on a root, with containers checked.
fn plan_kubelet(root: &Root) -> Command {
    let mut cmd = Command::new(common::BIN);
    cmd.arg("--root").arg(root.path()).args([
        "--kernel",
        "skip",
        "--containers",
        "live",
        "plan",
        "--only",
        "kubelet",
    ]);
    cmd
}

#[test]
fn no_image_means_the_kubelet_is_not_managed_and_a_missing_runtime_is_an_error() {
    let root = Root::new();
    let out = plan_kubelet(&root).output().expect("run");
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("kubelet.image is not set"), "{}", text(&out));

    root.write(
        "etc/nodeward/config.d/10.toml",
        &format!("[node]\nhostname = 'w'\n[kubelet]\nruntime = 'rkt'\nimage = '{IMAGE}'\nallow_tag = true\n"),
    );
    let out = plan_kubelet(&root)
        .env("PATH", "/nonexistent")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("no container runtime found (looked for rkt"),
        "{}",
        text(&out)
    );
}

struct Daemon {
    child: Child,
    sock: UnixDatagram,
    _dir: tempfile::TempDir,
}

impl Daemon {
    fn start(node: &Node) -> Daemon {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("notify");
        let sock = UnixDatagram::bind(&path).expect("bind");
        let child = node
            .command(&["run"])
            .env("NOTIFY_SOCKET", &path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        Daemon {
            child,
            sock,
            _dir: dir,
        }
    }

    fn wait_ready(&self) {
        self.sock
            .set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        let mut buf = [0u8; 4096];
        loop {
            let n = self.sock.recv(&mut buf).expect("READY within 20 s");
            if String::from_utf8_lossy(&buf[..n]).contains("READY=1") {
                return;
            }
        }
    }

    fn terminate(mut self) -> std::process::ExitStatus {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .expect("kill");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "daemon did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn container_dir(node: &Node) -> PathBuf {
    node.bin.join("state/c/kubelet")
}

fn running(dir: &Path) -> bool {
    dir.join("pid").exists() && !dir.join("exit").exists()
}

#[test]
fn the_daemon_is_ready_once_the_kubelet_runs_restarts_it_and_stops_it_with_itself() {
    let node = Node::new("");
    let daemon = Daemon::start(&node);
    daemon.wait_ready();
    assert!(running(&container_dir(&node)), "READY before the kubelet ran");
    let st = node.wait_state("running", |k| k["state"] == "running");
    assert_eq!(st["ready"], true);

    // `nodeward status` shows it.
    let out = node.run(&["status"]);
    let status = text(&out);
    assert!(
        status.contains("kubelet: running (podman), container") && status.contains(IMAGE),
        "{status}"
    );

    let pid = engine::kubelet_pid(&node.bin, "kubelet").expect("pid");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).expect("kill");
    let st = node.wait_state("a restart", |k| k["restarts"] == 1 && k["state"] == "running");
    assert_eq!(st["kubelet"]["last_exit"]["code"], 137);
    let status = text(&node.run(&["status"]));
    assert!(
        status.contains("1 restart(s)") && status.contains("last exit"),
        "{status}"
    );

    let exit = daemon.terminate();
    assert!(exit.success(), "{exit:?}");
    let calls = engine::log(&node.bin, "calls.log");
    assert!(calls.len() > 3, "{calls:?}");
    assert!(
        !calls.iter().any(|c| c.contains("[NOTIFY_SOCKET]")),
        "the engine inherited the daemon's notify socket: {calls:?}"
    );
    let stops = engine::log(&node.bin, "stops.log");
    assert!(stops.iter().any(|s| s.starts_with("term")), "{stops:?}");
    assert!(!container_dir(&node).exists(), "kubelet container left behind");
}

#[test]
fn with_on_agent_stop_leave_the_kubelet_outlives_the_daemon_and_is_adopted() {
    let node = Node::new("on_agent_stop = 'leave'\n");
    let daemon = Daemon::start(&node);
    daemon.wait_ready();
    assert!(daemon.terminate().success());
    assert!(running(&container_dir(&node)), "the kubelet was stopped");
    let daemon = Daemon::start(&node);
    daemon.wait_ready();
    let st = node.wait_state("adopted", |k| k["state"] == "running" && k["adopted"] == true);
    assert_eq!(st["kubelet"]["restarts"], 0);
    assert_eq!(node.runs(), 1, "the kubelet was restarted");
    drop(daemon);
}
