//! What was imported: each archive by path, with the file it was (device, inode, size, mtime),
//! what it held, and the engines it went into. An archive whose file is unchanged
//! and whose images are still in every engine it goes to is not read again: a reboot imports
//! nothing.
//!
//! nodeward's own state, read through the one door as strictly as its configuration: a record
//! that does not parse, or that someone else could have written, is set aside with its reason
//! and every archive is checked again (an import is idempotent; a record is only a shortcut).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::archive::{Format, ShippedImage};

pub(crate) const VERSION: u32 = 1;

/// The file an archive was when it was imported: a change to any of these reads it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Fingerprint {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) size: u64,
    pub(crate) mtime_ns: i128,
}

/// One imported archive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Imported {
    pub(crate) file: Fingerprint,
    pub(crate) format: Format,
    pub(crate) images: Vec<ShippedImage>,
    /// The engines it was imported into (`containerd`, `podman`, `docker`).
    pub(crate) into: Vec<String>,
}

/// An archive refused: not read again until its file changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Refused {
    pub(crate) file: Fingerprint,
    /// Why, as the step reported it.
    pub(crate) error: String,
}

/// The whole record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Record {
    pub(crate) version: u32,
    /// By the archive's host path.
    pub(crate) archives: BTreeMap<String, Imported>,
    /// Archives whose content was refused, by path.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) refused: BTreeMap<String, Refused>,
}

/// Why a record of imports is set aside (the caller names the file).
#[derive(Debug, thiserror::Error)]
pub(crate) enum RecordError {
    #[error(transparent)]
    Json(serde_json::Error),
    #[error("version {0} (this nodeward writes {VERSION})")]
    Version(u32),
    #[error("{count} archives recorded, at most {most}")]
    TooMany { count: usize, most: usize },
}

impl Record {
    /// Parses a record; the error says what is wrong (the caller names the file).
    pub(crate) fn parse(bytes: &[u8]) -> Result<Record, RecordError> {
        let record: Record = serde_json::from_slice(bytes).map_err(RecordError::Json)?;
        if record.version != VERSION {
            return Err(RecordError::Version(record.version));
        }
        let most = super::settings::MAX_ARCHIVES * 16;
        let count = record.archives.len() + record.refused.len();
        if count > most {
            return Err(RecordError::TooMany { count, most });
        }
        Ok(record)
    }

    pub(crate) fn to_json(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec_pretty(self).unwrap_or_default();
        out.push(b'\n');
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Record {
        let mut r = Record {
            version: VERSION,
            ..Record::default()
        };
        r.refused.insert(
            "/var/lib/nodeward/images/bad.tar".into(),
            Refused {
                file: Fingerprint {
                    dev: 1,
                    ino: 5,
                    size: 6,
                    mtime_ns: 7,
                },
                error: "altered".into(),
            },
        );
        r.archives.insert(
            "/var/lib/nodeward/images/pause.tar".into(),
            Imported {
                file: Fingerprint {
                    dev: 1,
                    ino: 2,
                    size: 3,
                    mtime_ns: 4,
                },
                format: Format::Oci,
                images: vec![ShippedImage {
                    name: Some("registry.k8s.io/pause:3.10.1".into()),
                    manifest: Some(format!("sha256:{}", "b".repeat(64))),
                }],
                into: vec!["containerd".into()],
            },
        );
        r
    }

    #[test]
    fn a_record_reads_back_as_written() {
        let r = sample();
        assert_eq!(
            Record::parse(&r.to_json()).expect("the sample record round-trips"),
            r
        );
    }

    #[test]
    fn an_unknown_field_or_version_is_refused() {
        let text = String::from_utf8(sample().to_json()).expect("the sample record round-trips");
        let extra = text.replacen("\"version\"", "\"extra\": 1,\n  \"version\"", 1);
        assert!(
            Record::parse(extra.as_bytes())
                .unwrap_err()
                .to_string()
                .contains("extra")
        );
        let newer = text.replacen("\"version\": 1", "\"version\": 2", 1);
        assert!(
            Record::parse(newer.as_bytes())
                .unwrap_err()
                .to_string()
                .contains("version 2")
        );
        assert!(Record::parse(b"{").is_err());
    }
}
