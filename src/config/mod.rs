//! Configuration: drop-in fragments → merged input → validated settings.
//!
//! Three stages, as in zincati: each fragment is parsed on its own against the full schema (so an
//! unknown key or a wrong type is reported with its file, line and key), the fragments are merged
//! over the built-in defaults as TOML tables with per-value provenance, and the merged input is
//! validated into [`Settings`], the typed description of the node the rest of the agent works from.

pub(crate) mod cni;
pub(crate) mod dropins;
pub(crate) mod error;
pub mod input;
mod lines;
pub(crate) mod merge;
pub(crate) mod metrics;
pub(crate) mod modules;
pub(crate) mod network;
pub(crate) mod sysctl;

pub use error::{ConfigError, KeyError, Origin};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::root::HostRoot;
use crate::types::{AbsPath, AccountRef, Mode, SelinuxContext};
use input::{ConfigInput, LabelPolicy};
use merge::{Merged, Source};

/// The validated description of the node.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Who the node is to the API server (`[node]`).
    pub registration: crate::registration::Registration,
    /// The CNI the host settings follow (`node.cni`).
    pub(crate) cni: cni::Cni,
    /// Directories to manage, sorted so that parents come before children.
    pub(crate) dirs: Vec<DirSpec>,
    pub(crate) selinux: SelinuxSettings,
    pub(crate) daemon: DaemonSettings,
    /// Sysctls with their policies, sorted by key; dropped defaults are gone.
    pub(crate) sysctls: Vec<(sysctl::SysctlKey, sysctl::SysctlPolicy)>,
    pub(crate) modules: ModuleSettings,
    pub bundle: crate::bundle::settings::Settings,
    pub(crate) networkmanager: network::NetworkManagerSettings,
    pub(crate) networkd: network::NetworkdSettings,
    pub kubelet: crate::kubelet::settings::KubeletSettings,
    pub(crate) containerd: crate::containerd::settings::ContainerdSettings,
    pub(crate) images: crate::images::settings::ImagesSettings,
    /// Checks whose failures are ignored (`check.ignore`).
    pub check_ignore: Vec<String>,
    pub(crate) metrics: metrics::MetricsSettings,
    /// `[fleet_lock]`, resolved (Zincati's server and group where unset); `None` when off.
    pub(crate) fleet_lock: Option<crate::fleetlock::Settings>,
}

#[derive(Debug, Clone)]
pub(crate) struct ModuleSettings {
    /// Modules to load, in configured order, `skip` removed, duplicates dropped.
    pub(crate) load: Vec<modules::ModuleName>,
    pub(crate) kernel_version: Option<String>,
}

#[derive(Debug, Clone)]
pub(crate) struct DaemonSettings {
    /// Seconds between drift checks; at least 1.
    pub(crate) interval_seconds: u64,
    /// The window a fleet's first requests to shared servers spread over (see [`crate::jitter::BootGate`]).
    pub(crate) boot_spread: std::time::Duration,
}

/// A directory with its wanted mode and owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DirSpec {
    pub(crate) path: AbsPath,
    pub(crate) mode: Mode,
    pub(crate) owner: AccountRef,
    pub(crate) group: AccountRef,
}

#[derive(Debug, Clone)]
pub(crate) struct SelinuxSettings {
    pub(crate) labels: LabelPolicy,
    pub(crate) context: SelinuxContext,
    pub(crate) relabel: Vec<AbsPath>,
}

/// The loaded configuration: the settings plus what is needed to explain them.
#[derive(Debug)]
pub struct Loaded {
    pub settings: Settings,
    /// The fragment files read, in merge order.
    pub files: Vec<PathBuf>,
    /// The merged table with each value's source (for `nodeward config`).
    pub merged: Merged,
}

/// Reads the drop-ins under `root` plus an optional extra fragment (highest precedence).
pub fn load(root: &HostRoot, extra: Option<&Path>) -> Result<Loaded, ConfigError> {
    let mut files = dropins::discover(root)?;
    if let Some(extra) = extra {
        files.push(extra.to_path_buf());
    }
    let fragments = files
        .iter()
        .map(|f| parse_fragment(f).map(|(t, lines)| (f, t, lines)))
        .collect::<Result<Vec<_>, _>>()?;
    // The CNI decides defaults, so it is read (last fragment wins) before they are laid down.
    let cni = declared_cni(fragments.iter().map(|(f, t, _)| (f.as_path(), t)))?;
    let mut merged = Merged::default();
    // So does the distribution (Flatcar's rp_filter), read inside the root.
    let distro = "/etc/os-release"
        .parse()
        .ok()
        .and_then(
            |p| match crate::host::read::read_text(root, &p, crate::host::read::Kind::System) {
                Ok(t) => Some(t),
                Err(e) => {
                    if !e.is_missing() {
                        tracing::warn!(file = "/etc/os-release", error = %e,
                        "the distribution cannot be read; defaults for other distributions");
                    }
                    None
                }
            },
        )
        .map_or(cni::Distro::Other, |t| cni::Distro::from_os_release(&t));
    let defaults =
        toml::Table::try_from(ConfigInput::for_node(cni, distro)).map_err(|e| ConfigError::Invalid {
            path: PathBuf::from("(built-in defaults)"),
            message: e.to_string(),
        })?;
    merged.overlay(&defaults, &Source::Default);
    for (file, table, lines) in &fragments {
        merged.overlay_file(table, file, lines);
    }
    let input: ConfigInput =
        merged
            .table
            .clone()
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Parse {
                path: PathBuf::from("(merged configuration)"),
                message: e.to_string(),
            })?;
    let settings = settings(root, input).map_err(|error| ConfigError::Key {
        origin: blame(&merged, &error.key),
        error,
    })?;
    Ok(Loaded {
        settings,
        files,
        merged,
    })
}

/// The file and line to blame for a rule about `key`: the one that set it; for a key no file set
/// (an unset `fleet_lock.base_url`), the one that turned its section on (`fleet_lock.enabled`).
fn blame(merged: &Merged, key: &str) -> Origin {
    let origin = merged.origin_of(key);
    if origin.path.is_some() {
        return origin;
    }
    // An entry of a list (`containerd.mirrors[0].url`): the file that set the list.
    if let Some((list, _)) = key.split_once('[') {
        let of_list = merged.origin_of(list);
        if of_list.path.is_some() {
            return of_list;
        }
    }
    key.split_once('.')
        .map(|(section, _)| merged.origin_of(&format!("{section}.enabled")))
        .filter(|o| o.path.is_some())
        .unwrap_or(origin)
}

/// The `node.cni` the fragments declare (the last one to set it wins), `any` when none does.
fn declared_cni<'a>(
    fragments: impl Iterator<Item = (&'a Path, &'a toml::Table)>,
) -> Result<cni::Cni, ConfigError> {
    let mut cni = cni::Cni::Any;
    for (path, table) in fragments {
        if let Some(v) = table.get("node").and_then(|n| n.get("cni")) {
            let text = v.as_str().unwrap_or_default();
            cni = text.parse().map_err(|message| ConfigError::Invalid {
                path: path.to_path_buf(),
                message: format!("node.cni: {message}"),
            })?;
        }
    }
    Ok(cni)
}

/// Parses one fragment and checks it against the whole schema, so that its own line numbers are
/// the ones reported.
pub(crate) fn parse_fragment(path: &Path) -> Result<(toml::Table, BTreeMap<String, usize>), ConfigError> {
    // Through the one door: a regular file, opened without blocking and read up to a cap, so a
    // FIFO, `/dev/zero` or a socket named like a drop-in is an error at once, never a hang.
    let text = crate::host::read::read_path_text(path, crate::host::read::Kind::Config).map_err(|e| {
        ConfigError::Read {
            path: path.to_path_buf(),
            source: e.into_io(),
        }
    })?;
    let parse_err = |e: toml::de::Error| ConfigError::Parse {
        path: path.to_path_buf(),
        message: error::excerpt(&e.to_string()),
    };
    let mut table = text.parse::<toml::Table>().map_err(parse_err)?;
    let lines = lines::key_lines(&text);
    let at_line = |error: KeyError| ConfigError::Key {
        origin: Origin {
            path: Some(path.to_path_buf()),
            line: lines.get(&error.key).copied(),
        },
        error,
    };
    // Canonical sysctl keys, so `net.ipv4.x = 1` here merges with `"net.ipv4.x"` elsewhere; each
    // entry checked here, where its own line is known (serde would blame the `[sysctl]` header).
    if let Some(toml::Value::Table(raw)) = table.get("sysctl") {
        let flat = sysctl::flatten(raw).map_err(at_line)?;
        sysctl::check_entries(&flat).map_err(at_line)?;
        let flat: toml::Table = flat.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        table.insert("sysctl".into(), toml::Value::Table(flat));
    }
    toml::from_str::<ConfigInput>(&text).map_err(parse_err)?;
    Ok((table, lines))
}

/// The merged input as the typed settings the steps use: each section validated by its owner (the
/// bundle's, FleetLock's, the kubelet's…), the first broken rule returned with the key to blame.
fn settings(root: &HostRoot, mut input: ConfigInput) -> Result<Settings, KeyError> {
    // The node's identity keys still read under their 0.1 names in `[kubelet]` move to the
    // registration, which owns them.
    let legacy = crate::registration::input::Legacy {
        provider_id: input.kubelet.provider_id.take(),
        node_name_from: input.kubelet.node_name_from.take(),
        metadata_file: input.kubelet.metadata_file.take(),
    };
    let cni = input.node.cni;
    let registration = crate::registration::Registration::from_input(
        input.node,
        legacy,
        input.kubelet.cloud_provider.as_deref(),
    )?;
    Ok(Settings {
        bundle: crate::bundle::settings::Settings::from_input(input.bundle, registration.role)?,
        registration,
        cni,
        dirs: dir_specs(input.dirs)?,
        selinux: selinux_settings(input.selinux)?,
        daemon: daemon_settings(&input.daemon)?,
        // Every entry was checked with its own file and line when its fragment was read.
        sysctls: input
            .sysctl
            .0
            .into_iter()
            .filter_map(|(k, p)| p.map(|p| (k, p)))
            .collect(),
        modules: module_settings(input.modules)?,
        networkmanager: network::NetworkManagerSettings::from_input(input.networkmanager)?,
        networkd: network::NetworkdSettings::from_input(input.networkd)?,
        kubelet: crate::kubelet::settings::KubeletSettings::from_input(
            input.kubelet,
            cni::calico_state(cni),
        )?,
        containerd: crate::containerd::settings::ContainerdSettings::from_input(input.containerd)?,
        images: crate::images::settings::ImagesSettings::from_input(input.images)?,
        check_ignore: check_names(input.check.ignore)?,
        metrics: metrics::MetricsSettings::from_input(input.metrics)?,
        fleet_lock: crate::fleetlock::resolve(root, &input.fleet_lock)?,
    })
}

/// The enabled directories, parents first (the map is sorted by path).
fn dir_specs(dirs: BTreeMap<AbsPath, input::DirInput>) -> Result<Vec<DirSpec>, KeyError> {
    if dirs.keys().any(|p| p.as_str() == "/") {
        return Err(KeyError::new(
            "dirs.\"/\"",
            "\"/\" is not a directory nodeward manages",
        ));
    }
    Ok(dirs
        .into_iter()
        .filter(|(_, d)| d.enabled)
        .map(|(path, d)| DirSpec {
            path,
            mode: d.mode,
            owner: d.owner,
            group: d.group,
        })
        .collect())
}

fn selinux_settings(selinux: input::SelinuxInput) -> Result<SelinuxSettings, KeyError> {
    if selinux.relabel.iter().any(|t| t.as_str() == "/") {
        return Err(KeyError::new(
            "selinux.relabel",
            "refusing to relabel the whole filesystem (\"/\")",
        ));
    }
    Ok(SelinuxSettings {
        labels: selinux.labels,
        context: selinux.context,
        relabel: selinux.relabel,
    })
}

fn daemon_settings(daemon: &input::DaemonInput) -> Result<DaemonSettings, KeyError> {
    if !(1..=crate::kubelet::settings::input::MAX_SECONDS).contains(&daemon.interval_seconds) {
        return Err(KeyError::new(
            "daemon.interval_seconds",
            format!(
                "must be from 1 to {} (a day)",
                crate::kubelet::settings::input::MAX_SECONDS
            ),
        ));
    }
    if daemon.boot_spread_seconds > input::MAX_BOOT_SPREAD_SECONDS {
        return Err(KeyError::new(
            "daemon.boot_spread_seconds",
            format!("must be from 0 to {} (an hour)", input::MAX_BOOT_SPREAD_SECONDS),
        ));
    }
    Ok(DaemonSettings {
        interval_seconds: daemon.interval_seconds,
        boot_spread: std::time::Duration::from_secs(daemon.boot_spread_seconds),
    })
}

/// Modules to load in order, `skip` removed, each once.
fn module_settings(modules: input::ModulesInput) -> Result<ModuleSettings, KeyError> {
    if let Some(v) = &modules.kernel_version {
        if v.is_empty() || v.contains('/') || v == "." || v == ".." || v.chars().any(char::is_control) {
            return Err(KeyError::new(
                "modules.kernel_version",
                format!("{v:?} is not a kernel release"),
            ));
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    let load = modules
        .load
        .into_iter()
        .filter(|m| !modules.skip.contains(m) && seen.insert(m.clone()))
        .collect();
    Ok(ModuleSettings {
        load,
        kernel_version: modules.kernel_version,
    })
}

/// `check.ignore` names checks that exist.
fn check_names(ignore: Vec<String>) -> Result<Vec<String>, KeyError> {
    match ignore.iter().find(|n| !input::CHECK_NAMES.contains(&n.as_str())) {
        Some(unknown) => Err(KeyError::new(
            "check.ignore",
            format!(
                "no check named {unknown:?} (known: {})",
                input::CHECK_NAMES.join(", ")
            ),
        )),
        None => Ok(ignore),
    }
}

/// Renders the effective configuration as dotted TOML keys, each with its source as a comment.
pub fn render_effective(merged: &Merged) -> String {
    let mut out = String::new();
    render_table(&merged.table, "", merged, &mut out);
    out
}

fn render_table(table: &toml::Table, prefix: &str, merged: &Merged, out: &mut String) {
    for (key, value) in table {
        let path = merge::dotted(prefix, key);
        match value {
            toml::Value::Table(sub) if !sub.is_empty() => render_table(sub, &path, merged, out),
            other => {
                let source = merged
                    .source_of(&path)
                    .map_or_else(|| "default".to_owned(), ToString::to_string);
                out.push_str(&format!("{path} = {other}  # {source}\n"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, rel: &str, body: &str) -> PathBuf {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(&p, body).expect("write");
        p
    }

    #[test]
    fn empty_config_is_a_worker_with_default_dirs() {
        let t = tempfile::tempdir().expect("tempdir");
        let loaded = load(&HostRoot::at(t.path()), None).expect("load");
        assert_eq!(loaded.settings.registration.role, crate::types::Role::Worker);
        assert_eq!(loaded.settings.dirs.len(), input::DEFAULT_DIRS.len());
        assert!(loaded.files.is_empty());
    }

    #[test]
    fn disabled_dirs_are_dropped_and_fields_merge() {
        let t = tempfile::tempdir().expect("tempdir");
        write(
            t.path(),
            "etc/nodeward/config.d/10.toml",
            "[dirs.'/var/lib/calico']\nenabled = false\n[dirs.'/var/lib/kubelet']\nmode = '0700'\n",
        );
        let s = load(&HostRoot::at(t.path()), None).expect("load").settings;
        assert!(!s.dirs.iter().any(|d| d.path.as_str() == "/var/lib/calico"));
        let kubelet = s
            .dirs
            .iter()
            .find(|d| d.path.as_str() == "/var/lib/kubelet")
            .expect("kubelet dir");
        assert_eq!(kubelet.mode, Mode::new(0o700));
        assert_eq!(kubelet.owner, AccountRef::Name("root".into()));
    }

    #[test]
    fn relabelling_root_is_refused_naming_the_file() {
        let t = tempfile::tempdir().expect("tempdir");
        let f = write(
            t.path(),
            "etc/nodeward/config.d/10.toml",
            "[selinux]\nrelabel = ['/']\n",
        );
        let err = load(&HostRoot::at(t.path()), None)
            .expect_err("refused")
            .to_string();
        assert!(
            err.contains(&f.display().to_string()) && err.contains("selinux.relabel"),
            "{err}"
        );
    }

    #[test]
    fn effective_config_names_sources() {
        let t = tempfile::tempdir().expect("tempdir");
        let f = write(
            t.path(),
            "etc/nodeward/config.d/10.toml",
            "[node]\nrole = 'controller'\n",
        );
        let loaded = load(&HostRoot::at(t.path()), None).expect("load");
        let text = render_effective(&loaded.merged);
        assert!(
            text.contains(&format!("node.role = \"controller\"  # {}", f.display())),
            "{text}"
        );
        assert!(text.contains("selinux.labels = \"auto\"  # default"), "{text}");
    }
}
