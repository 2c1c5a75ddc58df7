//! `[bundle]`: where the assets bundle comes from and how its entries are placed, validated from
//! its input into [`Settings`] by this module, the bundle's owner.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::fetch::{Options, Sha256Hex, Source};
use super::layout::{self, Rule, Unmatched};
use crate::setting::KeyError;
use crate::types::{AbsPath, AccountRef, Role};

/// The assets bundle: where it comes from and where its files go.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BundleInput {
    /// An absolute path (below `--root`) or an `https://` URL; unset: no bundle.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) source: Option<Source>,
    /// Required for URLs; checked before anything is written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) sha256: Option<Sha256Hex>,
    /// `auto` (from node.role), `controller`, `worker` or `custom` (`rules`).
    pub(crate) layout: LayoutChoice,
    /// Rules for `layout = "custom"`, first match wins.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) rules: Vec<Rule>,
    /// An entry no rule places: `error` (refuse the bundle) or `ignore`.
    pub(crate) unmatched: Unmatched,
    /// The controller layout's owner of etcd's server and peer material.
    pub(crate) etcd_user: AccountRef,
    /// The controller layout's group for /etc/kubernetes/pki files (the static pods' gid).
    pub(crate) pki_group: AccountRef,
    /// For https: trust only the CAs in this PEM file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) ca_file: Option<AbsPath>,
    /// Accept a plain `http://` source (a server inside the cluster; the sha256 still pins it).
    pub(crate) allow_http: bool,
    /// A whole download attempt's deadline (1 to 3600).
    pub(crate) timeout_seconds: u64,
    /// Attempts after the first within one fetch (at most 100), each a random time below a
    /// doubling bound capped at 5 minutes.
    pub(crate) retries: u32,
    /// The largest bundle accepted, in bytes.
    pub(crate) max_bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LayoutChoice {
    #[default]
    Auto,
    Controller,
    Worker,
    Custom,
}

impl Default for BundleInput {
    fn default() -> Self {
        BundleInput {
            source: None,
            sha256: None,
            layout: LayoutChoice::Auto,
            rules: Vec::new(),
            unmatched: Unmatched::Error,
            etcd_user: AccountRef::Name("etcd".into()),
            pki_group: AccountRef::Id(65534),
            ca_file: None,
            allow_http: false,
            timeout_seconds: 30,
            retries: 3,
            max_bytes: 256 << 20,
        }
    }
}

/// The bundle's validated settings: a URL always pinned, the layout resolved (`auto` from the
/// node's role), custom rules only with the custom layout, bounds checked.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `None`: no bundle.
    pub(crate) source: Option<Source>,
    /// Always set when `source` is a URL.
    pub sha256: Option<Sha256Hex>,
    pub layout: Layout,
    /// `layout` came from `node.role` (`layout = "auto"`).
    pub layout_from_role: bool,
    pub(crate) unmatched: Unmatched,
    etcd_user: AccountRef,
    pki_group: AccountRef,
    custom_rules: Vec<Rule>,
    ca_file: Option<AbsPath>,
    allow_http: bool,
    timeout: Duration,
    retries: u32,
    /// The largest bundle accepted, in bytes (at least 1).
    pub max_bytes: u64,
}

/// Which rules place the bundle's entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    Controller,
    Worker,
    Custom,
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Layout::Controller => "controller",
            Layout::Worker => "worker",
            Layout::Custom => "custom",
        }
    }
}

impl Settings {
    /// Validates `[bundle]` for a node of `role`; errors name the key to blame.
    pub(crate) fn from_input(input: BundleInput, role: Role) -> Result<Settings, KeyError> {
        if matches!(input.source, Some(Source::Url(_))) && input.sha256.is_none() {
            return Err(KeyError::new(
                "bundle.source",
                "a URL needs bundle.sha256 (the digest the download must have)",
            ));
        }
        if input.max_bytes == 0 {
            return Err(KeyError::new("bundle.max_bytes", "must be positive"));
        }
        if !(1..=3600).contains(&input.timeout_seconds) {
            return Err(KeyError::new("bundle.timeout_seconds", "must be from 1 to 3600"));
        }
        if input.retries > 100 {
            return Err(KeyError::new("bundle.retries", "must be at most 100"));
        }
        let (layout, layout_from_role) = match (input.layout, role) {
            (LayoutChoice::Auto, Role::Controller) => (Layout::Controller, true),
            (LayoutChoice::Auto, Role::Worker) => (Layout::Worker, true),
            (LayoutChoice::Controller, _) => (Layout::Controller, false),
            (LayoutChoice::Worker, _) => (Layout::Worker, false),
            (LayoutChoice::Custom, _) => (Layout::Custom, false),
        };
        let mut settings = Settings {
            source: input.source,
            sha256: input.sha256,
            layout: Layout::Worker,
            layout_from_role,
            unmatched: input.unmatched,
            etcd_user: input.etcd_user,
            pki_group: input.pki_group,
            custom_rules: input.rules,
            ca_file: input.ca_file,
            allow_http: input.allow_http,
            timeout: Duration::from_secs(input.timeout_seconds),
            retries: input.retries,
            max_bytes: input.max_bytes,
        };
        if layout != Layout::Custom && !settings.custom_rules.is_empty() {
            return Err(KeyError::new(
                "bundle.rules",
                "rules are only used with layout = \"custom\"",
            ));
        }
        settings.relayout(layout, layout_from_role)?;
        Ok(settings)
    }

    /// Places entries by `layout` instead (`nodeward bundle verify --layout`, another node's bundle).
    pub fn relayout(&mut self, layout: Layout, from_role: bool) -> Result<(), KeyError> {
        if layout == Layout::Custom && self.custom_rules.is_empty() {
            return Err(KeyError::new(
                "bundle.rules",
                "layout = \"custom\" needs at least one rule",
            ));
        }
        self.layout = layout;
        self.layout_from_role = from_role;
        Ok(())
    }

    /// The rules of the layout, first match wins.
    pub(crate) fn rules(&self) -> Vec<Rule> {
        match self.layout {
            Layout::Custom => self.custom_rules.clone(),
            Layout::Controller => layout::controller(&self.etcd_user, &self.pki_group),
            Layout::Worker => layout::worker(),
        }
    }

    /// How a download goes: its deadline, retries, trust, size cap and pin.
    pub(crate) fn fetch_options(&self) -> Options {
        Options {
            ca_file: self.ca_file.clone(),
            allow_http: self.allow_http,
            timeout: self.timeout,
            retries: self.retries,
            // Waits between 1 s and 2, 4, 8 … s (bundle/fetch.rs).
            backoff: Duration::from_secs(2),
            max_bytes: self.max_bytes,
            pinned: self.sha256.as_ref().map(|h| h.as_str().to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url() -> BundleInput {
        BundleInput {
            source: "https://assets.example/bundle".parse().ok(),
            ..BundleInput::default()
        }
    }

    #[test]
    fn a_url_without_a_pin_is_blamed_on_the_source() {
        let e = Settings::from_input(url(), Role::Worker).expect_err("unpinned");
        assert_eq!(e.key, "bundle.source");
        let pinned = BundleInput {
            sha256: "ab".repeat(32).parse().ok(),
            ..url()
        };
        assert!(Settings::from_input(pinned, Role::Worker).is_ok());
    }

    #[test]
    fn auto_follows_the_role_and_rules_need_custom() {
        let s = Settings::from_input(BundleInput::default(), Role::Controller).expect("valid");
        assert_eq!((s.layout, s.layout_from_role), (Layout::Controller, true));
        let custom = BundleInput {
            layout: LayoutChoice::Custom,
            ..BundleInput::default()
        };
        let e = Settings::from_input(custom, Role::Worker).expect_err("no rules");
        assert_eq!(e.key, "bundle.rules");
        let mut s = Settings::from_input(BundleInput::default(), Role::Worker).expect("valid");
        assert_eq!(
            s.relayout(Layout::Custom, false).map_err(|e| e.key),
            Err("bundle.rules".to_owned())
        );
        assert_eq!(s.layout, Layout::Worker);
    }

    #[test]
    fn bounds_name_their_key() {
        for (input, key) in [
            (
                BundleInput {
                    max_bytes: 0,
                    ..BundleInput::default()
                },
                "bundle.max_bytes",
            ),
            (
                BundleInput {
                    timeout_seconds: 0,
                    ..BundleInput::default()
                },
                "bundle.timeout_seconds",
            ),
            (
                BundleInput {
                    retries: 101,
                    ..BundleInput::default()
                },
                "bundle.retries",
            ),
        ] {
            assert_eq!(
                Settings::from_input(input, Role::Worker)
                    .map_err(|e| e.key)
                    .err()
                    .as_deref(),
                Some(key)
            );
        }
    }
}
