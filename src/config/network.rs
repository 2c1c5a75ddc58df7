//! `[networkmanager]` and `[networkd]`: the CNI's interfaces kept away from the host's network
//! managers. Validated here: each item of the lists one spec or one name glob, none matching the
//! uplink.

use serde::{Deserialize, Serialize};

use super::cni::{self, Cni};
use crate::setting::KeyError;

/// Keeping NetworkManager off the interfaces the CNI manages.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetworkManagerInput {
    /// `auto`: when NetworkManager is installed; `never`: leave it alone.
    pub(crate) manage: NmPolicy,
    /// NetworkManager device specs to leave unmanaged (keyfile `unmanaged-devices`).
    pub(crate) unmanaged: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum NmPolicy {
    #[default]
    Auto,
    Never,
}

impl NetworkManagerInput {
    /// The defaults for a CNI profile.
    pub(crate) fn for_cni(cni: Cni) -> Self {
        NetworkManagerInput {
            manage: NmPolicy::Auto,
            unmanaged: cni::unmanaged(cni),
        }
    }
}

/// `[networkd]`: systemd-networkd (Flatcar's network manager) kept off the CNI's interfaces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetworkdInput {
    /// `auto`: where systemd-networkd is installed; `never`: leave it alone.
    pub(crate) manage: NmPolicy,
    /// Interface names (globs, as `.network` `[Match] Name=` takes them) networkd must not manage.
    pub(crate) unmanaged: Vec<String>,
}

impl NetworkdInput {
    /// The defaults for a CNI profile: the same interfaces as NetworkManager's.
    pub(crate) fn for_cni(cni: Cni) -> Self {
        NetworkdInput {
            manage: NmPolicy::Auto,
            unmanaged: cni::interface_names(cni),
        }
    }
}

impl Default for NetworkdInput {
    fn default() -> Self {
        NetworkdInput::for_cni(Cni::Any)
    }
}

impl Default for NetworkManagerInput {
    fn default() -> Self {
        NetworkManagerInput::for_cni(Cni::Any)
    }
}

/// NetworkManager's validated settings.
#[derive(Debug, Clone)]
pub(crate) struct NetworkManagerSettings {
    pub(crate) manage: NmPolicy,
    /// Device specs, each one spec (no `;` or `,`), none matching every interface.
    pub(crate) unmanaged: Vec<String>,
}

/// systemd-networkd's validated settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NetworkdSettings {
    pub(crate) manage: NmPolicy,
    /// Interface-name globs as `Name=` takes them, none matching every interface.
    pub(crate) unmanaged: Vec<String>,
}

/// A pattern of wildcards only matches every link, the uplink among them.
fn matches_everything(glob: &str) -> bool {
    !glob.is_empty() && glob.chars().all(|c| c == '*' || c == '?')
}

fn uplink_too(key: &str, item: &str) -> KeyError {
    KeyError::new(
        key,
        format!("{item:?} matches every interface, the uplink too: the node would go off the network"),
    )
}

impl NetworkManagerSettings {
    pub(crate) fn from_input(input: NetworkManagerInput) -> Result<NetworkManagerSettings, KeyError> {
        const KEY: &str = "networkmanager.unmanaged";
        for spec in &input.unmanaged {
            // Only interface names can be checked against the default route's link: `except:`
            // matches every other device, and a spec by `type:`, `driver:`, `mac:` (or a bare MAC
            // address) can name the uplink without naming it (NetworkManager's
            // `nm_match_spec_device`). The CNI profiles use `interface-name:` alone.
            if let Some((kind, _)) = spec.split_once(':').filter(|(k, _)| *k != "interface-name") {
                let why = if kind == "except" {
                    "\"except:\" matches every other device, the uplink too".to_owned()
                } else {
                    format!(
                        "a {kind:?} spec can match the uplink without naming it (nodeward checks interface names against the default route's link); name the CNI's interfaces with interface-name: globs"
                    )
                };
                return Err(KeyError::new(KEY, format!("{spec:?}: {why}")));
            }
            let glob = spec
                .strip_prefix("interface-name:")
                .map_or(spec.as_str(), |g| g.trim_start_matches(['=', '~']));
            if matches_everything(glob) {
                return Err(uplink_too(KEY, spec));
            }
            // `;` and `,` both separate specs in NetworkManager's lists.
            if spec.is_empty() || spec.contains([';', ',']) || spec.chars().any(char::is_control) {
                return Err(KeyError::new(KEY, format!("{spec:?} is not a device spec")));
            }
        }
        Ok(NetworkManagerSettings {
            manage: input.manage,
            unmanaged: input.unmanaged,
        })
    }
}

impl NetworkdSettings {
    pub(crate) fn from_input(input: NetworkdInput) -> Result<NetworkdSettings, KeyError> {
        const KEY: &str = "networkd.unmanaged";
        for name in &input.unmanaged {
            if matches_everything(name) {
                return Err(uplink_too(KEY, name));
            }
            // systemd-networkd inverts a `Name=` list that starts with `!` (and each `!` word):
            // `!eth0` matches every interface but eth0, the uplink among them.
            if name.starts_with('!') {
                return Err(KeyError::new(
                    KEY,
                    format!(
                        "{name:?}: networkd reads a leading \"!\" as \"every interface but\": it would match the uplink too"
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
                return Err(KeyError::new(
                    KEY,
                    format!(
                        "{name:?} is not an interface name glob (at most 15 of A-Z a-z 0-9 - _ . @ : and * ? [ ] !)"
                    ),
                ));
            }
        }
        Ok(NetworkdSettings {
            manage: input.manage,
            unmanaged: input.unmanaged,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_profiles_lists_are_valid() {
        for cni in Cni::ALL {
            assert!(NetworkManagerSettings::from_input(NetworkManagerInput::for_cni(cni)).is_ok());
            assert!(NetworkdSettings::from_input(NetworkdInput::for_cni(cni)).is_ok());
        }
    }

    #[test]
    fn a_pattern_matching_the_uplink_is_refused() {
        for spec in ["*", "interface-name:*", "interface-name:=?*"] {
            let input = NetworkManagerInput {
                unmanaged: vec![spec.into()],
                ..NetworkManagerInput::default()
            };
            let e = NetworkManagerSettings::from_input(input).expect_err(spec);
            assert!(e.message.contains("uplink"), "{e}");
        }
        // Specs that match the uplink without naming it, and networkd's inversion.
        for spec in [
            "except:interface-name:eth0",
            "type:ethernet",
            "driver:virtio_net",
            "mac:*",
            "52:54:00:12:34:56",
        ] {
            let input = NetworkManagerInput {
                unmanaged: vec!["interface-name:cali*".into(), spec.into()],
                ..NetworkManagerInput::default()
            };
            let e = NetworkManagerSettings::from_input(input).expect_err(spec);
            assert!(e.message.contains("uplink") && e.message.contains(spec), "{e}");
        }
        let input = NetworkdInput {
            unmanaged: vec!["cali*".into(), "!eth0".into()],
            ..NetworkdInput::default()
        };
        let e = NetworkdSettings::from_input(input).expect_err("!eth0");
        assert!(e.message.contains("every interface but"), "{e}");
        // Control: a class negation inside brackets is a glob, and interface-name specs pass.
        let input = NetworkdInput {
            unmanaged: vec!["veth[!0]*".into()],
            ..NetworkdInput::default()
        };
        assert!(NetworkdSettings::from_input(input).is_ok());
        let input = NetworkManagerInput {
            unmanaged: vec!["interface-name:~cali*".into(), "flannel.1".into()],
            ..NetworkManagerInput::default()
        };
        assert!(NetworkManagerSettings::from_input(input).is_ok());
        let input = NetworkdInput {
            unmanaged: vec!["eth0;rm".into()],
            ..NetworkdInput::default()
        };
        assert_eq!(
            NetworkdSettings::from_input(input)
                .map_err(|e| e.key)
                .err()
                .as_deref(),
            Some("networkd.unmanaged")
        );
    }
}
