//! Why configuration could not be loaded; each names the file, and a value's rule also the key and
//! the line that set it.

use std::fmt;
use std::io;
use std::path::PathBuf;

pub use crate::setting::KeyError;

/// Configuration that cannot be used. These are permanent: retrying will not help.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A TOML syntax, unknown-key or type error; the message carries line, column and key.
    #[error("{}: {}", path.display(), message.trim_end())]
    Parse { path: PathBuf, message: String },
    /// A configuration source that someone other than root (or the user running nodeward) could
    /// change, refused as sshd's StrictModes refuses such files.
    #[error("{}: refused: {reason} (a configuration source must be owned by root and writable by no one else)", path.display())]
    Unsafe { path: PathBuf, reason: String },
    /// A file that cannot be a configuration source (a name or link leading out of the root).
    #[error("{}: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
    /// A value that parses but breaks a rule of its section, blamed on the file and line that set
    /// the key the rule names.
    #[error("{origin}: {error}")]
    Key { origin: Origin, error: KeyError },
}

/// The longest parse message kept: toml quotes the offending line, which may be megabytes long.
pub(crate) const MAX_MESSAGE: usize = 2048;
/// The longest line of it kept: the quoted line is cut, so the reason under it survives.
const MAX_LINE: usize = 240;

/// `message` with each line cut to [`MAX_LINE`] bytes and the whole to [`MAX_MESSAGE`] (at
/// character boundaries), saying how much was cut.
pub(crate) fn excerpt(message: &str) -> String {
    let lines: Vec<String> = message.split('\n').map(|l| cut(l, MAX_LINE)).collect();
    cut(&lines.join("\n"), MAX_MESSAGE)
}

fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let at = (0..=max).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
    format!("{}… ({} more bytes)", &text[..at], text.len() - at)
}

/// Where a value was set: a drop-in and the line of its key, or the built-in defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// `None`: the built-in defaults.
    pub(crate) path: Option<PathBuf>,
    /// 1-based; `None` when the key was not found in the file's text (set as part of a table).
    pub(crate) line: Option<usize>,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.path, self.line) {
            (None, _) => f.write_str("(built-in defaults)"),
            (Some(p), None) => write!(f, "{}", p.display()),
            (Some(p), Some(line)) => write!(f, "{}:{line}", p.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_are_capped_at_a_character_boundary() {
        assert_eq!(excerpt("short"), "short");
        let long = "é".repeat(MAX_MESSAGE);
        let e = excerpt(&long);
        assert!(e.len() < MAX_LINE + 40, "{}", e.len());
        assert!(
            e.ends_with(&format!("({} more bytes)", long.len() - MAX_LINE)),
            "{e:.80}"
        );
        // Many lines: the whole is capped too.
        let many = "x\n".repeat(MAX_MESSAGE);
        assert!(excerpt(&many).len() < MAX_MESSAGE + 40);
    }

    /// toml quotes the offending line, then says what is wrong: a megabyte line is cut and the
    /// reason under it kept.
    #[test]
    fn the_reason_under_a_long_quoted_line_survives() {
        let message = format!(
            "TOML parse error at line 1, column 7\n  |\n1 | [dirs.'/{}']\n  |       ^\nthe reason\n",
            "d".repeat(1 << 20)
        );
        let e = excerpt(&message);
        assert!(e.len() < 600, "{}", e.len());
        assert!(e.contains("the reason"), "{e}");
        assert!(e.starts_with("TOML parse error at line 1, column 7"), "{e}");
    }
}
