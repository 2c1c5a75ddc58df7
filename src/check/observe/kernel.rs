//! The kernel as the checks see it: its configuration, modules, cgroups, swaps and sysctls (with
//! what the sysctl.d files ask), each read through the kernel or host root.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};

use super::seen::{ModuleState, NETWORK_SYSCTLS, Seen, SysctlSeen, Unseen};
use crate::host::kmod::index::{ModIndex, Resolution};
use crate::host::kmod::load;
use crate::host::procsys;
use crate::host::read::{self, Kind};
use crate::steps::context::Context;

/// `/proc/config.gz` (the running kernel's own) or the distribution's `/boot/config-RELEASE`.
pub(super) fn kernel_config(
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

pub(super) fn modules(ctx: &Context<'_>, release: Option<&str>) -> Vec<(String, ModuleState)> {
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

pub(super) fn cgroups(fs: &Path, proc_cgroups: &Path) -> Seen<(bool, BTreeSet<String>)> {
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

pub(super) fn sysctls(ctx: &Context<'_>, host: &dyn Fn(&str) -> PathBuf) -> Vec<SysctlSeen> {
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
