//! The node as the checks see it, gathered once: every read goes through the host root (files an
//! image carries) or the kernel root (`/proc`, `/sys`), so the checks run against fixture trees.
//! What cannot be read is recorded with the reason, and the check that needs it is skipped.

use crate::host::cert::CertInfo;
use crate::host::read::{self, Kind};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::host::container::Container;
use crate::host::kmod::index::{ModIndex, Resolution};
use crate::host::kmod::load;
use crate::host::mountinfo::{self, Mount};
use crate::host::procsys;
use crate::kubelet::status::KubeletStatus;
use crate::steps::context::Context;

/// Something observed, or why it could not be.
pub(crate) type Seen<T> = Result<T, Unseen>;

/// Why a fact could not be read (`nodeward check` shows it in place of a verdict).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Unseen(pub String);

/// A check's verdict quotes it.
impl From<Unseen> for String {
    fn from(why: Unseen) -> String {
        why.0
    }
}

impl From<&str> for Unseen {
    fn from(why: &str) -> Unseen {
        Unseen(why.to_owned())
    }
}

impl From<String> for Unseen {
    fn from(why: String) -> Unseen {
        Unseen(why)
    }
}

/// Where a wanted module stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ModuleState {
    Loaded,
    BuiltIn,
    /// In the running kernel's module tree, loadable.
    Available,
    Missing(String),
}

/// One runtime root (`/var/lib/containers` …) and the filesystem under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RuntimeRoot {
    pub(crate) path: String,
    pub(crate) fs_type: String,
    /// The mount's source (`/dev/vda1`, `/dev/loop0`).
    pub(crate) source: String,
    /// Whether directory entries carry their type (overlay needs it: xfs `ftype=1`).
    pub(crate) d_type: Option<bool>,
    /// Percent of blocks and of inodes free.
    pub(crate) free_percent: Option<u64>,
    pub(crate) inodes_free_percent: Option<u64>,
}

/// A sysctl the network needs, as it is now and whether it survives a reboot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SysctlSeen {
    pub(crate) key: String,
    pub(crate) current: Option<String>,
    /// Set again at boot: by a sysctl.d file with the wanted value, or by nodeward's own unit.
    pub(crate) persisted: bool,
}

/// A TCP port something listens on, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Listener {
    pub(crate) port: u16,
    /// The owning process's name, when it could be found.
    pub(crate) owner: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Observation {
    /// Whether the running system was read (false for `--root` without `--kernel live`).
    pub(crate) live: bool,
    pub(crate) kernel_release: Seen<String>,
    /// `CONFIG_*` → value, from `/proc/config.gz` or `/boot/config-RELEASE`.
    pub(crate) kernel_config: Seen<BTreeMap<String, String>>,
    pub(crate) modules: Vec<(String, ModuleState)>,
    /// cgroup v2 (with its root's controllers) or v1 (with its enabled controllers).
    pub(crate) cgroup: Seen<(bool, BTreeSet<String>)>,
    /// Active swap areas.
    pub(crate) swaps: Seen<Vec<String>>,
    pub(crate) sysctls: Vec<SysctlSeen>,
    pub(crate) storage: Vec<RuntimeRoot>,
    /// SELinux on; each labelled tree's root and its label.
    pub(crate) selinux: Option<Vec<(String, Option<String>)>>,
    pub(crate) hostname: Seen<String>,
    pub(crate) machine_id: Seen<String>,
    /// Readable; `None` when the platform has no DMI at all (no `/sys/class/dmi/id`).
    pub(crate) product_uuid: Seen<Option<()>>,
    pub(crate) listeners: Seen<Vec<Listener>>,
    /// The kernel's clock discipline says synchronised (what timedated's NTPSynchronized reads).
    pub(crate) clock_synced: Seen<bool>,
    pub(crate) container: Option<Container>,
    /// The root's propagation (`shared`, `private` …), and whether `/dev/kmsg` exists.
    pub(crate) root_propagation: Seen<String>,
    pub(crate) kmsg: bool,
    /// The CNI's `loopback` plugin and the network configurations' file names.
    pub(crate) cni: (bool, Vec<String>),
    /// The CRI socket the kubelet is pointed at, accepting connections; `None` when nodeward runs
    /// no kubelet.
    pub(crate) cri: Option<Seen<()>>,
    /// The images the node needs and where each stands; `None` when nodeward runs no kubelet.
    pub(crate) images: Option<Vec<super::image_sources::ImageSeen>>,
    /// The kubelet as the daemon last saw it; `None` when nodeward runs no kubelet.
    pub(crate) kubelet: Option<Seen<KubeletStatus>>,
    /// SELinux enforcing (`Some(true)`), permissive (`Some(false)`), or off.
    pub(crate) selinux_enforcing: Option<bool>,
    /// The kubelet configuration's `cgroupDriver` and containerd's (`systemd`/`cgroupfs`), when
    /// both files exist.
    pub(crate) cgroup_drivers: Option<(String, String)>,
    /// The certificates in `metrics.certificates` (the kubelet's pki included), and the time they
    /// were read at.
    pub(crate) certificates: Vec<CertInfo>,
    pub(crate) now: u64,
    /// In a container: whether `net.netfilter.nf_conntrack_max` can be written from here
    /// (kube-proxy writes it at start). `None` outside containers.
    pub(crate) conntrack_writable: Option<Seen<bool>>,
}

/// The CRI endpoint nodeward's kubelet uses (Typhoon's: containerd).
pub(crate) const CRI_SOCKET: &str = "/run/containerd/containerd.sock";

/// The ports the kubelet listens on: its API and its health endpoint.
pub(crate) const KUBELET_PORTS: [u16; 2] = [10250, 10248];

/// The networking sysctls the checks follow: what kube-proxy and the CNIs break without.
pub(crate) const NETWORK_SYSCTLS: [&str; 4] = [
    "net.ipv4.ip_forward",
    "net.bridge.bridge-nf-call-iptables",
    "net.bridge.bridge-nf-call-ip6tables",
    "net.netfilter.nf_conntrack_max",
];

/// The roots container runtimes keep images and layers under.
pub(crate) const RUNTIME_ROOTS: [&str; 3] = ["/var/lib/containers", "/var/lib/containerd", "/var/lib/docker"];

const NOT_LIVE: &str = "not the running system (--root without --kernel live)";

impl Observation {
    /// Reads the node. Never fails: what cannot be read is kept as the reason.
    // Long: one line per observation, in the order of the checks; nothing to split.
    pub fn gather(ctx: &Context<'_>) -> Observation {
        let live = ctx.kernel_live;
        let kernel = |rel: &str| ctx.kernel_path(rel);
        let host = |p: &str| {
            ctx.root
                .resolve_str(p)
                .unwrap_or_else(|_| ctx.root.dir().join(p.trim_start_matches('/')))
        };
        let read_kernel = |rel: &str| -> Seen<String> {
            if !live {
                return Err(NOT_LIVE.into());
            }
            procsys::read(&kernel(rel))
                .map(|s| s.trim().to_owned())
                .map_err(|e| Unseen(format!("/{rel}: {e}")))
        };
        let kernel_release = read_kernel("proc/sys/kernel/osrelease");
        let mounts = if live {
            read::read_path_text(&kernel("proc/self/mountinfo"), Kind::Kernel)
                .map(|t| mountinfo::parse(&t))
                .map_err(|e| Unseen(format!("/proc/self/mountinfo: {}", e.cause())))
        } else {
            Err(NOT_LIVE.into())
        };
        Observation {
            live,
            kernel_config: if live {
                kernel_config(&kernel("proc/config.gz"), &kernel_release, &host)
            } else {
                Err(NOT_LIVE.into())
            },
            modules: modules(ctx, kernel_release.as_deref().ok()),
            cgroup: if live {
                cgroups(&kernel("sys/fs/cgroup"), &kernel("proc/cgroups"))
            } else {
                Err(NOT_LIVE.into())
            },
            swaps: if live {
                read::read_path_text(&kernel("proc/swaps"), Kind::Kernel)
                    .map(|t| parse_swaps(&t))
                    .map_err(|e| Unseen(format!("/proc/swaps: {}", e.cause())))
            } else {
                Err(NOT_LIVE.into())
            },
            sysctls: sysctls(ctx, &host),
            storage: match &mounts {
                Ok(m) => RUNTIME_ROOTS
                    .iter()
                    .filter_map(|r| runtime_root(r, &host(r), m))
                    .collect(),
                Err(_) => Vec::new(),
            },
            selinux: selinux(ctx),
            hostname: match &ctx.settings.node.hostname {
                Some(h) => Ok(h.to_string()),
                None if live => read_kernel("proc/sys/kernel/hostname"),
                None => read::read_path_text(&host("/etc/hostname"), Kind::System)
                    .map(|s| s.trim().to_owned())
                    .map_err(|e| Unseen(format!("/etc/hostname: {}", e.cause()))),
            },
            machine_id: read::read_path_text(&host("/etc/machine-id"), Kind::System)
                .map(|s| s.trim().to_owned())
                .map_err(|e| Unseen(format!("/etc/machine-id: {}", e.cause()))),
            product_uuid: if !live {
                Err(NOT_LIVE.into())
            } else if !kernel("sys/class/dmi/id").is_dir() {
                Ok(None)
            } else {
                read::read_path(&kernel("sys/class/dmi/id/product_uuid"), Kind::Kernel)
                    .map(|_| Some(()))
                    .map_err(|e| Unseen(format!("/sys/class/dmi/id/product_uuid: {}", e.cause())))
            },
            listeners: if live {
                listeners(&kernel("proc"))
            } else {
                Err(NOT_LIVE.into())
            },
            clock_synced: if live && ctx.root.is_live() {
                clock_synced()
            } else {
                Err(NOT_LIVE.into())
            },
            container: ctx.container.clone(),
            root_propagation: mounts.as_ref().map_err(Clone::clone).and_then(|m| {
                mountinfo::at(m, ctx.root.dir())
                    .map(|m| m.propagation.to_string())
                    .ok_or_else(|| Unseen(format!("{} is not a mount point", ctx.root.dir().display())))
            }),
            kmsg: host("/dev/kmsg").symlink_metadata().is_ok(),
            cni: cni(&host),
            cri: runs_kubelet(ctx).then(|| {
                if !live || !ctx.root.is_live() {
                    return Err(NOT_LIVE.into());
                }
                std::os::unix::net::UnixStream::connect(host(CRI_SOCKET))
                    .map(drop)
                    .map_err(|e| Unseen(format!("{CRI_SOCKET}: {e}")))
            }),
            images: super::image_sources::gather(ctx),
            kubelet: runs_kubelet(ctx).then(|| daemon_kubelet(ctx)),
            selinux_enforcing: ctx.labeling.context.as_ref().and_then(|_| {
                let v = procsys::read(&kernel("sys/fs/selinux/enforce")).ok()?;
                Some(v.trim() == "1")
            }),
            cgroup_drivers: cgroup_drivers(ctx),
            certificates: crate::host::cert::on_node(&ctx.settings.metrics.certificates, ctx.root).certs,
            now: crate::clock::now(),
            conntrack_writable: ctx.container.as_ref().map(|_| {
                if !live {
                    return Err(NOT_LIVE.into());
                }
                let key = kernel("proc/sys/net/netfilter/nf_conntrack_max");
                // access(2) sees both refusals: a read-only /proc/sys (EROFS) and a key the kernel
                // makes 0444 outside the initial network namespace (EACCES, root included).
                // The mode bits are read too: access(2) lets root write any regular 0444 file.
                match nix::unistd::access(&key, nix::unistd::AccessFlags::W_OK) {
                    Ok(()) => Ok(procsys::mode_writable(&key).unwrap_or(false)),
                    Err(nix::errno::Errno::ENOENT) => Err(Unseen(
                        "/proc/sys/net/netfilter/nf_conntrack_max: no such key (nf_conntrack not loaded)"
                            .to_owned(),
                    )),
                    Err(_) => Ok(false),
                }
            }),
            kernel_release,
        }
    }
}

/// Whether nodeward runs a kubelet on this node: enabled, with an image to run.
fn runs_kubelet(ctx: &Context<'_>) -> bool {
    ctx.settings.kubelet.enabled && ctx.settings.kubelet.image.is_some()
}

/// The kubelet's status from the daemon's state file.
fn daemon_kubelet(ctx: &Context<'_>) -> Seen<KubeletStatus> {
    #[derive(serde::Deserialize)]
    struct State {
        kubelet: Option<KubeletStatus>,
    }
    let file = crate::host::state::StateFile::DaemonState;
    let bytes = file
        .read(ctx.root)
        .map_err(|_| "no daemon state: nodeward run is not running".to_owned())?;
    let state: State = serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", file.path()))?;
    state
        .kubelet
        .ok_or_else(|| Unseen("the daemon has not reported the kubelet yet".to_owned()))
}

/// `cgroupDriver:` of the kubelet's configuration file and containerd's `SystemdCgroup`.
fn cgroup_drivers(ctx: &Context<'_>) -> Option<(String, String)> {
    let read = |p: &crate::types::AbsPath| read::read_text(ctx.root, p, Kind::Config).ok();
    let kubelet = read(&ctx.settings.kubelet.config_file)?
        .lines()
        .find_map(|l| {
            l.strip_prefix("cgroupDriver:")
                .map(|v| v.trim().trim_matches(['"', '\'']).to_owned())
        })
        .unwrap_or_else(|| "cgroupfs".to_owned());
    let containerd =
        crate::kubelet::containerd::systemd_cgroup(&read(&ctx.settings.containerd.config_file)?)?;
    Some((
        kubelet,
        if containerd { "systemd" } else { "cgroupfs" }.to_owned(),
    ))
}

/// `/proc/config.gz` (the running kernel's own) or the distribution's `/boot/config-RELEASE`.
fn kernel_config(
    gz: &Path,
    release: &Seen<String>,
    host: &dyn Fn(&str) -> PathBuf,
) -> Seen<BTreeMap<String, String>> {
    // The running kernel's configuration cannot change under a process: read once (the daemon
    // runs the checks after every pass).
    static RUNNING: std::sync::OnceLock<(PathBuf, BTreeMap<String, String>)> = std::sync::OnceLock::new();
    if let Some((path, config)) = RUNNING.get()
        && path == gz
    {
        return Ok(config.clone());
    }
    if let Ok(file) = read::open_path(gz, Kind::Kernel) {
        let mut text = String::new();
        flate2::read::GzDecoder::new(file.take(64 << 20))
            .read_to_string(&mut text)
            .map_err(|e| format!("{}: {e}", gz.display()))?;
        let config = parse_kernel_config(&text);
        let _ = RUNNING.set((gz.to_path_buf(), config.clone()));
        return Ok(config);
    }
    let release = release.as_ref().map_err(Clone::clone)?;
    let boot = format!("/boot/config-{release}");
    read::read_path_text(&host(&boot), Kind::System)
        .map(|t| parse_kernel_config(&t))
        .map_err(|_| Unseen(format!("neither /proc/config.gz nor {boot}")))
}

/// `CONFIG_X=y` lines; `# CONFIG_X is not set` is absence.
pub(crate) fn parse_kernel_config(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("CONFIG_")?.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.trim_matches('"').to_owned()))
        .collect()
}

fn modules(ctx: &Context<'_>, release: Option<&str>) -> Vec<(String, ModuleState)> {
    if !ctx.kernel_live {
        return Vec::new();
    }
    let loaded = load::loaded_modules(&ctx.kernel_path("proc")).unwrap_or_default();
    // Read only when a module is neither loaded nor built in: the converged case (every pass of
    // the daemon) never opens the module index.
    let mut index: Option<Result<ModIndex, String>> = None;
    let mut out = Vec::new();
    for m in &ctx.settings.modules.load {
        let name = m.as_str().replace('-', "_");
        let state = if loaded.contains(&name) {
            ModuleState::Loaded
        } else if ctx.kernel_path("sys/module").join(&name).exists() {
            ModuleState::BuiltIn
        } else {
            match index.get_or_insert_with(|| module_index(ctx, release)) {
                Ok(i) => match i.resolve(m.as_str(), release.unwrap_or(""), &|_| false) {
                    Ok(Resolution::Builtin) => ModuleState::BuiltIn,
                    Ok(Resolution::Load(_)) => ModuleState::Available,
                    Err(e) => ModuleState::Missing(e.to_string()),
                },
                Err(why) => ModuleState::Missing(why.clone()),
            }
        };
        out.push((m.as_str().to_owned(), state));
    }
    out
}

/// The running kernel's module index; inside a container there is none to load from.
fn module_index(ctx: &Context<'_>, release: Option<&str>) -> Result<ModIndex, String> {
    match (&ctx.container, release) {
        (Some(_), _) => Err("not loaded in the host's kernel".to_owned()),
        (None, None) => Err("no kernel release to find the module tree".to_owned()),
        (None, Some(r)) => {
            let tree = ctx.kernel_path("lib/modules").join(r);
            ModIndex::load(&tree, ctx.root.dir()).map_err(|e| format!("{}: {e}", tree.display()))
        }
    }
}

fn cgroups(fs: &Path, proc_cgroups: &Path) -> Seen<(bool, BTreeSet<String>)> {
    if let Ok(text) = read::read_path_text(&fs.join("cgroup.controllers"), Kind::Kernel) {
        return Ok((true, text.split_whitespace().map(str::to_owned).collect()));
    }
    let text = read::read_path_text(proc_cgroups, Kind::Kernel).map_err(|e| e.to_string())?;
    Ok((false, parse_proc_cgroups(&text)))
}

/// The enabled v1 controllers of `/proc/cgroups` (name, hierarchy, cgroups, enabled).
pub(crate) fn parse_proc_cgroups(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 4 && f[3] == "1").then(|| f[0].to_owned())
        })
        .collect()
}

/// The active swap areas of `/proc/swaps` (a header line, then one line each).
pub(crate) fn parse_swaps(text: &str) -> Vec<String> {
    text.lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

fn sysctls(ctx: &Context<'_>, host: &dyn Fn(&str) -> PathBuf) -> Vec<SysctlSeen> {
    let nodeward_enabled = host("/etc/systemd/system/multi-user.target.wants/nodeward.service")
        .symlink_metadata()
        .is_ok();
    let dropins = sysctl_d(host);
    ctx.settings
        .sysctls
        .iter()
        .filter(|(k, _)| NETWORK_SYSCTLS.contains(&k.to_string().as_str()))
        .map(|(k, _)| {
            let key = k.to_string();
            let current = ctx
                .kernel_live
                .then(|| procsys::read(&ctx.kernel_path("proc/sys").join(k.relative_path())).ok())
                .flatten()
                .map(|v| v.trim().to_owned());
            SysctlSeen {
                persisted: nodeward_enabled || dropins.contains_key(&key),
                key,
                current,
            }
        })
        .collect()
}

/// Keys set by sysctl.d files (`/etc`, `/run`, `/usr/lib`), the last file by name winning.
fn sysctl_d(host: &dyn Fn(&str) -> PathBuf) -> BTreeMap<String, String> {
    let mut files: BTreeMap<String, PathBuf> = BTreeMap::new();
    for dir in ["/usr/lib/sysctl.d", "/run/sysctl.d", "/etc/sysctl.d"] {
        for entry in std::fs::read_dir(host(dir)).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".conf") {
                files.insert(name, entry.path());
            }
        }
    }
    let mut out = BTreeMap::new();
    for path in files.values() {
        for line in read::read_path_text(path, Kind::System)
            .unwrap_or_default()
            .lines()
        {
            if let Some((k, v)) = line.split_once('=')
                && !line.trim_start().starts_with(['#', ';'])
            {
                let key = k.trim().trim_start_matches('-').replace('/', ".");
                out.insert(key, v.trim().to_owned());
            }
        }
    }
    out
}

/// The filesystem under a runtime root that exists, as its mount shows it.
fn runtime_root(path: &str, resolved: &Path, mounts: &[Mount]) -> Option<RuntimeRoot> {
    if !resolved.is_dir() {
        return None;
    }
    let mount = mounts
        .iter()
        .rev()
        .filter(|m| resolved.starts_with(&m.mount_point))
        .max_by_key(|m| m.mount_point.as_os_str().len())?;
    let (free, inodes) = match nix::sys::statvfs::statvfs(resolved) {
        Ok(s) => (
            percent(s.blocks_available(), s.blocks()),
            percent(s.files_available(), s.files()),
        ),
        Err(_) => (None, None),
    };
    Some(RuntimeRoot {
        path: path.to_owned(),
        fs_type: mount.fs_type.clone(),
        source: mount.source.clone(),
        d_type: has_d_type(resolved),
        free_percent: free,
        inodes_free_percent: inodes,
    })
}

fn percent(part: u64, whole: u64) -> Option<u64> {
    (whole > 0).then(|| part * 100 / whole)
}

/// Whether the filesystem reports entry types in readdir: "." always exists, and carries DT_DIR
/// wherever types are kept (not on xfs formatted with `ftype=0`).
fn has_d_type(dir: &Path) -> Option<bool> {
    let mut d = nix::dir::Dir::open(
        dir,
        nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_DIRECTORY,
        nix::sys::stat::Mode::empty(),
    )
    .ok()?;
    let mut typed = false;
    for entry in d.iter().flatten() {
        if entry.file_type().is_some() {
            typed = true;
            break;
        }
    }
    Some(typed)
}

fn selinux(ctx: &Context<'_>) -> Option<Vec<(String, Option<String>)>> {
    ctx.labeling.context.as_ref()?;
    Some(
        ctx.labeling
            .trees
            .iter()
            .filter_map(|t| {
                let p = ctx.root.resolve(t).ok()?;
                p.exists()
                    .then(|| (t.to_string(), crate::host::selinux::get_label(&p).ok().flatten()))
            })
            .collect(),
    )
}

/// Listening TCP sockets on the kubelet's ports, with their owners' names.
fn listeners(proc: &Path) -> Seen<Vec<Listener>> {
    let mut inodes: BTreeMap<u64, u16> = BTreeMap::new();
    for table in ["net/tcp", "net/tcp6"] {
        let text = read_proc(&proc.join(table)).map_err(|e| Unseen(format!("/proc/{table}: {e}")))?;
        for (port, inode) in parse_listening(&text) {
            if KUBELET_PORTS.contains(&port) {
                inodes.insert(inode, port);
            }
        }
    }
    let mut owners: BTreeMap<u64, String> = BTreeMap::new();
    if !inodes.is_empty() {
        for pid in std::fs::read_dir(proc).into_iter().flatten().flatten() {
            let dir = pid.path();
            if !pid
                .file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
            {
                continue;
            }
            for fd in std::fs::read_dir(dir.join("fd")).into_iter().flatten().flatten() {
                let Ok(link) = std::fs::read_link(fd.path()) else {
                    continue;
                };
                let link = link.to_string_lossy();
                if let Some(inode) = link
                    .strip_prefix("socket:[")
                    .and_then(|s| s.strip_suffix(']'))
                    .and_then(|s| s.parse().ok())
                    && inodes.contains_key(&inode)
                {
                    let comm = read::read_path_text(&dir.join("comm"), Kind::Kernel).unwrap_or_default();
                    owners.insert(inode, comm.trim().to_owned());
                }
            }
        }
    }
    let mut out: Vec<Listener> = inodes
        .iter()
        .map(|(inode, port)| Listener {
            port: *port,
            owner: owners.get(inode).cloned(),
        })
        .collect();
    out.sort_by_key(|l| l.port);
    out.dedup();
    Ok(out)
}

/// Reads a `/proc` file in large chunks. Such files report size 0, so `read_to_string` starts
/// with 32-byte probes, and each read of `/proc/net/tcp` walks the socket table again (about 2 ms
/// a read on a small host).
fn read_proc(path: &Path) -> std::io::Result<String> {
    let mut buf = Vec::with_capacity(256 * 1024);
    read::open_path(path, Kind::Kernel)
        .map_err(read::ReadError::into_io)?
        .take(Kind::Kernel.limit() * 16)
        .read_to_end(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// `(port, socket inode)` of each LISTEN line (state 0A) of `/proc/net/tcp{,6}`.
pub(crate) fn parse_listening(text: &str) -> Vec<(u16, u64)> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 10 || f[3] != "0A" {
                return None;
            }
            let port = u16::from_str_radix(f[1].rsplit(':').next()?, 16).ok()?;
            Some((port, f[9].parse().ok()?))
        })
        .collect()
}

/// The kernel's NTP state (adjtimex): what systemd-timedated reports as NTPSynchronized.
fn clock_synced() -> Seen<bool> {
    // SAFETY: adjtimex with modes 0 only reads; the struct is plain data, zeroed.
    let mut tx: libc::timex = unsafe { std::mem::zeroed() };
    let state = unsafe { libc::adjtimex(&mut tx) };
    if state < 0 {
        return Err(Unseen(format!("adjtimex: {}", std::io::Error::last_os_error())));
    }
    Ok(state != libc::TIME_ERROR && tx.status & libc::STA_UNSYNC == 0)
}

fn cni(host: &dyn Fn(&str) -> PathBuf) -> (bool, Vec<String>) {
    let loopback = host("/opt/cni/bin/loopback").exists();
    let mut configs: Vec<String> = std::fs::read_dir(host("/etc/cni/net.d"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".conf") || n.ends_with(".conflist") || n.ends_with(".json"))
        .collect();
    configs.sort();
    (loopback, configs)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::config::Settings;
    use crate::root::HostRoot;

    /// The built-in settings.
    pub(crate) fn settings() -> Settings {
        let dir = tempfile::tempdir().expect("tempdir");
        crate::config::load(&HostRoot::at(dir.path()), None)
            .expect("built-in settings")
            .settings
    }

    /// A healthy node, as each check wants it.
    pub(crate) fn observation() -> Observation {
        Observation {
            live: true,
            kernel_release: Ok("6.1.0-27-cloud-amd64".into()),
            // The kernel check's own tests give it option maps; here it is skipped.
            kernel_config: Err("no kernel configuration in this fixture".into()),
            modules: vec![("br_netfilter".into(), ModuleState::Loaded)],
            cgroup: Ok((
                true,
                ["cpu", "cpuset", "io", "memory", "pids", "hugetlb"]
                    .iter()
                    .map(|c| c.to_string())
                    .collect(),
            )),
            swaps: Ok(Vec::new()),
            sysctls: Vec::new(),
            storage: Vec::new(),
            selinux: None,
            hostname: Ok("worker-0".into()),
            machine_id: Ok("0123456789abcdef0123456789abcdef".into()),
            product_uuid: Ok(Some(())),
            listeners: Ok(Vec::new()),
            clock_synced: Ok(true),
            container: None,
            root_propagation: Ok("shared".into()),
            kmsg: true,
            cni: (true, vec!["05-cilium.conflist".into()]),
            cri: Some(Ok(())),
            images: None,
            kubelet: None,
            selinux_enforcing: None,
            cgroup_drivers: Some(("systemd".into(), "systemd".into())),
            certificates: Vec::new(),
            now: 1_800_000_000,
            conntrack_writable: None,
        }
    }

    #[test]
    fn kernel_config_lines() {
        let c = parse_kernel_config(
            "# comment\nCONFIG_OVERLAY_FS=m\n# CONFIG_IP_VS is not set\nCONFIG_LOCALVERSION=\"\"\n",
        );
        assert_eq!(c.get("OVERLAY_FS").map(String::as_str), Some("m"));
        assert!(!c.contains_key("IP_VS"));
        assert_eq!(c.get("LOCALVERSION").map(String::as_str), Some(""));
    }

    #[test]
    fn proc_tables() {
        assert_eq!(
            parse_proc_cgroups(
                "#subsys_name\thierarchy\tnum_cgroups\tenabled\ncpuset\t0\t1\t1\nmemory\t0\t1\t0\n"
            ),
            BTreeSet::from(["cpuset".to_owned()])
        );
        assert_eq!(
            parse_swaps("Filename\tType\tSize\tUsed\tPriority\n/swapfile file 1048572 0 -2\n"),
            vec!["/swapfile".to_owned()]
        );
        assert_eq!(
            parse_swaps("Filename\tType\tSize\tUsed\tPriority\n"),
            Vec::<String>::new()
        );
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
                   0: 0100007F:2838 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0\n\
                   1: 0100007F:2838 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 4243 1 0\n";
        assert_eq!(parse_listening(tcp), vec![(10296, 4242)]);
    }
}
