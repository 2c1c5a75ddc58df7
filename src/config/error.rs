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
