//! The `kubelet` step: the KubeletConfiguration file, and the kubelet container (start, adopt or
//! replace). `nodeward apply` starts the container once; `nodeward run` hands the wanted spec to
//! the supervisor instead, which also keeps it running.

use sha2::{Digest, Sha256};

use crate::containerd;
use crate::host::HostError;
use crate::host::container::UserNamespace;
use crate::host::fs::{self, Kind as FileKind};
use crate::kubelet::config_file::{self, ConfigFacts};
use crate::kubelet::decide::{Seen, decide};
use crate::kubelet::handoff::Handoff;
use crate::kubelet::oneshot::OneShot;
use crate::kubelet::pull_source;
use crate::kubelet::runtime::{Runtime, RuntimeError};
use crate::kubelet::settings::input::RenderConfig;
use crate::kubelet::settings::rules;
use crate::kubelet::spec::Desired;
use crate::kubelet::spec::{self, HostFacts};
use crate::kubelet::spec_record;
use crate::plan::Step;
use crate::plan::{Action, Change, Effect, EffectError, FailureKind, KubeletOp, StepPlan};
use crate::registration::Unresolved;
use crate::root::RootError;
use crate::steps::context::Context;
use crate::steps::files;
use crate::types::{AbsPath, Mode};

/// What the step wants, before looking at containers.
pub struct Wanted {
    /// `None`: the kubelet is not managed (disabled, or no image configured).
    pub desired: Option<Desired>,
    /// The KubeletConfiguration file and nodeward's healthz drop-in, where they must change.
    pub(crate) config_write: Vec<Change>,
    pub notes: Vec<String>,
}

/// Why the kubelet cannot be planned; each says "kubelet:" and names the file or cause.
#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    #[error("kubelet: {file}: {source}")]
    Resolve {
        file: AbsPath,
        #[source]
        source: RootError,
    },
    #[error("kubelet: {0} does not exist and kubelet.render_config = \"never\"")]
    NoConfigFile(AbsPath),
    #[error("kubelet: {0}")]
    Spec(#[from] spec::SpecError),
    /// An operator's KubeletConfiguration drop-in the kubelet would refuse to start with: reported
    /// with its file and reason, and no kubelet started or replaced with it (never a crash loop).
    #[error("kubelet: {file}: the kubelet would refuse this drop-in: {reason}")]
    DropIn { file: String, reason: String },
    #[error("kubelet: {0}")]
    Runtime(#[from] RuntimeError),
    #[error(transparent)]
    Host(#[from] HostError),
    /// Its image comes from an archive being imported beside the passes: started once it is in,
    /// never pulled from a registry meanwhile.
    #[error("kubelet: waiting for its image: {archive} is being imported in the background")]
    ImageImporting { archive: String },
}

/// What retrying can do: what the kubelet waits for arrives (watched), an engine call may pass, a
/// missing configuration file or engine stays missing until someone acts.
pub(crate) fn failure_kind(e: &KubeletError) -> FailureKind {
    match e {
        // A metadata file that is there and wrong does not fix itself by waiting.
        KubeletError::Spec(spec::SpecError::Identity(Unresolved::BadMetadata(_))) => FailureKind::Permanent,
        // Every other spec error is a wait (see `SpecError`).
        KubeletError::Spec(_) | KubeletError::ImageImporting { .. } => FailureKind::Waiting,
        KubeletError::NoConfigFile(_) | KubeletError::DropIn { .. } => FailureKind::Permanent,
        KubeletError::Runtime(RuntimeError::NotFound { .. }) => FailureKind::Permanent,
        KubeletError::Host(h) => crate::steps::failure::host_kind(h),
        KubeletError::Runtime(_) | KubeletError::Resolve { .. } => FailureKind::Transient,
    }
}

/// The kubelet container could not be brought to the planned state.
#[derive(Debug, thiserror::Error)]
#[error("kubelet: {0}")]
pub(crate) struct RunFailed(#[from] pub RuntimeError);

/// The configuration file to write (if any) and the container spec.
pub fn wanted(ctx: &Context<'_>) -> Result<Wanted, KubeletError> {
    wanted_with(ctx, false)
}

/// [`wanted`] as it will be once what the kubelet waits for (its kubeconfig, the runtime's socket,
/// DNS) has arrived: the command `kubelet show` and `plan` print beside what it waits for.
pub fn wanted_once_ready(ctx: &Context<'_>) -> Result<Wanted, KubeletError> {
    wanted_with(ctx, true)
}

/// Why nodeward runs no kubelet on this node, if it does not.
fn unmanaged(k: &crate::kubelet::settings::KubeletSettings) -> Option<&'static str> {
    match (k.enabled, &k.image) {
        (false, _) => Some("kubelet.enabled = false: the kubelet is left to another unit"),
        (true, None) => Some("kubelet.image is not set: the kubelet is not managed"),
        (true, Some(_)) => None,
    }
}

fn wanted_with(ctx: &Context<'_>, once_ready: bool) -> Result<Wanted, KubeletError> {
    let k = &ctx.settings.kubelet;
    if let Some(why) = unmanaged(k) {
        return Ok(Wanted {
            desired: None,
            config_write: Vec::new(),
            notes: vec![why.to_owned()],
        });
    }
    let mut notes = Vec::new();
    let (text, render, config_write) = config_text(ctx, &mut notes)?;
    let mut facts = host_facts(ctx)?;
    facts.registration_in_config = render;
    if once_ready {
        (facts.kubeconfig_ready, facts.runtime_ready, facts.dns_ready) = (None, None, None);
    }
    let Healthz {
        endpoint: healthz,
        hashed,
        config_dir,
        dropin_write,
    } = healthz_route(ctx, &text, render, &mut notes)?;
    facts.config_dir = config_dir;
    if facts.config_dir.is_none() {
        note_unread_dropins(ctx, render, &mut notes);
    }
    let digest = hex::encode(Sha256::digest(hashed.as_bytes()));
    let spec = spec::build(&ctx.settings.kubelet, &ctx.settings.registration, &facts, digest)?;
    let hash = spec.hash();
    let pull_from = pull_source::mirrored(&spec.images, &ctx.settings.containerd.mirrors);
    Ok(Wanted {
        desired: Some(Desired {
            healthz,
            spec,
            hash,
            pull_from,
        }),
        config_write: config_write.into_iter().chain(dropin_write).collect(),
        notes,
    })
}

/// Where the kubelet's /healthz comes from and what it adds to the spec's hash: on in its own file,
/// turned on by nodeward's drop-in (when the kubelet reads `--config-dir`), or off (only exits are
/// supervised, said in the notes).
struct Healthz {
    endpoint: Option<(String, u16)>,
    /// The configuration text the spec's hash covers: the file, and the drop-ins merged over it.
    hashed: String,
    /// `--config-dir`, when nodeward's drop-in is in it.
    config_dir: Option<String>,
    dropin_write: Option<Change>,
}

fn healthz_route(
    ctx: &Context<'_>,
    text: &str,
    render: bool,
    notes: &mut Vec<String>,
) -> Result<Healthz, KubeletError> {
    let k = &ctx.settings.kubelet;
    let mut hashed = text.to_owned();
    let mut healthz = config_file::healthz_endpoint(text);
    let mut config_dir = None;
    let (version, source) = k.effective_version();
    let dropins = rules::has_config_dir(version);
    let dropin_write = match (healthz.is_some(), k.healthz, render) {
        (true, _, _) => None,
        // The kubelet's own file turns /healthz off: turn it on in a drop-in, the file untouched.
        (false, true, false) if dropins => {
            let (change, dropin) = healthz_dropin(ctx, notes)?;
            config_dir = Some(k.config_dir.to_string());
            // The kubelet merges every drop-in in the directory in name order over the file: a
            // later one of an administrator's may turn /healthz off again, and then nodeward must
            // not probe it (a real kubelet would be restarted forever).
            let merged = merged_dropins(ctx, &dropin).checked(&k.config_dir)?;
            healthz = config_file::healthz_endpoint(&format!("{text}\n{}", merged.text));
            hashed.push_str(&merged.text);
            if healthz.is_none() {
                let later = merged.off_by.unwrap_or_default();
                tracing::warn!(dir = %k.config_dir, file = %crate::text::printable(&later),
                    "a later kubelet drop-in turns /healthz off again: only the kubelet's exits are supervised");
                notes.push(format!(
                    "{}/{later} turns /healthz off after nodeward's drop-in: only the kubelet's exits are supervised",
                    k.config_dir
                ));
            }
            change
        }
        (false, _, _) => {
            let why = if k.healthz {
                format!("kubelet {version} ({source:?}) has no --config-dir to turn it on")
            } else {
                "kubelet.healthz = false".to_owned()
            };
            tracing::warn!(file = %k.config_file, %why, "the kubelet serves no /healthz: only its exits are supervised");
            notes.push(format!(
                "the kubelet serves no /healthz ({}, {why}): only its exits are supervised",
                k.config_file
            ));
            None
        }
    };
    Ok(Healthz {
        endpoint: healthz,
        hashed,
        config_dir,
        dropin_write,
    })
}

/// The KubeletConfiguration the kubelet reads: nodeward's (rendered, and the change writing it)
/// or the one someone else provides. Returns the text and whether it is nodeward's.
fn config_text(
    ctx: &Context<'_>,
    notes: &mut Vec<String>,
) -> Result<(String, bool, Option<Change>), KubeletError> {
    let k = &ctx.settings.kubelet;
    let path = ctx
        .root
        .resolve_parent(&k.config_file)
        .map_err(|source| KubeletError::Resolve {
            file: k.config_file.clone(),
            source,
        })?;
    let existing = match fs::observe(&path)? {
        Some(o) if o.kind == FileKind::File => Some(
            crate::host::read::read_text(ctx.root, &k.config_file, crate::host::read::Kind::Config)
                .map_err(HostError::from)?,
        ),
        Some(o) => {
            return Err(HostError::NotAFile {
                path,
                found: o.kind.name(),
            }
            .into());
        }
        None => None,
    };
    let render = match (k.render_config, &existing) {
        (RenderConfig::Never, _) => false,
        (RenderConfig::Always, _) | (RenderConfig::Auto, None) => true,
        (RenderConfig::Auto, Some(text)) => config_file::is_ours(text),
    };
    let (text, change) = if render {
        let text = config_file::render(k, ctx.settings.registration.file_taints(), config_facts(ctx));
        let change = files::plan(
            ctx,
            files::Wanted {
                path: &k.config_file,
                contents: text.clone(),
                mode: Mode::new(0o644),
            },
        )?;
        (text, change)
    } else {
        match existing {
            Some(text) => {
                notes.push(format!(
                    "{} is provided (not written by nodeward): used as is",
                    k.config_file
                ));
                (text, None)
            }
            None => return Err(KubeletError::NoConfigFile(k.config_file.clone())),
        }
    };
    Ok((text, render, change))
}

/// nodeward's healthz drop-in in `kubelet.config_dir` (the change, if any, and its text).
fn healthz_dropin(
    ctx: &Context<'_>,
    notes: &mut Vec<String>,
) -> Result<(Option<Change>, String), KubeletError> {
    let k = &ctx.settings.kubelet;
    let dropin = config_file::render_healthz_dropin();
    let path = k
        .config_dir
        .join(config_file::HEALTHZ_DROPIN)
        .map_err(HostError::invalid(
            k.config_dir.as_str(),
            "name the healthz drop-in",
        ))?;
    let change = files::plan(
        ctx,
        files::Wanted {
            path: &path,
            contents: dropin.clone(),
            mode: Mode::new(0o644),
        },
    )?;
    notes.push(format!(
        "{}: /healthz is off there; {path} turns it on (kubelet --config-dir, 1.30 and later)",
        k.config_file
    ));
    Ok((change, dropin))
}

/// The drop-ins of `kubelet.config_dir` as the kubelet merges them: every `.conf` file, in the
/// lexical order of its path (into subdirectories, as `filepath.WalkDir`), with nodeward's own as
/// it will be written.
struct MergedDropins {
    /// Their texts in merge order, one after the other.
    text: String,
    /// The last drop-in that sets `healthzPort: 0`, if any.
    off_by: Option<String>,
    /// The first drop-in the kubelet would refuse to start with, and why.
    refused: Option<(String, String)>,
}

impl MergedDropins {
    /// Refuses the merge when one drop-in would keep the kubelet from starting, naming it.
    fn checked(self, dir: &AbsPath) -> Result<MergedDropins, KubeletError> {
        match self.refused {
            Some((file, reason)) => Err(KubeletError::DropIn {
                file: format!("{dir}/{}", crate::text::printable(&file)),
                reason,
            }),
            None => Ok(self),
        }
    }
}

/// Without `--config-dir` the kubelet reads no drop-in: an operator's is said to be unread rather
/// than silently ignored (or checked as if it counted).
fn note_unread_dropins(ctx: &Context<'_>, render: bool, notes: &mut Vec<String>) {
    let dir = &ctx.settings.kubelet.config_dir;
    let unread = operator_dropins(ctx);
    if unread.is_empty() {
        return;
    }
    tracing::warn!(dir = %dir, files = ?unread,
        "KubeletConfiguration drop-ins the kubelet does not read (no --config-dir)");
    notes.push(format!(
        "{dir}: {} not read by the kubelet: nodeward passes no --config-dir here ({}); put the settings in kubelet.* or the configuration file",
        unread.join(", "),
        if render { "it renders the KubeletConfiguration itself" } else { "the kubelet's own file serves /healthz" }
    ));
}

/// The `.conf` files an operator put in `kubelet.config_dir` (not nodeward's own), by name;
/// a bounded look.
fn operator_dropins(ctx: &Context<'_>) -> Vec<String> {
    files::names_in(ctx, &ctx.settings.kubelet.config_dir, 64)
        .into_iter()
        .filter(|n| n.ends_with(".conf") && n != config_file::HEALTHZ_DROPIN)
        .map(|n| crate::text::printable(&n).into_owned())
        .collect()
}

fn merged_dropins(ctx: &Context<'_>, ours: &str) -> MergedDropins {
    const MAX_DROPINS: usize = 64;
    let k = &ctx.settings.kubelet;
    let mut files: Vec<(String, String)> = vec![(config_file::HEALTHZ_DROPIN.to_owned(), ours.to_owned())];
    if let Ok(dir) = ctx.root.resolve(&k.config_dir) {
        let mut stack = vec![(dir.clone(), 0u8)];
        while let Some((at, depth)) = stack.pop() {
            for entry in std::fs::read_dir(&at)
                .into_iter()
                .flatten()
                .flatten()
                .take(MAX_DROPINS)
            {
                let path = entry.path();
                let rel = path.strip_prefix(&dir).unwrap_or(&path).display().to_string();
                match entry.file_type() {
                    Ok(t) if t.is_dir() && depth < 4 => stack.push((path, depth + 1)),
                    _ if rel == config_file::HEALTHZ_DROPIN || !rel.ends_with(".conf") => {}
                    _ => {
                        let text = crate::host::read::read_below_text(
                            ctx.root,
                            &path,
                            crate::host::read::Kind::Config,
                        )
                        .unwrap_or_default();
                        files.push((rel, text));
                    }
                }
            }
        }
    }
    files.sort();
    let mut out = MergedDropins {
        text: String::new(),
        off_by: None,
        refused: None,
    };
    for (name, text) in files {
        if let Err(why) = crate::kubelet::config_check::check(&text) {
            out.refused.get_or_insert((name.clone(), why.to_string()));
        }
        if config_file::healthz_endpoint(&text).is_none() {
            out.off_by = Some(name);
        }
        out.text.push_str(&text);
        out.text.push('\n');
    }
    out
}

/// The cgroup driver the kubelet must use: the one containerd is configured with. nodeward's own
/// containerd file says systemd; a file someone else provides says what it says; with none at all,
/// systemd (Typhoon's choice, right on cgroup v1 and v2 wherever systemd is PID 1).
pub(crate) fn systemd_cgroup(ctx: &Context<'_>) -> bool {
    let c = &ctx.settings.containerd;
    if c.manage {
        return true;
    }
    let text = match crate::host::read::read_text(ctx.root, &c.config_file, crate::host::read::Kind::Config) {
        Ok(t) => Some(t),
        Err(e) => {
            if !e.is_missing() {
                tracing::warn!(file = %c.config_file, error = %e,
                    "containerd's configuration cannot be read; assuming the systemd cgroup driver");
            }
            None
        }
    };
    match text.as_deref().map(containerd::systemd_cgroup) {
        Some(Some(systemd)) => systemd,
        Some(None) => {
            tracing::warn!(file = %c.config_file, "containerd's configuration is not TOML; assuming the systemd cgroup driver");
            true
        }
        None => true,
    }
}

fn config_facts(ctx: &Context<'_>) -> ConfigFacts {
    let exists = |p: &str| {
        p.parse()
            .ok()
            .and_then(|p| ctx.root.resolve(&p).ok())
            .is_some_and(|p| p.exists())
    };
    ConfigFacts {
        systemd_cgroup: systemd_cgroup(ctx),
        resolved: exists("/run/systemd/resolve/resolv.conf") || exists("/usr/lib/systemd/systemd-resolved"),
        user_namespaced: ctx
            .container
            .as_ref()
            .is_some_and(|c| c.user_namespace == UserNamespace::Mapped),
    }
}

/// afterburn's metadata file: the configured one, else the first of the defaults that exists. Only a
/// missing file means "not there yet"; one that cannot be read (a FIFO, a directory, not text, too
/// large) is an error naming it.
#[allow(clippy::type_complexity)]
fn read_metadata(
    ctx: &Context<'_>,
) -> (
    Option<(String, std::collections::BTreeMap<String, String>)>,
    Option<String>,
) {
    for f in ctx.settings.registration.metadata_files() {
        let Ok(path) = f.parse::<AbsPath>() else {
            continue;
        };
        match crate::host::read::read_text(ctx.root, &path, crate::host::read::Kind::Metadata) {
            Ok(text) => return (Some((f, spec::parse_metadata(&text))), None),
            Err(e) if e.is_missing() => continue,
            Err(e) => return (None, Some(e.to_string())),
        }
    }
    (None, None)
}

fn host_facts(ctx: &Context<'_>) -> Result<HostFacts, HostError> {
    let hostname = if ctx.kernel_live {
        crate::host::read::read_path_text(
            &ctx.kernel_path("proc/sys/kernel/hostname"),
            crate::host::read::Kind::Kernel,
        )?
    } else {
        "/etc/hostname"
            .parse()
            .ok()
            .and_then(|p| crate::host::read::read_text(ctx.root, &p, crate::host::read::Kind::System).ok())
            .unwrap_or_default()
    };
    let k = &ctx.settings.kubelet;
    let (metadata, metadata_error) = read_metadata(ctx);
    // The running system waits for a nameserver; an image root only when it has the file.
    let resolv = "/etc/resolv.conf"
        .parse()
        .ok()
        .and_then(|p| crate::host::read::read_text(ctx.root, &p, crate::host::read::Kind::System).ok());
    let dns_ready = match (k.wait_for_dns, resolv) {
        (false, _) => None,
        (true, Some(text)) => Some(has_nameserver(&text)),
        (true, None) if ctx.root.is_live() => Some(false),
        (true, None) => None,
    };
    // Checked only when this run starts the container: an image root plans without them.
    let (kubeconfig_ready, runtime_ready) = if ctx.containers_live {
        let is = |p: &str, want: fn(&std::fs::FileType) -> bool| {
            ctx.root
                .resolve_str(p)
                .ok()
                .and_then(|p| std::fs::metadata(p).ok())
                .is_some_and(|m| want(&m.file_type()))
        };
        use std::os::unix::fs::FileTypeExt;
        (
            Some(
                is(spec::BOOTSTRAP_KUBECONFIG, std::fs::FileType::is_file)
                    || is(spec::KUBELET_KUBECONFIG, std::fs::FileType::is_file),
            ),
            spec::runtime_socket(&k.extra_args).map(|p| is(&p, std::fs::FileType::is_socket)),
        )
    } else {
        (None, None)
    };
    Ok(HostFacts {
        hostname,
        selinux: crate::host::selinux::kernel_enabled(ctx.root),
        metadata,
        metadata_error,
        dns_ready,
        kubeconfig_ready,
        runtime_ready,
        config_dir: None,
        registration_in_config: false,
    })
}

/// Whether resolv.conf text names a nameserver (Typhoon's wait-for-dns checks for any setting line).
pub(crate) fn has_nameserver(text: &str) -> bool {
    text.lines().map(str::trim_start).any(|l| {
        l.strip_prefix("nameserver")
            .is_some_and(|r| r.starts_with([' ', '\t']))
    })
}

/// The runtime to use, from the configuration and `PATH`.
pub fn runtime(ctx: &Context<'_>) -> Result<Runtime, KubeletError> {
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
    runtime_in(ctx, &path)
}

/// The engine the image under `--root` carries (its own `podman`, looked for in the image's
/// `/usr/local/bin`, `/usr/bin` and `/bin`), never the build host's: for showing the command that
/// will run on the node, not for running it. Its program is named as the node will find it.
pub fn runtime_of_image(ctx: &Context<'_>) -> Result<Runtime, KubeletError> {
    let dirs = ["/usr/local/bin", "/usr/bin", "/bin"];
    let inside: Vec<String> = dirs
        .iter()
        .map(|d| {
            ctx.root
                .dir()
                .join(d.trim_start_matches('/'))
                .display()
                .to_string()
        })
        .collect();
    let found = runtime_in(ctx, &inside.join(":"))?;
    let program = dirs
        .iter()
        .map(|d| std::path::Path::new(d).join(found.name()))
        .find(|p| ctx.root.dir().join(p.strip_prefix("/").unwrap_or(p)).exists())
        .unwrap_or_else(|| std::path::PathBuf::from(found.name()));
    // Its files as the node names them, not as they lie below the root on the build host.
    let (uuid_file, pid_file) = (
        ctx.settings.kubelet.rkt_uuid_file.to_path_buf(),
        crate::host::state::StateFile::KubeletPid.path().to_path_buf(),
    );
    Ok(Runtime::new(
        found.kind(),
        program,
        &uuid_file,
        &pid_file,
        ctx.root,
    ))
}

fn runtime_in(ctx: &Context<'_>, path: &str) -> Result<Runtime, KubeletError> {
    let k = &ctx.settings.kubelet;
    let uuid_file = ctx
        .root
        .resolve_parent(&k.rkt_uuid_file)
        .map_err(HostError::resolve(k.rkt_uuid_file.to_path_buf()))?;
    let pid_file = crate::host::state::StateFile::KubeletPid.resolve(ctx.root)?;
    Ok(Runtime::detect(k.runtime, path, &uuid_file, &pid_file, ctx.root)?)
}

pub(crate) fn plan(ctx: &Context<'_>) -> Result<StepPlan, KubeletError> {
    let mut out = StepPlan::new(Step::Kubelet);
    let wanted = wanted(ctx)?;
    out.notes = wanted.notes;
    out.changes.extend(wanted.config_write);
    let hand_off = |desired: Option<Desired>, runtime: Option<Runtime>| {
        if ctx.kubelet_supervised {
            let _ = ctx.kubelet.set(Handoff { desired, runtime });
        }
    };
    let Some(desired) = wanted.desired else {
        hand_off(None, None);
        return Ok(out);
    };
    if !ctx.containers_live {
        out.notes
            .push("kubelet container not checked (--root without --containers live)".into());
        hand_off(None, None);
        return Ok(out);
    }
    let runtime = runtime(ctx)?;
    if ctx.kubelet_supervised {
        if let Some(archive) = importing_its_image(ctx, &runtime) {
            // Nothing handed off: a running kubelet keeps running, none is started meanwhile.
            return Err(KubeletError::ImageImporting { archive });
        }
        // The daemon's supervisor starts, adopts or replaces it, with what this pass resolved.
        hand_off(Some(desired), Some(runtime));
        return Ok(out);
    }
    plan_container(ctx, out, desired, runtime)
}

/// The archive whose import beside the passes may bring the kubelet's image to its engine, when
/// the engine does not hold that image already (a node whose image is in waits for nothing: other
/// archives queued, not yet checked, never hold its kubelet).
fn importing_its_image(ctx: &Context<'_>, runtime: &Runtime) -> Option<String> {
    let imports = ctx.imports?;
    runtime.load_command()?;
    let image = ctx.settings.kubelet.image.as_ref()?;
    let normalized = crate::images::archive::normalize(image.repository());
    let archive = imports.brings(runtime.name(), crate::images::decide::repository(&normalized))?;
    // Asked only while an import may bring it: one engine call, not one per pass.
    let held = crate::kubelet::block_on(runtime.image_id(&image.to_string())).is_some();
    (!held).then_some(archive)
}

/// A one-shot command's plan for the container: start, adopt or replace it as [`decide`] says
/// (a spec held back by the daemon's rollback is left alone).
fn plan_container(
    ctx: &Context<'_>,
    mut out: StepPlan,
    desired: Desired,
    runtime: Runtime,
) -> Result<StepPlan, KubeletError> {
    let existing = crate::kubelet::block_on(runtime.inspect(&desired.spec.name))?;
    let rollout = crate::kubelet::rollout::Rollout::load(ctx.root);
    if let Some(rb) = rollout.holding_back(&desired.hash) {
        // The daemon rolled this spec back: it runs the last healthy one until the configuration
        // changes or an operator retries; a one-shot apply must not undo that.
        if existing.as_ref().and_then(|c| c.spec_hash.as_deref()) == Some(rb.to.as_str()) {
            out.notes.push(format!(
                "kubelet spec {} held back by a rollback ({}); the last healthy spec {} runs (nodeward kubelet retry)",
                rb.bad, rb.reason, rb.to
            ));
            return Ok(out);
        }
    }
    out.command = Some(engine_argv(&runtime, &desired, existing.is_some()));
    let Some(op) = decide(existing.as_ref(), &desired) else {
        out.notes.push(format!(
            "kubelet {} runs with the wanted spec {} (adopted as is)",
            existing.as_ref().map_or("", |c| short(&c.id)),
            desired.hash
        ));
        return Ok(out);
    };
    let diff = match (&op, &existing) {
        (KubeletOp::Replace, Some(c)) => match c
            .spec_hash
            .as_deref()
            .and_then(|h| spec_record::recorded_spec(ctx.root, h))
        {
            Some(old) => desired.spec.diff(&old),
            None => vec![format!(
                "spec hash {} → {} (the old spec was not recorded)",
                c.spec_hash.as_deref().unwrap_or("(none)"),
                desired.hash
            )],
        },
        _ => Vec::new(),
    };
    let action = Action::Kubelet {
        op,
        runtime: runtime.name(),
        image: desired.spec.images.first().cloned().unwrap_or_default(),
        hash: desired.hash.clone(),
        diff,
        existing: existing.as_ref().map(|c| c.id.clone()),
    };
    let run = OneShot {
        runtime,
        grace: ctx.settings.kubelet.tuning.stop_grace,
        root: ctx.root.clone(),
        op: Some(op),
        seen: Seen::of(existing.as_ref()),
        desired,
    };
    out.changes.push(Change::new(
        run.desired.spec.name.clone(),
        ctx.root.dir(),
        action,
        RunKubelet(run),
    ));
    Ok(out)
}

/// Starts or replaces the kubelet container as planned (once; the daemon supervises instead).
#[derive(Debug)]
struct RunKubelet(OneShot);

impl Effect for RunKubelet {
    fn apply(&self, _: &Change) -> Result<(), EffectError> {
        self.0.apply().map_err(|e| Box::new(RunFailed(e)) as EffectError)
    }
}

/// The engine's whole command line for the wanted kubelet (with its first image; a mirror is used
/// only when that one cannot be pulled).
pub fn engine_argv(runtime: &Runtime, desired: &Desired, replace: bool) -> Vec<String> {
    let image = desired.spec.images.first().map_or("", String::as_str);
    std::iter::once(runtime.program.display().to_string())
        .chain(runtime.run_args(&desired.spec, image, &desired.hash, replace))
        .collect()
}

fn short(id: &str) -> &str {
    crate::kubelet::short_id(id)
}
