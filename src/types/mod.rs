//! Validated value types. Each parses from the string form operators write, and a bad value cannot
//! exist past the parser; because they validate inside serde, a TOML error names file, line and key.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

mod invalid;
pub use invalid::Invalid;

/// Implements `Serialize`/`Deserialize` through `Display`/`FromStr`.
macro_rules! string_serde {
    ($ty:ty, $what:literal) => {
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let raw = String::deserialize(d)?;
                raw.parse()
                    .map_err(|e: Invalid| serde::de::Error::custom(format!("invalid {}: {e}", $what)))
            }
        }
    };
}

pub(crate) mod image;
mod path;
pub use image::ImageRef;
pub use path::AbsPath;

/// A built-in [`AbsPath`] checked when the crate compiles: a bad constant is a build error, so no
/// run-time parse and no `panic!` stand behind the defaults.
#[macro_export]
macro_rules! abs_path {
    ($s:literal) => {{
        const _: () = assert!(
            $crate::types::AbsPath::is_valid_const($s),
            concat!("not an absolute path: ", $s)
        );
        $crate::types::AbsPath::from_checked_const($s)
    }};
}

/// A file mode's permission bits (`0o7777` at most), written as an octal string such as `"0750"`.
/// Integers are refused on purpose: `mode = 755` in TOML is decimal and would mean `0o1363`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mode(u32);

impl Mode {
    pub(crate) const fn new(bits: u32) -> Mode {
        Mode(bits & 0o7777)
    }
    pub(crate) fn bits(self) -> u32 {
        self.0
    }
}

impl Mode {
    fn parse_str(s: &str) -> Result<Self, String> {
        let digits = s.strip_prefix("0o").unwrap_or(s);
        if digits.is_empty() || digits.len() > 5 || !digits.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
            return Err(format!("{s:?} is not an octal mode such as \"0755\""));
        }
        let bits = u32::from_str_radix(digits, 8).map_err(|e| format!("{s:?}: {e}"))?;
        if bits > 0o7777 {
            return Err(format!("{s:?} is larger than 07777"));
        }
        Ok(Mode(bits))
    }
}

impl FromStr for Mode {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<Self, Invalid> {
        Self::parse_str(s).map_err(Invalid)
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04o}", self.0)
    }
}
impl Serialize for Mode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Mode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Mode;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an octal mode string such as \"0755\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Mode, E> {
                v.parse()
                    .map_err(|e: Invalid| E::custom(format!("invalid mode: {e}")))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Mode, E> {
                Err(E::custom(format!(
                    "mode {v} is a TOML integer; write modes as octal strings such as \"0{v}\""
                )))
            }
        }
        d.deserialize_any(V)
    }
}

/// A user or group as configured: a name resolved from the root's account files, or a number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccountRef {
    Name(String),
    Id(u32),
}

impl AccountRef {
    fn parse_str(s: &str) -> Result<Self, String> {
        if let Ok(id) = s.parse::<u32>() {
            return Ok(AccountRef::Id(id));
        }
        let valid = !s.is_empty()
            && s.len() <= 32
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
            && !s.starts_with('-');
        if !valid {
            return Err(format!("{s:?} is not a user/group name or number"));
        }
        Ok(AccountRef::Name(s.to_owned()))
    }
}

impl FromStr for AccountRef {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<Self, Invalid> {
        Self::parse_str(s).map_err(Invalid)
    }
}

impl fmt::Display for AccountRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AccountRef::Name(n) => f.write_str(n),
            AccountRef::Id(id) => write!(f, "{id}"),
        }
    }
}
string_serde!(AccountRef, "user or group");

/// An SELinux file context `user:role:type:level` (the level may itself hold `:` and `,`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SelinuxContext(String);

impl SelinuxContext {}

impl SelinuxContext {
    /// Whether `s` passes the parser, decided at compile time for the built-in context.
    pub(crate) const fn is_valid_const(s: &str) -> bool {
        let b = s.as_bytes();
        let (mut i, mut colons, mut field_len) = (0, 0, 0);
        while i < b.len() {
            let c = b[i];
            if c == b':' && colons < 3 {
                if field_len == 0 {
                    return false;
                }
                colons += 1;
                field_len = 0;
            } else if c.is_ascii_alphanumeric()
                || c == b'_'
                || c == b'.'
                || c == b','
                || c == b'-'
                || c == b':'
            {
                field_len += 1;
            } else {
                return false;
            }
            i += 1;
        }
        colons == 3 && field_len > 0
    }

    /// A built-in context whose validity a `const` assertion proved.
    pub(crate) fn from_checked_const(s: &'static str) -> SelinuxContext {
        SelinuxContext(s.to_owned())
    }

    fn parse_str(s: &str) -> Result<Self, String> {
        let fields: Vec<&str> = s.splitn(4, ':').collect();
        let charset_ok = s
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.:,-".contains(&b));
        if fields.len() != 4 || fields.iter().any(|f| f.is_empty()) || !charset_ok {
            return Err(format!(
                "{s:?} is not a context such as \"system_u:object_r:container_file_t:s0\""
            ));
        }
        Ok(SelinuxContext(s.to_owned()))
    }
}

impl FromStr for SelinuxContext {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<Self, Invalid> {
        Self::parse_str(s).map_err(Invalid)
    }
}

impl fmt::Display for SelinuxContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
string_serde!(SelinuxContext, "SELinux context");

/// An RFC 1123 host name, as Kubernetes accepts for a node name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hostname(String);

impl Hostname {
    fn parse_str(s: &str) -> Result<Self, String> {
        if !is_dns_subdomain(s) {
            return Err(format!("{s:?} is not a lowercase RFC 1123 name"));
        }
        Ok(Hostname(s.to_owned()))
    }
}

impl FromStr for Hostname {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<Self, Invalid> {
        Self::parse_str(s).map_err(Invalid)
    }
}

impl fmt::Display for Hostname {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
string_serde!(Hostname, "hostname");

/// A DNS subdomain: dot-separated labels of `[a-z0-9-]`, not starting/ending with `-`, ≤ 253 bytes.
fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// A Kubernetes qualified name (label or taint key): optional `prefix/` DNS subdomain, then a name of
/// at most 63 characters of `[A-Za-z0-9._-]`, starting and ending alphanumeric.
fn is_qualified_name(s: &str) -> bool {
    let (prefix, name) = match s.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    prefix.is_none_or(is_dns_subdomain) && is_label_value(name) && !name.is_empty()
}

/// A label value: empty, or ≤ 63 characters of `[A-Za-z0-9._-]` starting and ending alphanumeric.
fn is_label_value(s: &str) -> bool {
    s.is_empty()
        || (s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
            && s.as_bytes()[0].is_ascii_alphanumeric()
            && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric())
}

/// A node label key; values are checked by [`LabelValue`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct LabelKey(String);

impl LabelKey {
    fn parse_str(s: &str) -> Result<Self, String> {
        if !is_qualified_name(s) {
            return Err(format!("{s:?} is not a Kubernetes label key"));
        }
        Ok(LabelKey(s.to_owned()))
    }
}

impl FromStr for LabelKey {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<Self, Invalid> {
        Self::parse_str(s).map_err(Invalid)
    }
}
impl fmt::Display for LabelKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
string_serde!(LabelKey, "label key");

/// Labels in the `kubernetes.io`/`k8s.io` namespaces the kubelet may set on its own node (the
/// NodeRestriction rules the kubelet also enforces at start: `kubelet --node-labels` refuses any
/// other label there and the kubelet never starts).
const KUBELET_LABELS: &[&str] = &[
    "kubernetes.io/hostname",
    "kubernetes.io/arch",
    "kubernetes.io/os",
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "failure-domain.beta.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
];
/// Namespaces (and their subdomains) whose labels the kubelet may set.
const KUBELET_LABEL_NAMESPACES: &[&str] = &["kubelet.kubernetes.io", "node.kubernetes.io"];

impl LabelKey {
    /// Whether the kubelet accepts this key in `--node-labels`; `Err` says why not.
    pub(crate) fn kubelet_may_set(&self) -> Result<(), Invalid> {
        let Some((ns, _)) = self.0.rsplit_once('/') else {
            return Ok(());
        };
        let within = |ns: &str, domain: &str| ns == domain || ns.ends_with(&format!(".{domain}"));
        let reserved = within(ns, "kubernetes.io") || within(ns, "k8s.io");
        if !reserved
            || KUBELET_LABELS.contains(&self.0.as_str())
            || KUBELET_LABEL_NAMESPACES.iter().any(|allowed| within(ns, allowed))
        {
            return Ok(());
        }
        Err(Invalid(format!(
            "{:?} is in the reserved {ns} namespace and the kubelet refuses to set it (it would not \
             start); use a label under node.kubernetes.io/ or your own prefix, and set role labels \
             such as node-role.kubernetes.io/* from the API",
            self.0
        )))
    }
}

/// A node label value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LabelValue(String);

impl LabelValue {
    fn parse_str(s: &str) -> Result<Self, String> {
        if !is_label_value(s) {
            return Err(format!("{s:?} is not a Kubernetes label value"));
        }
        Ok(LabelValue(s.to_owned()))
    }
}

impl FromStr for LabelValue {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<Self, Invalid> {
        Self::parse_str(s).map_err(Invalid)
    }
}
impl fmt::Display for LabelValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
string_serde!(LabelValue, "label value");

/// A taint `key[=value]:Effect` as `--register-with-taints` takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Taint(String);

impl Taint {
    fn parse_str(s: &str) -> Result<Self, String> {
        let (kv, effect) = s
            .rsplit_once(':')
            .ok_or_else(|| format!("{s:?} is not a taint such as \"key=value:NoSchedule\""))?;
        if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
            return Err(format!(
                "{s:?}: effect {effect:?} is not NoSchedule, PreferNoSchedule or NoExecute"
            ));
        }
        let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
        if !is_qualified_name(key) || !is_label_value(value) {
            return Err(format!("{s:?} has an invalid key or value"));
        }
        Ok(Taint(s.to_owned()))
    }
}

impl Taint {
    /// `key`, `value` (empty when none) and `effect`: `k:E` and `k=:E` are the same taint, as the
    /// kubelet parses them.
    fn parts(&self) -> (&str, &str, &str) {
        let (kv, effect) = self.0.rsplit_once(':').unwrap_or((&self.0, ""));
        let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
        (key, value, effect)
    }
    pub(crate) fn key(&self) -> &str {
        self.parts().0
    }
    pub(crate) fn value(&self) -> &str {
        self.parts().1
    }
    pub(crate) fn effect(&self) -> &str {
        self.parts().2
    }
}

impl FromStr for Taint {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<Self, Invalid> {
        Self::parse_str(s).map_err(Invalid)
    }
}
impl fmt::Display for Taint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
string_serde!(Taint, "taint");

/// What this node is in the cluster: `worker` or `controller` (`node.role`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Controller,
    #[default]
    Worker,
}

/// The CNI a node runs (`node.cni`): the host settings that depend on it are `config::cni`'s
/// profiles, one row per name here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Cni {
    /// Not declared: settings safe under every CNI below.
    #[default]
    Any,
    Cilium,
    Flannel,
    Calico,
    /// No CNI-specific host settings at all (a CNI nodeward does not know, or none yet).
    None,
}

impl Cni {
    /// Every CNI, in the profile table's order.
    pub(crate) const ALL: [Cni; 5] = [Cni::Any, Cni::Calico, Cni::Cilium, Cni::Flannel, Cni::None];

    /// Its name in the configuration.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Cni::Any => "any",
            Cni::Calico => "calico",
            Cni::Cilium => "cilium",
            Cni::Flannel => "flannel",
            Cni::None => "none",
        }
    }
}

impl fmt::Display for Cni {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Cni {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<Self, Invalid> {
        Cni::ALL.into_iter().find(|c| c.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Cni::ALL.iter().map(|c| c.name()).collect();
            Invalid(format!("{s:?} is not one of {}", names.join(", ")))
        })
    }
}

/// A container engine that can run the kubelet, by the name its program has and `kubelet.runtime`
/// takes. Only a name: each engine declares its own in its file (`kubelet/runtime/`) and its
/// registry line lists it; no list of engines lives here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EngineKind(&'static str);

impl EngineKind {
    /// An engine's name, for its own file's `KIND`.
    pub(crate) const fn new(name: &'static str) -> EngineKind {
        EngineKind(name)
    }

    /// Its name: the program's, and what `kubelet.runtime` says.
    pub fn name(self) -> &'static str {
        self.0
    }
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl Serialize for EngineKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_context_const_check_agrees_with_the_parser() {
        for s in [
            "system_u:object_r:container_file_t:s0",
            "a:b:c:s0:c1,c2",
            "a:b:c",
            "a::c:d",
            "a:b:c:",
            "a:b:c:d e",
            "",
        ] {
            assert_eq!(
                SelinuxContext::is_valid_const(s),
                s.parse::<SelinuxContext>().is_ok(),
                "{s:?}"
            );
        }
    }

    #[test]
    fn modes_are_octal_strings_only() {
        assert_eq!("0750".parse::<Mode>().expect("mode").bits(), 0o750);
        assert_eq!("755".parse::<Mode>().expect("mode").bits(), 0o755);
        assert_eq!("0o1777".parse::<Mode>().expect("mode").bits(), 0o1777);
        for bad in ["", "0800", "17777", "rwx", "-1"] {
            assert!(bad.parse::<Mode>().is_err(), "{bad:?} accepted");
        }
        assert_eq!(Mode::new(0o750).to_string(), "0750");
    }

    #[test]
    fn accounts_by_name_or_number() {
        assert_eq!("0".parse::<AccountRef>(), Ok(AccountRef::Id(0)));
        assert_eq!("etcd".parse::<AccountRef>(), Ok(AccountRef::Name("etcd".into())));
        assert!("bad:name".parse::<AccountRef>().is_err());
        assert!("-x".parse::<AccountRef>().is_err());
    }

    #[test]
    fn selinux_contexts_need_four_fields() {
        assert!(
            "system_u:object_r:container_file_t:s0"
                .parse::<SelinuxContext>()
                .is_ok()
        );
        assert!(
            "system_u:object_r:svirt_sandbox_file_t:s0:c1,c2"
                .parse::<SelinuxContext>()
                .is_ok()
        );
        for bad in ["container_file_t", "a:b:c", "a::c:s0", "a:b:c:s0 x"] {
            assert!(bad.parse::<SelinuxContext>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn kubernetes_names() {
        assert!("node.kubernetes.io/controller".parse::<LabelKey>().is_ok());
        assert!("-bad".parse::<LabelKey>().is_err());
        let may = |k: &str| k.parse::<LabelKey>().expect("key").kubelet_may_set();
        for ok in [
            "node.kubernetes.io/node",
            "node.kubernetes.io/controller",
            "x.node.kubernetes.io/y",
            "kubelet.kubernetes.io/z",
            "topology.kubernetes.io/zone",
            "example.com/pool",
            "plain",
        ] {
            assert!(may(ok).is_ok(), "{ok}");
        }
        for bad in [
            "node-role.kubernetes.io/worker",
            "kubernetes.io/role",
            "k8s.io/x",
            "foo.k8s.io/x",
            "topology.kubernetes.io/other",
        ] {
            assert!(may(bad).is_err(), "{bad}");
        }
        assert!("true".parse::<LabelValue>().is_ok());
        assert!("".parse::<LabelValue>().is_ok());
        assert!("a b".parse::<LabelValue>().is_err());
        assert!(
            "node-role.kubernetes.io/controller=:NoSchedule"
                .parse::<Taint>()
                .is_ok()
        );
        assert!("dedicated=gpu:NoExecute".parse::<Taint>().is_ok());
        assert!("dedicated=gpu".parse::<Taint>().is_err());
        assert!("dedicated=gpu:Never".parse::<Taint>().is_err());
        assert!("worker-1".parse::<Hostname>().is_ok());
        assert!("Worker_1".parse::<Hostname>().is_err());
    }
}
