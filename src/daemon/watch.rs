//! inotify on the directories whose changes the daemon should act on at once, not at the next
//! interval: its configuration drop-ins, the drop-ins it writes (sysctl.d, modules-load.d,
//! NetworkManager's conf.d), and where what the kubelet needs arrives (the kubeconfig Typhoon
//! copies over SSH after boot, the runtime's socket, afterburn's metadata). A directory that does
//! not exist yet is watched through its nearest existing parent, and watched itself once it
//! appears. Events are coalesced: a burst of writes is one wake-up.

use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::mpsc::SyncSender;
use std::time::Duration;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

use crate::config::dropins::CONFIG_DIRS;
use crate::root::HostRoot;
use crate::types::AbsPath;

/// Directories the agent writes drop-ins to.
const OWN_DIRS: [&str; 3] = [
    "/etc/sysctl.d",
    "/etc/modules-load.d",
    "/etc/NetworkManager/conf.d",
];

/// Where what the kubelet and the derived files depend on arrives.
const ARRIVAL_DIRS: [&str; 3] = ["/etc/kubernetes", "/run/containerd", "/run/metadata"];

/// What changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Change {
    /// A configuration drop-in directory: reload the configuration.
    Config,
    /// A directory nodeward writes to: check for drift.
    Drift,
    /// Something the kubelet waits for may have arrived: converge now.
    Arrival,
}

/// Starts the watcher thread; directories that do not exist are skipped (and picked up at the next
/// restart or SIGHUP). Returns the watched paths.
pub(crate) fn spawn<E: Send + 'static>(
    root: &HostRoot,
    tx: SyncSender<E>,
    wrap: fn(Change) -> E,
) -> std::io::Result<Vec<PathBuf>> {
    let inotify =
        Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK).map_err(std::io::Error::from)?;
    let mask = AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MODIFY
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_ATTRIB;
    let mut watched = Vec::new();
    let mut kinds = std::collections::HashMap::new();
    for (dirs, kind) in [(&CONFIG_DIRS[..], Change::Config), (&OWN_DIRS[..], Change::Drift)] {
        for d in dirs {
            let Ok(abs) = d.parse::<AbsPath>() else { continue };
            let Ok(path) = root.resolve(&abs) else { continue };
            if !path.is_dir() {
                continue;
            }
            let wd = inotify.add_watch(&path, mask).map_err(std::io::Error::from)?;
            kinds.insert(wd, kind.clone());
            watched.push(path);
        }
    }
    let arrivals: Vec<PathBuf> = ARRIVAL_DIRS
        .iter()
        .filter_map(|d| d.parse::<AbsPath>().ok())
        .filter_map(|d| root.resolve(&d).ok())
        .collect();
    let mut armed = arm(&inotify, mask, &arrivals);
    watched.extend(armed.values().cloned());
    std::thread::Builder::new()
        .name("inotify".into())
        .spawn(move || {
            loop {
                let mut fds = [PollFd::new(inotify.as_fd(), PollFlags::POLLIN)];
                if poll(&mut fds, PollTimeout::NONE).is_err() {
                    continue;
                }
                // Let a burst of writes settle, then read everything at once.
                std::thread::sleep(Duration::from_millis(100));
                let Ok(events) = inotify.read_events() else {
                    continue;
                };
                let (config, drift, arrival) = classify(&events, &kinds, &armed, &arrivals);
                if arrival {
                    // A directory may have appeared: watch it (and drop nothing: stale watches
                    // on parents only cost a wake-up).
                    armed = arm(&inotify, mask, &arrivals);
                }
                let send = |c| tx.send(wrap(c)).is_ok();
                if (config && !send(Change::Config))
                    || (drift && !send(Change::Drift))
                    || (arrival && !send(Change::Arrival))
                {
                    return;
                }
            }
        })?;
    Ok(watched)
}

type Watches<T> = std::collections::HashMap<nix::sys::inotify::WatchDescriptor, T>;

/// Which kinds of change a batch of events holds: (config, drift, arrival).
fn classify(
    events: &[nix::sys::inotify::InotifyEvent],
    kinds: &Watches<Change>,
    armed: &Watches<PathBuf>,
    arrivals: &[PathBuf],
) -> (bool, bool, bool) {
    let (mut config, mut drift, mut arrival) = (false, false, false);
    for e in events {
        // Our own temp files come and go during atomic writes; they are neither drift nor arrivals.
        let own_temp = e
            .name
            .as_ref()
            .is_some_and(|n| n.to_string_lossy().contains(".nodeward-"));
        if let Some(dir) = armed.get(&e.wd).filter(|_| !own_temp) {
            // A parent standing in for a missing directory: only the next step on the way counts.
            arrival |= arrivals.contains(dir)
                || e.name
                    .as_ref()
                    .is_some_and(|n| arrivals.iter().any(|a| a.starts_with(dir.join(n))));
        }
        match kinds.get(&e.wd) {
            Some(Change::Config) => config = true,
            Some(Change::Drift) if !own_temp => drift = true,
            _ => {}
        }
    }
    (config, drift, arrival)
}

/// Watches each wanted directory, or its nearest existing parent while it does not exist. Returns
/// each watch with the directory it is on.
fn arm(inotify: &Inotify, mask: AddWatchFlags, wanted: &[PathBuf]) -> Watches<PathBuf> {
    let mut armed = std::collections::HashMap::new();
    for dir in wanted {
        let existing = dir.ancestors().find(|a| a.is_dir());
        if let Some(at) = existing {
            if let Ok(wd) = inotify.add_watch(at, mask) {
                armed.insert(wd, at.to_path_buf());
            }
        }
    }
    armed
}
