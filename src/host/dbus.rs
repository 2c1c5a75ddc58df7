//! The system bus: asking NetworkManager or systemd-networkd to reload their configuration, or
//! systemd to restart a unit.
//!
//! Every exchange is bounded ([`timeout`]): a bus, or a service on it, that accepts a connection
//! and never answers must not hold a converge past the watchdog, nor SIGTERM past a second.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How long one D-Bus exchange may take (`NODEWARD_DBUS_TIMEOUT_MS` overrides it, for tests).
pub(crate) fn timeout() -> Duration {
    std::env::var("NODEWARD_DBUS_TIMEOUT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(Duration::from_secs(25), Duration::from_millis)
}

/// One exchange at a time may be stuck: while one has not returned, the next fails at once
/// instead of leaving another thread behind.
static STUCK: AtomicBool = AtomicBool::new(false);

/// Runs `work` (which talks to the bus) on its own thread and waits at most `limit` for it.
fn bounded<T: Send + 'static>(
    what: &'static str,
    limit: Duration,
    work: impl FnOnce() -> Result<T, zbus::Error> + Send + 'static,
) -> Result<T, zbus::Error> {
    if STUCK.load(Ordering::SeqCst) {
        return Err(zbus::Error::Failure(format!(
            "{what}: an earlier D-Bus call has not returned yet"
        )));
    }
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let spawned = std::thread::Builder::new().name("dbus".into()).spawn(move || {
        let _ = tx.send(work());
    });
    if let Err(e) = spawned {
        return Err(zbus::Error::Failure(format!(
            "{what}: cannot start a thread: {e}"
        )));
    }
    match rx.recv_timeout(limit) {
        Ok(result) => result,
        Err(_) => {
            STUCK.store(true, Ordering::SeqCst);
            let _ = std::thread::Builder::new().spawn(move || {
                let _ = rx.recv();
                STUCK.store(false, Ordering::SeqCst);
            });
            Err(zbus::Error::Failure(format!(
                "{what}: no answer on the system bus within {limit:?}"
            )))
        }
    }
}

/// Runs one bus conversation until it ends or `limit` passes, whichever comes first. The thread
/// [`bounded`] runs it on therefore always ends: a bus that accepts the connection and never
/// answers (not even the handshake, which no method timeout covers) holds it no longer than the
/// limit, and the next call is asked again rather than refused for the rest of the process.
fn within<T>(limit: Duration, conversation: impl std::future::Future<Output = T>) -> Result<T, zbus::Error> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .enable_io()
        .build()
        .map_err(|e| zbus::Error::Failure(format!("cannot start a timer: {e}")))?;
    rt.block_on(async { tokio::time::timeout(limit, conversation).await })
        .map_err(|_| zbus::Error::Failure(format!("no answer on the system bus within {limit:?}")))
}

/// A system bus connection whose method calls time out.
async fn system(limit: Duration) -> Result<zbus::Connection, zbus::Error> {
    zbus::connection::Builder::system()
        .method_timeout(limit)
        .build()
        .await
}

/// What a reload request came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reloaded {
    /// NetworkManager's `Reload(0)` succeeded.
    Reload,
    /// `Reload` failed (`reason`); systemd restarted `NetworkManager.service` instead.
    Restarted { reason: String },
    /// NetworkManager is not running (or there is no system bus): it reads the file at start.
    NotRunning,
}

/// Why neither a reload nor a restart worked.
#[derive(Debug, thiserror::Error)]
#[error("NetworkManager reload failed ({reload}) and restarting it through systemd failed too ({restart})")]
pub(crate) struct ReloadError {
    pub(crate) reload: String,
    pub(crate) restart: String,
}

const NM: &str = "org.freedesktop.NetworkManager";
const NM_PATH: &str = "/org/freedesktop/NetworkManager";

/// Reloads NetworkManager's configuration over the system bus (`$DBUS_SYSTEM_BUS_ADDRESS` or the
/// standard socket), falling back to a restart of its unit through systemd.
pub(crate) fn reload_network_manager() -> Result<Reloaded, ReloadError> {
    let limit = timeout();
    bounded("NetworkManager reload", limit, move || {
        within(limit * 3, reload_network_manager_on_bus(limit))
    })
    .unwrap_or_else(|e| {
        Err(ReloadError {
            reload: e.to_string(),
            restart: "not tried".into(),
        })
    })
}

async fn reload_network_manager_on_bus(limit: Duration) -> Result<Reloaded, ReloadError> {
    {
        let conn = match system(limit).await {
            Ok(c) => c,
            Err(e) if no_bus(&e) => {
                tracing::info!(error = %e, "no system bus: NetworkManager cannot be running");
                return Ok(Reloaded::NotRunning);
            }
            // A bus that took the connection and dropped it (a broker restarting), or broke the
            // handshake: the reload is still owed.
            Err(e) => {
                return Err(ReloadError {
                    reload: format!("system bus: {e}"),
                    restart: "not tried".into(),
                });
            }
        };
        let reload = conn
            .call_method(Some(NM), NM_PATH, Some(NM), "Reload", &(0u32,))
            .await;
        let reason = match reload {
            Ok(_) => return Ok(Reloaded::Reload),
            Err(e) if not_running(&e) => return Ok(Reloaded::NotRunning),
            Err(e) => e.to_string(),
        };
        let restart = conn
            .call_method(
                Some("org.freedesktop.systemd1"),
                "/org/freedesktop/systemd1",
                Some("org.freedesktop.systemd1.Manager"),
                "RestartUnit",
                &("NetworkManager.service", "replace"),
            )
            .await;
        match restart {
            Ok(_) => Ok(Reloaded::Restarted { reason }),
            Err(e) => Err(ReloadError {
                reload: reason,
                restart: e.to_string(),
            }),
        }
    }
}

const NETWORKD: &str = "org.freedesktop.network1";

/// Asks systemd-networkd to reload its `.network` files and reconfigure the links they match
/// (`networkctl reload`), only when it runs: its bus name is D-Bus-activatable, and a reload must
/// not start a networkd the host does not use.
pub(crate) fn reload_networkd() -> Result<Reloaded, zbus::Error> {
    let limit = timeout();
    bounded("systemd-networkd reload", limit, move || {
        within(limit * 3, reload_networkd_on_bus(limit))?
    })
}

async fn reload_networkd_on_bus(limit: Duration) -> Result<Reloaded, zbus::Error> {
    let conn = match system(limit).await {
        Ok(c) => c,
        Err(e) if no_bus(&e) => return Ok(Reloaded::NotRunning),
        Err(e) => return Err(e),
    };
    let owned: bool = conn
        .call_method(
            Some("org.freedesktop.DBus"),
            "/org/freedesktop/DBus",
            Some("org.freedesktop.DBus"),
            "NameHasOwner",
            &(NETWORKD,),
        )
        .await?
        .body()
        .deserialize()?;
    if !owned {
        return Ok(Reloaded::NotRunning);
    }
    conn.call_method(
        Some(NETWORKD),
        "/org/freedesktop/network1",
        Some("org.freedesktop.network1.Manager"),
        "Reload",
        &(),
    )
    .await?;
    Ok(Reloaded::Reload)
}

/// Asks systemd to reload a unit, or restart it if it cannot reload, only when it is running
/// (`ReloadOrTryRestartUnit`). No system bus means no running unit to tell: nothing to do.
pub(crate) fn reload_or_try_restart(unit: &str) -> Result<(), zbus::Error> {
    let limit = timeout();
    let unit = unit.to_owned();
    bounded("reload a unit", limit, move || {
        within(limit * 3, reload_or_try_restart_on_bus(unit, limit))?
    })
}

async fn reload_or_try_restart_on_bus(unit: String, limit: Duration) -> Result<(), zbus::Error> {
    {
        let unit = unit.as_str();
        let conn = match system(limit).await {
            Ok(c) => c,
            Err(e) if no_bus(&e) => {
                tracing::info!(error = %e, unit, "no system bus: the unit reads its drop-in when it starts");
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        conn.call_method(
            Some("org.freedesktop.systemd1"),
            "/org/freedesktop/systemd1",
            Some("org.freedesktop.systemd1.Manager"),
            "ReloadOrTryRestartUnit",
            &(unit, "replace"),
        )
        .await
        .map(|_| ())
    }
}

/// Moves process `pid` (a child of this process) into a transient scope unit of its own, `unit`
/// (`….scope`), under `system.slice`: out of this service's cgroup, so neither `KillMode=mixed` at
/// our stop nor a restart of our unit kills it (podman's conmon gets the same from podman). The
/// scope is collected when its last process exits.
pub(crate) fn move_to_scope(unit: &str, pid: u32, description: &str) -> Result<(), zbus::Error> {
    let limit = timeout();
    let (unit, description) = (unit.to_owned(), description.to_owned());
    bounded("start a scope", limit, move || {
        within(limit * 3, start_scope_on_bus(unit, pid, description, limit))?
    })
}

async fn start_scope_on_bus(
    unit: String,
    pid: u32,
    description: String,
    limit: Duration,
) -> Result<(), zbus::Error> {
    use zbus::Variant as Value;
    let conn = system(limit).await?;
    let properties: Vec<(&str, Value<'_>)> = vec![
        ("PIDs", Value::from(vec![pid])),
        ("Description", Value::from(description.as_str())),
        ("Slice", Value::from("system.slice")),
        ("CollectMode", Value::from("inactive-or-failed")),
    ];
    let aux: Vec<(&str, Vec<(&str, Value<'_>)>)> = Vec::new();
    conn.call_method(
        Some("org.freedesktop.systemd1"),
        "/org/freedesktop/systemd1",
        Some("org.freedesktop.systemd1.Manager"),
        "StartTransientUnit",
        &(unit.as_str(), "fail", properties, aux),
    )
    .await
    .map(|_| ())
}

/// Whether this process runs as (in the cgroup of) a systemd service.
pub(crate) fn in_a_service() -> bool {
    own_unit().is_some()
}

/// There is no system bus at all: no socket, or nobody listening on it. Then no service on it can
/// be running, and it reads its files when it starts. Any other failure to connect (the
/// connection accepted and dropped, a broken handshake) is a bus that is there but not answering.
fn no_bus(e: &zbus::Error) -> bool {
    let refused = |io: &std::io::Error| {
        matches!(
            io.kind(),
            std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
        )
    };
    match e {
        zbus::Error::Connection(io, _) => refused(io),
        zbus::Error::InputOutput(io) => refused(io),
        _ => false,
    }
}

/// The bus says nobody owns NetworkManager's name.
fn not_running(e: &zbus::Error) -> bool {
    let text = e.to_string();
    text.contains("org.freedesktop.DBus.Error.ServiceUnknown")
        || text.contains("org.freedesktop.DBus.Error.NameHasNoOwner")
}

/// What systemd is doing with the unit this process is the main process of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OwnJob {
    /// Not started as a service's main process (by hand, a test, a container's entry point).
    NotAService,
    /// The job systemd runs on our unit ("stop", "restart", "start"…; "" when none).
    Job(String),
    /// The bus did not answer: why.
    Unknown(String),
}

/// Asks systemd what it is doing with this process's own unit, within a second.
pub(crate) fn own_job() -> OwnJob {
    let Some(unit) = own_unit() else {
        return OwnJob::NotAService;
    };
    // Asked while stopping: a silent bus may cost a second, not the stop timeout.
    let limit = timeout().min(Duration::from_secs(1));
    let asked_unit = unit.clone();
    let asked = bounded("ask systemd about our unit", limit, move || {
        within(limit, own_unit_job(asked_unit, limit))?
    });
    match asked {
        Ok(Some(job)) => {
            tracing::debug!(%unit, %job, "systemd job for our unit");
            OwnJob::Job(job)
        }
        Ok(None) => OwnJob::NotAService,
        Err(e) => {
            tracing::debug!(error = %e, "cannot ask systemd about our unit's job");
            OwnJob::Unknown(e.to_string())
        }
    }
}

/// An answer to "is the system stopping?" asked ahead ([`ask_system_stopping_early`]): the asking
/// thread's channel and when it was asked.
struct Early {
    asked: std::time::Instant,
    answer: std::sync::mpsc::Receiver<Option<bool>>,
}

static EARLY: std::sync::Mutex<Option<Early>> = std::sync::Mutex::new(None);

/// How old an early answer may be and still stand for now. The daemon asks at its start; systemd
/// runs no start job of a unit with default dependencies (nodeward's) once a shutdown has begun
/// (they conflict with shutdown.target), so an answer from those first seconds is the system's
/// state at the kubelet's first start too, but for a shutdown begun since, which then stops us.
const EARLY_FRESH: Duration = Duration::from_secs(5);

/// Asks systemd whether the system is stopping on a thread of its own, now: the next
/// [`system_stopping`] within [`EARLY_FRESH`] takes this answer instead of a conversation of its
/// own (the kubelet's first start then does not wait for a bus connection, its handshake and the
/// question; under emulation that is a good part of a second).
pub(crate) fn ask_system_stopping_early() {
    let (tx, answer) = std::sync::mpsc::sync_channel(1);
    let spawned = std::thread::Builder::new()
        .name("dbus-early".into())
        .spawn(move || {
            let _ = tx.send(ask_system_stopping());
        });
    if spawned.is_ok() {
        if let Ok(mut early) = EARLY.lock() {
            *early = Some(Early {
                asked: std::time::Instant::now(),
                answer,
            });
        }
    }
}

/// The early answer, once, when it is fresh: waited for while its question runs (its own limit
/// bounds it). `None` when there is none to take (then the caller asks).
fn take_early_answer() -> Option<Option<bool>> {
    let early = EARLY.lock().ok()?.take()?;
    if early.asked.elapsed() >= EARLY_FRESH {
        return None;
    }
    let wait = timeout().min(Duration::from_secs(1)) + Duration::from_millis(500);
    early.answer.recv_timeout(wait).ok()
}

/// Whether systemd is shutting the system down (its manager's `SystemState` is `stopping`), asked
/// within a second (or answered by the question asked early, when it is fresh); `None` when the
/// bus does not say (no systemd, no bus, no answer in time).
pub(crate) fn system_stopping() -> Option<bool> {
    take_early_answer().unwrap_or_else(ask_system_stopping)
}

fn ask_system_stopping() -> Option<bool> {
    let limit = timeout().min(Duration::from_secs(1));
    let asked = bounded("ask systemd whether the system is stopping", limit, move || {
        within(limit, system_state(limit))?
    });
    match asked {
        Ok(state) => Some(state == "stopping"),
        Err(e) => {
            tracing::debug!(error = %e, "cannot ask systemd for the system's state");
            None
        }
    }
}

async fn system_state(limit: Duration) -> Result<String, zbus::Error> {
    let conn = system(limit).await?;
    let state = property(
        &conn,
        "/org/freedesktop/systemd1",
        "org.freedesktop.systemd1.Manager",
        "SystemState",
    )
    .await?;
    String::try_from(state)
}

/// What systemd says of a unit now (`systemctl show -p LoadState,ActiveState,SubState,Job`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UnitStatus {
    /// `loaded`, `not-found`, `masked`, `error`, `bad-setting`.
    pub(crate) load: String,
    /// `active`, `activating` (a restart pending included), `deactivating`, `inactive`, `failed`,
    /// `reloading`, `refreshing`, `maintenance`.
    pub(crate) active: String,
    /// The type's own word (`running`, `auto-restart`, `dead`…).
    pub(crate) sub: String,
    /// A job (start, restart…) is queued for it.
    pub(crate) job: bool,
}

/// Asks systemd about `unit` (loading its file if nothing has yet), within a second. `Ok(None)`:
/// there is no system bus, so no systemd to ask.
pub(crate) fn unit_status(unit: &str) -> Result<Option<UnitStatus>, zbus::Error> {
    let limit = timeout().min(Duration::from_secs(1));
    let unit = unit.to_owned();
    bounded("ask systemd about a unit", limit, move || {
        within(limit, unit_status_on_bus(unit, limit))?
    })
}

async fn unit_status_on_bus(unit: String, limit: Duration) -> Result<Option<UnitStatus>, zbus::Error> {
    let conn = match system(limit).await {
        Ok(c) => c,
        Err(e) if no_bus(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    // LoadUnit, not GetUnit: a unit nothing has loaded (masked, not installed) is still answered.
    let reply = conn
        .call_method(
            Some("org.freedesktop.systemd1"),
            "/org/freedesktop/systemd1",
            Some("org.freedesktop.systemd1.Manager"),
            "LoadUnit",
            &(unit.as_str(),),
        )
        .await?;
    let path: zbus::OwnedObjectPath = reply.body().deserialize()?;
    let unit_iface = "org.freedesktop.systemd1.Unit";
    let text = |v: zbus::OwnedVariant| String::try_from(v);
    let load = text(property(&conn, path.as_str(), unit_iface, "LoadState").await?)?;
    let active = text(property(&conn, path.as_str(), unit_iface, "ActiveState").await?)?;
    let sub = text(property(&conn, path.as_str(), unit_iface, "SubState").await?)?;
    let (job, _): (u32, zbus::OwnedObjectPath) = property(&conn, path.as_str(), unit_iface, "Job")
        .await?
        .try_into()?;
    Ok(Some(UnitStatus {
        load,
        active,
        sub,
        job: job != 0,
    }))
}

/// The type of the job systemd runs on `unit` now ("" when none); `None` when this process is not
/// the unit's main process (a cgroup shared with a service that did not start us).
async fn own_unit_job(unit: String, limit: Duration) -> Result<Option<String>, zbus::Error> {
    {
        let unit = unit.as_str();
        let conn = system(limit).await?;
        let manager = "org.freedesktop.systemd1.Manager";
        let reply = conn
            .call_method(
                Some("org.freedesktop.systemd1"),
                "/org/freedesktop/systemd1",
                Some(manager),
                "GetUnit",
                &(unit,),
            )
            .await?;
        let unit_path: zbus::OwnedObjectPath = reply.body().deserialize()?;
        let main_pid = property(
            &conn,
            unit_path.as_str(),
            "org.freedesktop.systemd1.Service",
            "MainPID",
        )
        .await?;
        if u32::try_from(main_pid)? != std::process::id() {
            return Ok(None);
        }
        let job = property(&conn, unit_path.as_str(), "org.freedesktop.systemd1.Unit", "Job").await?;
        let (id, job_path): (u32, zbus::OwnedObjectPath) = job.try_into()?;
        if id == 0 {
            return Ok::<_, zbus::Error>(Some(String::new()));
        }
        let kind = property(
            &conn,
            job_path.as_str(),
            "org.freedesktop.systemd1.Job",
            "JobType",
        )
        .await?;
        String::try_from(kind).map(Some)
    }
}

async fn property(
    conn: &zbus::Connection,
    path: &str,
    interface: &str,
    name: &str,
) -> Result<zbus::OwnedVariant, zbus::Error> {
    let reply = conn
        .call_method(
            Some("org.freedesktop.systemd1"),
            path,
            Some("org.freedesktop.DBus.Properties"),
            "Get",
            &(interface, name),
        )
        .await?;
    reply.body().deserialize()
}

/// The service unit this process runs in, from its cgroup (`0::/system.slice/nodeward.service`).
fn own_unit() -> Option<String> {
    let text = super::read::read_path_text(
        std::path::Path::new("/proc/self/cgroup"),
        super::read::Kind::Kernel,
    )
    .ok()?;
    text.lines()
        .filter_map(|l| l.rsplit('/').next())
        .find(|n| n.ends_with(".service"))
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A bus that accepts connections and never answers, not even the handshake: each question is
    /// asked again (a connection each), none held past its limit. Before, the first unanswered
    /// call left every later one refused at once ("an earlier D-Bus call has not returned yet"),
    /// and with it the shutdown detection, for the rest of the process.
    #[test]
    fn a_silent_bus_costs_each_question_its_limit_and_no_more() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("bus");
        let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
        let accepted = std::sync::Arc::new(AtomicUsize::new(0));
        let seen = accepted.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for conn in listener.incoming().flatten() {
                seen.fetch_add(1, Ordering::SeqCst);
                held.push(conn);
            }
        });
        // The only test in this binary that touches the system bus address.
        // SAFETY: set before any thread of this test asks the bus; no other unit test reads it.
        unsafe { std::env::set_var("DBUS_SYSTEM_BUS_ADDRESS", format!("unix:path={}", path.display())) };
        for _ in 0..3 {
            assert_eq!(system_stopping(), None, "a silent bus says nothing");
            // The conversation's own limit ends its thread: wait for that, then ask again.
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while STUCK.load(Ordering::SeqCst) {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the unanswered call never ended"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 3, "each question was asked");
        // Asked early, the next question takes that answer: one conversation for both.
        ask_system_stopping_early();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while accepted.load(Ordering::SeqCst) < 4 {
            assert!(
                std::time::Instant::now() < deadline,
                "the early question was never asked"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(system_stopping(), None, "a silent bus says nothing, early too");
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            4,
            "the question after the early one was asked again"
        );
        // The control: the early answer is taken once; the question after it asks.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while STUCK.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(system_stopping(), None);
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            5,
            "control: a later question was not asked"
        );
    }
}
