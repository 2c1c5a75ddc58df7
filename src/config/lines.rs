//! The line of each key in a fragment's text, so that a rule broken by a value can name the line
//! that set it (`/etc/nodeward/config.d/20-bundle.toml:3: bundle.source: …`).

use std::collections::BTreeMap;

use toml::de::{DeTable, DeValue};

use super::merge::dotted;

/// Dotted key → 1-based line of the key (a table's header line for a table). Sysctl keys are also
/// recorded in their canonical one-segment form (`sysctl."net.ipv4.ip_forward"`) however they were
/// written, as the merge keys them. Text that does not parse gives no lines (its error has them).
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
    fn broken_text_has_no_lines() {
        assert!(key_lines("[bundle\n").is_empty());
    }
}
