//! The supervisor harness shared by the supervisor tests: a stand-in engine (fake_runtime.rs) with
//! its own state, a host root, and a supervisor running on its own thread.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nodeward::kubelet::runtime::{Kind, Runtime};
use nodeward::kubelet::spec::Desired;
use nodeward::kubelet::spec::{KubeletSpec, default_mounts};
use nodeward::kubelet::status::{KubeletState, KubeletStatus, SharedStatus};
use nodeward::kubelet::supervisor::{Command, Supervisor, Tuning};
use nodeward::root::HostRoot;

#[path = "engine.rs"]
pub mod engine;

pub const IMAGE: &str = "quay.io/poseidon/kubelet:test";
pub const MIRROR: &str = "docker.io/psdn/kubelet:test";

/// One engine with its own state directory, and a host root for the supervisor.
pub struct Engine {
    pub _dir: tempfile::TempDir,
    pub bin: PathBuf,
    pub root: PathBuf,
    pub runtime: Runtime,
}

/// A test's kubelets end with it (a supervisor stopped without its kubelet leaves one running):
/// none outlives its test, to be seen by another's monitors.
impl Drop for Engine {
    fn drop(&mut self) {
        for pid in self.kubelet_pids() {
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
    }
}

impl Engine {
    pub fn new(kind: Kind) -> Engine {
        let dir = tempfile::tempdir().expect("tempdir");
        let bin = dir.path().join("bin");
        let root = dir.path().join("root");
        std::fs::create_dir_all(bin.join("state")).expect("mkdir");
        std::fs::create_dir_all(&root).expect("mkdir");
        // The host paths the kubelet mounts (the supervisor checks they exist).
        for m in default_mounts() {
            std::fs::create_dir_all(root.join(m.source.trim_start_matches('/'))).expect("mount source");
        }
        let program = bin.join(kind.program());
        engine::install_fake_runtime(&program);
        std::fs::write(bin.join("state/images"), format!("{IMAGE}\n")).expect("images");
        let runtime = Runtime::new(
            kind,
            program,
            &root.join("var/cache/kubelet-pod.uuid"),
            &root.join("run/nodeward/kubelet.pid"),
            &nodeward::root::HostRoot::at(&root),
        );
        Engine {
            _dir: dir,
            bin,
            root,
            runtime,
        }
    }

    /// The pids of every container's kubelet this engine started that may still run.
    fn kubelet_pids(&self) -> Vec<i32> {
        std::fs::read_dir(self.state("c"))
            .map(|d| {
                d.flatten()
                    // (One that exited has its code recorded: its pid may be another's now.)
                    .filter(|e| !e.path().join("exit").exists())
                    .filter_map(|e| std::fs::read_to_string(e.path().join("pid")).ok())
                    .filter_map(|p| p.trim().parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn state(&self, name: &str) -> PathBuf {
        self.bin.join("state").join(name)
    }

    pub fn knob(&self, name: &str, on: bool) {
        if on {
            std::fs::write(self.state(name), "").expect("knob");
        } else {
            let _ = std::fs::remove_file(self.state(name));
        }
    }

    pub fn log(&self, name: &str) -> Vec<String> {
        std::fs::read_to_string(self.state(name))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// `(millis, container id, running-before)` for each container started.
    pub fn runs(&self) -> Vec<(u128, String, usize)> {
        self.log("runs.log")
            .iter()
            .map(|l| {
                let mut f = l.split(' ');
                let ms = f.next().and_then(|x| x.parse().ok()).expect("ms");
                let id = f.next().expect("id").to_owned();
                let running = f
                    .next()
                    .and_then(|x| x.strip_prefix("running="))
                    .and_then(|x| x.parse().ok())
                    .expect("running");
                (ms, id, running)
            })
            .collect()
    }

    /// The pid of the kubelet process of the container with this name.
    pub fn kubelet_pid(&self, name: &str) -> Option<i32> {
        let dir = std::fs::read_dir(self.state("c")).ok()?.flatten().find(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n == name || n.starts_with("rkt-")
        })?;
        std::fs::read_to_string(dir.path().join("pid"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    pub fn containers(&self) -> usize {
        std::fs::read_dir(self.state("c")).map_or(0, |d| d.count())
    }

    /// A kubelet left running by a supervisor that wanted `d` and stopped without it (a daemon
    /// restart's first half); its status when it ran.
    pub fn left_running(&self, d: &Desired) -> KubeletStatus {
        let sup = self.start(tuning());
        sup.want(d);
        let s = sup.wait_for("running", Duration::from_secs(10), |s| {
            s.state == KubeletState::Running
        });
        sup.stop(false);
        s
    }

    /// A supervisor with default tuning, wanting the default kubelet, once it runs.
    pub fn start_running(&self) -> Running {
        let sup = self.start(tuning());
        sup.want(&desired(&[], None));
        sup.wait_for("running", Duration::from_secs(10), |s| {
            s.state == KubeletState::Running
        });
        sup
    }

    pub fn start(&self, tuning: Tuning) -> Running {
        let status: SharedStatus = Arc::new(Mutex::new(KubeletStatus::default()));
        self.start_with(tuning, status, Box::new(|| {}))
    }

    /// A supervisor publishing to `status` and calling `on_change` on each change.
    pub fn start_with(
        &self,
        tuning: Tuning,
        status: SharedStatus,
        on_change: Box<dyn Fn() + Send + Sync>,
    ) -> Running {
        let sup = Supervisor::new(
            self.runtime.clone(),
            HostRoot::at(&self.root),
            status.clone(),
            on_change,
        );
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let thread = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime")
                .block_on(sup.run(rx))
        });
        Running {
            tx,
            thread: Some(thread),
            status,
            tuning,
        }
    }
}

pub struct Running {
    pub tx: tokio::sync::mpsc::UnboundedSender<Command>,
    pub thread: Option<std::thread::JoinHandle<()>>,
    pub status: SharedStatus,
    pub tuning: Tuning,
}

impl Running {
    pub fn want(&self, d: &Desired) {
        self.tx
            .send(Command::Want(Some(Box::new(d.clone())), self.tuning))
            .expect("send");
    }
    pub fn send(&self, cmd: Command) {
        self.tx.send(cmd).expect("send");
    }
    /// An operator's request, answered.
    pub fn ask(&self, op: nodeward::kubelet::supervisor::Operator) -> Result<String, String> {
        let (reply, answer) = std::sync::mpsc::sync_channel(1);
        self.send(Command::Operator(op, reply));
        answer
            .recv_timeout(Duration::from_secs(60))
            .expect("answer")
            .map_err(|e| e.to_string())
    }
    pub fn status(&self) -> KubeletStatus {
        self.status.lock().expect("lock").clone()
    }
    pub fn wait_for(
        &self,
        what: &str,
        limit: Duration,
        ok: impl Fn(&KubeletStatus) -> bool,
    ) -> KubeletStatus {
        let deadline = Instant::now() + limit;
        loop {
            let s = self.status();
            if ok(&s) {
                return s;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}: {s:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    pub fn stop(mut self, kubelet: bool) -> Duration {
        let t = Instant::now();
        self.tx.send(Command::Stop { kubelet }).expect("send");
        if let Some(th) = self.thread.take() {
            th.join().expect("supervisor thread");
        }
        t.elapsed()
    }
}

pub fn tuning() -> Tuning {
    Tuning {
        stop_grace: Duration::from_secs(5),
        max_delay: Duration::from_secs(4),
        healthy_reset: Duration::from_secs(3600),
        health_interval: Duration::from_millis(100),
        unhealthy_threshold: 3,
        startup_grace: Duration::ZERO,
        rollback_grace: None,
    }
}

pub fn desired(extra: &[&str], healthz: Option<u16>) -> Desired {
    let mut args = vec![
        "--bootstrap-kubeconfig=/etc/kubernetes/kubeconfig".to_owned(),
        "--config=/etc/kubernetes/kubelet.yaml".to_owned(),
    ];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    let spec = KubeletSpec {
        name: "kubelet".into(),
        images: vec![IMAGE.into(), MIRROR.into()],
        mounts: default_mounts(),
        args,
        config_sha256: "0".repeat(64),
    };
    Desired {
        hash: spec.hash(),
        spec,
        healthz: healthz.map(|p| ("127.0.0.1".to_owned(), p)),
        pull_from: Vec::new(),
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

pub fn kill(pid: i32) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).expect("kill");
}
