//! Configuration: drop-in fragments → merged input → validated settings.
//!
//! Three stages, as in zincati: each fragment is parsed on its own against the full schema (so an
//! unknown key or a wrong type is reported with its file, line and key), the fragments are merged
//! over the built-in defaults as TOML tables with per-value provenance, and the merged input is
//! validated into [`Settings`], the typed description of the node the rest of the agent works from.

pub mod cni;
pub mod dropins;
pub mod error;
pub mod input;
pub mod kubelet;
pub mod kubelet_rules;
pub mod merge;
pub mod modules;
pub mod sysctl;

pub use error::ConfigError;

use std::path::{Path, PathBuf};

use crate::root::HostRoot;
use crate::types::{AbsPath, AccountRef, Hostname, LabelKey, LabelValue, Mode, SelinuxContext, Taint};
use input::{ConfigInput, LabelPolicy, Role};
use merge::{Merged, Source};

/// The validated description of the node.
#[derive(Debug, Clone)]
pub struct Settings {
    pub node: NodeSettings,
    /// Directories to manage, sorted so that parents come before children.
    pub dirs: Vec<DirSpec>,
    pub selinux: SelinuxSettings,
    pub daemon: DaemonSettings,
    /// Sysctls with their policies, sorted by key; dropped defaults are gone.
    pub sysctls: Vec<(sysctl::SysctlKey, sysctl::SysctlPolicy)>,
    pub modules: ModuleSettings,
    pub bundle: input::BundleInput,
    pub networkmanager: input::NetworkManagerInput,
    pub networkd: input::NetworkdInput,
    pub kubelet: kubelet::KubeletInput,
    pub containerd: input::ContainerdInput,
    /// Checks whose failures are ignored (`check.ignore`).
    pub check_ignore: Vec<String>,
    pub metrics: input::MetricsInput,
    /// `[fleet_lock]`, resolved (Zincati's server and group where unset); `None` when off.
    pub fleet_lock: Option<crate::fleetlock::Settings>,
}

#[derive(Debug, Clone)]
pub struct ModuleSettings {
    /// Modules to load, in configured order, `skip` removed, duplicates dropped.
    pub load: Vec<modules::ModuleName>,
    pub kernel_version: Option<String>,
}

#[derive(Debug, Clone)]
pub struct DaemonSettings {
    /// Seconds between drift checks; at least 1.
    pub interval_seconds: u64,
}

#[derive(Debug, Clone)]
pub struct NodeSettings {
    pub role: Role,
    pub cni: cni::Cni,
    pub hostname: Option<Hostname>,
    /// The labels the node registers with: the role's, then `node.labels`, each key once.
    pub labels: Vec<(LabelKey, LabelValue)>,
    /// The taints the node registers with: the role's, then `node.taints`, each key and effect once.
    pub taints: Vec<Taint>,
}

/// A directory with its wanted mode and owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirSpec {
    pub path: AbsPath,
    pub mode: Mode,
    pub owner: AccountRef,
    pub group: AccountRef,
}

#[derive(Debug, Clone)]
pub struct SelinuxSettings {
    pub labels: LabelPolicy,
    pub context: SelinuxContext,
    pub relabel: Vec<AbsPath>,
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
        .map(|f| parse_fragment(f).map(|t| (f, t)))
        .collect::<Result<Vec<_>, _>>()?;
    // The CNI decides defaults, so it is read (last fragment wins) before they are laid down.
    let cni = declared_cni(fragments.iter().map(|(f, t)| (f.as_path(), t)))?;
    let mut merged = Merged::default();
    // So does the distribution (Flatcar's rp_filter), read inside the root.
    let distro = "/etc/os-release"
        .parse()
        .ok()
        .and_then(|p| crate::host::read::read_text(root, &p, crate::host::read::Kind::System).ok())
        .map_or(cni::Distro::Other, |t| cni::Distro::from_os_release(&t));
    let defaults =
        toml::Table::try_from(ConfigInput::for_node(cni, distro)).map_err(|e| ConfigError::Invalid {
            path: PathBuf::from("(built-in defaults)"),
            message: e.to_string(),
        })?;
    merged.overlay(&defaults, &Source::Default);
    for (file, table) in &fragments {
        merged.overlay(table, &Source::File((*file).clone()));
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
    let fleet_lock = input.fleet_lock.clone();
    let mut settings = validate(input, &merged)?;
    settings.fleet_lock = crate::fleetlock::resolve(root, &fleet_lock).map_err(|e| ConfigError::Invalid {
        path: match merged
            .source_of(&format!("fleet_lock.{}", e.key))
            .or_else(|| merged.source_of("fleet_lock.enabled"))
        {
            Some(Source::File(p)) => p.clone(),
            _ => PathBuf::from("(built-in defaults)"),
        },
        message: e.to_string(),
    })?;
    Ok(Loaded {
        settings,
        files,
        merged,
    })
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
pub(crate) fn parse_fragment(path: &Path) -> Result<toml::Table, ConfigError> {
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
        message: e.to_string(),
    };
    toml::from_str::<ConfigInput>(&text).map_err(parse_err)?;
    let mut table = text.parse::<toml::Table>().map_err(parse_err)?;
    // Canonical sysctl keys, so `net.ipv4.x = 1` here merges with `"net.ipv4.x"` elsewhere.
    if let Some(toml::Value::Table(raw)) = table.get("sysctl") {
        let flat = sysctl::flatten(raw).map_err(|e| ConfigError::Invalid {
            path: path.to_path_buf(),
            message: e.0,
        })?;
        let flat: toml::Table = flat.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        table.insert("sysctl".into(), toml::Value::Table(flat));
    }
    Ok(table)
}

/// Checks the rules that span keys, naming the file that set the offending value.
fn validate(input: ConfigInput, merged: &Merged) -> Result<Settings, ConfigError> {
    let blame = |(key, message): (String, String)| ConfigError::Invalid {
        path: match merged.source_of(&key) {
            Some(Source::File(p)) => p.clone(),
            _ => PathBuf::from("(built-in defaults)"),
        },
        message: format!("{key}: {message}"),
    };
    check(&input).map_err(blame)?;
    settings(input).map_err(blame)
}

/// `check.ignore` names checks that exist.
fn check_names(input: &ConfigInput) -> Result<(), (String, String)> {
    match input
        .check
        .ignore
        .iter()
        .find(|n| !input::CHECK_NAMES.contains(&n.as_str()))
    {
        Some(unknown) => Err((
            "check.ignore".to_owned(),
            format!(
                "no check named {unknown:?} (known: {})",
                input::CHECK_NAMES.join(", ")
            ),
        )),
        None => Ok(()),
    }
}

/// The NetworkManager specs and networkd names: one item of their lists each.
fn check_interfaces(input: &ConfigInput) -> Result<(), (String, String)> {
    // A pattern of wildcards only matches every link, the uplink among them.
    let everything = |glob: &str| !glob.is_empty() && glob.chars().all(|c| c == '*' || c == '?');
    for spec in &input.networkmanager.unmanaged {
        let glob = spec
            .strip_prefix("interface-name:")
            .map_or(spec.as_str(), |g| g.trim_start_matches(['=', '~']));
        if everything(glob) {
            return Err((
                "networkmanager.unmanaged".to_owned(),
                format!(
                    "{spec:?} matches every interface, the uplink too: the node would go off the network"
                ),
            ));
        }
        // `;` and `,` both separate specs in NetworkManager's lists.
        if spec.is_empty() || spec.contains([';', ',', '\n', '\r']) || spec.chars().any(char::is_control) {
            return Err((
                "networkmanager.unmanaged".to_owned(),
                format!("{spec:?} is not a device spec"),
            ));
        }
    }
    for name in &input.networkd.unmanaged {
        if everything(name) {
            return Err((
                "networkd.unmanaged".to_owned(),
                format!(
                    "{name:?} matches every interface, the uplink too: the node would go off the network"
                ),
            ));
        }
        // One word of a `Name=` line: a glob of interface-name characters.
        let ok = !name.is_empty()
            && name.len() <= 15
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.@:*?[]!".contains(c));
        if !ok {
            return Err((
                "networkd.unmanaged".to_owned(),
                format!(
                    "{name:?} is not an interface name glob (at most 15 of A-Z a-z 0-9 - _ . @ : and * ? [ ] !)"
                ),
            ));
        }
    }
    Ok(())
}

/// The first rule the input breaks, as (dotted key, why).
fn check(input: &ConfigInput) -> Result<(), (String, String)> {
    check_names(input)?;
    for tree in &input.selinux.relabel {
        if tree.as_str() == "/" {
            return Err((
                "selinux.relabel".to_owned(),
                "refusing to relabel the whole filesystem (\"/\")".into(),
            ));
        }
    }
    if let Some(v) = &input.modules.kernel_version {
        if v.is_empty() || v.contains('/') || v == "." || v == ".." || v.chars().any(char::is_control) {
            return Err((
                "modules.kernel_version".to_owned(),
                format!("{v:?} is not a kernel release"),
            ));
        }
    }
    let b = &input.bundle;
    if matches!(b.source, Some(crate::bundle::fetch::Source::Url(_))) && b.sha256.is_none() {
        return Err((
            "bundle.sha256".to_owned(),
            "required when bundle.source is a URL".into(),
        ));
    }
    match (b.layout, b.rules.is_empty()) {
        (input::LayoutChoice::Custom, true) => {
            return Err((
                "bundle.rules".to_owned(),
                "layout = \"custom\" needs at least one rule".into(),
            ));
        }
        (input::LayoutChoice::Custom, false) | (_, true) => {}
        (_, false) => {
            return Err((
                "bundle.rules".to_owned(),
                "rules are only used with layout = \"custom\"".into(),
            ));
        }
    }
    if b.max_bytes == 0 || b.timeout_seconds == 0 || b.timeout_seconds > 3600 || b.retries > 100 {
        return Err((
            "bundle".to_owned(),
            "max_bytes must be positive, timeout_seconds from 1 to 3600, retries at most 100".into(),
        ));
    }
    check_interfaces(input)?;
    for key in input.node.labels.keys() {
        if let Err(message) = key.kubelet_may_set() {
            return Err((merge::dotted("node.labels", &key.to_string()), message.0));
        }
    }
    if let Err((key, message)) = kubelet::validate(&input.kubelet) {
        return Err((key.to_owned(), message));
    }
    if !(1..=kubelet::MAX_SECONDS).contains(&input.daemon.interval_seconds) {
        return Err((
            "daemon.interval_seconds".to_owned(),
            format!("must be from 1 to {} (a day)", kubelet::MAX_SECONDS),
        ));
    }
    for path in input.dirs.keys() {
        if path.as_str() == "/" {
            return Err((
                "dirs".to_owned(),
                "\"/\" is not a directory nodeward manages".into(),
            ));
        }
    }
    Ok(())
}

/// The checked input as the steps use it: disabled directories and skipped modules dropped, the
/// role's labels and taints merged with the node's as the kubelet registers them.
fn settings(input: ConfigInput) -> Result<Settings, (String, String)> {
    let user_labels: Vec<(LabelKey, LabelValue)> = input.node.labels.into_iter().collect();
    let labels = kubelet_rules::merge_labels(&input.node.role.labels(), &user_labels)
        .map_err(|(key, m)| (merge::dotted("node.labels", &key.to_string()), m))?;
    let taints = kubelet_rules::merge_taints(&input.node.role.taints(), &input.node.taints)
        .map_err(|m| ("node.taints".to_owned(), m))?;
    let dirs = input
        .dirs
        .into_iter()
        .filter(|(_, d)| d.enabled)
        .map(|(path, d)| DirSpec {
            path,
            mode: d.mode,
            owner: d.owner,
            group: d.group,
        })
        .collect();
    Ok(Settings {
        node: NodeSettings {
            role: input.node.role,
            cni: input.node.cni,
            hostname: input.node.hostname,
            labels,
            taints,
        },
        dirs,
        selinux: SelinuxSettings {
            labels: input.selinux.labels,
            context: input.selinux.context,
            relabel: input.selinux.relabel,
        },
        daemon: DaemonSettings {
            interval_seconds: input.daemon.interval_seconds,
        },
        sysctls: input
            .sysctl
            .0
            .into_iter()
            .filter_map(|(k, p)| p.map(|p| (k, p)))
            .collect(),
        modules: ModuleSettings {
            load: {
                let mut seen = std::collections::BTreeSet::new();
                input
                    .modules
                    .load
                    .into_iter()
                    .filter(|m| !input.modules.skip.contains(m) && seen.insert(m.clone()))
                    .collect()
            },
            kernel_version: input.modules.kernel_version,
        },
        bundle: input.bundle,
        networkmanager: input.networkmanager,
        networkd: input.networkd,
        kubelet: input.kubelet,
        containerd: input.containerd,
        check_ignore: input.check.ignore,
        metrics: input.metrics,
        fleet_lock: None,
    })
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
    fn role_labels_and_taints_are_typhoons() {
        assert_eq!(
            kubelet_rules::labels_flag(&Role::Worker.labels()),
            "node.kubernetes.io/node"
        );
        assert_eq!(
            kubelet_rules::labels_flag(&Role::Controller.labels()),
            "node.kubernetes.io/controller=true"
        );
        assert!(Role::Worker.taints().is_empty());
        let t = Role::Controller.taints();
        assert_eq!(t.len(), 1);
        assert_eq!(
            (t[0].key(), t[0].value(), t[0].effect()),
            ("node-role.kubernetes.io/controller", "", "NoSchedule")
        );
    }

    #[test]
    fn empty_config_is_a_worker_with_default_dirs() {
        let t = tempfile::tempdir().expect("tempdir");
        let loaded = load(&HostRoot::at(t.path()), None).expect("load");
        assert_eq!(loaded.settings.node.role, Role::Worker);
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
