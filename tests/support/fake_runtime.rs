//! A stand-in container engine for the supervisor tests, built by the tests with `rustc` (std only).
//!
//! Invoked as `podman` or `docker` it answers the subset of their CLI nodeward uses (`run --detach`,
//! `container inspect`, `wait`, `stop -t`, `kill`, `rm -f`, `image exists|inspect`, `pull`); as
//! `rkt` it answers `run` (foreground, like rkt fly), `status`, `stop`, `rm` and `fetch`. Containers
//! are real processes: `run` starts a detached monitor (like conmon) that runs the "kubelet" and
//! records its exit status. State lives in `state/` next to the program; test knobs are files there:
//! `images`, `pullable` (lines), `pull_layers` and `pull_layer_ms` (what a pull prints, how slowly),
//! `image_size`, `registry` (`HOST:PORT`: pulls go there over HTTP), `pull_needs` (`IMAGE OPTION`
//! lines: a source that pulls only with podman's `--tls-verify=false` or `--cert-dir`), `healthz_port`,
//! `unhealthy`, `silent` (/healthz never answers), `crash`, `crash_args` and `crash_images` (lines), `ignore_term`,
//! `wait_delay_ms` (how late `wait` answers after the exit), `load_gate` (a path: `load` reads its
//! input, then waits for that path to exist before it stores anything: a slow import; each load's
//! end is appended to `loaded.log`), `inspect_gate` (a path: `image inspect` of an image waits for
//! it to exist before it answers: an engine slow to say what it holds), `rkt_prepare_ms` (rkt's
//! `status` of a pod that young answers as the real rkt does for a pod not yet started).

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

unsafe extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
    fn signal(sig: i32, handler: usize) -> usize;
}
const SIGTERM: i32 = 15;
const SIGKILL: i32 = 9;
const SIG_IGN: usize = 1;

fn state_dir(argv0: &str) -> PathBuf {
    Path::new(argv0).parent().unwrap_or(Path::new(".")).join("state")
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn now_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis())
}

fn lines(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The option a source pulls only with (`pull_needs`: `IMAGE OPTION` lines).
fn needs_option(state: &Path, image: &str) -> Option<String> {
    lines(&state.join("pull_needs")).iter().find_map(|l| {
        l.split_once(' ')
            .filter(|(i, _)| *i == image)
            .map(|(_, o)| o.to_owned())
    })
}

fn append(path: &Path, line: &str) {
    if let Ok(mut f) = fs::OpenOptions::new().create(true).append(true).open(path) {
        // One write: concurrent engine processes append to the same logs.
        let _ = f.write_all(format!("{line}\n").as_bytes());
    }
}

fn fail(msg: &str, code: u8) -> ExitCode {
    eprintln!("Error: {msg}");
    ExitCode::from(code)
}

struct Ctr {
    dir: PathBuf,
}

impl Ctr {
    fn read(&self, name: &str) -> String {
        fs::read_to_string(self.dir.join(name)).unwrap_or_default().trim().to_owned()
    }
    fn pid(&self) -> i32 {
        self.read("pid").parse().unwrap_or(0)
    }
    fn exited(&self) -> Option<i32> {
        self.read("exit").parse().ok()
    }
    fn running(&self) -> bool {
        self.exited().is_none()
    }
    fn wait_exit(&self, limit: Duration) -> Option<i32> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(code) = self.exited() {
                return Some(code);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A container by name or id.
fn find(state: &Path, key: &str) -> Option<Ctr> {
    let dir = state.join("c");
    let direct = dir.join(key);
    if direct.is_dir() {
        return Some(Ctr { dir: direct });
    }
    fs::read_dir(&dir).ok()?.flatten().find_map(|e| {
        let c = Ctr { dir: e.path() };
        (c.read("id") == key).then_some(c)
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let argv0 = args[0].clone();
    let state = state_dir(&argv0);
    let _ = fs::create_dir_all(state.join("c"));
    let prog = Path::new(&argv0)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let rest: Vec<&str> = args[1..].iter().map(String::as_str).collect();
    match rest.first().copied() {
        // `__monitor DIR [conmon's flags] -- ARGS`
        Some("__monitor") => {
            let args = &rest[2..];
            let end = args.iter().position(|a| *a == "--").unwrap_or(0);
            // The engine that started it runs the kubelet (a `conmon` link is not the engine).
            let engine = args[..end]
                .iter()
                .position(|a| *a == "--exit-command")
                .and_then(|i| args.get(i + 1))
                .map_or(argv0.as_str(), |p| p);
            return monitor(engine, rest[1], &args[(end + 1).min(args.len())..]);
        }
        Some("__kubelet") => return kubelet(&state, &rest[1..]),
        _ => {}
    }
    // An engine that inherits the agent's sd_notify socket would hand it on to the container.
    let notify = if std::env::var_os("NOTIFY_SOCKET").is_some() { " [NOTIFY_SOCKET]" } else { "" };
    // podman leaves conmon in the calling unit's cgroup when it sees INVOCATION_ID (libpod's
    // moveConmonToCgroupAndSignal): noted, as the notify socket is.
    let notify = if std::env::var_os("INVOCATION_ID").is_some() { format!("{notify} [INVOCATION_ID]") } else { notify.to_owned() };
    append(&state.join("calls.log"), &format!("{prog} {}{notify}", rest.join(" ")));
    if prog == "rkt" { rkt(&argv0, &state, &rest) } else { engine(&argv0, &state, &rest) }
}

fn engine(argv0: &str, state: &Path, args: &[&str]) -> ExitCode {
    match args {
        ["container", "inspect", key] => match find(state, key) {
            Some(c) => {
                let running = c.running();
                println!(
                    "[{{\"Id\":\"{}\",\"Image\":\"sha256:{:064x}\",\"ImageName\":\"{}\",\"State\":{{\"Running\":{running},\"ExitCode\":{},\"StartedAt\":\"{}\"}},\"Config\":{{\"Labels\":{{\"io.nodeward.spec-hash\":\"{}\"}}}}}}]",
                    c.read("id"),
                    c.read("image").len(),
                    c.read("image"),
                    c.exited().unwrap_or(0),
                    c.read("started"),
                    c.read("hash"),
                );
                ExitCode::SUCCESS
            }
            None => fail(&format!("no such container {key}"), 125),
        },
        ["image", "inspect", "--format", "{{.Size}}", image] => {
            if lines(&state.join("images")).iter().any(|i| i == image) {
                println!("{}", fs::read_to_string(state.join("image_size")).unwrap_or_else(|_| "1048576".into()).trim());
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        ["image", "exists" | "inspect", image] | ["image", "inspect", "--format", "{{.Id}}", image] => {
            if let Some(gate) = lines(&state.join("inspect_gate")).first() {
                let deadline = Instant::now() + Duration::from_secs(120);
                while !Path::new(gate).exists() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            if lines(&state.join("images")).iter().any(|i| i == image) {
                if args[1] == "inspect" {
                    println!("sha256:{:064x}", image.len());
                }
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        // podman's TLS options: a source listed in `pull_needs` (`IMAGE OPTION`) pulls only with
        // that option (a plain-http mirror refuses TLS; a private CA's mirror wants `--cert-dir`
        // naming a directory with its `ca.crt`).
        ["pull", options @ .., image] if !options.is_empty() || needs_option(state, image).is_some() => {
            let given = options.join(" ");
            let ok = match needs_option(state, image) {
                Some(need) if need == "--cert-dir" => {
                    options.len() == 2
                        && options[0] == "--cert-dir"
                        && Path::new(options[1]).join("ca.crt").is_file()
                }
                Some(need) => given == need,
                None => false,
            };
            if ok && lines(&state.join("pullable")).iter().any(|i| i == image) {
                append(&state.join("images"), image);
                ExitCode::SUCCESS
            } else {
                fail(&format!("pulling {image} with {given:?}: refused"), 125)
            }
        }
        ["pull", image] if state.join("registry").exists() => match pull_over_http(state, image) {
            Ok(()) => {
                append(&state.join("images"), image);
                ExitCode::SUCCESS
            }
            Err(e) => fail(&format!("pulling {image}: {e}"), 125),
        },
        ["pull", image] => {
            if lines(&state.join("pullable")).iter().any(|i| i == image) {
                print_pull(argv0, state);
                append(&state.join("images"), image);
                ExitCode::SUCCESS
            } else {
                fail(&format!("pulling {image}: registry unreachable"), 125)
            }
        }
        // `podman load` / `docker load` from standard input: the images an OCI layout names (by
        // containerd's name annotation), by name and by `repo@digest`, as podman resolves both.
        ["load"] => match load(state) {
            Ok(names) if !names.is_empty() => {
                println!("Loaded image: {}", names.join(", "));
                ExitCode::SUCCESS
            }
            Ok(_) => fail("no image in the archive", 125),
            Err(e) => fail(&format!("load: {e}"), 125),
        },
        ["run", rest @ ..] => run(argv0, state, rest),
        // podman's start of an exited container: the same one runs again, its pid file rewritten.
        // Like podman, it first syncs with the container's monitor (conmon has recorded an exit by
        // the time podman gets there); one still running is left alone, and that is a success.
        ["start", key] => match find(state, key) {
            Some(c) if c.wait_exit(Duration::from_secs(1)).is_none() => {
                println!("{key}");
                ExitCode::SUCCESS
            }
            Some(_) if state.join("start_fails").exists() => fail("OCI runtime error: start failed", 125),
            Some(c) => {
                let _ = fs::remove_file(c.dir.join("exit"));
                let _ = fs::remove_file(c.dir.join("pid"));
                let args = lines(&c.dir.join("args"));
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                match launch(argv0, state, &c, &args) {
                    Ok(()) => {
                        println!("{key}");
                        ExitCode::SUCCESS
                    }
                    Err(e) => e,
                }
            }
            None => fail(&format!("no such container {key}"), 125),
        },
        // The died events of one container since a time: its exit codes, oldest first.
        ["events", "--stream=false", "--since", since, "--filter", container, "--filter", "event=died", "--format", "{{.ContainerExitCode}}"] => {
            let since: u64 = since.parse().unwrap_or(0);
            let id = container.strip_prefix("container=").unwrap_or_default();
            for line in lines(&state.join("died.log")) {
                let f: Vec<&str> = line.split(' ').collect();
                if let [at, who, code] = f[..] {
                    if who == id && at.parse().unwrap_or(0) >= since {
                        println!("{code}");
                    }
                }
            }
            ExitCode::SUCCESS
        }
        ["wait", key] => match find(state, key) {
            Some(c) => {
                let id = c.read("id");
                let code = loop {
                    // Removed meanwhile (a `run --replace` right after the exit; a new container
                    // may hold the name already): like podman, still report the code it exited
                    // with.
                    if c.read("id") == id {
                        if let Some(code) = c.exited() {
                            break code;
                        }
                    } else {
                        match fs::read_to_string(state.join("removed").join(&id)) {
                            Ok(code) => break code.trim().parse().unwrap_or(-1),
                            Err(_) => return fail(&format!("no such container {id}"), 125),
                        }
                    }
                    std::thread::sleep(Duration::from_millis(20));
                };
                // Like podman's, which answers only after its cleanup has run.
                if let Ok(ms) = fs::read_to_string(state.join("wait_delay_ms")) {
                    std::thread::sleep(Duration::from_millis(ms.trim().parse().unwrap_or(0)));
                }
                println!("{code}");
                ExitCode::SUCCESS
            }
            None => fail(&format!("no such container {key}"), 125),
        },
        ["stop", "-t", secs, key] => match find(state, key) {
            Some(c) => {
                let secs: u64 = secs.parse().unwrap_or(10);
                if c.running() {
                    unsafe { kill(c.pid(), SIGTERM) };
                    append(&state.join("stops.log"), &format!("term {}", c.read("id")));
                    if c.wait_exit(Duration::from_secs(secs)).is_none() {
                        unsafe { kill(c.pid(), SIGKILL) };
                        append(&state.join("stops.log"), &format!("kill {}", c.read("id")));
                        c.wait_exit(Duration::from_secs(10));
                    }
                }
                println!("{}", c.read("id"));
                ExitCode::SUCCESS
            }
            None => fail(&format!("no such container {key}"), 125),
        },
        ["kill", key] => match find(state, key) {
            Some(c) => {
                unsafe { kill(c.pid(), SIGKILL) };
                c.wait_exit(Duration::from_secs(10));
                ExitCode::SUCCESS
            }
            None => fail(&format!("no such container {key}"), 125),
        },
        ["rm", "-f", key] => match find(state, key) {
            Some(c) => {
                if c.running() {
                    unsafe { kill(c.pid(), SIGKILL) };
                    c.wait_exit(Duration::from_secs(10));
                }
                let _ = fs::remove_dir_all(&c.dir);
                ExitCode::SUCCESS
            }
            None => fail(&format!("no such container {key}"), 1),
        },
        _ => fail(&format!("unsupported: {}", args.join(" ")), 125),
    }
}

/// `run --detach --name N … IMAGE ARGS…`
fn run(argv0: &str, state: &Path, args: &[&str]) -> ExitCode {
    let mut name = String::new();
    let mut hash = String::new();
    let mut replace = false;
    let mut pid_file = None;
    let mut i = 0;
    while i < args.len() && args[i].starts_with("--") {
        match args[i] {
            "--detach" | "--privileged" | "--pull=never" => i += 1,
            "--replace" => {
                replace = true;
                i += 1;
            }
            "--name" => {
                name = args[i + 1].to_owned();
                i += 2;
            }
            "--label" => {
                if let Some(h) = args[i + 1].strip_prefix("io.nodeward.spec-hash=") {
                    hash = h.to_owned();
                }
                i += 2;
            }
            "--pidfile" => {
                pid_file = Some(args[i + 1].to_owned());
                i += 2;
            }
            "--log-driver" | "--log-opt" | "--pid" | "--network" | "--volume" => i += 2,
            other => return fail(&format!("unknown flag {other}"), 125),
        }
    }
    let Some(image) = args.get(i) else { return fail("no image", 125) };
    if !lines(&state.join("images")).iter().any(|l| l == image) {
        return fail(&format!("image {image} not present"), 125);
    }
    match find(state, &name) {
        // podman's --replace: the container holding the name is removed (killed if it runs).
        Some(c) if replace => {
            if c.running() {
                unsafe { kill(c.pid(), SIGKILL) };
                c.wait_exit(Duration::from_secs(10));
            }
            append(&state.join("replaced.log"), &c.read("id"));
            let _ = fs::create_dir_all(state.join("removed"));
            let _ = fs::write(state.join("removed").join(c.read("id")), c.read("exit"));
            let _ = fs::remove_dir_all(&c.dir);
        }
        Some(_) => return fail(&format!("the container name \"{name}\" is already in use"), 125),
        None => {}
    }
    let id = format!("{:016x}{:08x}", now(), std::process::id());
    let dir = state.join("c").join(&name);
    let _ = fs::create_dir_all(&dir);
    let _ = fs::write(dir.join("id"), &id);
    let _ = fs::write(dir.join("image"), image);
    let _ = fs::write(dir.join("hash"), &hash);
    let _ = fs::write(dir.join("started"), now().to_string());
    let _ = fs::write(dir.join("args"), args[i + 1..].join("\n"));
    if let Some(path) = pid_file {
        let _ = fs::write(dir.join("pidfile"), path);
    }
    if let Err(e) = launch(argv0, state, &Ctr { dir }, &args[i + 1..]) {
        return e;
    }
    println!("{id}");
    ExitCode::SUCCESS
}

/// Starts the container's process under a monitor, logs the start (with how many other containers
/// were running) and, like podman, returns once the process exists and its pid file is written.
fn launch(argv0: &str, state: &Path, ctr: &Ctr, args: &[&str]) -> Result<(), ExitCode> {
    // Containers running besides the one being started (the tests assert it is never more than 0).
    let running = fs::read_dir(state.join("c"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.path() != ctr.dir && Ctr { dir: e.path() }.running())
                .count()
        })
        .unwrap_or(0);
    append(
        &state.join("runs.log"),
        &format!("{} {} running={running} {}", now_ms(), ctr.read("id"), args.join(" ")),
    );
    // As podman's: the monitor is a `conmon` (its command name) told the container's id and name
    // and its podman (the exit command), which nodeward reads to know what runs without asking.
    let (monitor, flags) = if argv0.ends_with("podman") {
        let conmon = Path::new(argv0).with_file_name("conmon");
        let program = Path::new(argv0).file_name().map(PathBuf::from).unwrap_or_default();
        // (Made once per stand-in; a race with another start finds it made.)
        let _ = std::os::unix::fs::symlink(program, &conmon);
        let name = ctr.dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        (conmon, vec!["-c".to_owned(), ctr.read("id"), "-n".to_owned(), name, "--exit-command".to_owned(), argv0.to_owned()])
    } else {
        (PathBuf::from(argv0), Vec::new())
    };
    let spawned = Command::new(monitor)
        .arg("__monitor")
        .arg(&ctr.dir)
        .args(flags)
        .arg("--")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn();
    if let Err(e) = spawned {
        return Err(fail(&format!("monitor: {e}"), 125));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while ctr.pid() == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let pid_file = ctr.read("pidfile");
    if !pid_file.is_empty() {
        let _ = fs::write(pid_file, ctr.pid().to_string());
    }
    Ok(())
}

/// conmon's job: run the kubelet, record its pid and its exit status.
fn monitor(engine: &str, dir: &str, args: &[&str]) -> ExitCode {
    let dir = PathBuf::from(dir);
    let me = engine;
    let image = fs::read_to_string(dir.join("image")).unwrap_or_default();
    let child = Command::new(&me)
        .env("FAKE_KUBELET_IMAGE", image.trim())
        .arg("__kubelet")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let Ok(mut child) = child else {
        let _ = fs::write(dir.join("exit"), "127");
        return ExitCode::from(1);
    };
    // Written whole (renamed into place): a reader never sees part of the number.
    let _ = fs::write(dir.join("pid.tmp"), child.id().to_string());
    let _ = fs::rename(dir.join("pid.tmp"), dir.join("pid"));
    let code = match child.wait() {
        Ok(s) => s.code().unwrap_or_else(|| {
            use std::os::unix::process::ExitStatusExt;
            128 + s.signal().unwrap_or(0)
        }),
        Err(_) => -1,
    };
    let _ = fs::write(dir.join("exit"), code.to_string());
    let id = fs::read_to_string(dir.join("id")).unwrap_or_default();
    if let Some(state) = dir.parent().and_then(Path::parent) {
        append(&state.join("died.log"), &format!("{} {} {code}", now(), id.trim()));
    }
    ExitCode::SUCCESS
}

/// Prints a pull's progress as the engine does without a terminal (podman: containers/image's
/// line mode; docker: a line per layer event), `pull_layers` layers (default 0) each taking
/// `pull_layer_ms`. stdout and stderr both, as the engines split them.
fn print_pull(argv0: &str, state: &Path) {
    let number = |knob: &str| {
        fs::read_to_string(state.join(knob)).ok().and_then(|t| t.trim().parse::<u64>().ok()).unwrap_or(0)
    };
    let (layers, pause) = (number("pull_layers"), Duration::from_millis(number("pull_layer_ms")));
    let digest = |i: u64| format!("{:012x}{:052x}", 0xa11c_e000_0000_u64 + i, 0);
    let docker = argv0.ends_with("docker");
    let say = |line: String| {
        let mut err = std::io::stderr();
        let _ = writeln!(err, "{line}");
        let _ = err.flush();
    };
    if docker {
        println!("latest: Pulling from kubelet");
        for i in 0..layers {
            println!("{}: Pulling fs layer", &digest(i)[..12]);
        }
    } else {
        say("Trying to pull the image...".into());
        say("Getting image source signatures".into());
    }
    let _ = std::io::stdout().flush();
    for i in 0..layers {
        if !docker {
            say(format!("Copying blob sha256:{}", digest(i)));
        }
        std::thread::sleep(pause);
        if docker {
            println!("{}: Pull complete", &digest(i)[..12]);
            let _ = std::io::stdout().flush();
        } else {
            say(format!("Copying blob sha256:{} done   | ", digest(i)));
        }
    }
    if !docker {
        say("Writing manifest to image destination".into());
    }
}

/// A pull from the registry stand-in named by the `registry` knob (`HOST:PORT`): `GET
/// /pull/IMAGE`, a success only on 200.
/// Reads a tar stream from stdin, finds `index.json`, and records each manifest's name and
/// `repo@digest` as held.
fn load(state: &Path) -> Result<Vec<String>, String> {
    let mut tar = Vec::new();
    std::io::stdin().read_to_end(&mut tar).map_err(|e| e.to_string())?;
    append(&state.join("loads.log"), &format!("{} {}", now_ms(), tar.len()));
    let mut at = 0;
    let mut index = None;
    while at + 512 <= tar.len() && tar[at] != 0 {
        let header = &tar[at..at + 512];
        let name = String::from_utf8_lossy(&header[..100]).trim_end_matches('\0').to_string();
        let size = usize::from_str_radix(String::from_utf8_lossy(&header[124..136]).trim_matches(|c| c == '\0' || c == ' '), 8)
            .map_err(|e| e.to_string())?;
        let body = tar.get(at + 512..at + 512 + size).ok_or("short archive")?;
        if name.trim_start_matches("./") == "index.json" {
            index = Some(String::from_utf8_lossy(body).into_owned());
        }
        at += 512 + size.div_ceil(512) * 512;
    }
    let index = index.ok_or("no index.json")?;
    if let Some(gate) = lines(&state.join("load_gate")).first() {
        let deadline = Instant::now() + Duration::from_secs(120);
        while !Path::new(gate).exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let mut names = Vec::new();
    for desc in index.split("\"digest\":\"").skip(1) {
        let digest = desc.split('"').next().unwrap_or("");
        let Some(name) = desc.split("\"io.containerd.image.name\":\"").nth(1).and_then(|r| r.split('"').next()) else {
            continue;
        };
        let repo = name.rsplit_once(':').filter(|(_, tag)| !tag.contains('/')).map_or(name, |(r, _)| r);
        append(&state.join("images"), name);
        append(&state.join("images"), &format!("{repo}@{digest}"));
        names.push(name.to_owned());
    }
    append(&state.join("loaded.log"), &format!("{} {}", now_ms(), names.join(" ")));
    Ok(names)
}

fn pull_over_http(state: &Path, image: &str) -> Result<(), String> {
    let addr = fs::read_to_string(state.join("registry")).map_err(|e| e.to_string())?;
    let addr: std::net::SocketAddr = addr.trim().parse().map_err(|e| format!("registry {addr:?}: {e}"))?;
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(|e| e.to_string())?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    s.write_all(format!("GET /pull/{image} HTTP/1.0\r\nHost: registry\r\n\r\n").as_bytes())
        .map_err(|e| e.to_string())?;
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    match answer.split(' ').nth(1) {
        Some("200") => Ok(()),
        Some(code) => Err(format!("registry answered {code}")),
        None => Err("no answer from the registry".into()),
    }
}

/// The stand-in kubelet: records its argv, serves /healthz, and exits as the knobs say.
fn kubelet(state: &Path, args: &[&str]) -> ExitCode {
    append(&state.join("argv.log"), &args.join(" "));
    let image = std::env::var("FAKE_KUBELET_IMAGE").unwrap_or_default();
    append(&state.join("images.log"), &format!("{} {image}", now_ms()));
    // A bad release: its image is listed in `crash_images`.
    if lines(&state.join("crash_images")).iter().any(|i| *i == image) {
        return ExitCode::from(1);
    }
    if state.join("crash").exists() {
        return ExitCode::from(1);
    }
    // A bad release: any argument containing a line of `crash_args` exits at once.
    let bad = lines(&state.join("crash_args"));
    if args.iter().any(|a| bad.iter().any(|b| !b.is_empty() && a.contains(b.as_str()))) {
        return ExitCode::from(1);
    }
    if state.join("ignore_term").exists() {
        unsafe { signal(SIGTERM, SIG_IGN) };
    }
    if let Ok(port) = fs::read_to_string(state.join("healthz_port")) {
        if let Ok(listener) = std::net::TcpListener::bind(("127.0.0.1", port.trim().parse().unwrap_or(0))) {
            // `silent`: each request read and held, never answered (a kubelet too slow to answer).
            let mut held = Vec::new();
            for stream in listener.incoming().flatten() {
                let mut stream = stream;
                let mut buf = [0u8; 512];
                let _ = stream.read(&mut buf);
                if state.join("silent").exists() {
                    held.push(stream);
                    continue;
                }
                let answer = if state.join("unhealthy").exists() {
                    "HTTP/1.0 500 Internal Server Error\r\n\r\nunhealthy"
                } else {
                    "HTTP/1.0 200 OK\r\n\r\nok"
                };
                let _ = stream.write_all(answer.as_bytes());
            }
        }
    }
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// Whether the pod is within its `rkt_prepare_ms` (a knob) of its start.
fn preparing(state: &Path, c: &Ctr) -> bool {
    let Ok(ms) = fs::read_to_string(state.join("rkt_prepare_ms")) else { return false };
    let (Ok(window), Ok(started)) = (ms.trim().parse::<u128>(), c.read("started_ms").trim().parse::<u128>()) else {
        return false;
    };
    now_ms() < started + window
}

/// rkt's own words and codes (v1.30.0 with the fly stage1, measured by `integration/rkt-parity`):
/// every failure exits 254 with `SUBCOMMAND: …` lines on stderr.
fn rkt_fail(lines: &[String]) -> ExitCode {
    for l in lines {
        eprintln!("{l}");
    }
    ExitCode::from(254)
}

fn rkt(argv0: &str, state: &Path, args: &[&str]) -> ExitCode {
    // The pod a `--uuid-file=` names: its uuid, and the pod when rkt still knows it.
    let named = |cmd: &str, args: &[&str]| -> Result<(String, Option<Ctr>), ExitCode> {
        let Some(file) = args.iter().find_map(|a| a.strip_prefix("--uuid-file=")) else {
            return Err(rkt_fail(&[format!("{cmd}: no pods specified")]));
        };
        let Ok(uuid) = fs::read_to_string(file) else {
            return Err(rkt_fail(&[format!(
                "{cmd}: unable to resolve UUID from file: no such file or directory"
            )]));
        };
        let uuid = uuid.trim().to_owned();
        let pod = find(state, &format!("rkt-{uuid}"));
        Ok((uuid, pod))
    };
    match args {
        ["run", rest @ ..] => {
            let Some(save) = rest.iter().find_map(|a| a.strip_prefix("--uuid-file-save=")) else {
                return fail("no --uuid-file-save", 1);
            };
            let Some(sep) = rest.iter().position(|a| *a == "--") else { return fail("no --", 1) };
            let Some(image) = rest[sep - 1].strip_prefix("docker://") else {
                return fail("image must be docker://", 1);
            };
            let uuid = format!("{:08x}-{:04x}", now() as u32, std::process::id() & 0xffff);
            let dir = state.join("c").join(format!("rkt-{uuid}"));
            let _ = fs::create_dir_all(&dir);
            let _ = fs::write(dir.join("id"), &uuid);
            let _ = fs::write(dir.join("image"), image);
            let _ = fs::write(dir.join("started"), now().to_string());
            let _ = fs::write(dir.join("started_ms"), now_ms().to_string());
            append(&state.join("runs.log"), &format!("{} {uuid} running=0 {}", now_ms(), rest[sep + 1..].join(" ")));
            let _ = fs::write(save, &uuid);
            // rkt fly: the pod is this process, and it exits with the app's code (as the real
            // rkt v1.30.0's `run` does).
            monitor(argv0, &dir.display().to_string(), &rest[sep + 1..]);
            let code = find(state, &format!("rkt-{uuid}")).and_then(|c| c.exited()).unwrap_or(1);
            ExitCode::from(u8::try_from(code).unwrap_or(1))
        }
        ["status", "--format=json", uuid] => match find(state, &format!("rkt-{uuid}")) {
            // The real rkt v1.30.0 on a pod whose uuid file is saved but whose stage1 has not
            // started yet (seen in the VM right after `run`).
            Some(c) if preparing(state, &c) => {
                rkt_fail(&["status: unable to print status: error converting pod: invalid creation time".to_owned()])
            }
            Some(c) => {
                // As the real rkt v1.30.0 prints a fly pod: no exit code (fly records none) and
                // no image name (the app names its image by id only).
                let st = if c.running() { "running" } else { "exited" };
                println!(
                    "{{\"name\":\"{uuid}\",\"state\":\"{st}\",\"app_names\":[\"kubelet\"],\"apps\":[{{\"name\":\"kubelet\",\"state\":\"{st}\",\"image_id\":\"sha512-fake\"}}],\"created_at\":{0},\"started_at\":{0}}}",
                    c.read("started"),
                );
                ExitCode::SUCCESS
            }
            None => rkt_fail(&[format!("status: problem retrieving pod: no matches found for \"{uuid}\"")]),
        },
        ["stop", rest @ ..] => match named("stop", rest) {
            Err(code) => code,
            Ok((uuid, None)) => rkt_fail(&[
                format!("stop: cannot get pod: no matches found for \"{uuid}\""),
                "stop: failed to stop 1 pod(s)".into(),
            ]),
            Ok((uuid, Some(c))) => {
                if !c.running() {
                    eprintln!("pod \"{uuid}\" is already stopped");
                    return ExitCode::SUCCESS;
                }
                let force = rest.contains(&"--force");
                unsafe { kill(c.pid(), if force { SIGKILL } else { SIGTERM }) };
                append(&state.join("stops.log"), &format!("{} {}", if force { "kill" } else { "term" }, c.read("id")));
                println!("\"{uuid}\"");
                ExitCode::SUCCESS
            }
        },
        ["rm", rest @ ..] => match named("rm", rest) {
            Err(code) => code,
            Ok((uuid, None)) => rkt_fail(&[
                format!("rm: cannot get pod: no matches found for \"{uuid}\""),
                "rm: failed to remove one or more pods".into(),
            ]),
            Ok((uuid, Some(c))) => {
                if c.running() {
                    return rkt_fail(&[
                        format!("rm: pod \"{uuid}\" is currently running"),
                        "rm: failed to remove one or more pods".into(),
                    ]);
                }
                let _ = fs::remove_dir_all(&c.dir);
                println!("\"{uuid}\"");
                ExitCode::SUCCESS
            }
        },
        // `--pull-policy=new`: the store's copy when there is one, as nodeward asks.
        ["fetch", "--pull-policy=new", insecure, reference] if insecure.starts_with("--insecure-options=") => {
            let image = reference.trim_start_matches("docker://");
            if lines(&state.join("pullable")).iter().any(|i| i == image)
                || lines(&state.join("images")).iter().any(|i| i == image)
            {
                println!("sha512-fake");
                ExitCode::SUCCESS
            } else {
                rkt_fail(&[format!("fetch: unable to fetch image from image name {image}")])
            }
        }
        _ => {
            let _ = argv0;
            fail(&format!("unsupported: {}", args.join(" ")), 1)
        }
    }
}
