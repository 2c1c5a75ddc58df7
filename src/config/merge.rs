//! Merging fragments as TOML tables while remembering which file set each value.
//!
//! Tables merge key by key, any other value (including arrays) is replaced whole. Provenance is kept
//! per leaf, under its dotted key (`dirs."/var/lib/kubelet".mode`).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use toml::{Table, Value};

use super::error::Origin;

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase", tag = "kind", content = "path")]
pub enum Source {
    Default,
    File(PathBuf),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// A merged table and, for each leaf's dotted key, the source that set it.
#[derive(Debug, Default)]
pub struct Merged {
    pub table: Table,
    pub sources: BTreeMap<String, Source>,
    /// Each dotted key's line in each file that wrote it (see [`super::lines`]).
    lines: BTreeMap<(String, PathBuf), usize>,
}

impl Merged {
    /// Lays `overlay` over what is merged so far.
    pub(crate) fn overlay(&mut self, overlay: &Table, source: &Source) {
        merge_table(&mut self.table, overlay, source, "", &mut self.sources);
    }

    /// Lays a fragment over what is merged so far, remembering the line of each of its keys.
    pub(crate) fn overlay_file(&mut self, overlay: &Table, path: &Path, lines: &BTreeMap<String, usize>) {
        self.overlay(overlay, &Source::File(path.to_path_buf()));
        for (key, line) in lines {
            self.lines.insert((key.clone(), path.to_path_buf()), *line);
        }
    }

    /// The source of the value at `key` (a dotted key as in [`dotted`]) or of its closest parent.
    pub(crate) fn source_of<'a>(&'a self, key: &'a str) -> Option<&'a Source> {
        self.setter_of(key).map(|(_, s)| s)
    }

    /// The dotted key whose source stands for `key`, and that source: `key` itself, the most
    /// specific leaf below it (a table set as a whole by one file), or its closest parent.
    fn setter_of<'a>(&'a self, key: &'a str) -> Option<(&'a str, &'a Source)> {
        let mut k = key;
        loop {
            if let Some(s) = self.sources.get(k) {
                return Some((k, s));
            }
            if let Some((leaf, s)) = self
                .sources
                .range(format!("{k}.")..)
                .next()
                .filter(|(l, _)| l.starts_with(&format!("{k}.")))
            {
                return Some((leaf.as_str(), s));
            }
            k = k.rsplit_once('.')?.0;
        }
    }

    /// The file and line that set `key`: the line of the key itself when that file wrote it, else
    /// of the closest parent it wrote (a table header), else just the file.
    pub(crate) fn origin_of(&self, key: &str) -> Origin {
        let Some((setter, Source::File(path))) = self.setter_of(key) else {
            return Origin {
                path: None,
                line: None,
            };
        };
        let mut k = if setter.starts_with(key) { key } else { setter };
        let line = loop {
            if let Some(line) = self.lines.get(&(k.to_owned(), path.clone())) {
                break Some(*line);
            }
            match k.rsplit_once('.') {
                Some((parent, _)) => k = parent,
                None => break None,
            }
        };
        Origin {
            path: Some(path.clone()),
            line,
        }
    }
}

/// Tables whose entries are replaced whole rather than merged key by key: a sysctl written as
/// `{ exact = 5 }` must not inherit the default's `min`.
const ATOMIC_ENTRIES: &[&str] = &["sysctl"];

fn merge_table(
    base: &mut Table,
    overlay: &Table,
    source: &Source,
    prefix: &str,
    sources: &mut BTreeMap<String, Source>,
) {
    for (key, value) in overlay {
        let path = dotted(prefix, key);
        match value {
            Value::Table(sub) if !ATOMIC_ENTRIES.contains(&prefix) => {
                let slot = base
                    .entry(key.clone())
                    .or_insert_with(|| Value::Table(Table::new()));
                if !slot.is_table() {
                    *slot = Value::Table(Table::new());
                    sources.remove(&path);
                }
                if let Value::Table(slot) = slot {
                    merge_table(slot, sub, source, &path, sources);
                }
                if sub.is_empty() {
                    sources.insert(path, source.clone());
                }
            }
            other => {
                base.insert(key.clone(), other.clone());
                forget_below(sources, &format!("{path}."));
                sources.insert(path, source.clone());
            }
        }
    }
}

/// Drops the sources of the leaves under `prefix` (a dotted key and its dot): they sort together,
/// so this touches only them, not the whole map (a scan per value made merging quadratic).
fn forget_below(sources: &mut BTreeMap<String, Source>, prefix: &str) {
    let below: Vec<String> = sources
        .range::<str, _>((std::ops::Bound::Included(prefix), std::ops::Bound::Unbounded))
        .map(|(k, _)| k)
        .take_while(|k| k.starts_with(prefix))
        .cloned()
        .collect();
    for k in below {
        sources.remove(&k);
    }
}

pub(crate) use crate::setting::dotted;

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Table {
        s.parse().expect("test toml")
    }

    #[test]
    fn tables_merge_by_key_and_arrays_replace() {
        let mut m = Merged::default();
        m.overlay(&t("a = 1\n[s]\nx = [1, 2]\ny = 'keep'"), &Source::Default);
        let f = Source::File("/etc/f.toml".into());
        m.overlay(&t("[s]\nx = [3]"), &f);
        assert_eq!(m.table["s"]["x"].as_array().map(Vec::len), Some(1));
        assert_eq!(m.table["s"]["y"].as_str(), Some("keep"));
        assert_eq!(m.sources["s.x"], f);
        assert_eq!(m.sources["s.y"], Source::Default);
    }

    /// A table replaced by a value forgets the sources of its own leaves, and only those: a
    /// sibling whose name merely starts the same (`s2`, `s-x`) keeps its source.
    #[test]
    fn a_value_over_a_table_forgets_only_that_tables_leaves() {
        let mut m = Merged::default();
        m.overlay(
            &t("[s]\nx = 1\ny = 2\n[s2]\nz = 3\n['s-x']\nw = 4"),
            &Source::Default,
        );
        let f = Source::File("/etc/f.toml".into());
        m.overlay(&t("s = 'flat'"), &f);
        let keys: Vec<&str> = m.sources.keys().map(String::as_str).collect();
        assert_eq!(keys, ["s", "s-x.w", "s2.z"]);
        assert_eq!(m.sources["s"], f);
    }

    #[test]
    fn quoted_keys_for_paths() {
        let mut m = Merged::default();
        m.overlay(&t("[dirs.'/var/lib/x']\nmode = '0700'"), &Source::Default);
        assert!(
            m.sources.contains_key("dirs.\"/var/lib/x\".mode"),
            "{:?}",
            m.sources
        );
        assert_eq!(m.source_of("dirs.\"/var/lib/x\""), Some(&Source::Default));
    }

    #[test]
    fn sysctl_entries_are_replaced_whole() {
        let mut m = Merged::default();
        m.overlay(&t("[sysctl]\n'a.b' = { min = 5 }"), &Source::Default);
        m.overlay(&t("[sysctl]\n'a.b' = { exact = 7 }"), &Source::File("/f".into()));
        assert_eq!(m.table["sysctl"]["a.b"].as_table().map(|t| t.len()), Some(1));
        assert_eq!(m.sources["sysctl.\"a.b\""], Source::File("/f".into()));
    }

    #[test]
    fn replacing_a_table_with_a_scalar_forgets_its_leaves() {
        let mut m = Merged::default();
        m.overlay(&t("[a]\nb = 1"), &Source::Default);
        m.overlay(&t("a = 2"), &Source::File("/f".into()));
        assert!(!m.sources.contains_key("a.b"));
        assert_eq!(m.sources["a"], Source::File("/f".into()));
    }
}
