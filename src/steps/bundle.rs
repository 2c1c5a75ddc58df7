//! The `bundle` step: fetch and verify the assets bundle, place its entries by layout, and install
//! what differs in one transaction (see `bundle::install`).

use std::collections::BTreeSet;
use std::time::Duration;

use crate::bundle::background::Got;
use crate::bundle::fetch::{self, Options};
use crate::bundle::format::{Bundle, Limits};
use crate::bundle::install::{self, DirWanted, FileWanted, InstallError, InstallPlan};
use crate::bundle::layout::{self, Rule};
use crate::config::input::{BundleInput, LayoutChoice, Role};
use crate::host::fs::Meta;
use crate::plan::Step;
use crate::plan::{Action, BundleFile, Change, Effect, EffectError, FailureKind, FileOp, StepPlan};
use crate::root::HostRoot;
use crate::steps::context::Context;
use crate::types::{AbsPath, Mode};

/// Why the bundle step cannot go ahead; each names the source, entry or path.
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

/// What retrying can do about a bundle failure: a download under way is waited for; a server, the
/// network or the install's I/O may recover; a refused bundle or a wrong setting stays refused.
pub fn failure_kind(e: &BundleError) -> FailureKind {
    use fetch::FetchError as F;
    match e {
        BundleError::Downloading(_) => FailureKind::Waiting,
        BundleError::DownloadFailed(_) => FailureKind::Transient,
        BundleError::Fetch(f) => match f {
            F::Resolve { .. } | F::Read { .. } | F::Status { .. } | F::Transport { .. } => {
                FailureKind::Transient
            }
            F::Cancelled { .. } | F::Truncated { .. } => FailureKind::Transient,
            _ => FailureKind::Permanent,
        },
        BundleError::Install(install::InstallError::Host(h)) => crate::steps::failure::host_kind(h),
        BundleError::Install(install::InstallError::State { .. }) => FailureKind::Transient,
        BundleError::Install(_)
        | BundleError::Parse { .. }
        | BundleError::Layout { .. }
        | BundleError::Entry { .. }
        | BundleError::Empty { .. }
        | BundleError::CutShort { .. }
        | BundleError::WouldRemove { .. } => FailureKind::Permanent,
    }
}

/// The rules for the configured (or role-derived) layout.
pub fn rules(cfg: &BundleInput, role: Role) -> Vec<Rule> {
    match (cfg.layout, role) {
        (LayoutChoice::Custom, _) => cfg.rules.clone(),
        (LayoutChoice::Controller, _) | (LayoutChoice::Auto, Role::Controller) => {
            layout::controller(&cfg.etcd_user.to_string(), &cfg.pki_group.to_string())
        }
        (LayoutChoice::Worker, _) | (LayoutChoice::Auto, Role::Worker) => layout::worker(),
    }
}

pub(crate) fn fetch_options(cfg: &BundleInput) -> Options {
    Options {
        ca_file: cfg.ca_file.clone(),
        allow_http: cfg.allow_http,
        timeout: Duration::from_secs(cfg.timeout_seconds),
        retries: cfg.retries,
        backoff: Duration::from_secs(1),
        max_bytes: cfg.max_bytes,
        pinned: cfg.sha256.as_ref().map(|h| h.as_str().to_owned()),
    }
}

/// The uid and gid a rule's files get, and the metadata of the directories it creates; an account
/// that does not exist is an error naming the entry that needs it.
fn owners(ctx: &Context<'_>, rule: &Rule, entry: &str) -> Result<(u32, u32, Meta), BundleError> {
    let fail = |what: &str, e: &dyn std::fmt::Display| BundleError::Entry {
        entry: entry.to_owned(),
        message: format!("{what}: {e}"),
    };
    let uid = ctx.accounts.uid(&rule.owner).map_err(|e| fail("owner", &e))?;
    let gid = ctx.accounts.gid(&rule.group).map_err(|e| fail("group", &e))?;
    let dir_owner = rule.dir_owner.as_ref().unwrap_or(&rule.owner);
    let duid = ctx
        .accounts
        .uid(dir_owner)
        .map_err(|e| fail("directory owner", &e))?;
    let dgid = match &rule.dir_group {
        Some(g) => ctx.accounts.gid(g).map_err(|e| fail("directory group", &e))?,
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

/// Computes the install for a verified bundle: owners, labels, the directories down to each file.
fn install_plan(ctx: &Context<'_>, verified: &Verified) -> Result<InstallPlan, BundleError> {
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
        let (uid, gid, dir_meta) = owners(ctx, rule, p.entry.as_str())?;
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
                let label = ctx.labeling.label_for(&d);
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
            .or_else(|| ctx.labeling.label_for(&p.dest));
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
    Ok(install::plan(ctx.root, dirs, files, &managed)?)
}

pub fn plan(ctx: &Context<'_>) -> Result<StepPlan, BundleError> {
    let mut out = StepPlan::new(Step::Bundle);
    out.all_or_nothing = true;
    // `apply` finishes an interrupted install before planning; `plan` and `status` only look, and
    // show it as drift: the files on disk are neither the old set nor the new one until then.
    if let Some(pending) = install::pending(ctx.root)? {
        let action = Action::RecoverBundle { pending };
        out.changes.push(Change::new(
            "bundle",
            ctx.root.dir(),
            action,
            Recover(ctx.root.clone()),
        ));
        out.notes
            .push("an interrupted install is pending: the rest is planned before it is finished".into());
    }
    let cfg = &ctx.settings.bundle;
    let Some(source) = &cfg.source else {
        out.notes.push("no bundle configured (bundle.source)".into());
        return Ok(out);
    };
    let opts = fetch_options(cfg);
    let bytes = match (source, ctx.downloads) {
        (fetch::Source::Url(url), Some(downloads)) => {
            let refresh = Duration::from_secs(ctx.settings.daemon.interval_seconds);
            match downloads.get(ctx.root, url, &opts, refresh) {
                Got::Bytes(bytes) => bytes.as_ref().clone(),
                Got::Pending(what) => return Err(BundleError::Downloading(what)),
                Got::Failed(why) => return Err(BundleError::DownloadFailed(why)),
            }
        }
        _ => fetch::fetch(ctx.root, source, &opts)?,
    };
    let pin = cfg.sha256.as_ref().map(|h| h.as_str());
    let mut planned = plan_bytes(ctx, bytes, &source.to_string(), pin)?;
    out.changes.append(&mut planned.changes);
    out.notes.append(&mut planned.notes);
    Ok(out)
}

/// The step's plan for bundle bytes already in hand: the configured pin (`apply`, the daemon) or
/// the one given on the command line (`nodeward bundle install FILE --sha256`).
pub fn plan_bytes(
    ctx: &Context<'_>,
    bytes: Vec<u8>,
    source_name: &str,
    pin: Option<&str>,
) -> Result<StepPlan, BundleError> {
    let mut out = StepPlan::new(Step::Bundle);
    out.all_or_nothing = true;
    let cfg = &ctx.settings.bundle;
    let verified = verify(
        cfg,
        ctx.settings.node.role,
        bytes,
        source_name,
        Intent::Install { pin },
    )?;
    let plan = install_plan(ctx, &verified)?;
    refuse_unpinned_removals(&plan, verified.trust, source_name)?;
    out.notes.push(format!(
        "{} entries from {source_name}",
        verified.bundle.entries.len()
    ));
    if let Some(change) = change(ctx, plan) {
        out.changes.push(change);
    }
    Ok(out)
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
    pub trust: Trust,
    /// The bundle's size in bytes, as read.
    pub size: usize,
}

/// The host-independent half of the pipeline: pin → parse (never empty; never cut short when
/// unpinned) → the role's layout places every entry.
pub fn verify(
    cfg: &BundleInput,
    role: Role,
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
    let rules = rules(cfg, role);
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
pub enum Trust {
    /// The bytes matched `bundle.sha256` (or `--sha256`): exactly what the operator meant.
    Pinned,
    /// Nothing vouches for the bytes: a truncated copy must not pass for a smaller bundle.
    Unpinned,
}

impl Trust {
    pub fn of(pinned: bool) -> Trust {
        if pinned { Trust::Pinned } else { Trust::Unpinned }
    }
}

/// Parses with the configured size limit. Never accepts an empty bundle; an unpinned one must not
/// look cut short (see `Bundle::cut_short`).
fn parse(cfg: &BundleInput, bytes: Vec<u8>, source_name: &str, trust: Trust) -> Result<Bundle, BundleError> {
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

/// The single transactional change for an install plan, or `None` when there is nothing to do.
pub fn change(ctx: &Context<'_>, plan: InstallPlan) -> Option<Change> {
    if plan.noop {
        return None;
    }
    let mut files: Vec<BundleFile> = plan
        .puts
        .iter()
        .map(|(f, op)| BundleFile {
            path: f.dest.to_string(),
            op: *op,
            mode: Some(Mode::new(f.meta.mode)),
            owner: Some(ctx.accounts.owner_label(f.meta.uid, f.meta.gid)),
            bytes: Some(f.content.len()),
        })
        .collect();
    files.extend(plan.deletes.iter().map(|d| BundleFile {
        path: d.to_string(),
        op: FileOp::Delete,
        mode: None,
        owner: None,
        bytes: None,
    }));
    let effect = Install {
        plan,
        root: ctx.root.clone(),
    };
    Some(Change::new(
        "bundle",
        ctx.root.dir(),
        Action::InstallBundle { files },
        effect,
    ))
}

/// An install that failed (and was rolled back) or a recovery that could not finish.
#[derive(Debug, thiserror::Error)]
#[error("bundle install: {0}")]
pub(crate) struct InstallFailed(#[from] pub InstallError);

/// Installs the planned files in one transaction.
struct Install {
    plan: InstallPlan,
    root: HostRoot,
}

/// Counts only: the plan holds the files' contents (keys among them).
impl std::fmt::Debug for Install {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Install")
            .field("puts", &self.plan.puts.len())
            .field("deletes", &self.plan.deletes.len())
            .finish()
    }
}

impl Effect for Install {
    fn apply(&self, _: &Change) -> Result<(), EffectError> {
        install::apply(&self.root, &self.plan).map_err(|e| Box::new(InstallFailed(e)) as EffectError)
    }
}

/// Finishes or rolls back an interrupted install.
#[derive(Debug)]
struct Recover(HostRoot);

impl Effect for Recover {
    fn apply(&self, _: &Change) -> Result<(), EffectError> {
        install::recover(&self.0)
            .map(|_| ())
            .map_err(|e| Box::new(InstallFailed(e)) as EffectError)
    }
}
