//! Host paths as the configuration names them: [`AbsPath`], absolute and normalised, no longer
//! than the kernel takes.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::invalid::Invalid;

/// An absolute, normalised host path: no `.`/`..`/empty segments, no trailing slash, no control
/// characters. Ordering is by string, so a parent sorts before its children.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AbsPath(String);

impl AbsPath {
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
    pub(crate) fn as_path(&self) -> &Path {
        Path::new(&self.0)
    }
    /// The path without its leading `/`, to join below a root.
    pub(crate) fn relative(&self) -> &Path {
        Path::new(self.0.trim_start_matches('/'))
    }
    /// The parent directory, or `None` for `/`.
    pub(crate) fn parent(&self) -> Option<AbsPath> {
        let idx = self.0.rfind('/')?;
        if self.0.len() == 1 {
            return None;
        }
        Some(AbsPath(if idx == 0 {
            "/".to_owned()
        } else {
            self.0[..idx].to_owned()
        }))
    }
    /// True when `self` is `other` or lies below it.
    pub(crate) fn is_within(&self, other: &AbsPath) -> bool {
        other.0 == "/"
            || self.0 == other.0
            || (self.0.starts_with(&other.0) && self.0.as_bytes().get(other.0.len()) == Some(&b'/'))
    }
    /// `self` joined with a relative, already validated child path.
    pub(crate) fn join(&self, child: &str) -> Result<AbsPath, Invalid> {
        let base = if self.0 == "/" { "" } else { self.0.as_str() };
        format!("{base}/{child}").parse()
    }
    pub(crate) fn to_path_buf(&self) -> PathBuf {
        PathBuf::from(&self.0)
    }
}

/// The longest path the kernel takes (`PATH_MAX` with its NUL) and the longest name in it
/// (`NAME_MAX`): a longer one could only fail later, at the syscall, far from the file that set it.
pub(crate) const MAX_PATH_BYTES: usize = 4095;
pub(crate) const MAX_NAME_BYTES: usize = 255;

/// `s` for an error message: whole when short, else its start and its length (a hostile
/// megabyte-long path must not become a megabyte-long message).
fn shown(s: &str) -> String {
    const KEEP: usize = 64;
    if s.len() <= KEEP * 2 {
        return format!("{s:?}");
    }
    let cut = (0..=KEEP).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0);
    format!("{:?}… ({} bytes)", &s[..cut], s.len())
}

impl AbsPath {
    fn parse_str(s: &str) -> Result<Self, String> {
        if !s.starts_with('/') {
            return Err(format!("{} is not an absolute path", shown(s)));
        }
        if s.len() > MAX_PATH_BYTES {
            return Err(format!(
                "{} is longer than the kernel takes ({MAX_PATH_BYTES} bytes)",
                shown(s)
            ));
        }
        if s.chars().any(char::is_control) {
            return Err(format!("{} contains a control character", shown(s)));
        }
        if s == "/" {
            return Ok(AbsPath(s.to_owned()));
        }
        for seg in s[1..].split('/') {
            match seg {
                "" => return Err(format!("{} has an empty segment or a trailing slash", shown(s))),
                "." | ".." => return Err(format!("{} contains a {seg:?} segment", shown(s))),
                _ if seg.len() > MAX_NAME_BYTES => {
                    return Err(format!(
                        "{} has a name longer than the kernel takes ({MAX_NAME_BYTES} bytes)",
                        shown(s)
                    ));
                }
                _ => {}
            }
        }
        Ok(AbsPath(s.to_owned()))
    }
}

impl AbsPath {
    /// Whether `s` passes [`AbsPath`]'s parser, decided at compile time for built-in constants
    /// (see [`crate::abs_path!`]): absolute, no control characters, no empty, `.` or `..` segment.
    pub(crate) const fn is_valid_const(s: &str) -> bool {
        let b = s.as_bytes();
        if b.is_empty() || b[0] != b'/' || b.len() > MAX_PATH_BYTES {
            return false;
        }
        if b.len() == 1 {
            return true;
        }
        let mut i = 1;
        let mut seg_start = 1;
        while i <= b.len() {
            if i == b.len() || b[i] == b'/' {
                let len = i - seg_start;
                let dots = (len == 1 && b[seg_start] == b'.')
                    || (len == 2 && b[seg_start] == b'.' && b[seg_start + 1] == b'.');
                if len == 0 || dots || len > MAX_NAME_BYTES {
                    return false;
                }
                seg_start = i + 1;
            } else if b[i] < 0x20 || b[i] == 0x7f {
                return false;
            } else if b[i] == 0xc2 && i + 1 < b.len() && b[i + 1] >= 0x80 && b[i + 1] <= 0x9f {
                // U+0080..U+009F, the C1 controls `char::is_control` also refuses.
                return false;
            }
            i += 1;
        }
        true
    }

    /// Whether every path of a built-in table passes the parser (used in `const` assertions).
    pub(crate) const fn all_valid_const(paths: &[&str]) -> bool {
        let mut i = 0;
        while i < paths.len() {
            if !AbsPath::is_valid_const(paths[i]) {
                return false;
            }
            i += 1;
        }
        true
    }

    /// A path composed of checked parts (a fixed directory and a segment made safe), so it cannot
    /// fail the parser; checked again in debug builds.
    pub(crate) fn from_checked(s: String) -> AbsPath {
        debug_assert!(AbsPath::parse_str(&s).is_ok(), "{s:?}");
        AbsPath(s)
    }

    /// A built-in path whose validity [`crate::abs_path!`] proved at compile time.
    #[doc(hidden)]
    pub(crate) fn from_checked_const(s: &'static str) -> AbsPath {
        AbsPath(s.to_owned())
    }
}

impl FromStr for AbsPath {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<Self, Invalid> {
        Self::parse_str(s).map_err(Invalid)
    }
}

impl fmt::Display for AbsPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
string_serde!(AbsPath, "path");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abs_path;

    #[test]
    fn the_const_check_agrees_with_the_parser() {
        for s in [
            "/",
            "/etc",
            "/etc/kubernetes/pki",
            "/a.b/..c",
            "",
            "etc",
            "/etc/",
            "//",
            "/a/./b",
            "/a/../b",
            "/a\u{7f}",
            "/a\nb",
            "/.",
            "/a\u{85}b",
            "/caf\u{e9}",
        ] {
            assert_eq!(AbsPath::is_valid_const(s), s.parse::<AbsPath>().is_ok(), "{s:?}");
        }
        assert_eq!(abs_path!("/etc/kubernetes").as_str(), "/etc/kubernetes");
    }

    #[test]
    fn abs_path_rejects_relative_dotdot_empty_and_control() {
        for bad in [
            "etc",
            "/etc/../x",
            "/etc//x",
            "/etc/",
            "/./etc",
            "/etc/\u{1}x",
            "",
        ] {
            assert!(bad.parse::<AbsPath>().is_err(), "{bad:?} accepted");
        }
        assert!("/etc/kubernetes".parse::<AbsPath>().is_ok());
    }

    #[test]
    fn abs_path_takes_what_the_kernel_takes_and_says_so_briefly() {
        let name = |n: usize| format!("/{}", "d".repeat(n));
        assert!(name(MAX_NAME_BYTES).parse::<AbsPath>().is_ok());
        let long = name(MAX_NAME_BYTES + 1)
            .parse::<AbsPath>()
            .expect_err("a name over NAME_MAX");
        assert!(
            long.to_string().contains("a name longer than the kernel takes"),
            "{long}"
        );
        let deep = "/d".repeat(MAX_PATH_BYTES / 2);
        assert!(deep.parse::<AbsPath>().is_ok(), "{} bytes", deep.len());
        let deeper = format!("{deep}/e");
        let err = deeper.parse::<AbsPath>().expect_err("a path over PATH_MAX");
        assert!(err.to_string().contains("longer than the kernel takes"), "{err}");
        // A megabyte path: a short message, its length named.
        let bomb = name(1 << 20).parse::<AbsPath>().expect_err("a megabyte path");
        assert!(
            bomb.to_string().len() < 300,
            "{} bytes of message",
            bomb.to_string().len()
        );
        assert!(bomb.to_string().contains("(1048577 bytes)"), "{bomb}");
        for s in [name(MAX_NAME_BYTES), name(MAX_NAME_BYTES + 1), deep, deeper] {
            assert_eq!(
                AbsPath::is_valid_const(&s),
                s.parse::<AbsPath>().is_ok(),
                "{} bytes",
                s.len()
            );
        }
    }

    #[test]
    fn abs_path_parent_and_within() {
        let p: AbsPath = "/var/lib/kubelet".parse().expect("path");
        assert_eq!(p.parent().expect("parent").as_str(), "/var/lib");
        assert_eq!(
            "/var"
                .parse::<AbsPath>()
                .expect("p")
                .parent()
                .expect("root")
                .as_str(),
            "/"
        );
        assert!(p.is_within(&"/var/lib".parse().expect("p")));
        assert!(p.is_within(&p));
        assert!(!p.is_within(&"/var/li".parse().expect("p")));
        assert!(!"/var/lib/kubelet-x".parse::<AbsPath>().expect("p").is_within(&p));
    }
}
