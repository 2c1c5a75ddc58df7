//! docs/configuration.md names exactly the keys the configuration accepts: every field of the
//! input types (`deny_unknown_fields` makes them the whole vocabulary) is in the table, and every
//! key in the table is a field. Shown to fail on a planted mismatch.

use std::collections::BTreeSet;
use std::path::Path;

fn read(rel: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)).expect(rel)
}

/// The `pub field: Type` lines of `struct NAME { … }` in `src`.
fn fields(src: &str, name: &str) -> Vec<(String, String)> {
    let Some(start) = src
        .find(&format!("pub(crate) struct {name} {{\n"))
        .or_else(|| src.find(&format!("pub struct {name} {{\n")))
    else {
        return Vec::new();
    };
    let body = &src[start..];
    let body = &body[..body.find("\n}\n").unwrap_or(body.len())];
    body.lines()
        .filter_map(|l| {
            let l = l.trim();
            l.strip_prefix("pub ").or_else(|| l.strip_prefix("pub(crate) "))
        })
        .filter_map(|l| l.split_once(": "))
        .map(|(f, t)| (f.to_owned(), t.trim_end_matches(',').to_owned()))
        .collect()
}

/// The dotted keys the code accepts.
fn code_keys() -> BTreeSet<String> {
    let src = [
        "src/config/input.rs",
        "src/registration/input.rs",
        "src/kubelet/settings/input.rs",
        "src/config/network.rs",
        "src/containerd/settings.rs",
        "src/images/settings.rs",
        "src/config/metrics.rs",
        "src/bundle/settings.rs",
        "src/fleetlock/mod.rs",
    ]
    .map(read)
    .join("\n");
    let mut keys = BTreeSet::new();
    for (section, ty) in fields(&src, "ConfigInput") {
        let ty = ty.rsplit("::").next().unwrap_or(&ty).to_owned();
        match section.as_str() {
            "dirs" => {
                keys.insert("dirs".to_owned());
                for (f, _) in fields(&src, "DirInput") {
                    keys.insert(format!("dirs.<path>.{f}"));
                }
            }
            "sysctl" => {
                keys.insert("sysctl".to_owned());
            }
            _ => {
                let inner = fields(&src, &ty);
                assert!(!inner.is_empty(), "no fields found for [{section}] ({ty})");
                for (f, _) in inner {
                    keys.insert(format!("{section}.{f}"));
                }
            }
        }
    }
    keys
}

/// The keys the reference table names (its first column).
fn doc_keys(doc: &str) -> BTreeSet<String> {
    doc.lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`'))
        .map(|(k, _)| k.to_owned())
        .collect()
}

/// What differs: (in the code, not the doc), (in the doc, not the code).
fn differences(code: &BTreeSet<String>, doc: &BTreeSet<String>) -> (Vec<String>, Vec<String>) {
    (
        code.difference(doc).cloned().collect(),
        doc.difference(code).cloned().collect(),
    )
}

#[test]
fn the_reference_names_every_key_and_only_keys_that_exist() {
    let code = code_keys();
    assert!(code.len() > 50, "{code:?}");
    let doc = doc_keys(&read("docs/configuration.md"));
    let (undocumented, unknown) = differences(&code, &doc);
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "keys in the code but not in docs/configuration.md: {undocumented:?}\n\
         keys in docs/configuration.md the code refuses: {unknown:?}"
    );
}

#[test]
fn a_planted_mismatch_is_caught_both_ways() {
    let code = code_keys();
    let doc = read("docs/configuration.md");
    // A key the code has, dropped from the page; a key the page invents.
    let planted = doc
        .lines()
        .filter(|l| !l.starts_with("| `kubelet.version`"))
        .chain(["| `kubelet.invented_seconds` | `u64` | `300` | invented |"])
        .collect::<Vec<_>>()
        .join("\n");
    let (undocumented, unknown) = differences(&code, &doc_keys(&planted));
    assert_eq!(undocumented, ["kubelet.version"]);
    assert_eq!(unknown, ["kubelet.invented_seconds"]);
}

/// The defaults the page shows are the ones `nodeward config` prints for an empty root.
#[test]
fn the_defaults_shown_are_the_effective_ones() {
    let root = tempfile::tempdir().expect("root");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nodeward"))
        .args(["config", "--root"])
        .arg(root.path())
        .output()
        .expect("run");
    let effective = String::from_utf8_lossy(&out.stdout).into_owned();
    let doc = read("docs/configuration.md");
    let mut compared = 0;
    for line in effective.lines() {
        let Some((key, rest)) = line.split_once(" = ") else {
            continue;
        };
        let value = rest.rsplit_once("  #").map_or(rest, |(v, _)| v);
        if let Some(row) = doc.lines().find(|l| l.starts_with(&format!("| `{key}` |"))) {
            assert!(
                row.contains(&format!("`{}`", value.replace('|', "\\|"))),
                "{key}: {value} not in {row}"
            );
            compared += 1;
        }
    }
    assert!(compared > 40, "{compared} defaults compared");
}

/// The keys a changelog's bullets name: `- `[section]`: `a`, `b`…` (a bullet runs to the next).
fn changelog_keys(changelog: &str) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for bullet in changelog.split("\n- ").skip(1) {
        let bullet = bullet.split("\n\n").next().unwrap_or("");
        let mut sections = bullet.match_indices("`[").peekable();
        while let Some((at, _)) = sections.next() {
            let rest = &bullet[at + 2..];
            let Some(end) = rest.find("]`") else { continue };
            let section = &rest[..end];
            let upto = sections.peek().map_or(bullet.len(), |(next, _)| *next);
            let fields = &bullet[at + 2 + end + 2..upto];
            let named: Vec<&str> = fields.split('`').skip(1).step_by(2).collect();
            if named.is_empty() {
                keys.insert(section.to_owned());
            }
            for f in named {
                match section {
                    "dirs" => keys.insert(format!("dirs.<path>.{f}")),
                    _ => keys.insert(format!("{section}.{f}")),
                };
            }
            if section == "dirs" {
                keys.insert("dirs".to_owned());
            }
        }
    }
    keys
}

/// The changelog lists every configuration key where it was added (0.1.0 has today's whole
/// vocabulary); a key added later must be named in its release's entry.
#[test]
fn the_changelog_names_every_configuration_key() {
    let code = code_keys();
    let listed = changelog_keys(&read("CHANGELOG.md"));
    let missing: Vec<_> = code.difference(&listed).collect();
    assert!(
        missing.is_empty(),
        "keys no CHANGELOG.md entry names: {missing:?}"
    );
    // Control: a key left out of the changelog is caught.
    let planted = read("CHANGELOG.md").replace("`wait_for_dns`", "");
    assert!(!changelog_keys(&planted).contains("kubelet.wait_for_dns"));
}
