//! What a configuration section's owner answers when its input breaks a rule: the key to blame and
//! why. It sits at the bottom so that every owner (the bundle, FleetLock, the kubelet's section…)
//! can return it; the configuration loader adds the file and line that set the key.

/// One rule a section's input breaks: the dotted key to blame (`bundle.source`,
/// `sysctl."net.ipv4.ip_forward"`) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct KeyError {
    pub(crate) key: String,
    pub(crate) message: String,
}

impl KeyError {
    pub(crate) fn new(key: impl Into<String>, message: impl Into<String>) -> KeyError {
        KeyError {
            key: key.into(),
            message: message.into(),
        }
    }
}

/// Appends `key` to a dotted key, quoting it when it is not a bare TOML key.
pub(crate) fn dotted(prefix: &str, key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    let key = if bare {
        key.to_owned()
    } else {
        toml::Value::String(key.to_owned()).to_string()
    };
    if prefix.is_empty() {
        key
    } else {
        format!("{prefix}.{key}")
    }
}
