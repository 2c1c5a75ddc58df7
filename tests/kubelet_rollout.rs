//! Kubelet changes that roll back, and FleetLock, through the real supervisor, the stand-in engine
//! (its kubelets are real processes; `crash_args` makes a "release" exit at once) and the FleetLock
//! servers of tests/support/fleetlock_server.rs (a strict one written from Zincati's protocol, and a
//! model of poseidon/fleetlock).

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use nodeward::fleetlock::{ClientId, Settings};
use nodeward::kubelet::runtime::Kind;
use nodeward::kubelet::spec::Desired;
use nodeward::kubelet::status::KubeletState;
use nodeward::kubelet::supervisor::{Command, Operator, Tuning};

#[path = "support/supervisor.rs"]
mod supervisor;
use supervisor::*;

const MACHINE: &str = "b34fc2b3c9a24a3a8f3f5a4f0e8a7c11";
/// nodeward's and Zincati's ids for MACHINE (src/fleetlock/id.rs checks them against Python).
const OUR_ID: &str = "be6e871c95194b438889a5efd59ead5b";
const ZINCATI_ID: &str = "db59ceec4a634caa946cf36fb4d2dc6c";

fn rollback_tuning(grace_ms: u64) -> Tuning {
    Tuning {
        rollback_grace: Some(Duration::from_millis(grace_ms)),
        ..tuning()
    }
}

/// An engine whose kubelets serve /healthz on a free port, and specs that differ by one flag.
fn healthy_engine() -> (Engine, u16) {
    let e = Engine::new("podman".parse::<Kind>().expect("engine"));
    let port = free_port();
    std::fs::write(e.state("healthz_port"), port.to_string()).expect("port");
    std::fs::write(e.state("crash_args"), "--bad-release\n").expect("crash args");
    (e, port)
}

fn spec(port: u16, flag: &str) -> Desired {
    desired(&[flag], Some(port))
}

fn runs_with(e: &Engine, flag: &str) -> usize {
    e.log("argv.log").iter().filter(|l| l.contains(flag)).count()
}

#[test]
fn a_new_spec_that_never_gets_healthy_is_rolled_back_and_not_tried_again() {
    let (e, port) = healthy_engine();
    let (good, bad, next) = (
        spec(port, "--v=1"),
        spec(port, "--bad-release"),
        spec(port, "--v=3"),
    );
    let sup = e.start(rollback_tuning(1500));
    sup.want(&good);
    sup.wait_for("healthy", Duration::from_secs(10), |s| s.health == "healthy");
    sup.want(&bad);
    let s = sup.wait_for("rollback", Duration::from_secs(20), |s| {
        s.rollbacks == 1
            && s.state == KubeletState::Running
            && s.spec_hash.as_deref() == Some(good.hash.as_str())
    });
    let rb = s.rolled_back.expect("rolled back");
    assert_eq!(
        (rb.bad.as_str(), rb.to.as_str()),
        (bad.hash.as_str(), good.hash.as_str())
    );
    assert!(
        rb.reason.starts_with("not healthy within 1 s of its start"),
        "{}",
        rb.reason
    );
    assert!(rb.reason.contains("exited"), "{}", rb.reason);
    let tries = runs_with(&e, "--bad-release");
    assert!(tries >= 1);
    // The configuration still wants it: nothing changes, the healthy spec keeps running.
    for _ in 0..3 {
        sup.want(&bad);
    }
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        runs_with(&e, "--bad-release"),
        tries,
        "the rolled-back spec was tried again"
    );
    let s = sup.status();
    assert_eq!(
        (s.rollbacks, s.spec_hash.as_deref()),
        (1, Some(good.hash.as_str()))
    );
    // An operator asks for it: on trial again, and rolled back again.
    assert!(sup.ask(Operator::Retry).expect("retry").contains(&bad.hash));
    sup.wait_for("second rollback", Duration::from_secs(20), |s| {
        s.rollbacks == 2
            && s.spec_hash.as_deref() == Some(good.hash.as_str())
            && s.state == KubeletState::Running
    });
    assert!(runs_with(&e, "--bad-release") > tries);
    // A retry with nothing held back is refused.
    sup.want(&next);
    sup.wait_for("the next spec", Duration::from_secs(10), |s| {
        s.spec_hash.as_deref() == Some(next.hash.as_str()) && s.health == "healthy"
    });
    assert!(sup.status().rolled_back.is_none());
    assert!(sup.ask(Operator::Retry).is_err());
    sup.stop(true);
}

#[test]
fn a_spec_that_gets_healthy_in_time_is_kept_and_crash_restarts_keep_their_backoff() {
    let (e, port) = healthy_engine();
    let (v1, v2) = (spec(port, "--v=1"), spec(port, "--v=2"));
    let sup = e.start(rollback_tuning(3000));
    sup.want(&v1);
    sup.wait_for("healthy", Duration::from_secs(10), |s| s.health == "healthy");
    sup.want(&v2);
    sup.wait_for("v2 healthy", Duration::from_secs(10), |s| {
        s.spec_hash.as_deref() == Some(v2.hash.as_str()) && s.health == "healthy" && s.trial.is_none()
    });
    // v2 is now the healthy spec: a crash of it is a restart, never a rollback.
    let pid = e.kubelet_pid("kubelet").expect("pid");
    kill(pid);
    sup.wait_for("restarted", Duration::from_secs(10), |s| {
        s.restarts == 1 && s.health == "healthy"
    });
    std::thread::sleep(Duration::from_secs(4));
    let s = sup.status();
    assert_eq!((s.rollbacks, s.spec_hash.as_deref()), (0, Some(v2.hash.as_str())));
    let record =
        std::fs::read_to_string(e.root.join("var/lib/nodeward/kubelet-rollout.json")).expect("record");
    assert!(record.contains(&v2.hash), "{record}");
    sup.stop(true);
}

#[test]
fn the_last_healthy_spec_and_the_rollback_survive_a_restart() {
    let (e, port) = healthy_engine();
    let (good, bad) = (spec(port, "--v=1"), spec(port, "--bad-release"));
    let sup = e.start(rollback_tuning(1000));
    sup.want(&good);
    sup.wait_for("healthy", Duration::from_secs(10), |s| s.health == "healthy");
    sup.want(&bad);
    sup.wait_for("rollback", Duration::from_secs(20), |s| {
        s.rollbacks == 1 && s.state == KubeletState::Running
    });
    sup.stop(false);
    let tries = runs_with(&e, "--bad-release");
    // A new nodeward (a reboot, an upgrade) with the same configuration: the good one is adopted.
    let again = e.start(rollback_tuning(1000));
    again.want(&bad);
    let s = again.wait_for("adopted", Duration::from_secs(10), |s| {
        s.state == KubeletState::Running
    });
    assert_eq!(s.spec_hash.as_deref(), Some(good.hash.as_str()));
    assert!(s.adopted, "{s:?}");
    assert_eq!(s.rolled_back.map(|rb| rb.bad), Some(bad.hash.clone()));
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(runs_with(&e, "--bad-release"), tries);
    again.stop(true);
}

// --- FleetLock ---

struct LockServer {
    child: Child,
    url: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl LockServer {
    fn start(mode: &str, extra: &[&str]) -> LockServer {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("fleetlock.log");
        let nodes = dir.path().join("nodes");
        std::fs::write(&nodes, format!("node-a {MACHINE}\n")).expect("nodes");
        let mut child = std::process::Command::new(engine::fleetlock_server())
            .args(["--listen", "127.0.0.1:0", "--mode", mode, "--log"])
            .arg(&log)
            .arg("--nodes")
            .arg(&nodes)
            .args(extra)
            .stdout(Stdio::piped())
            .spawn()
            .expect("fleetlock server");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().expect("stdout")),
            &mut line,
        )
        .expect("address");
        LockServer {
            child,
            url: format!("http://{}", line.trim()),
            log,
            _dir: dir,
        }
    }

    fn settings(&self, client_id: ClientId) -> Command {
        let s = Settings {
            base_url: self.url.clone(),
            group: "default".into(),
            client_id,
            allow_http: true,
            timeout: Duration::from_secs(5),
            retry: Duration::from_millis(300),
            from: "test".into(),
        };
        let id = s.id(MACHINE).expect("id");
        Command::Fleet(Some(Box::new((s, id))))
    }

    fn lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| l.split_once(' ').map_or(l, |(_, rest)| rest).to_owned())
            .collect()
    }

    fn free(&self, id: &str) {
        std::fs::write(self.log.with_extension("release"), format!("{id}@default\n")).expect("release");
    }
}

impl Drop for LockServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_until(what: &str, limit: Duration, ok: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn has(lines: &[String], prefix: &str) -> bool {
    lines.iter().any(|l| l.starts_with(prefix))
}

#[test]
fn a_change_waits_for_a_free_slot_and_gives_it_back_once_healthy() {
    let (e, port) = healthy_engine();
    // Every slot is held by another node.
    let server = LockServer::start("strict", &["--slots", "1", "--hold", "other-node@default"]);
    let (v1, v2) = (spec(port, "--v=1"), spec(port, "--v=2"));
    let sup = e.start(rollback_tuning(5000));
    sup.send(server.settings(ClientId::Nodeward));
    sup.want(&v1);
    sup.wait_for("healthy", Duration::from_secs(10), |s| s.health == "healthy");
    assert!(
        server.lines().is_empty(),
        "a first start takes no slot: {:?}",
        server.lines()
    );
    sup.want(&v2);
    let s = sup.wait_for("waiting for a slot", Duration::from_secs(10), |s| {
        s.fleet_lock.as_ref().is_some_and(|f| {
            f.waiting
                .as_deref()
                .is_some_and(|w| w.contains("failed_lock_semaphore_full"))
        })
    });
    assert_eq!(s.spec_hash.as_deref(), Some(v1.hash.as_str()));
    // Refused attempts are retried, and the running kubelet is left alone meanwhile.
    wait_until("a few refused attempts", Duration::from_secs(10), || {
        server
            .lines()
            .iter()
            .filter(|l| l.starts_with(&format!("lock {OUR_ID} default 409")))
            .count()
            >= 3
    });
    assert_eq!(runs_with(&e, "--v=2"), 0);
    assert_eq!(e.runs().len(), 1);
    // The other node gives its slot back: the change goes through, then the slot comes back.
    server.free("other-node");
    sup.wait_for("replaced", Duration::from_secs(15), |s| {
        s.spec_hash.as_deref() == Some(v2.hash.as_str()) && s.health == "healthy"
    });
    wait_until("slot given back", Duration::from_secs(10), || {
        has(&server.lines(), &format!("unlock {OUR_ID} default 200 0"))
    });
    let s = sup.wait_for("no slot", Duration::from_secs(5), |s| {
        s.fleet_lock.as_ref().is_some_and(|f| !f.held)
    });
    assert!(s.fleet_lock.expect("fleet").waiting.is_none());
    assert!(!e.root.join("var/lib/nodeward/fleetlock.json").exists());
    // Never two holders at once in the log.
    assert!(
        server.lines().iter().all(|l| !l.ends_with(" 2")),
        "{:?}",
        server.lines()
    );
    sup.stop(true);
}

#[test]
fn with_a_free_slot_the_change_proceeds_at_once_and_an_unhealthy_kubelet_needs_none() {
    let (e, port) = healthy_engine();
    let server = LockServer::start("strict", &["--slots", "2"]);
    let (v1, v2, v3) = (spec(port, "--v=1"), spec(port, "--v=2"), spec(port, "--v=3"));
    let sup = e.start(rollback_tuning(5000));
    sup.send(server.settings(ClientId::Nodeward));
    sup.want(&v1);
    sup.wait_for("healthy", Duration::from_secs(10), |s| s.health == "healthy");
    sup.want(&v2);
    sup.wait_for("v2", Duration::from_secs(15), |s| {
        s.spec_hash.as_deref() == Some(v2.hash.as_str()) && s.health == "healthy"
    });
    let lines = server.lines();
    assert!(has(&lines, &format!("lock {OUR_ID} default 200 1")), "{lines:?}");
    wait_until("released", Duration::from_secs(10), || {
        has(&server.lines(), &format!("unlock {OUR_ID} default 200 0"))
    });
    // An unhealthy kubelet is replaced without asking (the lock server may be down with it).
    std::fs::write(e.state("unhealthy"), "").expect("knob");
    sup.wait_for("unhealthy", Duration::from_secs(10), |s| {
        s.health.starts_with("unhealthy") || s.health.starts_with("starting")
    });
    let asked = server.lines().len();
    sup.want(&v3);
    // The knob stays until v3 runs: lifted earlier, a probe could see the old kubelet healthy again
    // before the supervisor takes the change (seen on a loaded host), and then a slot is right.
    sup.wait_for("v3", Duration::from_secs(15), |s| {
        s.spec_hash.as_deref() == Some(v3.hash.as_str())
    });
    assert!(
        !server.lines()[asked..].iter().any(|l| l.starts_with("lock ")),
        "asked for a slot to replace an unhealthy kubelet: {:?}",
        server.lines()
    );
    let _ = std::fs::remove_file(e.state("unhealthy"));
    sup.stop(true);
}

#[test]
fn after_a_rollback_the_slot_is_kept_until_an_operator_releases_it() {
    let (e, port) = healthy_engine();
    let server = LockServer::start("strict", &["--slots", "1"]);
    let (good, bad) = (spec(port, "--v=1"), spec(port, "--bad-release"));
    let sup = e.start(rollback_tuning(1500));
    sup.send(server.settings(ClientId::Nodeward));
    sup.want(&good);
    sup.wait_for("healthy", Duration::from_secs(10), |s| s.health == "healthy");
    sup.want(&bad);
    let s = sup.wait_for("rolled back, halted", Duration::from_secs(20), |s| {
        s.rollbacks == 1 && s.health == "healthy" && s.fleet_lock.as_ref().is_some_and(|f| f.halted && f.held)
    });
    assert_eq!(s.spec_hash.as_deref(), Some(good.hash.as_str()));
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        !has(&server.lines(), "unlock "),
        "released after a rollback: {:?}",
        server.lines()
    );
    let record = std::fs::read_to_string(e.root.join("var/lib/nodeward/fleetlock.json")).expect("record");
    assert!(record.contains("\"halted\": true"), "{record}");
    // A restart keeps it: the record says halted.
    sup.stop(false);
    let again = e.start(rollback_tuning(1500));
    again.send(server.settings(ClientId::Nodeward));
    again.want(&bad);
    again.wait_for("held after restart", Duration::from_secs(10), |s| {
        s.health == "healthy" && s.fleet_lock.as_ref().is_some_and(|f| f.halted)
    });
    std::thread::sleep(Duration::from_secs(2));
    assert!(!has(&server.lines(), "unlock "), "{:?}", server.lines());
    // The operator lets the rollout go on.
    again.ask(Operator::Release).expect("release");
    assert!(has(&server.lines(), &format!("unlock {OUR_ID} default 200 0")));
    assert!(again.ask(Operator::Release).is_err(), "nothing held any more");
    assert!(!e.root.join("var/lib/nodeward/fleetlock.json").exists());
    again.stop(true);
}

#[test]
fn a_slot_recorded_before_a_restart_is_given_back_once_healthy_and_only_if_recorded() {
    let (e, port) = healthy_engine();
    // This node's id holds the slot (as if taken before a reboot), and the record says so.
    let server = LockServer::start(
        "strict",
        &["--slots", "1", "--hold", &format!("{OUR_ID}@default")],
    );
    let v1 = spec(port, "--v=1");
    std::fs::create_dir_all(e.root.join("var/lib/nodeward")).expect("mkdir");
    std::fs::write(
        e.root.join("var/lib/nodeward/fleetlock.json"),
        format!(r#"{{"base_url": "{}", "group": "default", "id": "{OUR_ID}", "since": 1, "for_spec": "{}", "halted": false}}"#, server.url, v1.hash),
    )
    .expect("record");
    let sup = e.start(rollback_tuning(5000));
    sup.send(server.settings(ClientId::Nodeward));
    sup.want(&v1);
    wait_until("released", Duration::from_secs(15), || {
        has(&server.lines(), &format!("unlock {OUR_ID} default 200 0"))
    });
    sup.stop(true);
    // Control: without a record, nothing is released (a slot Zincati holds under its id stays).
    let (e2, port2) = healthy_engine();
    let server2 = LockServer::start(
        "strict",
        &["--slots", "1", "--hold", &format!("{ZINCATI_ID}@default")],
    );
    let sup2 = e2.start(rollback_tuning(5000));
    sup2.send(server2.settings(ClientId::Zincati));
    sup2.want(&spec(port2, "--v=1"));
    sup2.wait_for("healthy", Duration::from_secs(10), |s| s.health == "healthy");
    std::thread::sleep(Duration::from_secs(2));
    assert!(server2.lines().is_empty(), "{:?}", server2.lines());
    sup2.stop(true);
}

#[test]
fn poseidon_fleetlock_drains_the_node_of_zincatis_id_and_refuses_an_id_of_its_own() {
    let (e, port) = healthy_engine();
    let server = LockServer::start("poseidon", &[]);
    let (v1, v2) = (spec(port, "--v=1"), spec(port, "--v=2"));
    // nodeward's own id matches no Kubernetes node: 500, the running kubelet is kept.
    let sup = e.start(rollback_tuning(5000));
    sup.send(server.settings(ClientId::Nodeward));
    sup.want(&v1);
    sup.wait_for("healthy", Duration::from_secs(10), |s| s.health == "healthy");
    sup.want(&v2);
    sup.wait_for("refused", Duration::from_secs(10), |s| {
        s.fleet_lock
            .as_ref()
            .and_then(|f| f.waiting.as_deref())
            .is_some_and(|w| w.contains("500"))
    });
    assert_eq!(sup.status().spec_hash.as_deref(), Some(v1.hash.as_str()));
    // Zincati's id: the node is drained, the kubelet replaced, the node uncordoned.
    sup.send(server.settings(ClientId::Zincati));
    sup.wait_for("replaced", Duration::from_secs(15), |s| {
        s.spec_hash.as_deref() == Some(v2.hash.as_str()) && s.health == "healthy"
    });
    wait_until("uncordoned", Duration::from_secs(10), || {
        has(&server.lines(), "uncordon node-a")
    });
    let lines = server.lines();
    let drain = lines.iter().position(|l| l == "drain node-a").expect("drained");
    let uncordon = lines
        .iter()
        .position(|l| l == "uncordon node-a")
        .expect("uncordoned");
    assert!(drain < uncordon, "{lines:?}");
    sup.stop(true);
}

/// The strict server itself follows the protocol (a check of the test's own stand-in).
#[test]
fn the_strict_server_enforces_the_protocol() {
    let server = LockServer::start("strict", &["--slots", "1"]);
    let post = |path: &str, header: bool, body: &str| -> u16 {
        let addr = server.url.trim_start_matches("http://");
        let mut s = std::net::TcpStream::connect(addr).expect("connect");
        let h = if header {
            "fleet-lock-protocol: true\r\n"
        } else {
            ""
        };
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\n{h}Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        std::io::Write::write_all(&mut s, req.as_bytes()).expect("write");
        let mut out = String::new();
        let _ = std::io::Read::read_to_string(&mut s, &mut out);
        out.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
    };
    let body = |id: &str, group: &str| format!(r#"{{"client_params":{{"id":"{id}","group":"{group}"}}}}"#);
    assert_eq!(
        post("/v1/pre-reboot", false, &body("a", "default")),
        400,
        "header required"
    );
    assert_eq!(post("/v1/pre-reboot", true, &body("a", "bad group")), 400);
    assert_eq!(post("/v1/pre-reboot", true, &body("a", "default")), 200);
    assert_eq!(
        post("/v1/pre-reboot", true, &body("a", "default")),
        200,
        "recursive"
    );
    assert_eq!(post("/v1/pre-reboot", true, &body("b", "default")), 409, "full");
    assert_eq!(
        post("/v1/steady-state", true, &body("b", "default")),
        200,
        "unlock if held"
    );
    assert_eq!(
        post("/v1/pre-reboot", true, &body("b", "default")),
        409,
        "b's release freed nothing"
    );
    assert_eq!(post("/v1/steady-state", true, &body("a", "default")), 200);
    assert_eq!(post("/v1/pre-reboot", true, &body("b", "default")), 200);
}

/// A halted rollout ends with the next configuration: a new spec is the operator's decision to go
/// on, so it runs on the slot the rollback kept, and the slot goes back once it is healthy, with
/// no `nodeward kubelet release` (a fleet of 100 waited on five halted nodes before).
#[test]
fn a_new_spec_ends_a_halt_and_gives_the_kept_slot_back_once_healthy() {
    let (e, port) = healthy_engine();
    let server = LockServer::start("strict", &["--slots", "1"]);
    let (good, bad, fixed) = (
        spec(port, "--v=1"),
        spec(port, "--bad-release"),
        spec(port, "--v=2"),
    );
    let sup = e.start(rollback_tuning(1500));
    sup.send(server.settings(ClientId::Nodeward));
    sup.want(&good);
    sup.wait_for("healthy", Duration::from_secs(10), |s| s.health == "healthy");
    sup.want(&bad);
    sup.wait_for("rolled back, halted", Duration::from_secs(20), |s| {
        s.rollbacks == 1 && s.health == "healthy" && s.fleet_lock.as_ref().is_some_and(|f| f.halted && f.held)
    });
    let locks = server.lines().iter().filter(|l| l.starts_with("lock ")).count();
    // Control: the configuration still wanting the bad spec keeps the halt.
    sup.want(&bad);
    std::thread::sleep(Duration::from_secs(2));
    assert!(!has(&server.lines(), "unlock "), "{:?}", server.lines());
    // The fix is pushed.
    sup.want(&fixed);
    sup.wait_for("the fix runs", Duration::from_secs(20), |s| {
        s.spec_hash.as_deref() == Some(fixed.hash.as_str()) && s.health == "healthy"
    });
    wait_until("the kept slot given back", Duration::from_secs(15), || {
        has(&server.lines(), &format!("unlock {OUR_ID} default 200 0"))
    });
    assert_eq!(
        server.lines().iter().filter(|l| l.starts_with("lock ")).count(),
        locks,
        "the kept slot served the fix: no new lock request"
    );
    sup.wait_for("nothing held", Duration::from_secs(5), |s| {
        s.fleet_lock.as_ref().is_some_and(|f| !f.held && !f.halted)
    });
    sup.stop(true);
}

/// The slot is given back where it was taken: a configuration that moves `base_url` (or turns
/// FleetLock off) after a slot was granted releases it at the server that granted it.
#[test]
fn a_slot_is_given_back_at_the_server_that_granted_it() {
    let (e, port) = healthy_engine();
    let old = LockServer::start("strict", &["--slots", "1"]);
    let new = LockServer::start("strict", &["--slots", "1"]);
    let (bad, v1) = (spec(port, "--bad-release"), spec(port, "--v=1"));
    let sup = e.start(rollback_tuning(1500));
    sup.send(old.settings(ClientId::Nodeward));
    sup.want(&v1);
    sup.wait_for("healthy", Duration::from_secs(10), |s| s.health == "healthy");
    // A slot taken at the old server, kept by a rollback.
    sup.want(&bad);
    sup.wait_for("halted", Duration::from_secs(20), |s| {
        s.fleet_lock.as_ref().is_some_and(|f| f.halted && f.held)
    });
    // The configuration moves to another server, then FleetLock is turned off.
    sup.send(new.settings(ClientId::Nodeward));
    sup.want(&bad);
    std::thread::sleep(Duration::from_secs(1));
    sup.send(Command::Fleet(None));
    wait_until("released at the old server", Duration::from_secs(15), || {
        has(&old.lines(), &format!("unlock {OUR_ID} default 200 0"))
    });
    assert!(
        !new.lines().iter().any(|l| l.starts_with("unlock ")),
        "released at the new server: {:?}",
        new.lines()
    );
    // The server answers before the supervisor reads the answer: the record goes right after.
    wait_until("the record removed", Duration::from_secs(15), || {
        !e.root.join("var/lib/nodeward/fleetlock.json").exists()
    });
    sup.stop(true);
}
