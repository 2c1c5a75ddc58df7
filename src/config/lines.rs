//! The line of each key in a fragment's text, so that a rule broken by a value can name the line
//! that set it (`/etc/nodeward/config.d/20-bundle.toml:3: bundle.source: …`).

use std::collections::BTreeMap;

use toml::de::{DeTable, DeValue};

use super::merge::dotted;

/// The longest dotted key recorded; a longer one (a megabyte table name) is not a key of nodeward's
/// schema, which refuses it after this, so it gets no line and costs nothing here.
pub(crate) const MAX_KEY_PATH: usize = 512;
/// The most keys recorded per fragment: memory stays `MAX_KEYS × MAX_KEY_PATH` whatever the text.
pub(crate) const MAX_KEYS: usize = 10_000;

/// Dotted key → 1-based line of the key (a table's header line for a table). Sysctl keys are also
/// recorded in their canonical one-segment form (`sysctl."net.ipv4.ip_forward"`) however they were
/// written, as the merge keys them. Text that does not parse gives no lines (its error has them).
/// Bounded: keys longer than [`MAX_KEY_PATH`] and keys past [`MAX_KEYS`] are not recorded, and no
/// path longer than the cap is ever built.
pub(crate) fn key_lines(text: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    if let Ok(table) = DeTable::parse(text) {
        let starts = line_starts(text);
        walk(table.get_ref(), "", None, &starts, &mut out);
    }
    out
}

/// Byte offsets where each line begins.
fn line_starts(text: &str) -> Vec<usize> {
    std::iter::once(0)
        .chain(text.match_indices('\n').map(|(i, _)| i + 1))
        .collect()
}

fn line_of(starts: &[usize], offset: usize) -> usize {
    starts.partition_point(|&s| s <= offset)
}

/// `sysctl_name`: under `[sysctl]`, the key's segments joined with dots so far.
fn walk(
    table: &DeTable<'_>,
    prefix: &str,
    sysctl_name: Option<&str>,
    starts: &[usize],
    out: &mut BTreeMap<String, usize>,
) {
    for (key, value) in table {
        let name = key.get_ref().as_ref();
        // Checked before anything is built from it: quoting adds at most 3 bytes per segment.
        if prefix.len() + name.len() + 4 > MAX_KEY_PATH || out.len() >= MAX_KEYS {
            continue;
        }
        let line = line_of(starts, key.span().start);
        let path = dotted(prefix, name);
        out.entry(path.clone()).or_insert(line);
        let joined = match sysctl_name {
            Some(above) => format!("{above}.{name}"),
            None if path == "sysctl" => String::new(),
            None => {
                if let DeValue::Table(sub) = value.get_ref() {
                    walk(sub, &path, None, starts, out);
                }
                continue;
            }
        };
        let joined = joined.trim_start_matches('.').to_owned();
        if joined.len() + 10 > MAX_KEY_PATH {
            continue;
        }
        if !joined.is_empty() {
            out.entry(dotted("sysctl", &joined)).or_insert(line);
        }
        if let DeValue::Table(sub) = value.get_ref() {
            walk(sub, &path, Some(&joined), starts, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_tables_and_quoted_paths_get_their_lines() {
        let text = "# a comment\n[bundle]\nsource = 'https://x'\n\n[dirs.'/var/lib/x']\nmode = '0700'\n";
        let lines = key_lines(text);
        assert_eq!(lines.get("bundle"), Some(&2));
        assert_eq!(lines.get("bundle.source"), Some(&3));
        assert_eq!(lines.get("dirs.\"/var/lib/x\""), Some(&5));
        assert_eq!(lines.get("dirs.\"/var/lib/x\".mode"), Some(&6));
    }

    #[test]
    fn sysctl_keys_in_any_spelling_get_their_canonical_key() {
        let text = "[sysctl]\n'net.ipv4.ip_forward' = 1\nnet.core.somaxconn = 4096\n\n[sysctl.vm]\novercommit_memory = { min = 1 }\n";
        let lines = key_lines(text);
        assert_eq!(lines.get("sysctl.\"net.ipv4.ip_forward\""), Some(&2));
        assert_eq!(lines.get("sysctl.\"net.core.somaxconn\""), Some(&3));
        assert_eq!(lines.get("sysctl.\"vm.overcommit_memory\""), Some(&6));
    }

    #[test]
    fn a_key_bomb_is_bounded() {
        // A megabyte table name over many keys: no path is built from it.
        let name = "t".repeat(1 << 20);
        let mut text = format!("[{name}]\n");
        for i in 0..2000 {
            text.push_str(&format!("k{i} = 1\n"));
        }
        let lines = key_lines(&text);
        assert!(lines.is_empty(), "{} keys recorded", lines.len());
        // Past the count: the first MAX_KEYS are kept.
        let many: String = (0..MAX_KEYS + 50).map(|i| format!("k{i} = 1\n")).collect();
        let lines = key_lines(&many);
        assert_eq!(lines.len(), MAX_KEYS);
        assert!(lines.values().all(|&l| l <= MAX_KEYS + 50));
        // Control: an ordinary long key is recorded.
        let ok = format!("[dirs.'/{}']\nmode = '0700'\n", "d".repeat(200));
        assert_eq!(key_lines(&ok).len(), 3);
    }

    #[test]
    fn lines_start_right_after_each_newline() {
        assert_eq!(line_starts("a\nbc\n\nd"), [0, 2, 5, 6]);
    }

    /// The key-path cap at its edge, outside `[sysctl]` and inside it (where the joined name has
    /// its own check): the longest allowed is recorded, one byte more is not.
    #[test]
    fn the_key_cap_holds_at_its_edge() {
        let top = |n: usize| format!("'{}' = 1\n", "k".repeat(n));
        assert_eq!(key_lines(&top(MAX_KEY_PATH - 4)).len(), 1);
        assert!(key_lines(&top(MAX_KEY_PATH - 3)).is_empty());
        // In a nested `[sysctl.a]` table the key's canonical name `sysctl."a.NAME"` is built too.
        let sysctl = |n: usize| format!("[sysctl.a]\n'{}' = 1\n", "k".repeat(n));
        let canonical = |n: usize| format!("sysctl.\"a.{}\"", "k".repeat(n));
        let n = MAX_KEY_PATH - 12;
        assert!(
            key_lines(&sysctl(n)).contains_key(&canonical(n)),
            "the longest is recorded"
        );
        assert!(
            !key_lines(&sysctl(n + 1)).contains_key(&canonical(n + 1)),
            "one byte more is not"
        );
    }

    #[test]
    fn broken_text_has_no_lines() {
        assert!(key_lines("[bundle\n").is_empty());
    }
}
