//! The `modules` step: load the configured kernel modules (dependencies first) and list them in
//! modules-load.d so the next boot loads them before nodeward starts.
//!
//! On the running kernel, modules not yet loaded become load changes. With `--root` (an image),
//! nothing is loaded, but every module is still resolved against the root's own module tree, so a
//! module the image's kernel lacks is an error at build time rather than at first boot.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;

use crate::config::modules::ModuleName;
use crate::host::HostError;
use crate::host::container::{Container, Kind};
use crate::host::kmod::index::{Compression, Load, ModIndex, Resolution, Why};
use crate::host::kmod::load::{self, Method};
use crate::host::state::StateFile;
use crate::plan::Step;
use crate::plan::{Action, Change, Effect, EffectError, FailureKind, StepPlan};
use crate::root::HostRoot;
use crate::steps::context::Context;
use crate::steps::files;

pub(crate) const DROPIN: &str = "/etc/modules-load.d/nodeward.conf";

/// The modules-load.d file: one module per line.
pub(crate) fn render_dropin(modules: &[crate::config::modules::ModuleName]) -> String {
    let mut out = String::from(
        "# Written by nodeward; changes are overwritten. Loaded at boot by systemd-modules-load.\n",
    );
    for m in modules {
        out.push_str(m.as_str());
        out.push('\n');
    }
    out
}

pub(crate) fn plan(ctx: &Context<'_>) -> Result<StepPlan, HostError> {
    let mut out = StepPlan::new(Step::Modules);
    match &ctx.container {
        Some(container) => plan_in_container(ctx, container, &mut out)?,
        None => plan_on_host(ctx, &mut out)?,
    }
    Ok(out)
}

/// On the machine that owns its kernel: the modules-load.d file, and the loads still missing. Each
/// configured module stands alone: one this kernel lacks is a failed item, left out of the file
/// (systemd-modules-load would fail on it at every boot), and every other module is still loaded.
fn plan_on_host(ctx: &Context<'_>, out: &mut StepPlan) -> Result<(), HostError> {
    let wanted = &ctx.settings.modules.load;
    let dropin = |out: &mut StepPlan, listed: &[ModuleName]| -> Result<(), HostError> {
        let write = files::plan_dropin(ctx, DROPIN, render_dropin(listed))?;
        out.changes.splice(0..0, write);
        Ok(())
    };
    let Some((version, tree)) = module_tree(ctx, out)? else {
        return dropin(out, wanted);
    };
    let loaded = if ctx.kernel_live {
        load::loaded_modules(&ctx.kernel_path("proc")).map_err(HostError::io("/proc/modules", "read"))?
    } else {
        BTreeSet::new()
    };
    if ctx.kernel_live && all_present(ctx, &loaded) {
        return dropin(out, wanted);
    }
    let index = ModIndex::load(&tree, ctx.root.dir()).map_err(|e| HostError::Io {
        path: tree.clone(),
        op: "read module index",
        source: e,
    })?;
    let decompresses = if ctx.kernel_live {
        load::kernel_decompression(&ctx.kernel_path("sys"))
    } else {
        None
    };
    let mut planned: BTreeSet<String> = BTreeSet::new();
    let mut resolved: Vec<ModuleName> = Vec::new();
    // Load wave per module: one more than its deepest dependency loaded in this plan. Modules of
    // one wave are independent and load concurrently.
    let mut waves: HashMap<String, u32> = HashMap::new();
    let mut loads = Vec::new();
    for module in wanted {
        let is_loaded = |n: &str| loaded.contains(n) || planned.contains(n);
        let files = match index.resolve(module.as_str(), &version, &is_loaded) {
            Ok(Resolution::Builtin) => Vec::new(),
            Ok(Resolution::Load(files)) => files,
            Err(e) => {
                // Not in this kernel's module tree: another kernel or another configuration fixes it.
                out.fail_item(module.as_str(), FailureKind::Permanent, e);
                continue;
            }
        };
        resolved.push(module.clone());
        if !ctx.kernel_live {
            if !files.is_empty() {
                let chain: Vec<String> = files.iter().map(chain_link).collect();
                out.notes
                    .push(format!("{module}: loaded at boot ({})", chain.join(" → ")));
                planned.extend(files.into_iter().map(|l| l.name));
            }
            continue;
        }
        let mut add = |change: Change| loads.push(change);
        let plan = LoadPlan {
            ctx,
            index: &index,
            tree: &tree,
            decompresses: decompresses.as_deref(),
        };
        plan.loads_for(
            module.as_str(),
            files,
            &mut waves,
            &mut planned,
            &mut out.notes,
            &mut add,
        );
    }
    loads.sort_by_key(|c| c.batch);
    out.changes.extend(loads);
    dropin(out, &resolved)
}

/// What every load change of one plan shares.
struct LoadPlan<'a> {
    ctx: &'a Context<'a>,
    index: &'a ModIndex,
    tree: &'a std::path::Path,
    decompresses: Option<&'a str>,
}

impl LoadPlan<'_> {
    /// The load changes for one configured module's resolution, each waiting for what it follows
    /// that this plan loads (it is not attempted when one of them fails).
    fn loads_for(
        &self,
        module: &str,
        files: Vec<Load>,
        waves: &mut HashMap<String, u32>,
        planned: &mut BTreeSet<String>,
        notes: &mut Vec<String>,
        add: &mut dyn FnMut(Change),
    ) {
        for l in files {
            let name = l.name.clone();
            match load_change(
                self.ctx,
                self.index,
                self.tree,
                module,
                l,
                self.decompresses,
                waves,
            ) {
                Ok(change) => {
                    let needs: Vec<String> = change
                        .requires
                        .iter()
                        .filter(|n| planned.contains(*n))
                        .cloned()
                        .collect();
                    add(change.after(needs));
                    planned.insert(name);
                }
                Err(note) => notes.push(note),
            }
        }
    }
}

/// Inside a container the kernel is the host's: nothing can be loaded from inside, and a
/// modules-load.d file here would mean nothing. Every wanted module must already be in the host's
/// kernel (loaded or built in); the missing ones are one error with the host-side fix.
fn plan_in_container(ctx: &Context<'_>, container: &Container, out: &mut StepPlan) -> Result<(), HostError> {
    let loaded =
        load::loaded_modules(&ctx.kernel_path("proc")).map_err(HostError::io("/proc/modules", "read"))?;
    let (present, missing): (Vec<&ModuleName>, Vec<&ModuleName>) = ctx
        .settings
        .modules
        .load
        .iter()
        .partition(|m| is_present(ctx, &loaded, m));
    if !present.is_empty() {
        out.notes.push(format!(
            "provided by the host's kernel: {}",
            present.iter().map(|m| m.as_str()).collect::<Vec<_>>().join(", ")
        ));
    }
    if !missing.is_empty() {
        let hostname =
            crate::host::procsys::read(&ctx.kernel_path("proc/sys/kernel/hostname")).unwrap_or_default();
        // The host's kernel lacks them: only the host can load them.
        out.fail(
            FailureKind::Permanent,
            missing_on_host(
                &container.kind,
                hostname.trim(),
                &missing,
                &ctx.settings.modules.load,
            ),
        );
    }
    Ok(())
}

/// The error for modules a container's host lacks: which, why nothing is loaded here, and what to
/// do on the host. For LXD and Incus, `linux.kernel_modules` (the whole list: the host loads it at
/// every container start); for LXC and the rest, the host's own modules-load.d.
pub(crate) fn missing_on_host(
    kind: &Kind,
    name: &str,
    missing: &[&ModuleName],
    wanted: &[ModuleName],
) -> String {
    let join = |ms: &mut dyn Iterator<Item = &str>, sep: &str| ms.collect::<Vec<_>>().join(sep);
    let missing_list = join(&mut missing.iter().map(|m| m.as_str()), ", ");
    let name = if name.is_empty() { "CONTAINER" } else { name };
    let fix = match kind {
        Kind::Lxd | Kind::Incus => format!(
            "on the host: `{} config set {name} linux.kernel_modules {}` (then restart the container)",
            if *kind == Kind::Lxd { "lxc" } else { "incus" },
            join(&mut wanted.iter().map(|m| m.as_str()), ",")
        ),
        _ => format!(
            "on the host: `modprobe -a {}` and list them in the host's /etc/modules-load.d/ so they load at every boot",
            join(&mut missing.iter().map(|m| m.as_str()), " ")
        ),
    };
    format!(
        "not loaded in the host's kernel: {missing_list}; nothing can be loaded from inside this {} container: {fix}",
        kind.name()
    )
}

fn is_present(ctx: &Context<'_>, loaded: &BTreeSet<String>, m: &ModuleName) -> bool {
    let name = m.as_str().replace('-', "_");
    loaded.contains(&name) || ctx.kernel_path("sys/module").join(&name).exists()
}

/// The converged case, every drift check: each configured module already loaded or built in (a
/// `/sys/module` entry) counts as done, and the module index (megabytes of text) is not read.
fn all_present(ctx: &Context<'_>, loaded: &BTreeSet<String>) -> bool {
    ctx.settings
        .modules
        .load
        .iter()
        .all(|m| is_present(ctx, loaded, m))
}

/// The load of one resolved module, in the wave after everything it must follow; or the note that
/// says why a soft dependency is skipped (it could not be loaded earlier since boot).
fn load_change(
    ctx: &Context<'_>,
    index: &ModIndex,
    tree: &std::path::Path,
    requested: &str,
    l: Load,
    decompresses: Option<&str>,
    waves: &mut HashMap<String, u32>,
) -> Result<Change, String> {
    let marker = l
        .why
        .is_soft()
        .then(|| StateFile::SoftdepUnavailable(l.name.clone()));
    if let Some(reason) = marker.as_ref().and_then(|m| m.read(ctx.root).ok()) {
        let reason = String::from_utf8_lossy(&reason);
        return Err(format!(
            "{}: soft dependency not loadable on this machine since boot ({}): skipped",
            l.name,
            reason.trim()
        ));
    }
    // One wave after everything it must follow (dependencies, pre-softdeps, the module it is a
    // post-softdep of) that this plan loads.
    let wave = l
        .after
        .iter()
        .filter_map(|d| waves.get(d))
        .map(|w| w + 1)
        .max()
        .unwrap_or(0);
    waves.insert(l.name.clone(), wave);
    let method = load::method_for(Compression::of(&l.file), decompresses);
    let needed_by = match &l.why {
        Why::Requested => None,
        Why::Dependency => Some(requested.to_owned()),
        Why::SoftPre { of, .. } => Some(format!("{of}, soft pre-dependency")),
        Why::SoftPost { of, .. } => Some(format!("{of}, soft post-dependency")),
    };
    let params = index.options_for(&l.name).to_owned();
    let action = Action::LoadModule {
        file: l.file.clone(),
        method,
        params: params.clone(),
        needed_by,
    };
    let effect = LoadModule {
        params,
        method,
        unavailable_marker: marker.map(|m| (ctx.root.clone(), m)),
    };
    let after = l.after.clone();
    Ok(Change::new(l.name, tree.join(&l.file), action, effect)
        .in_batch(wave)
        .after(after))
}

/// Loads the module file a change targets, natively.
#[derive(Debug)]
struct LoadModule {
    params: String,
    method: Method,
    /// Soft dependencies only: where a failure to load is recorded (and the load skipped until the
    /// next boot) instead of failing the step.
    unavailable_marker: Option<(HostRoot, StateFile)>,
}

/// A module the kernel would not load.
#[derive(Debug, thiserror::Error)]
#[error("module {module}: {source}")]
pub(crate) struct LoadFailed {
    pub(crate) module: String,
    #[source]
    pub(crate) source: load::LoadError,
}

impl Effect for LoadModule {
    fn apply(&self, change: &Change) -> Result<(), EffectError> {
        match load::load(&change.subject, &change.target, &self.params, self.method) {
            Ok(()) => Ok(()),
            // A soft dependency is a preference (crc32c_intel for libcrc32c), not a need: one this
            // machine cannot load (no SSE4.2: ENODEV) is noted until the next boot and skipped,
            // rather than failing the step at every converge.
            Err(e) if self.unavailable_marker.is_some() => {
                tracing::warn!(module = %change.subject, error = %e, "soft dependency not loaded; continuing without it");
                if let Some((root, marker)) = &self.unavailable_marker {
                    let _ = marker.write(root, format!("{e}\n").as_bytes());
                }
                Ok(())
            }
            Err(source) => Err(Box::new(LoadFailed {
                module: change.subject.clone(),
                source,
            })),
        }
    }
}

/// The kernel version and module tree to resolve against, or `None` (with a note) when there is
/// none to look at.
fn module_tree(ctx: &Context<'_>, out: &mut StepPlan) -> Result<Option<(String, PathBuf)>, HostError> {
    if let Some(v) = &ctx.settings.modules.kernel_version {
        let base = if ctx.kernel_live {
            ctx.kernel_path("lib/modules")
        } else {
            ctx.root.dir().join("lib/modules")
        };
        return Ok(Some((v.clone(), base.join(v))));
    }
    if ctx.kernel_live {
        let release = crate::host::procsys::read(&ctx.kernel_path("proc/sys/kernel/osrelease"))
            .map_err(HostError::io("/proc/sys/kernel/osrelease", "read"))?;
        let release = release.trim().to_owned();
        return Ok(Some((
            release.clone(),
            ctx.kernel_path("lib/modules").join(release),
        )));
    }
    let base = ctx.root.dir().join("lib/modules");
    let versions: Vec<String> = match std::fs::read_dir(&base) {
        Ok(entries) => entries
            .flatten()
            .filter(|e| e.path().join("modules.dep").exists())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    };
    match versions.as_slice() {
        [one] => Ok(Some((one.clone(), base.join(one)))),
        [] => {
            out.notes
                .push("no kernel module tree in the root: modules not checked, not loaded (--root)".into());
            Ok(None)
        }
        several => {
            out.notes.push(format!(
                "several kernels in the root ({}): set modules.kernel_version to check modules",
                several.join(", ")
            ));
            Ok(None)
        }
    }
}

/// One module in a plan note's chain; soft dependencies are marked as such.
fn chain_link(l: &Load) -> String {
    match &l.why {
        Why::SoftPre { .. } => format!("{} (soft, pre)", l.name),
        Why::SoftPost { .. } => format!("{} (soft, post)", l.name),
        _ => l.name.clone(),
    }
}

/// One requested name, resolved for `nodeward modules explain`: every module it loads, in order,
/// with the line each step came from.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Explained {
    pub requested: String,
    pub kernel: String,
    /// Built into the kernel: nothing to load.
    pub builtin: bool,
    pub loads: Vec<ExplainedLoad>,
    /// Soft dependencies skipped (missing, built in, blacklisted), as modprobe skips them.
    pub skipped: Vec<String>,
    /// Weak dependencies (never loaded; an initramfs builder's hint).
    pub weak: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ExplainedLoad {
    pub name: String,
    pub file: String,
    pub soft: bool,
    /// Why it is loaded and where that was said.
    pub why: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub options: String,
}

/// Resolves each name against the module tree the `modules` step would use.
pub fn explain(ctx: &Context<'_>, names: &[String]) -> Result<Vec<Explained>, HostError> {
    let mut scratch = StepPlan::new(Step::Modules);
    let Some((version, tree)) = module_tree(ctx, &mut scratch)? else {
        return Err(HostError::Io {
            path: PathBuf::from("/lib/modules"),
            op: "find a module tree",
            source: std::io::Error::other(scratch.notes.join("; ")),
        });
    };
    let index = ModIndex::load(&tree, ctx.root.dir()).map_err(|e| HostError::Io {
        path: tree.clone(),
        op: "read module index",
        source: e,
    })?;
    let tree_name = ctx.root.display(&tree);
    Ok(names
        .iter()
        .map(|name| {
            let mut out = Explained {
                requested: name.clone(),
                kernel: version.clone(),
                builtin: false,
                loads: Vec::new(),
                skipped: Vec::new(),
                weak: Vec::new(),
                error: None,
            };
            match index.resolve_explained(name, &version) {
                Ok((Resolution::Builtin, _)) => out.builtin = true,
                Ok((Resolution::Load(loads), skipped)) => {
                    out.skipped = skipped;
                    for l in &loads {
                        if let Some((deps, origin)) = index.weakdeps_of(&l.name) {
                            out.weak
                                .push(format!("{}: weakdep {} ({origin})", l.name, deps.join(" ")));
                        }
                    }
                    out.loads = loads
                        .iter()
                        .map(|l| explain_load(&index, &tree_name, l))
                        .collect();
                }
                Err(e) => out.error = Some(e.to_string()),
            }
            out
        })
        .collect())
}

fn explain_load(index: &ModIndex, tree: &str, l: &Load) -> ExplainedLoad {
    let dep_line = || {
        index
            .dep_line(&l.name)
            .map(|n| format!("{tree}/modules.dep:{n}"))
            .unwrap_or_default()
    };
    // Which softdep name of `of` stands for this module, and where that alias is.
    let via = |of: &str| {
        index
            .softdep_names(of)
            .into_iter()
            .find_map(|dep| {
                index
                    .lookup(&dep)
                    .into_iter()
                    .find(|(m, _)| *m == l.name)
                    .map(|(_, how)| format!("{dep} → {} ({how})", l.name))
            })
            .unwrap_or_default()
    };
    let why = match &l.why {
        Why::Requested => format!("requested ({})", dep_line()),
        Why::Dependency => format!("dependency ({})", dep_line()),
        Why::SoftPre { of, origin } => {
            format!("soft pre-dependency of {of} (softdep at {origin}; {})", via(of))
        }
        Why::SoftPost { of, origin } => {
            format!("soft post-dependency of {of} (softdep at {origin}; {})", via(of))
        }
    };
    ExplainedLoad {
        name: l.name.clone(),
        file: l.file.clone(),
        soft: l.why.is_soft(),
        why,
        options: index.options_for(&l.name).to_owned(),
    }
}

/// The modules shortcut on fixture trees: when every module is loaded, the index is not read.
#[cfg(test)]
mod kernel_tree {
    use super::*;
    use crate::steps::context::fixture::Fixture;

    fn fixture(modules: &[&str], proc_modules: &str) -> Fixture {
        let mut f = Fixture::new();
        f.settings.modules.load = modules.iter().map(|m| m.parse().expect("module")).collect();
        f.kernel_file("proc/sys/kernel/osrelease", "6.1.0-test", 0o444);
        f.kernel_file("proc/modules", proc_modules, 0o444);
        f
    }

    #[test]
    fn all_loaded_or_built_in_plans_nothing_and_reads_no_index() {
        // No lib/modules tree at all: reading the index would fail.
        let f = fixture(&["br_netfilter", "overlay"], "br_netfilter 32768 0 - Live 0x0");
        std::fs::create_dir_all(f.kernel.path().join("sys/module/overlay")).expect("built in");
        let plan = plan(&f.context()).expect("plan");
        assert_eq!(plan.error, None);
        assert!(
            plan.changes.iter().all(|c| c.subject == DROPIN),
            "{:?}",
            plan.changes
        );
    }

    fn in_lxd(f: &Fixture) {
        for (rel, text) in [("run/systemd/container", "lxc\n"), ("dev/lxd/sock", "")] {
            let p = f.host.path().join(rel);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(p, text).expect("write");
        }
        f.kernel_file("proc/sys/kernel/hostname", "node1", 0o644);
    }

    #[test]
    fn in_a_container_present_modules_are_the_hosts_and_nothing_is_loaded_or_listed() {
        let f = fixture(&["br_netfilter", "overlay"], "br_netfilter 32768 0 - Live 0x0");
        std::fs::create_dir_all(f.kernel.path().join("sys/module/overlay")).expect("built in");
        in_lxd(&f);
        let plan = plan(&f.context()).expect("plan");
        assert_eq!(plan.error, None);
        assert!(plan.changes.is_empty(), "no drop-in, no load: {:?}", plan.changes);
        assert_eq!(
            plan.notes,
            vec!["provided by the host's kernel: br_netfilter, overlay".to_owned()]
        );
    }

    #[test]
    fn in_a_container_missing_modules_are_one_error_with_the_hosts_fix() {
        let f = fixture(&["br_netfilter", "overlay", "ip_vs"], "overlay 1 0 - Live 0x0");
        in_lxd(&f);
        let plan = plan(&f.context()).expect("plan");
        assert!(plan.changes.is_empty());
        assert_eq!(
            plan.error.as_deref(),
            Some(
                "not loaded in the host's kernel: br_netfilter, ip_vs; nothing can be loaded from inside this lxd container: \
                 on the host: `lxc config set node1 linux.kernel_modules br_netfilter,overlay,ip_vs` (then restart the container)"
            )
        );
        // Plain LXC (Proxmox): the host's own modules-load.d.
        std::fs::remove_file(f.host.path().join("dev/lxd/sock")).expect("rm");
        let plan = super::plan(&f.context()).expect("plan");
        let error = plan.error.expect("an error");
        assert!(
            error.ends_with(
                "nothing can be loaded from inside this lxc container: on the host: `modprobe -a br_netfilter ip_vs` \
                 and list them in the host's /etc/modules-load.d/ so they load at every boot"
            ),
            "{error}"
        );
    }

    /// `--root R --kernel live`: the running kernel's module tree is outside the root, and is
    /// read there (it failed with "modules.dep is not below the root").
    #[test]
    fn the_live_kernels_tree_outside_the_root_is_read() {
        let f = fixture(&["br_netfilter", "overlay"], "");
        f.kernel_file("proc/sys/kernel/osrelease", "6.1.0-fixture", 0o444);
        let tree = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/modroot/lib/modules/6.1.0-fixture"
        );
        std::fs::create_dir_all(f.kernel.path().join("lib/modules")).expect("mkdir");
        let copied = std::process::Command::new("cp")
            .arg("-a")
            .arg(tree)
            .arg(f.kernel.path().join("lib/modules/"))
            .status()
            .expect("cp");
        assert!(copied.success());
        let plan = plan(&f.context()).expect("plan");
        assert_eq!(plan.error, None);
        assert!(plan.failed.is_empty(), "{:?}", plan.failed);
        let loads: Vec<&str> = plan
            .changes
            .iter()
            .filter(|c| matches!(c.action, Action::LoadModule { .. }))
            .map(|c| c.subject.as_str())
            .collect();
        assert!(
            loads.contains(&"br_netfilter") && loads.contains(&"overlay"),
            "{loads:?}"
        );
    }

    #[test]
    fn one_missing_module_reads_the_tree_of_the_running_release() {
        let f = fixture(&["br_netfilter", "overlay"], "br_netfilter 32768 0 - Live 0x0");
        let err = plan(&f.context()).expect_err("no module tree to read");
        assert!(err.to_string().contains("lib/modules/6.1.0-test"), "{err}");
    }
}
