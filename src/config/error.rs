//! Why configuration could not be loaded; each names the file.

use std::io;
use std::path::PathBuf;

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
    /// A value that parses but does not make sense with the rest.
    #[error("{}: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
}
