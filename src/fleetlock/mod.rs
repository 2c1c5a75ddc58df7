//! FleetLock: at most N nodes of a group disrupted at once. Before nodeward replaces a running,
//! healthy kubelet for a spec change it takes a slot from the same FleetLock server (and group)
//! Zincati uses for reboots on this node, and gives it back once the new kubelet is healthy
//! (docs/fleet.md). Opt-in: `[fleet_lock] enabled = true`.
//!
//! - [`FleetLockInput`] is the `[fleet_lock]` section; [`resolve`] makes the [`Settings`], taking the server
//!   and group from Zincati's configuration where nodeward's leaves them unset;
//! - [`client`] sends the two requests; [`held`] records on disk whether this node holds a slot;
//! - [`id`] derives the client id.

pub(crate) mod client;
pub(crate) mod held;
pub(crate) mod id;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::root::HostRoot;
use crate::setting::KeyError;
use crate::types::AbsPath;

/// Which id nodeward presents to the lock server (docs/fleet.md, "Which client id").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClientId {
    /// nodeward's own app-specific machine id: its slots never mix with Zincati's (a strict
    /// FleetLock server, e.g. Airlock, or any with more than one slot).
    #[default]
    Nodeward,
    /// Zincati's id on this node: what poseidon/fleetlock needs to find (and drain) the node.
    /// Lock and release are then Zincati's too: see the manual before choosing it.
    Zincati,
}

/// `[fleet_lock]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct FleetLockInput {
    /// Take a FleetLock slot before replacing a running, healthy kubelet for a spec change.
    pub(crate) enabled: bool,
    /// The server's base URL. Unset: Zincati's `[updates.fleet_lock] base_url` on this node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) base_url: Option<String>,
    /// The reboot group. Unset: Zincati's `[identity] group`, else `default` (Zincati's default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) group: Option<String>,
    /// Accept a plain `http://` server (the usual one runs inside the cluster).
    pub(crate) allow_http: bool,
    /// `nodeward` (its own id) or `zincati` (Zincati's id, for poseidon/fleetlock).
    pub(crate) client_id: ClientId,
    /// Each request's deadline (1 to 300).
    pub(crate) timeout_seconds: u64,
    /// Retries of a refused or unreachable lock start at this bound and double to 5 minutes, each
    /// a random time below its bound (1 to 3600).
    pub(crate) retry_seconds: u64,
}

impl Default for FleetLockInput {
    fn default() -> FleetLockInput {
        FleetLockInput {
            enabled: false,
            base_url: None,
            group: None,
            allow_http: false,
            client_id: ClientId::Nodeward,
            timeout_seconds: 10,
            retry_seconds: 10,
        }
    }
}

/// The FleetLock settings in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub base_url: String,
    pub group: String,
    pub client_id: ClientId,
    pub allow_http: bool,
    pub timeout: Duration,
    pub retry: Duration,
    /// Where `base_url` and `group` came from, for people (`nodeward config`, the journal).
    pub from: String,
}

impl Settings {
    /// The id presented for this node's `machine_id`; `None` without a machine id (an image).
    pub fn id(&self, machine_id: &str) -> Option<String> {
        let app = match self.client_id {
            ClientId::Nodeward => id::NODEWARD_APP_ID,
            ClientId::Zincati => id::ZINCATI_APP_ID,
        };
        id::app_specific(machine_id, app)
    }
}

/// Why `[fleet_lock]` cannot be used, naming the key.
fn invalid(key: &'static str, message: impl Into<String>) -> KeyError {
    KeyError::new(format!("fleet_lock.{key}"), message)
}

/// Where Zincati reads its configuration fragments, lowest precedence first.
const ZINCATI_DIRS: [&str; 3] = [
    "/usr/lib/zincati/config.d",
    "/run/zincati/config.d",
    "/etc/zincati/config.d",
];

/// The `[fleet_lock]` settings, or `None` when it is off.
pub(crate) fn resolve(root: &HostRoot, input: &FleetLockInput) -> Result<Option<Settings>, KeyError> {
    if !input.enabled {
        return Ok(None);
    }
    let zincati = zincati_config(root);
    let (base_url, url_from) = match (&input.base_url, zincati.base_url) {
        (Some(u), _) => (u.clone(), "nodeward".to_owned()),
        (None, Some((u, file))) => (u, file),
        (None, None) => {
            return Err(invalid(
                "base_url",
                "not set, and no Zincati configuration on this node names one ([updates.fleet_lock] base_url)",
            ));
        }
    };
    let (group, group_from) = match (&input.group, zincati.group) {
        (Some(g), _) => (g.clone(), "nodeward".to_owned()),
        (None, Some((g, file))) => (g, file),
        (None, None) => ("default".to_owned(), "Zincati's default".to_owned()),
    };
    check_url(&base_url, input.allow_http)?;
    if group.is_empty()
        || !group
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
    {
        return Err(invalid(
            "group",
            format!("{group:?} (from {group_from}) does not match ^[a-zA-Z0-9.-]+$ (the FleetLock protocol)"),
        ));
    }
    if !(1..=300).contains(&input.timeout_seconds) {
        return Err(invalid("timeout_seconds", "must be 1 to 300"));
    }
    if !(1..=3600).contains(&input.retry_seconds) {
        return Err(invalid("retry_seconds", "must be 1 to 3600"));
    }
    Ok(Some(Settings {
        base_url,
        group,
        client_id: input.client_id,
        allow_http: input.allow_http,
        timeout: Duration::from_secs(input.timeout_seconds),
        retry: Duration::from_secs(input.retry_seconds),
        from: format!("base_url from {url_from}, group from {group_from}"),
    }))
}

fn check_url(url: &str, allow_http: bool) -> Result<(), KeyError> {
    let rest = if let Some(rest) = url.strip_prefix("https://") {
        rest
    } else if let Some(rest) = url.strip_prefix("http://") {
        if !allow_http {
            return Err(invalid(
                "base_url",
                format!(
                    "{url}: plain http; set fleet_lock.allow_http = true for a server inside the cluster"
                ),
            ));
        }
        rest
    } else {
        return Err(invalid("base_url", format!("{url:?}: not an http(s) URL")));
    };
    let host = rest.split('/').next().unwrap_or("");
    if host.is_empty() || url.chars().any(|c| c.is_whitespace() || c.is_control()) || url.contains(['?', '#'])
    {
        return Err(invalid(
            "base_url",
            format!("{url:?}: not a base URL (scheme://host[:port][/path])"),
        ));
    }
    Ok(())
}

/// What Zincati's configuration says, with the file that said it.
#[derive(Debug, Default)]
struct Zincati {
    base_url: Option<(String, String)>,
    group: Option<(String, String)>,
}

/// Zincati's fragments as Zincati reads them: by file name across its directories (a later
/// directory's file replaces an earlier one of the same name), in name order, later keys winning.
/// An unreadable fragment is skipped with a warning: Zincati would refuse to start on it.
fn zincati_config(root: &HostRoot) -> Zincati {
    let mut by_name: BTreeMap<String, AbsPath> = BTreeMap::new();
    for dir in ZINCATI_DIRS {
        let Ok(resolved) = dir
            .parse()
            .map_err(|_| ())
            .and_then(|d: AbsPath| root.resolve(&d).map_err(|_| ()))
        else {
            continue;
        };
        for name in toml_names(&resolved) {
            if let Ok(p) = format!("{dir}/{name}").parse() {
                by_name.insert(name, p);
            }
        }
    }
    let mut out = Zincati::default();
    for path in by_name.values() {
        let text = match crate::host::read::read_text(root, path, crate::host::read::Kind::Config) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %e, "Zincati fragment unreadable; skipped");
                continue;
            }
        };
        let Ok(table) = text.parse::<toml::Table>() else {
            tracing::warn!(path = %path, "Zincati fragment is not TOML; skipped");
            continue;
        };
        let at = |keys: &[&str]| {
            let mut v = table.get(keys[0])?;
            for k in &keys[1..] {
                v = v.get(k)?;
            }
            v.as_str().map(str::to_owned)
        };
        if let Some(u) = at(&["updates", "fleet_lock", "base_url"]) {
            out.base_url = Some((u, path.to_string()));
        }
        if let Some(g) = at(&["identity", "group"]) {
            out.group = Some((g, path.to_string()));
        }
    }
    out
}

fn toml_names(dir: &std::path::Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".toml") && !n.starts_with('.'))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enabled() -> FleetLockInput {
        FleetLockInput {
            enabled: true,
            ..FleetLockInput::default()
        }
    }

    fn write(root: &std::path::Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }

    #[test]
    fn off_by_default_and_refused_without_a_server() {
        let t = tempfile::tempdir().expect("tempdir");
        let root = HostRoot::at(t.path());
        assert_eq!(resolve(&root, &FleetLockInput::default()), Ok(None));
        let e = resolve(&root, &enabled()).expect_err("no server");
        assert_eq!(e.key, "fleet_lock.base_url");
    }

    #[test]
    fn zincatis_server_and_group_are_taken_with_etc_winning() {
        let t = tempfile::tempdir().expect("tempdir");
        write(
            t.path(),
            "usr/lib/zincati/config.d/50-updates.toml",
            "[updates]\nstrategy = \"fleet_lock\"\n[updates.fleet_lock]\nbase_url = \"https://lock.example/base\"\n",
        );
        write(
            t.path(),
            "etc/zincati/config.d/90-group.toml",
            "[identity]\ngroup = \"workers\"\n",
        );
        let root = HostRoot::at(t.path());
        let s = resolve(&root, &enabled()).expect("valid").expect("on");
        assert_eq!(s.base_url, "https://lock.example/base");
        assert_eq!(s.group, "workers");
        assert!(
            s.from.contains("/usr/lib/zincati/config.d/50-updates.toml"),
            "{}",
            s.from
        );
        // The same name under /etc replaces the vendor file whole.
        write(
            t.path(),
            "etc/zincati/config.d/50-updates.toml",
            "[updates.fleet_lock]\nbase_url = \"https://other.example\"\n",
        );
        let s = resolve(&root, &enabled()).expect("valid").expect("on");
        assert_eq!(s.base_url, "https://other.example");
        // nodeward's own keys win.
        let own = FleetLockInput {
            base_url: Some("https://mine.example".into()),
            group: Some("kubelets".into()),
            ..enabled()
        };
        let s = resolve(&root, &own).expect("valid").expect("on");
        assert_eq!(
            (s.base_url.as_str(), s.group.as_str()),
            ("https://mine.example", "kubelets")
        );
    }

    #[test]
    fn plain_http_needs_allow_http_and_groups_follow_the_protocol() {
        let t = tempfile::tempdir().expect("tempdir");
        let root = HostRoot::at(t.path());
        let http = FleetLockInput {
            base_url: Some("http://fleetlock.kube-system.svc:8080".into()),
            ..enabled()
        };
        let e = resolve(&root, &http).expect_err("http");
        assert!(e.to_string().contains("allow_http"), "{e}");
        let allowed = FleetLockInput {
            allow_http: true,
            ..http.clone()
        };
        assert_eq!(
            resolve(&root, &allowed).expect("valid").expect("on").group,
            "default"
        );
        let bad_group = FleetLockInput {
            group: Some("a b".into()),
            ..allowed.clone()
        };
        assert_eq!(
            resolve(&root, &bad_group).expect_err("group").key,
            "fleet_lock.group"
        );
        let bad_url = FleetLockInput {
            base_url: Some("ftp://x".into()),
            ..allowed
        };
        assert_eq!(
            resolve(&root, &bad_url).expect_err("url").key,
            "fleet_lock.base_url"
        );
    }

    #[test]
    fn the_client_id_is_nodewards_own_unless_zincatis_is_asked_for() {
        let machine = "b34fc2b3c9a24a3a8f3f5a4f0e8a7c11";
        let mut s = Settings {
            base_url: "https://l".into(),
            group: "default".into(),
            client_id: ClientId::Nodeward,
            allow_http: false,
            timeout: Duration::from_secs(1),
            retry: Duration::from_secs(1),
            from: String::new(),
        };
        assert_eq!(s.id(machine).as_deref(), Some("be6e871c95194b438889a5efd59ead5b"));
        s.client_id = ClientId::Zincati;
        assert_eq!(s.id(machine).as_deref(), Some("db59ceec4a634caa946cf36fb4d2dc6c"));
        assert_eq!(s.id("uninitialized"), None);
    }
}
