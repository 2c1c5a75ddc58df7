//! The node as the checks see it, gathered once: every read goes through the host root (files an
//! image carries) or the kernel root (`/proc`, `/sys`), so the checks run against fixture trees.
//! What cannot be read is recorded with the reason, and the check that needs it is skipped.

use crate::host::cert::CertInfo;
use crate::host::read::{self, Kind};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::host::container::Container;
use crate::host::mountinfo::{self, Mount};
use crate::host::procsys;
use crate::kubelet::status::KubeletStatus;
use crate::steps::context::Context;

mod kernel;
mod net;
mod seen;

pub(crate) use seen::{
    CRI_SOCKET, Listener, ModuleState, RUNTIME_ROOTS, RuntimeRoot, Seen, SysctlSeen, Unseen,
};

use kernel::parse_swaps;
use kernel::{cgroups, kernel_config, modules, sysctls};
use net::listeners;

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
    /// `/etc/hosts` (whether `localhost` names a loopback address).
    pub(crate) etc_hosts: Seen<String>,
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
            hostname: match &ctx.settings.registration.hostname {
                Some(h) => Ok(h.to_string()),
                None if live => read_kernel("proc/sys/kernel/hostname"),
                None => read::read_path_text(&host("/etc/hostname"), Kind::System)
                    .map(|s| s.trim().to_owned())
                    .map_err(|e| Unseen(format!("/etc/hostname: {}", e.cause()))),
            },
            machine_id: read::read_path_text(&host("/etc/machine-id"), Kind::System)
                .map(|s| s.trim().to_owned())
                .map_err(|e| Unseen(format!("/etc/machine-id: {}", e.cause()))),
            etc_hosts: read::read_path_text(&host("/etc/hosts"), Kind::System)
                .map_err(|e| Unseen(format!("/etc/hosts: {}", e.cause()))),
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
    let containerd = crate::containerd::systemd_cgroup(&read(&ctx.settings.containerd.config_file)?)?;
    Some((
        kubelet,
        if containerd { "systemd" } else { "cgroupfs" }.to_owned(),
    ))
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
    use super::kernel::{parse_kernel_config, parse_proc_cgroups};
    use super::net::parse_listening;
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
            etc_hosts: Ok("127.0.0.1 localhost\n".into()),
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
