//! `nodeward run` against a real notify socket bound by the test.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixDatagram;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::Root;

struct Daemon {
    child: Child,
    sock: UnixDatagram,
    _dir: tempfile::TempDir,
}

impl Daemon {
    fn start(root: &Root, watchdog_usec: Option<u64>) -> Daemon {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("notify");
        let sock = UnixDatagram::bind(&path).expect("bind notify socket");
        let mut cmd = Command::new(common::BIN);
        cmd.args(["run", "--root"])
            .arg(root.path())
            .env("NOTIFY_SOCKET", &path)
            .stdout(Stdio::null());
        if let Some(us) = watchdog_usec {
            cmd.env("WATCHDOG_USEC", us.to_string());
        }
        Daemon {
            child: cmd.spawn().expect("spawn"),
            sock,
            _dir: dir,
        }
    }

    /// The next datagram, or None after `timeout`.
    fn recv(&self, timeout: Duration) -> Option<String> {
        self.sock.set_read_timeout(Some(timeout)).expect("timeout");
        let mut buf = [0u8; 4096];
        let n = self.sock.recv(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    }

    /// Waits for a message containing `needle`, returning every message seen until then.
    fn wait_for(&self, needle: &str, timeout: Duration) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        let mut seen = Vec::new();
        while Instant::now() < deadline {
            if let Some(m) = self.recv(deadline - Instant::now()) {
                let hit = m.contains(needle);
                seen.push(m);
                if hit {
                    return seen;
                }
            }
        }
        panic!("no {needle:?} within {timeout:?}; saw {seen:?}");
    }

    /// SIGTERM, and the daemon must be gone within `limit`: a hang detector (the daemon stops in
    /// about 0.1 s; what it must not do is wait for a hung download or bus call, so each caller
    /// makes what it must not wait for last far longer than `limit`).
    fn stop_within(&mut self, limit: Duration) {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        self.exit_within(limit);
    }

    /// The daemon exits 0 within `limit` (a hang detector: it is killed, and the test fails, past
    /// it rather than waiting for good).
    fn exit_within(&mut self, limit: Duration) {
        let stop = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                break status;
            }
            if stop.elapsed() > limit {
                let _ = self.child.kill();
                panic!("the daemon still runs {limit:?} after SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "{status}");
    }

    fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), sig).expect("kill");
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn ready_after_converge_then_drift_repair_reload_and_clean_stop() {
    let root = Root::new();
    root.write(
        "etc/nodeward/config.d/10.toml",
        "[daemon]\ninterval_seconds = 1\n",
    );
    let mut d = Daemon::start(&root, None);

    let msgs = d.wait_for("READY=1", Duration::from_secs(20));
    // READY must come after the directories exist: check at the moment it arrived.
    assert!(
        root.path().join("var/lib/kubelet/volumeplugins").is_dir(),
        "READY before converge: {msgs:?}"
    );
    assert!(msgs.last().expect("msg").contains("STATUS=converged"), "{msgs:?}");

    // Drift: repaired within the 1 s interval (allow slack for a loaded machine).
    let kubelet = root.path().join("var/lib/kubelet");
    std::fs::set_permissions(&kubelet, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::metadata(&kubelet).expect("stat").mode() & 0o7777 != 0o750 {
        assert!(Instant::now() < deadline, "drift not repaired");
        std::thread::sleep(Duration::from_millis(50));
    }

    // SIGHUP reloads the configuration: a new directory appears.
    root.write(
        "etc/nodeward/config.d/20.toml",
        "[dirs.'/var/lib/added']\nmode = '0700'\n",
    );
    d.signal(nix::sys::signal::Signal::SIGHUP);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !root.path().join("var/lib/added").is_dir() {
        assert!(Instant::now() < deadline, "SIGHUP did not reload");
        std::thread::sleep(Duration::from_millis(50));
    }

    // The stop says STOPPING=1 and exits 0 (a state); the minute is a hang detector only (the
    // stop takes about 0.1 s).
    d.signal(nix::sys::signal::Signal::SIGTERM);
    d.wait_for("STOPPING=1", Duration::from_secs(60));
    d.exit_within(Duration::from_secs(60));
}

#[test]
fn watchdog_pings_at_half_the_interval() {
    let root = Root::new();
    // 400 ms watchdog: pings expected every 200 ms.
    let d = Daemon::start(&root, Some(400_000));
    d.wait_for("READY=1", Duration::from_secs(20));
    let start = Instant::now();
    let mut pings = 0;
    while start.elapsed() < Duration::from_millis(2000) {
        if d.recv(Duration::from_millis(100))
            .is_some_and(|m| m.contains("WATCHDOG=1"))
        {
            pings += 1;
        }
    }
    // Pings keep coming at the watchdog's cadence (about 10 in 2 s): at least a few, and not a
    // storm. Loose on purpose: on 2 busy cores the count is a rate, not a schedule.
    assert!((2..=40).contains(&pings), "{pings} pings in 2 s, want about 10");
}

#[test]
fn a_failing_step_keeps_ready_back_and_says_why() {
    let root = Root::new();
    root.write("var/lib/calico", "a file in the way");
    let d = Daemon::start(&root, None);
    let msgs = d.wait_for("failing: dirs", Duration::from_secs(20));
    assert!(!msgs.iter().any(|m| m.contains("READY=1")), "{msgs:?}");
    assert!(msgs.last().expect("msg").contains("var/lib/calico"), "{msgs:?}");
    // Retried with backoff: once the obstacle is gone, the node converges and becomes ready.
    std::fs::remove_file(root.path().join("var/lib/calico")).expect("rm");
    d.wait_for("READY=1", Duration::from_secs(20));
}

#[test]
fn an_invalid_configuration_at_start_exits_3() {
    let root = Root::new();
    root.write("etc/nodeward/config.d/10.toml", "[daemon]\ninterval = 1\n");
    let out = Command::new(common::BIN)
        .args(["run", "--root"])
        .arg(root.path())
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_second_daemon_is_refused_and_status_reads_the_first_ones_state() {
    let root = Root::new();
    let d = Daemon::start(&root, None);
    d.wait_for("READY=1", Duration::from_secs(20));

    let second = Command::new(common::BIN)
        .args(["run", "--root"])
        .arg(root.path())
        .output()
        .expect("run");
    assert_eq!(second.status.code(), Some(1));
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(
        err.contains(&format!(
            "another nodeward daemon is running (pid {}",
            d.child.id()
        )),
        "{err}"
    );

    let status = root.run(&["status", "--output", "json"]);
    assert_eq!(status.code, 0, "{}", status.stdout);
    let doc = status.json();
    assert_eq!(doc["daemon"]["pid"], d.child.id());
    assert_eq!(doc["daemon"]["ready"], true);
    assert!(
        doc["daemon"]["steps"]
            .as_array()
            .expect("steps")
            .iter()
            .all(|s| s["ok"] == true),
        "{doc}"
    );
    assert!(
        doc["daemon"]["last_repair"]["subject"].is_string(),
        "the first converge created directories: {doc}"
    );
    let human = root.run(&["status"]);
    assert!(
        human
            .stdout
            .contains(&format!("daemon: pid {}, ready", d.child.id())),
        "{}",
        human.stdout
    );
}

#[test]
fn inotify_acts_on_config_and_drop_in_changes_without_waiting_for_the_interval() {
    let root = Root::new();
    root.write(
        "etc/nodeward/config.d/10.toml",
        "[daemon]\ninterval_seconds = 3600\n",
    );
    let d = Daemon::start(&root, None);
    d.wait_for("READY=1", Duration::from_secs(20));
    // What discriminates is the hour: without inotify nothing happens before the interval. A
    // minute is a hang detector only (5 s was missed once with two TCG VMs beside the tests).
    let wait = |what: &str, ok: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !ok() {
            assert!(
                Instant::now() < deadline,
                "{what} not acted on within a minute (interval is an hour)"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    // A new fragment: reloaded and applied, no SIGHUP.
    root.write(
        "etc/nodeward/config.d/20.toml",
        "[dirs.'/var/lib/from-inotify']\nmode = '0700'\n",
    );
    wait("a new config fragment", &|| {
        root.path().join("var/lib/from-inotify").is_dir()
    });
    // Our own drop-in deleted by hand: restored.
    let dropin = root.path().join("etc/sysctl.d/90-nodeward.conf");
    std::fs::remove_file(&dropin).expect("rm");
    wait("a deleted drop-in", &|| dropin.exists());
}

/// An http server on loopback that accepts and then, per connection, either never answers or
/// answers a head and a few bytes of body and then goes silent. Stops when the test ends.
fn silent_server(partial_body: bool) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().take(200) {
            let Ok(mut s) = stream else { continue };
            if partial_body {
                use std::io::{Read, Write};
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf);
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\nsome bytes");
            }
            held.push(s);
        }
    });
    port
}

fn http_source(root: &Root, port: u16, timeout: u32) {
    root.write(
        "etc/nodeward/config.d/10.toml",
        &format!(
            "[bundle]\nsource = \"http://127.0.0.1:{port}/assets\"\nallow_http = true\nsha256 = \"{}\"\n\
             timeout_seconds = {timeout}\nretries = 100\n",
            "0".repeat(64)
        ),
    );
}

/// Waits for `n` WATCHDOG=1 pings and returns every message seen; `None` when they did not come
/// within `hang` (a hang detector, many cadences long: the count is the check, not the time).
fn next_pings(d: &Daemon, n: usize, hang: Duration) -> Option<Vec<String>> {
    let start = Instant::now();
    let (mut pings, mut seen) = (0, Vec::new());
    while pings < n {
        if start.elapsed() > hang {
            return None;
        }
        if let Some(m) = d.recv(Duration::from_millis(100)) {
            pings += usize::from(m.contains("WATCHDOG=1"));
            seen.push(m);
        }
    }
    Some(seen)
}

/// Counts WATCHDOG=1 pings over `span`, and returns every message seen.
fn pings_over(d: &Daemon, span: Duration) -> (usize, Vec<String>) {
    let start = Instant::now();
    let (mut pings, mut seen) = (0, Vec::new());
    while start.elapsed() < span {
        if let Some(m) = d.recv(Duration::from_millis(100)) {
            pings += usize::from(m.contains("WATCHDOG=1"));
            seen.push(m);
        }
    }
    (pings, seen)
}

/// A bundle server that never answers does not hold the daemon: the download runs beside the
/// passes, so READY comes with the first pass, the watchdog keeps its cadence (the converge is not
/// stuck: it is not waiting for the download), STATUS says a download is under way, drift of
/// another step is repaired meanwhile, and SIGTERM ends the daemon without waiting for the
/// download (its timeout an hour, the stop's hang detector a minute).
#[test]
fn a_never_answering_source_holds_neither_ready_nor_drift_repair_nor_the_watchdog() {
    let root = Root::new();
    http_source(&root, silent_server(false), 3600);
    root.write(
        "etc/nodeward/config.d/20.toml",
        "[daemon]\ninterval_seconds = 1\n",
    );
    let mut d = Daemon::start(&root, Some(2_000_000));
    let seen = d.wait_for("READY=1", Duration::from_secs(10));
    assert!(
        seen.iter()
            .any(|m| m.contains("downloading http://127.0.0.1:") && m.contains("in the background")),
        "STATUS must say a download is under way: {seen:?}"
    );
    // Drift elsewhere is repaired while the download hangs.
    let kubelet = root.path().join("var/lib/kubelet");
    std::fs::set_permissions(&kubelet, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::metadata(&kubelet).expect("stat").mode() & 0o7777 != 0o750 {
        assert!(
            Instant::now() < deadline,
            "drift not repaired while a download hangs"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let seen =
        next_pings(&d, 3, Duration::from_secs(30)).expect("the watchdog pings go on while a download hangs");
    assert!(!seen.iter().any(|m| m.contains("stalled")), "{seen:?}");
    d.stop_within(Duration::from_secs(60));
}

/// An http server on loopback that answers a head, then drips one body byte every 300 ms.
fn dripping_server() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(20) {
            let Ok(mut s) = stream else { continue };
            std::thread::spawn(move || {
                use std::io::{Read, Write};
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf);
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n");
                for _ in 0..200 {
                    if s.write_all(b"x").is_err() {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(300));
                }
            });
        }
    });
    port
}

/// `timeout_seconds` bounds a whole attempt, not one read: a server dripping a byte every 300 ms
/// (each read returns quickly) is given up after 2 attempts of 1 s and a 1 s backoff.
#[test]
fn a_dripping_server_is_given_up_within_timeout_times_attempts() {
    let root = Root::new();
    let port = dripping_server();
    root.write(
        "etc/nodeward/config.d/10.toml",
        &format!(
            "[bundle]\nsource = \"http://127.0.0.1:{port}/assets\"\nallow_http = true\n\
             timeout_seconds = 1\nretries = 1\nsha256 = \"{}\"\n",
            "0".repeat(64)
        ),
    );
    let started = Instant::now();
    let out = root.run(&["apply", "--only", "bundle"]);
    let took = started.elapsed();
    assert_ne!(out.code, 0);
    let said = format!("{}{}", out.stdout, out.stderr);
    assert!(
        said.contains("took longer than bundle.timeout_seconds (1 s)"),
        "{said}"
    );
    // The server never answers: without the timeout this would never end. 2 attempts × 1 s + 1 s
    // backoff is the figure; 30 s is a hang detector, and the message above says which limit hit.
    assert!(took < Duration::from_secs(30), "gave up after {took:?}");
}

/// A system bus that accepts and never answers, met by a converge on the live kernel (in a private
/// network namespace, with the global sysctls dropped so the host is untouched): while the bus call
/// blocks there is no progress and no ping; the call is bounded, the step fails naming the bus, the
/// pings come back, and SIGTERM still ends the daemon within 2 s (with a call in flight: see the
/// never-answering source above).
#[test]
fn a_silent_bus_withholds_the_watchdog_only_while_it_blocks() {
    if !common::require_root() {
        return;
    }
    let root = Root::new();
    root.write("usr/sbin/NetworkManager", "");
    let mut cfg = String::from("[modules]\nload = []\n[daemon]\ninterval_seconds = 3600\n[sysctl]\n");
    // Also the keys that need a module this host cannot load, and the conntrack limit.
    let more = [
        "net.netfilter.nf_conntrack_max",
        "net.bridge.bridge-nf-call-iptables",
        "net.bridge.bridge-nf-call-ip6tables",
    ];
    for k in common::GLOBAL_SYSCTLS.iter().chain(&more) {
        cfg.push_str(&format!("\"{k}\" = {{ enabled = false }}\n"));
    }
    root.write("etc/nodeward/config.d/10.toml", &cfg);
    let dir = tempfile::tempdir().expect("tempdir");
    let bus = dir.path().join("silent-bus");
    let listener = std::os::unix::net::UnixListener::bind(&bus).expect("bind");
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in listener.incoming().take(20) {
            held.push(c);
        }
        std::thread::sleep(Duration::from_secs(60));
    });
    let notify = dir.path().join("notify");
    let sock = UnixDatagram::bind(&notify).expect("bind notify socket");
    let child = Command::new("unshare")
        .args(["--net", "--"])
        .arg(common::BIN)
        .args(["run", "--kernel", "live", "--root"])
        .arg(root.path())
        .env("NOTIFY_SOCKET", &notify)
        .env("WATCHDOG_USEC", "2000000")
        .env("DBUS_SYSTEM_BUS_ADDRESS", format!("unix:path={}", bus.display()))
        .env("NODEWARD_DBUS_TIMEOUT_MS", "6000")
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn");
    let mut d = Daemon {
        child,
        sock,
        _dir: dir,
    };
    let seen = d.wait_for("STATUS=stalled", Duration::from_secs(20));
    assert!(
        seen.iter().any(|m| m.contains("WATCHDOG=1")),
        "pinged before the block: {seen:?}"
    );
    let (pings, during) = pings_over(&d, Duration::from_millis(2500));
    assert_eq!(pings, 0, "no ping while the bus call blocks: {during:?}");
    let after = d.wait_for("no answer on the system bus", Duration::from_secs(20));
    assert!(
        after.iter().any(|m| m.contains("STATUS=failing:")),
        "STATUS names the failing step: {after:?}"
    );
    assert!(
        next_pings(&d, 2, Duration::from_secs(30)).is_some(),
        "pings resume once the call gave up"
    );
    // The call gave up already (the pings resumed): this stop is only checked not to hang.
    d.stop_within(Duration::from_secs(60));
}

/// `--root` holds for the daemon's own files too: a `ROOT/run` symlink to an absolute path is
/// resolved inside the root, so the lock and the state file never land outside it.
#[test]
fn the_daemons_files_stay_below_the_root() {
    let root = Root::new();
    let outside = tempfile::tempdir().expect("outside");
    std::os::unix::fs::symlink(outside.path(), root.path().join("run")).expect("symlink");
    let d = Daemon::start(&root, None);
    d.wait_for("READY=1", Duration::from_secs(20));
    assert!(
        std::fs::read_dir(outside.path()).expect("ls").next().is_none(),
        "written outside the root"
    );
    let inside = root
        .path()
        .join(outside.path().strip_prefix("/").expect("absolute"))
        .join("nodeward");
    // The state file is written right after READY is sent.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !inside.join("state.json").exists() {
        assert!(Instant::now() < deadline, "no state file in {}", inside.display());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(inside.join("lock").exists(), "{}", inside.display());
    assert!(
        std::fs::read_dir(outside.path()).expect("ls").next().is_none(),
        "written outside the root"
    );
}

/// A FIFO at the cloud metadata file (with `kubelet.provider_id` set) once wedged the converge in a
/// blocking read: STATUS stalled, watchdog pings stopped, drift stayed, `nodeward converge` got no
/// answer. Now the read is refused at once: pings keep their period, drift elsewhere is repaired
/// within one interval, `converge` answers, and the kubelet step names the file.
#[test]
fn a_fifo_at_the_metadata_file_holds_neither_the_watchdog_nor_drift_repair_nor_converge() {
    let root = Root::new();
    root.write(
        "etc/nodeward/config.d/10.toml",
        "[node]\nhostname = 'node-1'\n[daemon]\ninterval_seconds = 1\n[kubelet]\nruntime = 'podman'\n\
         image = 'quay.io/poseidon/kubelet:v1.36.1'\nallow_tag = true\nwait_for_dns = false\n\
         provider_id = 'aws:///${AFTERBURN_AWS_AVAILABILITY_ZONE}/${AFTERBURN_AWS_INSTANCE_ID}'\n",
    );
    root.write("etc/kubernetes/kubeconfig", "apiVersion: v1\nkind: Config\n");
    let fifo = root.path().join("run/metadata/afterburn");
    std::fs::create_dir_all(fifo.parent().expect("parent")).expect("mkdir");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).expect("mkfifo");
    let d = Daemon::start(&root, Some(2_000_000));
    let seen = d.wait_for("READY=1", Duration::from_secs(15));
    let more = next_pings(&d, 3, Duration::from_secs(30))
        .expect("watchdog pings go on while a metadata read blocks");
    let status: String = seen
        .iter()
        .chain(more.iter())
        .filter(|m| m.contains("STATUS="))
        .cloned()
        .collect();
    assert!(!status.contains("stalled"), "{status}");
    // Drift elsewhere, repaired within an interval or two.
    let kubelet = root.path().join("var/lib/kubelet");
    std::fs::set_permissions(&kubelet, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::fs::metadata(&kubelet).expect("stat").mode() & 0o7777 != 0o750 {
        assert!(
            Instant::now() < deadline,
            "drift not repaired while the metadata file is a FIFO"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The control socket answers.
    let out = Command::new(common::BIN)
        .args(["converge", "--root"])
        .arg(root.path())
        .output()
        .expect("converge");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("/run/metadata/afterburn: not a regular file (a FIFO)"),
        "{text}"
    );
}

/// A daemon on `root` that holds at the failpoint `point` until its gate (the returned path) exists.
fn held_at(
    root: &Root,
    point: &str,
    stderr: Stdio,
) -> (std::process::Child, std::path::PathBuf, tempfile::TempDir) {
    let gates = tempfile::tempdir().expect("tempdir");
    let gate = gates.path().join("go");
    let daemon = Command::new(common::BIN)
        .args(["run", "--root"])
        .arg(root.path())
        .env("NODEWARD_PAUSE", format!("{point}:{}", gate.display()))
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("spawn");
    (daemon, gate, gates)
}

/// Waits (a hang detector of 30 s) until the held daemon has reached its failpoint.
fn wait_reached(gate: &std::path::Path, never: &str) {
    let mut reached = gate.as_os_str().to_owned();
    reached.push(".reached");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::path::Path::new(&reached).exists() {
        assert!(Instant::now() < deadline, "{never}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A pass asked for while the preflight checks run (they follow a pass on its thread) comes when
/// they end. Before, the ask was kept for the next pass's end and waited for whatever pass came
/// next: `nodeward converge` went unanswered until the interval (or its own 180 s limit), and in
/// the fleet an image import ending during the first checks left the kubelet waiting 13 s.
#[test]
fn a_pass_asked_for_during_the_checks_comes_when_they_end() {
    let root = Root::new();
    // No timer brings a pass meanwhile: only the ask can.
    root.write(
        "etc/nodeward/config.d/50-interval.toml",
        "[daemon]\ninterval_seconds = 3600\n",
    );
    let (mut daemon, gate, _gates) = held_at(&root, "converge-checks", Stdio::null());
    wait_reached(&gate, "the first pass's checks never began");
    // The first pass is done and its checks are held: the request arrives now.
    let mut asked = Command::new(common::BIN)
        .args(["converge", "--root"])
        .arg(root.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("converge");
    // Held until the request is surely in (the control socket answers within its 2 s deadline).
    std::thread::sleep(Duration::from_secs(2));
    std::fs::write(&gate, "").expect("open the gate");
    // A hang detector: a pass takes a fraction of a second; without one, the answer waits 180 s.
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = asked.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = asked.kill();
            let _ = daemon.kill();
            panic!("`nodeward converge` asked during the checks was not answered within 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = asked.wait_with_output().expect("converge");
    assert!(
        status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = daemon.kill();
    let _ = daemon.wait();
}

/// `nodeward converge` asked while a pass is running is answered by a pass that starts after the
/// request: the running one may have read the node before the caller changed it. (Seen in the VM:
/// a damaged archive removed, then `converge` still named it, answered by the pass before.) The
/// pass is held, having read the node, until the request has arrived and the obstacle is gone.
#[test]
fn converge_answers_with_a_pass_that_started_after_the_request() {
    use std::io::BufRead;
    let root = Root::new();
    root.write("var/lib/calico", "a file in the way");
    let (mut daemon, gate, _gates) = held_at(&root, "converge-pass-end", Stdio::piped());
    let stderr = daemon.stderr.take().expect("stderr");
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let wait_line = |needle: &str| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(l) = lines.recv_timeout(Duration::from_millis(100))
                && l.contains(needle)
            {
                return;
            }
        }
        panic!("the daemon never logged {needle:?}");
    };
    wait_reached(&gate, "the first pass never reached its end");
    // The first pass has read the node (dirs failing) and is held; the request arrives meanwhile.
    let asked = Command::new(common::BIN)
        .args(["converge", "--root"])
        .arg(root.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("converge");
    wait_line("request over the control socket");
    std::fs::remove_file(root.path().join("var/lib/calico")).expect("rm");
    std::fs::write(&gate, "").expect("open the gate");
    let out = asked.wait_with_output().expect("converge");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "answered by the pass that read the node before: {text}"
    );
    assert!(!text.contains("var/lib/calico"), "{text}");
    let _ = daemon.kill();
    let _ = daemon.wait();
}
