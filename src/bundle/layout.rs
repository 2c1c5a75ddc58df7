//! Where bundle entries go, with which mode, owner and label.
//!
//! A layout is a list of rules, first match wins. A rule's pattern is a glob on the entry path
//! (`*` and `?` cross `/`); the entry lands in the rule's destination directory under its path
//! minus the pattern's literal directory prefix (`manifests/**` puts `manifests/coredns/svc.yaml`
//! at `DEST/coredns/svc.yaml`).
//!
//! The built-in controller layout reproduces Typhoon's `layout` script, with one deliberate change:
//! nothing is world-readable. The shell left every key at awk's 0644. Control-plane credentials in
//! `/etc/kubernetes/pki` are `0640 root:65534`, readable by the static pods that run as uid/gid
//! 65534 and by nothing else unprivileged. etcd's server and peer material is `0400 etcd:etcd` in
//! `0500` directories (the shell's `chmod -R 500` also set the exec bit on keys).

use serde::{Deserialize, Serialize};

use super::format::{Bundle, EntryPath};
use crate::glob::glob_match;
use crate::types::{AbsPath, AccountRef, Mode, SelinuxContext};

/// One placement rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Glob on the entry path, e.g. `tls/etcd/peer*`.
    #[serde(rename = "match")]
    pub(crate) pattern: String,
    /// Directory the entry goes to.
    pub(crate) dest: AbsPath,
    pub mode: Mode,
    #[serde(default = "root")]
    pub owner: AccountRef,
    #[serde(default = "root")]
    pub group: AccountRef,
    /// Mode of the destination directory (and directories created below it).
    #[serde(default = "dir_mode")]
    pub(crate) dir_mode: Mode,
    /// Owner of those directories; default: `owner`.
    #[serde(default)]
    pub(crate) dir_owner: Option<AccountRef>,
    /// Group of those directories; default: `group`.
    #[serde(default)]
    pub(crate) dir_group: Option<AccountRef>,
    /// Label override; default: the SELinux policy's (container_file_t in the labelled trees).
    #[serde(default)]
    pub(crate) label: Option<SelinuxContext>,
}

fn root() -> AccountRef {
    AccountRef::Name("root".into())
}
fn dir_mode() -> Mode {
    Mode::new(0o755)
}

/// An entry's destination, decided by a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub entry: EntryPath,
    /// Index of the entry in the bundle.
    pub(crate) index: usize,
    pub dest: AbsPath,
    /// Index of the rule that placed it.
    pub rule: usize,
}

/// Why an entry could not be placed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("entry {entry:?} (line {line}): no layout rule matches it")]
    Unmatched { entry: String, line: usize },
    #[error("entries {first:?} and {second:?} would both be installed at {dest}")]
    Collision {
        first: String,
        second: String,
        dest: String,
    },
    #[error(
        "entry {file:?} would be installed at {dest}, which entry {inner:?} needs as a directory ({inner_dest})"
    )]
    Nested {
        file: String,
        dest: String,
        inner: String,
        inner_dest: String,
    },
    #[error("entry {entry:?}: destination {dest}: {reason}")]
    BadDest {
        entry: String,
        dest: String,
        reason: String,
    },
}

/// What to do with entries no rule matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Unmatched {
    /// Refuse the bundle (the default: a new file in the bundle is worth a look).
    #[default]
    Error,
    /// Leave such entries out, as the shell's final `rm -rf` did.
    Ignore,
}

/// The literal directory prefix of a pattern: everything up to the last `/` before the first
/// wildcard.
fn literal_dir(pattern: &str) -> &str {
    let wild = pattern.find(['*', '?', '[']).unwrap_or(pattern.len());
    match pattern[..wild].rfind('/') {
        Some(i) => &pattern[..=i],
        None => "",
    }
}

/// Places every entry; any error refuses the whole bundle.
pub(crate) fn place(
    bundle: &Bundle,
    rules: &[Rule],
    unmatched: Unmatched,
) -> Result<Vec<Placement>, LayoutError> {
    let mut out: Vec<Placement> = Vec::with_capacity(bundle.entries.len());
    let mut by_dest: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    for (index, e) in bundle.entries.iter().enumerate() {
        let name = e.path.as_str();
        let Some((i, rule)) = rules
            .iter()
            .enumerate()
            .find(|(_, r)| glob_match(&r.pattern, name))
        else {
            match unmatched {
                Unmatched::Error => {
                    return Err(LayoutError::Unmatched {
                        entry: name.into(),
                        line: e.line(),
                    });
                }
                Unmatched::Ignore => continue,
            }
        };
        let rel = name.strip_prefix(literal_dir(&rule.pattern)).unwrap_or(name);
        let dest = rule.dest.join(rel).map_err(|reason| LayoutError::BadDest {
            entry: name.into(),
            dest: format!("{}/{rel}", rule.dest),
            reason: reason.0,
        })?;
        if let Some(first) = by_dest.insert(dest.to_string(), name.to_owned()) {
            return Err(LayoutError::Collision {
                first,
                second: name.into(),
                dest: dest.to_string(),
            });
        }
        out.push(Placement {
            entry: e.path.clone(),
            index,
            dest,
            rule: i,
        });
    }
    refuse_nested(&out)?;
    Ok(out)
}

/// Refuses a destination that is an ancestor directory of another (`x` and `x/y`, or `x` and
/// `x/a/b`): one of the two renames would fail after the commit point. Every destination's
/// ancestors are looked up among the files, so names sorting between a parent and its children
/// (`x.yaml` between `x` and `x/y`) hide nothing; linear in the total length of the paths.
fn refuse_nested(placements: &[Placement]) -> Result<(), LayoutError> {
    let files: std::collections::HashMap<&str, &Placement> =
        placements.iter().map(|p| (p.dest.as_str(), p)).collect();
    for child in placements {
        let dest = child.dest.as_str();
        let ancestors = dest
            .match_indices('/')
            .map(|(i, _)| &dest[..i])
            .filter(|a| !a.is_empty());
        for ancestor in ancestors {
            if let Some(parent) = files.get(ancestor) {
                return Err(LayoutError::Nested {
                    file: parent.entry.to_string(),
                    dest: parent.dest.to_string(),
                    inner: child.entry.to_string(),
                    inner_dest: child.dest.to_string(),
                });
            }
        }
    }
    Ok(())
}

fn rule(
    pattern: &str,
    dest: AbsPath,
    mode: u32,
    owner: &AccountRef,
    group: &AccountRef,
    dir_mode: u32,
) -> Rule {
    Rule {
        pattern: pattern.into(),
        dest,
        mode: Mode::new(mode),
        owner: owner.clone(),
        group: group.clone(),
        dir_mode: Mode::new(dir_mode),
        dir_owner: None,
        dir_group: None,
        label: None,
    }
}

/// A rule whose directory stays `root:root` whatever group its files have.
fn rule_root_dir(pattern: &str, dest: AbsPath, mode: u32, group: &AccountRef) -> Rule {
    Rule {
        dir_group: Some(AccountRef::Id(0)),
        ..rule(pattern, dest, mode, &root(), group, 0o755)
    }
}

/// Typhoon's controller layout (see the module docs for the modes).
pub(crate) fn controller(etcd_user: &AccountRef, pki_group: &AccountRef) -> Vec<Rule> {
    let etcd_dir = |p: &str| {
        rule(
            p,
            crate::abs_path!("/etc/ssl/etcd/etcd"),
            0o400,
            etcd_user,
            etcd_user,
            0o500,
        )
    };
    vec![
        etcd_dir("tls/etcd/peer*"),
        etcd_dir("tls/etcd/server*"),
        rule_root_dir(
            "tls/etcd/etcd-client*",
            crate::abs_path!("/etc/kubernetes/pki"),
            0o640,
            pki_group,
        ),
        rule_root_dir(
            "auth/*",
            crate::abs_path!("/etc/kubernetes/pki"),
            0o640,
            pki_group,
        ),
        rule_root_dir(
            "tls/k8s/*",
            crate::abs_path!("/etc/kubernetes/pki"),
            0o640,
            pki_group,
        ),
        rule(
            "static-manifests/*",
            crate::abs_path!("/etc/kubernetes/manifests"),
            0o644,
            &root(),
            &root(),
            0o755,
        ),
        rule(
            "manifests/*",
            crate::abs_path!("/opt/bootstrap/assets/manifests"),
            0o644,
            &root(),
            &root(),
            0o755,
        ),
    ]
}

/// A worker's bundle: its bootstrap kubeconfig (the CA is derived from it, see `kubeconfig`).
pub(crate) fn worker() -> Vec<Rule> {
    vec![
        rule(
            "kubeconfig",
            crate::abs_path!("/etc/kubernetes"),
            0o600,
            &root(),
            &root(),
            0o755,
        ),
        rule(
            "auth/kubeconfig",
            crate::abs_path!("/etc/kubernetes"),
            0o600,
            &root(),
            &root(),
            0o755,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundle::format::Limits;

    fn bundle(names: &[&str]) -> Bundle {
        let text: Vec<String> = names.iter().map(|n| format!("##### {n}\nx")).collect();
        Bundle::parse(text.join("\n").as_bytes(), &Limits::default()).expect("bundle")
    }

    fn dests(b: &Bundle, rules: &[Rule]) -> Vec<String> {
        place(b, rules, Unmatched::Error)
            .expect("place")
            .into_iter()
            .map(|p| p.dest.to_string())
            .collect()
    }

    #[test]
    fn controller_layout_matches_the_shell_paths() {
        let b = bundle(&[
            "tls/etcd/peer.key",
            "tls/etcd/server-ca.crt",
            "tls/etcd/etcd-client.key",
            "auth/admin.conf",
            "tls/k8s/ca.key",
            "static-manifests/kube-apiserver.yaml",
            "manifests/coredns/deployment.yaml",
        ]);
        assert_eq!(
            dests(
                &b,
                &controller(&AccountRef::Name("etcd".into()), &AccountRef::Id(65534))
            ),
            [
                "/etc/ssl/etcd/etcd/peer.key",
                "/etc/ssl/etcd/etcd/server-ca.crt",
                "/etc/kubernetes/pki/etcd-client.key",
                "/etc/kubernetes/pki/admin.conf",
                "/etc/kubernetes/pki/ca.key",
                "/etc/kubernetes/manifests/kube-apiserver.yaml",
                "/opt/bootstrap/assets/manifests/coredns/deployment.yaml",
            ]
        );
    }

    /// A worker's bundle: its bootstrap kubeconfig, private to root, wherever the bundle keeps it.
    #[test]
    fn worker_layout_places_the_kubeconfig_privately() {
        let b = bundle(&["kubeconfig"]);
        assert_eq!(dests(&b, &worker()), ["/etc/kubernetes/kubeconfig"]);
        let b = bundle(&["auth/kubeconfig"]);
        assert_eq!(dests(&b, &worker()), ["/etc/kubernetes/kubeconfig"]);
        assert!(worker().iter().all(|r| r.mode == Mode::new(0o600)));
    }

    /// The pki directory stays root:root although its files are the pki group's (the kubelet's
    /// static pods read them as that group; the directory is not theirs to change).
    #[test]
    fn the_pki_directory_stays_root_owned() {
        let rules = controller(&AccountRef::Name("etcd".into()), &AccountRef::Id(65534));
        let pki: Vec<&Rule> = rules
            .iter()
            .filter(|r| r.dest.as_str() == "/etc/kubernetes/pki")
            .collect();
        assert!(!pki.is_empty());
        for r in pki {
            assert_eq!(r.group, AccountRef::Id(65534));
            assert_eq!(r.dir_group, Some(AccountRef::Id(0)), "{}", r.pattern);
        }
    }

    #[test]
    fn unmatched_entries_are_errors_or_ignored() {
        let b = bundle(&["tls/k8s/ca.crt", "surprise/file"]);
        let err = place(
            &b,
            &controller(&AccountRef::Name("etcd".into()), &AccountRef::Id(65534)),
            Unmatched::Error,
        )
        .expect_err("unmatched");
        assert_eq!(
            err.to_string(),
            "entry \"surprise/file\" (line 3): no layout rule matches it"
        );
        assert_eq!(
            place(
                &b,
                &controller(&AccountRef::Name("etcd".into()), &AccountRef::Id(65534)),
                Unmatched::Ignore
            )
            .expect("ignore")
            .len(),
            1
        );
    }

    #[test]
    fn two_entries_at_one_destination_are_refused() {
        let b = bundle(&["auth/ca.crt", "tls/k8s/ca.crt"]);
        let err = place(
            &b,
            &controller(&AccountRef::Name("etcd".into()), &AccountRef::Id(65534)),
            Unmatched::Error,
        )
        .expect_err("collision");
        assert!(
            err.to_string()
                .contains("would both be installed at /etc/kubernetes/pki/ca.crt"),
            "{err}"
        );
    }

    /// `x.yaml` sorts between `x` and `x/y`: a check of sorted neighbours missed the pair and
    /// `apply` failed after `verify` and `plan` accepted it.
    #[test]
    fn a_file_that_another_needs_as_a_directory_is_refused_whatever_sorts_between() {
        for names in [
            &["manifests/x", "manifests/x.yaml", "manifests/x/y"][..],
            &["manifests/x/y", "manifests/x-1", "manifests/x"][..],
            &[
                "manifests/x",
                "manifests/x.a",
                "manifests/x.b",
                "manifests/x/a/b/c",
            ][..],
        ] {
            let err = place(
                &bundle(names),
                &controller(&AccountRef::Name("etcd".into()), &AccountRef::Id(65534)),
                Unmatched::Error,
            )
            .expect_err("nested");
            assert!(
                matches!(err, LayoutError::Nested { ref file, .. } if file == "manifests/x"),
                "{names:?}: {err}"
            );
        }
        // Control: siblings that only share a prefix are fine.
        let ok = bundle(&["manifests/x.yaml", "manifests/x-1/y", "manifests/xy"]);
        assert_eq!(
            dests(
                &ok,
                &controller(&AccountRef::Name("etcd".into()), &AccountRef::Id(65534))
            )
            .len(),
            3
        );
    }

    #[test]
    fn literal_prefixes() {
        assert_eq!(literal_dir("tls/etcd/peer*"), "tls/etcd/");
        assert_eq!(literal_dir("manifests/*"), "manifests/");
        assert_eq!(literal_dir("kubeconfig"), "");
        assert_eq!(literal_dir("a/b/c"), "a/b/");
    }

    /// The parser+layout fuzz target's properties on seeded random bundles built from segments that
    /// collide on purpose (`a` and `a/b`), nodeward's own suffixes, overlong and non-ASCII names:
    /// whatever is both parsed and placed can be staged and renamed into place.
    #[test]
    fn randomized_placements_can_always_be_staged() {
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let long = "l".repeat(239);
        let longer = "l".repeat(240);
        let segments = [
            "a",
            "b",
            "a.yaml",
            ".a.yaml.nodeward-stage",
            ".b.nodeward-tmp",
            &long,
            &longer,
            "caf\u{e9}",
            "x\u{202e}y",
            "coredns",
        ];
        let (mut placed_total, mut refused) = (0usize, 0usize);
        for _ in 0..4000 {
            let n = (next() % 4) as usize + 1;
            let names: Vec<String> = (0..n)
                .map(|_| {
                    let depth = (next() % 3) as usize + 1;
                    let mut name = String::from("manifests");
                    for _ in 0..depth {
                        name.push('/');
                        name.push_str(segments[(next() as usize) % segments.len()]);
                    }
                    name
                })
                .collect();
            let text: Vec<String> = names.iter().map(|n| format!("##### {n}\nx")).collect();
            let Ok(b) = Bundle::parse(text.join("\n").as_bytes(), &Limits::default()) else {
                refused += 1;
                continue;
            };
            let Ok(placed) = place(
                &b,
                &controller(&AccountRef::Name("etcd".into()), &AccountRef::Id(65534)),
                Unmatched::Ignore,
            ) else {
                refused += 1;
                continue;
            };
            placed_total += placed.len();
            for p in &placed {
                let name = p.dest.as_str().rsplit('/').next().unwrap_or_default();
                assert!(name.is_ascii(), "{name:?}");
                assert!(format!(".{name}.nodeward-stage").len() <= 255, "{name:?}");
                assert!(
                    !name.ends_with(".nodeward-stage") && !name.ends_with(".nodeward-tmp"),
                    "{name:?}"
                );
                for q in &placed {
                    assert!(
                        p.dest == q.dest || !q.dest.is_within(&p.dest),
                        "{} is the parent of {}",
                        p.dest,
                        q.dest
                    );
                }
            }
        }
        assert!(
            placed_total > 300 && refused > 1000,
            "placed {placed_total}, refused {refused}"
        );
    }
}
