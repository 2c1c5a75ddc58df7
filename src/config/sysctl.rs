//! Sysctl keys, values and policies as configured, with the built-in defaults.
//!
//! Keys follow sysctl.d(5): if the first separator is `/`, slashes separate and dots are part of
//! names; if it is `.`, dots separate and slashes stand for dots inside a name. So
//! `net.ipv4.conf.eth0/100.rp_filter` and `net/ipv4/conf/eth0.100/rp_filter` both address VLAN
//! `eth0.100`. Keys are parsed into segments (never string-replaced), and a segment can be neither
//! empty nor `.`/`..`, so no key reaches outside `/proc/sys`.

use super::merge::dotted;
use crate::setting::KeyError;
use crate::types::Invalid;
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A parsed sysctl key: the path segments below `/proc/sys`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct SysctlKey {
    segments: Vec<String>,
}

impl SysctlKey {
    /// The path relative to `/proc/sys`.
    pub(crate) fn relative_path(&self) -> PathBuf {
        self.segments.iter().collect()
    }

    /// The path segments below `/proc/sys`.
    pub(crate) fn segments(&self) -> &[String] {
        &self.segments
    }

    /// A key from segments found in `/proc/sys` (a glob's expansion).
    pub(crate) fn from_segments(segments: Vec<String>) -> SysctlKey {
        SysctlKey { segments }
    }

    /// Whether a segment holds a glob (`net.ipv4.conf.*.rp_filter`): it names every matching key
    /// that has no entry of its own, as in sysctl.d(5).
    pub(crate) fn is_glob(&self) -> bool {
        self.segments.iter().any(|s| crate::glob::is_glob(s))
    }

    /// True when the key starts with the given dotted prefix segments (`["net", "bridge"]`).
    pub(crate) fn starts_with(&self, prefix: &[&str]) -> bool {
        self.segments.len() >= prefix.len() && self.segments.iter().zip(prefix).all(|(a, b)| a == b)
    }
}

/// The longest key: what fits below `/proc/sys/` in a path the kernel takes (PATH_MAX).
pub(crate) const MAX_KEY_BYTES: usize = 4096 - "/proc/sys/".len();
/// The longest segment: a file or directory name (NAME_MAX).
const MAX_SEGMENT_BYTES: usize = 255;

/// A long key named by its start and length (a message quoting a megabyte is itself a bomb).
fn shown(s: &str) -> String {
    let start: String = s.chars().take(48).collect();
    if start.len() == s.len() {
        format!("{s:?}")
    } else {
        format!("{start:?}… ({} bytes)", s.len())
    }
}

impl SysctlKey {
    fn parse_str(s: &str) -> Result<Self, String> {
        if s.is_empty() {
            return Err("empty sysctl key".into());
        }
        if s.len() > MAX_KEY_BYTES {
            return Err(format!(
                "{}: longer than any /proc/sys path (at most {MAX_KEY_BYTES} bytes)",
                shown(s)
            ));
        }
        if let Some(long) = s.split(['.', '/']).find(|seg| seg.len() > MAX_SEGMENT_BYTES) {
            return Err(format!(
                "{}: a name of {} bytes (at most {MAX_SEGMENT_BYTES})",
                shown(s),
                long.len()
            ));
        }
        if s.chars().any(|c| c.is_control() || c.is_whitespace() || c == '=') {
            return Err(format!(
                "{s:?}: whitespace, control characters and '=' are not allowed"
            ));
        }
        let slash_first = s.find(['.', '/']).is_some_and(|i| s.as_bytes()[i] == b'/');
        let segments: Vec<String> = if slash_first {
            s.split('/').map(str::to_owned).collect()
        } else {
            s.split('.').map(|seg| seg.replace('/', ".")).collect()
        };
        for seg in &segments {
            if seg.is_empty() {
                return Err(format!(
                    "{s:?}: empty segment (leading, trailing or doubled separator)"
                ));
            }
            if seg == "." || seg == ".." {
                return Err(format!("{s:?}: segment {seg:?} would leave /proc/sys"));
            }
        }
        if segments.len() < 2 {
            return Err(format!("{s:?}: not a sysctl key (needs at least two segments)"));
        }
        Ok(SysctlKey { segments })
    }
}

impl FromStr for SysctlKey {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<Self, Invalid> {
        Self::parse_str(s).map_err(Invalid)
    }
}

impl fmt::Display for SysctlKey {
    /// The canonical dotted form (dots inside names written as `/`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.segments.iter().map(|s| s.replace('.', "/")).collect();
        f.write_str(&parts.join("."))
    }
}

impl Serialize for SysctlKey {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for SysctlKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

/// A sysctl value as the kernel prints it, whitespace-normalised: fields of multi-field values
/// (`net.ipv4.ip_local_port_range = "32768 60999"`) are compared field by field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SysctlValue(String);

impl SysctlValue {
    pub(crate) fn new(raw: &str) -> SysctlValue {
        SysctlValue(raw.split_whitespace().collect::<Vec<_>>().join(" "))
    }
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
    /// The value as one unsigned number, if it is one.
    pub(crate) fn as_u64(&self) -> Option<u64> {
        self.0.parse().ok()
    }
}

impl fmt::Display for SysctlValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a key must be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SysctlPolicy {
    /// Exactly this value (booleans, modes such as rp_filter). Persisted in sysctl.d.
    Exact(SysctlValue),
    /// At least `min` and/or at most `max`: a larger host value is left alone (raise-only
    /// limits such as `nf_conntrack_max`). Never persisted as a fixed value.
    Range { min: Option<u64>, max: Option<u64> },
}

impl fmt::Display for SysctlPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SysctlPolicy::Exact(v) => write!(f, "= {v}"),
            SysctlPolicy::Range {
                min: Some(lo),
                max: Some(hi),
            } => write!(f, "in {lo}..={hi}"),
            SysctlPolicy::Range {
                min: Some(lo),
                max: None,
            } => write!(f, "≥ {lo}"),
            SysctlPolicy::Range {
                min: None,
                max: Some(hi),
            } => write!(f, "≤ {hi}"),
            SysctlPolicy::Range { min: None, max: None } => f.write_str("any"),
        }
    }
}

/// One configured key: a policy, or `None` when the entry drops a default (`{ enabled = false }`).
pub(crate) type SysctlTable = BTreeMap<SysctlKey, Option<SysctlPolicy>>;

/// The `[sysctl]` table, parsed and flattened. Accepts quoted keys (`"net.ipv4.ip_forward" = 1`)
/// and TOML dotted keys alike (`net.ipv4.ip_forward = 1` makes nested tables).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct SysctlSection(pub SysctlTable);

impl<'de> Deserialize<'de> for SysctlSection {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = toml::Table::deserialize(d)?;
        let flat = flatten(&raw).map_err(serde::de::Error::custom)?;
        let mut out = SysctlTable::new();
        for (key, value) in flat {
            out.insert(
                key.clone(),
                entry(&key, &value).map_err(serde::de::Error::custom)?,
            );
        }
        Ok(SysctlSection(out))
    }
}

impl Serialize for SysctlSection {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut table = toml::Table::new();
        for (key, policy) in &self.0 {
            table.insert(key.to_string(), to_value(policy.as_ref()));
        }
        table.serialize(s)
    }
}

const POLICY_KEYS: [&str; 4] = ["exact", "min", "max", "enabled"];

/// Flattens nested namespace tables into canonical keys; policy tables (`{ min = N }`) and plain
/// values are leaves. Used on every fragment before merging, so a key written either way merges
/// with the same key from another file.
pub(crate) fn flatten(raw: &toml::Table) -> Result<BTreeMap<SysctlKey, toml::Value>, KeyError> {
    let mut out = BTreeMap::new();
    flatten_into(raw, "", &mut out)?;
    Ok(out)
}

fn flatten_into(
    table: &toml::Table,
    prefix: &str,
    out: &mut BTreeMap<SysctlKey, toml::Value>,
) -> Result<(), KeyError> {
    for (k, v) in table {
        // Bounded before it grows: each nesting level would copy the whole name again.
        let len = prefix.len() + k.len() + usize::from(!prefix.is_empty());
        if len > MAX_KEY_BYTES {
            let start: String = format!("{prefix}.{k}")
                .trim_start_matches('.')
                .chars()
                .take(48)
                .collect();
            return Err(KeyError::new(
                "sysctl",
                format!(
                    "not a sysctl key: {start:?}… ({len} bytes): longer than any /proc/sys path (at most {MAX_KEY_BYTES} bytes)"
                ),
            ));
        }
        let name = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(t)
                if !t.is_empty() && !t.keys().all(|k| POLICY_KEYS.contains(&k.as_str())) =>
            {
                if t.keys().any(|k| POLICY_KEYS.contains(&k.as_str())) {
                    return Err(KeyError::new(
                        dotted("sysctl", &name),
                        format!("mixes policy keys ({}) with sub-keys", POLICY_KEYS.join(", ")),
                    ));
                }
                flatten_into(t, &name, out)?;
            }
            leaf => {
                let key: SysctlKey = name.parse().map_err(|e: Invalid| {
                    // Named by the section alone when the key itself is too long to quote.
                    let at = if name.len() > MAX_KEY_BYTES {
                        "sysctl".to_owned()
                    } else {
                        dotted("sysctl", &name)
                    };
                    KeyError::new(at, format!("not a sysctl key: {e}"))
                })?;
                if out.insert(key.clone(), leaf.clone()).is_some() {
                    return Err(KeyError::new(
                        dotted("sysctl", &key.to_string()),
                        "given twice in one file",
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Checks every flattened entry's policy, naming the entry's key (so its line can be found).
pub(crate) fn check_entries(flat: &BTreeMap<SysctlKey, toml::Value>) -> Result<(), KeyError> {
    for (key, value) in flat {
        entry(key, value).map_err(|message| {
            let prefix = format!("sysctl {key}: ");
            let message = message
                .strip_prefix(&prefix)
                .map_or(message.clone(), str::to_owned);
            KeyError::new(dotted("sysctl", &key.to_string()), message)
        })?;
    }
    Ok(())
}

/// What the kernel takes for a key: whitespace-separated integers (how many), or text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Integers(usize),
    Text,
}

/// The shape of well-known keys, first match wins (`*` matches one segment). From the kernel's
/// Documentation/admin-guide/sysctl and networking/ip-sysctl: a key of these families that is not
/// listed as text takes one integer.
const SHAPES: &[(&str, Shape)] = &[
    ("net.ipv4.ip_local_port_range", Shape::Integers(2)),
    ("net.ipv4.ping_group_range", Shape::Integers(2)),
    ("net.ipv4.tcp_rmem", Shape::Integers(3)),
    ("net.ipv4.tcp_wmem", Shape::Integers(3)),
    ("net.ipv4.tcp_mem", Shape::Integers(3)),
    ("net.ipv4.udp_mem", Shape::Integers(3)),
    ("net.ipv4.ip_local_reserved_ports", Shape::Text),
    ("net.ipv4.tcp_congestion_control", Shape::Text),
    ("net.ipv4.tcp_allowed_congestion_control", Shape::Text),
    ("net.ipv6.conf.*.stable_secret", Shape::Text),
    ("net.core.default_qdisc", Shape::Text),
    ("kernel.core_pattern", Shape::Text),
    ("kernel.hostname", Shape::Text),
    ("kernel.domainname", Shape::Text),
    ("kernel.modprobe", Shape::Text),
    ("kernel.printk", Shape::Integers(4)),
    ("vm.lowmem_reserve_ratio", Shape::Text),
    ("net.ipv4.conf.*.*", Shape::Integers(1)),
    ("net.ipv6.conf.*.*", Shape::Integers(1)),
    ("net.ipv4.neigh.*.*", Shape::Integers(1)),
    ("net.ipv6.neigh.*.*", Shape::Integers(1)),
    ("net.ipv4.ip_forward", Shape::Integers(1)),
    ("net.ipv4.tcp_*", Shape::Integers(1)),
    ("net.bridge.*", Shape::Integers(1)),
    ("net.netfilter.*", Shape::Integers(1)),
    ("net.core.*", Shape::Integers(1)),
    ("fs.inotify.*", Shape::Integers(1)),
    ("fs.file-max", Shape::Integers(1)),
    ("fs.nr_open", Shape::Integers(1)),
    ("fs.aio-max-nr", Shape::Integers(1)),
    ("fs.protected_*", Shape::Integers(1)),
    ("vm.*", Shape::Integers(1)),
    ("kernel.panic", Shape::Integers(1)),
    ("kernel.panic_*", Shape::Integers(1)),
    ("kernel.pid_max", Shape::Integers(1)),
    ("kernel.threads-max", Shape::Integers(1)),
    ("kernel.keys.*", Shape::Integers(1)),
    ("kernel.sysrq", Shape::Integers(1)),
    ("kernel.dmesg_restrict", Shape::Integers(1)),
    ("kernel.kptr_restrict", Shape::Integers(1)),
    ("user.*", Shape::Integers(1)),
];

/// The shape `key` takes, when it is a well-known key.
fn shape_of(key: &SysctlKey) -> Option<Shape> {
    let segs = key.segments();
    SHAPES.iter().find_map(|(pattern, shape)| {
        let parts: Vec<&str> = pattern.split('.').collect();
        let fits = parts.len() == segs.len()
            && parts.iter().zip(segs).all(|(p, s)| match p.strip_suffix('*') {
                Some(prefix) => s.starts_with(prefix),
                None => p == s,
            });
        fits.then_some(*shape)
    })
}

/// Checks an exact value against what the kernel takes for the key (systemd-sysctl fails on a
/// value the kernel refuses, at every boot).
fn check_shape(key: &SysctlKey, value: &SysctlValue) -> Result<(), String> {
    let Some(Shape::Integers(n)) = shape_of(key) else {
        return Ok(());
    };
    let fields: Vec<&str> = value.as_str().split_whitespace().collect();
    let integers = fields.iter().all(|f| f.parse::<i64>().is_ok());
    if integers && fields.len() == n {
        return Ok(());
    }
    let what = if n == 1 {
        "one integer".to_owned()
    } else {
        format!("{n} integers separated by spaces")
    };
    Err(format!(
        "sysctl {key}: {:?} is not {what}, which is what the kernel takes for this key",
        value.as_str()
    ))
}

/// The policy a flattened value describes.
fn entry(key: &SysctlKey, value: &toml::Value) -> Result<Option<SysctlPolicy>, String> {
    let scalar = |v: &toml::Value| -> Result<SysctlValue, String> {
        match v {
            toml::Value::Integer(i) => Ok(SysctlValue::new(&i.to_string())),
            toml::Value::String(s) if !s.trim().is_empty() && !s.contains(['\n', '\0']) => {
                let v = SysctlValue::new(s);
                check_shape(key, &v)?;
                Ok(v)
            }
            other => Err(format!(
                "sysctl {key}: value must be an integer or a non-empty one-line string, not {}",
                other.type_str()
            )),
        }
    };
    let bound = |v: Option<&toml::Value>, name: &str| -> Result<Option<u64>, String> {
        match v {
            None => Ok(None),
            Some(toml::Value::Integer(i)) if *i >= 0 => Ok(Some(*i as u64)),
            Some(other) => Err(format!(
                "sysctl {key}: {name} must be a non-negative integer, not {other}"
            )),
        }
    };
    let toml::Value::Table(t) = value else {
        return Ok(Some(SysctlPolicy::Exact(scalar(value)?)));
    };
    match t.get("enabled") {
        None | Some(toml::Value::Boolean(true)) => {}
        Some(toml::Value::Boolean(false)) => return Ok(None),
        Some(other) => {
            return Err(format!(
                "sysctl {key}: enabled must be true or false, not {other}"
            ));
        }
    }
    let (min, max) = (bound(t.get("min"), "min")?, bound(t.get("max"), "max")?);
    match (t.get("exact"), min, max) {
        (Some(v), None, None) => Ok(Some(SysctlPolicy::Exact(scalar(v)?))),
        (Some(_), _, _) => Err(format!("sysctl {key}: exact cannot be combined with min/max")),
        (None, None, None) => Err(format!("sysctl {key}: a table needs exact, min or max")),
        (None, Some(lo), Some(hi)) if lo > hi => Err(format!("sysctl {key}: min {lo} is above max {hi}")),
        (None, min, max) => Ok(Some(SysctlPolicy::Range { min, max })),
    }
}

/// The TOML form of a policy (for defaults and `nodeward config`).
fn to_value(policy: Option<&SysctlPolicy>) -> toml::Value {
    let mut t = toml::Table::new();
    match policy {
        None => {
            t.insert("enabled".into(), false.into());
        }
        Some(SysctlPolicy::Exact(v)) => {
            return match v.as_str().parse::<i64>() {
                Ok(i) => i.into(),
                Err(_) => v.as_str().into(),
            };
        }
        Some(SysctlPolicy::Range { min, max }) => {
            if let Some(lo) = min {
                t.insert("min".into(), (*lo as i64).into());
            }
            if let Some(hi) = max {
                t.insert("max".into(), (*hi as i64).into());
            }
        }
    }
    toml::Value::Table(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> SysctlKey {
        s.parse().unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn dotted_and_slashed_forms_address_vlan_interfaces() {
        let a = key("net.ipv4.conf.eth0/100.rp_filter");
        let b = key("net/ipv4/conf/eth0.100/rp_filter");
        assert_eq!(a, b);
        assert_eq!(
            a.relative_path(),
            PathBuf::from("net/ipv4/conf/eth0.100/rp_filter")
        );
        assert_eq!(a.to_string(), "net.ipv4.conf.eth0/100.rp_filter");
        assert_eq!(
            key("net.ipv4.ip_forward").relative_path(),
            PathBuf::from("net/ipv4/ip_forward")
        );
    }

    #[test]
    fn keys_longer_than_a_proc_sys_path_are_refused_quoting_their_start() {
        let long = format!("net.core.{}", "a".repeat(1 << 20));
        let err = long.parse::<SysctlKey>().unwrap_err().to_string();
        assert!(
            err.contains("1048585 bytes") && err.contains("at most 4086"),
            "{err}"
        );
        assert!(err.len() < 200, "a {}-byte message", err.len());
        let seg = format!("net.core.{}", "a".repeat(256));
        assert!(
            seg.parse::<SysctlKey>()
                .unwrap_err()
                .to_string()
                .contains("256 bytes")
        );
        // Control: the longest of each is taken.
        let ok = format!("net.{}.{}", "b".repeat(255), "c".repeat(MAX_KEY_BYTES - 260));
        assert_eq!(ok.len(), MAX_KEY_BYTES);
        assert!(
            key(&ok.replace(&"c".repeat(MAX_KEY_BYTES - 260), &"c".repeat(255)))
                .segments()
                .len()
                == 3
        );
    }

    #[test]
    fn a_name_nested_past_a_proc_sys_path_is_refused_before_it_is_copied_again() {
        // `[sysctl.aaa….aaa….…]`: 50 levels of 100-byte names, refused at the first level past
        // the bound, naming the section (the key is too long to name).
        let header = format!(
            "[sysctl.{}b]\nc = 1\n",
            format!("{}.", "a".repeat(100)).repeat(50)
        );
        let table: toml::Table = header.parse().expect("toml takes 50 levels");
        let raw = table["sysctl"].as_table().expect("a table");
        let err = flatten(raw).unwrap_err();
        assert_eq!(err.key, "sysctl");
        assert!(
            err.message.contains("at most 4086 bytes") && err.message.len() < 300,
            "{}",
            err.message
        );
        // Control: 30 levels fit.
        let header = format!(
            "[sysctl.{}b]\nc = 1\n",
            format!("{}.", "a".repeat(100)).repeat(30)
        );
        let table: toml::Table = header.parse().expect("toml");
        assert_eq!(
            flatten(table["sysctl"].as_table().expect("a table"))
                .expect("fits")
                .len(),
            1
        );
    }

    #[test]
    fn keys_cannot_escape_proc_sys() {
        for bad in [
            "/etc/passwd",
            "net/../../etc/shadow",
            "net.ipv4..ip_forward",
            "net.ipv4.",
            ".net.ipv4",
            "net/./ipv4",
            "net.ipv4.conf.x/../../../../etc.y",
            "kernel",
            "net.ipv4.ip forward",
            "net.ipv4.ip_forward=1",
            "",
        ] {
            assert!(bad.parse::<SysctlKey>().is_err(), "{bad:?} accepted");
        }
        // `x/..` in the dotted form is the name "x..", which is harmless but allowed; `..` alone is not.
        assert!("net.ipv4.conf.../rp_filter".parse::<SysctlKey>().is_err());
    }

    #[test]
    fn values_compare_field_by_field() {
        assert_eq!(
            SysctlValue::new("32768\t60999\n"),
            SysctlValue::new("32768 60999")
        );
        assert_eq!(SysctlValue::new(" 1 ").as_u64(), Some(1));
        assert_eq!(SysctlValue::new("1 2").as_u64(), None);
    }

    fn section(text: &str) -> Result<SysctlSection, String> {
        #[derive(Deserialize)]
        struct Doc {
            sysctl: SysctlSection,
        }
        toml::from_str::<Doc>(text)
            .map(|d| d.sysctl)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn config_forms() {
        let s = section(
            "[sysctl]\n\"net.ipv4.ip_forward\" = 1\nnet.ipv4.ip_local_port_range = \"1024 65000\"\n\
             \"net.netfilter.nf_conntrack_max\" = { min = 131072 }\n\"fs.file-max\" = { min = 10, max = 20 }\n\
             \"kernel.panic\" = { enabled = false }\n\"vm.swappiness\" = { exact = 10 }\n",
        )
        .expect("parse");
        let get = |k: &str| s.0.get(&key(k)).cloned();
        assert_eq!(
            get("net.ipv4.ip_forward"),
            Some(Some(SysctlPolicy::Exact(SysctlValue::new("1"))))
        );
        assert_eq!(
            get("net.ipv4.ip_local_port_range"),
            Some(Some(SysctlPolicy::Exact(SysctlValue::new("1024 65000"))))
        );
        assert_eq!(
            get("net.netfilter.nf_conntrack_max"),
            Some(Some(SysctlPolicy::Range {
                min: Some(131072),
                max: None
            }))
        );
        assert_eq!(
            get("fs.file-max"),
            Some(Some(SysctlPolicy::Range {
                min: Some(10),
                max: Some(20)
            }))
        );
        assert_eq!(get("kernel.panic"), Some(None));
        assert_eq!(
            get("vm.swappiness"),
            Some(Some(SysctlPolicy::Exact(SysctlValue::new("10"))))
        );
    }

    #[test]
    fn values_of_the_shape_the_kernel_takes_pass() {
        for ok in [
            "[sysctl]\n\"net.ipv4.ip_forward\" = \"1\"",
            "[sysctl]\n\"net.ipv4.ip_local_port_range\" = \"1024 65000\"",
            "[sysctl]\n\"net.ipv4.tcp_congestion_control\" = \"bbr\"",
            "[sysctl]\n\"kernel.core_pattern\" = \"|/bin/false\"",
            "[sysctl]\n\"some.unknown.key\" = \"anything\"",
        ] {
            assert!(section(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn bad_config_forms_name_the_key() {
        for (text, needle) in [
            ("[sysctl]\n\"a.b\" = { min = 5, max = 1 }", "min 5 is above max 1"),
            ("[sysctl]\n\"a.b\" = { exact = 1, min = 1 }", "cannot be combined"),
            ("[sysctl]\n\"a.b\" = { min = -1 }", "non-negative"),
            (
                "[sysctl]\n\"a.b\" = true",
                "integer or a non-empty one-line string",
            ),
            ("[sysctl]\n\"a.b\" = {}", "needs exact, min or max"),
            (
                "[sysctl]\n\"net.ipv4.ip_forward\" = \"yes\"",
                "sysctl net.ipv4.ip_forward: \"yes\" is not one integer",
            ),
            (
                "[sysctl]\n\"net.ipv4.conf.*.rp_filter\" = { exact = \"strict\" }",
                "is not one integer",
            ),
            (
                "[sysctl]\n\"net.ipv4.ip_local_port_range\" = \"1024\"",
                "is not 2 integers separated by spaces",
            ),
            ("[sysctl]\n\"a/../b\" = 1", "would leave /proc/sys"),
            ("[sysctl.a]\nmin = 1\nc = 2", "mixes policy keys"),
        ] {
            let err = section(text).expect_err(text);
            assert!(err.contains(needle), "{text}: {err}");
        }
    }
}
