//! Soft and weak dependencies, as kmod reads them.
//!
//! `softdep NAME pre: A B post: C` asks modprobe to load A and B before NAME and C after it; the
//! names are looked up like any `modprobe NAME` (module, then alias). Rules taken from kmod and
//! checked against `modprobe --show-depends` on Debian's 6.1 tree:
//! - the modprobe.d files are read before the tree's `modules.softdep`, and for each module only
//!   the *first* softdep line counts (Debian's `ksmbd` has twelve lines; modprobe uses the first);
//! - tokens before a `pre:` or `post:` mean nothing (`softdep cifs gcm` adds nothing);
//! - `weakdep NAME DEP` (`modules.weakdep`, Linux 6.9) is never loaded by modprobe: it only tells
//!   initramfs builders what a module may ask for. nodeward shows it and loads nothing for it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Where a line came from, for `nodeward modules explain`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Origin {
    pub(crate) file: PathBuf,
    pub(crate) line: usize,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file.display(), self.line)
    }
}

/// One module's soft dependencies (names to look up, normalised).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SoftDep {
    pub(crate) pre: Vec<String>,
    pub(crate) post: Vec<String>,
    pub(crate) origin: Origin,
}

/// Soft and weak dependencies by module name.
#[derive(Debug, Default)]
pub(crate) struct Deps {
    pub(crate) soft: HashMap<String, SoftDep>,
    pub(crate) weak: HashMap<String, (Vec<String>, Origin)>,
}

/// `-` and `_` are the same in module names and aliases.
pub(crate) fn normalise(name: &str) -> String {
    name.replace('-', "_")
}

impl Deps {
    /// Reads one file's `softdep` and `weakdep` lines (a modprobe.d file or `modules.softdep` /
    /// `modules.weakdep`). Call in kmod's order: the first line for a module wins.
    pub(crate) fn parse(&mut self, file: &Path, text: &str) {
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("");
            let mut words = line.split_whitespace();
            let origin = || Origin {
                file: file.to_path_buf(),
                line: i + 1,
            };
            match (words.next(), words.next()) {
                (Some("softdep"), Some(name)) => {
                    let (mut pre, mut post) = (Vec::new(), Vec::new());
                    let mut into: Option<&mut Vec<String>> = None;
                    for w in words {
                        match w {
                            "pre:" => into = Some(&mut pre),
                            "post:" => into = Some(&mut post),
                            dep => {
                                if let Some(list) = into.as_deref_mut() {
                                    list.push(normalise(dep));
                                }
                            }
                        }
                    }
                    self.soft.entry(normalise(name)).or_insert_with(|| SoftDep {
                        pre,
                        post,
                        origin: origin(),
                    });
                }
                (Some("weakdep"), Some(name)) => {
                    let deps: Vec<String> = words.map(normalise).collect();
                    self.weak
                        .entry(normalise(name))
                        .or_insert_with(|| (deps, origin()));
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_line_wins_and_unprefixed_words_mean_nothing() {
        let mut d = Deps::default();
        d.parse(
            Path::new("/etc/modprobe.d/a.conf"),
            "softdep libcrc32c pre: crc32c-generic # ours\n",
        );
        d.parse(
            Path::new("modules.softdep"),
            "softdep libcrc32c pre: crc32c\nsoftdep ksmbd pre: crc32\nsoftdep ksmbd pre: gcm\n\
             softdep cifs gcm\nsoftdep x pre: a b post: c\nweakdep xe i915\n",
        );
        assert_eq!(d.soft["libcrc32c"].pre, ["crc32c_generic"]);
        assert_eq!(d.soft["libcrc32c"].origin.to_string(), "/etc/modprobe.d/a.conf:1");
        assert_eq!(d.soft["ksmbd"].pre, ["crc32"]);
        assert!(d.soft["cifs"].pre.is_empty() && d.soft["cifs"].post.is_empty());
        assert_eq!(
            (d.soft["x"].pre.clone(), d.soft["x"].post.clone()),
            (vec!["a".into(), "b".into()], vec!["c".into()])
        );
        assert_eq!(d.weak["xe"].0, ["i915"]);
    }
}
