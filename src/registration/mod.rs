//! The node's registration: who the node is to the API server. Its name (or where the name comes
//! from), role, labels, taints, provider id and address are validated here from `[node]`
//! ([`Registration::from_input`]), resolved here against the host (the name, the metadata:
//! [`Registration::resolve`]) and routed here to the kubelet's command line or its
//! KubeletConfiguration (`route`). The kubelet's spec takes the routed values as they are; it
//! reads no identity setting of its own.
//!
//! A key's walk, `node.taints`: `input.rs` declares it; `from_input` below merges the role's
//! taints with it (`policy`); `route.rs` puts the list in `--register-with-taints` or in
//! `registerWithTaints`; `kubelet/spec.rs` or `kubelet/config_file.rs` writes what it is given.

pub(crate) mod input;
pub(crate) mod metadata;
pub(crate) mod node_ip;
pub(crate) mod policy;
pub(crate) mod provider_id;
pub mod route;

use std::collections::BTreeMap;

use crate::setting::{KeyError, dotted};
use crate::types::{AbsPath, Hostname, LabelKey, LabelValue, Role, Taint};
use input::{Legacy, NodeInput};
use metadata::{METADATA_FILES, TemplateError, expand, template_vars};
use node_ip::NodeIp;

/// The node's identity, validated: what the kubelet registers it as.
#[derive(Debug, Clone, Default)]
pub struct Registration {
    pub(crate) role: Role,
    /// `node.hostname`: the name, whatever the host or the metadata say.
    pub(crate) hostname: Option<Hostname>,
    /// `node.name_from`: the metadata variable that names the node.
    pub(crate) name_from: Option<String>,
    /// `node.provider_id`: a `${NAME}` template over the metadata.
    pub(crate) provider_id: Option<String>,
    /// `node.metadata_file`: where the metadata is; unset, the first of [`METADATA_FILES`].
    pub(crate) metadata_file: Option<AbsPath>,
    /// `node.ip`.
    pub(crate) ip: Option<NodeIp>,
    /// The labels the node registers with: the role's, then `node.labels`, each key once.
    pub(crate) labels: Vec<(LabelKey, LabelValue)>,
    /// The taints the node registers with: the role's, then `node.taints`, each key and effect once.
    pub(crate) taints: Vec<Taint>,
}

/// What the host tells the registration: its host name and its cloud metadata.
#[derive(Debug, Clone, Copy)]
pub struct Seen<'a> {
    /// The host name (the node's name when nothing else gives one).
    pub hostname: &'a str,
    /// The metadata file read and its variables; `None`: no file yet.
    pub metadata: Option<&'a (String, BTreeMap<String, String>)>,
    /// The metadata file is there but cannot be read.
    pub metadata_error: Option<&'a str>,
}

/// The identity resolved against the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub name: String,
    pub provider_id: Option<String>,
}

/// Why the identity cannot be resolved yet. Each is a wait, retried (Typhoon's units wait on
/// afterburn and DHCP the same way), but [`Unresolved::BadMetadata`], which only a fix ends.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Unresolved {
    #[error(
        "the host name is {0:?}, not a node name yet (waiting for DHCP or Ignition?); set node.hostname to override"
    )]
    NoHostname(String),
    #[error("waiting for cloud metadata: {key} needs {name}, and {file} {state}")]
    NoMetadata {
        key: &'static str,
        name: String,
        file: String,
        state: &'static str,
    },
    /// The metadata file cannot be read, or gives a value the kubelet must not get.
    #[error("cloud metadata: {0}")]
    BadMetadata(String),
}

impl Registration {
    /// `[node]` validated, with the identity keys still read under their 0.1 names in `[kubelet]`
    /// (`legacy`), and the kubelet's `--cloud-provider` (a dual-stack `node.ip` needs none or
    /// `external`).
    pub(crate) fn from_input(
        node: NodeInput,
        legacy: Legacy,
        cloud_provider: Option<&str>,
    ) -> Result<Registration, KeyError> {
        for key in node.labels.keys() {
            key.kubelet_may_set()
                .map_err(|m| KeyError::new(dotted("node.labels", &key.to_string()), m.0))?;
        }
        let user_labels: Vec<(LabelKey, LabelValue)> = node.labels.into_iter().collect();
        let labels = policy::merge_labels(&policy::role_labels(node.role), &user_labels)
            .map_err(|(key, m)| KeyError::new(dotted("node.labels", &key.to_string()), m))?;
        let taints = policy::merge_taints(&policy::role_taints(node.role), &node.taints)
            .map_err(|e| KeyError::new("node.taints", e.to_string()))?;
        let provider_id = renamed(
            (node.provider_id, "node.provider_id"),
            (legacy.provider_id, "kubelet.provider_id"),
        )?;
        if let Some(t) = &provider_id {
            check_template("node.provider_id", t)?;
        }
        let name_from = renamed(
            (node.name_from, "node.name_from"),
            (legacy.node_name_from, "kubelet.node_name_from"),
        )?;
        if let Some(v) = &name_from {
            template_vars(&format!("${{{v}}}"))
                .map_err(|e| KeyError::new("node.name_from", e.to_string()))?;
        }
        let metadata_file = renamed(
            (node.metadata_file, "node.metadata_file"),
            (legacy.metadata_file, "kubelet.metadata_file"),
        )?;
        if let Some(ip) = &node.ip {
            if ip.dual_stack() && !matches!(cloud_provider, None | Some("external")) {
                return Err(KeyError::new(
                    "node.ip",
                    format!(
                        "{ip}: the kubelet takes a dual-stack pair only with no cloud provider or \"external\" (kubelet.cloud_provider is {:?})",
                        cloud_provider.unwrap_or_default()
                    ),
                ));
            }
        }
        Ok(Registration {
            role: node.role,
            hostname: node.hostname,
            name_from,
            provider_id,
            metadata_file,
            ip: node.ip,
            labels,
            taints,
        })
    }

    /// The metadata files to read, in order: the configured one, else afterburn's and Flatcar's.
    pub(crate) fn metadata_files(&self) -> Vec<String> {
        match &self.metadata_file {
            Some(f) => vec![f.to_string()],
            None => METADATA_FILES.iter().map(|f| (*f).to_owned()).collect(),
        }
    }

    /// The name and provider id on this host, or what they wait for.
    pub fn resolve(&self, seen: Seen<'_>) -> Result<Resolved, Unresolved> {
        let name = self.name(seen)?;
        let provider_id = match &self.provider_id {
            None => None,
            Some(t) => {
                let id = self.metadata_value("node.provider_id", t, seen)?;
                provider_id::check_provider_id(&id).map_err(|rule| {
                    let file = seen.metadata.map_or("", |(f, _)| f.as_str());
                    Unresolved::BadMetadata(format!("{file}: node.provider_id would be {id:?}: {rule}"))
                })?;
                Some(id)
            }
        };
        Ok(Resolved { name, provider_id })
    }

    /// The node's name: `node.hostname`, else the metadata variable `node.name_from` names, else
    /// the host name, which must be a real one (not `localhost` before DHCP answers).
    fn name(&self, seen: Seen<'_>) -> Result<String, Unresolved> {
        if let Some(h) = &self.hostname {
            return Ok(h.to_string());
        }
        if let Some(var) = &self.name_from {
            let name = self
                .metadata_value("node.name_from", &format!("${{{var}}}"), seen)?
                .to_ascii_lowercase();
            if let Err(e) = name.parse::<Hostname>() {
                let file = seen.metadata.map_or("", |(f, _)| f.as_str());
                return Err(Unresolved::BadMetadata(format!(
                    "{file}: node.name_from gives {name:?}, not a node name (RFC 1123: {e})"
                )));
            }
            return Ok(name);
        }
        let h = seen.hostname.trim().to_ascii_lowercase();
        if h.is_empty() || h == "localhost" || h == "localhost.localdomain" || h.parse::<Hostname>().is_err()
        {
            return Err(Unresolved::NoHostname(seen.hostname.to_owned()));
        }
        Ok(h)
    }

    /// Expands a metadata template for `key`, or says what is missing.
    fn metadata_value(
        &self,
        key: &'static str,
        template: &str,
        seen: Seen<'_>,
    ) -> Result<String, Unresolved> {
        if let Some(e) = seen.metadata_error {
            return Err(Unresolved::BadMetadata(format!("{key} needs it: {e}")));
        }
        let empty = BTreeMap::new();
        let (file, vars) = match seen.metadata {
            Some((file, vars)) => (file.clone(), vars),
            None => (self.metadata_files().join(" or "), &empty),
        };
        expand(template, vars).map_err(|e| Unresolved::NoMetadata {
            key,
            // The templates were checked when the configuration was loaded: only a missing name
            // is left.
            name: match e {
                TemplateError::Missing(name) => name,
                other => other.to_string(),
            },
            state: if seen.metadata.is_some() {
                "does not have it"
            } else {
                "does not exist yet (afterburn not done?)"
            },
            file,
        })
    }
}

/// A key under its new name or its 0.1 name in `[kubelet]`; both set is an error naming both.
fn renamed<T>(new: (Option<T>, &str), old: (Option<T>, &str)) -> Result<Option<T>, KeyError> {
    match (new.0, old.0) {
        (Some(_), Some(_)) => Err(KeyError::new(
            new.1,
            format!("set here and under its old name {}: keep {} only", old.1, new.1),
        )),
        (a, b) => Ok(a.or(b)),
    }
}

/// A `${NAME}` template a provider id can be made from.
fn check_template(key: &str, t: &str) -> Result<(), KeyError> {
    if t.is_empty() || t.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(KeyError::new(key, format!("{t:?} is not a provider ID")));
    }
    template_vars(t).map_err(|e| KeyError::new(key, e.to_string()))?;
    Ok(())
}
