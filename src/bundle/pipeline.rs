//! The bundle's pipeline, the same for every entry point (`apply`, the daemon, `bundle install`,
//! `bundle verify`, `bundle list`): pin → parse (never empty; never cut short when unpinned) → the
//! layout places every entry → the install plan (owners, labels, directories) → the removal rule.
//! The `bundle` step adapts it to a plan; the CLI shows it.

use std::collections::BTreeSet;

use super::background::{Background, Got};
use super::fetch;
use super::format::{Bundle, Limits};
use super::install::{self, DirWanted, FileWanted, InstallPlan};
use super::layout::{self, Rule};
use super::settings::Settings;
use crate::host::accounts::Accounts;
use crate::host::fs::Meta;
use crate::root::HostRoot;
use crate::types::AbsPath;

/// Why a bundle cannot be installed; each names the source, entry or path.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error(transparent)]
    Fetch(#[from] fetch::FetchError),
    #[error("{source_name}: {error}")]
    Parse {
        source_name: String,
        error: crate::bundle::format::ParseError,
    },
    #[error("{source_name}: {error}")]
    Layout {
        source_name: String,
        error: layout::LayoutError,
    },
    #[error("entry {entry:?}: {message}")]
    Entry { entry: String, message: String },
    #[error(transparent)]
    Install(#[from] install::InstallError),
    /// The daemon's background download has not finished yet.
    #[error("waiting: {0}")]
    Downloading(String),
    /// The daemon's background download failed; it is retried after a backoff.
    #[error("{0}")]
    DownloadFailed(String),
    #[error("{source_name}: the bundle has no entries; refused (installing it would remove every file)")]
    Empty { source_name: String },
    #[error(
        "{source_name}: looks cut short: {reason}; refused (a bundle pinned by bundle.sha256 is taken as it is)"
    )]
    CutShort { source_name: String, reason: String },
    #[error(
        "{source_name}: would remove {count} file(s) an earlier bundle installed ({listed}); only a bundle pinned by bundle.sha256 may remove files"
    )]
    WouldRemove {
        source_name: String,
        count: usize,
        listed: String,
    },
}

/// The bundle's bytes, by the one rule every caller follows: under the daemon a URL is taken from
/// its background download (the newest good copy at once, else `Downloading` or the failure, so a
/// dripping server holds no pass); otherwise, and for a file, fetched here with its bounds.
pub(crate) fn obtain(
    root: &HostRoot,
    source: &fetch::Source,
    opts: &fetch::Options,
    downloads: Option<&Background>,
    refresh: std::time::Duration,
) -> Result<Vec<u8>, BundleError> {
    match (source, downloads) {
        (fetch::Source::Url(url), Some(downloads)) => match downloads.get(root, url, opts, refresh) {
            Got::Bytes(bytes) => Ok(bytes.as_ref().clone()),
            Got::Pending(what) => Err(BundleError::Downloading(what)),
            Got::Failed(why) => Err(BundleError::DownloadFailed(why)),
        },
        _ => Ok(fetch::fetch(root, source, opts)?),
    }
}

/// What a bundle in hand is for; every entry point (`apply`, the daemon, `bundle install`,
/// `bundle verify`, `bundle list`) goes through [`verify`], and only what it refuses differs.
#[derive(Debug, Clone, Copy)]
pub enum Intent<'a> {
    /// To be installed (or checked as if): the pin matched, a bundle that looks cut short refused
    /// unless pinned, an entry no rule places handled as `bundle.unmatched` says.
    Install { pin: Option<&'a str> },
    /// Only looked at (`bundle list`): shown as it parses, entries without a rule listed as such.
    Look,
}

/// A bundle that passed every check made before the host is looked at.
#[derive(Debug)]
pub struct Verified {
    pub bundle: Bundle,
    pub rules: Vec<Rule>,
    pub placements: Vec<layout::Placement>,
    pub(crate) trust: Trust,
    /// The bundle's size in bytes, as read.
    pub size: usize,
}

/// The host-independent half of the pipeline: pin → parse (never empty; never cut short when
/// unpinned) → the role's layout places every entry.
pub fn verify(
    cfg: &Settings,
    bytes: Vec<u8>,
    source_name: &str,
    intent: Intent<'_>,
) -> Result<Verified, BundleError> {
    let size = bytes.len();
    let (trust, unmatched) = match intent {
        Intent::Install { pin } => {
            if let Some(want) = pin {
                fetch::verify_sha256(&bytes, want, source_name)?;
            }
            (Trust::of(pin.is_some()), cfg.unmatched)
        }
        // Listing only looks: a bundle that seems cut short is still shown (verify says so).
        Intent::Look => (Trust::Pinned, layout::Unmatched::Ignore),
    };
    let bundle = parse(cfg, bytes, source_name, trust)?;
    let rules = cfg.rules();
    let placements = layout::place(&bundle, &rules, unmatched).map_err(|error| BundleError::Layout {
        source_name: source_name.into(),
        error,
    })?;
    Ok(Verified {
        bundle,
        rules,
        placements,
        trust,
        size,
    })
}

/// How far a bundle's bytes are trusted to be whole: pinned by a sha256 they matched, or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Trust {
    /// The bytes matched `bundle.sha256` (or `--sha256`): exactly what the operator meant.
    Pinned,
    /// Nothing vouches for the bytes: a truncated copy must not pass for a smaller bundle.
    Unpinned,
}

impl Trust {
    pub(crate) fn of(pinned: bool) -> Trust {
        if pinned { Trust::Pinned } else { Trust::Unpinned }
    }
}

/// Parses with the configured size limit. Never accepts an empty bundle; an unpinned one must not
/// look cut short (see `Bundle::cut_short`).
fn parse(cfg: &Settings, bytes: Vec<u8>, source_name: &str, trust: Trust) -> Result<Bundle, BundleError> {
    let limits = Limits {
        max_bundle_bytes: cfg.max_bytes,
        ..Limits::default()
    };
    let bundle = Bundle::parse_owned(bytes, &limits).map_err(|error| BundleError::Parse {
        source_name: source_name.into(),
        error,
    })?;
    if bundle.entries.is_empty() {
        return Err(BundleError::Empty {
            source_name: source_name.into(),
        });
    }
    if trust == Trust::Unpinned {
        if let Some(reason) = bundle.cut_short() {
            return Err(BundleError::CutShort {
                source_name: source_name.into(),
                reason,
            });
        }
    }
    Ok(bundle)
}

/// The removal rule: files an earlier bundle installed are removed only by a pinned bundle. An
/// unpinned source cut between two entries parses as a smaller, complete-looking bundle; without
/// this rule it would delete the control plane's PKI and manifests.
fn refuse_unpinned_removals(plan: &InstallPlan, trust: Trust, source_name: &str) -> Result<(), BundleError> {
    if trust == Trust::Pinned || plan.deletes.is_empty() {
        return Ok(());
    }
    let mut listed: Vec<String> = plan.deletes.iter().take(3).map(ToString::to_string).collect();
    if plan.deletes.len() > 3 {
        listed.push("…".into());
    }
    Err(BundleError::WouldRemove {
        source_name: source_name.into(),
        count: plan.deletes.len(),
        listed: listed.join(", "),
    })
}

/// The uid and gid a rule's files get, and the metadata of the directories it creates; an account
/// that does not exist is an error naming the entry that needs it.
fn owners(accounts: &Accounts, rule: &Rule, entry: &str) -> Result<(u32, u32, Meta), BundleError> {
    let fail = |what: &str, e: &dyn std::fmt::Display| BundleError::Entry {
        entry: entry.to_owned(),
        message: format!("{what}: {e}"),
    };
    let uid = accounts.uid(&rule.owner).map_err(|e| fail("owner", &e))?;
    let gid = accounts.gid(&rule.group).map_err(|e| fail("group", &e))?;
    let dir_owner = rule.dir_owner.as_ref().unwrap_or(&rule.owner);
    let duid = accounts.uid(dir_owner).map_err(|e| fail("directory owner", &e))?;
    let dgid = match &rule.dir_group {
        Some(g) => accounts.gid(g).map_err(|e| fail("directory group", &e))?,
        None => gid,
    };
    let dir_meta = Meta {
        mode: rule.dir_mode.bits(),
        uid: duid,
        gid: dgid,
        label: None,
    };
    Ok((uid, gid, dir_meta))
}

/// The host facts an install plan is computed against.
pub(crate) struct Host<'a> {
    pub(crate) root: &'a HostRoot,
    pub(crate) accounts: &'a Accounts,
    /// The SELinux label a path gets when none is configured for it (`None`: labels off).
    pub(crate) label_for: &'a dyn Fn(&AbsPath) -> Option<String>,
}

/// Computes the install for a verified bundle: owners, labels, the directories down to each file;
/// files an earlier bundle installed are removed only by a pinned bundle.
pub(crate) fn install_plan(
    host: &Host<'_>,
    verified: &Verified,
    source_name: &str,
) -> Result<InstallPlan, BundleError> {
    let Verified {
        bundle,
        rules,
        placements,
        ..
    } = verified;
    let mut files = Vec::with_capacity(placements.len() + 1);
    let mut dirs: Vec<DirWanted> = Vec::new();
    let mut seen_dirs = BTreeSet::new();
    for p in placements {
        let entry = &bundle.entries[p.index];
        let rule = &rules[p.rule];
        let (uid, gid, dir_meta) = owners(host.accounts, rule, p.entry.as_str())?;
        // Directories from the rule's destination down to the file's parent get the rule's mode.
        let mut chain = Vec::new();
        let mut cur = p.dest.parent();
        while let Some(d) = cur {
            let within = d.is_within(&rule.dest);
            chain.push((d.clone(), within));
            if !within {
                break;
            }
            cur = d.parent();
        }
        for (d, within) in chain.into_iter().rev() {
            if seen_dirs.insert(d.clone()) {
                let label = (host.label_for)(&d);
                dirs.push(DirWanted {
                    path: d,
                    meta: within.then(|| Meta {
                        label,
                        ..dir_meta.clone()
                    }),
                });
            }
        }
        let label = rule
            .label
            .as_ref()
            .map(ToString::to_string)
            .or_else(|| (host.label_for)(&p.dest));
        files.push(FileWanted {
            dest: p.dest.clone(),
            content: entry.content.clone(),
            meta: Meta {
                mode: rule.mode.bits(),
                uid,
                gid,
                label,
            },
        });
    }
    let managed: Vec<AbsPath> = rules.iter().map(|r| r.dest.clone()).collect();
    let plan = install::plan(host.root, dirs, files, &managed)?;
    refuse_unpinned_removals(&plan, verified.trust, source_name)?;
    Ok(plan)
}
