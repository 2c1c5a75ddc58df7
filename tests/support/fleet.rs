//! A simulated fleet on one machine: N nodeward daemons, each with its own `--root` and network
//! namespace (so each stand-in kubelet has its own 127.0.0.1:10248), joined by veth pairs to one
//! bridge where the shared servers listen: the registry and bundle stand-in (fleet_server.rs: the
//! stand-in engine pulls its image from it over HTTP) and a FleetLock server (fleetlock_server.rs,
//! strict). Used by `cargo test --test fleet` (10 nodes, behaviour) and `benches/fleet` (figures).
//!
//! Addresses are 10.NET.0.0/16 (NET from 231, one per fleet of the process) on the harness's own
//! bridge and namespaces: the bridge holds 10.NET.0.1, node i 10.NET.(1 + i / 250).(2 + i % 250).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

pub const IMAGE_V1: &str = "fleet.example/kubelet:v1";

/// How a fleet is made.
#[derive(Debug, Clone)]
pub struct Options {
    pub nodes: usize,
    /// FleetLock slots in the one group.
    pub slots: usize,
    /// `false`: every daemon runs with `NODEWARD_JITTER=off` (the lockstep baseline).
    pub jitter: bool,
    /// `kubelet.restart_max_delay_seconds` (the pull retries' cap).
    pub max_delay_s: u64,
    /// `kubelet.startup_grace_seconds` and `rollback_grace_seconds`.
    pub startup_grace_s: u64,
    pub rollback_grace_s: u64,
    /// The registry and bundle server starts in an outage (503).
    pub start_down: bool,
    /// Each node ships its kubelet image (an OCI archive in `/var/lib/nodeward/images`).
    pub shipped: bool,
}

pub fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

fn sh(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().expect("run");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn quiet(args: &[&str]) {
    let _ = Command::new(args[0])
        .args(&args[1..])
        .stderr(Stdio::null())
        .status();
}

pub struct Node {
    pub index: usize,
    pub ns: String,
    veth: String,
    pub root: PathBuf,
    pub bin: PathBuf,
    daemon: Option<Child>,
}

impl Node {
    /// The daemon's state file, as JSON (null while there is none).
    pub fn state(&self) -> serde_json::Value {
        let text = std::fs::read_to_string(self.root.join("run/nodeward/state.json")).unwrap_or_default();
        serde_json::from_str(&text).unwrap_or(serde_json::Value::Null)
    }

    /// Its kubelet is healthy, and the bundle step went through.
    pub fn has_what_it_needs(&self) -> bool {
        let s = self.state();
        let bundle_ok = s["steps"]
            .as_array()
            .is_some_and(|steps| steps.iter().any(|st| st["step"] == "bundle" && st["ok"] == true));
        bundle_ok && s["kubelet"]["health"] == "healthy"
    }

    pub fn kubelet(&self) -> serde_json::Value {
        self.state()["kubelet"].clone()
    }

    /// The images its kubelets ran, in order.
    pub fn images_run(&self) -> Vec<String> {
        std::fs::read_to_string(self.bin.join("state/images.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_once(' ').map(|(_, i)| i.to_owned()))
            .collect()
    }

    /// Writes a configuration drop-in (a config push).
    pub fn push(&self, name: &str, text: &str) {
        let dir = self.root.join("etc/nodeward/config.d");
        let tmp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text).expect("write");
        std::fs::rename(&tmp, dir.join(name)).expect("rename");
    }

    pub fn knob(&self, name: &str, text: &str) {
        std::fs::write(self.bin.join("state").join(name), text).expect("knob");
    }
}

pub struct Fleet {
    prefix: String,
    /// The second octet of its addresses: 10.NET.0.0/16.
    net: u8,
    bridge: String,
    pub dir: tempfile::TempDir,
    servers: Vec<Child>,
    pub registry: String,
    pub lock_url: String,
    pub nodes: Vec<Node>,
    /// containerd's sockets under each root, held open.
    _sockets: Vec<UnixListener>,
}

impl Fleet {
    /// Makes the network, the servers and the node roots (daemons not started yet).
    pub fn new(o: &Options) -> Fleet {
        // Fleets of one test binary run side by side: each its own names and addresses.
        static MADE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
        let made = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let net = 231 + made % 20;
        let prefix = format!("nf{}{made}", std::process::id() % 10_000);
        let bridge = format!("{prefix}b");
        let dir = tempfile::tempdir().expect("tempdir");
        quiet(&["ip", "link", "del", &bridge]);
        sh(&["ip", "link", "add", &bridge, "type", "bridge"]);
        sh(&["ip", "addr", "add", &format!("10.{net}.0.1/16"), "dev", &bridge]);
        sh(&["ip", "link", "set", &bridge, "up"]);
        let srv = dir.path().join("servers");
        std::fs::create_dir_all(&srv).expect("mkdir");
        if o.start_down {
            std::fs::write(srv.join("down"), "").expect("down");
        }
        let bundle = format!("##### kubeconfig\n{}", kubeconfig());
        std::fs::write(srv.join("bundle"), &bundle).expect("bundle");
        let sha = hex(&Sha256::digest(bundle.as_bytes()));
        let mut servers = Vec::new();
        let (child, registry) = spawn_server(
            Command::new(super::engine::fleet_server())
                .args(["--listen", &format!("10.{net}.0.1:0"), "--dir"])
                .arg(&srv),
        );
        servers.push(child);
        let (child, lock) = spawn_server(
            Command::new(super::engine::fleetlock_server())
                .args([
                    "--listen",
                    &format!("10.{net}.0.1:0"),
                    "--mode",
                    "strict",
                    "--slots",
                    &o.slots.to_string(),
                    "--log",
                ])
                .arg(srv.join("fleetlock.log")),
        );
        servers.push(child);
        let mut fleet = Fleet {
            prefix,
            net,
            bridge,
            dir,
            servers,
            registry,
            lock_url: format!("http://{lock}"),
            nodes: Vec::new(),
            _sockets: Vec::new(),
        };
        for i in 0..o.nodes {
            let node = fleet.make_node(i, o, &sha);
            fleet.nodes.push(node);
        }
        fleet
    }

    fn make_node(&mut self, i: usize, o: &Options, sha: &str) -> Node {
        let ns = format!("{}n{i}", self.prefix);
        let veth = format!("{}v{i}", self.prefix);
        let ip = format!("10.{}.{}.{}/16", self.net, 1 + i / 250, 2 + i % 250);
        quiet(&["ip", "netns", "del", &ns]);
        sh(&["ip", "netns", "add", &ns]);
        sh(&[
            "ip", "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &ns,
        ]);
        sh(&["ip", "link", "set", &veth, "master", &self.bridge, "up"]);
        sh(&["ip", "-n", &ns, "addr", "add", &ip, "dev", "eth0"]);
        sh(&["ip", "-n", &ns, "link", "set", "eth0", "up"]);
        sh(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
        let base = self.dir.path().join(format!("node{i}"));
        let root = base.join("root");
        let bin = super::engine::engine_dir(&base, "podman", &[]);
        std::fs::write(bin.join("state/registry"), &self.registry).expect("registry");
        std::fs::write(bin.join("state/healthz_port"), "10248").expect("port");
        let write = |rel: &str, text: &str| {
            let p = root.join(rel);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(p, text).expect("write");
        };
        // A machine id of its own: its timer phase and its FleetLock id.
        write(
            "etc/machine-id",
            &format!(
                "{:032x}\n",
                0x5eed_0000_u128 + (i as u128) * 0x9e37_79b9_7f4a_7c15
            ),
        );
        write("etc/kubernetes/kubeconfig", &kubeconfig());
        for m in nodeward::kubelet::spec::default_mounts() {
            let source = root.join(m.source.trim_start_matches('/'));
            if !source.exists() {
                std::fs::create_dir_all(source).expect("mount source");
            }
        }
        if o.shipped {
            let images = root.join("var/lib/nodeward/images");
            std::fs::create_dir_all(&images).expect("mkdir");
            super::oci::oci_archive(&images, "kubelet.tar", IMAGE_V1, b"the kubelet's layer");
            std::fs::remove_dir_all(images.join("kubelet.tar.d")).expect("rm layout");
        }
        let sock = root.join("run/containerd/containerd.sock");
        std::fs::create_dir_all(sock.parent().expect("parent")).expect("mkdir");
        self._sockets.push(UnixListener::bind(&sock).expect("bind"));
        write(
            "etc/nodeward/config.d/10-fleet.toml",
            &format!(
                "[node]\nhostname = 'node-{i}'\n\
                 [kubelet]\nruntime = 'podman'\nimage = '{IMAGE_V1}'\nallow_tag = true\nwait_for_dns = false\n\
                 health_interval_seconds = 1\nstop_timeout_seconds = 2\nrestart_max_delay_seconds = {}\n\
                 startup_grace_seconds = {}\nrollback_grace_seconds = {}\n\
                 [daemon]\ninterval_seconds = 3600\n\
                 [bundle]\nsource = 'http://{}/bundle'\nallow_http = true\nsha256 = '{sha}'\n\
                 [fleet_lock]\nenabled = true\nbase_url = '{}'\nallow_http = true\nretry_seconds = 1\n",
                o.max_delay_s, o.startup_grace_s, o.rollback_grace_s, self.registry, self.lock_url
            ),
        );
        Node {
            index: i,
            ns,
            veth,
            root,
            bin,
            daemon: None,
        }
    }

    /// Starts every daemon, each in its namespace, as fast as they can be spawned (a fleet boot).
    pub fn start(&mut self, jitter: bool) {
        for n in &mut self.nodes {
            let log = std::fs::File::create(n.root.parent().expect("base").join("daemon.log")).expect("log");
            let child = Command::new("ip")
                .args(["netns", "exec", &n.ns, super::common::BIN, "--root"])
                .arg(&n.root)
                .args(["--kernel", "skip", "--containers", "live", "run"])
                .env(
                    "PATH",
                    format!(
                        "{}:{}",
                        n.bin.display(),
                        std::env::var("PATH").unwrap_or_default()
                    ),
                )
                // "boot": this machine has been up for hours, but the fleet is powering on.
                .env("NODEWARD_JITTER", if jitter { "boot" } else { "off" })
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("spawn nodeward");
            n.daemon = Some(child);
        }
    }

    pub fn set_down(&self, down: bool) {
        let p = self.dir.path().join("servers/down");
        if down {
            std::fs::write(p, "").expect("down");
        } else {
            std::fs::remove_file(p).expect("up");
        }
    }

    /// The registry and bundle server's requests: (ms, kind, node index, status).
    pub fn requests(&self) -> Vec<(u128, String, usize, u16)> {
        std::fs::read_to_string(self.dir.path().join("servers/requests.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                let ms = f.first()?.parse().ok()?;
                Some((
                    ms,
                    f.get(1)?.to_string(),
                    node_of(f.get(2)?, self.net)?,
                    f.get(3)?.parse().ok()?,
                ))
            })
            .collect()
    }

    /// The FleetLock server's log: (ms, op, id, status, holders after).
    pub fn lock_log(&self) -> Vec<(u128, String, String, u16, usize)> {
        std::fs::read_to_string(self.dir.path().join("servers/fleetlock.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                (f.len() == 6).then_some(())?;
                Some((
                    f[0].parse().ok()?,
                    f[1].into(),
                    f[2].into(),
                    f[4].parse().ok()?,
                    f[5].parse().ok()?,
                ))
            })
            .collect()
    }

    /// Waits until `ok` holds for every node (polling every 200 ms); how long it took, or `None`.
    pub fn wait_all(&self, limit: Duration, ok: impl Fn(&Node) -> bool) -> Option<Duration> {
        let t = Instant::now();
        while t.elapsed() < limit {
            if self.nodes.iter().all(&ok) {
                return Some(t.elapsed());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        None
    }

    pub fn count(&self, ok: impl Fn(&Node) -> bool) -> usize {
        self.nodes.iter().filter(|n| ok(n)).count()
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            if let Some(mut d) = n.daemon.take() {
                let _ = d.kill();
                let _ = d.wait();
            }
            // The stand-in kubelets and their monitors live in the namespace.
            if let Ok(out) = Command::new("ip").args(["netns", "pids", &n.ns]).output() {
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    quiet(&["kill", "-9", pid]);
                }
            }
            quiet(&["ip", "link", "del", &n.veth]);
            quiet(&["ip", "netns", "del", &n.ns]);
        }
        for s in &mut self.servers {
            let _ = s.kill();
            let _ = s.wait();
        }
        quiet(&["ip", "link", "del", &self.bridge]);
    }
}

fn spawn_server(cmd: &mut Command) -> (Child, String) {
    let mut child = cmd.stdout(Stdio::piped()).spawn().expect("server");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().expect("stdout")),
        &mut line,
    )
    .expect("address");
    (child, line.trim().to_owned())
}

/// Node index from its address.
fn node_of(ip: &str, net: u8) -> Option<usize> {
    let f: Vec<usize> = ip.split('.').filter_map(|x| x.parse().ok()).collect();
    (f.len() == 4 && f[0] == 10 && f[1] == usize::from(net) && f[2] >= 1).then(|| (f[2] - 1) * 250 + f[3] - 2)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn kubeconfig() -> String {
    use base64::Engine;
    let ca = "-----BEGIN CERTIFICATE-----\nMIIBfleet\n-----END CERTIFICATE-----\n";
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: https://api:6443\n    certificate-authority-data: {}\n",
        base64::engine::general_purpose::STANDARD.encode(ca)
    )
}

/// The largest number of distinct nodes that reached the server in one second at or after `from`
/// (ms), and which second that was.
pub fn peak_second(requests: &[(u128, String, usize, u16)], from: u128) -> (usize, u128) {
    let mut bins: BTreeMap<u128, std::collections::BTreeSet<usize>> = BTreeMap::new();
    for (ms, _, node, _) in requests.iter().filter(|r| r.0 >= from) {
        bins.entry((ms - from) / 1000).or_default().insert(*node);
    }
    bins.iter()
        .map(|(s, nodes)| (nodes.len(), *s))
        .max()
        .unwrap_or((0, 0))
}

/// Whether its kubelet runs healthy (whatever the bundle step says).
pub fn kubelet_healthy(n: &Node) -> bool {
    n.kubelet()["health"] == "healthy"
}

/// Whether a node runs `image`, healthy, holding no FleetLock slot: a rollout of it is done there.
pub fn settled_on(image: &str) -> impl Fn(&Node) -> bool + Copy + '_ {
    move |n: &Node| {
        let k = n.kubelet();
        k["image"] == image && k["health"] == "healthy" && k["fleet_lock"]["held"] == false
    }
}

/// The most requests in one second (whole seconds from `from`) and that second: a node retrying
/// twice within a second counts twice (what the server sees), unlike [`peak_second`].
pub fn peak_requests(requests: &[(u128, String, usize, u16)], from: u128) -> (usize, u128) {
    let mut bins: BTreeMap<u128, usize> = BTreeMap::new();
    for (ms, ..) in requests.iter().filter(|r| r.0 >= from) {
        *bins.entry((ms - from) / 1000).or_default() += 1;
    }
    bins.iter().map(|(s, n)| (*n, *s)).max().unwrap_or((0, 0))
}

/// When each node first got a 200 of `kind` at or after `from`.
pub fn first_success(
    requests: &[(u128, String, usize, u16)],
    kind: &str,
    from: u128,
) -> BTreeMap<usize, u128> {
    let mut out = BTreeMap::new();
    for (ms, k, node, status) in requests {
        if *ms >= from && k == kind && *status == 200 {
            out.entry(*node).or_insert(*ms);
        }
    }
    out
}

/// The most FleetLock holders at once in the server's log.
pub fn max_holders(log: &[(u128, String, String, u16, usize)]) -> usize {
    log.iter().map(|l| l.4).max().unwrap_or(0)
}
